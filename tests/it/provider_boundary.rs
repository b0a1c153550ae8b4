//! Money at the provider boundary, against the provider stub (`process_orders::testkit::payment_stub`): the
//! draft's "Idempotency-Key is missing" answer, an order id the header and the path would carry
//! differently, a look-up that forgets with the key window, a 401 that echoes our key, and
//! amounts that a float would round. Each scenario lost money or leaked the key before.

use std::sync::Arc;

use lambda_kit::clock::{Clock, ManualClock};
use process_orders::config::Config;
use process_orders::testkit::payment_stub::{Behaviour, LookupDialect, PaymentStub};
use serde_json::json;
use sqs_batch::processor::{Decision, RecordStatus};

use super::exactly_once::{DAY_MS, T0, app, app_with, event, invoke, numbered, outcome, specs};

/// An event of raw bodies, so amounts reach the function as written (never through a float).
fn raw_event(bodies: &[(&str, &str)]) -> String {
    let records: Vec<_> = bodies
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id,
                "receiptHandle": format!("rh-{id}"),
                "body": body,
                "attributes": { "ApproximateReceiveCount": "1" },
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            })
        })
        .collect();
    json!({ "Records": records }).to_string()
}

fn detail(status: &RecordStatus) -> String {
    match status {
        RecordStatus::Handled(v) => v.detail.as_deref().unwrap_or_default().to_owned(),
        other => panic!("not handled: {other:?}"),
    }
}

/// The record's outcome and reason, and words its detail must name.
fn assert_decided(status: &RecordStatus, expected: (Decision, &str), names: &str) {
    let detail = detail(status);
    assert_eq!(outcome(status), expected, "{detail}");
    assert!(detail.contains(names), "{detail}");
}

fn config(vars: &[(&str, &str)]) -> Config {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
        .expect("config")
}

/// Defect 1. A proxy strips the `Idempotency-Key` header, and the provider answers the draft's
/// own 400 `application/problem+json` "Idempotency-Key is missing". That is our setup, not the
/// order: every record is RETRY as a configuration error, none is POISON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_answer_is_a_configuration_error_never_poison() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.strip_idempotency_key(true);
    let app = app(&stub, &clock, None);
    let json = event(
        &[
            ("m1", "o-1", 10.0),
            ("m2", "o-2", 11.0),
            ("m3", "o-3", 12.0),
        ],
        1,
    );

    let (failed, statuses) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1", "m2", "m3"]);
    assert_eq!(stub.missing_key_requests(), 3, "the proxy stripped the key");
    for status in &statuses {
        assert_eq!(
            outcome(status),
            (Decision::Retry, "payment_config"),
            "{status:?}"
        );
    }

    stub.strip_idempotency_key(false);
    let (failed, _) = invoke(&app, &json).await;
    assert!(failed.is_empty());
    assert_eq!(stub.total_charges(), 3);
}

/// Defect 2. An order id with a leading space would travel as a header that HTTP trims (`o-1`)
/// and be looked up as `/charges/%20o-1`, another key: charged, answered 504, then charged
/// again by a redrive past the key window. Such an id cannot be carried exactly, so it is
/// POISON before any claim or call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_the_header_would_trim_is_poison_before_any_call() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(std::time::Duration::from_millis(DAY_MS)));
    stub.set("o-1", Behaviour::ChargeThen504);
    let app = app(&stub, &clock, None);
    let json = event(&[("m1", " o-1", 10.0)], 1);

    let (failed, statuses) = invoke(&app, &json).await;
    // Whatever the first delivery decided, a redrive past the key window must not charge again.
    clock.advance_ms(2 * DAY_MS);
    let _ = invoke(&app, &json).await;
    assert!(
        stub.charges("o-1") <= 1,
        "charged {} times under the trimmed key",
        stub.charges("o-1")
    );
    assert_eq!(failed, ["m1"]);
    assert_eq!(outcome(&statuses[0]), (Decision::Poison, "invalid_body"));
    assert!(
        detail(&statuses[0]).contains("white space"),
        "{}",
        detail(&statuses[0])
    );
    assert_eq!(stub.all_requests() + stub.all_lookups(), 0);

    for id in ["o-1 ", "o\u{e9}-1", "o-1\u{a0}"] {
        let (_, statuses) = invoke(&app, &event(&[("m", id, 10.0)], 1)).await;
        assert_eq!(
            outcome(&statuses[0]),
            (Decision::Poison, "invalid_body"),
            "{id:?}"
        );
    }
    assert_eq!(stub.all_requests() + stub.all_lookups(), 0);
}

