//! The DynamoDB store against dynoxide embedded in this test process: the store contract and the
//! DynamoDB store's own cases (an item left by the earlier version, the key prefix that keeps
//! users of a shared table apart).

use aws_sdk_dynamodb::Client;
use idempotency::DynamoDbStore;
use idempotency::dynamodb::create_table;
use idempotency::guard::EffectStore as _;
use idempotency::store_contract_tests;
use idempotency::testkit::RETENTION;
use idempotency::testkit::dynoxide::{Dynoxide, LossyProxy, Via, client_for, unique_table};
use idempotency::testkit::{claim, t0};
use idempotency::{IdempotencyStore, store::Begin};

/// A fresh table on a fresh embedded server; the server lives as long as the test process.
async fn table() -> (Client, String) {
    let server = Dynoxide::start().await;
    let client = server.client();
    let table = unique_table();
    create_table(&client, &table).await.expect("table");
    std::mem::forget(server);
    (client, table)
}

async fn store() -> DynamoDbStore {
    let (client, table) = table().await;
    DynamoDbStore::new(client, table, RETENTION)
}

store_contract_tests!(store());

/// The same contract behind a cache of completed keys.
mod cached {
    idempotency::store_contract_tests!(async {
        idempotency::CachedStore::new(super::store().await, 64)
    });
}
idempotency::dynamodb_store_cases!(table());

/// The same contract on a single-table design: a table keyed `PK` and `SK`, this store's items
/// under one partition with their keys in the sort key (Powertools' `sort_key_attr` and
/// `static_pk_value`).
mod single_table {
    use super::*;
    use idempotency::dynamodb::create_table_with_keys;

    pub(super) const PARTITION: &str = "idempotency#send-welcome";

    pub(super) async fn table() -> (Client, String) {
        let server = Dynoxide::start().await;
        let client = server.client();
        let table = unique_table();
        create_table_with_keys(&client, &table, "PK", Some("SK"))
            .await
            .expect("table");
        std::mem::forget(server);
        (client, table)
    }

    pub(super) async fn store() -> DynamoDbStore {
        let (client, table) = table().await;
        DynamoDbStore::new(client, table, RETENTION)
            .with_key_attributes("PK", Some(("SK", PARTITION)))
            .expect("key attributes")
    }

    idempotency::store_contract_tests!(store());
}

/// A table keyed by an attribute of another name (`id`), no sort key: the contract holds too.
mod renamed_partition_key {
    use super::*;

    async fn store() -> DynamoDbStore {
        let server = Dynoxide::start().await;
        let client = server.client();
        let table = unique_table();
        idempotency::dynamodb::create_table_with_keys(&client, &table, "id", None)
            .await
            .expect("table");
        std::mem::forget(server);
        DynamoDbStore::new(client, table, RETENTION)
            .with_key_attributes("id", None)
            .expect("key attributes")
    }

    idempotency::store_contract_tests!(store());
}

/// In a single table, each store's items sit under its own partition with the key in the sort
/// key, so two stores sharing the table never meet, whatever their keys.
#[tokio::test]
async fn in_a_single_table_each_store_keeps_to_its_partition() {
    let (client, table) = single_table::table().await;
    let welcome = DynamoDbStore::new(client.clone(), table.clone(), RETENTION)
        .with_key_attributes("PK", Some(("SK", single_table::PARTITION)))
        .expect("key attributes");
    let receipts = DynamoDbStore::new(client.clone(), table.clone(), RETENTION)
        .with_key_attributes("PK", Some(("SK", "idempotency#send-receipt")))
        .expect("key attributes");
    idempotency::testkit::started(&welcome, &claim("u-1", t0())).await;
    let other = receipts.begin(&claim("u-1", t0())).await.expect("claimed");
    assert!(
        matches!(other, Begin::Started { .. }),
        "another partition's u-1 is its own: {other:?}"
    );
    let item = client
        .get_item()
        .table_name(&table)
        .key(
            "PK",
            aws_sdk_dynamodb::types::AttributeValue::S(single_table::PARTITION.into()),
        )
        .key(
            "SK",
            aws_sdk_dynamodb::types::AttributeValue::S("u-1".into()),
        )
        .send()
        .await
        .expect("read")
        .item
        .expect("the item under the store's partition, its key in the sort key");
    assert_eq!(
        item.get("status"),
        Some(&aws_sdk_dynamodb::types::AttributeValue::S(
            "IN_PROGRESS".into()
        ))
    );
}

