//! Tail latency, the deadline, and the Powertools baseline (`make bench`; numbers quoted in the
//! docs/performance.md). Benchmarks, not tests: nothing here passes or fails on time.
//!
//! - (f) tail latency: a 1,000-record standard batch through the function against dynoxide (every
//!   store call 5 ms +- 1 ms more) and the HTTP provider stub (payments log-normal, median 120 ms,
//!   p99 1.5 s, and 1% that outlast the 5 s payment timeout), at `SQS_BATCH_MAX_CONCURRENCY` 8, 16 and 32,
//!   against the ideal bound: the records' own work divided by the concurrency, or the longest
//!   record if that is larger.
//! - (g) the same batch, same simulated latencies, through Powertools for AWS Lambda (Python)
//!   `BatchProcessor` and `AsyncBatchProcessor` (`benches/powertools_baseline.py`, run with
//!   `BENCH_PYTHON`, which `make bench` points at a venv holding `aws-lambda-powertools`).
//! - (h) the deadline: SQS accepts connections and never answers, 100 reported records, the
//!   deadline 6 s away: how long from the batch to the response.
//! - (i) one long-polling worker against one Lambda container on the plan of (f): orders a
//!   second and compute cost per million orders (`-- --bench worker` runs it alone).
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it runs a small smoke version.

// The worker's batch future nests as deep as the function's own (src/lib.rs has the same limit).
#![recursion_limit = "256"]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idempotency::{
    DynamoDbStore, IdempotencyStore, MemoryStore, StoreError, store::Begin, store::ClaimRequest,
    store::Lease,
};
use lambda_kit::clock::{Clock, SystemClock};
use process_orders::app::{self, App};
use process_orders::config::Config;
use process_orders::payment::http::{HttpGateway, HttpSettings};
use process_orders::payment::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway};
use process_orders::testkit::dynamo::{Dynoxide, client, create_table, unique_table};
use process_orders::testkit::generated_body;
use process_orders::testkit::payment_stub::{Behaviour, PaymentStub};
use sqs_batch::backoff::BackoffPolicy;
use sqs_batch::testkit::{self as event, EventShape};
use sqs_batch::visibility::SqsVisibility;

const PAYMENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Log-normal payment latency: median 120 ms, p99 1.5 s (z(0.99) = 2.3263).
const PAY_MEDIAN_S: f64 = 0.120;
const PAY_P99_S: f64 = 1.5;
/// The share of payments that outlast the payment timeout.
const TIMEOUT_SHARE: f64 = 0.01;

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let records = if full { 1_000 } else { 20 };
        let plan = Plan::new(records, 11);
        // `-- --bench worker`: the worker's comparison alone.
        let only_worker = std::env::args().any(|a| a == "worker");
        if !only_worker {
            tail_latency(&plan, if full { &[8, 16, 32] } else { &[8] }).await;
            powertools(&plan).await;
            deadline().await;
        }
        worker_against_lambda(&plan).await;
    });
}

/// Every record's simulated latencies, drawn once so every run meets the same batch.
struct Plan {
    json: String,
    /// Order id -> payment latency (`None`: it outlasts the timeout).
    payments: Vec<(String, Option<Duration>)>,
    /// Two store delays per record, in batch order.
    store: Vec<(Duration, Duration)>,
}

impl Plan {
    fn new(records: usize, seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let sigma = (PAY_P99_S.ln() - PAY_MEDIAN_S.ln()) / 2.3263;
        let mut normal = || {
            // Box-Muller.
            let (u1, u2) = (rng.f64().max(f64::MIN_POSITIVE), rng.f64());
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        };
        let mut draws = Vec::with_capacity(records);
        for _ in 0..records {
            draws.push(normal());
        }
        let mut rng = fastrand::Rng::with_seed(seed + 1);
        let payments = draws
            .into_iter()
            .enumerate()
            .map(|(i, z)| {
                let latency = if rng.f64() < TIMEOUT_SHARE {
                    None
                } else {
                    Some(Duration::from_secs_f64(
                        (PAY_MEDIAN_S.ln() + sigma * z).exp(),
                    ))
                };
                (format!("o-{i}"), latency)
            })
            .collect();
        let mut store_delay = || Duration::from_micros(rng.u64(4_000..=6_000));
        let store = (0..records)
            .map(|_| (store_delay(), store_delay()))
            .collect();
        let event = event::generate(
            EventShape {
                records,
                fifo_groups: 0,
                seed,
            },
            generated_body,
        );
        Self {
            json: serde_json::to_string(&event).expect("event"),
            payments,
            store,
        }
    }
}