/// Defect 3. The provider's look-up forgets a key with its window. Charged, answered 504, and
/// redelivered two days later: the look-up answers "no such charge", which past the window
/// proves nothing. The order is `needs_reconciliation`, never charged again: only a person can
/// settle it, so it goes to the DLQ with that reason (POISON) rather than retrying for a day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_past_the_key_window_is_not_a_licence_to_charge_again() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    let window = std::time::Duration::from_millis(DAY_MS);
    stub.set_key_window(Some(window));
    stub.set_lookup_retention(Some(window));
    stub.set("o-1", Behaviour::ChargeThen504);
    let app = app(&stub, &clock, None);
    let json = event(&[("m1", "o-1", 10.0)], 1);

    let (failed, _) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    clock.advance_ms(2 * DAY_MS);
    for _ in 0..2 {
        let (failed, statuses) = invoke(&app, &json).await;
        assert_eq!(failed, ["m1"]);
        assert_decided(
            &statuses[0],
            (Decision::Poison, "needs_reconciliation"),
            "no charge",
        );
    }
    assert_eq!(stub.charges("o-1"), 1, "charged again past the key window");
    assert_eq!(stub.requests("o-1"), 1);
}

/// Defect 3, the other side: a deployment whose provider keeps every charge for its look-up
/// (`PAYMENT_LOOKUP_DURABLE=true`) may trust "no such charge" past the window. A 503 that did
/// not charge, redelivered two days later, is then charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_look_up_lets_a_never_made_charge_go_out_past_the_window() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(std::time::Duration::from_millis(DAY_MS)));
    stub.set("o-1", Behaviour::Status(503));
    let app = app_with(
        &stub,
        &clock,
        None,
        config(&[("PAYMENT_LOOKUP_DURABLE", "true")]),
    );
    let json = event(&[("m1", "o-1", 10.0)], 1);

    let (failed, _) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    stub.set("o-1", Behaviour::Normal);
    clock.advance_ms(2 * DAY_MS);
    let (failed, statuses) = invoke(&app, &json).await;
    assert!(failed.is_empty(), "{statuses:?}");
    assert_eq!(outcome(&statuses[0]), (Decision::Ack, "charged"));
    assert_eq!(stub.charges("o-1"), 1);
}

/// Defect 4. A gateway answers 401 and echoes the `Authorization` header it refused. The key
/// never reaches the output of the real binary (its logs at TRACE, its metrics, its response).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_that_echoes_the_key_never_reaches_the_output() {
    const KEY: &str = "sk_live_LEAKED4711";
    let stub = PaymentStub::start().await;
    stub.require_api_key(Some("sk_live_other"));
    stub.echo_authorization(true);
    let url = stub.url();
    let output = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
            .args(["--event", "-"])
            .env_clear()
            .envs([
                ("PAYMENT_API_URL", url.as_str()),
                ("PAYMENT_API_KEY", KEY),
                ("RUST_LOG", "trace"),
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let event = event(&[("m1", "o-1", 10.0)], 1);
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), event.as_bytes())
            .expect("event");
        child.wait_with_output().expect("wait")
    })
    .await
    .expect("binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stdout.contains("m1"), "reported for retry: {stdout}");
    assert_eq!(stub.answers("o-1"), [401], "{stderr}");
    assert!(
        stderr.contains("HTTP 401") && stderr.contains("[redacted]"),
        "the refusal is logged, redacted: {stderr}"
    );
    assert!(
        !stderr.contains("LEAKED4711"),
        "the key reached the logs:\n{stderr}"
    );
    assert!(!stdout.contains("LEAKED4711"), "{stdout}");
}

