//! Visibility backoff against moto's SQS: after a batch, a POISON record is visible again at
//! once, a BUSY record stays away until the holder's lease ends, a transient failure comes back
//! within its backoff bound, and an acknowledged record is left alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use idempotency::{IdempotencyStore, MemoryStore, store::Begin, store::ClaimRequest};
use lambda_kit::clock::{Clock, SystemClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::money::Currency;
use process_orders::order::decode_order;
use process_orders::testkit::dynamo::moto_endpoint;
use process_orders::testkit::ports::{Script, ScriptedGateway};
use serde_json::json;
use sqs_batch::Backoff;
use sqs_batch::backoff::BackoffPolicy;
use sqs_batch::visibility::SqsVisibility;

fn sqs_client(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
        .http_client(process_orders::aws::http_client())
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
            decode_order(b, Currency::EUR)
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
    let store = Arc::new(MemoryStore::new(config.store.retention));
    let gateway = Arc::new(ScriptedGateway::default());
    gateway.script("o-flaky", Script::NotSent);
    // Another consumer holds o-busy for 4 more seconds.
    let now = SystemClock.now_ms();
    let fingerprint = decode_order(r#"{"order_id":"o-busy","amount":1}"#, Currency::EUR)
        .unwrap()
        .fingerprint();
    let held = store
        .begin(&ClaimRequest::new(
            "o-busy",
            fingerprint,
            now,
            now + 4_000,
            "elsewhere",
        ))
        .await
        .unwrap();
    assert!(matches!(held, Begin::Started { .. }));
    let policy = BackoffPolicy::new(1, 1);
    let app = App::with_ports(
        &config,
        Arc::clone(&store),
        Arc::clone(&gateway),
        SystemClock,
    )
    // The function's own wiring: the SQS client built at the first change, on the shared SDK
    // configuration and the visibility calls' bounds.
    .with_backoff(Some(Backoff::new(
        process_orders::app::sqs_visibility(local_esm::sdk_config(&moto_endpoint())),
        policy,
    )));

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

/// Epoch milliseconds on Tokio's clock, so a test with paused time moves the function's clock
/// too.
#[derive(Debug, Clone)]
struct TokioClock {
    base_ms: u64,
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.base_ms + self.start.elapsed().as_millis() as u64
    }
}

/// SQS accepts connections and never answers. The visibility calls for 100 reported records
/// must not hold the response past the invocation's deadline: Lambda would discard a late
/// response and retry the whole batch. With 6 s left the calls run concurrently and give up at
/// the SDK's bound; with 1.5 s left they are cut off before the deadline. Tokio's clock is paused,
/// so the SDK's timeouts pass in virtual time and the assertion is about order, not speed.
#[tokio::test(start_paused = true)]
async fn a_blackholed_sqs_cannot_hold_the_response_past_the_deadline() {
    // Connections complete in the kernel's backlog; nothing ever reads or answers them.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", blackhole.local_addr().unwrap());
    let sdk = local_esm::sdk_config(&endpoint);
    let client = process_orders::aws::sqs(&sdk, &process_orders::app::SQS_SDK);
    let records: Vec<_> = (0..100)
        .map(|i| {
            json!({
                "messageId": format!("m{i}"),
                "receiptHandle": format!("rh{i}"),
                "body": "not json",
                "attributes": { "ApproximateReceiveCount": "1" },
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            })
        })
        .collect();
    let json = json!({ "Records": records }).to_string();
    for (time_left_ms, margin) in [(6_000, "5000"), (1_500, "1000")] {
        let clock = TokioClock {
            base_ms: SystemClock.now_ms(),
            start: tokio::time::Instant::now(),
        };
        let config = Config::from_lookup(|k| match k {
            "METRICS_ENABLED" => Some("false".into()),
            "SQS_BATCH_DEADLINE_MARGIN_MS" => Some(margin.into()),
            _ => None,
        })
        .unwrap();
        let app = App::with_ports(
            &config,
            MemoryStore::new(config.store.retention),
            process_orders::payment::SimulatedGateway::new(),
            clock.clone(),
        )
        .with_backoff(Some(Backoff::new(
            SqsVisibility::new(client.clone()),
            BackoffPolicy::new(5, 900),
        )));
        let started_ms = clock.now_ms();
        let deadline_ms = started_ms + time_left_ms;
        let response = app.handle_json(&json, deadline_ms).await.expect("handled");
        let answered_ms = clock.now_ms();
        assert_eq!(response.batch_item_failures.len(), 100);
        eprintln!(
            "100 reported records, SQS blackholed, {time_left_ms} ms left: answered after {} ms, {} ms before the deadline",
            answered_ms - started_ms,
            deadline_ms.saturating_sub(answered_ms)
        );
        assert!(
            answered_ms < deadline_ms,
            "the response left {} ms after the deadline",
            answered_ms - deadline_ms
        );
    }
    drop(blackhole);
}
