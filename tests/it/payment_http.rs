//! The HTTP payment gateway against a real local HTTP server that applies idempotency keys as a
//! provider does: every classification, the headers, a crash between charge and completion, and
//! the same order delivered twice while the first charge is in flight.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idempotency::{
    IdempotencyStore, MemoryStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
};
use lambda_kit::clock::{Clock, ManualClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::money::{Currency, Money};
use process_orders::payment::http::{HttpGateway, HttpSettings};
use process_orders::payment::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway};
use process_orders::payment::{KeySetting, Secret};
use process_orders::testkit::failed_ids;
use process_orders::testkit::payment_stub::{
    Behaviour, PaymentStub, refusing_endpoint, resetting_endpoint,
};
use serde_json::json;

const T0: u64 = 1_767_225_600_000;

fn settings(url: &str, api_key: Option<&str>) -> HttpSettings {
    HttpSettings {
        base_url: url.parse().expect("url"),
        api_key: api_key.map_or(KeySetting::None, |k| KeySetting::Value(Secret::new(k))),
        connect_timeout: Duration::from_millis(500),
        timeout: Duration::from_millis(800),
        retryable_failures: process_orders::payment::answers::RetryableFailures::default(),
    }
}

fn eur(amount: &str) -> Money {
    Money::parse(amount, Currency::EUR).expect("amount")
}

fn gateway(url: &str) -> HttpGateway {
    HttpGateway::new(&settings(url, None)).expect("gateway")
}

async fn charge(gateway: &HttpGateway, order_id: &str) -> Result<(), PaymentError> {
    gateway
        .charge(&ChargeRequest {
            order_id,
            amount: eur("10"),
            idempotency_key: order_id,
        })
        .await
}

async fn lookup(gateway: &HttpGateway, order_id: &str) -> Result<ChargeStatus, PaymentError> {
    gateway
        .lookup(&ChargeRequest {
            order_id,
            amount: eur("10"),
            idempotency_key: order_id,
        })
        .await
}

fn kind(result: &Result<(), PaymentError>) -> &'static str {
    match result {
        Ok(()) => "charged",
        Err(PaymentError::NotSent { .. }) => "not sent",
        Err(PaymentError::Ambiguous { .. }) => "ambiguous",
        Err(PaymentError::InFlight { .. }) => "in flight",
        Err(PaymentError::Declined { .. }) => "declined",
        Err(PaymentError::KeyReused { .. }) => "key reused",
        Err(PaymentError::Misconfigured { .. }) => "misconfigured",
        Err(PaymentError::Refused { .. }) => "refused",
        Err(PaymentError::Failed { .. }) => "failed",
    }
}

#[tokio::test]
async fn a_2xx_is_charged_once_per_key_and_a_replay_answers_the_same() {
    let stub = PaymentStub::start().await;
    let g = gateway(&stub.url());
    charge(&g, "o-1").await.expect("first");
    charge(&g, "o-1")
        .await
        .expect("replay answers the original charge");
    assert_eq!((stub.requests("o-1"), stub.charges("o-1")), (2, 1));
    assert_eq!(stub.answers("o-1"), [201, 201]);
}

/// A second request while the first is still being processed gets 409: in flight, never
/// charged, with the provider's Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_409_for_a_key_in_flight_is_in_flight_never_charged() {
    let stub = PaymentStub::start().await;
    stub.set("o-1", Behaviour::Slow(Duration::from_millis(600)));
    let g = Arc::new(gateway(&stub.url()));
    let first = tokio::spawn({
        let g = Arc::clone(&g);
        async move { charge(&g, "o-1").await }
    });
    stub.in_flight("o-1").await;
    match charge(&g, "o-1").await {
        Err(PaymentError::InFlight { retry_after }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(1)))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(stub.answers("o-1"), [409]);
    first.await.unwrap().expect("the first request charges");
    assert_eq!(stub.charges("o-1"), 1);
}

