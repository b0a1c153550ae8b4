//! Any bytes as a Lambda SQS event, through the whole one-shot path with the in-memory store and
//! the simulated gateway. It must never panic, and never charge more orders than it has records.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use process_orders::app::App;
use process_orders::config::Config;
use idempotency::MemoryStore;
use lambda_kit::SystemClock;
use process_orders::payment::SimulatedGateway;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime"))
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let config = Config::from_lookup(|_| None).expect("defaults");
    let app = App::with_ports(&config, MemoryStore::new(config.store.retention), SimulatedGateway::new(), SystemClock);
    if let Ok(response) = runtime().block_on(app.handle_json(&text, u64::MAX)) {
        let records = sqs_batch::edge::parse_event(&text).map(|e| e.records.len()).unwrap_or(0);
        assert!(response.batch_item_failures.len() <= records);
        assert!(app.ports().gateway.effective_charges() <= records);
    }
});
