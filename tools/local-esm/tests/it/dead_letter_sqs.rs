//! POISON moved by the function against moto's SQS: an invalid body leaves its queue at its
//! first receive, in one invocation, into the DLQ the queue's redrive policy names, keeping its
//! body and attributes and carrying why; a queue whose DLQ cannot be learned leaves the record
//! RETRY, never acknowledged without its copy.

use std::collections::HashMap;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use idempotency::MemoryStore;
use lambda_kit::clock::SystemClock;
use local_esm::setup::{QueueSettings, queue_pair};
use process_orders::app::{App, SQS_SDK, sqs_dead_letters};
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::dynamo::moto_endpoint;
use process_orders::testkit::failed_ids;
use serde_json::json;
use sqs_batch::dead_letter::{FAILURE_ATTRIBUTE, Failure};

const SETTINGS: QueueSettings = QueueSettings {
    visibility_timeout_s: 30,
    max_receive_count: 200,
};
/// A queue whose `maxReceiveCount` an operator lowered to 5 in the console.
const LOWERED: QueueSettings = QueueSettings {
    max_receive_count: 5,
    ..SETTINGS
};

/// The function with dead-letter moves on moto's SQS.
fn app(endpoint: &str) -> App<MemoryStore, SimulatedGateway, SystemClock> {
    let config =
        Config::from_lookup(|k| (k == "METRICS_ENABLED").then(|| "false".into())).expect("config");
    App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    )
    .with_dead_letters(Some(sqs_dead_letters(
        local_esm::sdk_config(endpoint),
        "orders-fn:7".to_owned(),
    )))
}

/// Receives everything visible, with every attribute, as Lambda's poller would, and builds the
/// event Lambda delivers.
pub(super) async fn receive_event(client: &Client, url: &str, arn: &str) -> String {
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .expect("receive");
    let records: Vec<_> = out
        .messages()
        .iter()
        .map(|m| {
            let attributes: serde_json::Map<String, serde_json::Value> = m
                .attributes()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                .collect();
            let message_attributes: serde_json::Map<String, serde_json::Value> = m
                .message_attributes()
                .into_iter()
                .flatten()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        json!({ "stringValue": v.string_value(), "dataType": v.data_type(),
                                "stringListValues": [], "binaryListValues": [] }),
                    )
                })
                .collect();
            json!({
                "messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(),
                "attributes": attributes, "messageAttributes": message_attributes,
                "eventSource": "aws:sqs", "eventSourceARN": arn, "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records }).to_string()
}

/// What the DLQ holds: each copy's body and its attributes' string values.
pub(super) async fn dlq_copies(
    client: &Client,
    dlq_url: &str,
) -> Vec<(String, HashMap<String, String>)> {
    let out = client
        .receive_message()
        .queue_url(dlq_url)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .send()
        .await
        .expect("receive the DLQ");
    out.messages()
        .iter()
        .map(|m| {
            let attributes = m
                .message_attributes()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.string_value().unwrap_or_default().to_owned()))
                .collect();
            (m.body().unwrap_or_default().to_owned(), attributes)
        })
        .collect()
}

/// The failure a moved copy carries.
pub(super) fn failure_of(attributes: &HashMap<String, String>) -> Failure {
    serde_json::from_str(attributes.get(FAILURE_ATTRIBUTE).expect("the failure"))
        .expect("failure JSON")
}

