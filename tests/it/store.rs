//! The function on the DynamoDB store against dynoxide, a DynamoDB-compatible server embedded in
//! this test process: outages, start-up, and the requests each path costs. (The store contract
//! runs in the idempotency crate's own tests.)

use std::sync::Arc;

use idempotency::testkit::{RETENTION, claim, t0};
use idempotency::{DynamoDbStore, IdempotencyStore};
use lambda_kit::clock::{Clock, ManualClock};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::money::Currency;
use process_orders::order::decode_order;
use process_orders::testkit::dynamo::{Dynoxide, client, create_table, unique_table};
use process_orders::testkit::failed_ids;
use process_orders::testkit::ports::{Script, ScriptedGateway};
use serde_json::json;

/// A fresh store on a fresh embedded server; the server lives as long as the test process.
async fn store() -> DynamoDbStore {
    let server = Dynoxide::start().await;
    let (client, _) = client(&server.endpoint());
    let table = unique_table();
    create_table(&client, &table).await;
    std::mem::forget(server);
    DynamoDbStore::new(client, table, RETENTION)
}

/// The store contract on the function's own store client (`aws::dynamodb_direct`, its requests
/// sent by hyper directly: `aws::HyperTransport`), on a fresh embedded server.
mod shipped_client {
    use super::*;
    use process_orders::aws;
    use process_orders::testkit::dynamo::TEST_SDK;

    /// The function's store on `table` at `endpoint`.
    fn shipped(endpoint: &str, table: &str) -> DynamoDbStore {
        let direct = aws::dynamodb_direct(&aws::local_config(endpoint), &TEST_SDK)
            .expect("a region and credentials");
        DynamoDbStore::direct(direct, table, RETENTION)
    }

    async fn store() -> DynamoDbStore {
        let server = Dynoxide::start().await;
        let (client, _) = client(&server.endpoint());
        let table = unique_table();
        create_table(&client, &table).await;
        let store = shipped(&server.endpoint(), &table);
        std::mem::forget(server);
        store
    }

    idempotency::store_contract_tests!(store());

    /// A finishing write whose answer a resetting proxy lost is retried and met as its own.
    #[tokio::test]
    async fn a_finishing_write_whose_answer_was_lost_is_its_own() {
        let server = Dynoxide::start().await;
        let (client, _) = client(&server.endpoint());
        let table = unique_table();
        create_table(&client, &table).await;
        idempotency::testkit::dynamodb::a_finishing_write_whose_answer_was_lost_is_its_own_via(
            &server.endpoint(),
            &table,
            idempotency::testkit::dynoxide::Via::Store(shipped),
        )
        .await;
    }
}

fn event(orders: &[(&str, &str, f64)]) -> String {
    let records: Vec<_> = orders
        .iter()
        .map(|(id, order, amount)| {
            json!({ "messageId": id, "body": json!({ "order_id": order, "amount": amount }).to_string() })
        })
        .collect();
    json!({ "Records": records }).to_string()
}

type DynamoApp = App<DynamoDbStore, Arc<ScriptedGateway>, ManualClock>;

fn app(store: DynamoDbStore, clock: &ManualClock) -> (DynamoApp, Arc<ScriptedGateway>) {
    let gateway = Arc::new(ScriptedGateway::default());
    let config = Config::from_lookup(|_| None).expect("defaults");
    (
        App::with_ports(&config, store, Arc::clone(&gateway), clock.clone()),
        gateway,
    )
}

async fn handle(app: &DynamoApp, clock: &ManualClock, json: &str) -> Vec<String> {
    let response = app
        .handle_json(json, clock.now_ms() + 60_000)
        .await
        .expect("handled");
    failed_ids(&response)
}

