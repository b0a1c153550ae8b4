//! Visibility backoff against moto's SQS: after a batch, a POISON record is visible again at
//! once, a BUSY record stays away until the holder's lease ends, a transient failure comes back
//! within its backoff bound, and an acknowledged record is left alone.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use process_orders::app::App;
use process_orders::backoff::BackoffPolicy;
use process_orders::clock::{Clock, SystemClock};
use process_orders::config::Config;
use process_orders::idempotency::{Begin, ClaimRequest, IdempotencyStore, MemoryStore};
use process_orders::order::decode_order;
use process_orders::visibility::SqsVisibility;
use serde_json::json;
use support::dynamo::moto_endpoint;
use support::ports::{Script, ScriptedGateway};

fn sqs_client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}

/// Receives what is visible now, as Lambda's poller would, and builds the event Lambda delivers.
async fn receive_event(
    client: &Client,
    url: &str,
    arn: &str,
    wait_s: i32,
) -> (serde_json::Value, Vec<String>) {
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .wait_time_seconds(wait_s)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .expect("receive");
    let mut bodies = Vec::new();
    let records: Vec<_> = out
        .messages()
        .iter()
        .map(|m| {
            bodies.push(m.body().unwrap_or_default().to_owned());
            let attributes: serde_json::Map<String, serde_json::Value> = m
                .attributes()
                .map(|a| {
                    a.iter()
                        .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                        .collect()
                })
                .unwrap_or_default();
            json!({
                "messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(),
                "attributes": attributes, "messageAttributes": {}, "eventSource": "aws:sqs",
                "eventSourceARN": arn, "awsRegion": "us-east-1"
            })
        })
        .collect();
    (json!({ "Records": records }), bodies)
}

fn order_ids(bodies: &[String]) -> Vec<String> {
    let mut ids: Vec<String> = bodies
        .iter()
        .map(|b| {
            decode_order(b)
                .map(|o| o.order_id.into_owned())
                .unwrap_or_else(|_| "poison".into())
        })
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reported_records_come_back_on_their_own_schedule() {
    let client = sqs_client(&moto_endpoint());
    let name = format!("backoff-{}", std::process::id());
    let url = client
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::VisibilityTimeout, "60")
        .send()
        .await
        .expect("create queue")
        .queue_url
        .unwrap();
    let arn = format!("arn:aws:sqs:us-east-1:123456789012:{name}");
    for body in [
        json!({ "order_id": "o-ack", "amount": 1 }).to_string(),
        json!({ "order_id": "o-flaky", "amount": 1 }).to_string(),
        json!({ "order_id": "o-busy", "amount": 1 }).to_string(),
        "poison".to_owned(),
    ] {
        client
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .expect("send");
    }

    let config = Config::from_lookup(|_| None).unwrap();
    let store = Arc::new(MemoryStore::new(config.retention));
    let gateway = Arc::new(ScriptedGateway::default());
    gateway.script("o-flaky", Script::NotSent);
    // Another consumer holds o-busy for 4 more seconds.
    let now = SystemClock.now_ms();
    let fingerprint = decode_order(r#"{"order_id":"o-busy","amount":1}"#)
        .unwrap()
        .fingerprint();
    let held = store
        .begin(&ClaimRequest {
            key: "o-busy",
            fingerprint,
            now_ms: now,
            lease_until_ms: now + 4_000,
            message_id: "elsewhere",
        })
        .await
        .unwrap();
    assert!(matches!(held, Begin::Started { .. }));
    let policy = BackoffPolicy {
        base_s: 1,
        cap_s: 1,
    };
    let app = App::with_ports(
        &config,
        Arc::clone(&store),
        Arc::clone(&gateway),
        SystemClock,
    )
    .with_backoff(Some((SqsVisibility::new(client.clone()), policy)));

    let (event, bodies) = receive_event(&client, &url, &arn, 1).await;
    assert_eq!(order_ids(&bodies), ["o-ack", "o-busy", "o-flaky", "poison"]);
    let response = app
        .handle_json(&event.to_string(), SystemClock.now_ms() + 30_000)
        .await
        .unwrap();
    assert_eq!(response.batch_item_failures.len(), 3);

    // At once: the poison is visible again (visibility 0); the busy record is not.
    let (_, now_visible) = receive_event(&client, &url, &arn, 0).await;
    let now_visible = order_ids(&now_visible);
    assert!(
        now_visible.contains(&"poison".to_owned()),
        "{now_visible:?}"
    );
    assert!(
        !now_visible.contains(&"o-busy".to_owned()),
        "{now_visible:?}"
    );

    // Then the transient failure (bound 1 s) and the busy record (lease end + up to 1 s) come
    // back, long before the queue's 60 s visibility timeout; the acknowledged one does not.
    let mut seen: Vec<String> = now_visible;
    let started = Instant::now();
    while !(seen.contains(&"o-flaky".to_owned()) && seen.contains(&"o-busy".to_owned())) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "not back: {seen:?}"
        );
        let (_, bodies) = receive_event(&client, &url, &arn, 1).await;
        seen.extend(order_ids(&bodies));
    }
    assert!(!seen.contains(&"o-ack".to_owned()), "{seen:?}");
}
