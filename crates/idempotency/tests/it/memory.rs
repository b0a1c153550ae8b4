//! The in-memory store passes the store contract.

use idempotency::MemoryStore;
use idempotency::guard::EffectStore as _;
use idempotency::store_contract_tests;

store_contract_tests!(async { MemoryStore::new(idempotency::testkit::RETENTION) });

/// The same contract behind a cache of completed keys.
mod cached {
    use idempotency::{CachedStore, MemoryStore};
    idempotency::store_contract_tests!(async {
        CachedStore::new(MemoryStore::new(idempotency::testkit::RETENTION), 64)
    });
}

/// As the DynamoDB store's case: clearing a refusal frees the key; a key in progress or absent
/// is left as it was.
#[tokio::test]
async fn clearing_a_refusal_frees_the_key_and_touches_nothing_else() {
    use idempotency::testkit::{claim, started, started_after, t0};
    use idempotency::{IdempotencyStore, store::Begin};
    let store = MemoryStore::new(idempotency::testkit::RETENTION);
    let lease = started(&store, &claim("refused", t0())).await;
    store
        .reject("refused", &lease, t0(), "payment declined")
        .await
        .expect("reject");
    started(&store, &claim("working", t0())).await;

    assert!(store.clear_rejected("refused"));
    let (_, prior) = started_after(&store, &claim("refused", t0() + 1)).await;
    assert_eq!(prior, None, "a cleared refusal leaves a fresh key");
    assert!(!store.clear_rejected("working"));
    assert!(matches!(
        store.begin(&claim("working", t0() + 1)).await,
        Ok(Begin::Busy { .. })
    ));
    assert!(!store.clear_rejected("absent"));
}

/// A finished key keeps what the DynamoDB store's item keeps (completion clears the lease, the
/// first attempt and the count), so `state`, which local tools show, tells the truth.
#[tokio::test]
async fn a_finished_key_keeps_no_lease_and_no_attempts() {
    use idempotency::IdempotencyStore;
    use idempotency::store::Status;
    use idempotency::testkit::{claim, started, t0};
    let store = MemoryStore::new(idempotency::testkit::RETENTION);
    for (key, reject) in [("done", false), ("refused", true)] {
        let lease = started(&store, &claim(key, t0())).await;
        let finished = if reject {
            store.reject(key, &lease, t0() + 1, "declined").await
        } else {
            store.complete(key, &lease, t0() + 1, None).await
        };
        finished.expect("finished");
        let state = store.state(key).expect("kept");
        let status = if reject {
            Status::Rejected
        } else {
            Status::Completed
        };
        assert_eq!(state.status, status);
        assert_eq!(
            (state.lease_until_ms, state.first_attempt_ms, state.attempts),
            (0, None, 0),
            "{key}: {state:?}"
        );
    }
}
