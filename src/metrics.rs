//! CloudWatch metrics in the Embedded Metric Format (EMF): one JSON document per invocation,
//! written as a single line to the function's log. CloudWatch Logs turns it into metrics
//! without any API call from the function (no `PutMetricData`, no added latency, no IAM).

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use sqs_batch::{
    edge::QueueKind, processor::BatchReport, processor::Decision, processor::RecordStatus,
};

/// The dimensions of every metric, in this order (alarms must name all four). `service` holds
/// `POWERTOOLS_SERVICE_NAME` under the name Powertools for AWS Lambda gives it, in lower case, so
/// a dashboard or query written for Powertools' metrics finds these.
pub const DIMENSIONS: [&str; 4] = ["service", "FunctionName", "QueueName", "QueueKind"];

/// The dimensions of the per-version metrics ([`VERSION_METRICS`]): what a canary deployment's
/// rollback alarms watch, the new version's own records apart from the old one's.
pub const VERSION_DIMENSIONS: [&str; 3] = ["service", "FunctionName", "ExecutedVersion"];

/// The metrics also written per version, for the rollback alarms: the records, and the two
/// outcomes a bad release causes (bodies misread, the provider refusing its configuration).
pub const VERSION_METRICS: [&str; 3] = ["Records", "Poisoned", "PaymentConfigErrors"];

/// The most metrics one EMF directive may define.
pub const MAX_METRICS: usize = 100;

/// The most values one metric may carry in one EMF document: an invocation with more calls
/// writes the rest of its latencies in further documents ([`latency_documents`]).
pub const MAX_VALUES: usize = 100;

/// The latency metrics: one value per call, so CloudWatch gives percentiles over calls.
pub const LATENCY_METRICS: [&str; 2] = ["StoreLatency", "PaymentLatency"];

/// Where and under which names the metrics go (`METRICS_*` variables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    /// The CloudWatch namespace (`POWERTOOLS_METRICS_NAMESPACE`).
    pub namespace: String,
    /// The `service` dimension: `POWERTOOLS_SERVICE_NAME`, or `process-orders`.
    pub service: String,
    /// The `FunctionName` dimension: `AWS_LAMBDA_FUNCTION_NAME`, or `process-orders` locally.
    pub function_name: String,
    /// The `ExecutedVersion` dimension: `AWS_LAMBDA_FUNCTION_VERSION`, or `$LATEST`.
    pub function_version: String,
    /// The `level` each document carries, when Lambda's log-level filtering
    /// (`AWS_LAMBDA_LOG_LEVEL`) would drop a line without one: Lambda reads a JSON line without
    /// `level` as INFO, so at WARN every metric (and the alarms on them) would go silent. The
    /// documents then carry the filter's own level, the least that it keeps.
    pub level: Option<&'static str>,
}

/// The `level` a metric document needs to pass Lambda's application log-level filter
/// `filter` (`AWS_LAMBDA_LOG_LEVEL`: TRACE, DEBUG, INFO, WARN, ERROR, FATAL), or `None` when a
/// line without one (INFO) passes.
pub fn document_level(filter: Option<&str>) -> Option<&'static str> {
    match filter?.trim().to_ascii_uppercase().as_str() {
        "WARN" | "WARNING" => Some("WARN"),
        "ERROR" => Some("ERROR"),
        "FATAL" | "CRITICAL" => Some("FATAL"),
        _ => None,
    }
}

