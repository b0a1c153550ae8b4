//! The DynamoDB store's own cases beyond the contract (feature `testkit-dynamodb`), run against
//! any DynamoDB-compatible server: give each a client and a fresh table made by
//! [`create_table`](crate::dynamodb::create_table).

use crate::guard::EffectStore as _;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue::{N, S};

use super::{FP, RETENTION, claim, t0};
use crate::dynamodb::attr;
use crate::{
    DynamoDbStore, IdempotencyStore, store::Begin, store::LeaseToken, store::PriorAttempt,
};

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
        .complete("u-1", &lease, t0() + 1, None)
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

/// A person clears a recorded refusal (an operator's tool): the reason comes back and
/// the next claim is fresh. A key that is not refused, or absent, is left exactly as it was.
pub async fn clearing_a_refusal_returns_its_reason_and_touches_nothing_else(
    client: &Client,
    table: &str,
) {
    let store = DynamoDbStore::new(client.clone(), table, RETENTION);
    let lease = super::started(&store, &claim("refused", t0())).await;
    store
        .reject(
            "refused",
            &lease,
            t0(),
            "payment declined: insufficient_funds",
        )
        .await
        .expect("reject");
    super::started(&store, &claim("working", t0())).await;

    let cleared = store.clear_rejected("refused").await.expect("clear");
    assert_eq!(
        cleared.as_deref(),
        Some("payment declined: insufficient_funds")
    );
    let (_, prior) = super::started_after(&store, &claim("refused", t0() + 1)).await;
    assert_eq!(prior, None, "a cleared refusal leaves a fresh key");

    assert_eq!(store.clear_rejected("working").await.expect("clear"), None);
    assert!(
        matches!(
            store.begin(&claim("working", t0() + 1)).await,
            Ok(Begin::Busy { .. })
        ),
        "a claim in progress was cleared"
    );
    assert_eq!(store.clear_rejected("absent").await.expect("clear"), None);
}

/// A claim that carries an earlier attempt known from outside (a redriven copy's history)
/// counts it on a fresh key at any age, an hour later as 20 days later: a refused claim wrote no
/// item, so the key's absence proves nothing (issue 49).
pub async fn an_earlier_attempt_from_outside_counts_at_any_age(client: &Client, table: &str) {
    let store = DynamoDbStore::new(client.clone(), table, RETENTION);
    for (key, age_ms) in [("recent", 3_600_000), ("old", 20 * 86_400_000)] {
        let request = crate::store::ClaimRequest {
            earlier_attempt_ms: Some(t0() - age_ms),
            ..claim(key, t0())
        };
        let (_, prior) = super::started_after(&store, &request).await;
        assert_eq!(
            prior,
            Some(PriorAttempt {
                first_attempt_ms: t0() - age_ms,
                attempts: 0
            }),
            "{key}"
        );
    }
}

/// DynamoDB applied a holder's finishing write whose answer was lost (the connection reset after
/// the write), and the SDK retried it: the retry meets the item in the state it wrote, under its
/// own token. That is the holder's own work, a success, never a lost lease (which would report a
/// charged order as RETRY `lease_lost` and redeliver it).
///
/// `endpoint` is the server's (`http://host:port`), `table` a table on it: the case puts a proxy
/// that loses answers in front of it.
pub async fn a_finishing_write_whose_answer_was_lost_is_its_own(endpoint: &str, table: &str) {
    a_finishing_write_whose_answer_was_lost_is_its_own_via(
        endpoint,
        table,
        super::dynoxide::Via::Sdk,
    )
    .await;
}

/// [`a_finishing_write_whose_answer_was_lost_is_its_own`] with the lossy store writing through
/// `via`'s client (both retry a lost answer).
pub async fn a_finishing_write_whose_answer_was_lost_is_its_own_via(
    endpoint: &str,
    table: &str,
    via: super::dynoxide::Via,
) {
    use crate::store::Status::{Attempted, Completed, Rejected};
    let upstream: std::net::SocketAddr = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("a loopback endpoint");
    let client = super::dynoxide::client_for(endpoint);
    let proxy = super::dynoxide::LossyProxy::start(upstream).await;
    let direct = DynamoDbStore::new(client, table, RETENTION);
    for (n, (key, status)) in [("c", Completed), ("a", Attempted), ("r", Rejected)]
        .into_iter()
        .enumerate()
    {
        let lease = super::started(&direct, &claim(key, t0())).await;
        // A client of its own: the next connection it opens is the one whose answer is lost.
        let lossy = via.store(&proxy.endpoint(), table);
        proxy.lose_next_answers(1);
        super::finish(&lossy, key, &lease, status, t0() + 1)
            .await
            .unwrap_or_else(|e| panic!("{status:?} whose answer was lost: {e}"));
        assert_eq!(proxy.lost(), n + 1, "{status:?}: the first answer was lost");
        let begun = direct.begin(&claim(key, t0() + 2)).await.expect("begin");
        assert!(super::after_finish(status, &begun), "{status:?}: {begun:?}");
    }
}

