//! Logs leak nothing: bodies carrying a recognisable marker go through every path (charged,
//! invalid in each way, SNS envelopes, declined) and the marker never reaches the log output,
//! even at TRACE level.

use std::io::Write;
use std::sync::{Arc, Mutex};

use idempotency::MemoryStore;
use lambda_kit::clock::SystemClock;
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use serde_json::json;

const MARKER: &str = "PII-MARKER-4711";

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn bodies_never_reach_the_logs() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .json()
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

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

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("record not acknowledged"),
        "the capture works: {logs}"
    );
    assert!(
        !logs.contains(MARKER),
        "a body leaked into the logs:\n{logs}"
    );
}