/// Defect 4, in Lambda: a bearer key over plain http would cross the network in clear text.
#[test]
fn an_http_payment_url_stops_start_up_in_lambda() {
    let lambda = [
        ("AWS_LAMBDA_FUNCTION_NAME", "orders"),
        ("AWS_REGION", "us-east-1"),
        ("IDEMPOTENCY_TABLE", "t"),
    ];
    let with_url = |url: &'static str| {
        let mut vars = lambda.to_vec();
        vars.push(("PAYMENT_API_URL", url));
        Config::from_lookup(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    };
    let refused = with_url("http://pay.example/v1").expect_err("http in Lambda");
    assert!(refused.to_string().contains("PAYMENT_API_URL"), "{refused}");
    assert!(refused.to_string().contains("https"), "{refused}");
    with_url("https://pay.example/v1").expect("https in Lambda");
}

/// Defect 5. Amounts are exact decimals read from the JSON text: the provider receives integer
/// minor units and the currency, an amount finer than its currency allows is POISON, and two
/// spellings of one amount are one payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amounts_reach_the_provider_exactly_in_minor_units() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    let app = app(&stub, &clock, None);
    let json = raw_event(&[
        ("m1", r#"{"order_id":"o-1","amount":0.30}"#),
        ("m2", r#"{"order_id":"o-2","amount":1e2,"currency":"USD"}"#),
        ("m3", r#"{"order_id":"o-3","amount":1500,"currency":"JPY"}"#),
        ("m4", r#"{"order_id":"o-4","amount":10.005}"#),
        ("m5", r#"{"order_id":"o-5","amount":10.5,"currency":"JPY"}"#),
        ("m6", r#"{"order_id":"o-6","amount":1,"currency":"euro"}"#),
        (
            "m7",
            r#"{"order_id":"o-7","amount":0.1000000000000000055511151231257827}"#,
        ),
    ]);
    let (failed, statuses) = invoke(&app, &json).await;
    assert_eq!(failed, ["m4", "m5", "m6", "m7"], "{statuses:?}");
    for status in &statuses[3..] {
        assert_eq!(outcome(status), (Decision::Poison, "invalid_body"));
    }
    assert!(detail(&statuses[3]).contains("decimal places"));
    assert!(detail(&statuses[5]).contains("currency"));
    let mut bodies = stub.bodies();
    bodies.sort_by_key(|b| b["order_id"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        bodies,
        [
            json!({ "order_id": "o-1", "amount": 30, "currency": "EUR" }),
            json!({ "order_id": "o-2", "amount": 10000, "currency": "USD" }),
            json!({ "order_id": "o-3", "amount": 1500, "currency": "JPY" }),
        ]
    );

    // The same order spelled another way is a duplicate, not a conflict.
    let again = raw_event(&[("m8", r#"{"amount":0.3,"order_id":"o-1","currency":"EUR"}"#)]);
    let (failed, statuses) = invoke(&app, &again).await;
    assert!(failed.is_empty());
    assert_eq!(outcome(&statuses[0]), (Decision::Ack, "duplicate"));
    assert_eq!(stub.all_requests(), 3);
}

/// A 400 about one order's request (the provider's `invalid_request_error`) is retried slowly,
/// but it says nothing of the other orders: the invocation's breaker counts only answers that
/// every order would get (401, 403, a missing route). Run one record at a time, so three such
/// refusals in a row come before the good orders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_of_single_orders_do_not_open_the_breaker() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    for bad in ["o-1", "o-2", "o-3", "o-4"] {
        stub.set(bad, Behaviour::Status(400));
    }
    let app = app_with(
        &stub,
        &clock,
        None,
        config(&[("SQS_BATCH_MAX_CONCURRENCY", "1")]),
    );
    let orders = numbered(1..=6);
    let specs = specs(&orders);

    let (failed, statuses) = invoke(&app, &event(&specs, 1)).await;
    assert_eq!(failed, ["m1", "m2", "m3", "m4"], "{statuses:?}");
    for status in &statuses[..4] {
        assert_eq!(outcome(status), (Decision::Retry, "payment_refused"));
    }
    assert_eq!(stub.total_charges(), 2, "the good orders were not sent");
}

/// A decline is final: the provider is asked once, and neither a redelivery nor a redrive days
/// later sends the declined card again (card networks penalise retried declines). Each delivery
/// is POISON `payment_rejected`. Once a person clears the decline (the card was updated), the
/// next delivery charges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_order_is_sent_to_the_provider_once() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(std::time::Duration::from_millis(DAY_MS)));
    stub.set("o-1", Behaviour::Decline);
    let app = app(&stub, &clock, None);
    let json = event(&[("m1", "o-1", 10.0)], 1);
    for _ in 0..2 {
        let (failed, statuses) = invoke(&app, &json).await;
        assert_eq!(failed, ["m1"]);
        assert_eq!(
            outcome(&statuses[0]),
            (Decision::Poison, "payment_rejected")
        );
    }
    // A redrive three days later, past the provider's key window.
    clock.advance_ms(3 * DAY_MS);
    let (_, statuses) = invoke(&app, &json).await;
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Poison, "payment_rejected")
    );
    assert_eq!(stub.requests("o-1"), 1, "the declined card was sent again");

    stub.set("o-1", Behaviour::Normal);
    assert!(
        app.ports().store.clear_rejected("o-1"),
        "the decline was recorded"
    );
    let (failed, statuses) = invoke(&app, &json).await;
    assert!(failed.is_empty(), "{statuses:?}");
    assert_eq!(outcome(&statuses[0]), (Decision::Ack, "charged"));
    assert_eq!(stub.charges("o-1"), 1);
}

/// Seams finding 3. The charge times out after it was sent and the provider declines it. Past
/// the key window the look-up shows the failure, in the provider's own words: a bare
/// `"status": "failed"`, a Stripe PaymentIntent back at `requires_payment_method` with its
/// `last_payment_error`, or the draft's failure with a `decline_code`. Each is final: recorded
/// as a decline, POISON `payment_rejected`, and the card is never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_found_by_the_look_up_is_final_in_every_dialect() {
    for dialect in [
        LookupDialect::BareFailed,
        LookupDialect::Stripe,
        LookupDialect::Draft,
    ] {
        let clock = ManualClock::at(T0);
        let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
        stub.set_key_window(Some(std::time::Duration::from_millis(DAY_MS)));
        stub.set_lookup_dialect(dialect);
        // Slower than the client's 300 ms: the answer is lost, the decline happens anyway.
        stub.set(
            "o-1",
            Behaviour::SlowDecline(std::time::Duration::from_millis(600)),
        );
        let app = app(&stub, &clock, None);
        let json = event(&[("m1", "o-1", 10.0)], 1);
        let (_, statuses) = invoke(&app, &json).await;
        assert_eq!(
            outcome(&statuses[0]),
            (Decision::Retry, "payment_ambiguous"),
            "{dialect:?}"
        );
        stub.settled("o-1").await;
        clock.advance_ms(2 * DAY_MS);
        for _ in 0..2 {
            let (failed, statuses) = invoke(&app, &json).await;
            assert_eq!(failed, ["m1"]);
            assert_eq!(
                outcome(&statuses[0]),
                (Decision::Poison, "payment_rejected"),
                "{dialect:?}: {}",
                detail(&statuses[0])
            );
        }
        assert_eq!(
            stub.requests("o-1"),
            1,
            "{dialect:?}: the declined card was sent again"
        );
    }
}

/// Seams finding 3, the other half: a look-up whose answer is not understood (a status nobody
/// documented) settles nothing and charges nothing, even inside the key window where a resend
/// would be replayed: a person reads the provider's answer (POISON `needs_reconciliation`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_up_answer_not_understood_charges_nothing() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(std::time::Duration::from_millis(DAY_MS)));
    stub.set_lookup_dialect(LookupDialect::UnknownStatus);
    stub.set("o-1", Behaviour::ChargeThen504);
    let app = app(&stub, &clock, None);
    let json = event(&[("m1", "o-1", 10.0)], 1);
    let (_, statuses) = invoke(&app, &json).await;
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Retry, "payment_ambiguous")
    );
    let (failed, statuses) = invoke(&app, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_decided(
        &statuses[0],
        (Decision::Poison, "needs_reconciliation"),
        "not understood",
    );
    assert_eq!(stub.requests("o-1"), 1, "sent again on an unread answer");
    assert_eq!(stub.charges("o-1"), 1);
}

/// Seams finding 10. An earlier attempt's answer was lost; meanwhile the provider holds a charge
/// under the order's key for another amount (another client reused the id). The look-up shows
/// it: CONFLICT (POISON `conflict`) at once, without sending the charge again and leaning on
/// the provider's 422, which a provider past its key window would not give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_up_showing_another_amount_or_currency_is_a_conflict() {
    for (amount, currency) in [(2_000, "EUR"), (1_000, "USD")] {
        let clock = ManualClock::at(T0);
        let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
        stub.set("o-1", Behaviour::Status(503));
        let app = app(&stub, &clock, None);
        let json = event(&[("m1", "o-1", 10.0)], 1);
        let (_, statuses) = invoke(&app, &json).await;
        assert_eq!(
            outcome(&statuses[0]),
            (Decision::Retry, "payment_ambiguous")
        );
        stub.charge_directly("o-1", amount, currency);
        let (failed, statuses) = invoke(&app, &json).await;
        assert_eq!(failed, ["m1"]);
        assert_eq!(
            outcome(&statuses[0]),
            (Decision::Poison, "conflict"),
            "{amount} {currency}: {}",
            detail(&statuses[0])
        );
        assert_eq!(stub.requests("o-1"), 1, "charged again after the look-up");
        assert_eq!(stub.lookups("o-1"), 1);
    }
}