/// A store whose table does not exist (a wrong name, a deleted stack) is an outage on every
/// call: never a lost lease, a busy key or "nothing to clear", each of which would let the
/// caller decide on an answer DynamoDB never gave.
pub async fn a_missing_table_is_an_outage_on_every_call(client: &Client) {
    use crate::{StoreError, store::Lease};
    let store = DynamoDbStore::new(client.clone(), "no-such-table", RETENTION);
    let lease = Lease {
        token: LeaseToken::new(),
        until_ms: t0() + super::LEASE_MS,
    };
    let begun = store.begin(&claim("k", t0())).await;
    assert!(
        matches!(begun, Err(StoreError::Unavailable(_))),
        "{begun:?}"
    );
    let completed = store.complete("k", &lease, t0(), None).await;
    assert!(
        matches!(completed, Err(StoreError::Unavailable(_))),
        "{completed:?}"
    );
    let attempted = store.mark_attempted("k", &lease, t0()).await;
    assert!(
        matches!(attempted, Err(StoreError::Unavailable(_))),
        "{attempted:?}"
    );
    let cleared = store.clear_rejected("k").await;
    assert!(
        matches!(cleared, Err(StoreError::Unavailable(_))),
        "{cleared:?}"
    );
}

/// A completed item whose output was kept by another completion than its own (a build that
/// knows no outputs completed the key again after a rollback, leaving the older output behind):
/// the stale output is never returned; the item's own is.
pub async fn an_output_not_kept_by_the_items_own_completion_is_not_returned(
    client: &Client,
    table: &str,
) {
    let completed = |key: &str, output_at: u64| {
        client
            .put_item()
            .table_name(table)
            .item(attr::KEY, S(key.into()))
            .item(attr::STATUS, S("COMPLETED".into()))
            .item(attr::FINGERPRINT, S(FP.to_string()))
            .item(attr::EXPIRES_AT, N((t0() / 1_000 + 86_400).to_string()))
            .item(attr::COMPLETED_AT, N(t0().to_string()))
            .item(attr::OUTPUT, S("\"receipt\"".into()))
            .item(attr::OUTPUT_AT, N(output_at.to_string()))
            .send()
    };
    completed("stale", t0() - 5_000).await.expect("seed");
    completed("own", t0()).await.expect("seed");
    let store = DynamoDbStore::new(client.clone(), table, RETENTION);
    assert_eq!(
        store.begin(&claim("stale", t0() + 1)).await.expect("claim"),
        Begin::Done { output: None }
    );
    assert_eq!(
        store.begin(&claim("own", t0() + 1)).await.expect("claim"),
        Begin::Done {
            output: Some("\"receipt\"".into())
        }
    );
}

/// One `#[tokio::test]` per DynamoDB store case above, for a DynamoDB-compatible server:
/// `table` is an async expression giving a client and a fresh table on it.
#[macro_export]
macro_rules! dynamodb_store_cases {
    ($table:expr) => {
        $crate::dynamodb_store_cases!(@cases $table;
            an_item_without_its_first_attempt_is_taken_over_as_of_unknown_age,
            an_item_of_a_later_format_is_never_taken_over,
            key_prefixes_keep_users_of_a_shared_table_apart,
            clearing_a_refusal_returns_its_reason_and_touches_nothing_else,
            an_earlier_attempt_from_outside_counts_at_any_age,
            an_output_not_kept_by_the_items_own_completion_is_not_returned,
        );

        #[tokio::test]
        async fn a_missing_table_is_an_outage_on_every_call() {
            let (client, _) = $table.await;
            $crate::testkit::dynamodb::a_missing_table_is_an_outage_on_every_call(&client).await;
        }
    };
    (@cases $table:expr; $($case:ident,)*) => {
        $(
            #[tokio::test]
            async fn $case() {
                let (client, table) = $table.await;
                $crate::testkit::dynamodb::$case(&client, &table).await;
            }
        )*
    };
}
