//! Every sample event in `events/` through the function with the local defaults, so none rots.

use idempotency::MemoryStore;
use lambda_kit::clock::{Clock, SystemClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::{failed_ids, sample_events};

fn app() -> App<MemoryStore, SimulatedGateway, SystemClock> {
    let config = Config::from_lookup(|_| None).expect("defaults");
    App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    )
}

fn deadline() -> u64 {
    SystemClock.now_ms() + 60_000
}

/// The expected `batchItemFailures` of each sample event, and the orders it charges.
fn expected(name: &str) -> (&'static [&'static str], &'static [&'static str]) {
    match name {
        // o-1 twice (ACK the duplicate), not JSON, amount 0, declined amount.
        "standard.json" => (
            &[
                "4a8b2f9e-1c3d-4e5f-8a7b-6c5d4e3f2a10",
                "5b9c3a0f-2d4e-4f60-9b8c-7d6e5f4a3b21",
                "6cad4b10-3e5f-4071-8c9d-8e7f6a5b4c32",
            ],
            &["o-1", "o-2"],
        ),
        // The third record has no amount: it and everything after it are reported.
        "fifo.json" => (
            &[
                "11111111-aaaa-4000-8000-000000000003",
                "11111111-aaaa-4000-8000-000000000004",
                "11111111-aaaa-4000-8000-000000000005",
            ],
            &["o-10", "o-20"],
        ),
        // An envelope around an order, and one around a non-order.
        "sns-envelope.json" => (&["8ecf6d32-5071-4293-8ebf-a09b8c7d6e54"], &["o-30"]),
        // The simulated provider's outcomes: charged; charged then 504 (ambiguous: RETRY, though
        // the money moved); still in flight (409); a rejected API key (401); declined.
        "payment-outcomes.json" => (
            &[
                "c2637b75-94b5-46d7-a2f3-e4dfc0b1a298",
                "9f307e42-6182-43a4-9fc0-b1ac9d8e7f65",
                "a0418f53-7293-44b5-80d1-c2bdae9f8076",
                "b152a064-83a4-45c6-91e2-d3cebfa09187",
            ],
            &["p-1", "p-2"],
        ),
        // A standard queue with SQS fair queues: records carry a tenant's MessageGroupId, but
        // the ARN is a standard queue's, so only the truncated body is reported.
        "fair-queue.json" => (
            &["d1a0b3c4-1111-4a2b-8c3d-000000000002"],
            &["f-1", "f-3", "f-4", "f-5"],
        ),
        "empty.json" => (&[], &[]),
        other => panic!("events/{other} has no expectation here: add one"),
    }
}

#[tokio::test]
async fn every_sample_event_gives_its_expected_failures_and_charges() {
    let events = sample_events();
    assert!(events.len() >= 4, "sample events missing");
    for (name, json) in events {
        let app = app();
        let (failed, charged) = expected(&name);
        let response = app.handle_json(&json, deadline()).await.expect(&name);
        assert_eq!(failed_ids(&response), failed, "{name}");
        let gateway = &app.ports().gateway;
        assert_eq!(gateway.effective_charges(), charged.len(), "{name}");
        for order in charged {
            assert!(gateway.charged(order), "{name}: {order} not charged");
        }
    }
}

/// Redelivering a whole batch charges nothing twice: every valid order is a duplicate.
#[tokio::test]
async fn a_redelivered_batch_acks_duplicates_without_charging() {
    let app = app();
    let json =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/events/standard.json"))
            .unwrap();
    let first = app.handle_json(&json, deadline()).await.expect("first");
    let requests = app.ports().gateway.requests();
    let second = app.handle_json(&json, deadline()).await.expect("second");
    assert_eq!(failed_ids(&first), failed_ids(&second));
    assert_eq!(app.ports().gateway.effective_charges(), 2);
    // Nothing reaches the gateway again: not even the declined order, whose decline is
    // recorded as final (a declined card is never sent twice).
    assert_eq!(app.ports().gateway.requests(), requests);
}

/// The payment outcomes redelivered: the ambiguous charge is found by the lookup and
/// acknowledged without a second charge; the one still in flight stays RETRY without a new
/// request; the configuration error and the decline answer as before.
#[tokio::test]
async fn the_payment_outcomes_redelivered_reconcile_the_ambiguous_charge() {
    let app = app();
    let json = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/events/payment-outcomes.json"
    ))
    .unwrap();
    app.handle_json(&json, deadline()).await.expect("first");
    let event = sqs_batch::edge::parse_event(&json).unwrap();
    let (response, report) = app
        .handle_with_report(&event, deadline())
        .await
        .expect("second");
    let reasons: Vec<&str> = report
        .statuses
        .iter()
        .map(|s| match s {
            sqs_batch::processor::RecordStatus::Handled(v) => v.reason,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        reasons,
        [
            "duplicate",
            "reconciled",
            "payment_pending",
            "payment_config",
            "payment_rejected"
        ]
    );
    assert_eq!(failed_ids(&response).len(), 3);
    assert_eq!(app.ports().gateway.charges("p-2"), 1);
}

/// FIFO group scope: the poison (o-11, no amount) does not hold back its group (see docs/design.md,
/// "Choices where the design is silent"), so every other record is processed and only it is reported.
#[tokio::test]
async fn the_fifo_sample_under_group_scope_reports_only_the_poison() {
    let config =
        Config::from_lookup(|k| (k == "SQS_BATCH_FIFO_SCOPE").then(|| "group".to_owned())).unwrap();
    let app = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    );
    let json =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/events/fifo.json")).unwrap();
    let response = app.handle_json(&json, deadline()).await.expect("fifo");
    assert_eq!(
        failed_ids(&response),
        ["11111111-aaaa-4000-8000-000000000003"]
    );
    for order in ["o-10", "o-20", "o-21", "o-12"] {
        assert!(app.ports().gateway.charged(order), "{order}");
    }
}

/// `SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE=true`: the function fails an invocation whose every record
/// failed (the batch comes back whole, and the mapping backs off), and answers any batch with
/// one record done as usual; unset, it reports every record.
#[tokio::test]
async fn an_entire_batch_failure_fails_the_invocation_only_when_asked() {
    let failing = r#"{"Records":[
        {"messageId":"m-1","body":"not json","eventSourceARN":"arn:aws:sqs:eu-west-1:1:orders"},
        {"messageId":"m-2","body":"{}","eventSourceARN":"arn:aws:sqs:eu-west-1:1:orders"}]}"#;
    let config = Config::from_lookup(|name| {
        (name == "SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE").then(|| "true".to_owned())
    })
    .expect("config");
    let strict = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    );
    let error = strict
        .handle_json(failing, deadline())
        .await
        .expect_err("every record failed");
    assert!(
        error
            .to_string()
            .starts_with("all 2 records of the batch failed"),
        "{error}"
    );
    // standard.json: three of its records fail, the others are charged.
    let (_, standard) = sample_events()
        .into_iter()
        .find(|(name, _)| name == "standard.json")
        .expect("standard.json");
    let response = strict
        .handle_json(&standard, deadline())
        .await
        .expect("partial");
    assert_eq!(failed_ids(&response).len(), 3);

    let unset = app()
        .handle_json(failing, deadline())
        .await
        .expect("reported");
    assert_eq!(failed_ids(&unset), ["m-1", "m-2"]);
}