impl MetricsSettings {
    /// `METRICS_ENABLED` (on by default), the namespace (`POWERTOOLS_METRICS_NAMESPACE` as
    /// Powertools reads it, else `METRICS_NAMESPACE`), `POWERTOOLS_SERVICE_NAME` and Lambda's
    /// `AWS_LAMBDA_FUNCTION_NAME`; `None` when metrics are off.
    pub fn from_env(env: &lambda_kit::Env<'_>) -> Result<Option<Self>, lambda_kit::EnvError> {
        // Powertools' own switch is honoured beside ours.
        if !env.flag("METRICS_ENABLED", true)? || env.flag("POWERTOOLS_METRICS_DISABLED", false)? {
            return Ok(None);
        }
        let (variable, namespace) = match env.text("POWERTOOLS_METRICS_NAMESPACE") {
            Some(namespace) => ("POWERTOOLS_METRICS_NAMESPACE", namespace),
            None => (
                "METRICS_NAMESPACE",
                env.text("METRICS_NAMESPACE")
                    .unwrap_or_else(|| "ProcessOrders".to_owned()),
            ),
        };
        if namespace.len() > 255 || namespace.contains(':') {
            return Err(lambda_kit::EnvError::invalid(
                variable,
                &namespace,
                "at most 255 characters, without ':'",
            ));
        }
        Ok(Some(Self {
            namespace,
            service: env
                .text("POWERTOOLS_SERVICE_NAME")
                .unwrap_or_else(|| "process-orders".to_owned()),
            function_name: env
                .text("AWS_LAMBDA_FUNCTION_NAME")
                .unwrap_or_else(|| "process-orders".to_owned()),
            function_version: env
                .text("AWS_LAMBDA_FUNCTION_VERSION")
                .unwrap_or_else(|| "$LATEST".to_owned()),
            level: document_level(env.text("AWS_LAMBDA_LOG_LEVEL").as_deref()),
        }))
    }
}

/// Latency of one kind of outbound call: each call's time, kept until the invocation's
/// documents take them.
#[derive(Debug, Default)]
pub struct Latency {
    /// Microseconds per call. A lock per call costs nothing beside the call it times; the
    /// vector keeps its capacity from one invocation to the next.
    calls_us: std::sync::Mutex<Vec<u32>>,
}

/// What a [`Latency`] held when it was taken.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencySnapshot {
    /// Each call's time, ms, in the order the calls ended.
    pub values_ms: Vec<f64>,
}

impl LatencySnapshot {
    /// Calls timed.
    pub fn calls(&self) -> usize {
        self.values_ms.len()
    }
}

impl Latency {
    /// Adds one call's time.
    pub fn record(&self, elapsed: Duration) {
        let us = u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX);
        // A poisoned lock only means a panic elsewhere held it: the samples are still numbers.
        let mut calls = self
            .calls_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        calls.push(us);
    }

    /// Times `call` and records it, whatever it returns.
    pub async fn time<F: Future>(&self, call: F) -> F::Output {
        // A duration measurement, not a decision: the monotonic clock, not the injected one.
        let started = Instant::now();
        let out = call.await;
        self.record(started.elapsed());
        out
    }

    /// Returns what was recorded and starts again from none (one container runs one
    /// invocation at a time, so this is the invocation's share).
    pub fn take(&self) -> LatencySnapshot {
        let mut calls = self
            .calls_us
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let values_ms = calls.iter().map(|&us| f64::from(us) / 1_000.0).collect();
        calls.clear();
        LatencySnapshot { values_ms }
    }
}

/// Latencies of the outbound calls an order makes.
#[derive(Debug, Default)]
pub struct CallLatency {
    /// The idempotency store's calls.
    pub store: Latency,
    /// The payment provider's calls.
    pub payment: Latency,
}

/// One invocation, as the metrics see it.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    /// Each record's status.
    pub report: &'a BatchReport,
    /// The source queue's ARN, if the event named it.
    pub queue_arn: Option<&'a str>,
    /// Standard or FIFO.
    pub kind: QueueKind,
    /// When the document is written, epoch ms.
    pub timestamp_ms: u64,
    /// The invocation's processing time, ms.
    pub duration_ms: f64,
    /// The store calls' latency.
    pub store: LatencySnapshot,
    /// The payment calls' latency.
    pub payment: LatencySnapshot,
    /// Reads of the payment API key after the provider refused it (a rotation seen).
    pub key_refreshes: u64,
    /// The queue's redrive policy, learned this invocation, is not what the function was
    /// deployed for (another `maxReceiveCount`, or one too low for the survival hours).
    pub redrive_mismatch: bool,
}

/// The queue's name: the last field of its ARN.
pub fn queue_name(arn: Option<&str>) -> &str {
    arn.and_then(|a| a.rsplit(':').next())
        .filter(|n| !n.is_empty())
        .unwrap_or("unknown")
}

/// The count metrics, in document order.
pub const COUNT_METRICS: [&str; 12] = [
    "Records",
    "Charged",
    "Reconciled",
    "Duplicates",
    "Retried",
    "Poisoned",
    "Conflicts",
    "Busy",
    "PaymentConfigErrors",
    "NeedsReconciliation",
    "SkippedDeadline",
    "SkippedAfterFailure",
];

