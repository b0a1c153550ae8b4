//! The command line as a user types it: a typo stops the tool before any AWS call, every
//! command explains itself with examples, numbers are checked against their ranges, a change
//! names its account first and can be tried with `--dry-run`, results come as JSON with
//! `--output json`, and the exit code tells the AWS CLI's classes of failure apart.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use aws_sdk_sqs::Client;
use local_esm::sdk_config;
use local_esm::setup::{self, QueueSettings};
use process_orders::testkit::dynamo::moto_endpoint;

fn ops(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orders-ops"))
        .args(args)
        // No AWS configuration to fall back on: a call would fail, not reach an account.
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn orders-ops");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write");
    child.wait_with_output().expect("wait")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn an_unknown_flag_is_an_error_and_nothing_is_called() {
    for args in [
        &[
            "depth",
            "--queue",
            "orders",
            "--endpiont",
            "http://127.0.0.1:9",
        ][..],
        &["redrive", "--queue", "orders", "--yes", "--manuel"],
        &["inspect", "--queue", "orders", "extra"],
        &["depht", "--queue", "orders"],
    ] {
        let output = ops(args, "");
        assert_eq!(
            output.status.code(),
            Some(252),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("error: unrecognized subcommand")
                || stderr(&output).contains("error: unexpected argument"),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?} printed a result");
    }
    // A near miss gets a suggestion.
    let output = ops(&["depth", "--queue", "q", "--endpiont", "x"], "");
    assert!(
        stderr(&output).contains("--endpoint"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn every_command_has_help_with_examples() {
    let top = ops(&["--help"], "");
    assert!(top.status.success());
    let text = String::from_utf8_lossy(&top.stdout);
    for command in ["depth", "inspect", "redrive", "clear-decline", "send"] {
        assert!(text.contains(command), "{command} missing in:\n{text}");
        let help = ops(&[command, "--help"], "");
        assert!(help.status.success(), "{command}");
        let text = String::from_utf8_lossy(&help.stdout);
        // Each command names what it acts on: a queue, or the idempotency table.
        let subject = if command == "clear-decline" {
            "--table"
        } else {
            "--queue"
        };
        for needle in ["Examples:", subject, "--endpoint", "--region", "--profile"] {
            assert!(
                text.contains(needle),
                "{command} --help lacks {needle}:\n{text}"
            );
        }
    }
}

#[test]
fn numbers_are_checked_against_their_ranges() {
    for (args, bad) in [
        (&["redrive", "--queue", "q", "--rate", "0"][..], "0"),
        (&["redrive", "--queue", "q", "--rate", "501"], "501"),
        (
            &["redrive", "--queue", "q", "--rate", "99999999999"],
            "99999999999",
        ),
        (&["redrive", "--queue", "q", "--rate", "ten"], "ten"),
        (&["inspect", "--queue", "q", "--max", "-1"], "-1"),
        (&["inspect", "--queue", "q", "--max", "1001"], "1001"),
    ] {
        let output = ops(args, "");
        assert_eq!(output.status.code(), Some(252), "{args:?}");
        assert!(
            stderr(&output).contains(&format!("'{bad}'")),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    // The --x=y form works too.
    let output = ops(&["redrive", "--queue=q", "--rate=0"], "");
    assert_eq!(output.status.code(), Some(252));
}

/// A move task moves every message and cannot filter: `--move-task` with `--reason` is refused
/// as a wrong command line, saying why, before any AWS call (nothing is configured here: a call
/// would fail with 253). So are an empty reason and `--move-task` with `--manual`.
#[test]
fn a_move_task_takes_no_reason() {
    for args in [
        &[
            "redrive",
            "--queue",
            "orders",
            "--move-task",
            "--reason",
            "conflict",
        ][..],
        &[
            "redrive",
            "--queue",
            "orders",
            "--reason=payment_rejected",
            "--move-task",
            "--yes",
        ],
    ] {
        let output = ops(args, "");
        assert_eq!(
            output.status.code(),
            Some(252),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("--move-task cannot be used with --reason")
                && stderr(&output).contains("cannot filter"),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(output.stdout.is_empty(), "{args:?} printed a result");
    }
    for args in [
        &["redrive", "--queue", "orders", "--reason", ""][..],
        &["redrive", "--queue", "orders", "--reason", "conflict,"],
        &["redrive", "--queue", "orders", "--move-task", "--manual"],
    ] {
        let output = ops(args, "");
        assert_eq!(
            output.status.code(),
            Some(252),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

/// A fresh standard queue and its DLQ on moto, named from `prefix`: the endpoint, a client, the
/// pair.
async fn queue_pair_on_moto(prefix: &str) -> (String, Client, setup::QueuePair) {
    let endpoint = moto_endpoint();
    let sqs = Client::new(&sdk_config(&endpoint));
    let name = format!("{prefix}-{}-{}", std::process::id(), fastrand::u32(..));
    let queue = setup::queue_pair(
        &sqs,
        &name,
        false,
        QueueSettings {
            visibility_timeout_s: 30,
            max_receive_count: 3,
        },
    )
    .await
    .expect("queues");
    (endpoint, sqs, queue)
}

/// Before `yes` is asked, the redrive names the account and region (from the queue's ARN) and
/// the endpoint; without a yes nothing moves.
#[tokio::test]
async fn a_redrive_names_the_account_and_endpoint_before_it_asks() {
    let (endpoint, _, queue) = queue_pair_on_moto("cli").await;
    let output = ops(
        &["redrive", "--queue", &queue.name, "--endpoint", &endpoint],
        "no\n",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let account = queue.dlq_url.split('/').nth(3).expect("account in the URL");
    assert!(
        stdout.contains(&format!(
            "account {account}, region us-east-1, endpoint {endpoint}"
        )),
        "{stdout}"
    );
    let asked = stdout.find("Type yes").expect("asked");
    assert!(stdout.find("account").expect("named") < asked, "{stdout}");
    assert_eq!(output.status.code(), Some(1), "not done");
    assert!(stderr(&output).contains("not confirmed; nothing moved"));
}

/// The exit code says which class of failure it was, as the AWS CLI's: 252 the command line,
/// 253 a configuration that cannot make a request (no region), 254 the service's error (no such
/// queue), 1 not done (not confirmed), 0 help.
#[tokio::test]
async fn exit_codes_follow_the_aws_clis_classes() {
    let endpoint = moto_endpoint();
    assert_eq!(ops(&["--help"], "").status.code(), Some(0));
    assert_eq!(
        ops(&["depth", "--queue", "q", "--bogus"], "").status.code(),
        Some(252)
    );
    // Nothing configured at all: no region to make a request in.
    let unconfigured = ops(&["depth", "--queue", "orders"], "");
    assert_eq!(
        unconfigured.status.code(),
        Some(253),
        "{}",
        stderr(&unconfigured)
    );
    let missing = ops(
        &[
            "depth",
            "--queue",
            "no-such-queue-at-all",
            "--endpoint-url",
            &endpoint,
        ],
        "",
    );
    assert_eq!(missing.status.code(), Some(254), "{}", stderr(&missing));
}

/// `--dry-run` says where and, by reason, what would move, and changes nothing; with `--output
/// json` the result is one JSON object on stdout and the checklist goes to stderr. A move task's
/// dry run warns that it cannot filter or stamp, and counts the conflict as moving too.
#[tokio::test]
async fn a_dry_run_redrive_names_the_account_and_moves_nothing() {
    let (endpoint, sqs, queue) = queue_pair_on_moto("cli-dry").await;
    for i in 0..3 {
        sqs.send_message()
            .queue_url(&queue.dlq_url)
            .message_body(format!("poison {i}"))
            .send()
            .await
            .expect("send");
    }
    let conflict = sqs_batch::dead_letter::Failure {
        reason: "conflict".into(),
        ..Default::default()
    };
    sqs.send_message()
        .queue_url(&queue.dlq_url)
        .message_body(r#"{"order_id": "o-1", "amount": 7}"#)
        .message_attributes(
            sqs_batch::dead_letter::FAILURE_ATTRIBUTE,
            aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(serde_json::to_string(&conflict).expect("JSON"))
                .build()
                .expect("attribute"),
        )
        .send()
        .await
        .expect("send");
    let account = queue.dlq_url.split('/').nth(3).expect("account in the URL");
    let dry_run = |extra: &[&str]| {
        let mut args = vec![
            "redrive",
            "--queue",
            &queue.name,
            "--endpoint-url",
            &endpoint,
            "--dry-run",
            "--output",
            "json",
        ];
        args.extend_from_slice(extra);
        let output = ops(&args, "");
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let result: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
        (result, stderr(&output))
    };
    let (result, said) = dry_run(&[]);
    assert_eq!(result["dry_run"], true);
    assert_eq!(result["messages"], 4);
    assert_eq!(result["read"], 4, "{result}");
    assert_eq!(
        result["would_move"],
        serde_json::json!({ "redrive_policy": 3 }),
        "{result}"
    );
    assert_eq!(result["would_stamp"], 3, "{result}");
    assert_eq!(result["would_skip"], serde_json::json!({ "conflict": 1 }));
    assert!(said.contains(&format!("account {account}")), "{said}");
    assert!(said.contains("producer's team"), "{said}");
    assert!(!said.contains("Warning"), "{said}");
    // `--manual`, the old name of the default, is still taken.
    let (manual, _) = dry_run(&["--manual"]);
    assert_eq!(manual["would_move"], result["would_move"]);
    let (task, said) = dry_run(&["--move-task"]);
    assert_eq!(
        task["would_move"],
        serde_json::json!({ "conflict": 1, "redrive_policy": 3 }),
        "{task}"
    );
    assert_eq!(
        (&task["would_stamp"], &task["would_lose_age"]),
        (&0.into(), &3.into())
    );
    assert!(
        said.contains("Warning: SQS's move task") && said.contains("new MessageId"),
        "{said}"
    );
    let depth = sqs
        .get_queue_attributes()
        .queue_url(&queue.dlq_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("depth");
    assert_eq!(
        depth
            .attributes()
            .and_then(
                |a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            )
            .map(String::as_str),
        Some("4"),
        "a dry run moved messages"
    );
}

/// A decline recorded in the idempotency table is cleared only after the tool has named the
/// table and endpoint and a person typed yes; then the order's next claim is fresh. An order
/// without a recorded decline is left alone, with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_decline_asks_first_and_then_lets_the_order_be_charged() {
    use idempotency::guard::EffectStore;
    use idempotency::testkit::{RETENTION, claim, t0};
    use idempotency::{DynamoDbStore, IdempotencyStore, store::Begin};
    let endpoint = moto_endpoint();
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config(&endpoint));
    let table = format!("clear-decline-{}", std::process::id());
    idempotency::dynamodb::create_table(&dynamodb, &table)
        .await
        .expect("table");
    // Keyed as the function keys orders by default.
    let store = DynamoDbStore::new(dynamodb, &table, RETENTION)
        .with_key_prefix(process_orders::config::ORDER_KEY_PREFIX);
    let Ok(Begin::Started { lease, .. }) = store.begin(&claim("o-1", t0())).await else {
        panic!("claimed");
    };
    store
        .reject(
            "o-1",
            &lease,
            t0(),
            "payment declined (HTTP 402): card declined",
        )
        .await
        .expect("rejected");
    let args = [
        "clear-decline",
        "--table",
        &table,
        "--order-id",
        "o-1",
        "--endpoint",
        &endpoint,
    ];
    // A dry run names the account (from the table's ARN) and changes nothing.
    let dry = tokio::task::spawn_blocking({
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        args.push("--dry-run".into());
        move || ops(&args.iter().map(String::as_str).collect::<Vec<_>>(), "")
    })
    .await
    .expect("run");
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(stdout.contains("account 123456789012"), "{stdout}");
    assert_eq!(
        store.begin(&claim("o-1", t0() + 1)).await.expect("begin"),
        Begin::Rejected,
        "a dry run cleared the decline"
    );

    let refused = tokio::task::spawn_blocking({
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        move || ops(&args.iter().map(String::as_str).collect::<Vec<_>>(), "no\n")
    })
    .await
    .expect("run");
    assert!(!refused.status.success());
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(
        stdout.contains(&table) && stdout.contains(&endpoint),
        "{stdout}"
    );
    assert!(
        stderr(&refused).contains("not confirmed"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        store.begin(&claim("o-1", t0() + 1)).await.expect("begin"),
        Begin::Rejected
    );

    let cleared = tokio::task::spawn_blocking({
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        move || {
            ops(
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
                "yes\n",
            )
        }
    })
    .await
    .expect("run");
    let stdout = String::from_utf8_lossy(&cleared.stdout);
    assert!(cleared.status.success(), "{stdout} {}", stderr(&cleared));
    assert!(stdout.contains("card declined"), "{stdout}");
    assert!(matches!(
        store.begin(&claim("o-1", t0() + 2)).await.expect("begin"),
        Begin::Started { prior: None, .. }
    ));

    let nothing = tokio::task::spawn_blocking({
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        move || {
            ops(
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
                "yes\n",
            )
        }
    })
    .await
    .expect("run");
    assert!(!nothing.status.success());
    assert!(
        stderr(&nothing).contains("no recorded decline"),
        "{}",
        stderr(&nothing)
    );
}

/// The AWS CLI's `--endpoint-url` works as typed, and with an endpoint `--region` is the region
/// asked for, not silently replaced: a queue made in eu-west-1 is found there, and only there.
#[tokio::test]
async fn endpoint_url_is_accepted_and_the_region_is_honoured() {
    let endpoint = moto_endpoint();
    let mut config = sdk_config(&endpoint).into_builder();
    config.set_region(Some(aws_sdk_sqs::config::Region::new("eu-west-1")));
    let sqs = Client::new(&config.build());
    let name = format!("cli-region-{}-{}", std::process::id(), fastrand::u32(..));
    setup::queue_pair(
        &sqs,
        &name,
        false,
        QueueSettings {
            visibility_timeout_s: 30,
            max_receive_count: 3,
        },
    )
    .await
    .expect("queues in eu-west-1");
    // `depth` of the queue at the endpoint, in `region`.
    let depth_in = |region: &str| {
        ops(
            &[
                "depth",
                "--queue",
                &name,
                "--endpoint-url",
                &endpoint,
                "--region",
                region,
                "--json",
            ],
            "",
        )
    };
    let there = depth_in("eu-west-1");
    assert!(there.status.success(), "{}", stderr(&there));
    let elsewhere = depth_in("us-east-1");
    assert!(
        !elsewhere.status.success(),
        "found in us-east-1: the region was not honoured"
    );
}
