//! The chaos run: the whole system locally (moto's SQS with redrive, the local event source
//! mapping, the function, a DynamoDB-compatible table, an HTTP payment provider), with duplicate
//! sends, poison bodies, store errors and abandoned invocations, and a provider that is
//! sometimes unavailable (503), sometimes slower than the client's timeout (its request goes on
//! and charges), sometimes charges and then answers 504, and forgets every key after 2 s. Every
//! valid order must be charged exactly once (money moved once per key, counted by the provider)
//! and none may reach a DLQ.
//!
//! Size: `CHAOS_ORDERS` orders per queue kind (default 1,000; `make chaos ORDERS=10000`). moto
//! runs behind scripts/moto_locked.py: its own FIFO bookkeeping fails under this load (docs/local-development.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use idempotency::DynamoDbStore;
use lambda_kit::clock::{Clock, SystemClock};
use local_esm::esm::{self, EsmSettings, Invoke};
use local_esm::sdk_config;
use local_esm::send::{self, SendPlan};
use local_esm::setup::{self, QueueSettings};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::http::{HttpGateway, HttpSettings};
use process_orders::testkit::dynamo::{Dynoxide, moto_endpoint};
use process_orders::testkit::payment_stub::{Faults, PaymentStub};
use process_orders::testkit::ports::FaultyStore;
use sqs_batch::Backoff;
use sqs_batch::backoff::BackoffPolicy;
use sqs_batch::visibility::SqsVisibility;

type ChaosApp = App<FaultyStore<DynamoDbStore>, HttpGateway, SystemClock>;

/// The app as the mapping invokes it (the mapping enforces the function timeout, dropping an
/// invocation's future mid-batch), keeping a history of the FIFO invocations.
struct Lambda {
    app: ChaosApp,
    /// Every FIFO invocation: when, its records (order id or `-`, group, receive count) and
    /// what came back, to explain a group charged out of order.
    history: std::sync::Mutex<Vec<String>>,
}

/// A FIFO event's records as the history shows them; `None` for a standard queue.
fn fifo_records(event: &SqsEvent) -> Option<Vec<String>> {
    let fifo = event
        .records
        .first()
        .and_then(|r| r.event_source_arn.as_deref())
        .is_some_and(|arn| arn.ends_with(".fifo"));
    fifo.then(|| {
        event
            .records
            .iter()
            .map(|r| {
                let order = r
                    .body
                    .as_deref()
                    .and_then(process_orders::order::order_id_hint)
                    .unwrap_or_else(|| "-".into());
                format!(
                    "{order}@{}#{}[{}]",
                    r.attributes
                        .get("MessageGroupId")
                        .map_or("?", String::as_str),
                    r.attributes
                        .get("ApproximateReceiveCount")
                        .map_or("?", String::as_str),
                    r.message_id
                        .as_deref()
                        .unwrap_or("?")
                        .get(..8)
                        .unwrap_or("?")
                )
            })
            .collect()
    })
}

impl Invoke for Lambda {
    async fn invoke(&self, event: &SqsEvent, deadline_ms: u64) -> Result<SqsBatchResponse, String> {
        let started = SystemClock.now_ms();
        // Written before the call: if the mapping abandons it at the timeout, this line stays.
        let slot = fifo_records(event).map(|records| {
            let mut history = self.history.lock().unwrap();
            history.push(format!(
                "{started}..: {records:?} -> abandoned at the function timeout"
            ));
            (history.len() - 1, records)
        });
        let result = self
            .app
            .handle(event, deadline_ms)
            .await
            .map_err(|e| e.to_string());
        if let Some((index, records)) = slot {
            let outcome = match &result {
                Ok(response) => format!(
                    "reported {:?}",
                    response
                        .batch_item_failures
                        .iter()
                        .map(|f| f.item_identifier.get(..8).unwrap_or("?"))
                        .collect::<Vec<_>>()
                ),
                Err(e) => format!("error {e}"),
            };
            self.history.lock().unwrap()[index] = format!(
                "{started}..{}: {records:?} -> {outcome}",
                SystemClock.now_ms()
            );
        }
        result
    }
}

