//! On-call tool for the order queues (see docs/operations.md): `orders-ops --help`, and
//! `orders-ops <command> --help` for each command with examples.
//!
//! `--queue` names the source queue; `inspect` and `redrive` work on its DLQ (from the redrive
//! policy). Without `--endpoint-url` the AWS SDK's configuration applies (`--profile`, SSO and
//! `credential_process` profiles included, `--region`, or the environment).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use aws_sdk_sqs::Client;
use clap::{Args, Parser, Subcommand};
use orders_ops::{self as ops, Queue};
use sqs_admin::{ToolError, progress_bar, sdk_config};

/// On-call tool for the order queues: depth, DLQ inspection, redrive, and sending an order.
#[derive(Debug, Parser)]
#[command(name = "orders-ops", version, after_help = EXAMPLES)]
struct Cli {
    #[command(flatten)]
    target: Target,
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES: &str = "Examples:
  orders-ops depth --queue orders --profile prod --region eu-west-1
  orders-ops inspect --queue orders.fifo --max 20 --json
  orders-ops redrive --queue orders --rate 5
  orders-ops clear-decline --table orders-idempotency --order-id o-123
  orders-ops depth --queue orders --endpoint-url http://127.0.0.1:5000   (moto)";

/// Which account the commands touch. Every one of these is checked: a misspelled flag stops the
/// tool instead of falling back to the default profile.
#[derive(Debug, Args)]
struct Target {
    /// Another endpoint, as the AWS CLI's option of that name: a local SQS-compatible server
    /// (moto) gets static test credentials, unless `--profile` names real ones (a VPC endpoint).
    /// `--region` still applies. Without it, the AWS SDK's configuration: `--profile`,
    /// `--region`, or the environment.
    #[arg(
        long = "endpoint-url",
        visible_alias = "endpoint",
        global = true,
        value_name = "URL"
    )]
    endpoint: Option<String>,
    /// The AWS region (default: the profile's, or AWS_REGION).
    #[arg(long, global = true)]
    region: Option<String>,
    /// The AWS profile from ~/.aws/config (default: AWS_PROFILE, or `default`).
    #[arg(long, global = true)]
    profile: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Messages visible, in flight and delayed, in the queue and its DLQ.
    #[command(after_help = "Examples:
  orders-ops depth --queue orders
  orders-ops depth --queue https://sqs.eu-west-1.amazonaws.com/123456789012/orders --json")]
    Depth {
        #[command(flatten)]
        queue: QueueArg,
        /// One JSON object per queue on stdout instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Reads DLQ messages without consuming them (made visible again at once).
    #[command(after_help = "Examples:
  orders-ops inspect --queue orders
  orders-ops inspect --queue orders.fifo --max 200 --json")]
    Inspect {
        #[command(flatten)]
        queue: QueueArg,
        /// The most messages to read.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u16).range(1..=1000))]
        max: u16,
        /// One JSON object per message on stdout instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Moves the DLQ's messages back to the source queue, after a confirmation.
    #[command(after_help = "Examples:
  orders-ops redrive --queue orders                 (SQS's own move task, 10 a second)
  orders-ops redrive --queue orders --rate 2 --yes
  orders-ops redrive --queue orders.fifo --manual   (receive, send, delete: FIFO groups kept)")]
    Redrive {
        #[command(flatten)]
        queue: QueueArg,
        /// Receive, send and delete by hand instead of SQS's message move task (moto has none).
        #[arg(long)]
        manual: bool,
        /// Messages a second (SQS's move task takes at most 500).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=500))]
        rate: u16,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Lets a declined order be charged again: removes the decline its idempotency item records,
    /// after a confirmation. Only for a decline a person knows no longer holds (the card was
    /// updated); then redrive or resend the order.
    #[command(after_help = "Examples:
  orders-ops clear-decline --table orders-idempotency --order-id o-123
  orders-ops clear-decline --table orders-idempotency --order-id o-123 --key-prefix '' --yes")]
    ClearDecline {
        /// The idempotency table (the stack's IdempotencyTableName output).
        #[arg(long)]
        table: String,
        /// The declined order's id.
        #[arg(long)]
        order_id: String,
        /// IDEMPOTENCY_KEY_PREFIX as the function sets it (`''` for a table from before
        /// prefixes).
        #[arg(long, default_value = process_orders::config::ORDER_KEY_PREFIX)]
        key_prefix: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Sends one order body from a file to the queue.
    #[command(after_help = "Examples:
  orders-ops send --queue orders --file order.json
  orders-ops send --queue orders.fifo --file order.json --group customer-7
  orders-ops send --queue orders --file big.json --bucket payloads-bucket   (claim check)")]
    Send {
        #[command(flatten)]
        queue: QueueArg,
        /// The body to send.
        #[arg(long)]
        file: PathBuf,
        /// The message group (FIFO queues).
        #[arg(long)]
        group: Option<String>,
        /// Bodies above --threshold go to this S3 bucket, with a pointer in the message (needs
        /// the s3-claim-check feature).
        #[arg(long)]
        bucket: Option<String>,
        /// The largest body sent inline, in bytes.
        #[arg(long, default_value_t = ops::INLINE_LIMIT as u32,
              value_parser = clap::value_parser!(u32).range(1..=(ops::INLINE_LIMIT as i64)))]
        threshold: u32,
    },
}

#[derive(Debug, Args)]
struct QueueArg {
    /// The source queue: its name or URL.
    #[arg(long, value_name = "NAME|URL")]
    queue: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    sqs_admin::init_tool_logging();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("orders-ops: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    let target = &cli.target;
    let sdk = match (&target.endpoint, &target.profile) {
        // A local server: its endpoint and static test credentials, in the region asked for.
        (Some(endpoint), None) => {
            let mut local = sdk_config(endpoint).into_builder();
            if let Some(region) = &target.region {
                local.set_region(Some(aws_config::Region::new(region.clone())));
            }
            local.build()
        }
        // The profile, region and credentials chain of the user's AWS configuration (SSO and
        // credential_process profiles included), over the function's HTTP client (the build has
        // no other).
        (endpoint, profile) => {
            let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
                .http_client(process_orders::aws::http_client());
            if let Some(profile) = profile {
                loader = loader.profile_name(profile);
            }
            if let Some(region) = &target.region {
                loader = loader.region(aws_config::Region::new(region.clone()));
            }
            if let Some(endpoint) = endpoint {
                loader = loader.endpoint_url(endpoint);
            }
            loader.load().await
        }
    };
    let sqs = Client::new(&sdk);
    match cli.command {
        Command::Depth { queue, json } => {
            let source = ops::resolve(&sqs, &queue.queue).await.map_err(text)?;
            depth(&sqs, &source, json).await
        }
        Command::Inspect { queue, max, json } => {
            let source = ops::resolve(&sqs, &queue.queue).await.map_err(text)?;
            inspect(&sqs, &source, usize::from(max), json).await
        }
        Command::Redrive {
            queue,
            manual,
            rate,
            yes,
        } => {
            let source = ops::resolve(&sqs, &queue.queue).await.map_err(text)?;
            let dlq = ops::dead_letter_queue(&sqs, &source).await.map_err(text)?;
            println!("{}", ops::REDRIVE_CHECKLIST);
            // Say where before anything moves: the queue's ARN names its account and region.
            println!(
                "Account {} (region {}), endpoint {}{}.",
                ops::arn_part(&source.arn, 4).unwrap_or("unknown"),
                ops::arn_part(&source.arn, 3).unwrap_or("unknown"),
                sdk.endpoint_url()
                    .unwrap_or("the AWS SDK's default for the region"),
                cli.target
                    .profile
                    .as_deref()
                    .map(|p| format!(", profile {p}"))
                    .unwrap_or_default()
            );
            let waiting = ops::depth(&sqs, &dlq.url).await.map_err(text)?;
            println!(
                "Move the {} message(s) of {} back to {} at {rate}/s.",
                waiting.visible,
                dlq.name(),
                source.name()
            );
            if !yes && !confirm()? {
                return Err("not confirmed; nothing moved".into());
            }
            if manual {
                let bar = progress_bar(waiting.visible, "moved");
                let moved = ops::redrive_manual(&sqs, &dlq, &source, u32::from(rate), |m| {
                    bar.set_position(m.moved as u64);
                })
                .await
                .map_err(text)?;
                bar.finish_and_clear();
                println!(
                    "moved {} message(s); {} refused by the source queue",
                    moved.moved, moved.failed
                );
                Ok(())
            } else {
                move_task(&sqs, &dlq, &source, i32::from(rate)).await
            }
        }
        Command::ClearDecline {
            table,
            order_id,
            key_prefix,
            yes,
        } => {
            // Say where before anything changes: the table, the account's region, the endpoint.
            println!(
                "Table {table} (region {}), endpoint {}{}: clear the recorded decline of order \
                 {order_id}, so its next delivery is charged.",
                sdk.region().map_or("unknown", |r| r.as_ref()),
                sdk.endpoint_url()
                    .unwrap_or("the AWS SDK's default for the region"),
                cli.target
                    .profile
                    .as_deref()
                    .map(|p| format!(", profile {p}"))
                    .unwrap_or_default()
            );
            if !yes && !confirm()? {
                return Err("not confirmed; nothing changed".into());
            }
            let store = idempotency::DynamoDbStore::new(
                aws_sdk_dynamodb::Client::new(&sdk),
                table,
                std::time::Duration::ZERO,
            )
            .with_key_prefix(key_prefix);
            match store.clear_rejected(&order_id).await {
                Ok(Some(reason)) => {
                    println!("cleared the decline of {order_id} ({reason}); redrive or resend it");
                    Ok(())
                }
                Ok(None) => Err(format!(
                    "order {order_id} has no recorded decline (absent, charged, or in progress): \
                     nothing changed"
                )),
                Err(e) => Err(lambda_kit::error_chain(&e)),
            }
        }
        Command::Send {
            queue,
            file,
            group,
            bucket,
            threshold,
        } => {
            let source = ops::resolve(&sqs, &queue.queue).await.map_err(text)?;
            let body =
                std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            #[cfg(feature = "s3-claim-check")]
            let s3 = aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(&sdk)
                    .force_path_style(cli.target.endpoint.is_some())
                    .build(),
            );
            let offload = bucket.as_deref().map(|bucket| ops::Offload {
                #[cfg(feature = "s3-claim-check")]
                s3: &s3,
                bucket,
                threshold: threshold as usize,
            });
            let offloaded = ops::send_order(&sqs, &source, &body, group.as_deref(), offload)
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
    }
}

fn text(e: ToolError) -> String {
    lambda_kit::error_chain(&e)
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

async fn depth(sqs: &Client, source: &Queue, json: bool) -> Result<(), String> {
    let mut queues = vec![source.clone()];
    if source.dlq_arn.is_some() {
        queues.push(ops::dead_letter_queue(sqs, source).await.map_err(text)?);
    }
    if !json {
        println!("| queue | visible | in flight | delayed |\n|---|---|---|---|");
    }
    for q in &queues {
        let d = ops::depth(sqs, &q.url).await.map_err(text)?;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "queue": q.name(), "url": q.url, "visible": d.visible,
                    "in_flight": d.in_flight, "delayed": d.delayed,
                })
            );
        } else {
            println!(
                "| {} | {} | {} | {} |",
                q.name(),
                d.visible,
                d.in_flight,
                d.delayed
            );
        }
    }
    if !json {
        // SQS's API has no age of the oldest message; CloudWatch has it as a metric.
        println!(
            "oldest message age: CloudWatch metric ApproximateAgeOfOldestMessage (not in the SQS API)"
        );
    }
    Ok(())
}

