//! Logging as Lambda and Powertools users expect it.
//!
//! Under Lambda's JSON log format (`AWS_LAMBDA_LOG_FORMAT=JSON`, which the template sets) every
//! line is one flat JSON object with the keys Powertools for AWS Lambda's logger writes:
//! `level`, `location`, `message`, `timestamp`, `service`, `cold_start`, `function_name`,
//! `function_memory_size`, `function_request_id`, `xray_trace_id`, and then the line's own
//! fields and those of the spans it is in (`order_id` and `message_id` on every line about a
//! record), all at the top level. Powertools' Logs Insights queries and dashboards read them
//! unchanged. Otherwise (local runs, one-shot mode) the lines are lambda_runtime's plain text.
//!
//! The level: `AWS_LAMBDA_LOG_LEVEL` (Lambda's logging controls), else `POWERTOOLS_LOG_LEVEL`,
//! else `RUST_LOG`, else INFO; a value that is not a level is skipped (Powertools' `CRITICAL`
//! and Lambda's `FATAL` read as ERROR). `RUST_LOG` directives (`idempotency=debug,info`), when
//! set, replace that default: name a level for the rest too.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

/// Set after the container's first invocation: `cold_start` is true on the lines before.
static WARM: AtomicBool = AtomicBool::new(false);

/// Marks the container's first invocation as done: later lines say `"cold_start": false`.
pub fn mark_warm() {
    WARM.store(true, Ordering::Relaxed);
}

/// The level from the environment, as the module doc orders it.
pub fn level_from_env() -> LevelFilter {
    ["AWS_LAMBDA_LOG_LEVEL", "POWERTOOLS_LOG_LEVEL", "RUST_LOG"]
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find_map(|level| parse_level(&level))
        .unwrap_or(LevelFilter::INFO)
}

/// A level as Lambda, Powertools or tracing spell it.
fn parse_level(text: &str) -> Option<LevelFilter> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("fatal") || text.eq_ignore_ascii_case("critical") {
        return Some(LevelFilter::ERROR);
    }
    text.parse().ok()
}

/// Installs the process's subscriber, writing to `writer`: Powertools-shaped JSON under
/// Lambda's JSON log format, plain text otherwise, and the trace layer when an OTLP endpoint is
/// set ([`crate::telemetry`]).
pub fn init<W>(writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = EnvFilter::builder()
        .with_default_directive(level_from_env().into())
        .from_env_lossy();
    let (json, text) = if crate::cli::json_logs() {
        let json = tracing_subscriber::fmt::layer()
            .fmt_fields(JsonFields::new())
            .event_format(PowertoolsJson::from_env())
            .with_writer(writer);
        (Some(json), None)
    } else {
        let text = tracing_subscriber::fmt::layer()
            .with_target(false)
            .without_time()
            .with_writer(writer);
        (None, Some(text))
    };
    let traces = crate::telemetry::layer(crate::telemetry::TraceSettings::from_env(|name| {
        std::env::var(name).ok()
    }));
    // The log filter applies to the log lines only; the trace layer has its own. Spans of INFO
    // and above pass it whatever the level: they carry the context (the request and trace ids,
    // the order and message ids), and a WARN line, the one an on-call engineer reads first,
    // must not lose it because the level filters INFO events out.
    //
    // Its level hint matters: without one the combined filter has none either, so the global
    // maximum level stays TRACE and every `trace!` and `debug!` of the SDK, hyper and reqwest
    // (dozens a request) gets past the macro's level check to the callsite's interest.
    let context = tracing_subscriber::filter::filter_fn(|meta| {
        meta.is_span() && *meta.level() <= tracing::Level::INFO
    })
    .with_max_level_hint(LevelFilter::INFO);
    let logs = tracing_subscriber::Layer::with_filter(
        tracing_subscriber::Layer::and_then(json, text),
        tracing_subscriber::filter::FilterExt::or(filter, context),
    );
    drop(
        tracing_subscriber::registry()
            .with(logs)
            .with(traces)
            .try_init(),
    );
    if let Some(why) = crate::telemetry::unsupported_protocol(|name| std::env::var(name).ok()) {
        tracing::warn!("{why}");
    }
}

/// The line format of Powertools' logger: flat JSON with the function's context.
#[derive(Debug, Clone)]
pub struct PowertoolsJson {
    service: String,
    function_name: Option<String>,
    /// An integer, as Powertools writes it.
    function_memory_size: Option<u64>,
}

