//! On-call tool for the order queues (see docs/operations.md): `orders-ops --help`, and
//! `orders-ops <command> --help` for each command with examples.
//!
//! `--queue` names the source queue; `inspect` and `redrive` work on its DLQ (from the redrive
//! policy). Without `--endpoint-url` the AWS SDK's configuration applies (`--profile`, SSO and
//! `credential_process` profiles included, `--region`, or the environment).
//!
//! As the AWS CLI: `--output json|text`, and exit codes by class: 0 done, 1 not done (not
//! confirmed, nothing to change), 130 interrupted (Ctrl-C), 252 the command line is wrong, 253
//! the configuration cannot make a request (no region, no credentials), 254 the service answered
//! with an error, 255 anything else. Every command that changes something names the account
//! first and takes `--dry-run`.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use aws_sdk_sqs::Client;
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use orders_ops::{self as ops, Queue};
use sqs_admin::{FailureClass, ToolError, progress_bar, sdk_config};

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
    /// `text` (tables and sentences) or `json` (one JSON object a line on stdout; what is said
    /// to a person goes to stderr).
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    Text,
    Json,
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
    /// Moves the DLQ's messages back to the source queue by reason, after a confirmation:
    /// every reason but `conflict` unless --reason names some. Messages SQS's redrive moved go
    /// back stamped, so the function still knows they were tried before.
    #[command(after_help = "Examples:
  orders-ops redrive --queue orders                 (every reason but conflict, 10 a second)
  orders-ops redrive --queue orders --dry-run       (what would move, by reason)
  orders-ops redrive --queue orders --reason payment_rejected,retries_exhausted --rate 2 --yes
  orders-ops redrive --queue orders --reason redrive_policy   (only SQS's own moves)
  orders-ops redrive --queue orders.fifo --move-task   (SQS's move task: everything, unstamped)

Reasons: the function's reason codes (invalid_body, payment_rejected, conflict, ...; see
`orders-ops inspect`), redrive_policy for a message SQS's redrive moved (no dead-letter-failure
attribute), unreadable for one whose attribute cannot be read.")]
    Redrive {
        #[command(flatten)]
        queue: QueueArg,
        /// Only messages with this reason (repeat it, or separate reasons with commas). Without
        /// it, every reason but conflict: a conflict goes back only when named.
        #[arg(long = "reason", value_name = "REASON", value_delimiter = ',',
              value_parser = clap::builder::NonEmptyStringValueParser::new())]
        reasons: Vec<String>,
        /// SQS's own message move task instead: moves every message, cannot filter by reason,
        /// and gives the messages SQS's redrive moved a new id and send time, so they lose their
        /// age. Not with --reason.
        #[arg(long, conflicts_with = "manual")]
        move_task: bool,
        /// The default (receive, send and delete by hand); the name older runbooks use.
        #[arg(long, hide = true)]
        manual: bool,
        /// Messages a second (SQS's move task takes at most 500).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..=500))]
        rate: u16,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
        /// Read every message and say, by reason, what would move; move nothing.
        #[arg(long)]
        dry_run: bool,
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
        /// Say what would change (and whether the order has a recorded decline), change nothing.
        #[arg(long)]
        dry_run: bool,
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
        /// Say what would be sent, and send nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Why a command did not succeed, in the AWS CLI's exit-code classes.
#[derive(Debug)]
enum Failure {
    /// It ran and changed nothing: not confirmed, or nothing to change.
    NotDone(String),
    /// Ctrl-C.
    Interrupted(String),
    /// This configuration cannot make a request (no region, no credentials).
    Configuration(String),
    /// The service answered with an error.
    Service(String),
    /// Anything else.
    Other(String),
}

impl Failure {
    /// The exit code, as the AWS CLI v2 uses them.
    fn code(&self) -> u8 {
        match self {
            Self::NotDone(_) => 1,
            Self::Interrupted(_) => 130,
            Self::Configuration(_) => 253,
            Self::Service(_) => 254,
            Self::Other(_) => 255,
        }
    }

