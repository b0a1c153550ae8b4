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

/// `DYNAMODB_CLIENT` switches the store between its own client and the SDK's, with no code
/// change; both are held to the same behaviour on one server.
mod client_switch {
    use super::*;
    use idempotency::dynamodb::attr;
    use idempotency::guard::EffectStore as _;
    use idempotency::store::{Begin, ClaimRequest};
    use idempotency::{Fingerprint, StoreError};
    use process_orders::aws::{self, DynamoDbClient};
    use process_orders::testkit::dynamo::TEST_SDK;
    use std::collections::BTreeMap;

    const BOTH: [DynamoDbClient; 2] = [DynamoDbClient::Direct, DynamoDbClient::Sdk];

    fn store_via(which: DynamoDbClient, endpoint: &str, table: &str) -> DynamoDbStore {
        aws::dynamodb_store(
            &aws::local_config(endpoint),
            &TEST_SDK,
            which,
            table,
            RETENTION,
        )
        .expect("a region and credentials")
    }

    /// `direct` by default, `sdk` on request, anything else refused naming the variable.
    #[test]
    fn the_variable_names_the_client_and_refuses_anything_else() {
        let read = |value: Option<&'static str>| {
            Config::from_lookup(move |name| {
                (name == "DYNAMODB_CLIENT")
                    .then(|| value.map(str::to_owned))
                    .flatten()
            })
        };
        assert_eq!(
            read(None).expect("default").dynamodb_client,
            DynamoDbClient::Direct
        );
        assert_eq!(
            read(Some("direct")).expect("direct").dynamodb_client,
            DynamoDbClient::Direct
        );
        assert_eq!(
            read(Some("sdk")).expect("sdk").dynamodb_client,
            DynamoDbClient::Sdk
        );
        let refused = read(Some("SDK")).expect_err("unknown").to_string();
        assert!(refused.starts_with("DYNAMODB_CLIENT=\"SDK\""), "{refused}");
    }

    /// The function charges once and acknowledges the duplicate through either client, and the
    /// store's `Debug` names which one it writes through.
    #[tokio::test]
    async fn the_function_charges_once_through_either_client() {
        let server = Dynoxide::start().await;
        let (client, _) = client(&server.endpoint());
        for which in BOTH {
            let table = unique_table();
            create_table(&client, &table).await;
            let store = store_via(which, &server.endpoint(), &table);
            let kind = match which {
                DynamoDbClient::Direct => "\"direct\"",
                DynamoDbClient::Sdk => "\"sdk\"",
            };
            assert!(format!("{store:?}").contains(kind), "{store:?}");
            let config = Config::from_lookup(|_| None).expect("defaults");
            let gateway = Arc::new(ScriptedGateway::default());
            let app = App::with_ports(&config, store, Arc::clone(&gateway), ManualClock::at(t0()));
            let event = json!({ "Records": [
                { "messageId": "m1", "body": r#"{"order_id": "o-1", "amount": 10}"# }
            ]})
            .to_string();
            for delivery in 0..2 {
                let answer = app
                    .handle_json(&event, t0() + 60_000)
                    .await
                    .expect("an event");
                assert!(
                    failed_ids(&answer).is_empty(),
                    "{which:?}, delivery {delivery}"
                );
            }
            assert!(gateway.inner.charged("o-1"), "{which:?}");
            assert_eq!(
                gateway.inner.requests(),
                1,
                "{which:?}: the duplicate sent nothing"
            );
        }
    }

    /// `text` with every lease token (a hyphenated UUID: each claim draws a fresh one) masked.
    fn masked(text: &str) -> String {
        let is_uuid = |w: &str| {
            w.len() == 36
                && w.char_indices().all(|(i, c)| match i {
                    8 | 13 | 18 | 23 => c == '-',
                    _ => c.is_ascii_hexdigit(),
                })
        };
        let mut out = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            if rest.len() >= 36 && rest.is_char_boundary(36) && is_uuid(&rest[..36]) {
                out.push_str("<token>");
                rest = &rest[36..];
            } else {
                let c = rest.chars().next().expect("not empty");
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        out
    }

    /// What one sequence of operations came to: each answer, as text, lease tokens masked.
    async fn answers(store: &DynamoDbStore) -> Vec<String> {
        let now = t0();
        let other = Fingerprint::of(&[b"another payload"]);
        let mut out = Vec::new();
        let mut say = |what: String| out.push(masked(&what));
        let begin = |request: ClaimRequest<'static>| async move { store.begin(&request).await };
        // A fresh key, busy while held, done with its output, then a conflict for another payload.
        let Ok(Begin::Started { lease: held, .. }) = begin(claim("k-1", now)).await else {
            panic!("a fresh key starts");
        };
        say(format!("{:?}", begin(claim("k-1", now + 1)).await));
        say(format!(
            "{:?}",
            store.complete("k-1", &held, now + 2, Some("out")).await
        ));
        say(format!("{:?}", begin(claim("k-1", now + 3)).await));
        let mut conflict = claim("k-1", now + 4);
        conflict.fingerprint = other;
        say(format!("{:?}", begin(conflict).await));
        // An attempt that may have happened, taken over by its own payload, then refused for good.
        let Ok(Begin::Started { lease, .. }) = begin(claim("k-2", now)).await else {
            panic!("a fresh key starts");
        };
        say(format!(
            "{:?}",
            store.mark_attempted("k-2", &lease, now + 1).await
        ));
        let taken = begin(claim("k-2", now + 2)).await;
        say(format!("{taken:?}"));
        let Ok(Begin::Started { lease, .. }) = taken else {
            panic!("an attempted key is taken over by its payload");
        };
        say(format!(
            "{:?}",
            store.reject("k-2", &lease, now + 3, "card_declined").await
        ));
        say(format!("{:?}", begin(claim("k-2", now + 4)).await));
        // Given back, then claimed afresh; the first holder's writes are refused.
        let Ok(Begin::Started { lease: first, .. }) = begin(claim("k-3", now)).await else {
            panic!("a fresh key starts");
        };
        say(format!("{:?}", store.release("k-3", &first).await));
        let again = begin(claim("k-3", now + 1)).await;
        say(format!(
            "{:?}",
            again.as_ref().map(|b| matches!(b, Begin::Started { .. }))
        ));
        say(format!(
            "{:?}",
            matches!(
                store.complete("k-3", &first, now + 2, None).await,
                Err(StoreError::LeaseLost)
            )
        ));
        out
    }

    /// Every item of `table`, its lease token masked (each claim draws a fresh one).
    async fn items(client: &aws_sdk_dynamodb::Client, table: &str) -> BTreeMap<String, String> {
        let scanned = client
            .scan()
            .table_name(table)
            .send()
            .await
            .expect("a scan");
        scanned
            .items()
            .iter()
            .map(|item| {
                let mut item = item.clone();
                if item.contains_key(attr::LEASE_TOKEN) {
                    item.insert(
                        attr::LEASE_TOKEN.to_owned(),
                        aws_sdk_dynamodb::types::AttributeValue::S("<token>".to_owned()),
                    );
                }
                let key = format!("{:?}", item.get(attr::KEY));
                let sorted: BTreeMap<_, _> = item.into_iter().collect();
                (key, format!("{sorted:?}"))
            })
            .collect()
    }

    /// The same operations through each client, each on a table of its own on one server: the
    /// same answers and, attribute by attribute, the same items.
    #[tokio::test]
    async fn both_clients_give_the_same_answers_and_leave_the_same_items() {
        let server = Dynoxide::start().await;
        let (client, _) = client(&server.endpoint());
        let mut seen = Vec::new();
        for which in BOTH {
            let table = unique_table();
            create_table(&client, &table).await;
            let store = store_via(which, &server.endpoint(), &table);
            seen.push((which, answers(&store).await, items(&client, &table).await));
        }
        let (_, direct_answers, direct_items) = &seen[0];
        let (_, sdk_answers, sdk_items) = &seen[1];
        assert_eq!(direct_answers, sdk_answers);
        // Not two empty lists: every kind of answer the sequence asks for is there.
        let all = direct_answers.join("\n");
        for answer in [
            "Busy",
            "Done { output: Some(\"out\") }",
            "Conflict",
            "prior: Some",
            "Rejected",
        ] {
            assert!(all.contains(answer), "{answer} not in {all}");
        }
        assert!(!all.contains("Err("), "{all}");
        assert_eq!(direct_items.len(), 3, "{direct_items:#?}");
        assert_eq!(direct_items, sdk_items);
    }
}