/// Work per order id: the time its store and payment calls took, as they ran.
type Work = Arc<Mutex<HashMap<String, Duration>>>;

fn add(work: &Work, key: &str, took: Duration) {
    *work
        .lock()
        .expect("lock")
        .entry(key.to_owned())
        .or_default() += took;
}

/// DynamoDB on dynoxide, each call delayed by the plan's store delay for its order, and timed.
struct SlowStore {
    inner: DynamoDbStore,
    delays: HashMap<String, (Duration, Duration)>,
    calls: Mutex<HashMap<String, usize>>,
    work: Work,
}

impl SlowStore {
    async fn delayed<T>(&self, key: &str, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let n = {
            let mut calls = self.calls.lock().expect("lock");
            let n = calls.entry(key.to_owned()).or_default();
            *n += 1;
            *n
        };
        let (first, second) = self.delays.get(key).copied().unwrap_or_default();
        tokio::time::sleep(if n == 1 { first } else { second }).await;
        let out = call.await;
        add(&self.work, key, started.elapsed());
        out
    }
}

impl IdempotencyStore for SlowStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        self.delayed(request.key, self.inner.begin(request)).await
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        self.delayed(key, self.inner.complete(key, lease, now_ms, output))
            .await
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        self.delayed(key, self.inner.release(key, lease)).await
    }
}

impl idempotency::guard::EffectStore for SlowStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        self.delayed(key, self.inner.mark_attempted(key, lease, at_ms))
            .await
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.delayed(key, self.inner.reject(key, lease, now_ms, reason))
            .await
    }
}

/// The HTTP gateway, timed per order.
struct TimedGateway {
    inner: HttpGateway,
    work: Work,
}

impl PaymentGateway for TimedGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        let started = Instant::now();
        let out = self.inner.charge(request).await;
        add(&self.work, request.order_id, started.elapsed());
        out
    }

    async fn lookup(&self, request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        let started = Instant::now();
        let out = self.inner.lookup(request).await;
        add(&self.work, request.order_id, started.elapsed());
        out
    }
}

fn config(settings: &[(&str, String)]) -> Config {
    Config::from_lookup(|k| {
        settings
            .iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
            .or_else(|| (k == "METRICS_ENABLED").then(|| "false".to_owned()))
    })
    .expect("configuration")
}

fn secs(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64())
}

async fn tail_latency(plan: &Plan, levels: &[usize]) {
    let records = plan.payments.len();
    println!(
        "\n(f) tail latency: {records}-record standard batch, dynoxide + 5 ms +- 1 ms per store call, \
         payments log-normal (median {} ms, p99 {} s), {}% past the {} s timeout",
        PAY_MEDIAN_S * 1000.0,
        PAY_P99_S,
        TIMEOUT_SHARE * 100.0,
        PAYMENT_TIMEOUT.as_secs()
    );
    println!(
        "| SQS_BATCH_MAX_CONCURRENCY | wall s | ideal s | wall / ideal | greedy bound s | RETRY |\n|---|---|---|---|---|---|"
    );
    let server = Dynoxide::start().await;
    for &c in levels {
        // A provider of its own per run: one that already charged these keys would answer
        // every request at once with its replay.
        let stub = PaymentStub::start().await;
        let config = config(&[("SQS_BATCH_MAX_CONCURRENCY", c.to_string())]);
        let (store, gateway, work) = timed_ports(plan, &server, &stub, &config).await;
        let app = App::with_ports(&config, store, gateway, SystemClock);
        let started = Instant::now();
        let response = app
            .handle_json(&plan.json, SystemClock.now_ms() + 900_000)
            .await
            .expect("handled");
        let wall = started.elapsed();
        let work = work.lock().expect("lock");
        let total: Duration = work.values().sum();
        let longest = work.values().max().copied().unwrap_or_default();
        let ideal = (total / c as u32).max(longest);
        // What any scheduler that does not know the durations ahead can promise: a slot is
        // never idle while records wait, so the last record starts by total / C at the latest.
        let greedy = total / c as u32 + longest;
        println!(
            "| {c} | {} | {} | {:.2} | {} | {} |",
            secs(wall),
            secs(ideal),
            wall.as_secs_f64() / ideal.as_secs_f64(),
            secs(greedy),
            response.batch_item_failures.len()
        );
    }
}

