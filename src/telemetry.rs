//! Traces over OpenTelemetry's protocol (OTLP/HTTP, protobuf or JSON), off by default.
//!
//! When `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (a full URL) or `OTEL_EXPORTER_OTLP_ENDPOINT` (a
//! base, `/v1/traces` appended) is set, a [`tracing`] layer turns the code's trace spans into
//! OTLP spans and [`flush`] sends them at the end of each invocation, before Lambda freezes the
//! container. The spans follow OpenTelemetry's FaaS and messaging conventions:
//!
//! | span | kind | what |
//! |---|---|---|
//! | the function's name | SERVER | the invocation: `faas.invocation_id`, `faas.trigger` `pubsub`, `aws.lambda.invoked_arn`, `cloud.account.id`, `cloud.resource_id` (the function's ARN with the running version in place of an alias); a child of Lambda's own X-Ray segment (`_X_AMZN_TRACE_ID`) |
//! | `process <queue>` | CONSUMER | the batch: `messaging.system` `aws_sqs`, `messaging.operation.*` `process`, `messaging.destination.name`, `messaging.batch.message_count`, a link to each producer's trace |
//! | `process <queue>` | CONSUMER | each record: `messaging.message.id`, `process_orders.key` (the order id), `.outcome` and `.reason`; a link to its producer's trace (`AWSTraceHeader`); status ERROR with its reason unless acknowledged |
//! | `order` | INTERNAL | the order (`process_orders.order_id`) |
//! | `store.*`, `payment.look_up`, `payment.charge`, `sqs.*` | CLIENT | each call; status ERROR with the error when it failed |
//!
//! The exporter reads the OpenTelemetry SDK's variables: `OTEL_SDK_DISABLED`, the endpoint,
//! `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`, `_TIMEOUT` (1 s by default here, not the SDK's 10 s:
//! the export runs inside the invocation's billed time) and `_PROTOCOL` (`http/protobuf`, the
//! SDK's default, or `http/json`; `grpc` turns the traces off with a warning, and a value that
//! is none of them is the default, with a warning), `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, and
//! `OTEL_TRACES_SAMPLER` with `OTEL_TRACES_SAMPLER_ARG` (default `parentbased_always_on`: Lambda's
//! `Sampled` flag decides).
//!
//! Off, there is no layer: the trace spans are DEBUG spans of the workspace's crates, which the
//! log filter (INFO by default) disables where they are written, so they cost a check each.
//!
//! The exporter is this module's own, not `opentelemetry-otlp`'s: the SDK's pipeline
//! (`opentelemetry_sdk`'s batch processor, `tracing-opentelemetry`, its HTTP client) is a second
//! runtime of spans beside `tracing`'s, for a request that is one fixed shape sent once per
//! invocation; the measured reason is in docs/performance.md, "Traces: the exporter".
//!
//! The endpoint is a collector that takes OTLP/HTTP without signing: the ADOT Lambda
//! layer's (`http://localhost:4318/v1/traces`) or the CloudWatch agent's, which forward to
//! X-Ray's OTLP endpoint with the function's credentials (docs/operations.md, "Traces").

mod protobuf;

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The crates whose spans are traced.
const TRACED: [&str; 4] = ["process_orders", "sqs_batch", "idempotency", "claim_check"];

/// How long one export may take at most: it runs inside the invocation's time.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(1);

/// What is left of the invocation after the export: the response must still reach Lambda.
const EXPORT_RESERVE: Duration = Duration::from_millis(200);

/// Spans kept between two exports; beyond it they are dropped (and counted), so a batch of
/// 10,000 records never holds tens of megabytes of spans.
const MAX_SPANS: usize = 20_000;

/// Spans per request: a collector's body limit, and a request that fits its timeout.
const SPANS_PER_REQUEST: usize = 1_000;

/// Where the spans go, and who sends them.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The collector's traces URL.
    pub endpoint: String,
    /// `service.name`: `OTEL_SERVICE_NAME`, else `POWERTOOLS_SERVICE_NAME`, else `process-orders`.
    pub service: String,
    /// Sent with every export (`OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`).
    pub headers: Vec<(String, String)>,
    /// How long one export may take (`OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`, ms).
    pub timeout: Duration,
    /// `OTEL_RESOURCE_ATTRIBUTES`, added to the resource.
    pub resource: Vec<(String, String)>,
    /// `OTEL_TRACES_SAMPLER` and its argument.
    pub sampler: Sampler,
    /// `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: how the request is encoded.
    pub protocol: Protocol,
}