const FUNCTION_TIMEOUT: Duration = Duration::from_secs(3);
/// A valid order fails one receive with probability about 0.3 here (payment 20%, store faults
/// 2 x 3%, abandoned batches, busy duplicates, a charge still in flight): 0.3^20 < 4e-11. On the FIFO queue a record is
/// also received, and held back, each time a RETRY ahead of it in the same batch and group holds
/// the group; FIFO batches of 3 keep that to at most 2 extra receives per failure ahead.
const SQS_BATCH_MAX_RECEIVE_COUNT: u32 = 20;
const FIFO_BATCH_SIZE: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_valid_order_is_charged_exactly_once_and_only_poison_reaches_the_dlqs() {
    let orders: usize = std::env::var("CHAOS_ORDERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let started = Instant::now();
    let sdk = sdk_config(&moto_endpoint());
    let sqs = aws_sdk_sqs::Client::new(&sdk);

    let dynamo = Dynoxide::start().await;
    let (dynamodb, _) = process_orders::testkit::dynamo::client(&dynamo.endpoint());
    let table = "chaos";
    setup::table(&dynamodb, table).await.expect("table");

    let stub = PaymentStub::start().await;
    stub.set_faults(
        Faults {
            unavailable: 0.1,
            slow: 0.05,
            slow_for: Duration::from_millis(1_500),
            charge_then_504: 0.05,
            lookup_unavailable: 0.1,
        },
        7,
    );
    // Far shorter than a real provider's day, so retries after a 504 or a timeout meet a
    // provider that no longer knows the key: only the lookup stands between them and a second
    // charge. The function is told 1 s (PAYMENT_KEY_WINDOW_SECONDS below), less than the
    // provider's 2 s, as it must be: when the lookup is down it resends within 1 s of the first
    // attempt and waits (needs_reconciliation) after that.
    stub.set_key_window(Some(Duration::from_secs(2)));

    let mut env = vec![
        ("SQS_BATCH_FIFO_SCOPE", "group"),
        // Its EMF documents would go to the real stdout, past the test harness's capture.
        ("METRICS_ENABLED", "false"),
        ("IDEMPOTENCY_LEASE_MARGIN_MS", "1000"),
        ("PAYMENT_KEY_WINDOW_SECONDS", "1"),
        // The stub's look-up keeps every charge for good (a durable look-up): its "no such
        // charge" is proof at any age. The clock allowance is scaled down with the window.
        ("PAYMENT_LOOKUP_DURABLE", "true"),
        ("PAYMENT_CLOCK_SKEW_MS", "50"),
    ];
    env.push(("SQS_BATCH_DEADLINE_MARGIN_MS", "1000"));
    let config = Config::from_lookup(|k| {
        env.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    })
    .unwrap();
    let store = FaultyStore::new(
        DynamoDbStore::new(dynamodb.clone(), table, config.store.retention),
        0.03,
        0.002,
        11,
    );
    let gateway = HttpGateway::new(&HttpSettings {
        base_url: stub.url().parse().unwrap(),
        api_key: process_orders::payment::KeySetting::None,
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(1),
        retryable_failures: process_orders::payment::answers::RetryableFailures::default(),
    })
    .unwrap();
    let app = App::with_ports(&config, store, gateway, SystemClock).with_backoff(Some(
        Backoff::new(SqsVisibility::new(sqs.clone()), BackoffPolicy::new(1, 2)),
    ));
    let function = Arc::new(Lambda {
        app,
        history: std::sync::Mutex::new(Vec::new()),
    });

    let settings = QueueSettings {
        visibility_timeout_s: 4,
        max_receive_count: SQS_BATCH_MAX_RECEIVE_COUNT,
    };
    let mut queues = Vec::new();
    for (fifo, prefix) in [(false, "std"), (true, "fifo")] {
        let queue = setup::queue_pair(
            &sqs,
            &format!("chaos-{}", std::process::id()),
            fifo,
            settings,
        )
        .await
        .expect("queues");
        let plan = SendPlan {
            orders,
            duplicate_rate: 0.1,
            poison_rate: 0.05,
            groups: 16,
            seed: 3,
            prefix: prefix.into(),
        };
        let generated = send::generate(&plan);
        send::send(&sqs, &queue, &generated.messages)
            .await
            .expect("send");
        queues.push((queue, generated));
    }

    // A progress line every few seconds: a run of 10,000 orders takes a while.
    let total_valid: usize = queues.iter().map(|(_, g)| g.valid_orders.len()).sum();
    let progress = {
        let stub = stub.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(10)).await;
                eprintln!(
                    "chaos: {:>5.0} s, {} of {total_valid} valid orders charged, {} payment requests",
                    started.elapsed().as_secs_f64(),
                    stub.total_charges(),
                    stub.all_requests()
                );
            }
        })
    };

    let esm_settings = EsmSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(200),
        concurrency: 4,
        function_timeout: FUNCTION_TIMEOUT,
        // The longest a message stays invisible: the queue's 4 s, the backoff's 2 s, or a BUSY
        // or abandoned record's wait for a lease (at most the function timeout plus the lease
        // margin, 4 s, plus 1 s of jitter, rounded up to whole seconds) after its invocation.
        drained_after: Duration::from_secs(8),
        // 0.3 s per order and queue kind, at least 15 minutes: a bound far above a run's time
        // (688 s at 10,000), so a run that stops making progress fails instead of hanging.
        max_run: Duration::from_secs((orders as u64 * 3 / 10).max(900)),
    };
    let runs: Vec<_> = queues
        .iter()
        .map(|(queue, _)| {
            let batch_size = if queue.fifo {
                FIFO_BATCH_SIZE
            } else {
                esm_settings.batch_size
            };
            let settings = EsmSettings {
                batch_size,
                ..esm_settings
            };
            tokio::spawn(esm::run(
                sqs.clone(),
                queue.clone(),
                Arc::clone(&function),
                settings,
            ))
        })
        .collect();
    let mut stats = Vec::new();
    for run in runs {
        stats.push(run.await.expect("esm task").expect("esm run"));
    }
    progress.abort();

    // Where things stand, printed before any assertion so a failure can be read. The runs have
    // returned and nothing else receives, so the counts are exact here.
    let mut left = Vec::new();
    for ((queue, _), s) in queues.iter().zip(&stats) {
        let source = setup::depth(&sqs, &queue.url).await.unwrap();
        eprintln!(
            "{}: after {:.1} s: source {source:?}; {s:?}",
            queue.name,
            started.elapsed().as_secs_f64()
        );
        left.push(source.total());
    }

    // Every valid order charged exactly once at the provider; nothing else charged.
    let valid: Vec<&String> = queues.iter().flat_map(|(_, g)| &g.valid_orders).collect();
    for order in &valid {
        assert_eq!(stub.charges(order), 1, "{order} not charged exactly once");
    }
    assert_eq!(
        stub.total_charges(),
        valid.len(),
        "something else was charged"
    );

    // Within each message group of the FIFO queue, valid orders are charged in send order (the
    // first copy of each order sets its place; a duplicate send is not charged).
    let charged_in_order = stub.charge_order();
    for (queue, generated) in queues.iter().filter(|(q, _)| q.fifo) {
        let mut groups: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
        let mut seen = std::collections::BTreeSet::new();
        for message in &generated.messages {
            if let Some(order) = &message.order_id
                && seen.insert(order.as_str())
            {
                groups.entry(&message.group).or_default().push(order);
            }
        }
        let mut out_of_order = 0;
        for (group, sent) in &groups {
            let members: std::collections::BTreeSet<&str> = sent.iter().copied().collect();
            let charged: Vec<&str> = charged_in_order
                .iter()
                .map(String::as_str)
                .filter(|o| members.contains(o))
                .collect();
            if &charged != sent {
                out_of_order += 1;
                eprintln!(
                    "{}: group {group} charged out of send order:\n  sent    {sent:?}\n  charged {charged:?}",
                    queue.name
                );
                let needle = format!("@{group}#");
                for line in function.history.lock().unwrap().iter() {
                    if line.contains(&needle) {
                        eprintln!("  {line}");
                    }
                }
            }
        }
        eprintln!(
            "{}: {out_of_order} of {} groups charged out of send order",
            queue.name,
            groups.len()
        );
        assert_eq!(
            out_of_order, 0,
            "{}: {out_of_order} groups charged out of send order",
            queue.name
        );
    }

    let mut report = Vec::new();
    for (((queue, generated), s), left) in queues.iter().zip(&stats).zip(&left) {
        // Every source queue drained (the mapping received nothing for longer than a message
        // can stay invisible); every poison message, and nothing else, in its DLQ.
        assert!(s.drained, "{} not drained", queue.name);
        assert_eq!(
            *left, 0,
            "{}: messages left in the source queue",
            queue.name
        );
        let in_dlq = drain_bodies(&sqs, &queue.dlq_url).await;
        let valid_in_dlq = in_dlq
            .iter()
            .filter(|b| {
                process_orders::order::decode_order(b, process_orders::money::Currency::EUR).is_ok()
            })
            .count();
        assert_eq!(valid_in_dlq, 0, "{}: valid orders in the DLQ", queue.name);
        assert_eq!(
            in_dlq.len(),
            generated.poison,
            "{}: poison messages in the DLQ",
            queue.name
        );
        let charged = generated
            .valid_orders
            .iter()
            .filter(|o| stub.charges(o) > 0)
            .count();
        let per_key: std::collections::BTreeSet<usize> = generated
            .valid_orders
            .iter()
            .map(|o| stub.charges(o))
            .collect();
        report.push(format!(
            "| {} | {} | {charged} | {per_key:?} | {} | {valid_in_dlq} | {} |",
            if queue.fifo { "FIFO" } else { "standard" },
            generated.valid_orders.len(),
            in_dlq.len(),
            s.invocations
        ));
        eprintln!(
            "{}: {} messages ({} orders, {} duplicate sends, {} poison), {} invocations, {} records received, {} reported, {} errors (failed invocations or SQS calls)",
            queue.name,
            generated.messages.len(),
            generated.valid_orders.len(),
            generated.duplicates,
            generated.poison,
            s.invocations,
            s.records,
            s.reported,
            s.errors
        );
    }

    // The table holds one COMPLETED item per valid order, and nothing else that is completed.
    // Every page of the scan: at 10,000 orders the table is larger than one 1 MB page.
    let items: Vec<_> = dynamodb
        .scan()
        .table_name(table)
        .into_paginator()
        .items()
        .send()
        .collect::<Result<_, _>>()
        .await
        .unwrap();
    let completed: std::collections::BTreeSet<String> = items
        .iter()
        .filter(|i| {
            i.get("status")
                .and_then(|s| s.as_s().ok())
                .map(String::as_str)
                == Some("COMPLETED")
        })
        .filter_map(|i| i.get("pk").and_then(|k| k.as_s().ok()).cloned())
        .collect();
    let expected: std::collections::BTreeSet<String> = valid.iter().map(|o| (*o).clone()).collect();
    assert_eq!(completed, expected);
    eprintln!(
        "\nchaos, {orders} orders per queue kind, {:.0} s wall time:\n\
         | queue | valid orders | charged | charges per key | poison in DLQ | valid in DLQ | invocations |\n\
         |---|---|---|---|---|---|---|\n{}\n",
        started.elapsed().as_secs_f64(),
        report.join("\n")
    );
    eprintln!(
        "chaos: {} valid orders charged once each; {} payment requests ({} answered 503, {} charged then 504, {} in flight 409), {} lookups; {} injected store errors, {} abandoned completions; {:.1} s",
        valid.len(),
        stub.all_requests(),
        stub.answered(503),
        stub.answered(504),
        stub.answered(409),
        stub.all_lookups(),
        function
            .app
            .ports()
            .store
            .errors
            .load(std::sync::atomic::Ordering::SeqCst),
        function
            .app
            .ports()
            .store
            .hangs
            .load(std::sync::atomic::Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
}

/// Receives and deletes everything in a queue, returning the bodies.
async fn drain_bodies(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .send()
            .await
            .unwrap();
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return bodies;
        }
        for m in messages {
            bodies.push(m.body().unwrap_or_default().to_owned());
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .unwrap();
        }
    }
}
