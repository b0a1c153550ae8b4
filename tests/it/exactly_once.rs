//! Exactly once end to end against a provider that follows the IETF Idempotency-Key draft at its
//! worst (`process_orders::testkit::payment_stub`): a key still in flight, a charge that is made and then
//! answered 504, a key forgotten after its window, a rotated API key, and a payload that tries to
//! take over another payload's key. Each scenario is one of the ways money was lost before.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotency::MemoryStore;
use lambda_kit::clock::{Clock, ManualClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::handler::ConfigBreaker;
use process_orders::metrics::MetricsSink;
use process_orders::payment::http::{HttpGateway, HttpSettings};
use process_orders::payment::{KeySetting, Secret};
use process_orders::testkit::failed_ids;
use process_orders::testkit::payment_stub::{Behaviour, Fate, PaymentStub};
use serde_json::json;
use sqs_batch::backoff::BackoffPolicy;
use sqs_batch::processor::{Decision, RecordStatus};

pub(super) const T0: u64 = 1_767_225_600_000;
pub(super) const DAY_MS: u64 = 86_400_000;

pub(super) type TestApp = App<MemoryStore, HttpGateway, ManualClock>;

fn config() -> Config {
    Config::from_lookup(|_| None).expect("defaults")
}

/// The function with the HTTP gateway on `stub`, a client timeout of 300 ms, and `clock`.
pub(super) fn app(stub: &PaymentStub, clock: &ManualClock, api_key: Option<&str>) -> TestApp {
    app_with(stub, clock, api_key, config())
}

/// As [`app`], with `config`.
pub(super) fn app_with(
    stub: &PaymentStub,
    clock: &ManualClock,
    api_key: Option<&str>,
    config: Config,
) -> TestApp {
    let gateway = HttpGateway::new(&HttpSettings {
        base_url: stub.url().parse().expect("url"),
        api_key: api_key.map_or(KeySetting::None, |k| KeySetting::Value(Secret::new(k))),
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_millis(300),
        retryable_failures: process_orders::payment::answers::RetryableFailures::default(),
    })
    .expect("gateway");
    App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        gateway,
        clock.clone(),
    )
}

/// Messages `m{i}` carrying orders `o-{i}` of 10.00, for each `i`: the ids, then the specs
/// [`event`] takes (borrowing the ids).
pub(super) fn numbered(ids: impl Iterator<Item = usize>) -> Vec<(String, String)> {
    ids.map(|i| (format!("m{i}"), format!("o-{i}"))).collect()
}

pub(super) fn specs(orders: &[(String, String)]) -> Vec<(&str, &str, f64)> {
    orders
        .iter()
        .map(|(m, o)| (m.as_str(), o.as_str(), 10.0))
        .collect()
}

pub(super) fn event(orders: &[(&str, &str, f64)], receive_count: u32) -> String {
    let records: Vec<_> = orders
        .iter()
        .map(|(id, order, amount)| {
            json!({
                "messageId": id,
                "receiptHandle": format!("rh-{id}"),
                "body": json!({ "order_id": order, "amount": amount }).to_string(),
                "attributes": { "ApproximateReceiveCount": receive_count.to_string() },
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            })
        })
        .collect();
    json!({ "Records": records }).to_string()
}

/// One invocation with a minute to run; the failed ids and each record's status.
pub(super) async fn invoke(app: &TestApp, json: &str) -> (Vec<String>, Vec<RecordStatus>) {
    let event = sqs_batch::edge::parse_event(json).expect("event");
    let deadline = app.ports().clock.now_ms() + 60_000;
    let (response, report) = app
        .handle_with_report(&event, deadline)
        .await
        .expect("handled");
    (failed_ids(&response), report.statuses)
}

pub(super) fn outcome(status: &RecordStatus) -> (Decision, &'static str) {
    match status {
        RecordStatus::Handled(v) => (v.outcome, v.reason),
        other => panic!("not handled: {other:?}"),
    }
}

