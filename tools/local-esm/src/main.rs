//! The local system without Docker: queues and table on a local SQS/DynamoDB-compatible server
//! (moto), a generated load, and the local event source mapping driving the function.
//!
//!   local-esm demo --endpoint http://127.0.0.1:PORT [--orders 300] [--duplicate-rate 0.1]
//!                  [--poison-rate 0.05] [--groups 8] [--concurrency 4]
//!                  [--invoke-address 127.0.0.1:9000]   (the real binary under cargo lambda watch)
//!   local-esm gen-event [--records 10000] [--fifo-groups 0] [--seed 7]   (a generated event)

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idempotency::DynamoDbStore;
use lambda_kit::SystemClock;
use local_esm::esm::{self, EsmSettings, EsmStats, Invoke, RuntimeApi};
use local_esm::send::{self, SendPlan};
use local_esm::setup::{self, QueuePair, QueueSettings};
use local_esm::{LocalError, parse_flags, sdk_config};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use sqs_batch::visibility::SqsVisibility;
use sqs_batch::{Backoff, BackoffPolicy};

const USAGE: &str = "usage: local-esm demo --endpoint URL [--orders N] [--duplicate-rate R] [--poison-rate R] [--groups G] [--concurrency C] [--max-receive-count M] [--invoke-address HOST:PORT]
       local-esm gen-event [--records N] [--fifo-groups G] [--seed S]   (an SQS event on stdout)";

fn get<T: std::str::FromStr>(
    flags: &HashMap<String, String>,
    name: &str,
    default: T,
) -> Result<T, String> {
    flags.get(name).map_or(Ok(default), |v| {
        v.parse().map_err(|_| format!("--{name} {v:?} is invalid"))
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    local_esm::init_tool_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("demo") => match parse_flags(&args[1..], &[]) {
            Ok(flags) => demo(&flags).await,
            Err(e) => Err(e),
        },
        Some("gen-event") => parse_flags(&args[1..], &[]).and_then(|flags| gen_event(&flags)),
        _ => Err(USAGE.to_owned()),
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

fn local(e: LocalError) -> String {
    lambda_kit::error_chain(&e)
}

async fn demo(flags: &HashMap<String, String>) -> Result<(), String> {
    let endpoint = flags.get("endpoint").ok_or(USAGE)?.clone();
    let orders: usize = get(flags, "orders", 300)?;
    let duplicate_rate: f64 = get(flags, "duplicate-rate", 0.1)?;
    let poison_rate: f64 = get(flags, "poison-rate", 0.05)?;
    let groups: usize = get(flags, "groups", 8)?;
    let concurrency: usize = get(flags, "concurrency", 4)?;
    let max_receive_count: u32 = get(flags, "max-receive-count", 5)?;
    let started = Instant::now();

    let sdk = sdk_config(&endpoint);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let settings = QueueSettings {
        visibility_timeout_s: 3,
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
            duplicate_rate,
            poison_rate,
            groups,
            seed: 42,
            prefix: prefix.into(),
        };
        let generated = send::generate(&plan);
        send::send(&sqs, queue, &generated.messages)
            .await
            .map_err(local)?;
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
        "FIFO_SCOPE" => Some("group".into()),
        _ => None,
    })
    .map_err(|e| e.to_string())?;
    let esm_settings = EsmSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(500),
        concurrency,
        function_timeout: Duration::from_secs(30),
        max_run: Duration::from_secs(600),
    };
    let policy = BackoffPolicy {
        base_s: 1,
        cap_s: 2,
    };
    let gateway = Arc::new(SimulatedGateway::new());
    let stats = if let Some(address) = flags.get("invoke-address") {
        let function = Arc::new(RuntimeApi::new(address, "process-orders"));
        run_both(&sqs, [&standard, &fifo], function, esm_settings).await?
    } else {
        let store = DynamoDbStore::new(dynamodb.clone(), table, config.store.retention);
        let app = App::with_ports(&config, store, Arc::clone(&gateway), SystemClock).with_backoff(
            Some(Backoff {
                port: SqsVisibility::new(sqs.clone()),
                policy,
            }),
        );
        run_both(&sqs, [&standard, &fifo], Arc::new(app), esm_settings).await?
    };

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
    if flags.contains_key("invoke-address") {
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

/// Prints a generated event of valid orders, shaped as Lambda delivers it.
fn gen_event(flags: &HashMap<String, String>) -> Result<(), String> {
    let shape = sqs_batch::testkit::EventShape {
        records: get(flags, "records", 10_000)?,
        fifo_groups: get(flags, "fifo-groups", 0)?,
        seed: get(flags, "seed", 7)?,
    };
    let event = sqs_batch::testkit::generate(shape, process_orders::order::generated_body);
    let json = serde_json::to_string(&event).map_err(|e| e.to_string())?;
    println!("{json}");
    Ok(())
}
