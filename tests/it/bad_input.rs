//! The bad-input corpus: each case says exactly what happens. A malformed event is a clear
//! error; a malformed body is POISON for that record only; nothing panics; no invalid order is
//! ever acknowledged or charged.

use idempotency::MemoryStore;
use lambda_kit::clock::{Clock, SystemClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::failed_ids;
use serde_json::{Value, json};
use sqs_batch::edge::EventError;

type LocalApp = App<MemoryStore, SimulatedGateway, SystemClock>;

fn app_with(vars: &[(&str, &str)]) -> LocalApp {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect();
    let config =
        Config::from_lookup(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())).unwrap();
    App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    )
}

async fn run(app: &LocalApp, event: &str) -> Result<Vec<String>, EventError> {
    app.handle_json(event, SystemClock.now_ms() + 60_000)
        .await
        .map(|r| failed_ids(&r))
}

fn record(id: &str, body: Value) -> Value {
    json!({ "messageId": id, "body": body, "attributes": { "ApproximateReceiveCount": "1" } })
}

fn valid(id: &str, order: &str) -> Value {
    record(
        id,
        json!(json!({ "order_id": order, "amount": 10 }).to_string()),
    )
}

fn event(records: Vec<Value>) -> String {
    json!({ "Records": records }).to_string()
}

/// A malformed event: a clear error, nothing processed.
async fn assert_event_error(raw: &str, expect: fn(&EventError) -> bool) {
    let app = app_with(&[]);
    let err = run(&app, raw)
        .await
        .expect_err("a malformed event is an error");
    assert!(expect(&err), "{err:?}");
    assert!(!err.to_string().is_empty());
    assert_eq!(app.ports().gateway.requests(), 0);
}

fn malformed(e: &EventError) -> bool {
    matches!(e, EventError::Malformed(_))
}

fn missing_id(e: &EventError) -> bool {
    matches!(e, EventError::MissingMessageId { .. })
}