/// OTLP/HTTP's two encodings, as `OTEL_EXPORTER_OTLP_PROTOCOL` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// `http/protobuf`: the SDK's default.
    #[default]
    Protobuf,
    /// `http/json`.
    Json,
}

impl Protocol {
    /// The protocol a variable's value names; `None` for gRPC and for what is no protocol.
    fn named(value: &str) -> Option<Self> {
        match value.trim() {
            "http/protobuf" => Some(Self::Protobuf),
            "http/json" => Some(Self::Json),
            _ => None,
        }
    }

    /// The request's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => "application/x-protobuf",
            Self::Json => "application/json",
        }
    }

    /// `request` in this encoding.
    fn body(self, request: &Value) -> Vec<u8> {
        match self {
            Self::Protobuf => protobuf::encode(request),
            Self::Json => request.to_string().into_bytes(),
        }
    }
}

/// Which traces are kept, as `OTEL_TRACES_SAMPLER` names them. The parent of every trace here is
/// Lambda's X-Ray segment, whose `Sampled` flag is the parent's decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampler {
    /// `always_on`.
    AlwaysOn,
    /// `always_off`.
    AlwaysOff,
    /// `traceidratio`: this share of the traces, by trace id.
    Ratio(f64),
    /// `parentbased_*`: the parent's decision, else the inner sampler's.
    ParentBased(ParentlessSampler),
}

/// What a parent-based sampler does for a trace without a parent decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParentlessSampler {
    /// `parentbased_always_on` (the default).
    AlwaysOn,
    /// `parentbased_always_off`.
    AlwaysOff,
    /// `parentbased_traceidratio`.
    Ratio(f64),
}

impl Sampler {
    /// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (a ratio, 1.0 when unreadable); an
    /// unknown sampler is the default, as the SDK reads it.
    fn from_env(name: Option<&str>, arg: Option<&str>) -> Self {
        let ratio = arg
            .and_then(|a| a.trim().parse::<f64>().ok())
            .filter(|r| (0.0..=1.0).contains(r))
            .unwrap_or(1.0);
        match name.map(str::trim) {
            Some("always_on") => Self::AlwaysOn,
            Some("always_off") => Self::AlwaysOff,
            Some("traceidratio") => Self::Ratio(ratio),
            Some("parentbased_always_off") => Self::ParentBased(ParentlessSampler::AlwaysOff),
            Some("parentbased_traceidratio") => Self::ParentBased(ParentlessSampler::Ratio(ratio)),
            _ => Self::ParentBased(ParentlessSampler::AlwaysOn),
        }
    }

    /// Whether a trace is kept: `parent` is Lambda's `Sampled` flag, when it gave one.
    pub fn keeps(&self, trace_id: u128, parent: Option<bool>) -> bool {
        // The SDK's rule: the trace id's lower 64 bits against the ratio of u64's range.
        let by_ratio = |ratio: f64| (trace_id as u64) < (ratio * u64::MAX as f64) as u64;
        match (*self, parent) {
            (Self::AlwaysOn, _) => true,
            (Self::AlwaysOff, _) => false,
            (Self::Ratio(r), _) => by_ratio(r),
            (Self::ParentBased(_), Some(sampled)) => sampled,
            (Self::ParentBased(ParentlessSampler::AlwaysOn), None) => true,
            (Self::ParentBased(ParentlessSampler::AlwaysOff), None) => false,
            (Self::ParentBased(ParentlessSampler::Ratio(r)), None) => by_ratio(r),
        }
    }
}

/// Why traces are off though an endpoint is set, when it is the protocol: for a start-up
/// warning, once logging is up.
pub fn unsupported_protocol(var: impl Fn(&str) -> Option<String>) -> Option<&'static str> {
    let endpoint =
        var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let protocol =
        var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
    let protocol = protocol.filter(|p| !p.trim().is_empty())?;
    if endpoint.is_none() || Protocol::named(&protocol).is_some() {
        return None;
    }
    Some(if protocol.trim() == "grpc" {
        "OTEL_EXPORTER_OTLP_PROTOCOL is grpc, which this exporter does not speak: traces are off \
         (use http/protobuf or http/json and the collector's HTTP port)"
    } else {
        "OTEL_EXPORTER_OTLP_PROTOCOL is none of grpc, http/protobuf, http/json: traces go as \
         http/protobuf, the default"
    })
}

