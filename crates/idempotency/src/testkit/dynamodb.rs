//! The DynamoDB store's own cases beyond the contract (feature `testkit-dynamodb`), run against
//! any DynamoDB-compatible server: give each a client and a fresh table made by
//! [`create_table`](crate::dynamodb::create_table).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue::{N, S};

use super::{FP, RETENTION, claim, t0};
use crate::dynamodb::attr;
use crate::{Begin, DynamoDbStore, IdempotencyStore, LeaseToken, PriorAttempt};

/// An in-progress item without its first attempt's time or its attempt count (not what this
/// store writes: a hand-made or damaged item), whose holder's lease ran out: taken over, its
/// first attempt is unknown (0, the oldest possible), and stays so across later takeovers
/// instead of restarting the provider's key window.
pub async fn an_item_without_its_first_attempt_is_taken_over_as_of_unknown_age(
    client: &Client,
    table: &str,
) {
    client
        .put_item()
        .table_name(table)
        .item(attr::KEY, S("bare".into()))
        .item(attr::STATUS, S("IN_PROGRESS".into()))
        .item(attr::LEASE_TOKEN, S(LeaseToken::new().to_string()))
        .item(attr::LEASE_UNTIL, N((t0() - 1).to_string()))
        .item(attr::FINGERPRINT, S(FP.to_string()))
        .item(attr::EXPIRES_AT, N((t0() / 1_000 + 86_400).to_string()))
        .item(attr::MESSAGE_ID, S("m-old".into()))
        .item(attr::CLAIMED_AT, N((t0() - 60_000).to_string()))
        .send()
        .await
        .expect("seed an old item");
    let store = DynamoDbStore::new(client.clone(), table, RETENTION);
    let lease = match store.begin(&claim("bare", t0())).await.expect("claim") {
        Begin::Started { lease, prior } => {
            assert_eq!(
                prior,
                Some(PriorAttempt {
                    first_attempt_ms: 0,
                    attempts: 0
                })
            );
            lease
        }
        other => panic!("{other:?}"),
    };
    store
        .mark_attempted("bare", &lease, t0() + 1)
        .await
        .expect("mark attempted");
    match store.begin(&claim("bare", t0() + 2)).await.expect("claim") {
        Begin::Started { prior, .. } => assert_eq!(
            prior,
            Some(PriorAttempt {
                first_attempt_ms: 0,
                attempts: 1
            })
        ),
        other => panic!("{other:?}"),
    }
}

/// Two functions share one table: with their own prefixes, the same key is two items, each
/// with its own claim, and neither sees the other's.
pub async fn key_prefixes_keep_users_of_a_shared_table_apart(client: &Client, table: &str) {
    let orders = DynamoDbStore::new(client.clone(), table, RETENTION);
    let emails = DynamoDbStore::new(client.clone(), table, RETENTION).with_key_prefix("email#");
    let lease = match orders.begin(&claim("u-1", t0())).await.expect("claim") {
        Begin::Started { lease, .. } => lease,
        other => panic!("{other:?}"),
    };
    orders
        .complete("u-1", &lease, t0() + 1)
        .await
        .expect("complete");
    assert!(matches!(
        emails.begin(&claim("u-1", t0() + 2)).await,
        Ok(Begin::Started { prior: None, .. })
    ));
    let keys: Vec<String> = client
        .scan()
        .table_name(table)
        .send()
        .await
        .expect("scan")
        .items()
        .iter()
        .filter_map(|i| i.get(attr::KEY)?.as_s().ok().cloned())
        .collect();
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, ["email#u-1", "u-1"]);
}

/// Every claim writes the item format's version, and a claim never takes over an item of a
/// later version (a rollback meeting a newer build's items): it is refused and read as
/// malformed, so the record is retried, and the newer item is left as it was.
pub async fn an_item_of_a_later_format_is_never_taken_over(client: &Client, table: &str) {
    use crate::StoreError;
    use crate::dynamodb::SCHEMA_VERSION;
    let store = DynamoDbStore::new(client.clone(), table, RETENTION);
    super::started(&store, &claim("now", t0())).await;
    let schema = |key: &str| {
        let client = client.clone();
        let key = key.to_owned();
        async move {
            client
                .get_item()
                .table_name(table)
                .key(attr::KEY, S(key))
                .consistent_read(true)
                .send()
                .await
                .expect("get")
                .item()
                .and_then(|item| item.get(attr::SCHEMA).cloned())
        }
    };
    assert_eq!(schema("now").await, Some(N(SCHEMA_VERSION.to_string())));

    let newer_token = LeaseToken::new().to_string();
    client
        .put_item()
        .table_name(table)
        .item(attr::KEY, S("newer".into()))
        .item(attr::SCHEMA, N((SCHEMA_VERSION + 1).to_string()))
        .item(attr::STATUS, S("ATTEMPTED".into()))
        .item(attr::LEASE_TOKEN, S(newer_token.clone()))
        .item(attr::FINGERPRINT, S(FP.to_string()))
        .item(attr::EXPIRES_AT, N((t0() / 1_000 + 86_400).to_string()))
        .item(attr::FIRST_ATTEMPT_AT, N((t0() - 1_000).to_string()))
        .send()
        .await
        .expect("seed a newer item");
    assert!(matches!(
        store.begin(&claim("newer", t0())).await,
        Err(StoreError::Malformed(_))
    ));
    assert_eq!(
        schema("newer").await,
        Some(N((SCHEMA_VERSION + 1).to_string()))
    );
}
