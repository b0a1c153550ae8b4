//! The EMF metrics document: checked against the Embedded Metric Format specification's rules
//! and against what the invocations did.

use std::sync::{Arc, Mutex};

use idempotency::MemoryStore;
use lambda_kit::clock::{Clock, ManualClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::metrics::MetricsSink;
use process_orders::payment::SimulatedGateway;
use serde_json::Value;

type TestApp = App<MemoryStore, SimulatedGateway, ManualClock>;
type Docs = Arc<Mutex<Vec<String>>>;
type Mutation = fn(&mut Value);

/// The units the EMF specification allows.
const UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// Every rule of the EMF specification a document can break; returns the first broken one.
fn check_emf(doc: &Value) -> Result<(), String> {
    let root = doc.as_object().ok_or("the document is not a JSON object")?;
    let aws = root
        .get("_aws")
        .and_then(Value::as_object)
        .ok_or("no _aws object")?;
    let ts = aws
        .get("Timestamp")
        .and_then(Value::as_u64)
        .ok_or("_aws.Timestamp is not a non-negative integer")?;
    if ts < 1_000_000_000_000 {
        return Err(format!("_aws.Timestamp {ts} is not epoch milliseconds"));
    }
    let directives = aws
        .get("CloudWatchMetrics")
        .and_then(Value::as_array)
        .ok_or("_aws.CloudWatchMetrics is not an array")?;
    if directives.is_empty() {
        return Err("no metric directive".into());
    }
    for d in directives {
        let ns = d
            .get("Namespace")
            .and_then(Value::as_str)
            .ok_or("a directive has no Namespace string")?;
        if ns.is_empty() || ns.len() > 255 {
            return Err(format!("Namespace {ns:?} must be 1-255 characters"));
        }
        let sets = d
            .get("Dimensions")
            .and_then(Value::as_array)
            .ok_or("Dimensions is not an array")?;
        for set in sets {
            let set = set.as_array().ok_or("a dimension set is not an array")?;
            if set.len() > 30 {
                return Err("a dimension set has more than 30 dimensions".into());
            }
            for name in set {
                let name = name.as_str().ok_or("a dimension name is not a string")?;
                match root.get(name) {
                    Some(Value::String(v)) if !v.is_empty() && v.len() <= 1024 => {}
                    _ => return Err(format!("dimension {name} has no string value at the root")),
                }
            }
        }
        let metrics = d
            .get("Metrics")
            .and_then(Value::as_array)
            .ok_or("Metrics is not an array")?;
        if metrics.len() > 100 {
            return Err(format!(
                "{} metrics in one directive (at most 100)",
                metrics.len()
            ));
        }
        let mut names = std::collections::HashSet::new();
        for m in metrics {
            let name = m
                .get("Name")
                .and_then(Value::as_str)
                .ok_or("a metric has no Name")?;
            if name.is_empty() || name.len() > 255 || !names.insert(name) {
                return Err(format!(
                    "metric name {name:?} is empty, too long or repeated"
                ));
            }
            if let Some(unit) = m.get("Unit") {
                let unit = unit.as_str().ok_or("a Unit is not a string")?;
                if !UNITS.contains(&unit) {
                    return Err(format!("unit {unit:?} of {name} is not an EMF unit"));
                }
            }
            if let Some(res) = m.get("StorageResolution")
                && res != 1
                && res != 60
            {
                return Err(format!("StorageResolution of {name} must be 1 or 60"));
            }
            match root.get(name) {
                Some(Value::Number(_)) => {}
                Some(Value::Array(values))
                    if values.len() <= 100 && values.iter().all(Value::is_number) => {}
                _ => return Err(format!("metric {name} has no numeric value at the root")),
            }
        }
    }
    Ok(())
}

fn app(vars: &'static [(&'static str, &'static str)], clock: &ManualClock) -> (TestApp, Docs) {
    let config = Config::from_lookup(|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    })
    .expect("config");
    let docs = Arc::new(Mutex::new(Vec::new()));
    let app = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        clock.clone(),
    )
    .with_metrics_sink(MetricsSink::Memory(Arc::clone(&docs)));
    (app, docs)
}