    fn message(&self) -> &str {
        match self {
            Self::NotDone(m)
            | Self::Interrupted(m)
            | Self::Configuration(m)
            | Self::Service(m)
            | Self::Other(m) => m,
        }
    }
}

impl From<ToolError> for Failure {
    fn from(error: ToolError) -> Self {
        let text = lambda_kit::error_chain(&error);
        match error.class() {
            FailureClass::Service => Self::Service(text),
            FailureClass::Configuration => Self::Configuration(text),
            FailureClass::Other => Self::Other(text),
        }
    }
}

impl Cli {
    /// What clap's attributes cannot say: why a move task takes no reason. Refused before any
    /// AWS call, as a wrong command line (252).
    fn checked(self) -> Result<Self, clap::Error> {
        if let Command::Redrive {
            move_task: true,
            reasons,
            ..
        } = &self.command
            && !reasons.is_empty()
        {
            return Err(Self::command().error(
                clap::error::ErrorKind::ArgumentConflict,
                "--move-task cannot be used with --reason: SQS's message move task moves every \
                 message of the DLQ and cannot filter them. Drop --move-task to redrive by reason \
                 (the default receives, filters, stamps and sends back).",
            ));
        }
        Ok(self)
    }
}

/// The exit code for a command line clap refused (252), or 0 for `--help` and `--version`.
fn usage_code(error: &clap::Error) -> u8 {
    match error.kind() {
        clap::error::ErrorKind::DisplayHelp
        | clap::error::ErrorKind::DisplayVersion
        | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 0,
        _ => 252,
    }
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
    let cli = match Cli::try_parse().and_then(Cli::checked) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(usage_code(&error));
        }
    };
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("orders-ops: {}", e.message());
            ExitCode::from(e.code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let target = &cli.target;
    let json = cli.target.output == OutputFormat::Json;
    // What is said to a person: stdout for text, stderr when stdout carries JSON.
    let say = |text: &str| {
        if json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
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
    if sdk.region().is_none() {
        return Err(Failure::Configuration(
            "no region: give --region, set AWS_REGION, or use a profile that names one".into(),
        ));
    }
    let sqs = Client::new(&sdk);
    // Where a change lands, said before it is made: the account (from the resource's ARN), the
    // region, the endpoint and the profile.
    let place = |arn: &str| {
        format!(
            "account {}, region {}, endpoint {}{}",
            ops::arn_part(arn, 4).unwrap_or("unknown"),
            ops::arn_part(arn, 3).unwrap_or("unknown"),
            sdk.endpoint_url()
                .unwrap_or("the AWS SDK's default for the region"),
            cli.target
                .profile
                .as_deref()
                .map(|p| format!(", profile {p}"))
                .unwrap_or_default()
        )
    };
    match cli.command {
        Command::Depth {
            queue,
            json: json_flag,
        } => {
            let source = ops::resolve(&sqs, &queue.queue).await?;
            depth(&sqs, &source, json || json_flag).await
        }
        Command::Inspect {
            queue,
            max,
            json: json_flag,
        } => {
            let source = ops::resolve(&sqs, &queue.queue).await?;
            inspect(&sqs, &source, usize::from(max), json || json_flag).await
        }
        Command::Redrive {
            queue,
            reasons,
            move_task,
            manual: _,
            rate,
            yes,
            dry_run,
        } => {
            let source = ops::resolve(&sqs, &queue.queue).await?;
            let dlq = ops::dead_letter_queue(&sqs, &source).await?;
            say(ops::REDRIVE_CHECKLIST);
            if move_task {
                say(ops::MOVE_TASK_WARNING);
            }
            let waiting = ops::depth(&sqs, &dlq.url).await?;
            let selection = if move_task {
                ops::Selection::Everything
            } else {
                ops::Selection::named(&reasons)
            };
            say(&format!(
                "Move {} of the {} message(s) of {} back to {} at {rate}/s ({}).",
                match &selection {
                    ops::Selection::Default => "every reason but conflict".to_owned(),
                    ops::Selection::Only(named) => format!(
                        "the reason(s) {}",
                        named.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                    ops::Selection::Everything => "all (a move task)".to_owned(),
                },
                waiting.visible,
                dlq.name(),
                source.name(),
                place(&source.arn)
            ));
            let plan = ops::Plan {
                selection,
                rate: u32::from(rate),
                dry_run,
            };
            if dry_run {
                // Read, counted by reason, made visible again: the same loop, sending nothing.
                let bar = progress_bar(waiting.visible, "read");
                let seen = ops::redrive_manual(&sqs, &dlq, &source, &plan, |m| {
                    bar.set_position(m.read.values().sum::<usize>() as u64);
                })
                .await?;
                bar.finish_and_clear();
                let read: usize = seen.read.values().sum();
                // SQS's own moves: stamped by the default redrive, unstamped by a move task.
                let (stamped, aged) = if move_task {
                    (0, seen.stamped)
                } else {
                    (seen.stamped, 0)
                };
                say(&format!(
                    "Dry run: read {read} message(s); nothing moved.\nwould move: {} ({}; {} not \
                     fitting the source queue)\nwould stay in the DLQ: {}",
                    by_reason(&seen.moved_by_reason),
                    if move_task {
                        format!("{aged} of SQS's own moves, which a move task cannot stamp")
                    } else {
                        format!("{stamped} of SQS's own moves to be stamped")
                    },
                    seen.failed,
                    by_reason(&seen.skipped)
                ));
                warn_unmatched(&plan.selection, &seen, say);
                if seen
                    .skipped
                    .keys()
                    .any(|r| ops::KEPT_BY_DEFAULT.contains(&r.as_str()))
                {
                    say(CONFLICT_NOTE);
                }
                if json {
                    println!(
                        "{}",
                        serde_json::json!({ "dry_run": true, "dlq": dlq.name(),
                            "queue": source.name(), "messages": waiting.visible, "read": read,
                            "would_move": seen.moved_by_reason, "would_stamp": stamped,
                            "would_lose_age": aged,
                            "would_skip": seen.skipped, "unfit": seen.failed })
                    );
                }
                return Ok(());
            }
            if !yes && !confirm(json)? {
                return Err(Failure::NotDone("not confirmed; nothing moved".into()));
            }
            if move_task {
                return run_move_task(&sqs, &dlq, &source, i32::from(rate), json).await;
            }
            let bar = progress_bar(waiting.visible, "moved");
            let moved = ops::redrive_manual(&sqs, &dlq, &source, &plan, |m| {
                bar.set_position(m.moved as u64);
            })
            .await?;
            bar.finish_and_clear();
            say(&format!(
                "moved {} message(s): {} ({} of SQS's own moves stamped, {} of them with an \
                 attribute or the detail left out); {} refused by the source queue or not \
                 fitting it\nleft in the DLQ by reason: {}",
                moved.moved,
                by_reason(&moved.moved_by_reason),
                moved.stamped,
                moved.trimmed,
                moved.failed,
                by_reason(&moved.skipped)
            ));
            warn_unmatched(&plan.selection, &moved, say);
            if moved
                .skipped
                .keys()
                .any(|r| ops::KEPT_BY_DEFAULT.contains(&r.as_str()))
            {
                say(CONFLICT_NOTE);
            }
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "moved": moved.moved, "refused": moved.failed,
                        "stamped": moved.stamped, "trimmed": moved.trimmed,
                        "moved_by_reason": moved.moved_by_reason, "skipped": moved.skipped })
                );
            }
            Ok(())
        }
        Command::ClearDecline {
            table,
            order_id,
            key_prefix,
            yes,
            dry_run,
        } => {
            let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
            // The table's ARN names the account the change lands in.
            let described = dynamodb
                .describe_table()
                .table_name(&table)
                .send()
                .await
                .map_err(|e| ToolError::aws(format!("describe table {table}"), e))?;
            let arn = described
                .table()
                .and_then(|t| t.table_arn())
                .unwrap_or_default()
                .to_owned();
            say(&format!(
                "Table {table} ({}): clear the recorded decline of order {order_id}, so its next \
                 delivery is charged.",
                place(&arn)
            ));
            if dry_run {
                say("Dry run: nothing changed.");
                if json {
                    println!(
                        "{}",
                        serde_json::json!({ "dry_run": true, "table": table, "order_id": order_id })
                    );
                }
                return Ok(());
            }
            if !yes && !confirm(json)? {
                return Err(Failure::NotDone("not confirmed; nothing changed".into()));
            }
            // Through the client the function writes with (`DYNAMODB_CLIENT`, direct unless sdk).
            let env = lambda_kit::Env::process();
            let which = process_orders::aws::DynamoDbClient::from_env(&env)
                .and_then(|which| {
                    process_orders::aws::SdkSettings::dynamodb_from_env(&env).map(|s| (which, s))
                })
                .map_err(|e| Failure::Configuration(e.to_string()))?;
            let store = process_orders::aws::dynamodb_store(
                &sdk,
                &which.1,
                which.0,
                &table,
                std::time::Duration::ZERO,
            )
            .map_err(|e| Failure::Configuration(lambda_kit::error_chain(&e)))?
            .with_key_prefix(key_prefix);
            match store.clear_rejected(&order_id).await {
                Ok(Some(reason)) => {
                    say(&format!(
                        "cleared the decline of {order_id} ({reason}); redrive or resend it"
                    ));
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({ "order_id": order_id, "cleared": true,
                                "reason": reason })
                        );
                    }
                    Ok(())
                }
                Ok(None) => Err(Failure::NotDone(format!(
                    "order {order_id} has no recorded decline (absent, charged, or in progress): \
                     nothing changed"
                ))),
                Err(idempotency::StoreError::Unavailable(source)) => Err(ToolError::Aws {
                    what: "clear the decline".into(),
                    source,
                }
                .into()),
                Err(e) => Err(Failure::Other(lambda_kit::error_chain(&e))),
            }
        }
        Command::Send {
            queue,
            file,
            group,
            bucket,
            threshold,
            dry_run,
        } => {
            let source = ops::resolve(&sqs, &queue.queue).await?;
            let body = std::fs::read_to_string(&file)
                .map_err(|e| Failure::Other(format!("{}: {e}", file.display())))?;
            say(&format!(
                "Send {} bytes to {} ({}).",
                body.len(),
                source.name(),
                place(&source.arn)
            ));
            if dry_run {
                say("Dry run: nothing sent.");
                if json {
                    println!(
                        "{}",
                        serde_json::json!({ "dry_run": true, "queue": source.name(),
                            "bytes": body.len() })
                    );
                }
                return Ok(());
            }
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
            let offloaded =
                ops::send_order(&sqs, &source, &body, group.as_deref(), offload).await?;
            say(&format!(
                "sent {} bytes to {}{}",
                body.len(),
                source.name(),
                if offloaded {
                    " through S3 (claim check)"
                } else {
                    ""
                }
            ));
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "queue": source.name(), "bytes": body.len(),
                        "claim_check": offloaded })
                );
            }
            Ok(())
        }
    }
}