/// Key attributes may not take a name the item uses for its own state, nor be the same twice.
#[tokio::test]
async fn key_attributes_that_collide_with_the_item_are_refused() {
    use idempotency::dynamodb::KeyAttributeError;
    let (client, table) = table().await;
    let store = || DynamoDbStore::new(client.clone(), table.clone(), RETENTION);
    for taken in ["status", "expires_at", "lease_token", ""] {
        assert_eq!(
            store().with_key_attributes(taken, None).err(),
            Some(KeyAttributeError::Taken(taken.into()))
        );
        assert_eq!(
            store().with_key_attributes("PK", Some((taken, "p"))).err(),
            Some(KeyAttributeError::Taken(taken.into()))
        );
    }
    assert_eq!(
        store().with_key_attributes("PK", Some(("PK", "p"))).err(),
        Some(KeyAttributeError::Same("PK".into()))
    );
    assert!(
        store().with_key_attributes("pk", None).is_ok(),
        "the default"
    );
}

/// The claim whose answer was lost took over an earlier attempt (an `ATTEMPTED` key): read back
/// from the item, its prior is that attempt, with its first time and one attempt before.
#[tokio::test]
async fn a_lost_answer_to_a_takeover_still_names_the_earlier_attempt() {
    let server = Dynoxide::start().await;
    let table = unique_table();
    create_table(&server.client(), &table).await.expect("table");
    // The first attempt goes straight to the server: the proxy loses answers per connection,
    // and the takeover must be the first on its own.
    let direct = DynamoDbStore::new(server.client(), table.clone(), RETENTION);
    let first = idempotency::testkit::started(&direct, &claim("k-1", t0())).await;
    direct
        .mark_attempted("k-1", &first, t0() + 10)
        .await
        .expect("attempted");
    let proxy = LossyProxy::start(server.addr).await;
    let store = DynamoDbStore::new(client_for(&proxy.endpoint()), table, RETENTION);
    proxy.lose_next_answers(1);
    let begun = store
        .begin(&claim("k-1", t0() + 5_000))
        .await
        .expect("claimed");
    assert_eq!(proxy.lost(), 1, "the takeover's first answer was lost");
    let Begin::Started { prior, .. } = begun else {
        panic!("our own applied takeover read as {begun:?}");
    };
    assert_eq!(
        prior,
        Some(idempotency::store::PriorAttempt {
            first_attempt_ms: t0(),
            attempts: 1
        })
    );
}

/// DynamoDB applied a claim, and its answer was lost on the way back (the connection reset
/// after the write). The SDK retries the same request, which DynamoDB now refuses: the item is
/// already claimed, by this very claim. A refusal by an item holding the claim's own lease
/// token is ours: STARTED, never BUSY until our own lease ends.
#[tokio::test]
async fn a_claim_applied_whose_answer_was_lost_is_ours_on_the_sdk_retry() {
    let server = Dynoxide::start().await;
    let table = unique_table();
    create_table(&server.client(), &table).await.expect("table");
    let proxy = LossyProxy::start(server.addr).await;
    let store = DynamoDbStore::new(client_for(&proxy.endpoint()), table, RETENTION);
    proxy.lose_next_answers(1);
    let begun = store.begin(&claim("k-1", t0())).await.expect("claimed");
    assert_eq!(proxy.lost(), 1, "the first answer was lost");
    let Begin::Started { lease, prior } = begun else {
        panic!("our own applied claim read as {begun:?}");
    };
    assert_eq!(prior, None, "a fresh key");
    store
        .complete("k-1", &lease, t0(), None)
        .await
        .expect("the lease is ours");
    assert_eq!(
        store.begin(&claim("k-1", t0())).await.expect("claim"),
        Begin::Done { output: None }
    );
}

/// A finishing write applied whose answer was lost is the holder's own on the SDK's retry.
#[tokio::test]
async fn a_finishing_write_whose_answer_was_lost_is_its_own() {
    let server = Dynoxide::start().await;
    let table = unique_table();
    create_table(&server.client(), &table).await.expect("table");
    idempotency::testkit::dynamodb::a_finishing_write_whose_answer_was_lost_is_its_own(
        &server.endpoint(),
        &table,
    )
    .await;
    std::mem::forget(server);
}

