//! The ops command against moto's SQS: `depth`, `inspect` and `redrive` (by reason, stamping
//! SQS's own moves), including a redrive killed mid-way (nothing lost, at worst duplicated).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{Message, MessageAttributeValue, MessageSystemAttributeName};
use local_esm::sdk_config;
use local_esm::setup::{self, QueuePair, QueueSettings};
use orders_ops as ops;
use process_orders::testkit::dynamo::moto_endpoint;
use sqs_batch::dead_letter::{FAILURE_ATTRIBUTE, Failure, earlier_attempt_ms};
use sqs_batch::{edge::Batch, edge::SqsEvent};

async fn pair(name: &str, fifo: bool) -> (Client, QueuePair, String) {
    let endpoint = moto_endpoint();
    let sqs = Client::new(&sdk_config(&endpoint));
    let settings = QueueSettings {
        visibility_timeout_s: 30,
        max_receive_count: 3,
    };
    let name = format!("{name}-{}-{}", std::process::id(), fastrand::u32(..));
    let queue = setup::queue_pair(&sqs, &name, fifo, settings)
        .await
        .expect("queues");
    (sqs, queue, endpoint)
}

/// Puts `n` order bodies straight into the DLQ (FIFO: groups g0..g2), returning the bodies.
async fn fill_dlq(sqs: &Client, queue: &QueuePair, n: usize) -> Vec<String> {
    let mut bodies = Vec::new();
    for i in 0..n {
        let body = format!(r#"{{"order_id": "o-{i}", "amount": 5}}"#);
        let mut send = sqs
            .send_message()
            .queue_url(&queue.dlq_url)
            .message_body(&body);
        if queue.fifo {
            send = send
                .message_group_id(format!("g{}", i % 3))
                .message_deduplication_id(format!("d-{i}"));
        }
        send.send().await.expect("send to the DLQ");
        bodies.push(body);
    }
    bodies
}

/// Receives and deletes everything in `url`, with every attribute.
async fn drain_messages(sqs: &Client, url: &str) -> Vec<Message> {
    let mut out = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .expect("receive");
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
            out.push(m);
        }
    }
}

/// Receives and deletes everything in `url`; returns the bodies with their group ids.
async fn drain(sqs: &Client, url: &str) -> Vec<(String, Option<String>)> {
    drain_messages(sqs, url)
        .await
        .into_iter()
        .map(|m| {
            let group = m
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            (m.body().unwrap_or_default().to_owned(), group)
        })
        .collect()
}

/// A redrive of `selection` as fast as the tests go.
fn plan(selection: ops::Selection) -> ops::Plan {
    ops::Plan {
        selection,
        rate: 1_000,
        dry_run: false,
    }
}

/// An order body for `order_id`.
fn order(order_id: &str) -> String {
    format!(r#"{{"order_id": "{order_id}", "amount": 5}}"#)
}

/// A string attribute.
fn text_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .expect("attribute")
}

/// Puts `body` in the DLQ as the function moves a message for `reason` (FIFO: in `group`);
/// returns its failure attribute's text.
async fn moved_by_function(
    sqs: &Client,
    queue: &QueuePair,
    body: &str,
    reason: &str,
    group: &str,
) -> String {
    let failure = Failure {
        reason: reason.into(),
        source_queue_arn: queue.arn.clone(),
        receive_count: Some(1),
        first_failure_ms: Some(1_767_225_600_000),
        last_failure_ms: 1_767_225_600_500,
        moved_by: "process-orders:3".into(),
        ..Default::default()
    };
    let text = serde_json::to_string(&failure).expect("JSON");
    send_to_dlq(sqs, queue, body, &text, group).await;
    text
}

/// Puts `body` in the DLQ with `failure` as its failure attribute, whatever it says.
async fn send_to_dlq(sqs: &Client, queue: &QueuePair, body: &str, failure: &str, group: &str) {
    let mut send = sqs
        .send_message()
        .queue_url(&queue.dlq_url)
        .message_body(body)
        .message_attributes(FAILURE_ATTRIBUTE, text_attribute(failure));
    if queue.fifo {
        send = send
            .message_group_id(group)
            .message_deduplication_id(uuid::Uuid::new_v4().to_string());
    }
    send.send().await.expect("send to the DLQ");
}