/// A 2xx that is not the provider's JSON (a proxy's page), one whose body breaks off, one too
/// large to read, and one whose body is still coming when the call's timeout (800 ms here) ends
/// prove nothing: ambiguous, and the lookup then finds the charge.
#[tokio::test]
async fn a_2xx_that_cannot_be_read_is_ambiguous_and_the_lookup_finds_the_charge() {
    let stub = PaymentStub::start().await;
    let g = gateway(&stub.url());
    for (key, behaviour) in [
        ("o-1", Behaviour::NotJson),
        ("o-2", Behaviour::ChargeThenBreak),
        ("o-3", Behaviour::ChargeThenHugeBody),
        ("o-4", Behaviour::ChargeThenStall(Duration::from_secs(3))),
    ] {
        stub.set(key, behaviour);
        assert_eq!(kind(&charge(&g, key).await), "ambiguous", "{key}");
        assert_eq!(stub.charges(key), 1);
        assert_eq!(
            lookup(&g, key).await.expect("lookup"),
            ChargeStatus::Succeeded
        );
    }
}

#[tokio::test]
async fn timeouts_408_429_and_5xx_are_ambiguous() {
    let stub = PaymentStub::start().await;
    let g = gateway(&stub.url());
    for code in [408, 429, 500, 502, 503, 504] {
        let key = format!("o-{code}");
        stub.set(&key, Behaviour::Status(code));
        assert_eq!(kind(&charge(&g, &key).await), "ambiguous", "{code}");
    }
    stub.set("o-1", Behaviour::ChargeThen504);
    assert_eq!(kind(&charge(&g, "o-1").await), "ambiguous");
    assert_eq!(stub.total_charges(), 1, "only the charge-then-504 charged");
}

/// A decline is declined, and replayed as such; a key reused with another payload is refused;
/// credentials and URL errors are configuration, never a decline.
#[tokio::test]
async fn declines_reused_keys_and_configuration_errors_are_told_apart() {
    let stub = PaymentStub::start().await;
    let g = gateway(&stub.url());
    stub.set("o-402", Behaviour::Decline);
    for _ in 0..2 {
        match charge(&g, "o-402").await {
            Err(PaymentError::Declined { status, reason }) => {
                assert_eq!(
                    (status, reason.as_str()),
                    (Some(402), "card declined (card_declined)")
                )
            }
            other => panic!("{other:?}"),
        }
    }
    charge(&g, "o-1").await.expect("charged");
    let reused = g
        .charge(&ChargeRequest {
            order_id: "o-1",
            amount: eur("11"),
            idempotency_key: "o-1",
        })
        .await;
    assert_eq!(kind(&reused), "key reused");
    for code in [401, 403, 404, 405, 407] {
        let key = format!("o-{code}");
        stub.set(&key, Behaviour::Status(code));
        match charge(&g, &key).await {
            Err(PaymentError::Misconfigured { status, .. }) => assert_eq!(status, Some(code)),
            other => panic!("{code}: {other:?}"),
        }
    }
    stub.require_api_key(Some("sk_right"));
    assert_eq!(kind(&charge(&g, "o-2").await), "misconfigured");
}

#[tokio::test]
async fn a_slow_response_trips_the_timeout_and_is_ambiguous() {
    let stub = PaymentStub::start().await;
    stub.set("o-1", Behaviour::Slow(Duration::from_secs(3)));
    let result = charge(&gateway(&stub.url()), "o-1").await;
    match &result {
        Err(PaymentError::Ambiguous { reason, .. }) => {
            assert_eq!(reason, "timed out after sending")
        }
        other => panic!("{other:?}"),
    }
}

/// Refused means nothing was sent; a reset after connecting may have been read.
#[tokio::test]
async fn a_refused_connection_is_not_sent_and_a_reset_is_ambiguous() {
    assert_eq!(
        kind(&charge(&gateway(&refusing_endpoint()), "o-1").await),
        "not sent"
    );
    assert_eq!(
        kind(&charge(&gateway(&resetting_endpoint().await), "o-1").await),
        "ambiguous"
    );
}