/// Defect 1. Delivery 1 times out while the provider is still working on the charge; delivery 2
/// comes while it is in flight (the provider answers 409 to a second request with the key). The
/// order is never acknowledged while the first request is pending, and once the provider
/// finishes it is charged exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_in_flight_at_the_provider_is_never_acknowledged_and_is_charged_once() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set("o-1", Behaviour::Slow(Duration::from_millis(1_500)));
    let app = app(&stub, &clock, None);
    let json = event(&[("m1", "o-1", 10.0)], 1);

    let (failed, _) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1"], "delivery 1 timed out: RETRY");
    assert_eq!(stub.fate("o-1"), Some(Fate::Pending));

    let (failed, statuses) = invoke(&app, &json).await;
    assert_eq!(
        failed,
        ["m1"],
        "delivery 2 while the charge is in flight must be RETRY, got {statuses:?}"
    );
    assert_eq!(stub.charges("o-1"), 0);

    stub.settled("o-1").await;
    let (failed, statuses) = invoke(&app, &json).await;
    assert!(failed.is_empty(), "{statuses:?}");
    assert_eq!(stub.charges("o-1"), 1);
    let (failed, statuses) = invoke(&app, &json).await;
    assert!(failed.is_empty());
    assert_eq!(outcome(&statuses[0]), (Decision::Ack, "duplicate"));
    assert_eq!(stub.charges("o-1"), 1);
}

/// Defect 1 through the 409 itself: the lookup is down when delivery 2 comes, so (inside the
/// key window) the charge is resent with the same key, and the provider answers 409 because the
/// first request is still in flight. That is RETRY, never "charged".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_for_a_charge_in_flight_is_retried_never_acknowledged() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set("o-1", Behaviour::Slow(Duration::from_millis(1_500)));
    let app = app(&stub, &clock, None);
    let json = event(&[("m1", "o-1", 10.0)], 1);

    let (failed, _) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    stub.set_lookup_available(false);
    let (failed, statuses) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1"], "{statuses:?}");
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Retry, "payment_in_flight")
    );
    assert_eq!(
        stub.answers("o-1"),
        [409],
        "the resend met the first request in flight"
    );

    stub.settled("o-1").await;
    stub.set_lookup_available(true);
    let (failed, statuses) = invoke(&app, &json).await;
    assert!(failed.is_empty(), "{statuses:?}");
    assert_eq!(outcome(&statuses[0]), (Decision::Ack, "reconciled"));
    assert_eq!(stub.charges("o-1"), 1);
}

/// Defect 1, the losing branch: the first request, still in flight when delivery 2 comes, is
/// then declined. Nothing was charged, so the order must never be acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_whose_in_flight_charge_is_declined_is_never_acknowledged() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set("o-1", Behaviour::SlowDecline(Duration::from_millis(1_500)));
    let app = app(&stub, &clock, None);
    let json = event(&[("m1", "o-1", 10.0)], 1);

    for delivery in 1..=2 {
        let (failed, statuses) = invoke(&app, &json).await;
        assert_eq!(failed, ["m1"], "delivery {delivery}: {statuses:?}");
    }
    stub.settled("o-1").await;
    let (failed, statuses) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Poison, "payment_rejected")
    );
    assert_eq!(stub.charges("o-1"), 0);
}

/// Defect 2. The provider charges and answers 504; its key window is one day. The message waits
/// in the DLQ and is redriven two days later, when the provider has forgotten the key. The
/// redrive must find the charge (the lookup) and not charge again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_answered_504_and_redriven_after_the_key_window_is_charged_once() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(Duration::from_millis(DAY_MS)));
    stub.set("o-1", Behaviour::ChargeThen504);
    let app = app(&stub, &clock, None);

    let (failed, _) = invoke(&app, &event(&[("m1", "o-1", 10.0)], 1)).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(stub.charges("o-1"), 1, "the provider did charge");

    // The provider is healthy again; the message is redriven after the key window.
    stub.set("o-1", Behaviour::Normal);
    clock.advance_ms(2 * DAY_MS);
    let (failed, statuses) = invoke(&app, &event(&[("m1", "o-1", 10.0)], 6)).await;
    assert!(failed.is_empty(), "{statuses:?}");
    assert_eq!(stub.charges("o-1"), 1, "charged twice after the key window");
}

/// Defect 2, a reset: the provider charges and the connection breaks mid-answer. Same rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_whose_answer_breaks_off_and_is_redriven_late_is_charged_once() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(Duration::from_millis(DAY_MS)));
    stub.set("o-1", Behaviour::ChargeThenBreak);
    let app = app(&stub, &clock, None);

    let (failed, _) = invoke(&app, &event(&[("m1", "o-1", 10.0)], 1)).await;
    assert_eq!(failed, ["m1"]);
    stub.set("o-1", Behaviour::Normal);
    clock.advance_ms(2 * DAY_MS);
    let (failed, statuses) = invoke(&app, &event(&[("m1", "o-1", 10.0)], 6)).await;
    assert!(failed.is_empty(), "{statuses:?}");
    assert_eq!(stub.charges("o-1"), 1);
}