/// The plan's store (a fresh table on `server`, each call delayed as planned) and gateway (the
/// HTTP client to `stub`, each order's latency set as planned), both timed per order.
async fn timed_ports(
    plan: &Plan,
    server: &Dynoxide,
    stub: &PaymentStub,
    config: &Config,
) -> (SlowStore, TimedGateway, Work) {
    for (order, latency) in &plan.payments {
        // Past the timeout: in flight for longer than the client waits.
        let delay = latency.unwrap_or(PAYMENT_TIMEOUT + Duration::from_secs(1));
        stub.set(order, Behaviour::Slow(delay));
    }
    let (dynamodb, _) = client(&server.endpoint());
    let table = unique_table();
    create_table(&dynamodb, &table).await;
    let work: Work = Arc::default();
    let store = SlowStore {
        inner: DynamoDbStore::new(dynamodb, &table, config.store.retention),
        delays: plan
            .payments
            .iter()
            .map(|(order, _)| order.clone())
            .zip(plan.store.iter().copied())
            .collect(),
        calls: Mutex::default(),
        work: Arc::clone(&work),
    };
    let gateway = TimedGateway {
        inner: HttpGateway::new(&HttpSettings {
            base_url: stub.url().parse().expect("url"),
            api_key: process_orders::payment::KeySetting::None,
            connect_timeout: Duration::from_secs(1),
            timeout: PAYMENT_TIMEOUT,
            retryable_failures: process_orders::payment::answers::RetryableFailures::default(),
        })
        .expect("gateway"),
        work: Arc::clone(&work),
    };
    (store, gateway, work)
}

