//! The Redis store against a redis-server this test process starts: the store contract, bare and
//! behind the cache, and the Redis store's own cases (the item and its expiry, items it did not
//! write, key prefixes, an earlier attempt known from outside, an unreachable server).

use idempotency::guard::EffectStore as _;
use std::collections::HashMap;

use ::redis::AsyncCommands;
use idempotency::redis::{SCHEMA_VERSION, field};
use idempotency::store_contract_tests;
use idempotency::testkit::redis::{connection, store, unique_prefix};
use idempotency::testkit::{FP, RETENTION, claim, started, started_after, t0};
use idempotency::{IdempotencyStore, RedisStore, StoreError, store::Begin, store::PriorAttempt};

store_contract_tests!(store());

/// The same contract behind a cache of completed keys.
mod cached {
    idempotency::store_contract_tests!(async {
        idempotency::CachedStore::new(idempotency::testkit::redis::store().await, 64)
    });
}

/// A store on a prefix of its own, and a connection for looking at what it wrote.
async fn store_and_connection() -> (RedisStore, ::redis::aio::ConnectionManager) {
    let connection = connection().await;
    let store = RedisStore::new(connection.clone(), RETENTION).with_key_prefix(unique_prefix());
    (store, connection)
}

/// The key's Redis expiry, epoch ms.
async fn expiry_ms(connection: &mut ::redis::aio::ConnectionManager, key: &str) -> i64 {
    ::redis::cmd("PEXPIRETIME")
        .arg(key)
        .query_async(connection)
        .await
        .expect("PEXPIRETIME")
}

/// Each item is a hash with the format's version, under the store's prefix, and Redis expires
/// the key at the item's retention end, which starts over when the work finishes.
#[tokio::test]
async fn the_item_is_a_versioned_hash_that_redis_expires_at_its_retention_end() {
    let (store, mut connection) = store_and_connection().await;
    let key = store.redis_key("k");
    let lease = started(&store, &claim("k", t0())).await;
    let item: HashMap<String, String> = connection.hgetall(&key).await.expect("item");
    assert_eq!(item[field::STATUS], "IN_PROGRESS");
    assert_eq!(item[field::SCHEMA], SCHEMA_VERSION.to_string());
    assert_eq!(item[field::LEASE_TOKEN], lease.token.to_string());
    let retention_s = RETENTION.as_secs() as i64;
    let claimed_until = (t0() / 1_000) as i64 + retention_s;
    assert_eq!(item[field::EXPIRES_AT], claimed_until.to_string());
    assert_eq!(
        expiry_ms(&mut connection, &key).await,
        claimed_until * 1_000
    );

    let finished_at = t0() + 5_000;
    store
        .complete("k", &lease, finished_at, Some("\"r-1\""))
        .await
        .expect("complete");
    let item: HashMap<String, String> = connection.hgetall(&key).await.expect("item");
    assert_eq!(item[field::STATUS], "COMPLETED");
    assert_eq!(item[field::OUTPUT], "\"r-1\"");
    assert!(!item.contains_key(field::LEASE_UNTIL), "{item:?}");
    let finished_until = (finished_at / 1_000) as i64 + retention_s;
    assert_eq!(
        expiry_ms(&mut connection, &key).await,
        finished_until * 1_000
    );
}

/// An item of a later format (a rollback meeting a newer build's items) is never taken over,
/// even finished and past its retention: the claim fails as malformed, so the record is
/// retried, and the item is left as it was.
#[tokio::test]
async fn an_item_of_a_later_format_is_never_taken_over() {
    let (store, mut connection) = store_and_connection().await;
    let key = store.redis_key("newer");
    let newer = [
        (field::STATUS, "COMPLETED".to_owned()),
        (field::FINGERPRINT, FP.to_string()),
        (field::EXPIRES_AT, "1".to_owned()),
        (field::SCHEMA, (SCHEMA_VERSION + 1).to_string()),
    ];
    let () = connection.hset_multiple(&key, &newer).await.expect("seed");
    assert!(matches!(
        store.begin(&claim("newer", t0())).await,
        Err(StoreError::Malformed(_))
    ));
    let item: HashMap<String, String> = connection.hgetall(&key).await.expect("item");
    assert_eq!(item[field::SCHEMA], (SCHEMA_VERSION + 1).to_string());
    assert!(!item.contains_key(field::LEASE_TOKEN));
}

/// A key holding something else than a hash (another user of the server without a prefix) is
/// malformed for every call, never an outage or a lost lease, and is left as it was.
#[tokio::test]
async fn a_key_that_is_not_a_hash_is_malformed_and_left_alone() {
    let (store, mut connection) = store_and_connection().await;
    let key = store.redis_key("taken");
    let () = connection.set(&key, "someone else's").await.expect("seed");
    assert!(matches!(
        store.begin(&claim("taken", t0())).await,
        Err(StoreError::Malformed(_))
    ));
    let lease = started(&store, &claim("free", t0())).await;
    assert!(matches!(
        store.complete("taken", &lease, t0(), None).await,
        Err(StoreError::Malformed(_))
    ));
    let value: String = connection.get(&key).await.expect("value");
    assert_eq!(value, "someone else's");
}