/// Issue 49, finding 1. As above, with the other charge worded as each dialect words money, and
/// its amount as an integer, as text (`"5000"`) or as a decimal (`5000.0`). Read exactly, another
/// amount is a conflict; worded so it cannot be read exactly, it is not understood
/// (`needs_reconciliation`). Never a match: the order is not completed as paid by a charge of
/// 50.00 EUR for an order of 10.00, and nothing is charged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_up_amount_that_cannot_be_read_exactly_is_never_a_match() {
    use process_orders::testkit::payment_stub::AmountWording;
    for dialect in [
        LookupDialect::Draft,
        LookupDialect::Stripe,
        LookupDialect::Adyen,
    ] {
        for (wording, expected) in [
            (AmountWording::Integer, "conflict"),
            (AmountWording::Text, "needs_reconciliation"),
            (AmountWording::Decimal, "needs_reconciliation"),
        ] {
            let clock = ManualClock::at(T0);
            let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
            stub.set_lookup_dialect(dialect);
            stub.set_amount_wording(wording);
            stub.set("o-1", Behaviour::Status(503));
            let app = app(&stub, &clock, None);
            let json = event(&[("m1", "o-1", 10.0)], 1);
            let (_, statuses) = invoke(&app, &json).await;
            assert_eq!(
                outcome(&statuses[0]),
                (Decision::Retry, "payment_ambiguous")
            );
            stub.charge_directly("o-1", 5_000, "EUR");
            let (failed, statuses) = invoke(&app, &json).await;
            assert_eq!(failed, ["m1"], "{dialect:?} {wording:?}");
            assert_eq!(
                outcome(&statuses[0]),
                (Decision::Poison, expected),
                "{dialect:?} {wording:?}: {}",
                detail(&statuses[0])
            );
            assert_eq!(
                stub.requests("o-1"),
                1,
                "{dialect:?} {wording:?}: charged again"
            );
            assert_eq!(stub.lookups("o-1"), 1);
        }
    }
}

