//! The system benchmarks, each printing a table (`make bench`; numbers quoted in docs/performance.md):
//!
//! - (b) init and first response: process spawn to the first event served (an empty batch, then
//!   one order charged against dynoxide and the provider stub), over a local Lambda Runtime
//!   API, with every variable `template.yaml` sets, against a hello-world `lambda_runtime`
//!   binary built with the same profile;
//! - (c) peak RSS with the largest generated event that fits Lambda's 6 MB payload;
//! - (d) concurrency speedup with a store that adds 10 ms to every call;
//! - traces: init with traces on, the function's own exporter against OpenTelemetry's SDK
//!   (`opentelemetry-otlp`) in a hello-world, each against the bare hello-world, when
//!   `BENCH_OTEL_HELLO` names the SDK's build (`make bench-otel`, which runs this part alone).
//!
//! (b) and (c) run the release binaries found in `BENCH_BIN_DIR` (`make bench` builds them).
//! Under `cargo test --all-targets` (no `--bench` argument) this runs a small smoke version.
//! Benchmarks, not tests: nothing here passes or fails on time.

use std::time::{Duration, Instant};

use idempotency::{
    IdempotencyStore, MemoryStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
};
use lambda_kit::clock::{Clock, SystemClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::runtime_api::RuntimeApi;
use process_orders::testkit::{generated_body, template_environment};
use sqs_batch::testkit::{self as event, EventShape};

/// Lambda's invocation payload limit for a synchronous invoke (the ESM's batch limit).
const PAYLOAD_LIMIT: usize = 6 * 1024 * 1024;
const STORE_DELAY: Duration = Duration::from_millis(10);

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let runs = if full { 21 } else { 3 };
        if let (Ok(dir), Ok(otel)) = (
            std::env::var("BENCH_BIN_DIR"),
            std::env::var("BENCH_OTEL_HELLO"),
        ) {
            traces_init(&RuntimeApi::start().await, &dir, &otel, runs).await;
            return;
        }
        match std::env::var("BENCH_BIN_DIR") {
            Ok(dir) => {
                let api = RuntimeApi::start().await;
                init(&api, &dir, runs).await;
                peak_rss(&api, &dir, if full { PAYLOAD_LIMIT } else { 200_000 }).await;
            }
            Err(_) => eprintln!(
                "(b) and (c) skipped: BENCH_BIN_DIR is not set (make bench builds the release binaries and sets it)"
            ),
        }
        concurrency(full).await;
    });
}