/// `key=value` pairs separated by commas, percent-decoded, as the OpenTelemetry SDK reads its
/// header and resource variables; a pair without `=` is skipped.
fn pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            let key = percent_decode(key.trim());
            (!key.is_empty()).then(|| (key, percent_decode(value.trim())))
        })
        .collect()
}

/// `%XX` escapes replaced by their bytes (W3C Baggage's encoding, which the SDK's variables use).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The invocation's span, on every line it logs and the root of its trace: Lambda's request id
/// (`function_request_id`, OpenTelemetry's `faas.invocation_id`) and the function's ARN.
pub fn invocation_span(request_id: &str, function_arn: &str) -> tracing::Span {
    tracing::info_span!("invocation", function_request_id = request_id, function_arn)
}

/// Records `out`'s error on `span` (whose `error` field must be declared empty): the trace
/// shows the call's status, ERROR with what went wrong.
pub fn record_error<T, E: std::fmt::Display>(span: &tracing::Span, out: &Result<T, E>) {
    if let Err(error) = out {
        span.record("error", tracing::field::display(error));
    }
}

/// `call` in `span` (whose `error` field must be declared empty), recording its error there:
/// the trace shows the call's status, ERROR with what went wrong.
// Not an `async fn`: its future would hold `call` twice (the argument and the instrumented
// copy), and every record's future is as large as the largest call it makes.
pub fn traced<T, E, F>(
    span: tracing::Span,
    call: F,
) -> tracing::instrument::Instrumented<impl std::future::Future<Output = Result<T, E>>>
where
    E: std::fmt::Display,
    F: std::future::Future<Output = Result<T, E>>,
{
    use tracing::Instrument;
    async move {
        let out = call.await;
        if let Err(error) = &out {
            tracing::Span::current().record("error", tracing::field::display(error));
        }
        out
    }
    .instrument(span)
}

impl TraceSettings {
    /// The OpenTelemetry SDK's variables; `None` (off) when no endpoint is set, when
    /// `OTEL_SDK_DISABLED` is `true`, or when the protocol asked for is gRPC, which this
    /// exporter does not speak.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        // A signal's own variable first, then the general one, as the SDK reads them.
        let either = |traces: &str, general: &str| var(traces).or_else(|| var(general));
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
            var("OTEL_EXPORTER_OTLP_ENDPOINT")
                .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
        })?;
        let protocol = either(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        );
        // Said once the log layer is up ([`unsupported_protocol`]).
        if protocol.as_deref().is_some_and(|p| p.trim() == "grpc") {
            return None;
        }
        let timeout = either(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        )
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(EXPORT_TIMEOUT, Duration::from_millis);
        let headers = either(
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        )
        .map(|text| pairs(&text))
        .unwrap_or_default();
        Some(Self {
            endpoint: endpoint.trim().to_owned(),
            service: var("OTEL_SERVICE_NAME")
                .or_else(|| var("POWERTOOLS_SERVICE_NAME"))
                .unwrap_or_else(|| "process-orders".to_owned()),
            headers,
            timeout,
            resource: var("OTEL_RESOURCE_ATTRIBUTES")
                .map(|text| pairs(&text))
                .unwrap_or_default(),
            sampler: Sampler::from_env(
                var("OTEL_TRACES_SAMPLER").as_deref(),
                var("OTEL_TRACES_SAMPLER_ARG").as_deref(),
            ),
            // Unset or unknown: the SDK's default ([`unsupported_protocol`] warns of the latter).
            protocol: protocol
                .as_deref()
                .and_then(Protocol::named)
                .unwrap_or_default(),
        })
    }
}

/// The spans finished since the last flush, and where they go.
struct Exporter {
    settings: TraceSettings,
    client: reqwest::Client,
    finished: Mutex<Vec<Finished>>,
    /// Spans dropped since the last export (over [`MAX_SPANS`]).
    dropped: std::sync::atomic::AtomicUsize,
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

/// The layer that records the trace spans, with its filter; `None` when tracing is off. The
/// HTTP client is built here, once; its first connection opens at the first flush.
pub fn layer<S>(settings: Option<TraceSettings>) -> Option<impl Layer<S> + Send + Sync + 'static>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let settings = settings?;
    let tls = crate::tls::client_config().ok()?;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(settings.timeout)
        .build()
        .ok()?;
    let _ = EXPORTER.set(Exporter {
        settings,
        client,
        finished: Mutex::new(Vec::new()),
        dropped: std::sync::atomic::AtomicUsize::new(0),
    });
    let targets = TRACED.iter().fold(Targets::new(), |t, target| {
        t.with_target(*target, Level::DEBUG)
    });
    Some(OtlpLayer.with_filter(targets))
}

