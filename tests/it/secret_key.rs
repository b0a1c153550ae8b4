//! The payment API key from Secrets Manager, against moto's Secrets Manager and the provider
//! stub: read at the first charge (never at start-up), kept, read again after a 401 when the key
//! was rotated, and never logged. A secret that cannot be read is RETRY, never POISON.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_secretsmanager::Client;
use idempotency::MemoryStore;
use lambda_kit::clock::SystemClock;
use process_orders::app::App;
use process_orders::aws;
use process_orders::config::Config;
use process_orders::metrics::MetricsSink;
use process_orders::payment::http::{HttpGateway, HttpSettings};
use process_orders::payment::key::secrets_manager::SecretsManagerKey;
use process_orders::payment::key::{FetchFuture, KeySource};
use process_orders::payment::{ApiKey, KeySetting};
use process_orders::testkit::dynamo::{MOTO_SDK, moto_endpoint};
use process_orders::testkit::failed_ids;
use process_orders::testkit::logs::LogCapture;
use process_orders::testkit::payment_stub::PaymentStub;
use serde_json::json;
use sqs_batch::processor::{Decision, RecordStatus};

/// Recognisable key values: none may reach the logs.
const KEY_1: &str = "sk_live_MARKER_one_4711";
const KEY_2: &str = "sk_live_MARKER_two_4712";

type TestApp = App<MemoryStore, HttpGateway, SystemClock>;

/// The secret reader the function builds, counting its reads.
#[derive(Debug)]
struct Counting {
    inner: SecretsManagerKey,
    reads: Arc<AtomicUsize>,
}

impl KeySource for Counting {
    fn fetch(&self) -> FetchFuture<'_> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.fetch()
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

fn secrets_client() -> Client {
    let config =
        aws_sdk_secretsmanager::config::Builder::from(&aws::local_config(&moto_endpoint()))
            .retry_config(MOTO_SDK.retry_config())
            .timeout_config(MOTO_SDK.timeout_config())
            .build();
    Client::from_conf(config)
}

fn unique(name: &str) -> String {
    format!("{name}-{}", fastrand::u64(..))
}

/// A new secret holding `value`; its name.
async fn create_secret(secrets: &Client, value: &str) -> String {
    let secret_id = unique("payment-api-key");
    secrets
        .create_secret()
        .name(&secret_id)
        .secret_string(value)
        .send()
        .await
        .expect("create secret");
    secret_id
}

/// The function on `stub`, its key read from `secret_id` on `endpoint`; the reads are counted
/// and the metrics documents kept.
fn app(
    stub: &PaymentStub,
    endpoint: &str,
    secret_id: &str,
) -> (TestApp, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
    let config = Config::from_lookup(|_| None).expect("defaults");
    let settings = HttpSettings {
        base_url: stub.url().parse().expect("url"),
        api_key: KeySetting::SecretsManager {
            secret_id: secret_id.to_owned(),
        },
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_secs(5),
        retryable_failures: process_orders::payment::answers::RetryableFailures::default(),
    };
    let reads = Arc::new(AtomicUsize::new(0));
    let source = Counting {
        inner: SecretsManagerKey::with_settings(aws::local_config(endpoint), secret_id, MOTO_SDK),
        reads: Arc::clone(&reads),
    };
    let gateway =
        HttpGateway::with_key(&settings, ApiKey::stored(Box::new(source))).expect("gateway");
    let docs: Arc<Mutex<Vec<String>>> = Arc::default();
    let app = App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        gateway,
        SystemClock,
    )
    .with_metrics_sink(MetricsSink::Memory(Arc::clone(&docs)));
    (app, reads, docs)
}

fn event(orders: &[&str]) -> String {
    let records: Vec<_> = orders
        .iter()
        .map(|order| {
            json!({
                "messageId": format!("m-{order}"),
                "body": json!({ "order_id": order, "amount": 10 }).to_string(),
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
            })
        })
        .collect();
    json!({ "Records": records }).to_string()
}

