//! On-call tool for the order queues (see the README's runbook).
//!
//!   orders-ops depth   --queue NAME|URL [--endpoint URL]
//!   orders-ops inspect --queue NAME|URL [--max 50] [--endpoint URL]
//!   orders-ops redrive --queue NAME|URL [--manual] [--rate 10] [--yes] [--endpoint URL]
//!   orders-ops send    --queue NAME|URL --file FILE [--group G] [--bucket B] [--threshold 262144]
//!                      (--bucket: bodies above the threshold go to S3 with a pointer; needs the
//!                      s3-claim-check feature)
//!
//! `--queue` names the source queue; `inspect` and `redrive` work on its DLQ (from the redrive
//! policy). Without `--endpoint` the AWS SDK's usual configuration applies (profile, region).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use aws_sdk_sqs::Client;
use local_esm::{LocalError, parse_flags, sdk_config};
use orders_ops::{self as ops, Queue};

const USAGE: &str = "usage: orders-ops depth|inspect|redrive|send --queue NAME|URL [--endpoint URL] [--max N] [--manual] [--rate R] [--yes] [--file F] [--group G] [--bucket B] [--threshold N]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    local_esm::init_tool_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("orders-ops: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let command = args.first().map(String::as_str).unwrap_or("");
    let flags = parse_flags(args.get(1..).unwrap_or_default(), &["manual", "yes"])
        .map_err(|e| format!("{e}\n{USAGE}"))?;
    let queue = flags.get("queue").ok_or(USAGE)?;
    let sdk = match flags.get("endpoint") {
        Some(endpoint) => sdk_config(endpoint),
        // The profile, region and credentials chain of the user's AWS configuration, over the
        // function's HTTP client (the build has no other).
        None => {
            aws_config::defaults(aws_config::BehaviorVersion::latest())
                .http_client(process_orders::aws::http_client())
                .load()
                .await
        }
    };
    let sqs = Client::new(&sdk);
    let source = ops::resolve(&sqs, queue).await.map_err(text)?;
    match command {
        "depth" => depth(&sqs, &source).await,
        "inspect" => {
            let max = number(&flags, "max", 50)?;
            inspect(&sqs, &source, max as usize).await
        }
        "redrive" => {
            let rate = number(&flags, "rate", 10)?;
            let dlq = ops::dead_letter_queue(&sqs, &source).await.map_err(text)?;
            println!("{}", ops::REDRIVE_CHECKLIST);
            println!(
                "Move the messages of {} back to {} at {rate}/s.",
                dlq.name(),
                source.name()
            );
            if !flags.contains_key("yes") && !confirm()? {
                return Err("not confirmed; nothing moved".into());
            }
            if flags.contains_key("manual") {
                let moved = ops::redrive_manual(&sqs, &dlq, &source, rate as u32)
                    .await
                    .map_err(text)?;
                println!(
                    "moved {} message(s); {} refused by the source queue",
                    moved.moved, moved.failed
                );
                Ok(())
            } else {
                move_task(&sqs, &dlq, &source, rate as i32).await
            }
        }
        "send" => {
            let file = flags.get("file").ok_or("send needs --file")?;
            let body = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
            let threshold = number(&flags, "threshold", ops::INLINE_LIMIT as u64)? as usize;
            #[cfg(feature = "s3-claim-check")]
            let s3 = aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(&sdk)
                    .force_path_style(flags.contains_key("endpoint"))
                    .build(),
            );
            let offload = flags.get("bucket").map(|bucket| ops::Offload {
                #[cfg(feature = "s3-claim-check")]
                s3: &s3,
                bucket,
                threshold,
            });
            let group = flags.get("group").map(String::as_str);
            let offloaded = ops::send_order(&sqs, &source, &body, group, offload)
                .await
                .map_err(text)?;
            println!(
                "sent {} bytes to {}{}",
                body.len(),
                source.name(),
                if offloaded {
                    " through S3 (claim check)"
                } else {
                    ""
                }
            );
            Ok(())
        }
        _ => Err(USAGE.into()),
    }
}

