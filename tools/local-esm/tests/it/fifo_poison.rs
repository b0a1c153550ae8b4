//! The FIFO poison scenario on the local loop (moto's FIFO queue with redrive, the local event
//! source mapping, the function): poison messages at the heads of message groups and a small
//! `maxReceiveCount`. It counts the valid orders that end in the DLQ under batch scope, batch
//! scope with POISON visibility 0, and group scope, and holds the shipped defaults (group scope,
//! POISON visibility 0) to zero. It also asserts that the hazard reproduces under batch scope.
//! POISON visibility 0 alone is printed, not asserted: with three poisons in one batch and
//! `maxReceiveCount` 3 it cannot save the innocents (see docs/design.md).

use std::sync::Arc;
use std::time::Duration;

use idempotency::MemoryStore;
use lambda_kit::clock::SystemClock;
use local_esm::esm::{self, EsmSettings};
use local_esm::sdk_config;
use local_esm::send::Outgoing;
use local_esm::setup::{self, QueueSettings};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::money::Currency;
use process_orders::order::decode_order;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::dynamo::moto_endpoint;
use sqs_batch::Backoff;
use sqs_batch::backoff::BackoffPolicy;
use sqs_batch::visibility::SqsVisibility;

/// Orders sent round-robin over [`GROUPS`] message groups, so every receive of ten holds one
/// message per group; the first message of groups 0, 1 and 2 is poison. The innocents that share
/// the poisons' first batch belong to other groups: under batch scope they are reported with the
/// poison on every receive, and their receive counts climb with it.
const GROUPS: usize = 10;
const MESSAGES: usize = 40;

fn messages(poison: usize) -> Vec<Outgoing> {
    (0..MESSAGES)
        .map(|n| {
            let group = format!("g{}", n % GROUPS);
            if n < poison {
                Outgoing {
                    body: format!("poison #{n}"),
                    order_id: None,
                    group,
                }
            } else {
                let order_id = format!("o-{n}");
                let body = serde_json::json!({ "order_id": order_id, "amount": 5 }).to_string();
                Outgoing {
                    body,
                    order_id: Some(order_id),
                    group,
                }
            }
        })
        .collect()
}

/// Runs the scenario with one configuration; returns the valid orders that ended in the DLQ.
async fn valid_orders_in_dlq(name: &str, poison: usize, fifo_scope: &str, backoff: bool) -> usize {
    let valid_sent = MESSAGES - poison;
    let sdk = sdk_config(&moto_endpoint());
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let settings = QueueSettings {
        visibility_timeout_s: 1,
        max_receive_count: 3,
    };
    let queue = setup::queue_pair(
        &sqs,
        &format!("{name}-{}", std::process::id()),
        true,
        settings,
    )
    .await
    .unwrap();
    local_esm::send::send(&sqs, &queue, &messages(poison))
        .await
        .unwrap();

    let scope = fifo_scope.to_owned();
    let config =
        Config::from_lookup(|k| (k == "SQS_BATCH_FIFO_SCOPE").then(|| scope.clone())).unwrap();
    let app = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    )
    .with_backoff(
        backoff.then(|| Backoff::new(SqsVisibility::new(sqs.clone()), BackoffPolicy::new(1, 1))),
    );
    let app = Arc::new(app);
    let esm_settings = EsmSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(100),
        concurrency: 1,
        function_timeout: Duration::from_secs(10),
        // The visibility timeout and the backoff are 1 s.
        drained_after: Duration::from_secs(2),
        max_run: Duration::from_secs(240),
    };
    let stats = esm::run(sqs.clone(), queue.clone(), Arc::clone(&app), esm_settings)
        .await
        .unwrap();
    assert!(stats.drained, "{name}: not drained: {stats:?}");
    // The run has returned and nothing else receives: the counts are exact here.
    assert_eq!(
        setup::depth(&sqs, &queue.url).await.unwrap().total(),
        0,
        "{name}: not drained"
    );

    let mut in_dlq = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&queue.dlq_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let batch = out.messages.unwrap_or_default();
        if batch.is_empty() {
            break;
        }
        for m in batch {
            in_dlq.push(m.body().unwrap_or_default().to_owned());
            sqs.delete_message()
                .queue_url(&queue.dlq_url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .unwrap();
        }
    }
    let valid = in_dlq
        .iter()
        .filter(|b| decode_order(b, Currency::EUR).is_ok())
        .count();
    let in_dlq_poison = in_dlq.len() - valid;
    let charged = app.ports().gateway.effective_charges();
    eprintln!(
        "{name}: {valid} valid orders in the DLQ, {in_dlq_poison} poison; {charged} of {valid_sent} charged; {} records received in {} invocations",
        stats.records, stats.invocations
    );
    assert_eq!(
        in_dlq_poison, poison,
        "{name}: every poison message ends in the DLQ"
    );
    assert_eq!(
        charged + valid,
        valid_sent,
        "{name}: every valid order is charged or in the DLQ"
    );
    valid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_shipped_defaults_no_valid_order_reaches_the_dlq() {
    // How many innocents ride along depends on how moto regroups redeliveries, which varies
    // with timing (0 to 6 seen on a loaded machine): up to three attempts to see the hazard.
    let mut batch = 0;
    for attempt in 1..=3 {
        batch = valid_orders_in_dlq(&format!("batch{attempt}"), 3, "batch", false).await;
        if batch > 0 {
            break;
        }
    }
    let batch_vis0 = valid_orders_in_dlq("batch-vis0", 3, "batch", true).await;
    let group = valid_orders_in_dlq("group", 3, "group", true).await;
    eprintln!(
        "valid orders in the DLQ: batch scope {batch}, batch scope + POISON visibility 0 {batch_vis0}, group scope {group}"
    );
    // The hazard itself: without this the scenario proves nothing about the defaults.
    assert!(
        batch > 0,
        "the hazard did not reproduce: batch scope lost no valid order in three attempts"
    );
    assert_eq!(group, 0, "the shipped defaults lost valid orders");
}