/// Defect 3. The API key was rotated at the provider: every charge gets 401. Every record is
/// RETRY with its exponential backoff at each of the template's `maxReceiveCount` receives, so
/// nothing is hurried to the DLQ; the provider is not hammered (after a few 401s in a row the
/// rest of the batch is not sent); the metric counts the records; and once the key is right
/// again every order is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_api_key_retries_with_backoff_and_sends_nothing_to_the_dlq() {
    let template: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml")).unwrap(),
    )
    .unwrap();
    let default = |name: &str| -> u64 {
        template["Parameters"][name]["Default"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} default"))
    };
    let max_receive_count = default("MaxReceiveCount") as u32;
    let policy = BackoffPolicy::new(default("BackoffBaseSeconds"), default("BackoffCapSeconds"));

    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.require_api_key(Some("sk_new"));
    let docs: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = app(&stub, &clock, Some("sk_old"))
        .with_metrics_sink(MetricsSink::Memory(Arc::clone(&docs)));
    const RECORDS: usize = 40;
    let orders = numbered(0..RECORDS);
    let specs = specs(&orders);

    let mut least_wait_s = 0;
    for receive in 1..=max_receive_count {
        let json = event(&specs, receive);
        let requests_before = stub.all_requests();
        let (failed, statuses) = invoke(&app, &json).await;
        assert_eq!(failed.len(), RECORDS, "receive {receive}");
        for status in &statuses {
            assert_eq!(
                outcome(status).0,
                Decision::Retry,
                "receive {receive}: a configuration error must never be POISON: {status:?}"
            );
        }
        // The shortest wait the backoff may choose for each record (no jitter): a person needs
        // this time to rotate the key before the records run out of receives.
        let least = statuses
            .iter()
            .map(|s| policy.visibility(s, receive, clock.now_ms(), 0))
            .min()
            .flatten()
            .expect("a visibility change");
        least_wait_s += least;
        // Records already running when the breaker opens still go out; none after it.
        let sent = stub.all_requests() - requests_before;
        let bound = config().batch.max_concurrency.get() + ConfigBreaker::TRIP_AFTER as usize;
        assert!(
            sent <= bound,
            "receive {receive}: {sent} calls, more than {bound}"
        );
        let skipped = statuses
            .iter()
            .filter(|s| outcome(s).1 == "payment_circuit_open")
            .count();
        assert_eq!(skipped, RECORDS - sent, "receive {receive}");
        // The invocation's document (the container's cold start has one of its own).
        let doc: serde_json::Value = serde_json::from_str(
            docs.lock()
                .unwrap()
                .iter()
                .rev()
                .find(|d| !d.contains("\"ColdStart\""))
                .expect("a metrics document"),
        )
        .unwrap();
        assert_eq!(doc["PaymentConfigErrors"], json!(RECORDS as f64), "{doc}");
    }
    eprintln!(
        "{max_receive_count} receives with the template's backoff: at least {least_wait_s} s before the DLQ"
    );
    assert!(
        least_wait_s >= 3_600,
        "{least_wait_s} s is too short to fix a configuration"
    );
    assert_eq!(stub.total_charges(), 0);

    stub.require_api_key(Some("sk_old"));
    let (failed, _) = invoke(&app, &event(&specs, max_receive_count)).await;
    assert!(failed.is_empty());
    assert_eq!(stub.total_charges(), RECORDS);
}

/// Defect 4. An order's charge ended ambiguous (504), so its key may hold a charge. The same
/// order id then comes with another amount: that is a CONFLICT, never a charge of the new amount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_payload_cannot_take_over_a_key_whose_charge_may_exist() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(Duration::from_millis(DAY_MS)));
    stub.set("o-1", Behaviour::ChargeThen504);
    let app = app(&stub, &clock, None);

    let (failed, _) = invoke(&app, &event(&[("m1", "o-1", 10.0)], 1)).await;
    assert_eq!(failed, ["m1"]);
    stub.set("o-1", Behaviour::Normal);
    clock.advance_ms(2 * DAY_MS);
    let (failed, statuses) = invoke(&app, &event(&[("m2", "o-1", 99.0)], 1)).await;
    assert_eq!(failed, ["m2"]);
    assert_eq!(outcome(&statuses[0]), (Decision::Poison, "conflict"));
    assert_eq!(stub.charges("o-1"), 1);
    assert_eq!(stub.requests("o-1"), 1, "the other payload was sent");
}