/// One invocation of `bin` over the local Runtime API: its time to the answer and its peak RSS.
async fn serve_one(
    api: &RuntimeApi,
    bin: &str,
    env: &[(&str, &str)],
    event: &str,
) -> (Duration, u64) {
    let served = api.serve_one(bin, env, event).await;
    if let Err(e) = &served.answer {
        panic!("{bin} failed: {e}");
    }
    (served.took, served.peak_rss_kib)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

async fn init(api: &RuntimeApi, dir: &str, runs: usize) {
    let hello = format!("{dir}/examples/hello");
    // The function as deployed (a release build) when make bench built it.
    let function =
        std::env::var("BENCH_FUNCTION").unwrap_or_else(|_| format!("{dir}/process-orders"));
    let dynoxide = process_orders::testkit::dynamo::Dynoxide::start().await;
    let (dynamodb, _) = process_orders::testkit::dynamo::client(&dynoxide.endpoint());
    process_orders::testkit::dynamo::create_table(&dynamodb, "orders").await;
    let stub = process_orders::testkit::payment_stub::PaymentStub::start().await;
    let env = template_environment("orders", &stub.url(), &dynoxide.endpoint());
    // The same, with the API key in Secrets Manager (moto's): start-up must not read it, and the
    // first response pays for one read.
    let moto = process_orders::testkit::dynamo::moto_endpoint();
    let secret = payment_key_secret(&moto).await;
    let mut env_secret = env.clone();
    env_secret.extend([
        ("PAYMENT_API_KEY_SECRET".to_owned(), secret),
        ("AWS_ENDPOINT_URL_SECRETS_MANAGER".to_owned(), moto),
    ]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let env_secret: Vec<(&str, &str)> = env_secret
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let empty = r#"{"Records":[]}"#;
    let (mut h, mut f, mut hf, mut ff) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut fs, mut ffs) = (Vec::new(), Vec::new());
    for run in 0..runs {
        // A new order each run, so each first response claims, charges and completes.
        let order = serde_json::json!({ "Records": [{
            "messageId": format!("m-{run}"),
            "receiptHandle": "rh",
            "body": format!(r#"{{"order_id":"first-{run}","amount":10}}"#),
            "attributes": { "ApproximateReceiveCount": "1" },
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        }]})
        .to_string();
        let order_secret = order.replace("first-", "secret-");
        // Alternate, so drift on the machine touches every variant alike.
        h.push(serve_one(api, &hello, &[], empty).await.0);
        f.push(serve_one(api, &function, &env, empty).await.0);
        fs.push(serve_one(api, &function, &env_secret, empty).await.0);
        hf.push(serve_one(api, &hello, &[], &order).await.0);
        ff.push(serve_one(api, &function, &env, &order).await.0);
        ffs.push(
            serve_one(api, &function, &env_secret, &order_secret)
                .await
                .0,
        );
    }
    assert_eq!(
        stub.total_charges(),
        2 * runs,
        "every first response charged its order"
    );
    let (h, f, hf, ff) = (median(h), median(f), median(hf), median(ff));
    let (fs, ffs) = (median(fs), median(ffs));
    println!(
        "\n(b) init and first response: spawn to the answer, median of {runs}, every variable \
         template.yaml sets ({} of them)",
        env.len()
    );
    println!("| event | hello-world ms | process-orders ms | ratio |\n|---|---|---|---|");
    println!(
        "| empty batch (init) | {} | {} | {:.2} |",
        ms(h),
        ms(f),
        f.as_secs_f64() / h.as_secs_f64()
    );
    println!(
        "| empty batch, API key in Secrets Manager (init) | {} | {} | {:.2} |",
        ms(h),
        ms(fs),
        fs.as_secs_f64() / h.as_secs_f64()
    );
    println!(
        "| one order: claim, charge, complete (first response) | {} | {} | {:.2} |",
        ms(hf),
        ms(ff),
        ff.as_secs_f64() / hf.as_secs_f64()
    );
    println!(
        "| one order, API key in Secrets Manager: read, claim, charge, complete | {} | {} | {:.2} |",
        ms(hf),
        ms(ffs),
        ffs.as_secs_f64() / hf.as_secs_f64()
    );
}

/// A local OTLP/HTTP receiver that takes every export (200, an empty answer): its traces URL.
async fn otlp_receiver() -> String {
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1/traces")
}

/// Init with traces on: spawn to the answer of an empty batch (its invocation's span exported
/// before the answer), for the hello-world bare, the hello-world with OpenTelemetry's SDK
/// exporter (`otel`), and the function with its own exporter and with traces off.
async fn traces_init(api: &RuntimeApi, dir: &str, otel: &str, runs: usize) {
    let hello = format!("{dir}/examples/hello");
    let function =
        std::env::var("BENCH_FUNCTION").unwrap_or_else(|_| format!("{dir}/process-orders"));
    let receiver = otlp_receiver().await;
    let dynoxide = process_orders::testkit::dynamo::Dynoxide::start().await;
    let stub = process_orders::testkit::payment_stub::PaymentStub::start().await;
    let env = template_environment("orders", &stub.url(), &dynoxide.endpoint());
    let mut traced = env.clone();
    traced.push((
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".to_owned(),
        receiver.clone(),
    ));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let traced: Vec<(&str, &str)> = traced
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let sdk_env = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.as_str())];
    let empty = r#"{"Records":[]}"#;
    let (mut h, mut o, mut f, mut t) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        // Alternate, so drift on the machine touches every variant alike.
        h.push(serve_one(api, &hello, &[], empty).await.0);
        o.push(serve_one(api, otel, &sdk_env, empty).await.0);
        f.push(serve_one(api, &function, &env, empty).await.0);
        t.push(serve_one(api, &function, &traced, empty).await.0);
    }
    let size = |path: &str| std::fs::metadata(path).map_or(0, |m| m.len());
    let h = median(h);
    println!(
        "
traces: init with traces on, spawn to the answer of an empty batch (its span exported \
         over OTLP/HTTP protobuf to a local receiver before the answer), median of {runs}"
    );
    println!("| binary | ms | ratio to hello-world | size, bytes |\n|---|---|---|---|");
    println!(
        "| hello-world `lambda_runtime` | {} | 1.00 | {} |",
        ms(h),
        size(&hello)
    );
    for (name, path, runs) in [
        (
            "hello-world + OpenTelemetry's SDK (`opentelemetry-otlp`, batch processor)",
            otel,
            o,
        ),
        ("process-orders, traces off", function.as_str(), f),
        (
            "process-orders, traces on (its own exporter)",
            function.as_str(),
            t,
        ),
    ] {
        let took = median(runs);
        println!(
            "| {name} | {} | {:.2} | {} |",
            ms(took),
            took.as_secs_f64() / h.as_secs_f64(),
            size(path)
        );
    }
}