/// (i) One worker against one Lambda container on the same orders, the same store and the same
/// provider latencies: orders a second, and what each order costs (the Lambda function billed
/// for its wall time at 256 MB; a Fargate task of 0.25 vCPU and 0.5 GB, arm64, billed by the
/// hour whatever it does). The Lambda container takes the template's batches of 100 one after
/// another; the worker its defaults (two receives of ten in flight).
async fn worker_against_lambda(plan: &Plan) {
    const LAMBDA_GB_S: f64 = 0.000_013_333_4;
    const LAMBDA_MB: f64 = 256.0;
    // us-east-1, Linux/ARM: per vCPU-hour and per GB-hour (checked 2026-12-01).
    const FARGATE_TASK_HOUR: f64 = 0.25 * 0.032_38 + 0.5 * 0.003_56;
    let records = plan.payments.len();
    println!(
        "\n(i) one worker against one Lambda container: {records} orders, the plan of (f), \
         SQS_BATCH_MAX_CONCURRENCY 16"
    );
    println!(
        "| runtime | wall s | orders/s | cost per million orders (compute only) |\n|---|---|---|---|"
    );
    let server = Dynoxide::start().await;
    let event: sqs_batch::edge::SqsEvent = serde_json::from_str(&plan.json).expect("event");

    // Lambda: invocations of 100 records, one after another (one container).
    let stub = PaymentStub::start().await;
    let config = config(&[]);
    let (store, gateway, _) = timed_ports(plan, &server, &stub, &config).await;
    let app = App::with_ports(&config, store, gateway, SystemClock);
    let started = Instant::now();
    for chunk in event.records.chunks(100) {
        let mut batch = sqs_batch::edge::SqsEvent::default();
        batch.records = chunk.to_vec();
        let json = serde_json::to_string(&batch).expect("batch");
        app.handle_json(&json, SystemClock.now_ms() + 900_000)
            .await
            .expect("handled");
    }
    let wall = started.elapsed().as_secs_f64();
    let per_order_s = wall / records as f64;
    let lambda_per_million = 1e6 * per_order_s * LAMBDA_MB / 1024.0 * LAMBDA_GB_S;
    println!(
        "| Lambda, batches of 100, 256 MB | {wall:.2} | {:.1} | ${lambda_per_million:.2} |",
        records as f64 / wall
    );

    // The worker: the same orders on an in-process queue (SQS's latency is not measured here),
    // with its default two receives in flight and with four.
    for in_flight in [2, 4] {
        let stub = PaymentStub::start().await;
        let (store, gateway, _) = timed_ports(plan, &server, &stub, &config).await;
        let app = App::with_ports(&config, store, gateway, SystemClock);
        let queue = MemoryQueue::new(event.records.clone());
        let worker = app.into_worker(
            &queue,
            NoChange,
            sqs_batch::worker::WorkerOptions::default()
                .with_receives_in_flight(in_flight)
                .with_metrics_interval_ms(0),
        );
        // Drained: every message received, and no delete for longer than a payment can take (a
        // RETRY is never deleted, and this queue does not redeliver). The wall time ends at the
        // last delete.
        let started = Instant::now();
        let drained = async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let idle = queue.last_delete.lock().expect("lock").unwrap_or(started);
                if queue.messages.lock().expect("lock").is_empty()
                    && idle.elapsed() > PAYMENT_TIMEOUT + Duration::from_secs(1)
                {
                    return;
                }
            }
        };
        worker.run(drained).await;
        let last = queue.last_delete.lock().expect("lock").unwrap_or(started);
        let wall = last.duration_since(started).as_secs_f64();
        let rate = records as f64 / wall;
        let worker_per_million = 1e6 / rate / 3_600.0 * FARGATE_TASK_HOUR;
        println!(
            "| worker, {in_flight} receives of 10 in flight, Fargate 0.25 vCPU / 0.5 GB | {wall:.2} | {rate:.1} | ${worker_per_million:.2} (busy all the time) |"
        );
    }
}

/// The worker's queue in memory: receives take the next ten, deletes are timed.
struct MemoryQueue {
    messages: Mutex<std::collections::VecDeque<sqs_batch::edge::SqsMessage>>,
    last_delete: Mutex<Option<Instant>>,
}

impl MemoryQueue {
    fn new(records: Vec<sqs_batch::edge::SqsMessage>) -> Self {
        Self {
            messages: Mutex::new(records.into()),
            last_delete: Mutex::new(None),
        }
    }
}

impl sqs_batch::worker::QueuePort for &MemoryQueue {
    fn arn(&self) -> &str {
        "arn:aws:sqs:us-east-1:123456789012:orders"
    }

    async fn receive(
        &self,
        max: u8,
        _wait_s: u8,
        _visibility_s: u32,
    ) -> Result<Vec<sqs_batch::edge::SqsMessage>, sqs_batch::worker::QueueError> {
        let batch: Vec<_> = {
            let mut messages = self.messages.lock().expect("lock");
            let n = usize::from(max).min(messages.len());
            messages.drain(..n).collect()
        };
        if batch.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(batch)
    }

