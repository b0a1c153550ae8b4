//! SNS fan-out end to end on moto (which delivers SNS to SQS in-process): orders published to a
//! topic, with raw message delivery on and off, reach the queue in the two body shapes and are
//! all charged through the local event source mapping.
//!
//! SNS is called over its query API with plain HTTP (moto does not check signatures), so the
//! tests need no SNS SDK. moto does not enforce queue policies: see docs/operations.md.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use idempotency::MemoryStore;
use lambda_kit::clock::SystemClock;
use local_esm::esm::{self, EsmSettings};
use local_esm::sdk_config;
use local_esm::setup::{self, QueueSettings};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::dynamo::moto_endpoint;

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One SNS query-API call; returns the response text.
async fn sns(endpoint: &str, params: &[(&str, &str)]) -> String {
    let body: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .chain(["Version=2010-03-31".to_owned()])
        .collect();
    let response = reqwest::Client::new()
        .post(endpoint)
        .header("content-type", "application/x-www-form-urlencoded")
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/sns/aws4_request, SignedHeaders=host, Signature=0",
        )
        .body(body.join("&"))
        .send()
        .await
        .expect("SNS call");
    let status = response.status();
    let text = response.text().await.expect("SNS response");
    assert!(status.is_success(), "{params:?}: {status} {text}");
    text
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> &'a str {
    let start = text.find(open).map(|i| i + open.len()).expect(open);
    let end = text[start..].find(close).expect(close) + start;
    &text[start..end]
}

async fn fan_out(raw: bool, fifo: bool) {
    let endpoint = moto_endpoint();
    let sqs = aws_sdk_sqs::Client::new(&sdk_config(&endpoint));
    let name = format!(
        "sns-{}-{}-{}",
        if raw { "raw" } else { "env" },
        std::process::id(),
        fastrand::u32(..)
    );
    let queue = setup::queue_pair(
        &sqs,
        &name,
        fifo,
        QueueSettings {
            visibility_timeout_s: 5,
            max_receive_count: 5,
        },
    )
    .await
    .expect("queues");

    let topic_name = if fifo {
        format!("{name}.fifo")
    } else {
        name.clone()
    };
    let mut create = vec![("Action", "CreateTopic"), ("Name", topic_name.as_str())];
    if fifo {
        create.extend([
            ("Attributes.entry.1.key", "FifoTopic"),
            ("Attributes.entry.1.value", "true"),
            ("Attributes.entry.2.key", "ContentBasedDeduplication"),
            ("Attributes.entry.2.value", "true"),
        ]);
    }
    let topic = between(&sns(&endpoint, &create).await, "<TopicArn>", "</TopicArn>").to_owned();
    let raw_text = raw.to_string();
    sns(
        &endpoint,
        &[
            ("Action", "Subscribe"),
            ("TopicArn", &topic),
            ("Protocol", "sqs"),
            ("Endpoint", &queue.arn),
            ("Attributes.entry.1.key", "RawMessageDelivery"),
            ("Attributes.entry.1.value", &raw_text),
        ],
    )
    .await;

    let orders = 12;
    for i in 0..orders {
        let order = format!(r#"{{"order_id": "sns-{name}-{i}", "amount": 7}}"#);
        let group = format!("g{}", i % 3);
        let mut publish = vec![
            ("Action", "Publish"),
            ("TopicArn", topic.as_str()),
            ("Message", order.as_str()),
            ("MessageAttributes.entry.1.Name", "source"),
            ("MessageAttributes.entry.1.Value.DataType", "String"),
            ("MessageAttributes.entry.1.Value.StringValue", "checkout"),
        ];
        let dedup = format!("d-{i}");
        if fifo {
            publish.push(("MessageGroupId", group.as_str()));
            publish.push(("MessageDeduplicationId", dedup.as_str()));
        }
        sns(&endpoint, &publish).await;
    }

    // The body shape SNS delivered, seen as the function will see it, then put back.
    let got = sqs
        .receive_message()
        .queue_url(&queue.url)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("receive");
    let message = got.messages().first().expect("SNS delivered to the queue");
    let record = esm::lambda_record(message, &queue.arn, "us-east-1");
    let body: serde_json::Value =
        serde_json::from_str(record.body.as_deref().unwrap_or_default()).expect("JSON body");
    if raw {
        assert!(
            body.get("order_id").is_some(),
            "raw: the body is the published order: {body}"
        );
        let source = record
            .message_attributes
            .get("source")
            .expect("raw: SNS attributes become SQS message attributes");
        assert_eq!(source.string_value.as_deref(), Some("checkout"));
    } else {
        assert_eq!(body["Type"], "Notification", "envelope: {body}");
        assert!(
            body["Message"]
                .as_str()
                .is_some_and(|m| m.contains("order_id"))
        );
        assert_eq!(
            body["MessageAttributes"]["source"]["Value"], "checkout",
            "envelope: attributes inside the envelope"
        );
    }
    sqs.change_message_visibility()
        .queue_url(&queue.url)
        .receipt_handle(message.receipt_handle().unwrap_or_default())
        .visibility_timeout(0)
        .send()
        .await
        .expect("put back");

    let config = Config::from_lookup(|k| (k == "SQS_BATCH_FIFO_SCOPE").then(|| "group".to_owned()))
        .expect("config");
    let app = Arc::new(App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    ));
    let settings = EsmSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(100),
        concurrency: 2,
        function_timeout: Duration::from_secs(10),
        drained_after: Duration::from_secs(6),
        max_run: Duration::from_secs(60),
    };
    let stats = esm::run(sqs.clone(), queue.clone(), Arc::clone(&app), settings)
        .await
        .expect("esm");
    assert_eq!(
        stats.reported, 0,
        "raw={raw} fifo={fifo}: every record acknowledged"
    );
    for i in 0..orders {
        assert!(
            app.ports().gateway.charged(&format!("sns-{name}-{i}")),
            "raw={raw} fifo={fifo}: order {i} charged"
        );
    }
    assert_eq!(app.ports().gateway.effective_charges(), orders);
    assert!(stats.drained, "raw={raw} fifo={fifo}: {stats:?}");
    // Nothing consumes the DLQ, so nothing there is in flight: an empty receive means empty.
    let in_dlq = sqs
        .receive_message()
        .queue_url(&queue.dlq_url)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receive the DLQ");
    assert!(
        in_dlq.messages().is_empty(),
        "raw={raw} fifo={fifo}: {:?} in the DLQ",
        in_dlq.messages()
    );
    assert_eq!(
        setup::depth(&sqs, &queue.dlq_url)
            .await
            .expect("depth")
            .total(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_delivery_bodies_are_the_orders_and_attributes_arrive() {
    fan_out(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_bodies_are_unwrapped() {
    fan_out(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_topic_feeds_the_fifo_queue_in_both_shapes() {
    fan_out(true, true).await;
    fan_out(false, true).await;
}