/// An invalid body and a valid order, received once: one invocation acknowledges both, the
/// invalid one because its copy is in the DLQ, with its body, its own attribute and the failure
/// (reason, detail, source queue, receive count, times, mover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_reaches_the_dlq_at_its_first_receive_with_its_reason() {
    let endpoint = moto_endpoint();
    let client = process_orders::aws::sqs(&local_esm::sdk_config(&endpoint), &SQS_SDK);
    let queues = queue_pair(&client, "dl-moved", false, SETTINGS)
        .await
        .expect("queues");
    client
        .send_message()
        .queue_url(&queues.url)
        .message_body(r#"{"order_id":"p-1","amount":-5}"#)
        .message_attributes(
            "trace",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("t-1")
                .build()
                .expect("attribute"),
        )
        .send()
        .await
        .expect("send");
    client
        .send_message()
        .queue_url(&queues.url)
        .message_body(r#"{"order_id":"v-1","amount":10}"#)
        .send()
        .await
        .expect("send");
    let json = receive_event(&client, &queues.url, &queues.arn).await;
    let event = sqs_batch::edge::parse_event(&json).expect("event");
    assert_eq!(event.records.len(), 2, "both received: {json}");

    let app = app(&endpoint);
    let deadline_ms = lambda_kit::Clock::now_ms(&SystemClock) + 30_000;
    let (response, report) = app
        .handle_with_report(&event, deadline_ms)
        .await
        .expect("handled");
    assert!(failed_ids(&response).is_empty(), "{report:?}");
    assert_eq!(report.counts().moved, 1);

    let moved = dlq_copies(&client, &queues.dlq_url).await;
    assert_eq!(moved.len(), 1, "one copy in the DLQ");
    let (body, attributes) = &moved[0];
    assert_eq!(body, r#"{"order_id":"p-1","amount":-5}"#);
    assert_eq!(attributes.get("trace").map(String::as_str), Some("t-1"));
    let failure = failure_of(attributes);
    assert_eq!(failure.reason, "invalid_body");
    assert!(
        failure
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("greater than zero")),
        "{failure:?}"
    );
    assert_eq!(failure.key.as_deref(), Some("p-1"));
    assert_eq!(failure.source_queue_arn, queues.arn);
    assert_eq!(failure.receive_count, Some(1));
    assert!(
        failure
            .first_failure_ms
            .is_some_and(|first| first <= failure.last_failure_ms)
    );
    assert_eq!(failure.moved_by, "orders-fn:7");
}

/// A queue without a redrive policy has no DLQ to learn: the move fails, and the record stays
/// reported as RETRY (its copy was never made, so it must not be acknowledged).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_that_fails_leaves_the_record_retry() {
    let endpoint = moto_endpoint();
    let client = process_orders::aws::sqs(&local_esm::sdk_config(&endpoint), &SQS_SDK);
    let url = client
        .create_queue()
        .queue_name("dl-no-dlq")
        .send()
        .await
        .expect("queue")
        .queue_url
        .expect("url");
    client
        .send_message()
        .queue_url(&url)
        .message_body("not json")
        .send()
        .await
        .expect("send");
    let arn = "arn:aws:sqs:us-east-1:123456789012:dl-no-dlq";
    let json = receive_event(&client, &url, arn).await;
    let event = sqs_batch::edge::parse_event(&json).expect("event");
    assert_eq!(event.records.len(), 1, "{json}");
    let deadline_ms = lambda_kit::Clock::now_ms(&SystemClock) + 30_000;
    let (response, report) = app(&endpoint)
        .handle_with_report(&event, deadline_ms)
        .await
        .expect("handled");
    assert_eq!(failed_ids(&response).len(), 1, "{report:?}");
    assert_eq!(report.counts().moved, 0);
    assert_eq!(
        report.statuses[0].outcome(),
        sqs_batch::processor::Decision::Retry
    );
}