/// The store through its own client on the JSON API ([`idempotency::dynamodb::DirectClient`],
/// the order function's): the same contract, and the same answers to a lost write.
mod direct {
    use super::*;

    async fn store() -> DynamoDbStore {
        let server = Dynoxide::start().await;
        let table = unique_table();
        create_table(&server.client(), &table).await.expect("table");
        let store = Via::Direct.store(&server.endpoint(), &table);
        std::mem::forget(server);
        store
    }

    idempotency::store_contract_tests!(store());

    /// The same contract behind a cache of completed keys.
    mod cached {
        idempotency::store_contract_tests!(async {
            idempotency::CachedStore::new(super::store().await, 64)
        });
    }

    /// A claim DynamoDB applied whose answer was lost is ours on the direct client's retry, as
    /// on the SDK's.
    #[tokio::test]
    async fn a_claim_applied_whose_answer_was_lost_is_ours_on_the_retry() {
        let server = Dynoxide::start().await;
        let table = unique_table();
        create_table(&server.client(), &table).await.expect("table");
        let proxy = LossyProxy::start(server.addr).await;
        let store = Via::Direct.store(&proxy.endpoint(), &table);
        proxy.lose_next_answers(1);
        let begun = store.begin(&claim("k-1", t0())).await.expect("claimed");
        assert_eq!(proxy.lost(), 1, "the first answer was lost");
        let Begin::Started { lease, prior } = begun else {
            panic!("our own applied claim read as {begun:?}");
        };
        assert_eq!(prior, None, "a fresh key");
        store
            .complete("k-1", &lease, t0(), None)
            .await
            .expect("the lease is ours");
        assert_eq!(
            store.begin(&claim("k-1", t0())).await.expect("claim"),
            Begin::Done { output: None }
        );
    }

    #[tokio::test]
    async fn a_finishing_write_whose_answer_was_lost_is_its_own() {
        let server = Dynoxide::start().await;
        let table = unique_table();
        create_table(&server.client(), &table).await.expect("table");
        idempotency::testkit::dynamodb::a_finishing_write_whose_answer_was_lost_is_its_own_via(
            &server.endpoint(),
            &table,
            Via::Direct,
        )
        .await;
        std::mem::forget(server);
    }

    /// A table that does not exist is an outage on every call through the direct client too:
    /// DynamoDB's `ResourceNotFoundException`, never a refused condition.
    #[tokio::test]
    async fn a_missing_table_is_an_outage() {
        let server = Dynoxide::start().await;
        let store = Via::Direct.store(&server.endpoint(), "no-such-table");
        let error = store
            .begin(&claim("k-1", t0()))
            .await
            .expect_err("no table");
        assert!(
            matches!(error, idempotency::StoreError::Unavailable(_)),
            "{error:?}"
        );
        assert!(
            format!("{:?}", error).contains("ResourceNotFoundException"),
            "{error:?}"
        );
        std::mem::forget(server);
    }

    /// What the direct client writes, the SDK's store reads, and the other way round: one item
    /// format, whichever client a deployment (or a rollback) uses.
    #[tokio::test]
    async fn either_client_reads_what_the_other_wrote() {
        let server = Dynoxide::start().await;
        let table = unique_table();
        create_table(&server.client(), &table).await.expect("table");
        let sdk = Via::Sdk.store(&server.endpoint(), &table);
        let direct = Via::Direct.store(&server.endpoint(), &table);
        for (writer, reader, key) in [(&direct, &sdk, "k-1"), (&sdk, &direct, "k-2")] {
            let Begin::Started { lease, .. } =
                writer.begin(&claim(key, t0())).await.expect("claim")
            else {
                panic!("a fresh key");
            };
            assert!(
                matches!(
                    reader.begin(&claim(key, t0() + 1)).await.expect("claim"),
                    Begin::Busy { .. }
                ),
                "{key}: the other client's lease holds"
            );
            writer
                .complete(key, &lease, t0() + 2, Some("{\"ok\":true}"))
                .await
                .expect("complete");
            assert_eq!(
                reader.begin(&claim(key, t0() + 3)).await.expect("claim"),
                Begin::Done {
                    output: Some("{\"ok\":true}".into())
                },
                "{key}"
            );
        }
        std::mem::forget(server);
    }
}
