//! (a) Per-record CPU: a generated 10,000-record event (about 6.0 MB) through the function's
//! one-shot path (borrowed parse, in-memory store, simulated gateway, response), standard and
//! FIFO, next to the reference: only deserializing the same event into
//! `aws_lambda_events::sqs::SqsEvent`. `make bench` runs it; `cargo test --all-targets` runs each
//! case once as a smoke test.

use std::hint::black_box;

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
        "FIFO_SCOPE" => Some(scope.clone()),
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
    }
}

criterion_group!(benches, per_record);
criterion_main!(benches);
