//! Traces over OTLP/HTTP: the real binary, a local OTLP receiver, and the span tree of one batch
//! as OpenTelemetry's FaaS and messaging conventions name it (its names, kinds, parents, links
//! to the producers' traces, attributes and status), sent as the SDK's variables ask.

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

/// One request the receiver got: its `Content-Type`, its body, and its `x-api-key` header.
#[derive(Clone)]
struct Export {
    content_type: String,
    body: bytes::Bytes,
    api_key: Option<String>,
}

/// What the receiver got.
type Received = Arc<Mutex<Vec<Export>>>;

/// A local OTLP/HTTP receiver: every request it got.
async fn receiver() -> (String, Received) {
    let received: Received = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route(
            "/v1/traces",
            post(
                |State(received): State<Received>,
                 headers: axum::http::HeaderMap,
                 body: bytes::Bytes| async move {
                    let header = |name: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                    };
                    received.lock().expect("lock").push(Export {
                        content_type: header("content-type").unwrap_or_default(),
                        body,
                        api_key: header("x-api-key"),
                    });
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

/// The export as OTLP/JSON: as sent when it is JSON; decoded by OpenTelemetry's own generated
/// types (`scripts/otlp_decode.py`, `opentelemetry-proto` from PyPI) when it is protobuf, so the
/// hand-written encoding is checked against the protocol's definition.
fn decoded(export: &Export) -> Value {
    match export.content_type.as_str() {
        "application/json" => serde_json::from_slice(&export.body).expect("a JSON export"),
        "application/x-protobuf" => {
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/otlp_decode.py");
            let mut child = std::process::Command::new("python3")
                .arg(script)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("python3 (make test puts the venv's first on PATH)");
            std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &export.body)
                .expect("the body reaches the decoder");
            let output = child.wait_with_output().expect("the decoder ran");
            assert!(
                output.status.success(),
                "the protobuf export does not decode as an ExportTraceServiceRequest: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            serde_json::from_slice(&output.stdout).expect("the decoder's JSON")
        }
        other => panic!("an OTLP/HTTP export is protobuf or JSON, not {other:?}"),
    }
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

/// The tree below, sent as the SDK sends by default: OTLP/HTTP protobuf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_is_one_tree_of_spans_in_protobuf_by_default() {
    one_batch_is_one_tree_of_spans(None, "application/x-protobuf").await;
}

/// The same tree, as JSON when `OTEL_EXPORTER_OTLP_PROTOCOL` asks for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_batch_is_one_tree_of_spans_in_json_when_asked() {
    one_batch_is_one_tree_of_spans(Some("http/json"), "application/json").await;
}

/// One batch of a valid order (from a traced producer) and a body that is not an order: the
/// spans form one tree under Lambda's segment, each record links to its producer, and each call
/// is a child of the order it serves.
async fn one_batch_is_one_tree_of_spans(protocol: Option<&str>, content_type: &str) {
    let (endpoint, received) = receiver().await;
    let event = json!({
        "Records": [
            record("m-1", r#"{"order_id": "o-1", "amount": 10}"#, Some(PRODUCER_TRACE)),
            record("m-2", "not an order", None),
        ]
    })
    .to_string();
    let path = std::env::temp_dir().join(format!(
        "traces-{}-{}.json",
        std::process::id(),
        content_type.len()
    ));
    std::fs::write(&path, event).expect("event file");
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_process-orders"));
    command.env_clear();
    if let Some(protocol) = protocol {
        command.env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    }
    let output = command
        .args(["--event", path.to_str().expect("a path")])
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=k%3D1")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        .env("_X_AMZN_TRACE_ID", LAMBDA_TRACE)
        .env("AWS_LAMBDA_FUNCTION_NAME", "orders-fn")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "7")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_REGION", "eu-west-1")
        .env("PROCESS_ORDERS_LOCAL", "1")
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
    assert_eq!(requests[0].content_type, content_type);
    let request = &decoded(&requests[0]);
    assert_eq!(
        requests[0].api_key.as_deref(),
        Some("k=1"),
        "OTEL_EXPORTER_OTLP_HEADERS, decoded"
    );
    let resource = &request["resourceSpans"][0];
    let resource_attribute = |key: &str| {
        resource["resource"]["attributes"]
            .as_array()
            .expect("attributes")
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| a["value"].clone())
    };
    for (key, value) in [
        ("service.name", json!({ "stringValue": "process-orders" })),
        ("cloud.provider", json!({ "stringValue": "aws" })),
        ("cloud.platform", json!({ "stringValue": "aws_lambda" })),
        ("cloud.region", json!({ "stringValue": "eu-west-1" })),
        ("faas.name", json!({ "stringValue": "orders-fn" })),
        ("faas.version", json!({ "stringValue": "7" })),
        ("faas.max_memory", json!({ "intValue": "268435456" })),
        ("deployment.environment", json!({ "stringValue": "test" })),
    ] {
        assert_eq!(resource_attribute(key), Some(value), "resource {key}");
    }
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

    // One trace: Lambda's. The invocation (SERVER, named after the function) is a child of
    // Lambda's own segment, and the batch a child of the invocation.
    for span in &spans {
        assert_eq!(
            span["traceId"], "67891233abcdef012345678912345678",
            "{tree:#?}"
        );
    }
    let invocation = named("orders-fn");
    assert_eq!(invocation.len(), 1, "{tree:#?}");
    assert_eq!(invocation[0]["parentSpanId"], "53995c3f42cd8ad8");
    assert_eq!(invocation[0]["kind"], 2, "the function's server span");
    assert_eq!(attribute(invocation[0], "faas.trigger"), Some("pubsub"));
    assert_eq!(
        attribute(invocation[0], "faas.invocation_id"),
        Some("one-shot")
    );
    let processes = named("process orders");
    let batch: Vec<&Value> = processes
        .iter()
        .copied()
        .filter(|s| attribute(s, "messaging.message.id").is_none())
        .collect();
    assert_eq!(batch.len(), 1, "{tree:#?}");
    assert_eq!(batch[0]["parentSpanId"], invocation[0]["spanId"]);
    assert_eq!(batch[0]["kind"], 5, "the queue's consumer");
    assert_eq!(attribute(batch[0], "messaging.system"), Some("aws_sqs"));
    assert_eq!(
        attribute(batch[0], "messaging.operation.type"),
        Some("process")
    );
    assert_eq!(
        attribute(batch[0], "messaging.destination.name"),
        Some("orders")
    );
    assert!(
        batch[0]["attributes"]
            .as_array()
            .expect("attributes")
            .iter()
            .any(|a| a["key"] == "messaging.batch.message_count" && a["value"]["intValue"] == "2"),
        "{}",
        batch[0]
    );
    assert!(
        batch[0]["status"].is_null(),
        "a partial failure is not the batch's error"
    );

    // A span per record, each a child of the batch, with its decision and status.
    let records: Vec<&Value> = processes
        .iter()
        .copied()
        .filter(|s| attribute(s, "messaging.message.id").is_some())
        .collect();
    assert_eq!(records.len(), 2, "{tree:#?}");
    let record_of = |message_id: &str| {
        *records
            .iter()
            .find(|r| attribute(r, "messaging.message.id") == Some(message_id))
            .expect("the record's span")
    };
    let charged = record_of("m-1");
    let poison = record_of("m-2");
    for record in [charged, poison] {
        assert_eq!(record["parentSpanId"], batch[0]["spanId"], "{tree:#?}");
        assert_eq!(record["kind"], 5, "each message's processing");
        assert_eq!(
            attribute(record, "messaging.destination.name"),
            Some("orders")
        );
    }
    assert_eq!(attribute(charged, "process_orders.key"), Some("o-1"));
    assert_eq!(attribute(charged, "process_orders.outcome"), Some("ack"));
    assert_eq!(attribute(charged, "process_orders.reason"), Some("charged"));
    assert!(charged["status"].is_null(), "acknowledged: no error");
    assert_eq!(attribute(poison, "process_orders.outcome"), Some("poison"));
    assert_eq!(
        poison["status"],
        json!({ "code": 2, "message": "invalid_body" })
    );
    // Linked to the producer's trace; a record without a header has no link. The batch links to
    // every producer.
    // (Protobuf's JSON mapping leaves an empty list out.)
    let links = |span: &Value| span.get("links").cloned().unwrap_or_else(|| json!([]));
    let producer =
        json!([{ "traceId": "5759e988bd862e3fe1be46a994272793", "spanId": "1234567890abcdef" }]);
    assert_eq!(links(charged), producer);
    assert_eq!(links(poison), json!([]));
    assert_eq!(links(batch[0]), producer);

    // The order's span under its record, and each call under the order.
    let order = named("order");
    assert_eq!(order.len(), 1, "only the valid order: {tree:#?}");
    assert_eq!(order[0]["parentSpanId"], charged["spanId"]);
    assert_eq!(order[0]["kind"], 1);
    assert_eq!(attribute(order[0], "process_orders.order_id"), Some("o-1"));
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
    // Lambda did not sample it; or the SDK's sampler says no (OTEL_TRACES_SAMPLER); or the SDK
    // is off (OTEL_SDK_DISABLED).
    for (header, variable) in [
        (LAMBDA_TRACE.replace("Sampled=1", "Sampled=0"), None),
        (
            LAMBDA_TRACE.to_owned(),
            Some(("OTEL_TRACES_SAMPLER", "always_off")),
        ),
        (LAMBDA_TRACE.to_owned(), Some(("OTEL_SDK_DISABLED", "true"))),
    ] {
        let (endpoint, received) = receiver().await;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_process-orders"));
        command
            .args([
                "--event",
                concat!(env!("CARGO_MANIFEST_DIR"), "/events/standard.json"),
            ])
            .env_clear()
            .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint)
            .env("_X_AMZN_TRACE_ID", &header);
        if let Some((name, value)) = variable {
            command.env(name, value);
        }
        let output = command.output().await.expect("the binary runs");
        assert!(output.status.success());
        assert!(
            received.lock().expect("lock").is_empty(),
            "{header} {variable:?}"
        );
    }
}
