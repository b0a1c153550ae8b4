//! The order handler's decisions, end to end through the function, with ports that fail on
//! demand: every failure is RETRY or POISON as DESIGN section 3 says, never a wrong ACK.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use idempotency::store::Status;
use idempotency::{Fingerprint, IdempotencyStore, store::Begin, store::ClaimRequest};
use lambda_kit::clock::{Clock, ManualClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::money::Currency;
use process_orders::payment::simulated;
use process_orders::payment::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway};
use process_orders::testkit::failed_ids;
use process_orders::testkit::ports::{FlakyStore, Script, ScriptedGateway};
use serde_json::json;
use sqs_batch::processor::{Decision, RecordStatus};

const T0: u64 = 1_767_225_600_000;

type TestApp<P = Arc<ScriptedGateway>> = App<Arc<FlakyStore>, P, ManualClock>;

fn config() -> Config {
    Config::from_lookup(|_| None).expect("defaults")
}

fn app() -> (TestApp, Arc<FlakyStore>, Arc<ScriptedGateway>, ManualClock) {
    let store = Arc::new(FlakyStore::new());
    let gateway = Arc::new(ScriptedGateway::default());
    let clock = ManualClock::at(T0);
    let app = App::with_ports(
        &config(),
        Arc::clone(&store),
        Arc::clone(&gateway),
        clock.clone(),
    );
    (app, store, gateway, clock)
}

fn event(orders: &[(&str, serde_json::Value)]) -> String {
    let records: Vec<_> = orders
        .iter()
        .map(|(id, body)| json!({ "messageId": id, "body": body.to_string(), "attributes": { "ApproximateReceiveCount": "1" } }))
        .collect();
    json!({ "Records": records }).to_string()
}

fn order(id: &str, amount: f64) -> serde_json::Value {
    json!({ "order_id": id, "amount": amount })
}

async fn run<P: PaymentGateway>(app: &TestApp<P>, json: &str) -> (Vec<String>, Vec<RecordStatus>) {
    let event = sqs_batch::edge::parse_event(json).expect("event");
    // Each invocation gets a minute from the (manual) clock's now.
    let deadline = app.ports().clock.now_ms() + 60_000;
    let (response, report) = app
        .handle_with_report(&event, deadline)
        .await
        .expect("handled");
    (failed_ids(&response), report.statuses)
}

fn reason(status: &RecordStatus) -> (Decision, &'static str) {
    match status {
        RecordStatus::Handled(v) => (v.outcome, v.reason),
        other => panic!("not handled: {other:?}"),
    }
}

