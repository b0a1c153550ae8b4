//! The store contract (feature `testkit`): every store implementation runs these same cases, so
//! the state machine holds whatever the backend.
//!
//! `store_contract_tests!(factory)` expands to one `#[tokio::test]` per case, where `factory` is
//! an async expression building a fresh, empty store with [`RETENTION`]. The calling crate needs
//! `tokio` with the `macros` and `rt-multi-thread` features among its dev-dependencies.
//!
//! ```no_run
//! idempotency::store_contract_tests!(async {
//!     idempotency::MemoryStore::new(idempotency::testkit::RETENTION)
//! });
//! ```

#[cfg(feature = "testkit-dynamodb")]
pub mod dynamodb;
#[cfg(feature = "testkit-dynamodb")]
pub mod dynoxide;
#[cfg(feature = "testkit-redis")]
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

use crate::guard::EffectStore;
use crate::{
    Fingerprint, IdempotencyStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
    store::PriorAttempt,
};

/// The retention every store under contract is built with.
pub const RETENTION: Duration = Duration::from_secs(18 * 86_400);
/// "Now" for the contract: the real time at the first call, so that a server that deletes
/// expired items by the real clock sees every item as live unless a case moves past its TTL.
pub fn t0() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *START.get_or_init(|| lambda_kit::Clock::now_ms(&lambda_kit::SystemClock))
}
/// The lease every contract claim asks for.
pub const LEASE_MS: u64 = 30_000;
/// The payload fingerprint of the contract's claims.
pub const FP: Fingerprint = Fingerprint(0x0123_4567_89ab_cdef);

/// A claim of `key` at `now_ms` with [`FP`] and a [`LEASE_MS`] lease.
pub fn claim(key: &str, now_ms: u64) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        fingerprint: FP,
        now_ms,
        lease_until_ms: now_ms + LEASE_MS,
        message_id: "msg-1",
        earlier_attempt_ms: None,
    }
}

/// A claim that must succeed; its lease.
pub async fn started<S: IdempotencyStore>(store: &S, request: &ClaimRequest<'_>) -> Lease {
    started_after(store, request).await.0
}

/// A claim that must succeed, with the earlier attempt it took over.
pub async fn started_after<S: IdempotencyStore>(
    store: &S,
    request: &ClaimRequest<'_>,
) -> (Lease, Option<PriorAttempt>) {
    match store.begin(request).await {
        Ok(Begin::Started { lease, prior }) => (lease, prior),
        other => panic!("expected Started, got {other:?}"),
    }
}

/// Contract: new key is started.
pub async fn new_key_is_started<S: IdempotencyStore>(store: S) {
    let (lease, prior) = started_after(&store, &claim("k", t0())).await;
    assert_eq!(lease.until_ms, t0() + LEASE_MS);
    assert_eq!(prior, None, "a fresh key has no earlier attempt");
}

/// Contract: live lease is busy until its end.
pub async fn live_lease_is_busy_until_its_end<S: IdempotencyStore>(store: S) {
    started(&store, &claim("k", t0())).await;
    let again = store.begin(&claim("k", t0() + 1_000)).await.expect("begin");
    assert_eq!(
        again,
        Begin::Busy {
            until_ms: t0() + LEASE_MS
        }
    );
}

/// Contract: a live lease with another payload is conflict.
pub async fn a_live_lease_with_another_payload_is_conflict<S: IdempotencyStore>(store: S) {
    started(&store, &claim("k", t0())).await;
    let other = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", t0() + 1)
    };
    assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
}

/// Contract: completed key is done.
pub async fn completed_key_is_done<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store
        .complete("k", &lease, t0() + 10, None)
        .await
        .expect("complete");
    assert_eq!(
        store.begin(&claim("k", t0() + 20)).await.expect("begin"),
        Begin::Done { output: None }
    );
}