/// A secret holding a payment API key, on the Secrets Manager at `endpoint`; its ARN.
async fn payment_key_secret(endpoint: &str) -> String {
    let client = aws_sdk_secretsmanager::Client::new(&process_orders::aws::local_config(endpoint));
    let created = client
        .create_secret()
        .name(format!("bench-payment-key-{}", fastrand::u64(..)))
        .secret_string(r#"{"api_key":"sk_bench"}"#)
        .send()
        .await
        .expect("create the secret");
    created.arn().expect("an ARN").to_owned()
}

async fn peak_rss(api: &RuntimeApi, dir: &str, limit: usize) {
    let (records, json) = event::largest_within(limit, 0, generated_body);
    let hello = format!("{dir}/examples/hello");
    let function = format!("{dir}/process-orders");
    // In-memory store and simulated payments: the whole event is processed without network.
    let local = &[("PROCESS_ORDERS_LOCAL", "1")];
    let (ht, hr) = serve_one(api, &hello, &[], &json).await;
    let (ft, fr) = serve_one(api, &function, local, &json).await;
    println!(
        "\n(c) peak RSS (VmHWM), one event of {records} records, {} bytes",
        json.len()
    );
    println!("| binary | peak RSS MiB | spawn to answer ms |\n|---|---|---|");
    println!(
        "| hello-world (parses into serde_json::Value) | {:.1} | {} |",
        hr as f64 / 1024.0,
        ms(ht)
    );
    println!(
        "| process-orders (in-memory store) | {:.1} | {} |",
        fr as f64 / 1024.0,
        ms(ft)
    );
}

// ---------------------------------------------------------------------------------------------
// (d) Concurrency: every store call takes 10 ms more, as a DynamoDB round trip would.

struct SlowStore(MemoryStore);

impl IdempotencyStore for SlowStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        tokio::time::sleep(STORE_DELAY).await;
        self.0.begin(request).await
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        tokio::time::sleep(STORE_DELAY).await;
        self.0.complete(key, lease, now_ms, output).await
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        tokio::time::sleep(STORE_DELAY).await;
        self.0.release(key, lease).await
    }
}

impl idempotency::guard::EffectStore for SlowStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        tokio::time::sleep(STORE_DELAY).await;
        self.0.mark_attempted(key, lease, at_ms).await
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        tokio::time::sleep(STORE_DELAY).await;
        self.0.reject(key, lease, now_ms, reason).await
    }
}

async fn run_once(json: &str, settings: &[(&str, String)]) -> Duration {
    // Metrics off, so the tables are not interleaved with EMF lines.
    let config = Config::from_lookup(|k| {
        settings
            .iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
            .or_else(|| (k == "METRICS_ENABLED").then(|| "false".to_owned()))
    })
    .expect("configuration");
    let app = App::with_ports(
        &config,
        SlowStore(MemoryStore::new(config.store.retention)),
        SimulatedGateway::new(),
        SystemClock,
    );
    let started = Instant::now();
    let response = app
        .handle_json(json, SystemClock.now_ms() + 3_600_000)
        .await
        .expect("handled");
    assert!(response.batch_item_failures.is_empty());
    started.elapsed()
}

async fn concurrency(full: bool) {
    let records = if full { 1_000 } else { 50 };
    let levels: &[usize] = if full { &[1, 8, 16, 32, 64] } else { &[1, 8] };
    let json = |fifo_groups| {
        serde_json::to_string(&event::generate(
            EventShape {
                records,
                fifo_groups,
                seed: 7,
            },
            generated_body,
        ))
        .expect("event")
    };
    let standard = json(0);
    println!(
        "\n(d) concurrency: {records}-record standard batch, store +{} ms per call (2 calls per record)",
        STORE_DELAY.as_millis()
    );
    println!("| SQS_BATCH_MAX_CONCURRENCY | ms | speedup | speedup / C |\n|---|---|---|---|");
    let mut base = None;
    for &c in levels {
        let took = run_once(&standard, &[("SQS_BATCH_MAX_CONCURRENCY", c.to_string())]).await;
        let base = *base.get_or_insert(took);
        let speedup = base.as_secs_f64() / took.as_secs_f64();
        println!(
            "| {c} | {} | {speedup:.2} | {:.2} |",
            ms(took),
            speedup / c as f64
        );
    }

    let groups = 8;
    let fifo = json(groups);
    let sequential = run_once(&fifo, &[("SQS_BATCH_FIFO_SCOPE", "batch".into())]).await;
    let grouped = run_once(
        &fifo,
        &[
            ("SQS_BATCH_FIFO_SCOPE", "group".into()),
            ("SQS_BATCH_MAX_CONCURRENCY", groups.to_string()),
        ],
    )
    .await;
    let speedup = sequential.as_secs_f64() / grouped.as_secs_f64();
    println!("\n(d) FIFO: {records} records in {groups} groups, same store");
    println!("| scope | ms | speedup | speedup / G |\n|---|---|---|---|");
    println!("| batch (sequential) | {} | 1.00 | |", ms(sequential));
    println!(
        "| group, SQS_BATCH_MAX_CONCURRENCY {groups} | {} | {speedup:.2} | {:.2} |",
        ms(grouped),
        speedup / groups as f64
    );
}
