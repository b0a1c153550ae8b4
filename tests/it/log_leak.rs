//! Logs leak nothing: bodies carrying a recognisable marker go through every path (charged,
//! invalid in each way, SNS envelopes, declined) and the marker never reaches the log output,
//! even at TRACE level.

use idempotency::MemoryStore;
use lambda_kit::clock::SystemClock;
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::logs::LogCapture;
use serde_json::json;

const MARKER: &str = "PII-MARKER-4711";

#[test]
fn bodies_never_reach_the_logs() {
    let (captured, _guard) = LogCapture::start();

    let bodies = [
        json!({ "order_id": "o-1", "amount": 10, "customer": MARKER }).to_string(),
        json!({ "order_id": "o-2", "amount": MARKER }).to_string(),
        json!({ "amount": 1, "name": MARKER }).to_string(),
        json!({ "order_id": "o-3", "amount": -1, "card": MARKER }).to_string(),
        format!("{MARKER} is not json"),
        format!(r#"{{"order_id": "o-4", "amount": 1, "{MARKER}": 1, "{MARKER}": 2}}"#),
        json!(MARKER).to_string(),
        json!({ "Type": "Notification", "Message": format!("{MARKER} not json") }).to_string(),
        json!({ "Type": "Notification", "Message": json!({ "order_id": "o-5", "amount": MARKER }).to_string() }).to_string(),
        json!({ "order_id": "o-6", "amount": 2_000_000, "customer": MARKER }).to_string(),
    ];
    let records: Vec<_> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| json!({ "messageId": format!("m{i}"), "body": body }))
        .collect();
    let event = json!({ "Records": records }).to_string();

    let config = Config::from_lookup(|_| None).unwrap();
    let app = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let response = runtime.block_on(app.handle_json(&event, u64::MAX)).unwrap();
    // Charged: the first, and the one whose duplicated keys are unknown fields (ignored).
    assert_eq!(response.batch_item_failures.len(), bodies.len() - 2);

    let logs = captured.text();
    assert!(
        logs.contains("record not acknowledged"),
        "the capture works: {logs}"
    );
    assert!(
        !logs.contains(MARKER),
        "a body leaked into the logs:\n{logs}"
    );
}
