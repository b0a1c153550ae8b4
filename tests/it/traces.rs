//! Traces over OTLP/HTTP: the real binary, a local OTLP receiver, and the span tree of one batch
//! (its parents, its links to the producers' traces, its attributes).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};

/// Lambda's X-Ray context for the invocation, as lambda_runtime puts it in the environment.
const LAMBDA_TRACE: &str =
    "Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8;Sampled=1";
/// The producer's trace, as SQS carries it in the record's `AWSTraceHeader`.
const PRODUCER_TRACE: &str =
    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=1234567890abcdef;Sampled=1";

/// A local OTLP/HTTP receiver: every request body it got.
async fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route(
            "/v1/traces",
            post(
                |State(received): State<Arc<Mutex<Vec<Value>>>>, body: String| async move {
                    let value: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                    received.lock().expect("lock").push(value);
                    "{}"
                },
            ),
        )
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/v1/traces"), received)
}

fn record(id: &str, body: &str, trace_header: Option<&str>) -> Value {
    let mut attributes = json!({
        "ApproximateReceiveCount": "1",
        "SentTimestamp": "1767225600000",
        "ApproximateFirstReceiveTimestamp": "1767225600012"
    });
    if let Some(header) = trace_header {
        attributes["AWSTraceHeader"] = header.into();
    }
    json!({
        "messageId": id,
        "receiptHandle": format!("rh-{id}"),
        "body": body,
        "attributes": attributes,
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        "awsRegion": "us-east-1"
    })
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

/// One batch of a valid order (from a traced producer) and a body that is not an order: the
/// spans form one tree under Lambda's segment, each record links to its producer, and each call
/// is a child of the order it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_is_one_tree_of_spans_linked_to_its_producers() {
    let (endpoint, received) = receiver().await;
    let event = json!({
        "Records": [
            record("m-1", r#"{"order_id": "o-1", "amount": 10}"#, Some(PRODUCER_TRACE)),
            record("m-2", "not an order", None),
        ]
    })
    .to_string();
    let path = std::env::temp_dir().join(format!("traces-{}.json", std::process::id()));
    std::fs::write(&path, event).expect("event file");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
        .args(["--event", path.to_str().expect("a path")])
        .env_clear()
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)
        .env("_X_AMZN_TRACE_ID", LAMBDA_TRACE)
        .output()
        .await
        .expect("the binary runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let requests = received.lock().expect("lock").clone();
    assert_eq!(requests.len(), 1, "one export at the end of the invocation");
    let request = &requests[0];
    let resource = &request["resourceSpans"][0];
    assert_eq!(
        resource["resource"]["attributes"][0],
        json!({ "key": "service.name", "value": { "stringValue": "process-orders" } })
    );
    let spans = resource["scopeSpans"][0]["spans"]
        .as_array()
        .expect("spans")
        .clone();
    let by_id: HashMap<&str, &Value> = spans
        .iter()
        .map(|s| (s["spanId"].as_str().expect("spanId"), s))
        .collect();
    let named =
        |name: &str| -> Vec<&Value> { spans.iter().filter(|s| s["name"] == name).collect() };
    let parent_name = |span: &Value| -> String {
        let parent = span["parentSpanId"].as_str().expect("a parent");
        by_id.get(parent).map_or("(Lambda)".into(), |p| {
            p["name"].as_str().expect("a name").to_owned()
        })
    };
    // The tree, as text, for the failure message and the docs.
    let tree: Vec<String> = spans
        .iter()
        .map(|s| format!("{} <- {}", s["name"], parent_name(s)))
        .collect();

    // One trace: Lambda's, and the batch is a child of Lambda's own segment.
    for span in &spans {
        assert_eq!(
            span["traceId"], "67891233abcdef012345678912345678",
            "{tree:#?}"
        );
    }
    let batch = named("batch");
    assert_eq!(batch.len(), 1, "{tree:#?}");
    assert_eq!(batch[0]["parentSpanId"], "53995c3f42cd8ad8");
    assert_eq!(batch[0]["kind"], 5, "the queue's consumer");

    // A span per record, each a child of the batch, with its decision.
    let records = named("record");
    assert_eq!(records.len(), 2, "{tree:#?}");
    let record_of = |message_id: &str| {
        *records
            .iter()
            .find(|r| attribute(r, "message_id") == Some(message_id))
            .expect("the record's span")
    };
    let charged = record_of("m-1");
    let poison = record_of("m-2");
    for record in [charged, poison] {
        assert_eq!(parent_name(record), "batch", "{tree:#?}");
    }
    assert_eq!(attribute(charged, "key"), Some("o-1"));
    assert_eq!(attribute(charged, "outcome"), Some("ack"));
    assert_eq!(attribute(charged, "reason"), Some("charged"));
    assert_eq!(attribute(poison, "outcome"), Some("poison"));
    assert_eq!(attribute(poison, "reason"), Some("invalid_body"));
    // Linked to the producer's trace; a record without a header has no link.
    assert_eq!(
        charged["links"],
        json!([{ "traceId": "5759e988bd862e3fe1be46a994272793", "spanId": "1234567890abcdef" }])
    );
    assert_eq!(poison["links"], json!([]));

    // The order's span under its record, and each call under the order.
    let order = named("order");
    assert_eq!(order.len(), 1, "only the valid order: {tree:#?}");
    assert_eq!(order[0]["parentSpanId"], charged["spanId"]);
    assert_eq!(attribute(order[0], "order_id"), Some("o-1"));
    for call in ["store.begin", "payment.charge", "store.complete"] {
        let spans = named(call);
        assert_eq!(spans.len(), 1, "{call}: {tree:#?}");
        assert_eq!(spans[0]["parentSpanId"], order[0]["spanId"], "{call}");
        assert_eq!(spans[0]["kind"], 3, "{call} is a client call");
        let start: u128 = spans[0]["startTimeUnixNano"]
            .as_str()
            .expect("start")
            .parse()
            .expect("nanoseconds");
        let end: u128 = spans[0]["endTimeUnixNano"]
            .as_str()
            .expect("end")
            .parse()
            .expect("nanoseconds");
        assert!(start <= end, "{call}");
    }
    eprintln!("the span tree of one batch:\n{}", tree.join("\n"));
}

/// Lambda's sampling decision holds: an invocation whose X-Ray segment is not sampled
/// (`Sampled=0`) exports no spans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_invocation_exports_nothing() {
    let (endpoint, received) = receiver().await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
        .args([
            "--event",
            concat!(env!("CARGO_MANIFEST_DIR"), "/events/standard.json"),
        ])
        .env_clear()
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)
        .env(
            "_X_AMZN_TRACE_ID",
            LAMBDA_TRACE.replace("Sampled=1", "Sampled=0"),
        )
        .output()
        .await
        .expect("the binary runs");
    assert!(output.status.success());
    assert!(received.lock().expect("lock").is_empty());
}
