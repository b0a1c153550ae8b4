//! The S3 claim check against moto's S3 and SQS (feature `s3-claim-check`): a 300,000-byte order
//! goes through S3 with a pointer and is charged once, and each way a pointer can fail gives the
//! outcome it must.

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use claim_check::s3::S3Payloads;
use claim_check::{POINTER_S3, Payloads};
use idempotency::MemoryStore;
use lambda_kit::clock::SystemClock;
use local_esm::esm::{self, EsmSettings};
use local_esm::sdk_config;
use local_esm::setup::{self, QueueSettings};
use orders_ops::{self as ops, Offload};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::SimulatedGateway;
use process_orders::testkit::dynamo::moto_endpoint;
use sqs_batch::edge::Message;
use sqs_batch::processor::Decision;

const LIMIT: u64 = 1_000_000;

fn s3_client(endpoint: &str) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk_config(endpoint))
            .force_path_style(true)
            .build(),
    )
}

async fn bucket(s3: &aws_sdk_s3::Client) -> String {
    let name = format!("claims-{}-{}", std::process::id(), fastrand::u32(..));
    s3.create_bucket()
        .bucket(&name)
        .send()
        .await
        .expect("bucket");
    name
}

/// An order whose JSON is exactly `len` bytes (padded with a field the decoder ignores).
fn big_order(id: &str, len: usize) -> String {
    let head = format!(r#"{{"order_id": "{id}", "amount": 12.5, "note": ""#);
    let pad = len - head.len() - 2;
    format!("{head}{}\"}}", "x".repeat(pad))
}

type TestApp = App<MemoryStore, SimulatedGateway, SystemClock>;

fn app(payloads: Payloads) -> TestApp {
    let config = Config::from_lookup(|_| None).expect("config");
    App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        SimulatedGateway::new(),
        SystemClock,
    )
    .with_payloads(payloads)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_000_byte_order_round_trips_through_s3_and_is_charged_once() {
    let endpoint = moto_endpoint();
    let sqs = aws_sdk_sqs::Client::new(&sdk_config(&endpoint));
    let s3 = s3_client(&endpoint);
    let bucket = bucket(&s3).await;
    let name = format!("claims-{}", std::process::id());
    let pair = setup::queue_pair(
        &sqs,
        &name,
        false,
        QueueSettings {
            visibility_timeout_s: 5,
            max_receive_count: 5,
        },
    )
    .await
    .expect("queues");
    let queue = ops::resolve(&sqs, &pair.url).await.expect("queue");

    let body = big_order("big-1", 300_000);
    assert_eq!(body.len(), 300_000);
    let offload = Offload {
        s3: &s3,
        bucket: &bucket,
        threshold: ops::INLINE_LIMIT,
    };
    assert!(
        ops::send_order(&sqs, &queue, &body, None, Some(offload))
            .await
            .expect("send"),
        "offloaded"
    );
    // The same order again (a duplicate send): one charge in the end.
    assert!(
        ops::send_order(&sqs, &queue, &body, None, Some(offload))
            .await
            .expect("send")
    );
    // A small order stays inline.
    let small = r#"{"order_id": "small-1", "amount": 3}"#;
    assert!(
        !ops::send_order(&sqs, &queue, small, None, Some(offload))
            .await
            .expect("send")
    );

    let app = Arc::new(app(Payloads::S3(S3Payloads::new(
        s3.clone(),
        &bucket,
        LIMIT,
    ))));
    let settings = EsmSettings {
        batch_size: 10,
        batching_window: Duration::from_millis(200),
        concurrency: 1,
        function_timeout: Duration::from_secs(10),
        drained_after: Duration::from_secs(6),
        max_run: Duration::from_secs(60),
    };
    let stats = esm::run(sqs.clone(), pair.clone(), Arc::clone(&app), settings)
        .await
        .expect("esm");
    assert_eq!(stats.reported, 0, "{stats:?}");
    assert!(stats.drained, "{stats:?}");
    let gateway = &app.ports().gateway;
    assert!(gateway.charged("big-1") && gateway.charged("small-1"));
    assert_eq!(
        gateway.effective_charges(),
        2,
        "the big order once, the small one once"
    );

    // The consumer never deletes a payload: a redelivery or a redrive needs it.
    let objects = s3
        .list_objects_v2()
        .bucket(&bucket)
        .send()
        .await
        .expect("list");
    assert_eq!(
        objects.contents().len(),
        2,
        "both offloaded payloads are still there"
    );
    assert!(
        objects
            .contents()
            .iter()
            .all(|o| o.key().unwrap_or_default().starts_with(ops::PAYLOAD_PREFIX))
    );
}

/// The verdict for one pointer message handled directly by the function.
async fn outcome(app: &TestApp, pointer_kind: &str, body: &str) -> (Decision, String) {
    // The attributes as Lambda's payload carries them.
    let attributes = serde_json::value::RawValue::from_string(
        serde_json::json!({
            claim_check::POINTER_ATTRIBUTE: { "stringValue": pointer_kind, "dataType": "String" }
        })
        .to_string(),
    )
    .expect("raw JSON");
    let message = Message::new("m1", body)
        .with_attributes(sqs_batch::edge::MessageAttributes::Raw(&attributes));
    let batch = sqs_batch::edge::Batch {
        messages: vec![message],
        kind: sqs_batch::edge::QueueKind::Standard,
        queue_arn: None,
    };
    let (_, report) = app
        .handle_batch(
            &batch,
            lambda_kit::clock::Clock::now_ms(&SystemClock) + 60_000,
        )
        .await
        .expect("handled");
    match &report.statuses[0] {
        sqs_batch::processor::RecordStatus::Handled(v) => (v.outcome, v.reason.to_owned()),
        other => panic!("not handled: {other:?}"),
    }
}

#[tokio::test]
async fn each_way_a_pointer_fails_has_its_outcome() {
    let endpoint = moto_endpoint();
    let s3 = s3_client(&endpoint);
    let bucket = bucket(&s3).await;
    let body = big_order("p-1", 1_000);
    s3.put_object()
        .bucket(&bucket)
        .key("payloads/ok")
        .body(ByteStream::from(body.clone().into_bytes()))
        .send()
        .await
        .expect("put");
    let app = app(Payloads::S3(S3Payloads::new(s3.clone(), &bucket, LIMIT)));
    let pointer = |bucket: &str, key: &str, size: u64| {
        serde_json::json!({"bucket": bucket, "key": key, "size": size}).to_string()
    };

    let ok = outcome(&app, POINTER_S3, &pointer(&bucket, "payloads/ok", 1_000)).await;
    assert_eq!(ok, (Decision::Ack, "charged".to_owned()));
    assert_eq!(
        outcome(&app, POINTER_S3, &pointer(&bucket, "payloads/missing", 10)).await,
        (Decision::Poison, "payload_missing".to_owned())
    );
    assert_eq!(
        outcome(&app, POINTER_S3, &pointer(&bucket, "payloads/ok", 999)).await,
        (Decision::Poison, "payload_invalid".to_owned()),
        "a size that does not match the pointer"
    );
    assert_eq!(
        outcome(
            &app,
            POINTER_S3,
            &pointer(&bucket, "payloads/ok", LIMIT + 1)
        )
        .await,
        (Decision::Poison, "payload_invalid".to_owned()),
        "larger than the limit"
    );
    assert_eq!(
        outcome(
            &app,
            POINTER_S3,
            &pointer("someone-elses", "payloads/ok", 1_000)
        )
        .await,
        (Decision::Poison, "payload_invalid".to_owned()),
        "another bucket"
    );
    assert_eq!(
        outcome(&app, "ftp", &pointer(&bucket, "payloads/ok", 1_000)).await,
        (Decision::Poison, "payload_invalid".to_owned()),
        "an unknown pointer kind"
    );

    // S3 unreachable: RETRY, nothing charged.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let dead = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let unreachable = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk_config(&dead))
            .force_path_style(true)
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
            .build(),
    );
    let app = self::app(Payloads::S3(S3Payloads::new(unreachable, &bucket, LIMIT)));
    assert_eq!(
        outcome(&app, POINTER_S3, &pointer(&bucket, "payloads/other", 1_000)).await,
        (Decision::Retry, "payload_unavailable".to_owned())
    );
    assert_eq!(app.ports().gateway.effective_charges(), 0);

    // Without the claim check configured, a pointer is POISON (to be redriven once it is on).
    let disabled = self::app(Payloads::Disabled);
    assert_eq!(
        outcome(
            &disabled,
            POINTER_S3,
            &pointer(&bucket, "payloads/ok", 1_000)
        )
        .await,
        (Decision::Poison, "payload_invalid".to_owned())
    );
}