/// Sends each body to the source queue with as many attributes of its own (`a0`..; the last the
/// largest), then receives them past the queue's `maxReceiveCount` (3) without deleting them:
/// moto's redrive then moves them to the DLQ as SQS's does, keeping their send time, receive
/// count and attributes, and adding no failure attribute.
async fn moved_by_sqs(sqs: &Client, queue: &QueuePair, bodies: &[(&str, usize)]) {
    for (body, attributes) in bodies {
        let mut send = sqs.send_message().queue_url(&queue.url).message_body(*body);
        for i in 0..*attributes {
            send = send.message_attributes(format!("a{i}"), text_attribute(&"v".repeat(i + 1)));
        }
        send.send().await.expect("send to the source");
    }
    for _ in 0..20 {
        if ops::depth(sqs, &queue.url).await.expect("depth").total() == 0 {
            return;
        }
        sqs.receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .expect("receive");
    }
    panic!("moto's redrive did not move the messages to the DLQ");
}

/// The record the function would see for a message received from the source queue.
fn as_record(m: &Message, queue_arn: &str) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = vec![sqs_batch::worker::sqs::lambda_record(
        m,
        queue_arn,
        "us-east-1",
    )];
    event
}

/// A DLQ as the runbook meets it: the function's copies for `conflict`, `payment_rejected`,
/// `retries_exhausted`, and one whose failure attribute cannot be read, and two of SQS's own
/// moves, one with ten attributes of its own. Returns the function's copies' attributes by body,
/// and the bodies SQS moved.
async fn mixed_dlq(sqs: &Client, queue: &QueuePair) -> (HashMap<String, String>, [String; 2]) {
    let mut copies = HashMap::new();
    for reason in ["conflict", "payment_rejected", "retries_exhausted"] {
        let body = order(reason);
        let attribute = moved_by_function(sqs, queue, &body, reason, "g").await;
        copies.insert(body, attribute);
    }
    // Damaged: read as a move of unknown reason and time, never as SQS's move.
    send_to_dlq(sqs, queue, &order("damaged"), "not json", "g").await;
    copies.insert(order("damaged"), "not json".to_owned());
    let by_sqs = [order("sqs-moved"), order("sqs-moved-crowded")];
    moved_by_sqs(sqs, queue, &[(&by_sqs[0], 0), (&by_sqs[1], 10)]).await;
    (copies, by_sqs)
}
#[tokio::test]
async fn depth_counts_visible_in_flight_and_delayed_messages_of_queue_and_dlq() {
    let (sqs, queue, _) = pair("depth", false).await;
    for i in 0..5 {
        sqs.send_message()
            .queue_url(&queue.url)
            .message_body(format!("m{i}"))
            .send()
            .await
            .expect("send");
    }
    sqs.send_message()
        .queue_url(&queue.url)
        .message_body("later")
        .delay_seconds(60)
        .send()
        .await
        .expect("send");
    let got = sqs
        .receive_message()
        .queue_url(&queue.url)
        .max_number_of_messages(2)
        .send()
        .await
        .expect("receive");
    assert_eq!(got.messages().len(), 2);
    fill_dlq(&sqs, &queue, 4).await;

    let source = ops::resolve(&sqs, &queue.name).await.expect("resolve");
    assert_eq!(source.dlq_arn.as_deref(), Some(queue.dlq_arn.as_str()));
    let dlq = ops::dead_letter_queue(&sqs, &source).await.expect("dlq");
    assert_eq!(dlq.url, queue.dlq_url);
    let d = ops::depth(&sqs, &source.url).await.expect("depth");
    assert_eq!((d.visible, d.in_flight, d.delayed), (3, 2, 1));
    let d = ops::depth(&sqs, &dlq.url).await.expect("depth");
    assert_eq!((d.visible, d.in_flight, d.delayed), (4, 0, 0));
}

