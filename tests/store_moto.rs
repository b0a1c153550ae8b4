//! The DynamoDB store against moto's server, the cross-check: the same contract that the
//! in-memory store and dynoxide pass. moto is started once for this binary (see support).

mod support;

use process_orders::idempotency::DynamoDbStore;
use support::dynamo::{client, create_table, moto_endpoint, unique_table};
use support::store_contract::RETENTION;

async fn store() -> DynamoDbStore {
    let (client, _) = client(&moto_endpoint());
    let table = unique_table();
    create_table(&client, &table).await;
    DynamoDbStore::new(client, table, RETENTION)
}

store_contract_tests!(store());

#[tokio::test]
async fn a_claim_left_by_the_earlier_version_is_taken_over_with_an_unknown_first_attempt() {
    let (client, _) = client(&moto_endpoint());
    let table = unique_table();
    create_table(&client, &table).await;
    support::dynamo::a_claim_left_by_the_earlier_version_is_taken_over_with_an_unknown_first_attempt(
        &client, &table,
    )
    .await;
}