    async fn delete(
        &self,
        entries: &[sqs_batch::worker::Delete<'_>],
    ) -> Result<Vec<String>, sqs_batch::worker::QueueError> {
        if !entries.is_empty() {
            *self.last_delete.lock().expect("lock") = Some(Instant::now());
        }
        Ok(Vec::new())
    }

    async fn visible_messages(&self) -> Result<u64, sqs_batch::worker::QueueError> {
        Ok(self.messages.lock().expect("lock").len() as u64)
    }
}

/// Visibility changes that go nowhere (the in-memory queue has no visibility).
#[derive(Clone, Copy)]
struct NoChange;

impl sqs_batch::visibility::VisibilityPort for NoChange {
    async fn change(
        &self,
        _queue_url: &str,
        _changes: &[sqs_batch::visibility::Change<'_>],
    ) -> Vec<sqs_batch::visibility::ChangeFailure> {
        Vec::new()
    }
}

/// The Powertools baseline: the plan written for `benches/powertools_baseline.py`, which
/// prints one JSON line of wall times.
async fn powertools(plan: &Plan) {
    let python = match std::env::var("BENCH_PYTHON") {
        Ok(python) => python,
        Err(_) => {
            println!(
                "\n(g) Powertools baseline skipped: BENCH_PYTHON is not set (make bench sets it)"
            );
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("powertools-baseline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plan_file = dir.join("plan.json");
    let records: Vec<_> = plan
        .payments
        .iter()
        .zip(&plan.store)
        .map(|((order, latency), (s1, s2))| {
            serde_json::json!({
                "order_id": order,
                "store_s": [s1.as_secs_f64(), s2.as_secs_f64()],
                "payment_s": latency.map(|l| l.as_secs_f64()),
            })
        })
        .collect();
    let doc = serde_json::json!({
        "event": serde_json::from_str::<serde_json::Value>(&plan.json).expect("event"),
        "records": records,
        "payment_timeout_s": PAYMENT_TIMEOUT.as_secs_f64(),
    });
    std::fs::write(&plan_file, doc.to_string()).expect("plan");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/powertools_baseline.py"
    );
    let output = tokio::process::Command::new(&python)
        .arg(script)
        .arg(&plan_file)
        .output()
        .await;
    let _ = std::fs::remove_dir_all(&dir);
    let output = match output {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            println!(
                "\n(g) Powertools baseline failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            return;
        }
        Err(e) => {
            println!("\n(g) Powertools baseline could not start {python}: {e}");
            return;
        }
    };
    let result: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the baseline's JSON line");
    println!(
        "\n(g) the same batch through Powertools for AWS Lambda (Python {}), same simulated latencies",
        result["powertools"].as_str().unwrap_or("?")
    );
    println!("| processor | wall s | RETRY |\n|---|---|---|");
    for (name, key) in [
        ("BatchProcessor (sequential)", "sequential"),
        ("AsyncBatchProcessor (all records at once)", "async"),
    ] {
        println!(
            "| {name} | {:.2} | {} |",
            result[key]["wall_s"].as_f64().unwrap_or(f64::NAN),
            result[key]["failures"]
        );
    }
}

/// SQS accepts connections and never answers; 100 records are reported, the deadline is 6 s
/// away.
async fn deadline() {
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", blackhole.local_addr().expect("addr"));
    let sdk = process_orders::aws::local_config(&endpoint);
    let sqs = process_orders::aws::sqs(&sdk, &app::SQS_SDK);
    let config = config(&[]);
    let app = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        process_orders::payment::SimulatedGateway::new(),
        SystemClock,
    );
    let backed_off = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        process_orders::payment::SimulatedGateway::new(),
        SystemClock,
    )
    .with_backoff(Some(sqs_batch::Backoff::new(
        SqsVisibility::new(sqs),
        BackoffPolicy::new(5, 900),
    )));
    let records: Vec<_> = (0..100)
        .map(|i| {
            serde_json::json!({
                "messageId": format!("m{i}"),
                "receiptHandle": format!("rh{i}"),
                "body": "not json",
                "attributes": { "ApproximateReceiveCount": "1" },
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            })
        })
        .collect();
    let json = serde_json::json!({ "Records": records }).to_string();
    // The batch alone (no visibility calls), then the whole invocation.
    let started = Instant::now();
    app.handle_json(&json, SystemClock.now_ms() + 6_000)
        .await
        .expect("handled");
    let batch = started.elapsed();
    let deadline_ms = SystemClock.now_ms() + 6_000;
    let started = Instant::now();
    backed_off
        .handle_json(&json, deadline_ms)
        .await
        .expect("handled");
    let whole = started.elapsed();
    let left_ms = deadline_ms.saturating_sub(SystemClock.now_ms());
    println!("\n(h) deadline: SQS blackholed, 100 reported records, deadline 6 s away");
    println!(
        "| batch ms | batch end to response ms | left before the deadline ms |\n|---|---|---|"
    );
    println!(
        "| {:.1} | {:.0} | {left_ms} |",
        batch.as_secs_f64() * 1000.0,
        whole.saturating_sub(batch).as_secs_f64() * 1000.0
    );
    drop(blackhole);
}
