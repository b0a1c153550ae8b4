//! The retry schedule as the real binary asks SQS for it: the one-shot binary, configured as
//! `template.yaml` ships it, runs a batch whose payments cannot be sent at every receive count
//! up to the one where a record gives up, against a local server that speaks SQS's JSON protocol
//! and records every `ChangeMessageVisibilityBatch`. Each visibility asked for lies in
//! [bound/2, bound], none is over 15 minutes, and the smallest ones add up to the day the
//! template promises.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use serde_json::{Value, json};

/// Visibility timeouts asked for, per call.
type Recorded = Arc<Mutex<Vec<Vec<u64>>>>;

/// A local SQS that answers `ChangeMessageVisibilityBatch` (every entry applied) and records
/// what it was asked; any other action is refused.
async fn recording_sqs() -> (String, Recorded) {
    let recorded: Recorded = Arc::default();
    let seen = Arc::clone(&recorded);
    let app = Router::new().route(
        "/",
        post(move |headers: HeaderMap, body: String| {
            let seen = Arc::clone(&seen);
            async move {
                let target = headers
                    .get("x-amz-target")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let request: Value = serde_json::from_str(&body).unwrap_or_default();
                if target != "AmazonSQS.ChangeMessageVisibilityBatch" {
                    return (
                        axum::http::StatusCode::BAD_REQUEST,
                        json!({ "__type": "InvalidAction", "message": target }).to_string(),
                    );
                }
                let entries = request["Entries"].as_array().cloned().unwrap_or_default();
                seen.lock().unwrap().push(
                    entries
                        .iter()
                        .filter_map(|e| e["VisibilityTimeout"].as_u64())
                        .collect(),
                );
                let ok: Vec<Value> = entries.iter().map(|e| json!({ "Id": e["Id"] })).collect();
                (
                    axum::http::StatusCode::OK,
                    json!({ "Successful": ok, "Failed": [] }).to_string(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), recorded)
}

fn template_default(name: &str) -> String {
    let template: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml"))
            .expect("template"),
    )
    .expect("YAML");
    let value = &template["Parameters"][name]["Default"];
    value
        .as_u64()
        .map(|n| n.to_string())
        .or_else(|| value.as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("{name} default"))
}

/// Ten valid orders, all at receive `n`.
fn event(n: u32) -> String {
    let records: Vec<Value> = (0..10)
        .map(|i| {
            json!({
                "messageId": format!("m{i}"),
                "receiptHandle": format!("rh-{i}"),
                "body": json!({ "order_id": format!("o-{i}"), "amount": 10 }).to_string(),
                "attributes": { "ApproximateReceiveCount": n.to_string() },
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            })
        })
        .collect();
    json!({ "Records": records }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_asks_sqs_for_the_shipped_schedule_at_every_receive() {
    let (sqs, recorded) = recording_sqs().await;
    let payments = process_orders::testkit::payment_stub::refusing_endpoint();
    let max_receive_count: u32 = template_default("MaxReceiveCount").parse().expect("count");
    let base: u64 = template_default("BackoffBaseSeconds")
        .parse()
        .expect("base");
    let cap: u64 = template_default("BackoffCapSeconds").parse().expect("cap");
    let vars = [
        (
            "SQS_BATCH_VISIBILITY_BACKOFF",
            template_default("VisibilityBackoff"),
        ),
        ("SQS_BATCH_BACKOFF_BASE_SECONDS", base.to_string()),
        ("SQS_BATCH_BACKOFF_CAP_SECONDS", cap.to_string()),
        ("SQS_BATCH_MAX_RECEIVE_COUNT", max_receive_count.to_string()),
        (
            "SQS_BATCH_RETRY_SURVIVAL_HOURS",
            template_default("RetrySurvivalHours"),
        ),
        ("PAYMENT_API_URL", payments),
        ("METRICS_ENABLED", "false".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ENDPOINT_URL", sqs),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test".to_owned()),
        ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
    ];
    // Every receive before the one where a record gives up (MaxReceiveCount - 1).
    let last_retry = max_receive_count - 2;
    let mut least_total = 0;
    for n in 1..=last_retry {
        let before = recorded.lock().unwrap().len();
        let vars = vars.clone();
        let output = tokio::task::spawn_blocking(move || {
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
                .args(["--event", "-"])
                .env_clear()
                .envs(vars)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn");
            std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), event(n).as_bytes())
                .expect("event");
            child.wait_with_output().expect("wait")
        })
        .await
        .expect("binary");
        assert!(
            output.status.success(),
            "receive {n}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let calls = recorded.lock().unwrap()[before..].to_vec();
        let asked: Vec<u64> = calls.into_iter().flatten().collect();
        assert_eq!(asked.len(), 10, "receive {n}: every record backed off");
        let bound = (base << (n - 1).min(40)).min(cap);
        let (least, most) = (
            *asked.iter().min().expect("min"),
            *asked.iter().max().expect("max"),
        );
        assert!(
            least >= bound / 2 && most <= bound,
            "receive {n}: asked {least}..{most}, outside [{}, {bound}]",
            bound / 2
        );
        assert!(most <= 900, "receive {n}: {most} s is over 15 minutes");
        least_total += least;
    }
    let hours: u64 = template_default("RetrySurvivalHours")
        .parse()
        .expect("hours");
    assert!(
        least_total >= hours * 3_600,
        "the smallest delays asked for add up to {least_total} s, under {hours} h"
    );
    eprintln!(
        "{last_retry} receives: the smallest delays asked for add up to {least_total} s ({:.2} h)",
        least_total as f64 / 3_600.0
    );
}
