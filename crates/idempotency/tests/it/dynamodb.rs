//! The DynamoDB store against dynoxide embedded in this test process: the store contract and the
//! DynamoDB store's own cases (an item left by the earlier version, the key prefix that keeps
//! users of a shared table apart).

use aws_sdk_dynamodb::Client;
use idempotency::DynamoDbStore;
use idempotency::dynamodb::create_table;
use idempotency::store_contract_tests;
use idempotency::testkit::RETENTION;
use idempotency::testkit::dynamodb as cases;
use idempotency::testkit::dynoxide::{Dynoxide, unique_table};

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

#[tokio::test]
async fn a_claim_left_by_the_earlier_version_is_taken_over_with_an_unknown_first_attempt() {
    let (client, table) = table().await;
    cases::a_claim_left_by_the_earlier_version_is_taken_over_with_an_unknown_first_attempt(
        &client, &table,
    )
    .await;
}

#[tokio::test]
async fn key_prefixes_keep_users_of_a_shared_table_apart() {
    let (client, table) = table().await;
    cases::key_prefixes_keep_users_of_a_shared_table_apart(&client, &table).await;
}