/// FIFO: a record that only a person can settle does not drag its group. The group's head is
/// an order whose earlier charge may exist from two days ago, which the provider's look-up no
/// longer knows (`needs_reconciliation`); behind it in the same group, two valid orders. On the
/// local event source mapping the head goes to the DLQ alone, with its reason, and both
/// followers are charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_record_only_a_person_can_settle_leaves_alone_and_its_group_goes_on() {
    use idempotency::guard::EffectStore;
    use idempotency::{IdempotencyStore, store::Begin, store::ClaimRequest};
    use local_esm::esm::{self, EsmSettings};
    use local_esm::send::Outgoing;
    use process_orders::money::Currency;
    use process_orders::order::decode_order;
    use process_orders::payment::HttpGateway;
    use process_orders::payment::http::HttpSettings;
    use process_orders::testkit::payment_stub::PaymentStub;
    use std::sync::Arc;
    use std::time::Duration;

    let endpoint = moto_endpoint();
    // The mapping's client: its receives long-poll, past the function's SQS bounds.
    let client = Client::new(&local_esm::sdk_config(&endpoint));
    let settings = QueueSettings {
        visibility_timeout_s: 6,
        max_receive_count: 5,
    };
    let queues = queue_pair(
        &client,
        &format!("dl-group-{}", std::process::id()),
        true,
        settings,
    )
    .await
    .expect("queues");
    let body = |id: &str| json!({ "order_id": id, "amount": 10 }).to_string();
    let sent: Vec<Outgoing> = ["c-1", "f-1", "f-2"]
        .iter()
        .map(|id| Outgoing {
            body: body(id),
            order_id: Some((*id).to_owned()),
            group: "g1".to_owned(),
        })
        .collect();
    local_esm::send::send(&client, &queues, &sent)
        .await
        .expect("send");

    // Two days ago an attempt at c-1 ended without an answer; the provider has forgotten it.
    let config = Config::from_lookup(|k| match k {
        "METRICS_ENABLED" => Some("false".into()),
        "SQS_BATCH_FIFO_SCOPE" => Some("group".into()),
        "SQS_BATCH_DEADLINE_MARGIN_MS" => Some("1000".into()),
        _ => None,
    })
    .expect("config");
    let store = MemoryStore::new(config.store.retention);
    let two_days_ago = lambda_kit::Clock::now_ms(&SystemClock) - 2 * 86_400_000;
    let culprit = body("c-1");
    let Ok(Begin::Started { lease, .. }) = store
        .begin(&ClaimRequest::new(
            "c-1",
            decode_order(&culprit, Currency::EUR)
                .expect("order")
                .fingerprint(),
            two_days_ago,
            two_days_ago + 1_000,
            "m-earlier",
        ))
        .await
    else {
        panic!("claimed");
    };
    store
        .mark_attempted("c-1", &lease, two_days_ago)
        .await
        .expect("attempted");
    let stub = PaymentStub::start().await;
    let gateway = HttpGateway::new(&HttpSettings {
        base_url: stub.url().parse().expect("url"),
        api_key: process_orders::payment::KeySetting::None,
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retryable_failures: process_orders::payment::answers::RetryableFailures::default(),
    })
    .expect("gateway");
    let app = App::with_ports(&config, store, gateway, SystemClock).with_dead_letters(Some(
        sqs_dead_letters(local_esm::sdk_config(&endpoint), "orders-fn:7".to_owned()),
    ));
    let esm_settings = EsmSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(100),
        concurrency: 1,
        function_timeout: Duration::from_secs(5),
        drained_after: Duration::from_secs(8),
        max_run: Duration::from_secs(60),
    };
    let stats = esm::run(client.clone(), queues.clone(), Arc::new(app), esm_settings)
        .await
        .expect("mapping");
    assert!(stats.drained, "{stats:?}");
    assert_eq!(stub.charges("f-1"), 1, "{stats:?}");
    assert_eq!(stub.charges("f-2"), 1, "{stats:?}");
    assert_eq!(stub.requests("c-1"), 0, "never charged blindly");
    assert_eq!(stub.charge_order(), ["f-1", "f-2"]);

    let moved = dlq_copies(&client, &queues.dlq_url).await;
    assert_eq!(moved.len(), 1, "the culprit alone");
    assert_eq!(moved[0].0, culprit);
    let failure = failure_of(&moved[0].1);
    assert_eq!(failure.reason, "needs_reconciliation");
    assert_eq!(failure.receive_count, Some(1));
}

/// One record of a synthetic event.
struct Record {
    id: String,
    body: String,
    /// Name to string value.
    attributes: Vec<(String, String)>,
    receives: u32,
}

impl Record {
    fn new(id: &str, body: String, attributes: Vec<(String, String)>, receives: u32) -> Self {
        Self {
            id: id.to_owned(),
            body,
            attributes,
            receives,
        }
    }
}

