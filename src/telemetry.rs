//! Traces over OpenTelemetry's protocol (OTLP/HTTP, JSON encoding), off by default.
//!
//! When `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (a full URL) or `OTEL_EXPORTER_OTLP_ENDPOINT` (a
//! base, `/v1/traces` appended) is set, a [`tracing`] layer turns the code's trace spans into
//! OTLP spans and [`flush`] sends them at the end of each invocation, before Lambda freezes the
//! container. The spans: one per batch (`batch`, a child of Lambda's own X-Ray segment through
//! `_X_AMZN_TRACE_ID`), one per record (`record`, with `message_id`, `key` (the order id),
//! `outcome` and `reason`, linked to the producer's trace from its `AWSTraceHeader`), the
//! order's (`order`), and one per call: `store.*` (each idempotency store request),
//! `payment.look_up`, `payment.charge`, `sqs.change_visibility`, `sqs.dead_letter_moves`.
//!
//! Off, there is no layer: the trace spans are DEBUG spans of the workspace's crates, which the
//! log filter (INFO by default) disables where they are written, so they cost a check each.
//!
//! The endpoint is a collector that takes OTLP/HTTP JSON without signing: the ADOT Lambda
//! layer's (`http://localhost:4318/v1/traces`) or the CloudWatch agent's, which forward to
//! X-Ray's OTLP endpoint with the function's credentials (docs/operations.md, "Traces").

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    /// The collector's traces URL.
    pub endpoint: String,
    /// `service.name`: `OTEL_SERVICE_NAME`, else `POWERTOOLS_SERVICE_NAME`, else `process-orders`.
    pub service: String,
}

impl TraceSettings {
    /// The OpenTelemetry SDK's variables; `None` (off) when no endpoint is set.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
            var("OTEL_EXPORTER_OTLP_ENDPOINT")
                .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')))
        })?;
        Some(Self {
            endpoint: endpoint.trim().to_owned(),
            service: var("OTEL_SERVICE_NAME")
                .or_else(|| var("POWERTOOLS_SERVICE_NAME"))
                .unwrap_or_else(|| "process-orders".to_owned()),
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
        .timeout(EXPORT_TIMEOUT)
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
    let budget = left.min(EXPORT_TIMEOUT);
    if budget.is_zero() {
        tracing::warn!(
            spans = spans.len(),
            "trace spans not sent: the invocation's time is up"
        );
        return;
    }
    let send = async {
        for chunk in spans.chunks(SPANS_PER_REQUEST) {
            let body = request(&exporter.settings.service, chunk);
            exporter
                .client
                .post(&exporter.settings.endpoint)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string())
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
            None => match std::env::var("_X_AMZN_TRACE_ID").ok() {
                // Lambda's sampling decision holds for the whole trace.
                Some(header) => match xray(&header) {
                    Some((trace_id, parent)) => (trace_id, parent, !unsampled(&header)),
                    None => (fastrand::u128(1..), None, !unsampled(&header)),
                },
                None => (fastrand::u128(1..), None, true),
            },
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

/// Whether an X-Ray header says the trace is not sampled (`Sampled=0`).
fn unsampled(header: &str) -> bool {
    header.split(';').any(|part| part.trim() == "Sampled=0")
}

fn nanos(at: SystemTime) -> String {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
        .to_string()
}

/// OTLP's span kinds: the batch is the queue's consumer, each call a client, the rest internal.
fn kind(name: &str) -> u8 {
    match name {
        "batch" => 5,
        n if n.starts_with("store.") || n.starts_with("payment.") || n.starts_with("sqs.") => 3,
        _ => 1,
    }
}

/// The OTLP/HTTP JSON request (ExportTraceServiceRequest) for `spans`.
fn request(service: &str, spans: &[Finished]) -> Value {
    let spans: Vec<Value> = spans
        .iter()
        .map(|f| {
            let open = &f.open;
            let mut span = json!({
                "traceId": format!("{:032x}", open.trace_id),
                "spanId": format!("{:016x}", open.span_id),
                "name": open.name,
                "kind": kind(open.name),
                "startTimeUnixNano": nanos(open.start),
                "endTimeUnixNano": nanos(f.end),
                "attributes": open
                    .attributes
                    .iter()
                    .map(|(key, value)| json!({ "key": key, "value": value }))
                    .collect::<Vec<_>>(),
                "links": open
                    .links
                    .iter()
                    .map(|(trace_id, span_id)| json!({
                        "traceId": format!("{trace_id:032x}"),
                        "spanId": format!("{span_id:016x}"),
                    }))
                    .collect::<Vec<_>>(),
            });
            if let Some(parent) = open.parent_id {
                span["parentSpanId"] = format!("{parent:016x}").into();
            }
            span
        })
        .collect();
    let mut resource = vec![
        json!({ "key": "service.name", "value": { "stringValue": service } }),
        json!({ "key": "cloud.provider", "value": { "stringValue": "aws" } }),
    ];
    if let Ok(name) = std::env::var("AWS_LAMBDA_FUNCTION_NAME") {
        resource.push(json!({ "key": "faas.name", "value": { "stringValue": name } }));
    }
    json!({
        "resourceSpans": [{
            "resource": { "attributes": resource },
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
    }
}
