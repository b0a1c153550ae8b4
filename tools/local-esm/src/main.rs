//! The local system without Docker: queues and table on a local SQS/DynamoDB-compatible server
//! (moto), a generated load, and the local event source mapping driving the function.
//! `local-esm --help`, and `local-esm <command> --help` for each command with examples.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use idempotency::DynamoDbStore;
use lambda_kit::SystemClock;
use local_esm::esm::{self, EsmSettings, EsmStats, Invoke, RuntimeApi};
use local_esm::send::{self, SendPlan};
use local_esm::setup::{self, QueuePair, QueueSettings};
use local_esm::{ToolError, progress_bar, sdk_config};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use sqs_batch::dead_letter::SqsDeadLetters;
use sqs_batch::visibility::SqsVisibility;
use sqs_batch::{Backoff, backoff::BackoffPolicy, dead_letter::DeadLetters};

/// Local tools for the order function: the whole system on moto, and generated events.
#[derive(Debug, Parser)]
#[command(name = "local-esm", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Queues, DLQs and table on a local server, generated orders, and the local event source
    /// mapping running the function until both queues drain; then a summary.
    #[command(after_help = "Examples:
  local-esm demo --endpoint http://127.0.0.1:5000
  local-esm demo --endpoint http://127.0.0.1:5000 --orders 1000 --max-receive-count 10
  local-esm demo --endpoint http://127.0.0.1:5000 --invoke-address 127.0.0.1:9000
      (the real binary under `cargo lambda watch`, started with the same endpoint and table)")]
    Demo(Demo),
    /// Prints a generated SQS event of valid orders, shaped as Lambda delivers it.
    #[command(after_help = "Examples:
  local-esm gen-event --records 10 > event.json
  local-esm gen-event --records 10000 --fifo-groups 8 --seed 3")]
    GenEvent {
        /// Records in the event.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        records: u32,
        /// Message groups (0: a standard queue's event).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        fifo_groups: u32,
        /// Seed of the generator: the same seed, the same event.
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
}

#[derive(Debug, Args)]
struct Demo {
    /// The local SQS and DynamoDB-compatible server (moto).
    #[arg(long, value_name = "URL")]
    endpoint: String,
    /// Orders per queue kind.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    orders: u32,
    /// Share of orders sent twice.
    #[arg(long, default_value_t = 0.1, value_parser = rate)]
    duplicate_rate: f64,
    /// Share of messages with a body that is not an order.
    #[arg(long, default_value_t = 0.05, value_parser = rate)]
    poison_rate: f64,
    /// Message groups on the FIFO queue.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    groups: u32,
    /// Pollers per queue.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    concurrency: u16,
    /// Receives before SQS moves a message to its DLQ.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    max_receive_count: u16,
    /// Invoke the function over the Lambda invoke API at HOST:PORT (`cargo lambda watch`)
    /// instead of in-process.
    #[arg(long, value_name = "HOST:PORT")]
    invoke_address: Option<String>,
}