/// The count metric a reason code feeds, besides `Retried` / `Poisoned`.
fn reason_metric(reason: &str) -> Option<&'static str> {
    Some(match reason {
        "charged" => "Charged",
        "reconciled" => "Reconciled",
        "duplicate" => "Duplicates",
        "conflict" | "payment_conflict" => "Conflicts",
        "busy" => "Busy",
        // The provider refuses our credentials or URL: an alarm, since only a deployment fixes it.
        "payment_config" | "payment_refused" | "payment_circuit_open" => "PaymentConfigErrors",
        // An earlier charge may exist and cannot be looked up: a person may have to check.
        "needs_reconciliation" => "NeedsReconciliation",
        _ => return None,
    })
}

/// Records per metric: the ones every dashboard and alarm needs.
fn counts(report: &BatchReport) -> [(&'static str, f64); COUNT_METRICS.len()] {
    let mut c = [0usize; COUNT_METRICS.len()];
    let mut add = |name: &str| {
        if let Some(i) = COUNT_METRICS.iter().position(|m| *m == name) {
            c[i] += 1;
        }
    };
    for status in &report.statuses {
        add("Records");
        match status {
            RecordStatus::Handled(v) | RecordStatus::Moved(v) => {
                if let Some(name) = reason_metric(v.reason) {
                    add(name);
                }
                match v.outcome {
                    Decision::Ack => {}
                    Decision::Poison => add("Poisoned"),
                    // An outcome a later sqs-batch adds is reported, so it counts as retried.
                    _ => add("Retried"),
                }
            }
            RecordStatus::SkippedDeadline => add("SkippedDeadline"),
            // Only a worker that is stopping skips so; it counts them as released.
            RecordStatus::SkippedStopping => {}
            RecordStatus::SkippedAfter { .. } => add("SkippedAfterFailure"),
            // A status a later sqs-batch adds: counted among the records only.
            _ => {}
        }
    }
    std::array::from_fn(|i| (COUNT_METRICS[i], c[i] as f64))
}

/// The latency values of `chunk` (the 100 values a document may carry per metric): the
/// metrics that have any, with their values.
fn latency_chunk<'a>(inv: &'a Invocation<'_>, chunk: usize) -> Vec<(&'static str, &'a [f64])> {
    [&inv.store, &inv.payment]
        .into_iter()
        .zip(LATENCY_METRICS)
        .filter_map(|(snapshot, name)| {
            let values = snapshot.values_ms.chunks(MAX_VALUES).nth(chunk)?;
            Some((name, values))
        })
        .collect()
}

/// The document's root: the directives' dimensions and the `level` Lambda's filter needs.
fn root(settings: &MetricsSettings, inv: &Invocation<'_>, directives: Value) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert(
        "_aws".into(),
        json!({ "Timestamp": inv.timestamp_ms, "CloudWatchMetrics": directives }),
    );
    doc.insert("service".into(), settings.service.clone().into());
    doc.insert("FunctionName".into(), settings.function_name.clone().into());
    doc.insert(
        "ExecutedVersion".into(),
        settings.function_version.clone().into(),
    );
    if let Some(level) = settings.level {
        doc.insert("level".into(), level.into());
    }
    doc.insert("QueueName".into(), queue_name(inv.queue_arn).into());
    doc.insert("QueueKind".into(), inv.kind.as_str().into());
    doc
}

