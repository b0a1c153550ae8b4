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
use idempotency::testkit::dynamodb as cases;
use process_orders::testkit::dynamo::{create_table, moto_client, unique_table};

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

#[tokio::test]
async fn an_item_without_its_first_attempt_is_taken_over_as_of_unknown_age() {
    let (client, table) = table().await;
    cases::an_item_without_its_first_attempt_is_taken_over_as_of_unknown_age(&client, &table).await;
}

#[tokio::test]
async fn an_item_of_a_later_format_is_never_taken_over() {
    let (client, table) = table().await;
    cases::an_item_of_a_later_format_is_never_taken_over(&client, &table).await;
}

#[tokio::test]
async fn key_prefixes_keep_users_of_a_shared_table_apart() {
    let (client, table) = table().await;
    cases::key_prefixes_keep_users_of_a_shared_table_apart(&client, &table).await;
}

#[tokio::test]
async fn clearing_a_refusal_returns_its_reason_and_touches_nothing_else() {
    let (client, table) = table().await;
    cases::clearing_a_refusal_returns_its_reason_and_touches_nothing_else(&client, &table).await;
}

#[tokio::test]
async fn an_earlier_attempt_from_outside_counts_once_its_item_may_have_expired() {
    let (client, table) = table().await;
    cases::an_earlier_attempt_from_outside_counts_once_its_item_may_have_expired(&client, &table)
        .await;
}

#[tokio::test]
async fn a_missing_table_is_an_outage_on_every_call() {
    cases::a_missing_table_is_an_outage_on_every_call(&moto_client()).await;
}