/// Contract: a completion's output comes back to every duplicate, and only to the same payload.
pub async fn a_completed_keys_output_comes_back_to_duplicates<S: IdempotencyStore>(store: S) {
    // Quotes, newlines and non-ASCII text are kept as written.
    let output = "{\"receipt\":\"r-1\",\"note\":\"caf\u{e9} \\\"a\\\"\\n\"}";
    let lease = started(&store, &claim("k", t0())).await;
    store
        .complete("k", &lease, t0() + 10, Some(output))
        .await
        .expect("complete");
    for at in [t0() + 20, t0() + 30] {
        assert_eq!(
            store.begin(&claim("k", at)).await.expect("begin"),
            Begin::Done {
                output: Some(output.to_owned())
            }
        );
    }
    let other = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", t0() + 40)
    };
    assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
}

/// Contract: a key claimed afresh after its retention forgets the earlier completion's output,
/// so a completion without one is a plain done.
pub async fn a_fresh_claim_forgets_the_earlier_output<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store
        .complete("k", &lease, t0(), Some("\"old\""))
        .await
        .expect("complete");
    let later = t0() + RETENTION.as_millis() as u64 + 1_000;
    let lease = started(&store, &claim("k", later)).await;
    store
        .complete("k", &lease, later + 1, None)
        .await
        .expect("complete");
    assert_eq!(
        store.begin(&claim("k", later + 2)).await.expect("begin"),
        Begin::Done { output: None }
    );
}

/// Contract: completed key with another payload is conflict.
pub async fn completed_key_with_another_payload_is_conflict<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store
        .complete("k", &lease, t0() + 10, None)
        .await
        .expect("complete");
    let other = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", t0() + 20)
    };
    assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
}

/// Contract: done is remembered for the retention then forgotten.
pub async fn done_is_remembered_for_the_retention_then_forgotten<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store
        .complete("k", &lease, t0(), None)
        .await
        .expect("complete");
    let retention_ms = RETENTION.as_millis() as u64;
    let before = store
        .begin(&claim("k", t0() + retention_ms - 1_000))
        .await
        .expect("begin");
    assert_eq!(before, Begin::Done { output: None });
    // Past its TTL the item counts as absent, even though nothing deleted it, for any payload,
    // and nothing of the finished work's attempts carries over.
    let fresh = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", t0() + retention_ms + 1_000)
    };
    let (_, prior) = started_after(&store, &fresh).await;
    assert_eq!(prior, None);
}

/// Contract: the retention starts over when the work finishes, not when it was claimed: a
/// completion 20 s after its claim is still remembered 10 s past the claim's own retention.
pub async fn the_retention_starts_over_at_the_finish<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store
        .complete("k", &lease, t0() + 20_000, None)
        .await
        .expect("complete");
    let retention_ms = RETENTION.as_millis() as u64;
    let later = store
        .begin(&claim("k", t0() + retention_ms + 10_000))
        .await
        .expect("begin");
    assert_eq!(later, Begin::Done { output: None });
}

/// Contract: a rejected key refuses its payload for the retention (another payload is a
/// conflict), only the holder may reject, and past its TTL the key is fresh.
pub async fn a_rejected_key_is_refused_until_it_expires<S: EffectStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    let intruder = Lease {
        token: crate::store::LeaseToken::new(),
        until_ms: lease.until_ms,
    };
    assert!(matches!(
        store.reject("k", &intruder, t0(), "declined").await,
        Err(StoreError::LeaseLost)
    ));
    store
        .reject("k", &lease, t0() + 10, "card declined")
        .await
        .expect("reject");
    let retention_ms = RETENTION.as_millis() as u64;
    let again = store
        .begin(&claim("k", t0() + retention_ms - 1_000))
        .await
        .expect("begin");
    assert_eq!(again, Begin::Rejected);
    let other = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", t0() + 20)
    };
    assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
    let fresh = claim("k", t0() + retention_ms + 1_000);
    let (_, prior) = started_after(&store, &fresh).await;
    assert_eq!(
        prior, None,
        "a refusal is no earlier attempt whose effect may exist"
    );
}