/// Sends the spans finished so far, when tracing is on, before `deadline_ms` (epoch ms) less a
/// reserve for the response. Best effort: a collector that is down or slow costs at most one
/// second, never past the deadline, and loses those spans, never the batch.
pub async fn flush(deadline_ms: u64) {
    let Some(exporter) = EXPORTER.get() else {
        return;
    };
    let spans = std::mem::take(
        &mut *exporter
            .finished
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let dropped = exporter
        .dropped
        .swap(0, std::sync::atomic::Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "trace spans dropped: more than {MAX_SPANS} in one invocation"
        );
    }
    if spans.is_empty() {
        return;
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let left =
        Duration::from_millis(deadline_ms.saturating_sub(now_ms)).saturating_sub(EXPORT_RESERVE);
    let budget = left.min(exporter.settings.timeout);
    if budget.is_zero() {
        tracing::warn!(
            spans = spans.len(),
            "trace spans not sent: the invocation's time is up"
        );
        return;
    }
    let send = async {
        for chunk in spans.chunks(SPANS_PER_REQUEST) {
            let protocol = exporter.settings.protocol;
            let body = protocol.body(&request(&exporter.settings, chunk));
            let mut post = exporter
                .client
                .post(&exporter.settings.endpoint)
                .header(reqwest::header::CONTENT_TYPE, protocol.content_type());
            for (name, value) in &exporter.settings.headers {
                post = post.header(name.as_str(), value.as_str());
            }
            post.body(body)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)?;
        }
        Ok::<(), reqwest::Error>(())
    };
    match tokio::time::timeout(budget, send).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(
            spans = spans.len(),
            error = %lambda_kit::error_chain(&error),
            "trace export failed"
        ),
        Err(_) => tracing::warn!(spans = spans.len(), "trace export ran out of time"),
    }
}

/// A span's trace data while it is open.
struct Open {
    /// Lambda's segment was not sampled (`Sampled=0`): the trace is not exported.
    sampled: bool,
    trace_id: u128,
    span_id: u64,
    parent_id: Option<u64>,
    name: &'static str,
    start: SystemTime,
    attributes: Vec<(&'static str, Value)>,
    links: Vec<(u128, u64)>,
}

/// A closed span, waiting for the flush.
struct Finished {
    open: Open,
    end: SystemTime,
}

struct OtlpLayer;

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        // The nearest traced ancestor gives the trace; a root joins Lambda's own segment.
        let parent = span.parent().and_then(|parent| {
            parent
                .extensions()
                .get::<Open>()
                .map(|open| (open.trace_id, open.span_id, open.sampled))
        });
        let (trace_id, parent_id, sampled) = match parent {
            Some((trace_id, span_id, sampled)) => (trace_id, Some(span_id), sampled),
            None => {
                // A root: Lambda's segment is its parent, and the sampler decides, with
                // Lambda's `Sampled` flag as the parent's decision.
                let header = std::env::var("_X_AMZN_TRACE_ID").ok();
                let (trace_id, parent) = header
                    .as_deref()
                    .and_then(xray)
                    .unwrap_or_else(|| (fastrand::u128(1..), None));
                let decision = header.as_deref().and_then(sampled_flag);
                let sampler = EXPORTER
                    .get()
                    .map_or(Sampler::ParentBased(ParentlessSampler::AlwaysOn), |e| {
                        e.settings.sampler
                    });
                (trace_id, parent, sampler.keeps(trace_id, decision))
            }
        };
        let mut open = Open {
            sampled,
            trace_id,
            span_id: fastrand::u64(1..),
            parent_id,
            name: attrs.metadata().name(),
            start: SystemTime::now(),
            attributes: Vec::new(),
            links: Vec::new(),
        };
        attrs.record(&mut Fields(&mut open));
        span.extensions_mut().insert(open);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<Open>()
        {
            values.record(&mut Fields(open));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        if !open.sampled {
            return;
        }
        if let Some(exporter) = EXPORTER.get() {
            let mut finished = exporter
                .finished
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if finished.len() >= MAX_SPANS {
                exporter
                    .dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return;
            }
            finished.push(Finished {
                open,
                end: SystemTime::now(),
            });
        }
    }
}

/// A span's fields as OTLP attributes; `trace_header` (a record's `AWSTraceHeader`) also
/// becomes a link to the producer's trace.
struct Fields<'a>(&'a mut Open);