fn text(e: LocalError) -> String {
    lambda_kit::error_chain(&e)
}

fn number(flags: &HashMap<String, String>, name: &str, default: u64) -> Result<u64, String> {
    flags.get(name).map_or(Ok(default), |v| {
        v.parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("--{name} {v:?} must be a positive whole number"))
    })
}

fn confirm() -> Result<bool, String> {
    print!("Type yes to go on: ");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    Ok(line.trim() == "yes")
}

async fn depth(sqs: &Client, source: &Queue) -> Result<(), String> {
    println!("| queue | visible | in flight | delayed |\n|---|---|---|---|");
    let mut queues = vec![source.clone()];
    if source.dlq_arn.is_some() {
        queues.push(ops::dead_letter_queue(sqs, source).await.map_err(text)?);
    }
    for q in &queues {
        let d = ops::depth(sqs, &q.url).await.map_err(text)?;
        println!(
            "| {} | {} | {} | {} |",
            q.name(),
            d.visible,
            d.in_flight,
            d.delayed
        );
    }
    // SQS's API has no age of the oldest message; CloudWatch has it as a metric.
    println!(
        "oldest message age: CloudWatch metric ApproximateAgeOfOldestMessage (not in the SQS API)"
    );
    Ok(())
}

async fn inspect(sqs: &Client, source: &Queue, max: usize) -> Result<(), String> {
    let dlq = ops::dead_letter_queue(sqs, source).await.map_err(text)?;
    let peeked = ops::inspect(sqs, &dlq.url, max).await.map_err(text)?;
    println!(
        "{} message(s) in {} (made visible again):",
        peeked.len(),
        dlq.name()
    );
    println!(
        "| message id | receives | first received (ms) | sent (ms) | body bytes | group | order id |\n|---|---|---|---|---|---|---|"
    );
    let show = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for p in peeked {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            p.message_id,
            show(p.receive_count.map(|n| n.to_string())),
            show(p.first_receive_ms.map(|n| n.to_string())),
            show(p.sent_ms.map(|n| n.to_string())),
            p.body_len,
            show(p.group_id),
            show(p.order_id)
        );
    }
    Ok(())
}

/// SQS's own redrive: a message move task at `rate` per second, followed until it ends and
/// cancelled on Ctrl-C.
async fn move_task(sqs: &Client, dlq: &Queue, source: &Queue, rate: i32) -> Result<(), String> {
    let started = sqs
        .start_message_move_task()
        .source_arn(&dlq.arn)
        .destination_arn(&source.arn)
        .max_number_of_messages_per_second(rate)
        .send()
        .await
        .map_err(|e| {
            format!(
                "{} (a server without message move tasks, such as moto, needs --manual)",
                lambda_kit::error_chain(&e)
            )
        })?;
    let handle = started.task_handle().unwrap_or_default().to_owned();
    println!("move task started: {handle}");
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                sqs.cancel_message_move_task().task_handle(&handle).send().await
                    .map_err(|e| lambda_kit::error_chain(&e))?;
                return Err("cancelled; messages already moved stay moved".into());
            }
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        let tasks = sqs
            .list_message_move_tasks()
            .source_arn(&dlq.arn)
            .max_results(1)
            .send()
            .await
            .map_err(|e| lambda_kit::error_chain(&e))?;
        let Some(task) = tasks.results().first() else {
            continue;
        };
        println!(
            "{}: {} of {} moved",
            task.status().unwrap_or("UNKNOWN"),
            task.approximate_number_of_messages_moved(),
            task.approximate_number_of_messages_to_move().unwrap_or(0)
        );
        match task.status() {
            Some("COMPLETED") => return Ok(()),
            Some("FAILED" | "CANCELLED") => {
                return Err(format!(
                    "move task ended: {}",
                    task.failure_reason().unwrap_or("no reason given")
                ));
            }
            _ => {}
        }
    }
}