/// An unfinished item without its first attempt's time (hand-made or damaged) whose holder's
/// lease ran out: taken over as of unknown age (0, the oldest possible), and it stays so.
#[tokio::test]
async fn an_item_without_its_first_attempt_is_taken_over_as_of_unknown_age() {
    let (store, mut connection) = store_and_connection().await;
    let bare = [
        (field::STATUS, "IN_PROGRESS".to_owned()),
        (
            field::LEASE_TOKEN,
            idempotency::store::LeaseToken::new().to_string(),
        ),
        (field::LEASE_UNTIL, (t0() - 1).to_string()),
        (field::FINGERPRINT, FP.to_string()),
        (field::EXPIRES_AT, (t0() / 1_000 + 86_400).to_string()),
    ];
    let () = connection
        .hset_multiple(store.redis_key("bare"), &bare)
        .await
        .expect("seed");
    let unknown = |attempts| {
        Some(PriorAttempt {
            first_attempt_ms: 0,
            attempts,
        })
    };
    let (lease, prior) = started_after(&store, &claim("bare", t0())).await;
    assert_eq!(prior, unknown(0));
    store
        .mark_attempted("bare", &lease, t0() + 1)
        .await
        .expect("mark attempted");
    let (_, prior) = started_after(&store, &claim("bare", t0() + 2)).await;
    assert_eq!(prior, unknown(1));
}

/// Two users of one server: with their own prefixes, the same key is two items, each with its
/// own claim.
#[tokio::test]
async fn key_prefixes_keep_users_of_a_shared_server_apart() {
    let connection = connection().await;
    let prefix = unique_prefix();
    let orders = RedisStore::new(connection.clone(), RETENTION).with_key_prefix(&prefix);
    let emails = RedisStore::new(connection, RETENTION).with_key_prefix(format!("{prefix}email#"));
    let lease = started(&orders, &claim("u-1", t0())).await;
    orders
        .complete("u-1", &lease, t0() + 1, None)
        .await
        .expect("complete");
    assert!(matches!(
        emails.begin(&claim("u-1", t0() + 2)).await,
        Ok(Begin::Started { prior: None, .. })
    ));
    assert_eq!(
        orders.begin(&claim("u-1", t0() + 3)).await.expect("begin"),
        Begin::Done { output: None }
    );
}

/// A claim that carries an earlier attempt known from outside (a redriven copy's history)
/// counts it on a fresh key at any age, and keeps it as the key's first attempt.
#[tokio::test]
async fn an_earlier_attempt_from_outside_counts_at_any_age() {
    let (store, _) = store_and_connection().await;
    let earlier = t0() - 3_600_000;
    for (key, now_ms) in [("hour", t0()), ("weeks", t0() + 20 * 86_400_000)] {
        let request = claim(key, now_ms).with_earlier_attempt(Some(earlier));
        let (lease, prior) = started_after(&store, &request).await;
        let from_outside = Some(PriorAttempt {
            first_attempt_ms: earlier,
            attempts: 0,
        });
        assert_eq!(prior, from_outside, "{key}");
        store
            .mark_attempted(key, &lease, now_ms + 1)
            .await
            .expect("mark attempted");
        let (_, prior) = started_after(&store, &claim(key, now_ms + 2)).await;
        assert_eq!(prior.map(|p| p.first_attempt_ms), Some(earlier), "{key}");
    }
}

/// A server that cannot be reached is an outage on every call: never a lost lease, a busy key
/// or a fresh one, each of which would let the caller decide on an answer Redis never gave.
#[tokio::test]
async fn an_unreachable_server_is_an_outage_on_every_call() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
    let config = ::redis::aio::ConnectionManagerConfig::new().set_number_of_retries(0);
    let connection = client
        .get_connection_manager_lazy(config)
        .expect("a lazy connection");
    let store = RedisStore::new(connection, RETENTION);
    let lease = idempotency::store::Lease {
        token: idempotency::store::LeaseToken::new(),
        until_ms: t0() + 1,
    };
    let outage = |result: Result<(), StoreError>| matches!(result, Err(StoreError::Unavailable(_)));
    assert!(matches!(
        store.begin(&claim("k", t0())).await,
        Err(StoreError::Unavailable(_))
    ));
    assert!(outage(store.complete("k", &lease, t0(), None).await));
    assert!(outage(store.mark_attempted("k", &lease, t0()).await));
    assert!(outage(store.reject("k", &lease, t0(), "declined").await));
    assert!(outage(store.release("k", &lease).await));
    assert!(matches!(
        RedisStore::connect(&format!("redis://127.0.0.1:{port}/"), RETENTION).await,
        Err(StoreError::Unavailable(_))
    ));
}