/// Contract: a finished key past its TTL (completed or refused for good) starts afresh, and the
/// fresh attempt's own time is its first: an attempt of it left unsettled is judged by its own
/// age, not as one of unknown age (which would send a new order to a person at its first
/// ambiguous answer).
pub async fn an_expired_finished_key_starts_afresh_from_its_own_first_attempt<S: EffectStore>(
    store: S,
) {
    let retention_ms = RETENTION.as_millis() as u64;
    for (key, reject) in [("done", false), ("declined", true)] {
        let lease = started(&store, &claim(key, t0())).await;
        if reject {
            store
                .reject(key, &lease, t0(), "card declined")
                .await
                .expect("reject");
        } else {
            store
                .complete(key, &lease, t0(), None)
                .await
                .expect("complete");
        }
        let fresh_at = t0() + retention_ms + 1_000;
        let (lease, prior) = started_after(&store, &claim(key, fresh_at)).await;
        assert_eq!(prior, None, "{key}: a fresh start");
        store
            .mark_attempted(key, &lease, fresh_at + 10)
            .await
            .expect("mark attempted");
        let (_, prior) = started_after(&store, &claim(key, fresh_at + 20)).await;
        assert_eq!(
            prior,
            Some(PriorAttempt {
                first_attempt_ms: fresh_at,
                attempts: 1
            }),
            "{key}: the fresh attempt's own time"
        );
    }
}

/// Contract: expired lease is taken over and fences the old holder.
pub async fn expired_lease_is_taken_over_and_fences_the_old_holder<S: EffectStore>(store: S) {
    let old = started(&store, &claim("k", t0())).await;
    let later = t0() + LEASE_MS + 1;
    let (new, prior) = started_after(&store, &claim("k", later)).await;
    assert_ne!(old.token, new.token);
    // The old holder may have done the work before it vanished: the takeover is told so.
    assert_eq!(
        prior,
        Some(PriorAttempt {
            first_attempt_ms: t0(),
            attempts: 1
        })
    );
    assert!(matches!(
        store.mark_attempted("k", &old, later + 1).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.complete("k", &old, later + 1, None).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release("k", &old).await,
        Err(StoreError::LeaseLost)
    ));
    // The new holder's item is untouched: still busy for others, and completable by it.
    assert_eq!(
        store.begin(&claim("k", later + 2)).await.expect("begin"),
        Begin::Busy {
            until_ms: later + LEASE_MS
        }
    );
    store
        .complete("k", &new, later + 3, None)
        .await
        .expect("new holder completes");
    assert_eq!(
        store.begin(&claim("k", later + 4)).await.expect("begin"),
        Begin::Done { output: None }
    );
}

/// Contract: release lets the next claim start.
pub async fn release_lets_the_next_claim_start<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store.release("k", &lease).await.expect("release");
    started(&store, &claim("k", t0() + 1)).await;
}

/// Contract: only the holder may release or complete.
pub async fn only_the_holder_may_release_or_complete<S: IdempotencyStore>(store: S) {
    let holder = started(&store, &claim("k", t0())).await;
    let stranger = Lease {
        token: crate::store::LeaseToken::new(),
        ..holder
    };
    assert!(matches!(
        store.release("k", &stranger).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.complete("k", &stranger, t0() + 1, None).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.begin(&claim("k", t0() + 2)).await,
        Ok(Begin::Busy { .. })
    ));
}

/// Contract: completing a released key fails.
pub async fn completing_a_released_key_fails<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store.release("k", &lease).await.expect("release");
    assert!(matches!(
        store.complete("k", &lease, t0() + 1, None).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release("k", &lease).await,
        Err(StoreError::LeaseLost)
    ));
}

/// Contract: a done key cannot be released.
pub async fn a_done_key_cannot_be_released<S: IdempotencyStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store
        .complete("k", &lease, t0() + 1, None)
        .await
        .expect("complete");
    assert!(matches!(
        store.release("k", &lease).await,
        Err(StoreError::LeaseLost)
    ));
    assert_eq!(
        store.begin(&claim("k", t0() + 2)).await.expect("begin"),
        Begin::Done { output: None }
    );
}

/// Contract: an expired lease is not taken over by another payload.
pub async fn an_expired_lease_is_not_taken_over_by_another_payload<S: IdempotencyStore>(store: S) {
    started(&store, &claim("k", t0())).await;
    let other = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", t0() + LEASE_MS + 1)
    };
    assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
}

