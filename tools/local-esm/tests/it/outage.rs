//! An outage is not an incident, on the local loop (moto's SQS with a redrive policy, the local
//! event source mapping, the function with its visibility backoff), time scaled down: a
//! dependency is down for 80% of the time the retry schedule guarantees a failing record stays
//! in its queue, then comes back. Every valid order is charged exactly once and none reaches the
//! DLQ: first with the payment provider down, then with DynamoDB down.
//!
//! The scale: the template ships base 5 s, cap 900 s and 200 receives (at least 24.2 h). SQS
//! counts visibility in whole seconds, so the test cannot divide those evenly; it keeps the
//! shape instead: base 1 s and cap 2 s give floors of 0, 1, 1, 1, ... seconds; a record gives
//! up at receive `SQS_BATCH_MAX_RECEIVE_COUNT - 1`, after `SQS_BATCH_MAX_RECEIVE_COUNT - 2` delays, so it is
//! guaranteed `SQS_BATCH_MAX_RECEIVE_COUNT - 3` seconds, and the outage lasts 80% of that.

use std::sync::Arc;
use std::time::Duration;

use idempotency::{DynamoDbStore, MemoryStore};
use lambda_kit::clock::SystemClock;
use local_esm::esm::{self, EsmSettings};
use local_esm::sdk_config;
use local_esm::send::Outgoing;
use local_esm::setup::{self, QueuePair, QueueSettings};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::HttpGateway;
use process_orders::payment::http::HttpSettings;
use process_orders::testkit::dynamo::{Dynoxide, moto_endpoint, unique_table};
use process_orders::testkit::payment_stub::{Behaviour, PaymentStub};
use sqs_batch::Backoff;
use sqs_batch::backoff::BackoffPolicy;
use sqs_batch::visibility::SqsVisibility;

const ORDERS: usize = 20;
const SQS_BATCH_MAX_RECEIVE_COUNT: u32 = 16;
const POLICY: BackoffPolicy = BackoffPolicy::new(1, 2);

/// 80% of what the schedule guarantees.
fn outage() -> Duration {
    let survival_ms = POLICY.guaranteed_survival_s(SQS_BATCH_MAX_RECEIVE_COUNT - 2) * 1_000;
    assert_eq!(
        survival_ms, 13_000,
        "SQS_BATCH_MAX_RECEIVE_COUNT - 3 seconds"
    );
    Duration::from_millis(survival_ms * 4 / 5)
}

async fn queue(name: &str) -> (aws_sdk_sqs::Client, QueuePair) {
    let sqs = aws_sdk_sqs::Client::new(&sdk_config(&moto_endpoint()));
    let settings = QueueSettings {
        visibility_timeout_s: 6,
        max_receive_count: SQS_BATCH_MAX_RECEIVE_COUNT,
    };
    let queue = setup::queue_pair(
        &sqs,
        &format!("{name}-{}", std::process::id()),
        false,
        settings,
    )
    .await
    .expect("queues");
    let orders: Vec<Outgoing> = (0..ORDERS)
        .map(|n| Outgoing {
            body: serde_json::json!({ "order_id": format!("{name}-{n}"), "amount": 10 })
                .to_string(),
            order_id: Some(format!("{name}-{n}")),
            group: String::new(),
        })
        .collect();
    local_esm::send::send(&sqs, &queue, &orders)
        .await
        .expect("send");
    (sqs, queue)
}

/// The function with the provider stub and `store`, its schedule as [`POLICY`], the start-up
/// check of the survival on.
fn app<S: idempotency::guard::EffectStore>(
    sqs: &aws_sdk_sqs::Client,
    stub: &PaymentStub,
    store: S,
) -> App<S, HttpGateway, SystemClock> {
    app_with_probe(sqs, stub, store, "0")
}

/// The function as [`app`] builds it, with `SQS_BATCH_PROBE_SECONDS` at `probe_s` (`"0"`: the
/// schedule alone).
fn app_with_probe<S: idempotency::guard::EffectStore>(
    sqs: &aws_sdk_sqs::Client,
    stub: &PaymentStub,
    store: S,
    probe_s: &'static str,
) -> App<S, HttpGateway, SystemClock> {
    let config = Config::from_lookup(|k| {
        Some(
            match k {
                "SQS_BATCH_PROBE_SECONDS" => probe_s,
                "METRICS_ENABLED" => "false",
                "SQS_BATCH_DEADLINE_MARGIN_MS" => "1000",
                "IDEMPOTENCY_LEASE_MARGIN_MS" => "1000",
                "SQS_BATCH_VISIBILITY_BACKOFF" => "true",
                "AWS_REGION" => "us-east-1",
                "SQS_BATCH_BACKOFF_BASE_SECONDS" => "1",
                "SQS_BATCH_BACKOFF_CAP_SECONDS" => "2",
                "SQS_BATCH_MAX_RECEIVE_COUNT" => "16",
                // 13 s of the 16 receives, scaled from the template's 24 hours.
                "SQS_BATCH_RETRY_SURVIVAL_HOURS" => "0",
                _ => return None,
            }
            .to_owned(),
        )
    })
    .expect("config");
    assert_eq!(config.backoff, Some(POLICY));
    let gateway = HttpGateway::new(&HttpSettings {
        base_url: stub.url().parse().expect("url"),
        api_key: process_orders::payment::KeySetting::None,
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retryable_failures: process_orders::payment::answers::RetryableFailures::default(),
    })
    .expect("gateway");
    App::with_ports(&config, store, gateway, SystemClock).with_backoff(Some(
        Backoff::new(SqsVisibility::new(sqs.clone()), POLICY).with_recovery(config.recovery),
    ))
}