/// Said when conflicts stay behind: where they go instead.
const CONFLICT_NOTE: &str = "conflict copies (another payload under an order id already charged) \
can never succeed: they go to the producer's team. Name --reason conflict to send them back anyway.";

/// Counts by reason, for a person: `conflict 2, redrive_policy 1`, or `none`.
fn by_reason(counts: &std::collections::BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Names the reasons `--reason` gave that no message had: a typo moves nothing, and says so.
fn warn_unmatched(selection: &ops::Selection, seen: &ops::Moved, say: impl Fn(&str)) {
    let unmatched = selection.unmatched(&seen.read);
    if !unmatched.is_empty() {
        say(&format!(
            "No message read had the reason(s) {} (reasons read: {}).",
            unmatched.join(", "),
            by_reason(&seen.read)
        ));
    }
}

/// Asks for `yes` (on stderr when stdout carries JSON).
fn confirm(json: bool) -> Result<bool, Failure> {
    let prompt = "Type yes to go on: ";
    let shown = if json {
        eprint!("{prompt}");
        std::io::stderr().flush()
    } else {
        print!("{prompt}");
        std::io::stdout().flush()
    };
    shown.map_err(|e| Failure::Other(e.to_string()))?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| Failure::Other(e.to_string()))?;
    Ok(line.trim() == "yes")
}