impl Fields<'_> {
    fn set(&mut self, field: &Field, value: Value) {
        let attributes = &mut self.0.attributes;
        match attributes.iter_mut().find(|(key, _)| *key == field.name()) {
            Some(slot) => slot.1 = value,
            None => attributes.push((field.name(), value)),
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "trace_header"
            && let Some((trace_id, Some(span_id))) = xray(value)
        {
            self.0.links.push((trace_id, span_id));
        }
        self.set(field, json!({ "stringValue": value }));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field, json!({ "boolValue": value }));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field, json!({ "intValue": value.to_string() }));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, json!({ "intValue": value.to_string() }));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field, json!({ "doubleValue": value }));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field, json!({ "stringValue": format!("{value:?}") }));
    }
}

/// The trace id and the parent span id of an X-Ray header
/// (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`). X-Ray's trace
/// id is OpenTelemetry's: its epoch and its random part, 32 hex digits in all.
pub fn xray(header: &str) -> Option<(u128, Option<u64>)> {
    let mut trace_id = None;
    let mut parent = None;
    for part in header.split(';') {
        match part.trim().split_once('=') {
            Some(("Root", root)) => {
                let mut pieces = root.split('-');
                let (Some("1"), Some(epoch), Some(random), None) =
                    (pieces.next(), pieces.next(), pieces.next(), pieces.next())
                else {
                    return None;
                };
                if epoch.len() != 8 || random.len() != 24 {
                    return None;
                }
                trace_id = u128::from_str_radix(&format!("{epoch}{random}"), 16).ok();
            }
            Some(("Parent", id)) if id.len() == 16 => parent = u64::from_str_radix(id, 16).ok(),
            _ => {}
        }
    }
    trace_id.filter(|id| *id != 0).map(|id| (id, parent))
}

/// An X-Ray header's sampling decision (`Sampled=1` or `Sampled=0`), if it gives one.
fn sampled_flag(header: &str) -> Option<bool> {
    header.split(';').find_map(|part| match part.trim() {
        "Sampled=1" => Some(true),
        "Sampled=0" => Some(false),
        _ => None,
    })
}

fn nanos(at: SystemTime) -> String {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
        .to_string()
}

/// OTLP's span kinds.
const INTERNAL: u8 = 1;
const SERVER: u8 = 2;
const CLIENT: u8 = 3;
const CONSUMER: u8 = 5;
/// OTLP's status code for an error.
const STATUS_ERROR: u8 = 2;

/// The queue's name: the last field of its ARN.
fn queue_name(arn: &str) -> &str {
    arn.rsplit(':').next().unwrap_or(arn)
}

/// A span as OpenTelemetry's conventions name it: its name, kind, attributes and status.
struct Conventional {
    name: String,
    kind: u8,
    attributes: Vec<Value>,
    /// An error's description, when the span's work failed.
    error: Option<String>,
}

fn attribute(key: &str, value: Value) -> Value {
    json!({ "key": key, "value": value })
}

fn string(text: &str) -> Value {
    json!({ "stringValue": text })
}

/// What the code's span `open` is in OpenTelemetry's terms; `queue` is the name of the queue
/// its batch came from, when it belongs to one. The code's own fields keep their meaning under
/// this crate's namespace (`process_orders.*`), or under the convention's name where there is
/// one (`messaging.message.id`).
/// The function this process runs, as the resource variables Lambda sets name it.
#[derive(Debug, Clone, Copy, Default)]
struct Function<'a> {
    /// `AWS_LAMBDA_FUNCTION_NAME`.
    name: Option<&'a str>,
    /// `AWS_LAMBDA_FUNCTION_VERSION` (`$LATEST` or a number).
    version: Option<&'a str>,
}

/// The FaaS convention's identity of an invocation, from the ARN it was invoked by (Lambda's
/// `Lambda-Runtime-Invoked-Function-Arn`): `aws.lambda.invoked_arn` as given,
/// `cloud.account.id` (its fifth field), and `cloud.resource_id`, the function's ARN qualified
/// with the version that runs. An alias is replaced by the version, as the convention asks: one
/// container serves every alias that points at its version, so an alias names no resource.
fn invoked(arn: &str, version: Option<&str>) -> Vec<Value> {
    let mut attributes = vec![attribute("aws.lambda.invoked_arn", string(arn))];
    // arn:partition:lambda:region:account:function:name[:qualifier]
    let fields: Vec<&str> = arn.split(':').collect();
    if fields.len() < 7 || fields[0] != "arn" || fields[2] != "lambda" || fields[5] != "function" {
        return attributes;
    }
    if !fields[4].is_empty() {
        attributes.push(attribute("cloud.account.id", string(fields[4])));
    }
    let function = fields[..7].join(":");
    let resource = match version.or(fields.get(7).copied()) {
        Some(version) => format!("{function}:{version}"),
        None => function,
    };
    attributes.push(attribute("cloud.resource_id", string(&resource)));
    attributes
}