#[tokio::test]
async fn inspect_reads_dlq_messages_without_consuming_them() {
    let (sqs, queue, _) = pair("inspect", false).await;
    let mut bodies = fill_dlq(&sqs, &queue, 12).await;
    // A poison message as the function moves it: with why, in its failure attribute.
    let failure = sqs_batch::dead_letter::Failure {
        reason: "invalid_body".into(),
        detail: Some("the body is not valid JSON (line 1, column 2)".into()),
        key: None,
        source_queue_arn: queue.arn.clone(),
        receive_count: Some(1),
        first_failure_ms: Some(1_767_225_600_000),
        last_failure_ms: 1_767_225_600_500,
        moved_by: "process-orders:3".into(),
        ..Default::default()
    };
    sqs.send_message()
        .queue_url(&queue.dlq_url)
        .message_body("not json")
        .message_attributes(
            sqs_batch::dead_letter::FAILURE_ATTRIBUTE,
            aws_sdk_sqs::types::MessageAttributeValue::builder()
                .data_type("String")
                .string_value(serde_json::to_string(&failure).expect("JSON"))
                .build()
                .expect("attribute"),
        )
        .send()
        .await
        .expect("send");
    bodies.push("not json".into());

    let peeked = ops::inspect(&sqs, &queue.dlq_url, 50)
        .await
        .expect("inspect");
    assert_eq!(peeked.len(), 13, "every message seen once");
    let mut ids: Vec<_> = peeked.iter().filter_map(|p| p.order_id.clone()).collect();
    ids.sort();
    let mut expected: Vec<_> = (0..12).map(|i| format!("o-{i}")).collect();
    expected.sort();
    assert_eq!(
        ids, expected,
        "order ids read from the bodies; none for the poison"
    );
    assert!(
        peeked
            .iter()
            .all(|p| p.receive_count == Some(1) && p.sent_ms.is_some())
    );
    assert!(
        peeked
            .iter()
            .any(|p| p.body_len == "not json".len() && p.order_id.is_none())
    );
    // The moved one says why; the others (moved by SQS's redrive) have no reason.
    let moved: Vec<_> = peeked.iter().filter_map(|p| p.failure.as_ref()).collect();
    assert_eq!(moved, [&failure]);

    // Visible again at once: all of them can be received right away. Nothing else receives, so
    // the counts are exact here.
    let d = ops::depth(&sqs, &queue.dlq_url).await.expect("depth");
    assert_eq!((d.visible, d.in_flight), (13, 0));
    let mut back: Vec<_> = drain(&sqs, &queue.dlq_url)
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    back.sort();
    bodies.sort();
    assert_eq!(back, bodies);
}

#[tokio::test]
async fn manual_redrive_moves_every_message_exactly_once_and_keeps_fifo_groups() {
    for fifo in [false, true] {
        let (sqs, queue, _) = pair("redrive", fifo).await;
        let bodies = fill_dlq(&sqs, &queue, 23).await;
        let source = ops::resolve(&sqs, &queue.url).await.expect("resolve");
        let dlq = ops::dead_letter_queue(&sqs, &source).await.expect("dlq");
        let moved =
            ops::redrive_manual(&sqs, &dlq, &source, &plan(ops::Selection::Default), |_| {})
                .await
                .expect("redrive");
        // Put in the DLQ without a failure attribute, as SQS's redrive moves: stamped.
        assert_eq!(
            (moved.moved, moved.failed, moved.stamped),
            (23, 0, 23),
            "fifo={fifo}"
        );
        // The redrive has returned and nothing else receives: the counts are exact, and include
        // a message the redrive still holds in flight.
        assert_eq!(ops::depth(&sqs, &dlq.url).await.expect("depth").total(), 0);
        let arrived = drain(&sqs, &queue.url).await;
        let mut got: Vec<_> = arrived.iter().map(|(b, _)| b.clone()).collect();
        got.sort();
        let mut want = bodies.clone();
        want.sort();
        assert_eq!(got, want, "fifo={fifo}: each message moved exactly once");
        if fifo {
            for (body, group) in &arrived {
                let i: usize = body
                    .split("o-")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .and_then(|s| s.parse().ok())
                    .expect("index");
                assert_eq!(
                    group.as_deref(),
                    Some(format!("g{}", i % 3).as_str()),
                    "group kept"
                );
            }
        }
    }
}