/// One invocation: the failed ids and each record's (outcome, reason).
async fn invoke(app: &TestApp, json: &str) -> (Vec<String>, Vec<(Decision, &'static str)>) {
    let event = sqs_batch::edge::parse_event(json).expect("event");
    let deadline = lambda_kit::Clock::now_ms(&SystemClock) + 60_000;
    let (response, report) = app
        .handle_with_report(&event, deadline)
        .await
        .expect("handled");
    let outcomes = report
        .statuses
        .iter()
        .map(|status| match status {
            RecordStatus::Handled(v) => (v.outcome, v.reason),
            other => panic!("not handled: {other:?}"),
        })
        .collect();
    (failed_ids(&response), outcomes)
}

/// The last invocation's document (the container's cold start writes one of its own).
fn last_metrics(docs: &Mutex<Vec<String>>) -> serde_json::Value {
    let docs = docs.lock().unwrap();
    let last = docs
        .iter()
        .rev()
        .find(|d| !d.contains("\"ColdStart\""))
        .expect("a metrics document");
    serde_json::from_str(last).unwrap()
}

/// The first charge reads the secret (start-up does not); later charges use the kept key. The
/// key is rotated (a new `PutSecretValue`, the provider switched to it): one charge gets 401, the
/// secret is read again, the charge is retried with the new key and succeeds in the same
/// invocation. No value reaches the logs, even at TRACE.
#[tokio::test]
async fn the_first_charge_reads_the_secret_and_a_rotation_heals_after_one_401() {
    let (logs, _guard) = LogCapture::start();
    let secrets = secrets_client();
    let secret_id = create_secret(&secrets, &json!({ "api_key": KEY_1 }).to_string()).await;
    let stub = PaymentStub::start().await;
    stub.require_api_key(Some(KEY_1));
    let (app, reads, docs) = app(&stub, &moto_endpoint(), &secret_id);
    assert_eq!(reads.load(Ordering::SeqCst), 0, "start-up reads nothing");

    let (failed, _) = invoke(&app, &event(&["o-1", "o-2", "o-3"])).await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(reads.load(Ordering::SeqCst), 1, "one read for the batch");
    let (failed, _) = invoke(&app, &event(&["o-4"])).await;
    assert!(failed.is_empty());
    assert_eq!(reads.load(Ordering::SeqCst), 1, "kept for the container");

    // Rotation: the secret's new value, and the provider accepts only it.
    secrets
        .put_secret_value()
        .secret_id(&secret_id)
        .secret_string(KEY_2)
        .send()
        .await
        .expect("rotate");
    stub.require_api_key(Some(KEY_2));
    let (failed, outcomes) = invoke(&app, &event(&["o-5"])).await;
    assert!(
        failed.is_empty(),
        "healed in the same invocation: {outcomes:?}"
    );
    assert_eq!(outcomes, [(Decision::Ack, "charged")]);
    assert_eq!(
        stub.answers("o-5"),
        [401, 201],
        "one 401, then the retried charge"
    );
    assert_eq!(stub.charges("o-5"), 1);
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    let doc = last_metrics(&docs);
    assert_eq!(doc["PaymentKeyRefreshes"], json!(1.0), "{doc}");
    assert_eq!(doc["PaymentConfigErrors"], json!(0.0), "{doc}");

    let (failed, _) = invoke(&app, &event(&["o-6", "o-7"])).await;
    assert!(failed.is_empty());
    assert_eq!(stub.answered(401), 1, "the new key is kept");
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert_eq!(last_metrics(&docs)["PaymentKeyRefreshes"], json!(0.0));
    assert_eq!(stub.total_charges(), 7);

    let text = logs.text();
    for line in [
        "payment API key read",
        "reading the secret again",
        "retrying the call",
    ] {
        let found = logs.lines_with(line);
        assert!(!found.is_empty(), "no log line with {line:?}:\n{text}");
        for line in found {
            eprintln!("{line}");
        }
    }
    let reread = logs.lines_with(r#""message":"payment API key read again""#);
    assert_eq!(reread.len(), 1, "{text}");
    assert!(reread[0].contains(r#""api_key":"***""#), "{}", reread[0]);
    assert!(reread[0].contains(r#""changed":true"#), "{}", reread[0]);
    let retried = logs.lines_with("retrying the call");
    assert!(retried[0].contains(r#""order_id":"o-5""#), "{}", retried[0]);
    for key in [KEY_1, KEY_2, "MARKER"] {
        assert!(!text.contains(key), "the key leaked into the logs:\n{text}");
    }
    for doc in docs.lock().unwrap().iter() {
        assert!(!doc.contains("MARKER"), "the key is in a metric: {doc}");
    }
}

/// A secret that does not exist is our configuration: RETRY with `payment_config` (the metric
/// and its alarm), the provider never called, and the secret asked once per invocation.
#[tokio::test]
async fn an_unknown_secret_is_retry_with_a_configuration_reason() {
    let stub = PaymentStub::start().await;
    let (app, reads, docs) = app(&stub, &moto_endpoint(), &unique("no-such-secret"));
    for invocation in 1..=2 {
        let (failed, outcomes) = invoke(&app, &event(&["o-1", "o-2"])).await;
        assert_eq!(failed.len(), 2);
        assert!(
            outcomes
                .iter()
                .all(|o| *o == (Decision::Retry, "payment_config")),
            "{outcomes:?}"
        );
        assert_eq!(reads.load(Ordering::SeqCst), invocation);
        assert_eq!(last_metrics(&docs)["PaymentConfigErrors"], json!(2.0));
    }
    assert_eq!(stub.all_requests(), 0);
}

/// A value that is not a key is a configuration error too, logged once per container with what
/// is wrong and never the value; once the value is fixed the next invocation charges.
#[tokio::test]
async fn a_secret_that_holds_no_key_is_a_configuration_error_logged_once() {
    let (logs, _guard) = LogCapture::start();
    let secrets = secrets_client();
    let secret_id = create_secret(&secrets, &json!({ "apiKey": KEY_1 }).to_string()).await;
    let stub = PaymentStub::start().await;
    stub.require_api_key(Some(KEY_1));
    let (app, _, _) = app(&stub, &moto_endpoint(), &secret_id);
    for _ in 0..2 {
        let (failed, outcomes) = invoke(&app, &event(&["o-1"])).await;
        assert_eq!(failed.len(), 1);
        assert_eq!(outcomes, [(Decision::Retry, "payment_config")]);
    }
    let unusable = logs.lines_with("secret is unusable");
    assert_eq!(unusable.len(), 1, "{}", logs.text());
    assert!(unusable[0].contains("api_key"), "{}", unusable[0]);
    assert!(!logs.text().contains("MARKER"));

    secrets
        .put_secret_value()
        .secret_id(&secret_id)
        .secret_string(json!({ "api_key": KEY_1 }).to_string())
        .send()
        .await
        .expect("fix");
    let (failed, _) = invoke(&app, &event(&["o-1"])).await;
    assert!(failed.is_empty());
    assert_eq!(stub.charges("o-1"), 1);
}

/// Secrets Manager does not answer (here: nothing listens): a plain RETRY, not a configuration
/// error and never POISON; nothing is sent to the provider.
#[tokio::test]
async fn an_unreachable_secrets_manager_is_a_plain_retry() {
    let stub = PaymentStub::start().await;
    let endpoint = process_orders::testkit::payment_stub::refusing_endpoint();
    let (app, reads, docs) = app(&stub, &endpoint, "payment-api-key");
    let (failed, outcomes) = invoke(&app, &event(&["o-1", "o-2"])).await;
    assert_eq!(failed.len(), 2);
    assert!(
        outcomes
            .iter()
            .all(|o| *o == (Decision::Retry, "payment_not_sent")),
        "{outcomes:?}"
    );
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    assert_eq!(last_metrics(&docs)["PaymentConfigErrors"], json!(0.0));
    assert_eq!(stub.all_requests(), 0);
}