#[tokio::test]
async fn a_charge_that_was_not_sent_is_retry_and_frees_the_key() {
    let (app, store, gateway, _) = app();
    gateway.script("o-1", Script::NotSent);
    let json = event(&[("m1", order("o-1", 10.0))]);
    let (failed, statuses) = run(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(reason(&statuses[0]), (Decision::Retry, "payment_not_sent"));
    assert_eq!(store.inner.state("o-1"), None, "released");
    // The redelivery claims at once and charges, without a lookup: nothing can exist.
    gateway.clear("o-1");
    let (failed, statuses) = run(&app, &json).await;
    assert!(failed.is_empty());
    assert_eq!(reason(&statuses[0]), (Decision::Ack, "charged"));
    assert_eq!(gateway.inner.effective_charges(), 1);
}

/// The charge went out and no answer came: the key stays ATTEMPTED (a charge may exist), and
/// the redelivery looks it up before charging; here nothing was charged, so it charges.
#[tokio::test]
async fn an_ambiguous_charge_keeps_the_key_and_the_redelivery_looks_it_up_first() {
    let (app, store, gateway, _) = app();
    gateway.script("o-1", Script::Ambiguous);
    let json = event(&[("m1", order("o-1", 10.0))]);
    let (failed, statuses) = run(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(reason(&statuses[0]), (Decision::Retry, "payment_ambiguous"));
    let kept = store.inner.state("o-1").expect("kept");
    assert_eq!((kept.status, kept.attempts), (Status::Attempted, 1));
    gateway.clear("o-1");
    let (failed, statuses) = run(&app, &json).await;
    assert!(failed.is_empty());
    assert_eq!(reason(&statuses[0]), (Decision::Ack, "charged"));
    assert_eq!(gateway.inner.effective_charges(), 1);
}

/// The provider says a request with this key is still in flight: RETRY, not before the
/// provider's Retry-After.
#[tokio::test]
async fn a_charge_in_flight_is_retry_after_the_providers_wait() {
    let (app, _, _, clock) = app();
    let json = event(&[(
        "m1",
        order("o-1", simulated::IN_FLIGHT_AMOUNT as f64 / 100.0),
    )]);
    let (failed, statuses) = run(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    match &statuses[0] {
        RecordStatus::Handled(v) => {
            assert_eq!(
                (v.outcome, v.reason),
                (Decision::Retry, "payment_in_flight")
            );
            let wait = simulated::IN_FLIGHT_FOR.as_millis() as u64;
            assert_eq!(v.retry_after_ms, Some(clock.now_ms() + wait));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_rejected_payment_is_poison() {
    let (app, _, gateway, _) = app();
    gateway.script("o-1", Script::Reject);
    let (failed, statuses) = run(&app, &event(&[("m1", order("o-1", 10.0))])).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(reason(&statuses[0]), (Decision::Poison, "payment_rejected"));
}

#[tokio::test]
async fn a_panic_while_charging_is_retry_and_the_batch_goes_on() {
    let (app, _, gateway, _) = app();
    gateway.script("o-1", Script::Panic);
    let json = event(&[("m1", order("o-1", 10.0)), ("m2", order("o-2", 5.0))]);
    let (failed, statuses) = run(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(reason(&statuses[0]), (Decision::Retry, "panic"));
    assert!(gateway.inner.charged("o-2"));
}

#[tokio::test]
async fn a_store_outage_retries_every_record_and_recovers() {
    let (app, store, gateway, _) = app();
    store.fail_begin.store(true, Ordering::SeqCst);
    let json = event(&[("m1", order("o-1", 10.0)), ("m2", order("o-2", 5.0))]);
    let (failed, statuses) = run(&app, &json).await;
    assert_eq!(failed, ["m1", "m2"]);
    assert!(
        statuses
            .iter()
            .all(|s| reason(s) == (Decision::Retry, "store_error"))
    );
    assert_eq!(gateway.inner.requests(), 0);
    // The same container serves the next invocation normally once the store is back.
    store.fail_begin.store(false, Ordering::SeqCst);
    let (failed, _) = run(&app, &json).await;
    assert!(failed.is_empty());
    assert_eq!(gateway.inner.effective_charges(), 2);
}

/// Charged, then `complete` fails: RETRY; the redelivery waits out the lease, then looks the key
/// up, finds the charge and completes without charging again.
#[tokio::test]
async fn a_failed_completion_is_retry_and_the_redelivery_finds_the_charge() {
    let (app, store, gateway, clock) = app();
    store.fail_complete.store(true, Ordering::SeqCst);
    let json = event(&[("m1", order("o-1", 10.0))]);
    let (failed, statuses) = run(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(reason(&statuses[0]), (Decision::Retry, "store_error"));
    store.fail_complete.store(false, Ordering::SeqCst);
    // While the lease lives the redelivery is BUSY, never ACK.
    let (failed, statuses) = run(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(reason(&statuses[0]), (Decision::Retry, "busy"));
    clock.advance_ms(config().lease.lease_ms + 1);
    let (failed, statuses) = run(&app, &json).await;
    assert!(failed.is_empty());
    assert_eq!(reason(&statuses[0]), (Decision::Ack, "reconciled"));
    assert_eq!(gateway.inner.requests(), 1);
    assert_eq!(gateway.inner.effective_charges(), 1);
}

#[tokio::test]
async fn a_key_held_elsewhere_is_busy_with_the_lease_end() {
    let (app, store, gateway, clock) = app();
    let fingerprint =
        process_orders::order::decode_order(&order("o-1", 10.0).to_string(), Currency::EUR)
            .unwrap()
            .fingerprint();
    let held = store
        .begin(&ClaimRequest::new(
            "o-1",
            fingerprint,
            clock.now_ms(),
            T0 + 9_000,
            "other",
        ))
        .await
        .unwrap();
    assert!(matches!(held, Begin::Started { .. }));
    let (failed, statuses) = run(&app, &event(&[("m1", order("o-1", 10.0))])).await;
    assert_eq!(failed, ["m1"]);
    match &statuses[0] {
        RecordStatus::Handled(v) => {
            assert_eq!((v.outcome, v.reason), (Decision::Retry, "busy"));
            assert_eq!(v.retry_after_ms, Some(T0 + 9_000));
            assert_eq!(v.key.as_deref(), Some("o-1"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(gateway.inner.requests(), 0);
}

#[tokio::test]
async fn the_same_order_id_with_another_amount_is_a_conflict() {
    let (app, _, gateway, _) = app();
    run(&app, &event(&[("m1", order("o-1", 10.0))])).await;
    let (failed, statuses) = run(&app, &event(&[("m2", order("o-1", 11.0))])).await;
    assert_eq!(failed, ["m2"]);
    assert_eq!(reason(&statuses[0]), (Decision::Poison, "conflict"));
    assert_eq!(gateway.inner.requests(), 1);
}

#[tokio::test]
async fn the_same_order_twice_in_one_batch_charges_once() {
    let (app, _, gateway, _) = app();
    let json = event(&[("m1", order("o-1", 10.0)), ("m2", order("o-1", 10.0))]);
    let (failed, _) = run(&app, &json).await;
    // Concurrently, the second may find the first still in progress (BUSY -> retry); in any
    // case the order is charged exactly once and nothing is acknowledged uncharged.
    assert!(failed.len() <= 1);
    assert_eq!(gateway.inner.effective_charges(), 1);
}

/// A gateway whose charge is slow enough for the lease to run out and a second consumer to
/// take the key over before the first completes.
struct TakeoverGateway {
    store: Arc<FlakyStore>,
    clock: ManualClock,
    fingerprint: Fingerprint,
}

impl PaymentGateway for TakeoverGateway {
    async fn charge(&self, _request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        self.clock.advance_ms(config().lease.lease_ms + 1);
        let now_ms = self.clock.now_ms();
        let takeover =
            ClaimRequest::new("o-1", self.fingerprint, now_ms, now_ms + 30_000, "m-other");
        assert!(matches!(
            self.store.begin(&takeover).await,
            Ok(Begin::Started { .. })
        ));
        Ok(())
    }

    async fn lookup(&self, _request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        Ok(ChargeStatus::Unknown)
    }
}

#[tokio::test]
async fn a_lease_taken_over_during_the_charge_is_retry_and_fenced() {
    let store = Arc::new(FlakyStore::new());
    let clock = ManualClock::at(T0);
    let body = order("o-1", 10.0);
    let fingerprint = process_orders::order::decode_order(&body.to_string(), Currency::EUR)
        .unwrap()
        .fingerprint();
    let gateway = TakeoverGateway {
        store: Arc::clone(&store),
        clock: clock.clone(),
        fingerprint,
    };
    // A deadline far enough away that the lease is the configured one.
    let app = App::with_ports(&config(), Arc::clone(&store), gateway, clock.clone());
    let json = event(&[("m1", body)]);
    let parsed = sqs_batch::edge::parse_event(&json).unwrap();
    let (response, report) = app
        .handle_with_report(&parsed, T0 + 3_600_000)
        .await
        .unwrap();
    assert_eq!(failed_ids(&response), ["m1"]);
    assert_eq!(reason(&report.statuses[0]), (Decision::Retry, "lease_lost"));
    // The new holder's claim is intact: others still see it busy.
    let probe = ClaimRequest::new(
        "o-1",
        fingerprint,
        clock.now_ms(),
        clock.now_ms() + 1,
        "probe",
    );
    assert!(matches!(store.begin(&probe).await, Ok(Begin::Busy { .. })));
}