/// A redrive killed part-way loses nothing. The kill waits on a fact, the tool's own log line
/// for a batch moved, not on the queues' approximate counts: those are not facts while a
/// receive runs (moto reads "visible" before a receive and "not visible" after it, counting the
/// batch twice; a total of 41 once ended the wait before anything had moved).
#[tokio::test]
async fn a_redrive_killed_mid_way_loses_nothing() {
    use std::io::BufRead;
    let (sqs, queue, endpoint) = pair("redrive-kill", false).await;
    let bodies = fill_dlq(&sqs, &queue, 40).await;
    let run = |rate: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_orders-ops"))
            .args([
                "redrive",
                "--yes",
                "--rate",
                rate,
                "--queue",
                &queue.name,
                "--endpoint",
                &endpoint,
            ])
            .env("RUST_LOG", "orders_ops=info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn orders-ops")
    };
    // 10 a second: killed as soon as its first batch has moved, part-way through.
    let mut first = run("10");
    let stderr = first.stderr.take().expect("stderr");
    let (moved_tx, moved_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("redrive batch moved") {
                let _ = moved_tx.send(line);
            }
        }
    });
    let line = moved_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a first batch moved");
    assert!(
        first.try_wait().expect("status").is_none(),
        "the first run ended before it could be killed: {line}"
    );
    first.kill().expect("kill");
    first.wait().expect("reap");

    // The batch the killed run held comes back when its hold ends.
    tokio::time::sleep(ops::REDRIVE_HOLD + Duration::from_secs(1)).await;
    let second = run("500").wait_with_output().expect("second run");
    assert!(second.status.success());

    let mut counts: HashMap<String, usize> = HashMap::new();
    for (body, _) in drain(&sqs, &queue.url).await {
        *counts.entry(body).or_default() += 1;
    }
    for body in &bodies {
        assert!(counts.get(body).is_some_and(|n| *n >= 1), "{body} was lost");
    }
    assert_eq!(
        counts.len(),
        bodies.len(),
        "nothing but the originals arrived"
    );
    // Nothing left to receive from the DLQ, and nothing held in flight there either (the second
    // run has exited and nothing else receives, so the counts are exact).
    assert!(drain(&sqs, &queue.dlq_url).await.is_empty());
    assert_eq!(
        ops::depth(&sqs, &queue.dlq_url)
            .await
            .expect("depth")
            .total(),
        0
    );
}