/// Seams finding 7. A gateway echoes the refused key in its message, past the first 190
/// characters, with nothing before it that marks it as a credential. No run of eight characters
/// of the key survives into the verdict's detail (which the log and a DLQ copy carry), though the
/// log keeps only 200 characters of the provider's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_run_of_the_key_survives_the_cut_of_the_provider_text() {
    const KEY: &str = "QwertyUiopAsdfGhjkLzxcVbnmMnbvCxzL";
    for filler in [150, 180, 190, 195, 199] {
        let clock = ManualClock::at(T0);
        let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
        stub.require_api_key(Some("sk_other"));
        stub.echo_key_after(Some(filler));
        let app = app(&stub, &clock, Some(KEY));
        let (_, statuses) = invoke(&app, &event(&[("m1", "o-1", 10.0)], 1)).await;
        assert_eq!(outcome(&statuses[0]), (Decision::Retry, "payment_config"));
        let detail = detail(&statuses[0]);
        for run in KEY.as_bytes().windows(8) {
            let run = std::str::from_utf8(run).expect("ascii");
            assert!(
                !detail.contains(run),
                "filler {filler}: {run:?} of the key reached the detail: {detail}"
            );
        }
    }
}

/// An event of one record carrying a moved copy's failure attribute (as a redrive of the DLQ
/// delivers it), first failed at `first_failure_ms`.
fn redriven_event(order_id: &str, first_failure_ms: u64) -> String {
    redriven_copy(
        order_id,
        10.0,
        ("retries_exhausted", "payment_ambiguous at receive 200"),
        first_failure_ms,
    )
}