fn event(records: &[(&str, &str)]) -> String {
    let records: Vec<Value> = records
        .iter()
        .map(|(id, body)| {
            serde_json::json!({
                "messageId": id, "body": body, "attributes": {"ApproximateReceiveCount": "1"},
                "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:orders-queue",
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

const LAMBDA: &[(&str, &str)] = &[
    ("AWS_LAMBDA_FUNCTION_NAME", "orders-fn"),
    ("PROCESS_ORDERS_LOCAL", "1"),
    ("POWERTOOLS_METRICS_NAMESPACE", "Orders/Test"),
    ("POWERTOOLS_SERVICE_NAME", "payments"),
];

#[tokio::test]
async fn one_valid_emf_document_per_invocation_counts_what_happened() {
    let clock = ManualClock::at(1_767_225_600_000);
    let (app, docs) = app(LAMBDA, &clock);
    let deadline = clock.now_ms() + 60_000;
    let first = event(&[
        ("m1", r#"{"order_id":"o-1","amount":10}"#),
        ("m2", r#"{"order_id":"o-2","amount":20}"#),
        ("m3", "not json"),
        ("m4", r#"{"order_id":"o-3","amount":5000000}"#),
    ]);
    app.handle_json(&first, deadline).await.expect("first");
    let second = event(&[
        ("m5", r#"{"order_id":"o-1","amount":10}"#),
        ("m6", r#"{"order_id":"o-2","amount":99}"#),
    ]);
    app.handle_json(&second, deadline).await.expect("second");

    let all = docs.lock().expect("lock").clone();
    // The container's first invocation is its cold start: one more document, Powertools' own.
    let (cold, docs): (Vec<String>, Vec<String>) =
        all.into_iter().partition(|line| line.contains("ColdStart"));
    assert_eq!(docs.len(), 2, "one document per invocation");
    assert_eq!(cold.len(), 1, "one cold start per container");
    let cold: Value = serde_json::from_str(&cold[0]).expect("JSON");
    check_emf(&cold).unwrap_or_else(|e| panic!("{e}: {cold}"));
    assert_eq!(
        cold["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        serde_json::json!([["function_name", "service"]])
    );
    assert_eq!(
        cold["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "Orders/Test"
    );
    assert_eq!(cold["function_name"], "orders-fn");
    assert_eq!(cold["service"], "payments");
    assert_eq!(cold["ColdStart"], 1);
    for line in &docs {
        assert!(!line.contains('\n'), "a document is one line");
        let doc: Value = serde_json::from_str(line).expect("JSON");
        check_emf(&doc).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "Orders/Test"
        );
        assert_eq!(doc["_aws"]["Timestamp"], 1_767_225_600_000_u64);
        // The dimension as Powertools for AWS Lambda writes it, so its dashboards find these.
        assert_eq!(doc["service"], "payments");
        assert!(doc.get("Service").is_none(), "no second spelling");
        assert_eq!(doc["FunctionName"], "orders-fn");
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0],
            serde_json::json!(process_orders::metrics::DIMENSIONS)
        );
        assert_eq!(doc["QueueName"], "orders-queue");
        assert_eq!(doc["QueueKind"], "standard");
    }
    let first: Value = serde_json::from_str(&docs[0]).expect("JSON");
    let expect = |doc: &Value, name: &str, value: f64| {
        assert_eq!(doc[name].as_f64(), Some(value), "{name} in {doc}");
    };
    assert!(
        first["ColdStart"].is_null(),
        "ColdStart only in its own document"
    );
    expect(&first, "Records", 4.0);
    expect(&first, "Charged", 2.0);
    expect(&first, "Poisoned", 2.0);
    expect(&first, "Retried", 0.0);
    // Two charged orders claim and complete (4 store calls); the declined one claims and
    // releases (2); the bad body never reaches the store.
    expect(&first, "StoreCalls", 6.0);
    expect(&first, "PaymentCalls", 3.0);
    // Each call's latency is one value of an EMF value array, so CloudWatch gives percentiles
    // over calls.
    let values = |doc: &Value, name: &str| -> Vec<f64> {
        doc[name]
            .as_array()
            .unwrap_or_else(|| panic!("{name} is a value array in {doc}"))
            .iter()
            .map(|v| v.as_f64().expect("a number"))
            .collect()
    };
    assert_eq!(values(&first, "StoreLatency").len(), 6);
    assert_eq!(values(&first, "PaymentLatency").len(), 3);
    assert!(values(&first, "StoreLatency").iter().all(|ms| *ms >= 0.0));
    let defined = |doc: &Value, name: &str| {
        doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .any(|m| m["Name"] == name && m["Unit"] == "Milliseconds")
    };
    assert!(defined(&first, "StoreLatency") && defined(&first, "PaymentLatency"));
    assert!(first["InvocationDuration"].as_f64().expect("duration") >= 0.0);
    let second: Value = serde_json::from_str(&docs[1]).expect("JSON");
    expect(&second, "Duplicates", 1.0);
    expect(&second, "Conflicts", 1.0);
    expect(&second, "Charged", 0.0);
    // The duplicate's claim and the conflict's (1 each): a refused claim reads nothing more.
    expect(&second, "StoreCalls", 2.0);
    expect(&second, "PaymentCalls", 0.0);
    assert_eq!(values(&second, "StoreLatency").len(), 2);
    // No payment call: no empty array, and no definition without a value.
    assert!(second.get("PaymentLatency").is_none() && !defined(&second, "PaymentLatency"));
}

/// More calls than one EMF metric may carry values (100): the rest go in further documents,
/// each valid on its own, and every call is written exactly once.
#[test]
fn latencies_beyond_a_hundred_go_in_further_documents() {
    use process_orders::metrics::{self, Invocation, LatencySnapshot, MetricsSettings};
    let settings = MetricsSettings {
        namespace: "Orders/Test".into(),
        service: "payments".into(),
        function_name: "orders-fn".into(),
        function_version: "3".into(),
        level: None,
    };
    let report =
        sqs_batch::processor::BatchReport::new(sqs_batch::edge::QueueKind::Standard, Vec::new());
    let store: Vec<f64> = (0..250).map(f64::from).collect();
    let invocation = Invocation {
        report: &report,
        queue_arn: Some("arn:aws:sqs:us-east-1:123456789012:orders"),
        kind: sqs_batch::edge::QueueKind::Standard,
        timestamp_ms: 1_767_225_600_000,
        duration_ms: 1.0,
        store: LatencySnapshot {
            values_ms: store.clone(),
        },
        payment: LatencySnapshot {
            values_ms: vec![7.5; 30],
        },
        key_refreshes: 0,
        redrive_mismatch: false,
    };
    let mut docs = vec![metrics::document(&settings, &invocation)];
    docs.extend(metrics::latency_documents(&settings, &invocation));
    assert_eq!(docs.len(), 3, "100 + 100 + 50 store values");
    let (mut seen_store, mut seen_payment) = (Vec::new(), Vec::new());
    for line in &docs {
        let doc: Value = serde_json::from_str(line).expect("JSON");
        check_emf(&doc).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(doc["service"], "payments");
        assert_eq!(doc["_aws"]["Timestamp"], 1_767_225_600_000_u64);
        let take = |name: &str| -> Vec<f64> {
            doc[name]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_f64().expect("a number")).collect())
                .unwrap_or_default()
        };
        seen_store.extend(take("StoreLatency"));
        seen_payment.extend(take("PaymentLatency"));
    }
    assert_eq!(seen_store, store);
    assert_eq!(seen_payment, vec![7.5; 30]);
}

#[tokio::test]
async fn metrics_can_be_turned_off() {
    const OFF: &[(&str, &str)] = &[("METRICS_ENABLED", "false")];
    let clock = ManualClock::at(1_767_225_600_000);
    let (app, docs) = app(OFF, &clock);
    app.handle_json(
        &event(&[("m1", r#"{"order_id":"o-1","amount":10}"#)]),
        clock.now_ms() + 60_000,
    )
    .await
    .expect("handled");
    assert!(docs.lock().expect("lock").is_empty());
}

#[test]
fn the_checker_rejects_what_the_specification_forbids() {
    let good = serde_json::json!({
        "_aws": {"Timestamp": 1_767_225_600_000_u64, "CloudWatchMetrics": [{
            "Namespace": "N", "Dimensions": [["D"]], "Metrics": [{"Name": "M", "Unit": "Count"}]}]},
        "D": "d", "M": 1
    });
    assert_eq!(check_emf(&good), Ok(()));
    let broken: [(&str, Mutation); 6] = [
        ("no _aws", |d| {
            d.as_object_mut().unwrap().remove("_aws");
        }),
        ("bad unit", |d| {
            d["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] = "Requests".into()
        }),
        ("dimension value missing", |d| {
            d.as_object_mut().unwrap().remove("D");
        }),
        ("metric value not a number", |d| d["M"] = "1".into()),
        ("seconds timestamp", |d| {
            d["_aws"]["Timestamp"] = 1_767_225_600_u64.into()
        }),
        ("101 metrics", |d| {
            let metrics: Vec<Value> = (0..101)
                .map(|i| serde_json::json!({"Name": format!("M{i}")}))
                .collect();
            for i in 0..101 {
                d[format!("M{i}")] = 1.into();
            }
            d["_aws"]["CloudWatchMetrics"][0]["Metrics"] = metrics.into();
        }),
    ];
    for (what, mutate) in broken {
        let mut doc = good.clone();
        mutate(&mut doc);
        assert!(check_emf(&doc).is_err(), "{what} was accepted");
    }
}

/// The EMF example in docs/operations.md is what the one-shot run writes for
/// `events/fifo.json`: the same documents, keys, directives and dimension values, each metric
/// a number or a value array as there (the values and the timestamp are that run's).
#[test]
fn the_operations_page_shows_what_the_code_writes() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    let start = page
        .find("```json\n{\"Busy\"")
        .expect("the EMF example's block")
        + "```json\n".len();
    let block = &page[start..start + page[start..].find("```").expect("its end")];
    let shown: Vec<Value> = serde_json::Deserializer::from_str(block)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .expect("the example is JSON documents");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
        .args([
            "--event",
            concat!(env!("CARGO_MANIFEST_DIR"), "/events/fifo.json"),
        ])
        .env_clear()
        .output()
        .expect("the one-shot run");
    assert!(output.status.success());
    let written: Vec<Value> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.contains("\"_aws\""))
        .map(|line| serde_json::from_str(line).expect("a document"))
        .collect();
    assert_eq!(shown.len(), written.len(), "one example per document");
    // Everything but the numbers and the timestamp, which are the run's own.
    fn shape(value: &Value) -> Value {
        match value {
            Value::Number(_) => "a number".into(),
            Value::Array(items) if items.iter().all(Value::is_number) && !items.is_empty() => {
                "numbers".into()
            }
            Value::Array(items) => items.iter().map(shape).collect(),
            Value::Object(fields) => fields
                .iter()
                .filter(|(key, _)| *key != "Timestamp")
                .map(|(key, value)| (key.clone(), shape(value)))
                .collect::<serde_json::Map<_, _>>()
                .into(),
            other => other.clone(),
        }
    }
    for (shown, written) in shown.iter().zip(&written) {
        assert_eq!(shape(shown), shape(written));
    }
}