/// Contract: an attempted key is taken over at once by its own payload only.
pub async fn an_attempted_key_is_taken_over_at_once_by_its_own_payload_only<S: EffectStore>(
    store: S,
) {
    let first = started(&store, &claim("k", t0())).await;
    store
        .mark_attempted("k", &first, t0() + 10)
        .await
        .expect("mark attempted");
    // The lease ended with the mark: no waiting for it.
    let other = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", t0() + 20)
    };
    assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
    let (second, prior) = started_after(&store, &claim("k", t0() + 30)).await;
    assert_eq!(
        prior,
        Some(PriorAttempt {
            first_attempt_ms: t0(),
            attempts: 1
        })
    );
    // The first attempt's time survives every takeover; the attempts are counted.
    store
        .mark_attempted("k", &second, t0() + 40)
        .await
        .expect("mark attempted");
    let (third, prior) = started_after(&store, &claim("k", t0() + 50)).await;
    assert_eq!(
        prior,
        Some(PriorAttempt {
            first_attempt_ms: t0(),
            attempts: 2
        })
    );
    // A takeover is a claim like any other: busy for the same payload while it lives, and done
    // once completed.
    assert!(matches!(
        store.begin(&claim("k", t0() + 60)).await,
        Ok(Begin::Busy { .. })
    ));
    store
        .complete("k", &third, t0() + 70, None)
        .await
        .expect("complete");
    assert_eq!(
        store.begin(&claim("k", t0() + 80)).await.expect("begin"),
        Begin::Done { output: None }
    );
}

/// Contract: an attempted key past its ttl still refuses another payload.
pub async fn an_attempted_key_past_its_ttl_still_refuses_another_payload<S: EffectStore>(store: S) {
    let lease = started(&store, &claim("k", t0())).await;
    store
        .mark_attempted("k", &lease, t0())
        .await
        .expect("mark attempted");
    let late = t0() + RETENTION.as_millis() as u64 + 1_000;
    let other = ClaimRequest {
        fingerprint: Fingerprint(9),
        ..claim("k", late)
    };
    assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
    let (_, prior) = started_after(&store, &claim("k", late)).await;
    assert_eq!(prior.map(|p| p.first_attempt_ms), Some(t0()));
}

/// Contract: only the holder may mark attempted.
pub async fn only_the_holder_may_mark_attempted<S: EffectStore>(store: S) {
    let holder = started(&store, &claim("k", t0())).await;
    let stranger = Lease {
        token: crate::store::LeaseToken::new(),
        ..holder
    };
    assert!(matches!(
        store.mark_attempted("k", &stranger, t0() + 1).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.mark_attempted("absent", &holder, t0() + 1).await,
        Err(StoreError::LeaseLost)
    ));
    store
        .mark_attempted("k", &holder, t0() + 2)
        .await
        .expect("the holder marks");
    // Marking ended the lease: the holder can no longer complete or release.
    assert!(matches!(
        store.complete("k", &holder, t0() + 3, None).await,
        Err(StoreError::LeaseLost)
    ));
    assert!(matches!(
        store.release("k", &holder).await,
        Err(StoreError::LeaseLost)
    ));
}

/// A holder's finishing write that leaves the key `status`.
pub async fn finish<S: EffectStore>(
    store: &S,
    key: &str,
    lease: &Lease,
    status: crate::store::Status,
    now_ms: u64,
) -> Result<(), StoreError> {
    match status {
        crate::store::Status::Completed => store.complete(key, lease, now_ms, None).await,
        crate::store::Status::Attempted => store.mark_attempted(key, lease, now_ms).await,
        crate::store::Status::Rejected => store.reject(key, lease, now_ms, "declined").await,
        crate::store::Status::InProgress => store.release(key, lease).await,
    }
}

/// The answer a claim of the contract's payload gets from a key left `status` by its holder.
fn after_finish(status: crate::store::Status, begun: &Begin) -> bool {
    match status {
        crate::store::Status::Completed => *begun == Begin::Done { output: None },
        crate::store::Status::Rejected => *begun == Begin::Rejected,
        _ => matches!(begun, Begin::Started { prior: Some(_), .. }),
    }
}