/// A share between 0 and 1.
fn rate(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{raw:?} is not a share between 0 and 1")),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    local_esm::init_tool_logging();
    let result = match Cli::parse().command {
        Command::Demo(demo) => run_demo(&demo).await,
        Command::GenEvent {
            records,
            fifo_groups,
            seed,
        } => gen_event(records, fifo_groups, seed),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("local-esm: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The local event source mapping on both queues at once.
async fn run_both<I: Invoke + 'static>(
    sqs: &aws_sdk_sqs::Client,
    queues: [&QueuePair; 2],
    function: Arc<I>,
    settings: EsmSettings,
) -> Result<[EsmStats; 2], String> {
    let [a, b] = queues.map(|q| {
        tokio::spawn(esm::run(
            sqs.clone(),
            q.clone(),
            Arc::clone(&function),
            settings,
        ))
    });
    let a = a.await.map_err(|e| e.to_string())?.map_err(local)?;
    let b = b.await.map_err(|e| e.to_string())?.map_err(local)?;
    Ok([a, b])
}

fn local(e: ToolError) -> String {
    lambda_kit::error_chain(&e)
}

async fn run_demo(flags: &Demo) -> Result<(), String> {
    let endpoint = flags.endpoint.clone();
    let orders = flags.orders as usize;
    let groups = flags.groups as usize;
    let concurrency = usize::from(flags.concurrency);
    let max_receive_count = u32::from(flags.max_receive_count);
    let started = Instant::now();

    let sdk = sdk_config(&endpoint);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    // At least the function timeout, as Lambda requires of a queue it polls.
    let settings = QueueSettings {
        visibility_timeout_s: 6,
        max_receive_count,
    };
    let standard = setup::queue_pair(&sqs, "orders", false, settings)
        .await
        .map_err(local)?;
    let fifo = setup::queue_pair(&sqs, "orders", true, settings)
        .await
        .map_err(local)?;
    let table = "process-orders-demo";
    setup::table(&dynamodb, table).await.map_err(local)?;

    let mut sent = Vec::new();
    for (queue, prefix) in [(&standard, "std"), (&fifo, "fifo")] {
        let plan = SendPlan {
            orders,
            duplicate_rate: flags.duplicate_rate,
            poison_rate: flags.poison_rate,
            groups,
            seed: 42,
            prefix: prefix.into(),
        };
        let generated = send::generate(&plan);
        let bar = progress_bar(generated.messages.len() as u64, "sent");
        for chunk in generated.messages.chunks(100) {
            send::send(&sqs, queue, chunk).await.map_err(local)?;
            bar.inc(chunk.len() as u64);
        }
        bar.finish_and_clear();
        println!(
            "sent {:>5} messages to {:<12} {} orders, {} sent twice, {} poison",
            generated.messages.len(),
            queue.name,
            generated.valid_orders.len(),
            generated.duplicates,
            generated.poison
        );
        sent.push(generated);
    }

    let config = Config::from_lookup(|name| match name {
        "SQS_BATCH_FIFO_SCOPE" => Some("group".into()),
        // Margins that fit the 5 s function timeout below.
        "IDEMPOTENCY_LEASE_MARGIN_MS" | "SQS_BATCH_DEADLINE_MARGIN_MS" => Some("1000".into()),
        _ => None,
    })
    .map_err(|e| e.to_string())?;
    let esm_settings = EsmSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(500),
        concurrency,
        function_timeout: Duration::from_secs(5),
        // The longest a message stays invisible: the visibility timeout (6 s), or a BUSY
        // duplicate's wait for the lease (the function timeout plus the 1 s lease margin, plus
        // up to 1 s of jitter) after its invocation; then a second more.
        drained_after: Duration::from_secs(8),
        max_run: Duration::from_secs(600),
    };
    let policy = BackoffPolicy::new(1, 2);
    let gateway = Arc::new(SimulatedGateway::new());
    let total: u64 = sent.iter().map(|g| g.messages.len() as u64).sum();
    let drain = tokio::spawn(show_drain(
        sqs.clone(),
        [standard.clone(), fifo.clone()],
        total,
    ));
    let stats = if let Some(address) = &flags.invoke_address {
        let function = Arc::new(RuntimeApi::new(address, "process-orders"));
        run_both(&sqs, [&standard, &fifo], function, esm_settings).await?
    } else {
        let store = DynamoDbStore::new(dynamodb.clone(), table, config.store.retention);
        let moves = sqs.clone();
        let app = App::with_ports(&config, store, Arc::clone(&gateway), SystemClock)
            .with_backoff(Some(
                Backoff::new(SqsVisibility::new(sqs.clone()), policy)
                    .with_recovery(config.recovery),
            ))
            // POISON leaves at its first receive, as deployed (SQS_BATCH_MOVE_POISON_TO_DLQ).
            .with_dead_letters(Some(DeadLetters {
                port: SqsDeadLetters::on_first_use(move || moves.clone()),
                moved_by: "local-esm demo".to_owned(),
            }));
        run_both(&sqs, [&standard, &fifo], Arc::new(app), esm_settings).await?
    };
    drain.abort();

    println!();
    println!(
        "{:<12} {:>11} {:>8} {:>9} {:>8} {:>10} {:>11}",
        "queue", "invocations", "records", "reported", "deleted", "left", "in DLQ"
    );
    for (queue, s) in [(&standard, stats[0]), (&fifo, stats[1])] {
        let left = setup::depth(&sqs, &queue.url).await.map_err(local)?.total();
        let dlq = setup::depth(&sqs, &queue.dlq_url)
            .await
            .map_err(local)?
            .total();
        println!(
            "{:<12} {:>11} {:>8} {:>9} {:>8} {:>10} {:>11}",
            queue.name, s.invocations, s.records, s.reported, s.deleted, left, dlq
        );
    }
    let valid: usize = sent.iter().map(|g| g.valid_orders.len()).sum();
    let duplicates: usize = sent.iter().map(|g| g.duplicates).sum();
    let poison: usize = sent.iter().map(|g| g.poison).sum();
    if flags.invoke_address.is_some() {
        println!("\ncharges happened in the invoked binary's simulated gateway; see its log");
    } else {
        println!(
            "\norders charged {} of {valid} valid (charge requests {}), duplicate sends absorbed {duplicates}, poison sent {poison}",
            gateway.effective_charges(),
            gateway.requests()
        );
    }
    println!("wall time {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The drain as a bar: messages no longer in either source queue (processed, or moved to a
/// DLQ), polled every second until the demo aborts it.
async fn show_drain(sqs: aws_sdk_sqs::Client, queues: [QueuePair; 2], total: u64) {
    let bar = progress_bar(total, "drained");
    loop {
        let mut left = 0;
        for queue in &queues {
            if let Ok(depth) = setup::depth(&sqs, &queue.url).await {
                left += depth.total();
            }
        }
        bar.set_position(total.saturating_sub(left));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Prints a generated event of valid orders, shaped as Lambda delivers it.
fn gen_event(records: u32, fifo_groups: u32, seed: u64) -> Result<(), String> {
    let shape = sqs_batch::testkit::EventShape {
        records: records as usize,
        fifo_groups: fifo_groups as usize,
        seed,
    };
    let event = sqs_batch::testkit::generate(shape, process_orders::testkit::generated_body);
    let json = serde_json::to_string(&event).map_err(|e| e.to_string())?;
    println!("{json}");
    Ok(())
}