/// The EMF document for one invocation, as one line of JSON. Each store and payment call's
/// latency is a value of `StoreLatency` / `PaymentLatency` (an EMF value array), the first
/// [`MAX_VALUES`] here and the rest in [`latency_documents`].
pub fn document(settings: &MetricsSettings, inv: &Invocation<'_>) -> String {
    let mut metrics: Vec<(&str, &str, Value)> = counts(inv.report)
        .into_iter()
        .map(|(name, value)| (name, "Count", value.into()))
        .collect();
    metrics.extend([
        ("InvocationDuration", "Milliseconds", inv.duration_ms.into()),
        ("StoreCalls", "Count", (inv.store.calls() as f64).into()),
        ("PaymentCalls", "Count", (inv.payment.calls() as f64).into()),
        (
            "PaymentKeyRefreshes",
            "Count",
            (inv.key_refreshes as f64).into(),
        ),
        (
            "RedrivePolicyMismatch",
            "Count",
            f64::from(u8::from(inv.redrive_mismatch)).into(),
        ),
    ]);
    // A metric with no call this invocation is left out: EMF has no empty value array.
    for (name, values) in latency_chunk(inv, 0) {
        metrics.push((name, "Milliseconds", values.into()));
    }
    debug_assert!(metrics.len() <= MAX_METRICS);
    let definitions: Vec<Value> = metrics
        .iter()
        .map(|(name, unit, _)| json!({ "Name": name, "Unit": unit }))
        .collect();
    // The same values again, per version: a second directive names them (EMF reads each value
    // once, from the document's root, for every directive that lists it).
    let per_version: Vec<Value> = VERSION_METRICS
        .iter()
        .map(|name| json!({ "Name": name, "Unit": "Count" }))
        .collect();
    let directives = json!([{
        "Namespace": settings.namespace,
        "Dimensions": [DIMENSIONS],
        "Metrics": definitions,
    }, {
        "Namespace": settings.namespace,
        "Dimensions": [VERSION_DIMENSIONS],
        "Metrics": per_version,
    }]);
    let mut doc = root(settings, inv, directives);
    for (name, _, value) in metrics {
        doc.insert(name.into(), value);
    }
    Value::Object(doc).to_string()
}

/// The latencies beyond the first [`MAX_VALUES`] of each kind, [`MAX_VALUES`] a document, with
/// the same dimensions and timestamp as [`document`]: none for a batch of SQS's default size.
pub fn latency_documents(settings: &MetricsSettings, inv: &Invocation<'_>) -> Vec<String> {
    (1..)
        .map(|chunk| latency_chunk(inv, chunk))
        .take_while(|metrics| !metrics.is_empty())
        .map(|metrics| {
            let definitions: Vec<Value> = metrics
                .iter()
                .map(|(name, _)| json!({ "Name": name, "Unit": "Milliseconds" }))
                .collect();
            let directives = json!([{
                "Namespace": settings.namespace,
                "Dimensions": [DIMENSIONS],
                "Metrics": definitions,
            }]);
            let mut doc = root(settings, inv, directives);
            for (name, values) in metrics {
                doc.insert(name.into(), values.into());
            }
            Value::Object(doc).to_string()
        })
        .collect()
}

/// The cold start's own EMF document, written once per container at its first invocation, as
/// Powertools for AWS Lambda writes it: `ColdStart` = 1 with the dimensions `function_name` and
/// `service`, so Powertools' cold-start dashboards and queries read it unchanged. A metric that
/// is 0 on every warm invocation would only cost data points.
pub fn cold_start_document(settings: &MetricsSettings, timestamp_ms: u64) -> String {
    let mut doc = json!({
        "_aws": {
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": settings.namespace,
                "Dimensions": [["function_name", "service"]],
                "Metrics": [{ "Name": "ColdStart", "Unit": "Count" }],
            }],
        },
        "function_name": settings.function_name,
        "service": settings.service,
        "ColdStart": 1,
    });
    if let Some(level) = settings.level {
        doc["level"] = level.into();
    }
    doc.to_string()
}

/// Where the documents are written.
#[derive(Debug, Clone)]
pub enum MetricsSink {
    /// Lambda: stdout goes to CloudWatch Logs, which extracts the metrics.
    Stdout,
    /// One-shot mode, where stdout carries the response.
    Stderr,
    /// Tests: kept in memory.
    Memory(std::sync::Arc<std::sync::Mutex<Vec<String>>>),
}

impl MetricsSink {
    /// Writes one document as one line (one write, so concurrent logs cannot split it).
    pub fn write(&self, document: &str) {
        use std::io::Write;
        let line = format!("{document}\n");
        // Metrics are best effort: a closed stream must not fail the batch.
        match self {
            Self::Stdout => drop(std::io::stdout().lock().write_all(line.as_bytes())),
            Self::Stderr => drop(std::io::stderr().lock().write_all(line.as_bytes())),
            Self::Memory(docs) => {
                if let Ok(mut docs) = docs.lock() {
                    docs.push(document.to_owned());
                }
            }
        }
    }
}
