//! The DynamoDB store against moto's server, the cross-check: the contract that the in-memory
//! store and dynoxide pass, and the DynamoDB store's own cases. moto is started once for this
//! test binary (`process_orders::testkit::dynamo::moto_endpoint`).
//!
//! All but the race: moto checks a condition and writes without holding a lock, so with the
//! rest of this binary loading the same server, 64 racing claims had two winners in 2 of 6 runs
//! (`left: (2, 62)`). That is moto's limit, not DynamoDB's; the race runs on dynoxide and the
//! in-memory store.

use aws_sdk_dynamodb::Client;
use idempotency::DynamoDbStore;
use idempotency::testkit::RETENTION;
use process_orders::testkit::dynamo::{create_table, moto_client, moto_endpoint, unique_table};

async fn table() -> (Client, String) {
    let client = moto_client();
    let table = unique_table();
    create_table(&client, &table).await;
    (client, table)
}

async fn store() -> DynamoDbStore {
    let (client, table) = table().await;
    DynamoDbStore::new(client, table, RETENTION)
}

idempotency::store_contract_tests!(sequential: store());

/// The same contract behind a cache of completed keys.
mod cached {
    idempotency::store_contract_tests!(sequential: async {
        idempotency::CachedStore::new(super::store().await, 64)
    });
}
idempotency::dynamodb_store_cases!(table());

/// The contract on a single-table design (`PK` and `SK`, this store's items under one partition,
/// the key in the sort key), on moto too.
mod single_table {
    async fn store() -> idempotency::DynamoDbStore {
        let client = process_orders::testkit::dynamo::moto_client();
        let table = process_orders::testkit::dynamo::unique_table();
        idempotency::dynamodb::create_table_with_keys(&client, &table, "PK", Some("SK"))
            .await
            .expect("table");
        idempotency::DynamoDbStore::new(client, table, idempotency::testkit::RETENTION)
            .with_key_attributes("PK", Some(("SK", "idempotency#orders")))
            .expect("key attributes")
    }

    idempotency::store_contract_tests!(sequential: store());
}

/// A finishing write applied whose answer was lost is the holder's own on the SDK's retry, on
/// moto too.
#[tokio::test]
async fn a_finishing_write_whose_answer_was_lost_is_its_own() {
    let (_, table) = table().await;
    idempotency::testkit::dynamodb::a_finishing_write_whose_answer_was_lost_is_its_own(
        &moto_endpoint(),
        &table,
    )
    .await;
}

/// The store through its own client on the JSON API (the order function's), on moto: the same
/// contract, and a lost answer to a finishing write read as its own.
mod direct {
    use idempotency::testkit::dynoxide::Via;
    use process_orders::testkit::dynamo::moto_endpoint;

    async fn store() -> idempotency::DynamoDbStore {
        let (_, table) = super::table().await;
        Via::Direct.store(&moto_endpoint(), &table)
    }

    idempotency::store_contract_tests!(sequential: store());

    #[tokio::test]
    async fn a_finishing_write_whose_answer_was_lost_is_its_own() {
        let (_, table) = super::table().await;
        idempotency::testkit::dynamodb::a_finishing_write_whose_answer_was_lost_is_its_own_via(
            &moto_endpoint(),
            &table,
            Via::Direct,
        )
        .await;
    }
}