fn conventional(open: &Open, queue: Option<&str>, function: Function<'_>) -> Conventional {
    let text = |key: &str| {
        open.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v["stringValue"].as_str())
    };
    let messaging = |queue: &str, attributes: &mut Vec<Value>| {
        attributes.push(attribute("messaging.system", string("aws_sqs")));
        attributes.push(attribute("messaging.operation.name", string("process")));
        attributes.push(attribute("messaging.operation.type", string("process")));
        attributes.push(attribute("messaging.destination.name", string(queue)));
    };
    let mut attributes = Vec::new();
    let mut error = text("error").map(str::to_owned);
    let (name, kind) = match open.name {
        "invocation" => {
            attributes.push(attribute("faas.trigger", string("pubsub")));
            if let Some(id) = text("function_request_id") {
                attributes.push(attribute("faas.invocation_id", string(id)));
            }
            if let Some(arn) = text("function_arn").filter(|arn| !arn.is_empty()) {
                attributes.extend(invoked(arn, function.version));
            }
            (function.name.unwrap_or("invocation").to_owned(), SERVER)
        }
        "batch" => {
            let queue = text("queue").map_or("unknown", queue_name);
            messaging(queue, &mut attributes);
            if let Some((_, count)) = open.attributes.iter().find(|(k, _)| *k == "records") {
                attributes.push(attribute("messaging.batch.message_count", count.clone()));
            }
            if let Some(kind) = text("kind") {
                attributes.push(attribute("process_orders.queue_kind", string(kind)));
            }
            (format!("process {queue}"), CONSUMER)
        }
        "record" => {
            let queue = queue.unwrap_or("unknown");
            messaging(queue, &mut attributes);
            if let Some(id) = text("message_id") {
                attributes.push(attribute("messaging.message.id", string(id)));
            }
            for field in ["key", "outcome", "reason"] {
                if let Some(value) = text(field) {
                    attributes.push(attribute(&format!("process_orders.{field}"), string(value)));
                }
            }
            // Retried or moved: the record did not succeed, and its reason says why.
            if text("outcome").is_some_and(|o| o != "ack") {
                error = Some(text("reason").unwrap_or("not acknowledged").to_owned());
            }
            (format!("process {queue}"), CONSUMER)
        }
        name => {
            for (key, value) in &open.attributes {
                if *key != "error" {
                    attributes.push(attribute(&format!("process_orders.{key}"), value.clone()));
                }
            }
            let client = ["store.", "payment.", "sqs."]
                .iter()
                .any(|prefix| name.starts_with(prefix));
            (name.to_owned(), if client { CLIENT } else { INTERNAL })
        }
    };
    Conventional {
        name,
        kind,
        attributes,
        error,
    }
}

/// The resource every span of this process shares: the service, the cloud and the function as
/// Lambda describes them, then `OTEL_RESOURCE_ATTRIBUTES` (whose `service.name` gives way to
/// `OTEL_SERVICE_NAME`).
fn resource(settings: &TraceSettings) -> Vec<Value> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mut resource: Vec<(String, Value)> = vec![
        ("service.name".into(), string(&settings.service)),
        ("cloud.provider".into(), string("aws")),
        ("cloud.platform".into(), string("aws_lambda")),
    ];
    let mut add = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            resource.push((key.to_owned(), value));
        }
    };
    add("cloud.region", env("AWS_REGION").map(|r| string(&r)));
    add(
        "faas.name",
        env("AWS_LAMBDA_FUNCTION_NAME").map(|n| string(&n)),
    );
    add(
        "faas.version",
        env("AWS_LAMBDA_FUNCTION_VERSION").map(|v| string(&v)),
    );
    add(
        "faas.instance",
        env("AWS_LAMBDA_LOG_STREAM_NAME").map(|i| string(&i)),
    );
    // In bytes, as the convention has it (Lambda gives MB).
    add(
        "faas.max_memory",
        env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
            .and_then(|mb| mb.trim().parse::<u64>().ok())
            .map(|mb| json!({ "intValue": (mb * 1_048_576).to_string() })),
    );
    let explicit_service = env("OTEL_SERVICE_NAME").is_some();
    for (key, value) in &settings.resource {
        if key == "service.name" && explicit_service {
            continue;
        }
        match resource.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = string(value),
            None => resource.push((key.clone(), string(value))),
        }
    }
    resource
        .into_iter()
        .map(|(key, value)| attribute(&key, value))
        .collect()
}