async fn depth(sqs: &Client, source: &Queue, json: bool) -> Result<(), Failure> {
    let mut queues = vec![source.clone()];
    if source.dlq_arn.is_some() {
        queues.push(ops::dead_letter_queue(sqs, source).await?);
    }
    if !json {
        println!("| queue | visible | in flight | delayed |\n|---|---|---|---|");
    }
    for q in &queues {
        let d = ops::depth(sqs, &q.url).await?;
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

async fn inspect(sqs: &Client, source: &Queue, max: usize, json: bool) -> Result<(), Failure> {
    let dlq = ops::dead_letter_queue(sqs, source).await?;
    let peeked = ops::inspect(sqs, &dlq.url, max).await?;
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
async fn run_move_task(
    sqs: &Client,
    dlq: &Queue,
    source: &Queue,
    rate: i32,
    json: bool,
) -> Result<(), Failure> {
    let started = sqs
        .start_message_move_task()
        .source_arn(&dlq.arn)
        .destination_arn(&source.arn)
        .max_number_of_messages_per_second(rate)
        .send()
        .await
        .map_err(|e| {
            ToolError::aws(
                "start the message move task (a server without move tasks, such as moto, \
                 needs the default redrive, without --move-task)",
                e,
            )
        })?;
    let handle = started.task_handle().unwrap_or_default().to_owned();
    if json {
        eprintln!("move task started: {handle}");
    } else {
        println!("move task started: {handle}");
    }
    let bar = progress_bar(0, "moved");
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                bar.abandon();
                sqs.cancel_message_move_task().task_handle(&handle).send().await
                    .map_err(|e| ToolError::aws("cancel the move task", e))?;
                return Err(Failure::Interrupted(
                    "cancelled; messages already moved stay moved".into(),
                ));
            }
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
        let tasks = sqs
            .list_message_move_tasks()
            .source_arn(&dlq.arn)
            .max_results(1)
            .send()
            .await
            .map_err(|e| ToolError::aws("follow the move task", e))?;
        let Some(task) = tasks.results().first() else {
            continue;
        };
        let to_move = task.approximate_number_of_messages_to_move().unwrap_or(0);
        bar.set_length(u64::try_from(to_move).unwrap_or(0));
        bar.set_position(u64::try_from(task.approximate_number_of_messages_moved()).unwrap_or(0));
        match task.status() {
            Some("COMPLETED") => {
                bar.finish_and_clear();
                let moved = task.approximate_number_of_messages_moved();
                if json {
                    println!("{}", serde_json::json!({ "moved": moved, "of": to_move }));
                } else {
                    println!("COMPLETED: {moved} of {to_move} moved");
                }
                return Ok(());
            }
            Some("FAILED" | "CANCELLED") => {
                bar.abandon();
                return Err(Failure::Service(format!(
                    "move task ended: {}",
                    task.failure_reason().unwrap_or("no reason given")
                )));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(1_796_027_560_231), "2026-11-30 08:32:40Z");
    }
}