/// As [`redriven_event`], for an order of `amount` moved for `reason` (and its detail).
fn redriven_copy(
    order_id: &str,
    amount: f64,
    (reason, detail): (&str, &str),
    first_failure_ms: u64,
) -> String {
    let failure = sqs_batch::dead_letter::Failure {
        reason: reason.into(),
        detail: Some(detail.into()),
        key: Some(order_id.into()),
        source_queue_arn: "arn:aws:sqs:us-east-1:123456789012:orders".into(),
        receive_count: Some(200),
        first_failure_ms: Some(first_failure_ms),
        last_failure_ms: first_failure_ms + DAY_MS,
        moved_by: "orders:3".into(),
        ..Default::default()
    };
    let attribute = serde_json::to_string(&failure).expect("json");
    json!({ "Records": [{
        "messageId": "m-redriven",
        "receiptHandle": "rh-redriven",
        "body": json!({ "order_id": order_id, "amount": amount }).to_string(),
        "attributes": { "ApproximateReceiveCount": "1" },
        "messageAttributes": { sqs_batch::dead_letter::FAILURE_ATTRIBUTE: {
            "stringValue": attribute, "dataType": "String",
            "stringListValues": [], "binaryListValues": [] } },
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
    }]})
    .to_string()
}

/// Seams finding 9. An order charged and answered 504 gave up and was moved; its copy is
/// redriven 20 days later, when its idempotency item (18 days) has expired and the provider has
/// forgotten the key and the charge. The copy's failure history is the only record that a charge
/// may exist: it counts as a prior attempt, so the look-up comes first, and its "not found" this
/// long after proves nothing (POISON `needs_reconciliation`, never a second charge). A copy whose
/// first failure is inside the retention finds its item (or its absence) trustworthy: charged
/// with no look-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_copy_redriven_after_its_item_expired_is_looked_up_before_any_charge() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    let window = std::time::Duration::from_millis(DAY_MS);
    stub.set_key_window(Some(window));
    stub.set_lookup_retention(Some(window));
    stub.set("o-9", Behaviour::ChargeThen504);
    let first = app(&stub, &clock, None);
    let (_, statuses) = invoke(&first, &event(&[("m1", "o-9", 10.0)], 1)).await;
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Retry, "payment_ambiguous")
    );
    assert_eq!(stub.charges("o-9"), 1);

    clock.advance_ms(20 * DAY_MS);
    // A fresh store: the item expired and DynamoDB deleted it.
    let later = app(&stub, &clock, None);
    stub.set("o-9", Behaviour::Normal);
    let (failed, statuses) = invoke(&later, &redriven_event("o-9", T0)).await;
    assert_eq!(failed, ["m-redriven"]);
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Poison, "needs_reconciliation"),
        "{}",
        detail(&statuses[0])
    );
    assert_eq!(stub.lookups("o-9"), 1, "looked up first");
    assert_eq!(stub.charges("o-9"), 1, "charged again 20 days later");

    // Moved an hour ago: looked up too (its absent item proves nothing of a refused claim's
    // earlier item), and the provider's "no such charge" inside the key window lets it go out.
    let (failed, statuses) = invoke(
        &later,
        &redriven_event("o-10", clock.now_ms() - DAY_MS / 24),
    )
    .await;
    assert!(failed.is_empty(), "{statuses:?}");
    assert_eq!(outcome(&statuses[0]), (Decision::Ack, "charged"));
    assert_eq!(stub.lookups("o-10"), 1);
    assert_eq!(stub.charges("o-10"), 1);
}