impl PowertoolsJson {
    /// The context Lambda gives every container: `POWERTOOLS_SERVICE_NAME` (or
    /// `process-orders`), `AWS_LAMBDA_FUNCTION_NAME`, `AWS_LAMBDA_FUNCTION_MEMORY_SIZE`.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            service: var("POWERTOOLS_SERVICE_NAME").unwrap_or_else(|| "process-orders".into()),
            function_name: var("AWS_LAMBDA_FUNCTION_NAME"),
            function_memory_size: var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
                .and_then(|size| size.trim().parse().ok()),
        }
    }
}

/// lambda_runtime's names for the invocation's fields, and Powertools' for the same.
fn key_of(field: &str) -> &str {
    match field {
        "requestId" => "function_request_id",
        "xrayTraceId" => "xray_trace_id",
        other => other,
    }
}

impl<S, N> FormatEvent<S, N> for PowertoolsJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert("level".into(), meta.level().as_str().into());
        line.insert(
            "location".into(),
            match meta.line() {
                Some(n) => format!("{}:{n}", meta.target()).into(),
                None => meta.target().into(),
            },
        );
        line.insert("message".into(), Value::String(String::new()));
        line.insert("timestamp".into(), timestamp(SystemTime::now()).into());
        line.insert("service".into(), self.service.clone().into());
        line.insert("cold_start".into(), (!WARM.load(Ordering::Relaxed)).into());
        if let Some(name) = &self.function_name {
            line.insert("function_name".into(), name.clone().into());
        }
        if let Some(size) = self.function_memory_size {
            line.insert("function_memory_size".into(), size.into());
        }
        // Powertools' key; this logger does not sample (every line at the level is written).
        line.insert("sampling_rate".into(), 0.into());
        // The spans' fields, outermost first, so an inner span's value wins: the invocation's
        // request id, then the record's order and message ids. JsonFields stored each span's
        // fields as a JSON object when it was created.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<N>>() else {
                    continue;
                };
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&fields.fields) {
                    for (key, value) in fields {
                        let key = key_of(&key);
                        line.insert(key.to_owned(), value_of(key, value));
                    }
                }
            }
        }
        // The event's own fields last: they win over a span's of the same name.
        event.record(&mut Fields(&mut line));
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// A value as Powertools writes it: `xray_trace_id` is the trace's root id
/// (`1-5759e988-bd862e3fe1be46a994272793`), not the whole `Root=...;Parent=...;Sampled=...`
/// header Lambda passes.
fn value_of(key: &str, value: Value) -> Value {
    match (key, value) {
        ("xray_trace_id", Value::String(header)) => Value::String(root_id(&header).to_owned()),
        (_, value) => value,
    }
}

/// The `Root=` part of an X-Ray trace header, or the header when it has none.
fn root_id(header: &str) -> &str {
    header
        .split(';')
        .find_map(|part| part.trim().strip_prefix("Root="))
        .unwrap_or(header)
}

/// Collects an event's fields into the line, `message` included.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(key_of(field.name()).to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(key_of(field.name()).to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(key_of(field.name()).to_owned(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(key_of(field.name()).to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(key_of(field.name()).to_owned(), value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(key_of(field.name()).to_owned(), format!("{value:?}").into());
    }
}

/// An RFC 3339 UTC time with milliseconds (`2026-12-01T10:20:27.123Z`).
fn timestamp(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = lambda_kit::clock::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn levels_read_as_lambda_and_powertools_spell_them() {
        assert_eq!(parse_level("DEBUG"), Some(LevelFilter::DEBUG));
        assert_eq!(parse_level(" warn "), Some(LevelFilter::WARN));
        assert_eq!(parse_level("FATAL"), Some(LevelFilter::ERROR));
        assert_eq!(parse_level("CRITICAL"), Some(LevelFilter::ERROR));
        // RUST_LOG's directives are not one level: the next source, or INFO, decides.
        assert_eq!(parse_level("idempotency=debug"), None);
    }

    #[test]
    fn the_trace_id_is_the_root_id_as_powertools_writes_it() {
        assert_eq!(
            root_id("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"),
            "1-5759e988-bd862e3fe1be46a994272793"
        );
        assert_eq!(
            root_id("Parent=x;Root=1-2-3"),
            "1-2-3",
            "wherever it stands"
        );
        assert_eq!(root_id("1-2-3"), "1-2-3");
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        let at = |secs: u64, ms: u64| {
            timestamp(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_796_120_621, 536), "2026-12-01T10:23:41.536Z");
        assert_eq!(at(4_107_542_399, 999), "2100-02-28T23:59:59.999Z");
    }
}