/// The lookup tells what became of a key: unknown (the provider's own 404), succeeded, failed;
/// a charge under the key for another amount is not this order's; and a provider that cannot
/// answer (refused, a bare or foreign 404) is an error, never "unknown".
/// The gateway trusts the compiled-in roots only: a certificate none of them signed (a
/// self-signed one here, as a wrong URL or a provider's broken chain would present) is refused
/// in the handshake. That is a configuration error, and nothing was sent.
#[tokio::test]
async fn a_certificate_no_trusted_root_signed_is_a_configuration_error() {
    let url = process_orders::testkit::payment_stub::self_signed_endpoint().await;
    let result = charge(&gateway(&url), "o-1").await;
    match &result {
        Err(PaymentError::Misconfigured {
            status: None,
            reason,
        }) => assert!(reason.contains("certificate"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        result.expect_err("refused").effect(),
        idempotency::guard::Effect::None
    );
}

#[tokio::test]
async fn the_lookup_tells_what_became_of_a_key() {
    let stub = PaymentStub::start().await;
    let g = gateway(&stub.url());
    assert_eq!(
        lookup(&g, "o/1 ?#").await.expect("lookup"),
        ChargeStatus::Unknown
    );
    charge(&g, "o/1 ?#").await.expect("charged");
    assert_eq!(
        lookup(&g, "o/1 ?#").await.expect("lookup"),
        ChargeStatus::Succeeded
    );
    let other_amount = g
        .lookup(&ChargeRequest {
            order_id: "o/1 ?#",
            amount: eur("99"),
            idempotency_key: "o/1 ?#",
        })
        .await;
    assert_eq!(
        other_amount.expect("answered"),
        ChargeStatus::Conflict,
        "another amount under the key is not this order's charge"
    );
    stub.set("o-2", Behaviour::Decline);
    let _ = charge(&g, "o-2").await;
    assert_eq!(
        lookup(&g, "o-2").await.expect("lookup"),
        ChargeStatus::Declined
    );
    assert_eq!(stub.lookups("o-2"), 1);
    assert!(lookup(&gateway(&refusing_endpoint()), "o-1").await.is_err());
    // A route the provider does not have: axum's bare 404.
    let missing_route = gateway(&format!("http://{}/elsewhere", stub.addr));
    assert!(lookup(&missing_route, "o-1").await.is_err());
    stub.set_lookup_available(false);
    assert!(matches!(
        lookup(&g, "o-2").await,
        Err(PaymentError::Ambiguous { .. })
    ));
}

#[tokio::test]
async fn the_request_carries_the_key_the_body_and_the_bearer_token() {
    let stub = PaymentStub::start().await;
    let with_key = HttpGateway::new(&settings(&stub.url(), Some("sk_test_123"))).unwrap();
    with_key
        .charge(&ChargeRequest {
            order_id: "o-7",
            amount: eur("12.5"),
            idempotency_key: "o-7",
        })
        .await
        .expect("charged");
    charge(&gateway(&stub.url()), "o-8").await.expect("charged");
    assert_eq!(stub.requests("o-7"), 1);
    assert_eq!(
        stub.bodies()[0],
        json!({ "order_id": "o-7", "amount": 1250, "currency": "EUR" })
    );
    assert_eq!(
        stub.authorization(),
        [Some("Bearer sk_test_123".to_owned()), None]
    );
}

fn event(orders: &[(&str, &str)]) -> String {
    let records: Vec<_> = orders
        .iter()
        .map(|(id, order)| json!({ "messageId": id, "body": json!({ "order_id": order, "amount": 10 }).to_string() }))
        .collect();
    json!({ "Records": records }).to_string()
}

/// The memory store, except that `complete` never returns: the process "dies" after the charge.
struct CrashOnComplete(Arc<MemoryStore>, std::sync::atomic::AtomicBool);

impl IdempotencyStore for CrashOnComplete {
    fn begin(
        &self,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Begin, StoreError>> + Send {
        self.0.begin(request)
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        if self.1.swap(false, std::sync::atomic::Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.0.complete(key, lease, now_ms, output).await
    }

    fn release(
        &self,
        key: &str,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.release(key, lease)
    }
}

impl idempotency::guard::EffectStore for CrashOnComplete {
    fn mark_attempted(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.mark_attempted(key, lease, now_ms)
    }

    fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.reject(key, lease, now_ms, reason)
    }
}

/// Charge succeeds, `complete` never happens, the lease runs out: the retry looks the key up,
/// finds the charge, completes without charging again, and the order ends ACKed.
#[tokio::test]
async fn a_crash_between_charge_and_complete_still_charges_once() {
    let stub = PaymentStub::start().await;
    let config = Config::from_lookup(|_| None).unwrap();
    let store = CrashOnComplete(
        Arc::new(MemoryStore::new(config.store.retention)),
        true.into(),
    );
    let clock = ManualClock::at(T0);
    let app = App::with_ports(&config, store, gateway(&stub.url()), clock.clone());
    let json = event(&[("m1", "o-1")]);

    // The invocation is abandoned mid-flight: its state is dropped with the future.
    let crashed = tokio::time::timeout(
        Duration::from_millis(500),
        app.handle_json(&json, T0 + 60_000),
    )
    .await;
    assert!(
        crashed.is_err(),
        "the first invocation must hang in complete"
    );
    assert_eq!((stub.requests("o-1"), stub.charges("o-1")), (1, 1));

    // While the lease lives, the redelivery is BUSY: never ACK.
    let busy = app.handle_json(&json, T0 + 60_000).await.unwrap();
    assert_eq!(failed_ids(&busy), ["m1"]);

    clock.advance_ms(config.lease.lease_ms + config.lease.margin_ms + 60_001);
    let retried = app
        .handle_json(&json, clock.now_ms() + 60_000)
        .await
        .unwrap();
    assert!(failed_ids(&retried).is_empty());
    assert_eq!((stub.requests("o-1"), stub.charges("o-1")), (1, 1));
    assert_eq!(stub.lookups("o-1"), 1);
}

/// Order `o-1` as message `m1`, handled in the background: each test's first delivery.
fn first_delivery<S>(
    app: &Arc<App<S, HttpGateway, ManualClock>>,
) -> tokio::task::JoinHandle<sqs_batch::edge::SqsBatchResponse>
where
    S: idempotency::guard::EffectStore + 'static,
{
    let app = Arc::clone(app);
    tokio::spawn(async move {
        app.handle_json(&event(&[("m1", "o-1")]), T0 + 60_000)
            .await
            .unwrap()
    })
}

/// The same order delivered twice to two containers while the first charge is in flight: one
/// charge; the second container meets the first's live claim and retries later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_order_twice_in_flight_in_two_containers_is_charged_once() {
    let stub = PaymentStub::start().await;
    stub.set("o-1", Behaviour::Slow(Duration::from_millis(300)));
    let config = Config::from_lookup(|_| None).unwrap();
    let clock = ManualClock::at(T0);
    let store = Arc::new(MemoryStore::new(config.store.retention));
    let container = || {
        Arc::new(App::with_ports(
            &config,
            Arc::clone(&store),
            gateway(&stub.url()),
            clock.clone(),
        ))
    };
    let (app, other) = (container(), container());
    let first = first_delivery(&app);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = other
        .handle_json(&event(&[("m2", "o-1")]), T0 + 60_000)
        .await
        .unwrap();
    assert_eq!(
        failed_ids(&second),
        ["m2"],
        "the second delivery is BUSY, retried later"
    );
    assert!(failed_ids(&first.await.unwrap()).is_empty());
    assert_eq!((stub.requests("o-1"), stub.charges("o-1")), (1, 1));
    // Its redelivery is then a duplicate.
    let again = other
        .handle_json(&event(&[("m2", "o-1")]), T0 + 60_000)
        .await
        .unwrap();
    assert!(failed_ids(&again).is_empty());
    assert_eq!(stub.requests("o-1"), 1);
}

/// The same order twice in one process while the first charge is in flight (a worker's two
/// batches, or one batch): the second waits its turn and is acknowledged as a duplicate, with
/// one charge and no redelivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_order_twice_in_flight_in_one_process_waits_its_turn() {
    let stub = PaymentStub::start().await;
    stub.set("o-1", Behaviour::Slow(Duration::from_millis(300)));
    let config = Config::from_lookup(|_| None).unwrap();
    let app = Arc::new(App::with_ports(
        &config,
        MemoryStore::new(config.store.retention),
        gateway(&stub.url()),
        ManualClock::at(T0),
    ));
    let first = first_delivery(&app);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = app
        .handle_json(&event(&[("m2", "o-1")]), T0 + 60_000)
        .await
        .unwrap();
    assert!(
        failed_ids(&second).is_empty(),
        "acknowledged as a duplicate"
    );
    assert!(failed_ids(&first.await.unwrap()).is_empty());
    assert_eq!((stub.requests("o-1"), stub.charges("o-1")), (1, 1));
    let both = app
        .handle_json(&event(&[("m3", "o-2"), ("m4", "o-2")]), T0 + 60_000)
        .await
        .unwrap();
    assert!(failed_ids(&both).is_empty(), "one batch, one key: both ACK");
    assert_eq!(stub.charges("o-2"), 1);
}

/// The real binary picks the HTTP gateway from PAYMENT_API_URL, and never prints the API key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_charges_over_http_and_never_logs_the_api_key() {
    let stub = PaymentStub::start().await;
    stub.set("o-2", Behaviour::Status(503));
    stub.set("o-4", Behaviour::Decline);
    let url = stub.url();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
            .args([
                "--event",
                concat!(env!("CARGO_MANIFEST_DIR"), "/events/standard.json"),
            ])
            .env_clear()
            .env("PAYMENT_API_URL", url)
            .env("PAYMENT_API_KEY", "sk_MARKER_never_logged")
            .env("RUST_LOG", "trace")
            // One at a time: o-1 appears twice, and concurrently its second copy could be BUSY.
            .env("SQS_BATCH_MAX_CONCURRENCY", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let response: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let failed: Vec<_> = response["batchItemFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap().to_owned())
        .collect();
    // o-2 met a 503; then not JSON, amount 0, and o-4 declined by the provider.
    assert_eq!(
        failed,
        [
            "2e1424d4-f796-459a-8184-9c92662be6da",
            "4a8b2f9e-1c3d-4e5f-8a7b-6c5d4e3f2a10",
            "5b9c3a0f-2d4e-4f60-9b8c-7d6e5f4a3b21",
            "6cad4b10-3e5f-4071-8c9d-8e7f6a5b4c32"
        ]
    );
    assert_eq!(stub.charges("o-1"), 1);
    assert_eq!(
        stub.authorization()[0].as_deref(),
        Some("Bearer sk_MARKER_never_logged")
    );
    let logs = String::from_utf8_lossy(&output.stderr);
    assert!(
        logs.contains("payment_ambiguous") && logs.contains("payment_rejected"),
        "{logs}"
    );
    assert!(!logs.contains("MARKER"), "the API key leaked into the logs");
}

#[test]
fn an_invalid_payment_url_stops_the_binary_naming_the_variable() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
        .args([
            "--event",
            concat!(env!("CARGO_MANIFEST_DIR"), "/events/empty.json"),
        ])
        .env_clear()
        .env("PAYMENT_API_URL", "ftp://nowhere")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("PAYMENT_API_URL"));
}