/// A synthetic event of `records` from the queue `arn`, as Lambda delivers it.
fn event_of(arn: &str, records: &[Record]) -> String {
    let records: Vec<_> = records
        .iter()
        .map(
            |Record {
                 id,
                 body,
                 attributes,
                 receives,
             }| {
                let message_attributes: serde_json::Map<String, serde_json::Value> = attributes
                    .iter()
                    .map(|(name, value)| {
                        (
                            name.clone(),
                            json!({ "stringValue": value, "dataType": "String",
                                "stringListValues": [], "binaryListValues": [] }),
                        )
                    })
                    .collect();
                json!({
                    "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                    "attributes": { "ApproximateReceiveCount": receives.to_string(),
                                    "ApproximateFirstReceiveTimestamp": "1767225600000" },
                    "messageAttributes": message_attributes,
                    "eventSource": "aws:sqs", "eventSourceARN": arn, "awsRegion": "us-east-1"
                })
            },
        )
        .collect();
    json!({ "Records": records }).to_string()
}

/// What real SQS would refuse of a copy, whatever moto accepts: more than ten attributes, a
/// value outside SQS's character set, or a copy over `max_bytes` (its body, and each attribute's
/// name, type and value).
fn assert_sqs_would_take(copy: &(String, HashMap<String, String>), max_bytes: usize) {
    let (body, attributes) = copy;
    assert!(attributes.len() <= 10, "{} attributes", attributes.len());
    let allowed = |c: char| {
        matches!(c, '\u{9}' | '\u{a}' | '\u{d}' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
            || c >= '\u{10000}'
    };
    for (name, value) in attributes {
        assert!(
            value.chars().all(allowed),
            "{name} has characters SQS refuses"
        );
    }
    let size = body.len()
        + attributes
            .iter()
            .map(|(name, value)| name.len() + "String".len() + value.len())
            .sum::<usize>();
    assert!(
        size <= max_bytes,
        "a copy of {size} bytes, over {max_bytes}"
    );
}

/// Seams finding 4. A redriven copy carries `dead-letter-failure` and nine attributes of its
/// own, one of them the claim check's pointer. Poison again, it is moved again with all nine
/// (the old failure replaced, not counted among them), and the new failure carries the old one's
/// history: its reason, and the first failure's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_moved_twice_keeps_every_attribute_and_its_history() {
    let endpoint = moto_endpoint();
    let client = process_orders::aws::sqs(&local_esm::sdk_config(&endpoint), &SQS_SDK);
    let queues = queue_pair(&client, "dl-twice", false, SETTINGS)
        .await
        .expect("queues");
    let earlier = Failure {
        reason: "invalid_body".into(),
        detail: Some("amount is not greater than zero".into()),
        key: Some("p-1".into()),
        source_queue_arn: queues.arn.clone(),
        receive_count: Some(1),
        first_failure_ms: Some(1_767_000_000_000),
        last_failure_ms: 1_767_000_000_500,
        moved_by: "orders-fn:6".into(),
        ..Failure::default()
    };
    let mut attributes: Vec<(String, String)> = (1..=7)
        .map(|i| (format!("attr-{i}"), format!("v-{i}")))
        .collect();
    attributes.push(("payload-pointer".into(), "s3://bucket/key".into()));
    attributes.push(("trace".into(), "t-1".into()));
    let originals = attributes.clone();
    attributes.push((
        FAILURE_ATTRIBUTE.into(),
        serde_json::to_string(&earlier).expect("json"),
    ));
    let body = r#"{"order_id":"p-1","amount":-5}"#.to_owned();
    let json = event_of(
        &queues.arn,
        &[Record::new("m1", body.clone(), attributes, 1)],
    );
    let event = sqs_batch::edge::parse_event(&json).expect("event");
    let deadline_ms = lambda_kit::Clock::now_ms(&SystemClock) + 30_000;
    let (response, report) = app(&endpoint)
        .handle_with_report(&event, deadline_ms)
        .await
        .expect("handled");
    assert!(failed_ids(&response).is_empty(), "{report:?}");
    let moved = dlq_copies(&client, &queues.dlq_url).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].0, body);
    for (name, value) in &originals {
        assert_eq!(
            moved[0].1.get(name),
            Some(value),
            "{name} was dropped: {:?}",
            moved[0].1.keys()
        );
    }
    assert_sqs_would_take(&moved[0], 262_144);
    let failure = failure_of(&moved[0].1);
    // A `payload-pointer` without the claim check is the claim check's own POISON.
    let sqs_batch::processor::RecordStatus::Moved(verdict) = &report.statuses[0] else {
        panic!("moved: {report:?}");
    };
    assert_eq!(failure.reason, verdict.reason);
    assert_eq!(failure.moved_by, "orders-fn:7");
    assert_eq!(
        failure.first_failure_ms,
        Some(1_767_000_000_000),
        "the first failure is the earlier move's"
    );
    assert_eq!(failure.earlier_moves, 1);
    assert_eq!(failure.history.len(), 1, "{failure:?}");
    assert_eq!(failure.history[0].moved_by, "orders-fn:6");
    assert_eq!(failure.history[0].last_failure_ms, 1_767_000_000_500);
}

