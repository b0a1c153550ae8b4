//! The DynamoDB store's own cases beyond the contract (feature `testkit-dynamodb`), run against
//! any DynamoDB-compatible server: give each a client and a fresh table made by
//! [`create_table`](crate::dynamodb::create_table).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue::{N, S};

use super::{FP, RETENTION, claim, t0};
use crate::dynamodb::attr;
use crate::{Begin, DynamoDbStore, IdempotencyStore, LeaseToken, PriorAttempt};

/// An item left by the version before attempts were recorded (a `PutItem` claim: no
/// `first_attempt_at`, no `attempts`), whose holder's lease ran out: taken over, its first
/// attempt is unknown (0, the oldest possible), and stays so across later takeovers instead of
/// restarting the provider's key window.
pub async fn a_claim_left_by_the_earlier_version_is_taken_over_with_an_unknown_first_attempt(
    client: &Client,
    table: &str,
) {
    client
        .put_item()
        .table_name(table)
        .item(attr::KEY, S("legacy".into()))
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
    let lease = match store.begin(&claim("legacy", t0())).await.expect("claim") {
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
        .mark_attempted("legacy", &lease, t0() + 1)
        .await
        .expect("mark attempted");
    match store
        .begin(&claim("legacy", t0() + 2))
        .await
        .expect("claim")
    {
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

/// A function that gains a key prefix keeps finding the items it wrote without one: a fresh
/// prefixed key looks its unprefixed item up. Done there is a duplicate, refused for good is
/// rejected, a live lease is busy, another payload a conflict (and the new claim is given
/// back each time, so the answer repeats); an attempt whose effect may exist becomes the new
/// claim's prior attempt; a key never seen is fresh.
pub async fn unprefixed_items_are_still_found_under_a_prefix(client: &Client, table: &str) {
    use crate::{ClaimRequest, Fingerprint};
    let before = DynamoDbStore::new(client.clone(), table, RETENTION);
    let done = super::started(&before, &claim("done", t0())).await;
    before
        .complete("done", &done, t0())
        .await
        .expect("complete");
    let tried = super::started(&before, &claim("tried", t0())).await;
    before
        .mark_attempted("tried", &tried, t0())
        .await
        .expect("mark");
    let declined = super::started(&before, &claim("declined", t0())).await;
    before
        .reject("declined", &declined, t0(), "card declined")
        .await
        .expect("reject");
    super::started(&before, &claim("held", t0())).await;

    let after = DynamoDbStore::new(client.clone(), table, RETENTION)
        .with_key_prefix("orders#")
        .with_unprefixed_lookup(true);
    let now = t0() + 1_000;
    for _ in 0..2 {
        assert_eq!(
            after.begin(&claim("done", now)).await.expect("begin"),
            Begin::Done
        );
        assert_eq!(
            after.begin(&claim("declined", now)).await.expect("begin"),
            Begin::Rejected
        );
        assert!(matches!(
            after.begin(&claim("held", now)).await.expect("begin"),
            Begin::Busy { .. }
        ));
        let other = ClaimRequest {
            fingerprint: Fingerprint(9),
            ..claim("done", now)
        };
        assert_eq!(after.begin(&other).await.expect("begin"), Begin::Conflict);
    }
    match after.begin(&claim("tried", now)).await.expect("begin") {
        Begin::Started { prior, .. } => assert_eq!(
            prior,
            Some(PriorAttempt {
                first_attempt_ms: t0(),
                attempts: 1
            })
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        after.begin(&claim("new", now)).await.expect("begin"),
        Begin::Started { prior: None, .. }
    ));
    // Without the look-up the prefixed key knows nothing of them.
    let blind = DynamoDbStore::new(client.clone(), table, RETENTION).with_key_prefix("other#");
    assert!(matches!(
        blind.begin(&claim("done", now)).await.expect("begin"),
        Begin::Started { prior: None, .. }
    ));
}