/// An epoch-ms time as UTC, to the second (`2026-11-30 08:32:40Z`).
fn utc(ms: u64) -> String {
    let time = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(time)
        .to_string()
        .replacen('T', " ", 1)
}

async fn inspect(sqs: &Client, source: &Queue, max: usize, json: bool) -> Result<(), String> {
    let dlq = ops::dead_letter_queue(sqs, source).await.map_err(text)?;
    let peeked = ops::inspect(sqs, &dlq.url, max).await.map_err(text)?;
    if json {
        for p in peeked {
            println!(
                "{}",
                serde_json::json!({
                    "message_id": p.message_id, "receive_count": p.receive_count,
                    "first_received_ms": p.first_receive_ms,
                    "first_received": p.first_receive_ms.map(utc),
                    "sent_ms": p.sent_ms, "sent": p.sent_ms.map(utc),
                    "body_bytes": p.body_len, "group_id": p.group_id, "order_id": p.order_id,
                    "reason": p.failure.as_ref().map(|f| f.reason.as_str()),
                    "detail": p.failure.as_ref().and_then(|f| f.detail.as_deref()),
                    "moved_ms": p.failure.as_ref().map(|f| f.last_failure_ms),
                    "moved": p.failure.as_ref().map(|f| utc(f.last_failure_ms)),
                    "moved_by": p.failure.as_ref().map(|f| f.moved_by.as_str()),
                })
            );
        }
        return Ok(());
    }
    println!(
        "{} message(s) in {} (made visible again):",
        peeked.len(),
        dlq.name()
    );
    println!(
        "| message id | receives | first received (UTC) | sent (UTC) | body bytes | group | order id | reason | moved (UTC) |\n|---|---|---|---|---|---|---|---|---|"
    );
    let show = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for p in peeked {
        // A message SQS's redrive moved has no reason: it kept failing past the retry schedule.
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.message_id,
            show(p.receive_count.map(|n| n.to_string())),
            show(p.first_receive_ms.map(utc)),
            show(p.sent_ms.map(utc)),
            p.body_len,
            show(p.group_id),
            show(p.order_id),
            show(p.failure.as_ref().map(|f| f.reason.clone())),
            show(p.failure.as_ref().map(|f| utc(f.last_failure_ms)))
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
    let bar = progress_bar(0, "moved");
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                bar.abandon();
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
        let to_move = task.approximate_number_of_messages_to_move().unwrap_or(0);
        bar.set_length(u64::try_from(to_move).unwrap_or(0));
        bar.set_position(u64::try_from(task.approximate_number_of_messages_moved()).unwrap_or(0));
        match task.status() {
            Some("COMPLETED") => {
                bar.finish_and_clear();
                println!(
                    "COMPLETED: {} of {to_move} moved",
                    task.approximate_number_of_messages_moved()
                );
                return Ok(());
            }
            Some("FAILED" | "CANCELLED") => {
                bar.abandon();
                return Err(format!(
                    "move task ended: {}",
                    task.failure_reason().unwrap_or("no reason given")
                ));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(1_796_027_560_231), "2026-11-30 08:32:40Z");
    }
}
