//! (a) Per-record CPU: a generated 10,000-record event (about 6.0 MB) through the function's
//! one-shot path (borrowed parse, in-memory store, simulated gateway, response), standard and
//! FIFO, next to the reference: only deserializing the same event into
//! `aws_lambda_events::sqs::SqsEvent`. `make bench` runs it; `cargo test --all-targets` runs each
//! case once as a smoke test.
//!
//! After criterion's groups, the in-memory goals side by side, round by round on the same text:
//! the whole run against the reference parse, and against the seed's Python consumer
//! (`benches/seed_consumer.py`, run with `BENCH_PYTHON` when it is set: pydantic, a lease store,
//! the batch loop), each as wall time per record.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use idempotency::MemoryStore;
use lambda_kit::clock::{Clock, SystemClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::generated_body;
use sqs_batch::edge::SqsEvent;
use sqs_batch::edge::{Batch, EventView};
use sqs_batch::testkit::{EventShape, generate};

const RECORDS: usize = 10_000;

fn app(fifo_scope: &str) -> App<MemoryStore, SimulatedGateway, SystemClock> {
    let scope = fifo_scope.to_owned();
    // Metrics off: one EMF line per iteration would bury criterion's output (building it costs
    // microseconds per invocation, nothing per record).
    let config = Config::from_lookup(|k| match k {
        "SQS_BATCH_FIFO_SCOPE" => Some(scope.clone()),
        "METRICS_ENABLED" => Some("false".to_owned()),
        _ => None,
    })
    .expect("default configuration");
    App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    )
}

fn per_record(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // (queue, FIFO groups, FIFO scope): the template's FIFO default is group scope.
    for (queue, groups, scope) in [("standard", 0, "batch"), ("fifo", 8, "group")] {
        let shape = EventShape {
            records: RECORDS,
            fifo_groups: groups,
            seed: 7,
        };
        let json = serde_json::to_string(&generate(shape, generated_body)).expect("event");
        let mut group = c.benchmark_group(format!("{queue} 10k ({} bytes)", json.len()));
        group.throughput(Throughput::Elements(RECORDS as u64));
        group.sample_size(20);
        group.bench_function("reference: deserialize into SqsEvent", |b| {
            b.iter(|| serde_json::from_str::<SqsEvent>(black_box(&json)).expect("parses"))
        });
        group.bench_function("parse: EventView + Batch", |b| {
            b.iter(|| {
                let view = EventView::parse(black_box(&json)).expect("parses");
                Batch::from_view(&view).expect("batch").messages.len()
            })
        });
        group.bench_function("whole one-shot run (handle_json)", |b| {
            b.iter_batched(
                // A fresh store each time: every record takes the new-order path.
                || app(scope),
                |app| {
                    let deadline = SystemClock.now_ms() + 600_000;
                    let response = runtime
                        .block_on(app.handle_json(black_box(&json), deadline))
                        .expect("handled");
                    assert!(response.batch_item_failures.is_empty());
                    app
                },
                BatchSize::PerIteration,
            )
        });
        group.finish();
        // Under `cargo test --all-targets` (no --bench) once, as criterion runs each case.
        let rounds = if std::env::args().any(|a| a == "--bench") {
            15
        } else {
            1
        };
        side_by_side(&runtime, &json, queue, groups > 0, scope, rounds);
    }
}

/// The whole run per record against the reference parse and the seed's consumer, on `json`,
/// medians of `rounds` rounds (the reference and the whole run alternated).
fn side_by_side(
    runtime: &tokio::runtime::Runtime,
    json: &str,
    queue: &str,
    fifo: bool,
    scope: &str,
    rounds: usize,
) {
    let (mut reference, mut whole) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        black_box(serde_json::from_str::<SqsEvent>(black_box(json)).expect("parses"));
        reference.push(start.elapsed());
        let app = app(scope);
        let deadline = SystemClock.now_ms() + 600_000;
        let start = Instant::now();
        let response = runtime
            .block_on(app.handle_json(black_box(json), deadline))
            .expect("handled");
        whole.push(start.elapsed());
        assert!(response.batch_item_failures.is_empty());
    }
    let per_record = |times: Vec<Duration>| {
        let mut us: Vec<f64> = times
            .iter()
            .map(|t| t.as_secs_f64() * 1e6 / RECORDS as f64)
            .collect();
        median(&mut us)
    };
    let (reference, whole) = (per_record(reference), per_record(whole));
    println!(
        "\n(a) {queue}, {RECORDS} records, median of {rounds} rounds: reference parse \
         {reference:.2} us a record, whole run {whole:.2} us ({:.2}x the parse)",
        whole / reference
    );
    match seed_consumer(json, fifo, rounds) {
        Ok((mut seed, versions)) => {
            let seed = median(&mut seed);
            println!(
                "(a) {queue}, the seed's consumer ({versions}): {seed:.2} us a record \
                 ({:.1}x the whole run)",
                seed / whole
            )
        }
        Err(why) => println!("(a) {queue}, the seed's consumer skipped: {why}"),
    }
}

/// The seed's consumer over the same text: its per-record wall time of each round, and the
/// versions it ran on.
fn seed_consumer(json: &str, fifo: bool, rounds: usize) -> Result<(Vec<f64>, String), String> {
    let python = std::env::var("BENCH_PYTHON")
        .map_err(|_| "BENCH_PYTHON is not set (make bench sets it)".to_owned())?;
    let file = std::env::temp_dir().join(format!("seed-consumer-{}.json", std::process::id()));
    std::fs::write(&file, json).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let output = std::process::Command::new(&python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/seed_consumer.py"
        ))
        .arg(&file)
        .arg(rounds.to_string())
        .arg(if fifo { "1" } else { "0" })
        .output();
    let _ = std::fs::remove_file(&file);
    let output = output.map_err(|e| format!("cannot start {python}: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let result: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("not the script's JSON line: {e}"))?;
    assert_eq!(
        result["failures"], 0,
        "the seed's consumer acknowledged every order"
    );
    let rounds = result["per_record_us"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
        .unwrap_or_default();
    let versions = format!(
        "Python {}, pydantic {}",
        result["python"].as_str().unwrap_or("?"),
        result["pydantic"].as_str().unwrap_or("?")
    );
    Ok((rounds, versions))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

criterion_group!(benches, per_record);
criterion_main!(benches);