/// A copy SQS moved itself (no failure attribute of ours) that still carries SQS's
/// `DeadLetterQueueSourceArn` after a redrive has been in a DLQ: looked up before any charge, as
/// of unknown age, so the provider's "no such charge" proves nothing and a person decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_sqs_moved_itself_is_looked_up_when_its_mark_survives() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(std::time::Duration::from_millis(DAY_MS)));
    let app = app(&stub, &clock, None);
    let marked = json!({ "Records": [{
        "messageId": "m-sqs",
        "receiptHandle": "rh-sqs",
        "body": json!({ "order_id": "o-7", "amount": 10.0 }).to_string(),
        "attributes": {
            "ApproximateReceiveCount": "1",
            "DeadLetterQueueSourceArn": "arn:aws:sqs:us-east-1:123456789012:orders",
        },
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
    }]})
    .to_string();
    let (failed, statuses) = invoke(&app, &marked).await;
    assert_eq!(failed, ["m-sqs"]);
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Poison, "needs_reconciliation"),
        "{}",
        detail(&statuses[0])
    );
    assert_eq!((stub.lookups("o-7"), stub.requests("o-7")), (1, 0));
}

/// Issue 49, finding 3. A copy whose claim was refused wrote no item: a resend of a charged
/// order with another amount (`conflict`), or of a declined one (`payment_rejected`). Moved on
/// day 10, redriven on day 19, after the order's own item (written on day 0) expired: the copy's
/// history is the only sign that the key was used, whatever its age. Looked up first: the
/// charge of day 0 for another amount is a conflict, the decline of day 0 is final, and neither
/// is sent to the provider again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_copy_redriven_after_its_item_expired_is_looked_up_first() {
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.set_key_window(Some(std::time::Duration::from_millis(DAY_MS)));
    stub.set("o-2", Behaviour::Decline);
    let day0 = app(&stub, &clock, None);
    let (_, statuses) = invoke(
        &day0,
        &event(&[("m1", "o-1", 10.0), ("m2", "o-2", 10.0)], 1),
    )
    .await;
    assert_eq!(outcome(&statuses[0]), (Decision::Ack, "charged"));
    assert_eq!(
        outcome(&statuses[1]),
        (Decision::Poison, "payment_rejected")
    );

    // Day 10: the producer sends both ids again; each claim is refused by the item of day 0.
    clock.advance_ms(10 * DAY_MS);
    let (_, statuses) = invoke(
        &day0,
        &event(&[("m3", "o-1", 20.0), ("m4", "o-2", 10.0)], 1),
    )
    .await;
    assert_eq!(outcome(&statuses[0]), (Decision::Poison, "conflict"));
    assert_eq!(
        outcome(&statuses[1]),
        (Decision::Poison, "payment_rejected")
    );
    let moved_ms = clock.now_ms();

    // Day 19: the items of day 0 expired (18 days); the DLQ is redriven.
    clock.advance_ms(9 * DAY_MS);
    stub.set("o-2", Behaviour::Normal);
    let day19 = app(&stub, &clock, None);
    let conflict = redriven_copy(
        "o-1",
        20.0,
        ("conflict", "done before with another payload"),
        moved_ms,
    );
    let (failed, statuses) = invoke(&day19, &conflict).await;
    assert_eq!(failed, ["m-redriven"]);
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Poison, "conflict"),
        "{}",
        detail(&statuses[0])
    );
    let declined = redriven_copy(
        "o-2",
        10.0,
        ("payment_rejected", "the payment was declined"),
        moved_ms,
    );
    let (failed, statuses) = invoke(&day19, &declined).await;
    assert_eq!(failed, ["m-redriven"]);
    assert_eq!(
        outcome(&statuses[0]),
        (Decision::Poison, "payment_rejected"),
        "{}",
        detail(&statuses[0])
    );
    assert_eq!(stub.charges("o-1"), 1, "charged again under the order id");
    assert_eq!(stub.requests("o-2"), 1, "the declined card was sent again");
    assert_eq!((stub.lookups("o-1"), stub.lookups("o-2")), (1, 1));
}