/// The OTLP/HTTP JSON request (ExportTraceServiceRequest) for `spans`.
fn request(settings: &TraceSettings, spans: &[Finished]) -> Value {
    use std::collections::HashMap;
    // Each batch's queue, for its records; and each record's links, for its batch (the batch's
    // span links to every producer, as the messaging convention has a batch do).
    let mut queues: HashMap<u64, &str> = HashMap::new();
    let mut child_links: HashMap<u64, Vec<(u128, u64)>> = HashMap::new();
    for f in spans {
        let open = &f.open;
        if open.name == "batch"
            && let Some(queue) = open
                .attributes
                .iter()
                .find(|(k, _)| *k == "queue")
                .and_then(|(_, v)| v["stringValue"].as_str())
        {
            queues.insert(open.span_id, queue_name(queue));
        }
        if let Some(parent) = open.parent_id {
            child_links
                .entry(parent)
                .or_default()
                .extend(open.links.iter().copied());
        }
    }
    let function_name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok();
    let function_version = std::env::var("AWS_LAMBDA_FUNCTION_VERSION").ok();
    let function = Function {
        name: function_name.as_deref(),
        version: function_version.as_deref().filter(|v| !v.is_empty()),
    };
    let link = |(trace_id, span_id): &(u128, u64)| {
        json!({
            "traceId": format!("{trace_id:032x}"),
            "spanId": format!("{span_id:016x}"),
        })
    };
    let spans: Vec<Value> = spans
        .iter()
        .map(|f| {
            let open = &f.open;
            let queue = open.parent_id.and_then(|p| queues.get(&p).copied());
            let c = conventional(open, queue, function);
            let mut links: Vec<Value> = open.links.iter().map(link).collect();
            if open.name == "batch" {
                links.extend(
                    child_links
                        .get(&open.span_id)
                        .into_iter()
                        .flatten()
                        .map(link),
                );
            }
            let mut span = json!({
                "traceId": format!("{:032x}", open.trace_id),
                "spanId": format!("{:016x}", open.span_id),
                "name": c.name,
                "kind": c.kind,
                "startTimeUnixNano": nanos(open.start),
                "endTimeUnixNano": nanos(f.end),
                "attributes": c.attributes,
                "links": links,
            });
            if let Some(message) = c.error {
                span["status"] = json!({ "code": STATUS_ERROR, "message": message });
            }
            if let Some(parent) = open.parent_id {
                span["parentSpanId"] = format!("{parent:016x}").into();
            }
            span
        })
        .collect();
    json!({
        "resourceSpans": [{
            "resource": { "attributes": resource(settings) },
            "scopeSpans": [{
                "scope": { "name": "process-orders", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_xray_header_gives_the_trace_and_the_parent() {
        let (trace, parent) =
            xray("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
                .expect("valid");
        assert_eq!(format!("{trace:032x}"), "5759e988bd862e3fe1be46a994272793");
        assert_eq!(parent, Some(0x5399_5c3f_42cd_8ad8));
        assert_eq!(
            xray("Root=1-5759e988-bd862e3fe1be46a994272793"),
            Some((trace, None))
        );
        for bad in [
            "",
            "Root=2-5759e988-bd862e3fe1be46a994272793",
            "Root=1-zz-yy",
            "Parent=1",
        ] {
            assert_eq!(xray(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_endpoint_comes_from_the_sdk_variables() {
        let from = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect();
            TraceSettings::from_env(|name| {
                vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            })
        };
        assert_eq!(from(&[]), None);
        assert_eq!(from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "")]), None);
        let base = from(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318/")]).expect("on");
        assert_eq!(base.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(base.service, "process-orders");
        let full = from(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/x"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored"),
            ("POWERTOOLS_SERVICE_NAME", "payments"),
        ])
        .expect("on");
        assert_eq!(full.endpoint, "http://c:4318/x");
        assert_eq!(full.service, "payments");
        assert_eq!(full.timeout, EXPORT_TIMEOUT);
        assert_eq!(
            full.sampler,
            Sampler::ParentBased(ParentlessSampler::AlwaysOn)
        );
        // The SDK's other variables, read as it reads them.
        let all = from(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=a%2Cb, x-team = orders,broken",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=prod,team=pay%20ments",
            ),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ])
        .expect("on");
        assert_eq!(
            all.headers,
            [
                ("api-key".into(), "a,b".into()),
                ("x-team".into(), "orders".into())
            ]
        );
        assert_eq!(all.timeout, Duration::from_millis(2_500));
        assert_eq!(all.resource[1], ("team".into(), "pay ments".into()));
        assert_eq!(all.sampler, Sampler::Ratio(0.25));
        assert_eq!(
            from(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                ("OTEL_SDK_DISABLED", "true")
            ]),
            None
        );
        assert_eq!(
            from(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ]),
            None,
            "gRPC is not spoken"
        );
        // The protocol: the SDK's default is protobuf; JSON when asked; the traces' own
        // variable before the general one; what is no protocol is the default.
        assert_eq!(base.protocol, Protocol::Protobuf);
        let protocol = |vars: &[(&str, &str)]| {
            let mut all = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c")];
            all.extend_from_slice(vars);
            from(&all).expect("on").protocol
        };
        assert_eq!(
            protocol(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]),
            Protocol::Json
        );
        assert_eq!(
            protocol(&[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
            ]),
            Protocol::Protobuf
        );
        assert_eq!(
            protocol(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/xml")]),
            Protocol::Protobuf
        );
        let warning = |protocol: &'static str| {
            unsupported_protocol(|name| match name {
                "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://c".to_owned()),
                "OTEL_EXPORTER_OTLP_PROTOCOL" => Some(protocol.to_owned()),
                _ => None,
            })
        };
        assert!(warning("grpc").is_some_and(|w| w.contains("traces are off")));
        assert!(warning("http/xml").is_some_and(|w| w.contains("the default")));
        assert_eq!(warning("http/json"), None);
        assert_eq!(warning("http/protobuf"), None);
    }

    #[test]
    fn the_invocation_names_its_function_as_the_faas_convention_does() {
        let open = Open {
            sampled: true,
            trace_id: 1,
            span_id: 2,
            parent_id: None,
            name: "invocation",
            start: UNIX_EPOCH,
            attributes: vec![
                ("function_request_id", string("r-1")),
                (
                    "function_arn",
                    string("arn:aws:lambda:eu-west-1:123456789012:function:orders-fn:live"),
                ),
            ],
            links: Vec::new(),
        };
        let function = Function {
            name: Some("orders-fn"),
            version: Some("7"),
        };
        let c = conventional(&open, None, function);
        let value = |key: &str| {
            c.attributes
                .iter()
                .find(|a| a["key"] == key)
                .and_then(|a| a["value"]["stringValue"].as_str())
        };
        assert_eq!(c.name, "orders-fn");
        assert_eq!(
            value("aws.lambda.invoked_arn"),
            Some("arn:aws:lambda:eu-west-1:123456789012:function:orders-fn:live")
        );
        assert_eq!(value("cloud.account.id"), Some("123456789012"));
        // The alias `live` is replaced by the version that runs.
        assert_eq!(
            value("cloud.resource_id"),
            Some("arn:aws:lambda:eu-west-1:123456789012:function:orders-fn:7")
        );
        // Unqualified, with no version known: the ARN as it is.
        let plain = invoked(
            "arn:aws:lambda:eu-west-1:123456789012:function:orders-fn",
            None,
        );
        assert_eq!(
            plain[2]["value"]["stringValue"],
            "arn:aws:lambda:eu-west-1:123456789012:function:orders-fn"
        );
        // Not a Lambda ARN: only the invoked ARN, as given.
        assert_eq!(invoked("local", Some("7")).len(), 1);
    }

    #[test]
    fn samplers_decide_as_the_sdk_does() {
        let parent = Sampler::from_env(None, None);
        assert!(parent.keeps(7, Some(true)) && !parent.keeps(7, Some(false)));
        assert!(parent.keeps(7, None), "no parent decision: always on");
        assert!(!Sampler::from_env(Some("always_off"), None).keeps(7, Some(true)));
        assert!(Sampler::from_env(Some("always_on"), None).keeps(7, Some(false)));
        let ratio = Sampler::from_env(Some("traceidratio"), Some("0.5"));
        assert!(ratio.keeps(u128::from(u64::MAX / 4), None));
        assert!(!ratio.keeps(u128::from(u64::MAX / 4 * 3), None));
        // A ratio out of range reads as 1.
        assert_eq!(
            Sampler::from_env(Some("traceidratio"), Some("7")),
            Sampler::Ratio(1.0)
        );
    }
}