const ESM: EsmSettings = EsmSettings {
    batch_size: 10,
    batching_window: Duration::from_millis(100),
    concurrency: 2,
    function_timeout: Duration::from_secs(5),
    // The longest a message stays away: the queue's 6 s visibility (a failed visibility change),
    // then a second more.
    drained_after: Duration::from_secs(8),
    max_run: Duration::from_secs(120),
};

/// Every order charged once, the queue drained, the DLQ empty.
async fn assert_survived(
    name: &str,
    sqs: &aws_sdk_sqs::Client,
    queue: &QueuePair,
    stub: &PaymentStub,
    stats: &esm::EsmStats,
) {
    assert!(stats.drained, "{name}: not drained: {stats:?}");
    for n in 0..ORDERS {
        assert_eq!(
            stub.charges(&format!("{name}-{n}")),
            1,
            "{name}-{n}: {stats:?}"
        );
    }
    let dlq = sqs
        .receive_message()
        .queue_url(&queue.dlq_url)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receive the DLQ");
    assert!(
        dlq.messages().is_empty(),
        "{name}: valid orders in the DLQ after an outage shorter than the schedule"
    );
    eprintln!("{name}: {stats:?}");
}

/// The provider answers 503 and its look-up is down for 10.4 s (80% of the 13 s guaranteed),
/// then comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_outage_shorter_than_the_schedule_loses_no_order() {
    let (sqs, queue) = queue("down-pay").await;
    let stub = PaymentStub::start().await;
    stub.set_default(Behaviour::Status(503));
    stub.set_lookup_available(false);
    let app = Arc::new(app(
        &sqs,
        &stub,
        MemoryStore::new(Duration::from_secs(86_400)),
    ));
    let run = tokio::spawn(esm::run(sqs.clone(), queue.clone(), app, ESM));
    tokio::time::sleep(outage()).await;
    assert!(stub.answered(503) >= ORDERS, "the outage was felt");
    stub.set_default(Behaviour::Normal);
    stub.set_lookup_available(true);
    let stats = run.await.expect("run").expect("mapping");
    assert_survived("down-pay", &sqs, &queue, &stub, &stats).await;
}

/// DynamoDB refuses connections for 10.4 s, then comes back with its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamodb_outage_shorter_than_the_schedule_loses_no_order() {
    let (sqs, queue) = queue("down-ddb").await;
    let stub = PaymentStub::start().await;
    let mut server = Dynoxide::start().await;
    let table = unique_table();
    let client = server.client();
    idempotency::dynamodb::create_table(&client, &table)
        .await
        .expect("table");
    let store = DynamoDbStore::new(client, &table, Duration::from_secs(86_400));
    server.stop().await;
    let app = Arc::new(app(&sqs, &stub, store));
    let run = tokio::spawn(esm::run(sqs.clone(), queue.clone(), app, ESM));
    tokio::time::sleep(outage()).await;
    assert_eq!(stub.all_requests(), 0, "nothing charged without the store");
    server.restart().await;
    let stats = run.await.expect("run").expect("mapping");
    assert_survived("down-ddb", &sqs, &queue, &stub, &stats).await;
}

/// The same provider outage twice at once, on moto's SQS through the shipped visibility adapter:
/// with the probe, the hold and the wake (a probe each second at this scale) the provider is
/// called far less while it is down than on the schedule alone, and both lose no order and charge
/// none twice once it is back (the wake's `ChangeMessageVisibilityBatch` to 0 on receipts moto
/// issued, stale ones among them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_and_the_wake_call_a_provider_that_is_down_less_and_lose_no_order() {
    async fn run_outage(name: &'static str, probe_s: &'static str) -> (usize, PaymentStub) {
        let (sqs, queue) = queue(name).await;
        let stub = PaymentStub::start().await;
        stub.set_default(Behaviour::Status(503));
        stub.set_lookup_available(false);
        let store = MemoryStore::new(Duration::from_secs(86_400));
        let app = Arc::new(app_with_probe(&sqs, &stub, store, probe_s));
        let run = tokio::spawn(esm::run(sqs.clone(), queue.clone(), app, ESM));
        tokio::time::sleep(outage()).await;
        let during = stub.all_requests();
        stub.set_default(Behaviour::Normal);
        stub.set_lookup_available(true);
        let stats = run.await.expect("run").expect("mapping");
        assert_survived(name, &sqs, &queue, &stub, &stats).await;
        (during, stub)
    }
    let ((held, _held_stub), (schedule, _schedule_stub)) =
        tokio::join!(run_outage("probe-pay", "1"), run_outage("sched-pay", "0"));
    assert!(
        held * 2 < schedule,
        "{held} requests while down with the probe, {schedule} on the schedule alone"
    );
}