/// The default redrive of a DLQ holding the function's copies and SQS's own moves sends back all
/// but the conflict: the function's copies as they were (a damaged attribute too), SQS's moves
/// stamped with their age, which the function reads as an earlier attempt at the DLQ message's
/// SentTimestamp. The conflict stays in the DLQ, visible again.
#[tokio::test]
async fn a_default_redrive_sends_back_all_but_conflicts_and_stamps_sqss_own_moves() {
    let (sqs, queue, _) = pair("redrive-reasons", false).await;
    let (copies, by_sqs) = mixed_dlq(&sqs, &queue).await;
    // What the DLQ says of SQS's moves before the redrive: their send time.
    let peeked = ops::inspect(&sqs, &queue.dlq_url, 50)
        .await
        .expect("inspect");
    assert_eq!(peeked.len(), 6, "{peeked:?}");
    let sent_ms = |body: &str| {
        peeked
            .iter()
            .find(|p| p.order_id == process_orders::order::order_id_hint(body))
            .and_then(|p| p.sent_ms)
            .expect("a send time")
    };

    let source = ops::resolve(&sqs, &queue.url).await.expect("resolve");
    let dlq = ops::dead_letter_queue(&sqs, &source).await.expect("dlq");
    let moved = tokio::time::timeout(
        Duration::from_secs(120),
        ops::redrive_manual(&sqs, &dlq, &source, &plan(ops::Selection::Default), |_| {}),
    )
    .await
    .expect("the redrive ends")
    .expect("redrive");
    assert_eq!(
        (moved.moved, moved.failed, moved.stamped, moved.trimmed),
        (5, 0, 2, 1),
        "{moved:?}"
    );
    let counts = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
        pairs.iter().map(|(r, n)| ((*r).to_owned(), *n)).collect()
    };
    assert_eq!(
        moved.moved_by_reason,
        counts(&[
            ("payment_rejected", 1),
            ("redrive_policy", 2),
            ("retries_exhausted", 1),
            ("unreadable", 1)
        ])
    );
    assert_eq!(moved.skipped, counts(&[("conflict", 1)]));

    let arrived = drain_messages(&sqs, &queue.url).await;
    let mut bodies: Vec<&str> = arrived.iter().filter_map(Message::body).collect();
    bodies.sort_unstable();
    let mut want: Vec<String> = copies
        .keys()
        .filter(|b| **b != order("conflict"))
        .chain(&by_sqs)
        .cloned()
        .collect();
    want.sort_unstable();
    assert_eq!(bodies, want, "all but the conflict, each once");
    for m in &arrived {
        let body = m.body().unwrap_or_default();
        let attributes = m.message_attributes().expect("attributes");
        let failure_text = attributes[FAILURE_ATTRIBUTE].string_value().expect("text");
        if let Some(copy) = copies.get(body) {
            assert_eq!(
                failure_text, copy,
                "the function's copy goes back unchanged"
            );
            continue;
        }
        let failure: Failure = serde_json::from_str(failure_text).expect("a Failure");
        assert_eq!(failure.reason, "redrive_policy");
        assert_eq!(failure.moved_by, "sqs");
        assert_eq!(failure.first_failure_ms, Some(sent_ms(body)), "{failure:?}");
        assert_eq!(failure.source_queue_arn, queue.arn);
        assert_eq!(failure.key, process_orders::order::order_id_hint(body));
        // Three receives in the source queue, one by inspect, one by the redrive.
        assert_eq!(failure.receive_count, Some(5), "{failure:?}");
        assert!(
            failure
                .detail
                .is_some_and(|d| d.contains("maxReceiveCount"))
        );
        // The function reads the stamped copy as tried before, at the DLQ message's send time.
        let event = as_record(m, &queue.arn);
        let batch = Batch::from_event(&event).expect("a record");
        assert_eq!(earlier_attempt_ms(&batch.messages[0]), Some(sent_ms(body)));
        if *body == by_sqs[1] {
            // Ten of its own and the stamp: the largest of its own is left out, and named.
            assert_eq!(attributes.len(), 10, "{attributes:?}");
            assert!(!attributes.contains_key("a9"), "{attributes:?}");
            assert_eq!(failure.trimmed, ["attribute a9"]);
        } else {
            assert_eq!(attributes.len(), 1, "{attributes:?}");
            assert!(failure.trimmed.is_empty());
        }
    }

    // The conflict is in the DLQ, visible at once, its attribute as it was.
    let d = ops::depth(&sqs, &queue.dlq_url).await.expect("depth");
    assert_eq!((d.visible, d.in_flight), (1, 0));
    let left = drain_messages(&sqs, &queue.dlq_url).await;
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].body(), Some(order("conflict").as_str()));
    assert_eq!(
        left[0].message_attributes().expect("attributes")[FAILURE_ATTRIBUTE].string_value(),
        copies.get(&order("conflict")).map(String::as_str)
    );
}

