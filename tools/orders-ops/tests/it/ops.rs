//! The ops command against moto's SQS: `depth`, `inspect` and `redrive --manual`, including a
//! redrive killed mid-way (nothing lost, at worst duplicated).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::Client;
use local_esm::sdk_config;
use local_esm::setup::{self, QueuePair, QueueSettings};
use orders_ops as ops;
use process_orders::testkit::dynamo::moto_endpoint;

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

/// Receives and deletes everything in `url`; returns the bodies with their group ids.
async fn drain(sqs: &Client, url: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            return out;
        }
        for m in messages {
            let group = m
                .attributes()
                .and_then(|a| {
                    a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
                })
                .cloned();
            out.push((m.body().unwrap_or_default().to_owned(), group));
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
    }
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
        let moved = ops::redrive_manual(&sqs, &dlq, &source, 1_000, |_| {})
            .await
            .expect("redrive");
        assert_eq!(
            moved,
            ops::Moved {
                moved: 23,
                failed: 0
            },
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
                "--manual",
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