/// Seams finding 5. Ten poison records of about 120 KB each would make one `SendMessageBatch`
/// over SQS's 1 MiB: split by size, all ten leave at their first receive. Beside them, poison
/// whose order id is 200 KB long, or holds U+FFFF (valid JSON, valid in a body, refused in an
/// attribute value): moved too, their key cut and hashed, every copy within the DLQ's
/// `MaximumMessageSize` (set low here) and SQS's character set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_and_odd_poison_leaves_at_its_first_receive_within_sqs_limits() {
    use aws_sdk_sqs::types::QueueAttributeName;
    let endpoint = moto_endpoint();
    let client = process_orders::aws::sqs(&local_esm::sdk_config(&endpoint), &SQS_SDK);
    let queues = queue_pair(&client, "dl-large", false, SETTINGS)
        .await
        .expect("queues");
    const DLQ_MAX: usize = 240_000;
    client
        .set_queue_attributes()
        .queue_url(&queues.dlq_url)
        .attributes(QueueAttributeName::MaximumMessageSize, DLQ_MAX.to_string())
        .send()
        .await
        .expect("set the DLQ's size");
    let mut records: Vec<Record> = (0..10)
        .map(|i| {
            let body = json!({ "order_id": format!("big-{i}"), "amount": -1,
                               "note": "x".repeat(120_000) })
            .to_string();
            let trace = vec![("trace".into(), format!("t-{i}"))];
            Record::new(&format!("m{i}"), body, trace, 1)
        })
        .collect();
    let long_id = "L".repeat(200_000);
    records.push(Record::new(
        "long",
        json!({ "order_id": long_id, "amount": 1 }).to_string(),
        vec![],
        1,
    ));
    records.push(Record::new(
        "odd",
        r#"{"order_id":"o-\uffff","amount":1}"#.into(),
        vec![],
        1,
    ));
    for chunk in [&records[..10], &records[10..]] {
        let json = event_of(&queues.arn, chunk);
        let event = sqs_batch::edge::parse_event(&json).expect("event");
        let deadline_ms = lambda_kit::Clock::now_ms(&SystemClock) + 30_000;
        let (response, report) = app(&endpoint)
            .handle_with_report(&event, deadline_ms)
            .await
            .expect("handled");
        assert!(failed_ids(&response).is_empty(), "{report:?}");
        assert_eq!(report.counts().moved, chunk.len());
    }
    let mut moved = Vec::new();
    for _ in 0..4 {
        moved.extend(dlq_copies(&client, &queues.dlq_url).await);
    }
    assert_eq!(moved.len(), 12, "every record has its copy");
    for copy in &moved {
        assert_sqs_would_take(copy, DLQ_MAX);
        let failure = failure_of(&copy.1);
        let key = failure.key.expect("a key");
        assert!(key.len() <= 256, "a key of {} bytes", key.len());
    }
    let odd = moved
        .iter()
        .find(|(body, _)| body.contains("\\uffff"))
        .expect("the odd copy");
    let key = failure_of(&odd.1).key.expect("key");
    assert!(key.starts_with("o-") && key.contains('#'), "{key:?}");
}