/// A configuration error (our key refused) and the records the breaker then keeps from the
/// provider wait `CONFIGURATION_RETRY_AFTER_MS` before their retry: a person needs that long to
/// rotate a key, and every receive spent sooner counts towards `maxReceiveCount`. A provider
/// that is only down (503) is retried on the ordinary schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_error_waits_for_a_person_before_its_retry() {
    use process_orders::handler::CONFIGURATION_RETRY_AFTER_MS;
    let retry_after = |status: &RecordStatus| match status {
        RecordStatus::Handled(v) => v.retry_after_ms,
        other => panic!("not handled: {other:?}"),
    };
    let clock = ManualClock::at(T0);
    let stub = PaymentStub::start_with_clock(Arc::new(clock.clone())).await;
    stub.require_api_key(Some("sk_live"));
    let app = app(&stub, &clock, Some("sk_rotated_away"));
    let orders = numbered(0..24);
    let specs = specs(&orders);
    let (failed, statuses) = invoke(&app, &event(&specs, 1)).await;
    assert_eq!(failed.len(), specs.len());
    let mut reasons = std::collections::BTreeSet::new();
    for status in &statuses {
        let (outcome, reason) = outcome(status);
        assert_eq!(outcome, Decision::Retry);
        reasons.insert(reason);
        assert_eq!(
            retry_after(status),
            Some(T0 + CONFIGURATION_RETRY_AFTER_MS),
            "{reason}: {status:?}"
        );
    }
    assert_eq!(
        reasons,
        ["payment_circuit_open", "payment_config"].into(),
        "the breaker opened part-way"
    );
    assert_eq!(CONFIGURATION_RETRY_AFTER_MS, 15 * 60 * 1_000);

    let (_, statuses) = invoke(&app, &event(&[("m1", "o-503", 10.0)], 1)).await;
    assert_eq!(outcome(&statuses[0]).1, "payment_config");
    stub.require_api_key(Some("sk_rotated_away"));
    stub.set("o-503", Behaviour::Status(503));
    let (_, statuses) = invoke(&app, &event(&[("m1", "o-503", 10.0)], 1)).await;
    assert_eq!(outcome(&statuses[0]).0, Decision::Retry);
    assert_ne!(outcome(&statuses[0]).1, "payment_config");
    assert_eq!(retry_after(&statuses[0]), None, "{:?}", statuses[0]);
}