/// Contract: a holder's finishing write (complete, mark attempted, reject) repeated finds its
/// own work and succeeds: what the SDK's retry of a write whose answer was lost meets. The
/// finish spends the lease: every other write of that holder is refused, and the key keeps the
/// state the first write left.
pub async fn a_finishing_write_repeated_by_its_holder_is_its_own<S: EffectStore>(store: S) {
    use crate::store::Status::{Attempted, Completed, InProgress, Rejected};
    for (key, status) in [("c", Completed), ("a", Attempted), ("r", Rejected)] {
        let lease = started(&store, &claim(key, t0())).await;
        finish(&store, key, &lease, status, t0() + 1)
            .await
            .expect("the holder finishes");
        finish(&store, key, &lease, status, t0() + 2)
            .await
            .unwrap_or_else(|e| panic!("{status:?} repeated by its holder: {e}"));
        for other in [Completed, Attempted, Rejected, InProgress] {
            if other == status {
                continue;
            }
            assert!(
                matches!(
                    finish(&store, key, &lease, other, t0() + 3).await,
                    Err(StoreError::LeaseLost)
                ),
                "{other:?} after {status:?} by the same holder"
            );
        }
        let begun = store.begin(&claim(key, t0() + 4)).await.expect("begin");
        assert!(after_finish(status, &begun), "{status:?}: {begun:?}");
    }
}

/// Contract: keys are independent.
pub async fn keys_are_independent<S: IdempotencyStore>(store: S) {
    started(&store, &claim("a", t0())).await;
    started(&store, &claim("b", t0())).await;
}

/// Contract: concurrent claims have exactly one winner.
pub async fn concurrent_claims_have_exactly_one_winner<S: IdempotencyStore + 'static>(store: S) {
    let store = Arc::new(store);
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.begin(&claim("hot", t0())).await })
        })
        .collect();
    let (mut won, mut busy) = (0, 0);
    for task in tasks {
        match task.await.expect("task").expect("begin") {
            Begin::Started { .. } => won += 1,
            Begin::Busy { .. } => busy += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((won, busy), (1, 63));
}

/// One `#[tokio::test]` per contract case, each with a fresh store from `$factory` (an async
/// expression).
///
/// `store_contract_tests!(sequential: $factory)` leaves out the one case that races requests,
/// for a server that is not a faithful DynamoDB there: moto's server evaluates a condition and
/// writes without a lock, and under load two of 64 racing claims both win.
#[macro_export]
macro_rules! store_contract_tests {
    ($factory:expr) => {
        $crate::store_contract_tests!(sequential: $factory);
        $crate::store_contract_tests!(@cases $factory; concurrent_claims_have_exactly_one_winner,);
    };
    (sequential: $factory:expr) => {
        $crate::store_contract_tests!(@cases $factory;
            new_key_is_started,
            live_lease_is_busy_until_its_end,
            a_live_lease_with_another_payload_is_conflict,
            completed_key_is_done,
            completed_key_with_another_payload_is_conflict,
            a_completed_keys_output_comes_back_to_duplicates,
            a_fresh_claim_forgets_the_earlier_output,
            done_is_remembered_for_the_retention_then_forgotten,
            the_retention_starts_over_at_the_finish,
            expired_lease_is_taken_over_and_fences_the_old_holder,
            an_expired_lease_is_not_taken_over_by_another_payload,
            an_attempted_key_is_taken_over_at_once_by_its_own_payload_only,
            an_attempted_key_past_its_ttl_still_refuses_another_payload,
            only_the_holder_may_mark_attempted,
            a_finishing_write_repeated_by_its_holder_is_its_own,
            release_lets_the_next_claim_start,
            only_the_holder_may_release_or_complete,
            completing_a_released_key_fails,
            a_done_key_cannot_be_released,
            a_rejected_key_is_refused_until_it_expires,
            an_expired_finished_key_starts_afresh_from_its_own_first_attempt,
            keys_are_independent,
        );
    };
    (@cases $factory:expr; $($case:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let store = $factory.await;
                $crate::testkit::$case(store).await;
            }
        )*
    };
}