/// Seams finding 8. The function is deployed for the template's 201 receives, and an operator
/// lowers the queue's `maxReceiveCount` to 5 in the console. The queue's `RedrivePolicy` is the
/// source: a record still failing at receive 4 gives up and leaves with its reason
/// (`retries_exhausted`), instead of being taken by SQS's redrive at receive 6 without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queues_redrive_policy_decides_when_a_retry_gives_up() {
    let endpoint = moto_endpoint();
    let client = process_orders::aws::sqs(&local_esm::sdk_config(&endpoint), &SQS_SDK);
    let queues = queue_pair(&client, "dl-lowered", false, LOWERED)
        .await
        .expect("queues");
    let config = Config::from_lookup(|k| match k {
        "METRICS_ENABLED" => Some("false".into()),
        "SQS_BATCH_MAX_RECEIVE_COUNT" => Some("201".into()),
        _ => None,
    })
    .expect("config");
    let app = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    )
    .with_dead_letters(Some(sqs_dead_letters(
        local_esm::sdk_config(&endpoint),
        "orders-fn:7".to_owned(),
    )));
    // 401.01 is the simulated provider's refused configuration: RETRY at every receive.
    let body = r#"{"order_id":"r-1","amount":401.01}"#.to_owned();
    for (receives, moved) in [(3, false), (4, true)] {
        let json = event_of(
            &queues.arn,
            &[Record::new("m1", body.clone(), vec![], receives)],
        );
        let event = sqs_batch::edge::parse_event(&json).expect("event");
        let deadline_ms = lambda_kit::Clock::now_ms(&SystemClock) + 30_000;
        let (_, report) = app
            .handle_with_report(&event, deadline_ms)
            .await
            .expect("handled");
        assert_eq!(report.counts().moved, usize::from(moved), "{report:?}");
    }
    let copies = dlq_copies(&client, &queues.dlq_url).await;
    assert_eq!(copies.len(), 1);
    let failure = failure_of(&copies[0].1);
    assert_eq!(failure.reason, "retries_exhausted");
    assert_eq!(failure.receive_count, Some(4));
}

/// A queue's `RedrivePolicy` is read once and kept for `POLICY_TTL` (one `GetQueueAttributes`
/// per queue and container in that time, as operations.md says): an operator's edit is seen by
/// a container once its copy has expired, not on every batch. Tokio's clock is moved past the
/// expiry between calls (the adapter keeps time on it), never during one.
#[tokio::test]
async fn a_learned_redrive_policy_is_kept_for_its_ttl_and_then_read_again() {
    use aws_sdk_sqs::types::QueueAttributeName;
    use sqs_batch::dead_letter::DeadLetterPort;
    use sqs_batch::dead_letter::sqs::POLICY_TTL;
    let endpoint = moto_endpoint();
    let client = process_orders::aws::sqs(&local_esm::sdk_config(&endpoint), &SQS_SDK);
    let queues = queue_pair(&client, "dl-kept", false, LOWERED)
        .await
        .expect("queues");
    let dead_letters =
        sqs_dead_letters(local_esm::sdk_config(&endpoint), "orders-fn:7".into()).port;
    assert_eq!(dead_letters.max_receive_count(&queues.arn).await, Some(5));
    let lowered = json!({ "deadLetterTargetArn": queues.dlq_arn, "maxReceiveCount": 3 });
    client
        .set_queue_attributes()
        .queue_url(&queues.url)
        .attributes(QueueAttributeName::RedrivePolicy, lowered.to_string())
        .send()
        .await
        .expect("lower maxReceiveCount");
    let kept = dead_letters.max_receive_count(&queues.arn).await;
    assert_eq!(kept, Some(5), "read again inside its TTL");
    tokio::time::pause();
    tokio::time::advance(POLICY_TTL - std::time::Duration::from_secs(5)).await;
    tokio::time::resume();
    let kept = dead_letters.max_receive_count(&queues.arn).await;
    assert_eq!(kept, Some(5), "read again before its TTL ended");
    tokio::time::pause();
    tokio::time::advance(std::time::Duration::from_secs(10)).await;
    tokio::time::resume();
    let read = dead_letters.max_receive_count(&queues.arn).await;
    assert_eq!(read, Some(3), "not read again after its TTL");
}