#[tokio::test]
async fn event_truncated_json() {
    assert_event_error(r#"{"Records": [{"messageId": "m1", "bo"#, malformed).await;
}

#[tokio::test]
async fn event_empty_input() {
    assert_event_error("", malformed).await;
}

#[tokio::test]
async fn event_records_missing() {
    assert_event_error("{}", malformed).await;
}

#[tokio::test]
async fn event_records_null() {
    assert_event_error(r#"{"Records": null}"#, malformed).await;
}

#[tokio::test]
async fn event_records_not_a_list() {
    assert_event_error(r#"{"Records": {"messageId": "m1"}}"#, malformed).await;
}

#[tokio::test]
async fn event_top_level_array() {
    assert_event_error("[]", malformed).await;
}

#[tokio::test]
async fn event_record_not_an_object() {
    assert_event_error(r#"{"Records": [1]}"#, malformed).await;
}

#[tokio::test]
async fn event_nested_10000_deep() {
    let deep = format!(
        "{{\"Records\": {}{}}}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_event_error(&deep, malformed).await;
}

#[tokio::test]
async fn event_message_id_null() {
    assert_event_error(
        &event(vec![valid("m0", "o-0"), record("x", json!("{}"))])
            .replace(r#""messageId":"x""#, r#""messageId":null"#),
        missing_id,
    )
    .await;
}

#[tokio::test]
async fn event_message_id_empty() {
    assert_event_error(
        &event(vec![valid("m0", "o-0"), valid("", "o-1")]),
        missing_id,
    )
    .await;
}

#[tokio::test]
async fn event_message_id_missing() {
    assert_event_error(&event(vec![json!({ "body": "{}" })]), missing_id).await;
}

#[tokio::test]
async fn event_message_id_not_a_string() {
    assert_event_error(
        &event(vec![json!({ "messageId": 7, "body": "{}" })]),
        malformed,
    )
    .await;
}

/// Lambda's attributes are missing: the record is still processed (receive count unknown).
#[tokio::test]
async fn event_attributes_missing() {
    let app = app_with(&[]);
    let ev = event(vec![
        json!({ "messageId": "m1", "body": json!({ "order_id": "o-1", "amount": 1 }).to_string() }),
    ]);
    assert_eq!(run(&app, &ev).await.unwrap(), Vec::<String>::new());
    assert!(app.ports().gateway.charged("o-1"));
}

#[tokio::test]
async fn event_receive_count_not_a_number() {
    let app = app_with(&[]);
    let mut r = valid("m1", "o-1");
    r["attributes"]["ApproximateReceiveCount"] = json!("lots");
    assert_eq!(
        run(&app, &event(vec![r])).await.unwrap(),
        Vec::<String>::new()
    );
    assert!(app.ports().gateway.charged("o-1"));
}

/// A bad body next to a valid one: the bad one alone is reported, never charged.
async fn assert_poison(body: Value) {
    let app = app_with(&[]);
    let ev = event(vec![valid("ok", "o-ok"), record("bad", body)]);
    assert_eq!(run(&app, &ev).await.unwrap(), ["bad"]);
    assert_eq!(app.ports().gateway.effective_charges(), 1);
    assert!(app.ports().gateway.charged("o-ok"));
}

#[tokio::test]
async fn body_null() {
    assert_poison(Value::Null).await;
}

#[tokio::test]
async fn body_empty() {
    assert_poison(json!("")).await;
}

#[tokio::test]
async fn body_whitespace_only() {
    assert_poison(json!(" \t\r\n ")).await;
}

#[tokio::test]
async fn body_byte_order_mark() {
    assert_poison(json!(format!(
        "\u{feff}{}",
        json!({ "order_id": "o-1", "amount": 1 })
    )))
    .await;
}

#[tokio::test]
async fn body_invalid_unicode_escape() {
    assert_poison(json!(r#"{"order_id": "\uZZZZ", "amount": 1}"#)).await;
}

#[tokio::test]
async fn body_lone_surrogate() {
    assert_poison(json!(r#"{"order_id": "o-\ud800", "amount": 1}"#)).await;
}

#[tokio::test]
async fn body_duplicated_keys() {
    assert_poison(json!(r#"{"order_id": "o-1", "amount": 1, "amount": 2}"#)).await;
}

#[tokio::test]
async fn body_amount_as_string() {
    assert_poison(json!(r#"{"order_id": "o-1", "amount": "10"}"#)).await;
}

#[tokio::test]
async fn body_amount_overflows() {
    assert_poison(json!(r#"{"order_id": "o-1", "amount": 1e400}"#)).await;
}

#[tokio::test]
async fn body_amount_negative_zero() {
    assert_poison(json!(r#"{"order_id": "o-1", "amount": -0}"#)).await;
}

#[tokio::test]
async fn body_amount_nan_as_string() {
    assert_poison(json!(r#"{"order_id": "o-1", "amount": "NaN"}"#)).await;
}

#[tokio::test]
async fn body_amount_boolean() {
    assert_poison(json!(r#"{"order_id": "o-1", "amount": true}"#)).await;
}

#[tokio::test]
async fn body_order_id_100_kb() {
    assert_poison(json!(
        json!({ "order_id": "x".repeat(100 * 1024), "amount": 1 }).to_string()
    ))
    .await;
}

#[tokio::test]
async fn body_order_id_with_control_characters() {
    assert_poison(json!(r#"{"order_id": "o-1\u0007", "amount": 1}"#)).await;
}

#[tokio::test]
async fn body_json_array() {
    assert_poison(json!(r#"["o-1", 10]"#)).await;
}

#[tokio::test]
async fn body_double_encoded_json_string() {
    assert_poison(json!(
        json!(json!({ "order_id": "o-1", "amount": 1 }).to_string()).to_string()
    ))
    .await;
}

#[tokio::test]
async fn body_nested_10000_deep() {
    assert_poison(json!(format!(
        "{}{}",
        "[".repeat(10_000),
        "]".repeat(10_000)
    )))
    .await;
}

#[tokio::test]
async fn body_of_1_mib_garbage() {
    assert_poison(json!("x".repeat(1 << 20))).await;
}

/// A 1 MiB body that is a valid order with a large unknown field is an order: charged.
#[tokio::test]
async fn body_of_1_mib_valid_order() {
    let app = app_with(&[]);
    let body =
        json!({ "order_id": "o-big", "amount": 3, "notes": "n".repeat(1 << 20) }).to_string();
    assert_eq!(
        run(&app, &event(vec![record("m1", json!(body))]))
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    assert!(app.ports().gateway.charged("o-big"));
}

#[tokio::test]
async fn envelope_message_not_json() {
    assert_poison(json!(
        json!({ "Type": "Notification", "Message": "not json {" }).to_string()
    ))
    .await;
}

#[tokio::test]
async fn envelope_message_not_a_string() {
    assert_poison(json!(
        json!({ "Type": "Notification", "Message": { "order_id": "o-1", "amount": 1 } })
            .to_string()
    ))
    .await;
}

/// A 6 MB event of many records (Lambda's payload limit) is processed whole.
#[tokio::test]
async fn event_of_6_mb() {
    let app = app_with(&[]);
    let records: Vec<Value> = (0..9_000)
        .map(|i| {
            let mut r = valid(&format!("m{i}"), &format!("o-{i}"));
            r["receiptHandle"] = json!("r".repeat(500));
            r
        })
        .collect();
    let ev = event(records);
    assert!(
        ev.len() > 5_500_000 && ev.len() <= 6 * 1024 * 1024,
        "{}",
        ev.len()
    );
    assert_eq!(run(&app, &ev).await.unwrap(), Vec::<String>::new());
    assert_eq!(app.ports().gateway.effective_charges(), 9_000);
}

/// FIFO: one record without MessageGroupId. Batch scope keeps batch order; group scope gives
/// group-less records an anonymous group of their own. Valid orders are all charged.
#[tokio::test]
async fn fifo_record_missing_its_group() {
    for scope in ["batch", "group"] {
        let app = app_with(&[("SQS_BATCH_FIFO_SCOPE", scope)]);
        let mut records = vec![valid("m1", "o-1"), valid("m2", "o-2"), valid("m3", "o-3")];
        for (i, r) in records.iter_mut().enumerate() {
            r["eventSourceARN"] = json!("arn:aws:sqs:us-east-1:1:orders.fifo");
            if i != 1 {
                r["attributes"]["MessageGroupId"] = json!("g");
            }
        }
        assert_eq!(
            run(&app, &event(records)).await.unwrap(),
            Vec::<String>::new(),
            "{scope}"
        );
        assert_eq!(app.ports().gateway.effective_charges(), 3, "{scope}");
    }
}

/// The same messageId twice: reported once if either copy fails, and the response check holds.
#[tokio::test]
async fn duplicate_message_ids_in_one_batch() {
    let app = app_with(&[]);
    let ev = event(vec![
        valid("same", "o-1"),
        record("same", json!("not json")),
        valid("other", "o-2"),
    ]);
    assert_eq!(run(&app, &ev).await.unwrap(), ["same"]);
    let clean = event(vec![valid("dup", "o-3"), valid("dup", "o-4")]);
    assert_eq!(run(&app, &clean).await.unwrap(), Vec::<String>::new());
}

/// Unknown fields are ignored.
#[tokio::test]
async fn body_with_unknown_fields() {
    let app = app_with(&[]);
    let body =
        json!({ "order_id": "o-1", "amount": 1, "currency": "EUR", "items": [1, 2] }).to_string();
    assert_eq!(
        run(&app, &event(vec![record("m1", json!(body))]))
            .await
            .unwrap(),
        Vec::<String>::new()
    );
}