/// `--reason conflict` sends back the conflict alone; then `--reason` with two reasons
/// comma-separated sends back those two. What is not named stays in the DLQ.
#[tokio::test]
async fn a_redrive_by_reason_sends_back_only_the_reasons_named() {
    let (sqs, queue, endpoint) = pair("redrive-named", false).await;
    let (copies, by_sqs) = mixed_dlq(&sqs, &queue).await;
    let redrive = |reasons: &str| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_orders-ops"))
            .args([
                "redrive",
                "--yes",
                "--reason",
                reasons,
                "--queue",
                &queue.name,
                "--endpoint-url",
                &endpoint,
                "--output",
                "json",
            ])
            .output()
            .expect("run orders-ops");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let result: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
        result
    };
    let result = redrive("conflict");
    assert_eq!(result["moved"], 1, "{result}");
    assert_eq!(result["moved_by_reason"]["conflict"], 1, "{result}");
    assert_eq!(result["skipped"]["redrive_policy"], 2, "{result}");
    let arrived = drain_messages(&sqs, &queue.url).await;
    assert_eq!(arrived.len(), 1);
    assert_eq!(arrived[0].body(), Some(order("conflict").as_str()));
    assert_eq!(
        arrived[0].message_attributes().expect("attributes")[FAILURE_ATTRIBUTE].string_value(),
        copies.get(&order("conflict")).map(String::as_str),
        "sent back as it was"
    );
    let d = ops::depth(&sqs, &queue.dlq_url).await.expect("depth");
    assert_eq!((d.visible, d.in_flight), (5, 0), "the others stay, visible");

    let result = redrive("payment_rejected,retries_exhausted");
    assert_eq!(result["moved"], 2, "{result}");
    let mut bodies: Vec<String> = drain(&sqs, &queue.url)
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    bodies.sort_unstable();
    assert_eq!(
        bodies,
        [order("payment_rejected"), order("retries_exhausted")]
    );
    let mut left: Vec<String> = drain(&sqs, &queue.dlq_url)
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    left.sort_unstable();
    let mut want = vec![order("damaged"), by_sqs[0].clone(), by_sqs[1].clone()];
    want.sort_unstable();
    assert_eq!(left, want);
}

/// A DLQ holding only messages the redrive leaves behind (more than one receive's worth, one a
/// receive) ends, moves nothing and leaves them visible. On a FIFO DLQ, a message behind left
/// ones in its group still goes back, and the run ends too: the held messages hold back their
/// groups, and a pass that brings nothing new ends it.
#[tokio::test]
async fn a_redrive_ends_when_only_messages_it_leaves_remain() {
    for fifo in [false, true] {
        let (sqs, queue, _) = pair("redrive-left", fifo).await;
        for i in 0..15 {
            let group = format!("g{}", i % 3);
            moved_by_function(&sqs, &queue, &order(&format!("c-{i}")), "conflict", &group).await;
            // Behind two conflicts of its group. SQS gives a FIFO receive as many of one group
            // as it can; moto gives the first ten in the queue, whatever their group: early
            // enough in the queue, it comes in the first receive with either.
            if fifo && i == 3 {
                moved_by_function(&sqs, &queue, &order("behind"), "retries_exhausted", "g0").await;
            }
        }
        let source = ops::resolve(&sqs, &queue.url).await.expect("resolve");
        let dlq = ops::dead_letter_queue(&sqs, &source).await.expect("dlq");
        let slow = ops::Plan {
            rate: 1,
            ..plan(ops::Selection::Default)
        };
        let moved = tokio::time::timeout(
            Duration::from_secs(120),
            ops::redrive_manual(&sqs, &dlq, &source, &slow, |_| {}),
        )
        .await
        .unwrap_or_else(|_| panic!("fifo={fifo}: the redrive never ended"))
        .expect("redrive");
        let skipped = moved.skipped.get("conflict").copied().unwrap_or(0);
        if fifo {
            // What the server gives while left messages hold their groups: at least a receive.
            assert!((9..=15).contains(&skipped), "{moved:?}");
            assert_eq!(moved.moved, 1, "{moved:?}");
        } else {
            assert_eq!((skipped, moved.moved), (15, 0), "{moved:?}");
        }
        let d = ops::depth(&sqs, &queue.dlq_url).await.expect("depth");
        assert_eq!(
            (d.visible, d.in_flight),
            (15, 0),
            "fifo={fifo}: left, visible"
        );
        let arrived = drain(&sqs, &queue.url).await;
        if fifo {
            assert_eq!(arrived, [(order("behind"), Some("g0".to_owned()))]);
        } else {
            assert!(arrived.is_empty());
        }
    }
}