/// DynamoDB requests per record on each path: new 2, duplicate 1, busy 1, conflict 1, payment
/// not sent 2, payment ambiguous 2, and the redelivery of an ambiguous charge
/// 2 (the lookup is the provider's, not the table's).
#[tokio::test]
async fn each_path_costs_its_budget_of_requests() {
    let server = Dynoxide::start().await;
    let (client, requests) = client(&server.endpoint());
    let table = unique_table();
    create_table(&client, &table).await;
    let store = DynamoDbStore::new(client, &table, RETENTION);
    let clock = ManualClock::at(t0());
    let (app, gateway) = app(store.clone(), &clock);

    let measure = async |json: &str| {
        let before = requests.get();
        let failed = handle(&app, &clock, json).await;
        (requests.get() - before, failed)
    };
    let new = measure(&event(&[("m1", "new", 1.0)])).await;
    let duplicate = measure(&event(&[("m2", "new", 1.0)])).await;

    // Held elsewhere for the same order, and for another payload.
    let held = decode_order(r#"{"order_id":"held","amount":1}"#, Currency::EUR).expect("order");
    store
        .begin(&{
            let mut request = claim("held", clock.now_ms());
            request.fingerprint = held.fingerprint();
            request
        })
        .await
        .expect("held elsewhere");
    let busy = measure(&event(&[("m3", "held", 1.0)])).await;
    store
        .begin(&claim("other", clock.now_ms()))
        .await
        .expect("another payload");
    let conflict = measure(&event(&[("m6", "other", 1.0)])).await;

    gateway.script("refused", Script::NotSent);
    let not_sent = measure(&event(&[("m4", "refused", 1.0)])).await;
    gateway.script("lost", Script::Ambiguous);
    let ambiguous = measure(&event(&[("m5", "lost", 1.0)])).await;
    gateway.clear("lost");
    let redelivered = measure(&event(&[("m5", "lost", 1.0)])).await;

    // `make bench` quotes this table (--nocapture).
    eprintln!("| path | DynamoDB requests per record | budget |\n|---|---|---|");
    for (path, (requests, _), budget) in [
        ("new", &new, 2),
        ("duplicate", &duplicate, 1),
        ("busy", &busy, 1),
        ("conflict", &conflict, 1),
        ("payment not sent", &not_sent, 2),
        ("payment ambiguous", &ambiguous, 2),
        ("redelivery after an ambiguous charge", &redelivered, 2),
    ] {
        eprintln!("| {path} | {requests} | {budget} |");
    }
    assert_eq!(new, (2, vec![]));
    assert_eq!(duplicate, (1, vec![]));
    assert_eq!(busy, (1, vec!["m3".to_owned()]));
    assert_eq!(conflict, (1, vec!["m6".to_owned()]));
    assert_eq!(not_sent, (2, vec!["m4".to_owned()]));
    assert_eq!(ambiguous, (2, vec!["m5".to_owned()]));
    assert_eq!(redelivered, (2, vec![]));
}

/// A missing table is a store error: every record is RETRY and nothing is charged.
#[tokio::test]
async fn a_missing_table_retries_everything() {
    let server = Dynoxide::start().await;
    let (client, _) = client(&server.endpoint());
    let store = DynamoDbStore::new(client, "no-such-table", RETENTION);
    let clock = ManualClock::at(t0());
    let (app, gateway) = app(store, &clock);
    let failed = handle(
        &app,
        &clock,
        &event(&[("m1", "o-1", 1.0), ("m2", "o-2", 2.0)]),
    )
    .await;
    assert_eq!(failed, ["m1", "m2"]);
    assert_eq!(gateway.inner.requests(), 0);
}

/// The server stops mid-run: RETRY for every record, nothing ACKed; once it is back, the same
/// app (same client) serves the next invocation normally.
#[tokio::test]
async fn a_stopped_server_retries_everything_and_the_function_recovers() {
    let mut server = Dynoxide::start().await;
    let (client, _) = client(&server.endpoint());
    let table = unique_table();
    create_table(&client, &table).await;
    let clock = ManualClock::at(t0());
    let (app, gateway) = app(DynamoDbStore::new(client, &table, RETENTION), &clock);
    assert!(
        handle(&app, &clock, &event(&[("m0", "o-0", 1.0)]))
            .await
            .is_empty()
    );

    server.stop().await;
    let json = event(&[("m1", "o-1", 1.0), ("m2", "o-2", 2.0)]);
    assert_eq!(handle(&app, &clock, &json).await, ["m1", "m2"]);
    assert!(!gateway.inner.charged("o-1") && !gateway.inner.charged("o-2"));

    server.restart().await;
    assert!(handle(&app, &clock, &json).await.is_empty());
    assert_eq!(gateway.inner.effective_charges(), 3);
}

/// Building the function opens no connection; the first invocation does.
#[tokio::test]
async fn start_up_makes_no_network_call() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(socket);
        }
    });
    let (client, _) = client(&endpoint);
    let clock = ManualClock::at(t0());
    let (app, _) = app(DynamoDbStore::new(client, "t", RETENTION), &clock);
    tokio::task::yield_now().await;
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 0);
    // The listener drops every connection, so the record is RETRY (a store error).
    assert_eq!(
        handle(&app, &clock, &event(&[("m1", "o-1", 1.0)])).await,
        ["m1"]
    );
    assert!(accepted.load(std::sync::atomic::Ordering::SeqCst) > 0);
}

/// 64 concurrent deliveries of one order through the function: exactly one charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deliveries_of_one_order_charge_once() {
    let store = store().await;
    let clock = ManualClock::at(t0());
    let (app, gateway) = app(store, &clock);
    let app = Arc::new(app);
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (app, clock) = (Arc::clone(&app), clock.clone());
            tokio::spawn(async move {
                handle(&app, &clock, &event(&[(&format!("m{i}"), "hot", 5.0)])).await
            })
        })
        .collect();
    let mut acked = 0;
    for task in tasks {
        if task.await.unwrap().is_empty() {
            acked += 1;
        }
    }
    assert_eq!(gateway.inner.effective_charges(), 1);
    assert_eq!(gateway.inner.requests(), 1);
    assert!(acked >= 1);
    // Every later delivery is a duplicate.
    assert!(
        handle(&app, &clock, &event(&[("late", "hot", 5.0)]))
            .await
            .is_empty()
    );
}

/// A table shared with the email example: the order id `email-once#u-1` and the email
/// function's user `u-1` (stored as `email-once#u-1` under its default prefix) are two items,
/// because orders get a prefix of their own by default. Without one they were the same item,
/// and the second claim was refused as another payload.
#[tokio::test]
async fn an_order_id_never_meets_another_functions_key_in_a_shared_table() {
    let server = Dynoxide::start().await;
    let (client, _) = client(&server.endpoint());
    let table = unique_table();
    create_table(&client, &table).await;
    let config = Config::from_lookup(|_| None).expect("defaults");
    let orders = DynamoDbStore::new(client.clone(), &table, RETENTION)
        .with_key_prefix(&config.store.key_prefix);
    let emails = DynamoDbStore::new(client, &table, RETENTION).with_key_prefix("email-once#");
    let order = {
        let mut request = claim("email-once#u-1", t0());
        request.fingerprint = idempotency::Fingerprint::of(&[b"an order"]);
        request
    };
    let email = {
        let mut request = claim("u-1", t0());
        request.fingerprint = idempotency::Fingerprint::of(&[b"an email"]);
        request
    };
    assert!(matches!(
        orders.begin(&order).await,
        Ok(idempotency::store::Begin::Started { .. })
    ));
    assert!(
        matches!(
            emails.begin(&email).await,
            Ok(idempotency::store::Begin::Started { .. })
        ),
        "the email function's key was taken by an order"
    );
}
