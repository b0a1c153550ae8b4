//! The real binary under a local Lambda Runtime API with Lambda's JSON log format at
//! `AWS_LAMBDA_LOG_LEVEL=WARN`, the level production often runs at: Lambda drops every line
//! whose `level` is below it, and reads a line without one as INFO.

use process_orders::testkit::runtime_api::{FUNCTION_ARN, REQUEST_ID, RuntimeApi};
use serde_json::{Value, json};

/// One valid order and one POISON (a negative amount). What reaches CloudWatch at WARN: no INFO
/// line; the WARN line about the poison carries the request id, the trace's root id, the
/// function's ARN and memory size as Powertools writes them, and the order and message ids; and
/// every metric document carries `"level": "WARN"`, so Lambda keeps it and the metrics (and
/// their alarms) do not go silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_warn_the_lines_keep_their_context_and_the_metrics_their_level() {
    let api = RuntimeApi::start().await;
    let record = |id: &str, body: Value| {
        json!({
            "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body.to_string(),
            "attributes": { "ApproximateReceiveCount": "1" },
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        })
    };
    let event = json!({ "Records": [
        record("m-ok", json!({ "order_id": "o-1", "amount": 10 })),
        record("m-bad", json!({ "order_id": "o-2", "amount": -1 })),
    ]});
    let served = api
        .serve_one(
            env!("CARGO_BIN_EXE_process-orders"),
            &[
                ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
                ("AWS_LAMBDA_LOG_LEVEL", "WARN"),
                ("PROCESS_ORDERS_LOCAL", "1"),
            ],
            &event.to_string(),
        )
        .await;
    // `make test -- --nocapture` shows what the log stream receives.
    eprintln!("{}", served.stdout);
    let answer: Value =
        serde_json::from_str(served.answer.as_deref().expect("answered")).expect("response JSON");
    assert_eq!(
        answer["batchItemFailures"],
        json!([{ "itemIdentifier": "m-bad" }])
    );
    let lines: Vec<Value> = served
        .stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    for line in &lines {
        assert!(
            matches!(line["level"].as_str(), Some("WARN" | "ERROR")),
            "a line Lambda would drop at WARN: {line}"
        );
    }
    let metrics: Vec<&Value> = lines.iter().filter(|l| !l["_aws"].is_null()).collect();
    assert_eq!(metrics.len(), 2, "the invocation's and the cold start's");
    assert!(
        metrics.iter().any(|doc| doc["Records"] == 2.0),
        "{metrics:?}"
    );
    let poison = lines
        .iter()
        .find(|l| l["message_id"] == "m-bad" && l["_aws"].is_null())
        .unwrap_or_else(|| panic!("the poison's WARN line: {}", served.stdout));
    assert_eq!(poison["order_id"], "o-2", "{poison}");
    assert_eq!(poison["reason"], "invalid_body", "{poison}");
    assert_eq!(poison["function_request_id"], REQUEST_ID, "{poison}");
    assert_eq!(
        poison["xray_trace_id"], "1-5759e988-bd862e3fe1be46a994272793",
        "the root id, as Powertools writes it: {poison}"
    );
    assert_eq!(poison["function_arn"], FUNCTION_ARN, "{poison}");
    assert_eq!(poison["function_memory_size"], 1024, "a number: {poison}");
    assert_eq!(poison["function_name"], "bench", "{poison}");
    assert!(
        lines
            .iter()
            .any(|l| l["document_level"] == "WARN" && l["level"] == "WARN"),
        "the start-up notice: {}",
        served.stdout
    );
}
