//! The guarded run of one key's work, written once: claim the key, find out whether an earlier
//! attempt's effect exists, do the work, and record what came of it.
//!
//! The work is a side effect in another system that takes the same key as its own idempotency
//! key (a payment provider's `Idempotency-Key`) and can be asked afterwards what became of it.
//! That system remembers a key only for a while (its key window, typically 24 hours), so the
//! store remembers that an effect *may* exist (`ATTEMPTED`) for as long as it remembers the key.
//!
//! | claim answer | look-up | work | store request | next state | decision |
//! |---|---|---|---|---|---|
//! | DONE / BUSY / CONFLICT / REJECTED | - | - | - | unchanged | `Duplicate` / `Busy` / `Conflict` / `Rejected` |
//! | STARTED, fresh key | - | done | complete | `COMPLETED` | `Performed` |
//! | STARTED, fresh key | - | failed, nothing happened | release | absent | `Failed` |
//! | STARTED | - | failed for good ([`GuardedWork::refusal`]: a decline) | reject | `REJECTED` | `Failed` |
//! | STARTED, fresh key | - | failed, may have happened | mark attempted | `ATTEMPTED` | `Failed` |
//! | STARTED, prior attempt | happened | - | complete | `COMPLETED` | `Reconciled` |
//! | STARTED, prior attempt | pending | - | mark attempted | `ATTEMPTED` | `Pending` |
//! | STARTED, prior attempt | refused for good (a decline) | - | reject | `REJECTED` | `Rejected` |
//! | STARTED, prior attempt | another payload's work under the key | - | mark attempted | `ATTEMPTED` | `Conflict` |
//! | STARTED, prior attempt | not understood | - | mark attempted | `ATTEMPTED` | `NeedsReconciliation` |
//! | STARTED, prior attempt | not happened (a definite failure) | (as a fresh key, but a failure always marks attempted) | | | |
//! | STARTED, prior attempt | unknown or unavailable, inside the key window | (as above: the same key is safe to resend) | | | |
//! | STARTED, prior attempt | unknown, past the key window, durable look-up | (as above: "unknown" is proof) | | | |
//! | STARTED, prior attempt | unknown or unavailable, past the key window | - | mark attempted | `ATTEMPTED` | `NeedsReconciliation` |
//!
//! "Inside the key window" is judged after the look-up has answered, with a margin
//! ([`GuardPolicy::key_window_margin_ms`]) for the time the resend takes to reach the other
//! system and for clocks that disagree: a resend never lands just after the key was forgotten.
//! Past the window the other system's "unknown" may only mean that it forgot, unless the
//! deployment declares its look-up durable ([`GuardPolicy::durable_look_up`]).
//!
//! Once an effect may exist, only its completion clears the record: a later attempt that fails
//! marks the key attempted again instead of releasing it, so the first attempt is never
//! forgotten while it may still have taken effect.
//!
//! # Example
//!
//! ```
//! use idempotency::LeasePolicy;
//! use idempotency::guard::GuardPolicy;
//!
//! // The other system keeps a key for a day; a look-up near the window's end counts as outside.
//! let policy = GuardPolicy::new(LeasePolicy::new(60_000, 5_000)).with_key_window(86_400_000, 60_000);
//! assert!(policy.inside_key_window(0, 3_600_000));
//! assert!(!policy.inside_key_window(0, 86_400_000));
//! ```

use std::future::Future;

use super::{
    Fingerprint, IdempotencyStore, InvalidClaim, LeasePolicy, StoreError, store::Begin,
    store::ClaimRequest, store::Lease, store::LeaseToken, store::PriorAttempt,
};
/// The store's two writes beyond the core that [`run`] needs (defined with the other store
/// contracts, so a store implements it without depending on this module).
pub use crate::store::EffectStore;
use crate::store::lease_end;
use lambda_kit::Clock;

/// Whether a failed attempt may still have taken effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effect {
    /// Proven not to have happened: the request never left, or it was refused outright.
    None,
    /// Unknown: the request went out and no definite answer came back.
    Maybe,
}

/// A failed attempt: why, and whether its effect may exist.
#[derive(Debug)]
pub struct Failed<E> {
    /// Why the attempt failed.
    pub error: E,
    /// Whether it may have taken effect anyway.
    pub effect: Effect,
}

/// What the other system says became of an earlier attempt under the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Found {
    /// It took effect.
    Happened,
    /// It definitely did not (it failed, or was refused): doing the work again is safe at any
    /// age of the key.
    NotHappened,
    /// The other system has no record of the key. Inside its key window that means nothing was
    /// done; past it, the record may simply have been forgotten.
    Unknown,
    /// It is still being processed.
    Pending,
    /// It was refused for good (a declined payment): never attempted again. The key is recorded
    /// as refused, as a refusal answered at once is ([`GuardedWork::refusal`]).
    Refused,
    /// The other system holds work under the key for another payload (another amount): the key
    /// is not this payload's. Never attempted; the run is a [`Guarded::Conflict`].
    Conflict,
    /// The other system answered in a way the caller does not understand (a status nobody
    /// documented): it settles nothing, and the work is not done on it, at any age of the key.
    Unclear,
}

/// The work a key guards.
pub trait GuardedWork: Send + Sync {
    /// What a successful attempt yields.
    type Output: Send;
    /// Why an attempt or a look-up failed.
    type Error: Send;

    /// Asks the other system what became of an earlier attempt under the key. Called only when
    /// one may have taken effect. An error means "cannot tell now".
    fn look_up(&self) -> impl Future<Output = Result<Found, Self::Error>> + Send;

    /// Does the work once.
    fn perform(&self) -> impl Future<Output = Result<Self::Output, Failed<Self::Error>>> + Send;

    /// Why a failed attempt that did nothing is final (a definite refusal that must never be
    /// retried, such as a declined payment), or `None` (the default) when it is not. A final
    /// refusal is recorded ([`EffectStore::reject`]), so no later delivery of the same
    /// payload attempts the work again.
    fn refusal(&self, error: &Self::Error) -> Option<String> {
        let _ = error;
        None
    }

    /// The output to keep with the completion, as text (JSON, say), for a duplicate to get back
    /// through [`GuardedWork::replay`]; `None` (the default) keeps nothing. One longer than
    /// [`crate::store::MAX_OUTPUT_BYTES`] is not kept: the key is still completed, and the duplicate is
    /// a plain [`Guarded::Duplicate`].
    fn keep(&self, output: &Self::Output) -> Option<String> {
        let _ = output;
        None
    }

    /// A kept output read back for a duplicate ([`Guarded::Replayed`]), or `None` (the default,
    /// and for text that no longer reads as an output: the duplicate is then a plain
    /// [`Guarded::Duplicate`]).
    fn replay(&self, kept: &str) -> Option<Self::Output> {
        let _ = kept;
        None
    }
}

/// How the guard claims keys and trusts the other system.
///
/// [`GuardPolicy::new`] trusts nothing: no key window (an earlier attempt that may have
/// happened is looked up, and "unknown" settles nothing) and no durable look-up. Work that calls
/// an API taking an idempotency key states its window with [`GuardPolicy::with_key_window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardPolicy {
    /// How long claims last.
    pub lease: LeasePolicy,
    /// How long the other system remembers a key after its first use. Inside it, resending with
    /// the same key is safe even when the look-up cannot answer; past it, never blindly.
    pub key_window_ms: u64,
    /// How much of the key window's end is not trusted: the longest a resend takes to reach the
    /// other system after the look-up, plus an allowance for clocks that disagree.
    pub key_window_margin_ms: u64,
    /// Whether the other system's look-up keeps every key for good, so that "unknown" proves
    /// nothing was done at any age. Off unless the other system guarantees it.
    pub durable_look_up: bool,
}

impl GuardPolicy {
    /// Claims leased by `lease`, no key window, no durable look-up.
    pub fn new(lease: LeasePolicy) -> Self {
        Self {
            lease,
            key_window_ms: 0,
            key_window_margin_ms: 0,
            durable_look_up: false,
        }
    }

    /// The other system remembers a key for `window_ms` after its first use; the last
    /// `margin_ms` of it are not trusted (a resend's travel time, clocks that disagree).
    pub fn with_key_window(self, window_ms: u64, margin_ms: u64) -> Self {
        Self {
            key_window_ms: window_ms,
            key_window_margin_ms: margin_ms,
            ..self
        }
    }

    /// Whether the other system's look-up keeps every key for good.
    pub fn with_durable_look_up(self, durable_look_up: bool) -> Self {
        Self {
            durable_look_up,
            ..self
        }
    }

    /// Whether a key first used at `first_attempt_ms` is still safely inside the key window at
    /// `now_ms`.
    pub fn inside_key_window(&self, first_attempt_ms: u64, now_ms: u64) -> bool {
        now_ms.saturating_add(self.key_window_margin_ms)
            < first_attempt_ms.saturating_add(self.key_window_ms)
    }
}

/// Why an earlier attempt could not be settled.
#[derive(Debug)]
#[non_exhaustive]
pub enum Unsettled<E> {
    /// The look-up failed.
    LookUpFailed(E),
    /// The look-up answered that the key is unknown, which past the key window proves nothing.
    NotFound,
    /// The look-up answered in a way not understood ([`Found::Unclear`]).
    Unclear,
}

/// One key's work to guard: [`Claim::new`], and [`Claim::with_earlier_attempt_ms`] for a copy
/// redriven from a DLQ. Fields may be added.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Claim<'a> {
    /// The idempotency key.
    pub key: &'a str,
    /// A digest of the payload: the same key with another payload is a conflict.
    pub fingerprint: Fingerprint,
    /// Kept on the item for forensics.
    pub message_id: &'a str,
    /// The invocation's deadline, epoch ms: the lease never outlives it by much.
    pub deadline_ms: u64,
    /// When an attempt under the key may already have been made, as the message itself says (a
    /// dead-lettered copy's failure history, `sqs_batch::dead_letter::Failure::earliest_ms`):
    /// once the store may have forgotten it, the work is looked up before it is done again
    /// ([`crate::store::ClaimRequest::earlier_attempt_ms`]). `None` for most messages.
    pub earlier_attempt_ms: Option<u64>,
}

impl<'a> Claim<'a> {
    /// A claim of `key` for the payload `fingerprint`, by the message `message_id`, in an
    /// invocation ending at `deadline_ms` (epoch ms).
    pub fn new(
        key: &'a str,
        fingerprint: Fingerprint,
        message_id: &'a str,
        deadline_ms: u64,
    ) -> Self {
        Self {
            key,
            fingerprint,
            message_id,
            deadline_ms,
            earlier_attempt_ms: None,
        }
    }

    /// When the message says an attempt may already have been made (epoch ms), or `None`.
    pub fn with_earlier_attempt_ms(self, earlier_attempt_ms: Option<u64>) -> Self {
        Self {
            earlier_attempt_ms,
            ..self
        }
    }
}

/// What the guarded run came to.
///
/// Variants may be added: a match outside this crate needs a wildcard arm, which must never
/// acknowledge (retry what you cannot name).
#[derive(Debug)]
#[non_exhaustive]
pub enum Guarded<T, E> {
    /// Done now and recorded.
    Performed(T),
    /// An earlier attempt took effect (the look-up said so): recorded as done, not redone.
    Reconciled,
    /// Done before with the same payload.
    Duplicate,
    /// Done before with the same payload, and this is the output that run kept
    /// ([`GuardedWork::keep`]).
    Replayed(T),
    /// Someone holds a live lease until this epoch ms.
    Busy {
        /// Epoch ms.
        until_ms: u64,
    },
    /// The key belongs to another payload (in the store, or as the other system's look-up
    /// found).
    Conflict,
    /// Refused for good before with the same payload ([`GuardedWork::refusal`]): not attempted.
    Rejected,
    /// An earlier attempt is still being processed by the other system.
    Pending,
    /// This attempt failed; the key is released (`Effect::None` on a fresh key) or kept
    /// attempted.
    Failed {
        /// Why.
        error: E,
        /// Whether it may have taken effect.
        effect: Effect,
    },
    /// An earlier attempt may have taken effect and the look-up could not settle it: past the key
    /// window it failed or did not know the key (the other system may have forgotten), or at any
    /// age it answered in a way not understood. Redoing the work could do it twice, so it was not
    /// done.
    NeedsReconciliation {
        /// Why the look-up could not settle it.
        why: Unsettled<E>,
        /// When the first attempt went out, epoch ms (0 when unknown).
        first_attempt_ms: u64,
    },
    /// A store call failed; nothing is known for sure.
    Store(StoreError),
    /// The lease was taken over before the outcome was recorded; the new holder finishes.
    LeaseLost,
    /// The claim cannot be asked for (an empty key): nothing was claimed or done, and no
    /// redelivery changes that.
    Invalid(InvalidClaim),
}

/// A guarded run's outcome, with what the log needs.
#[derive(Debug)]
pub struct Run<T, E> {
    /// What came of it.
    pub outcome: Guarded<T, E>,
    /// The claim's lease token, when the key was claimed.
    pub lease: Option<LeaseToken>,
    /// The earlier attempt the claim took over, if any.
    pub prior: Option<PriorAttempt>,
}

/// Claims `claim.key`, reconciles an earlier attempt if there may be one, performs `work`, and
/// records the outcome.
// The steps are separate async functions so that each one's state lives in the run's future
// only while it is awaited: a record's future is moved around the batch queue, and its size is
// the largest state it passes through.
pub async fn run<S, C, W>(
    store: &S,
    clock: &C,
    policy: &GuardPolicy,
    claim: &Claim<'_>,
    work: &W,
) -> Run<W::Output, W::Error>
where
    S: EffectStore,
    C: Clock,
    W: GuardedWork,
{
    // Another record of the batch with this key finishes first: this one then meets its
    // result, not its live claim.
    let _turn = key_turn(claim.key).await;
    let (lease, prior) = match claim_key(store, clock, policy, claim, work).await {
        Ok(held) => held,
        Err(unclaimed) => {
            return Run {
                outcome: match unclaimed {
                    Unclaimed::Duplicate => Guarded::Duplicate,
                    Unclaimed::Replayed(output) => Guarded::Replayed(output),
                    Unclaimed::Busy { until_ms } => Guarded::Busy { until_ms },
                    Unclaimed::Conflict => Guarded::Conflict,
                    Unclaimed::Rejected => Guarded::Rejected,
                    Unclaimed::Store(e) => Guarded::Store(e),
                    Unclaimed::Invalid(invalid) => Guarded::Invalid(invalid),
                },
                lease: None,
                prior: None,
            };
        }
    };
    let outcome = attempt(work, prior, clock, policy).await;
    Run {
        outcome: settle(store, clock, claim.key, &lease, prior, work, outcome).await,
        lease: Some(lease.token),
        prior,
    }
}

/// Why a key was not claimed, for [`run`] and `once` to word in their own outcomes.
pub(crate) enum Unclaimed<T> {
    /// Done before with the same payload.
    Duplicate,
    /// Done before, with the output that run kept.
    Replayed(T),
    /// Held until this epoch ms.
    Busy { until_ms: u64 },
    /// Another payload's key.
    Conflict,
    /// Refused for good before (only an [`EffectStore`] records that).
    Rejected,
    /// The store failed.
    Store(StoreError),
    /// Not asked for: the key cannot be claimed.
    Invalid(InvalidClaim),
}

/// Holds `key` against the other records of the `sqs_batch` processor running this one
/// (`sqs_batch::processor::key_turn`), until dropped. Without `sqs-batch` there is no batch.
#[cfg(feature = "sqs-batch")]
pub(crate) async fn key_turn(key: &str) -> sqs_batch::processor::KeyTurn {
    sqs_batch::processor::key_turn(key).await
}

/// Without `sqs-batch` no processor runs records side by side: a turn that holds nothing.
#[cfg(not(feature = "sqs-batch"))]
pub(crate) async fn key_turn(_key: &str) -> NoTurn {
    NoTurn
}

/// What [`key_turn`] holds without `sqs-batch`: nothing.
#[cfg(not(feature = "sqs-batch"))]
pub(crate) struct NoTurn;

/// The claim: the lease and the earlier attempt it took over, or what came of the key when it
/// could not be claimed.
pub(crate) async fn claim_key<S, C, W>(
    store: &S,
    clock: &C,
    policy: &GuardPolicy,
    claim: &Claim<'_>,
    work: &W,
) -> Result<(Lease, Option<PriorAttempt>), Unclaimed<W::Output>>
where
    S: IdempotencyStore,
    C: Clock,
    W: GuardedWork,
{
    if claim.key.is_empty() {
        return Err(Unclaimed::Invalid(InvalidClaim::EmptyKey));
    }
    let now_ms = clock.now_ms();
    let begun = store
        .begin(&ClaimRequest {
            key: claim.key,
            fingerprint: claim.fingerprint,
            now_ms,
            lease_until_ms: lease_end(
                now_ms,
                policy.lease.lease_ms,
                claim.deadline_ms,
                policy.lease.margin_ms,
            ),
            message_id: claim.message_id,
            earlier_attempt_ms: claim.earlier_attempt_ms,
        })
        .await;
    match begun {
        Ok(Begin::Started { lease, prior }) => Ok((lease, prior)),
        Ok(Begin::Done { output }) => {
            Err(match output.as_deref().and_then(|kept| work.replay(kept)) {
                Some(output) => Unclaimed::Replayed(output),
                None => Unclaimed::Duplicate,
            })
        }
        Ok(Begin::Rejected) => Err(Unclaimed::Rejected),
        Ok(Begin::Busy { until_ms }) => Err(Unclaimed::Busy { until_ms }),
        Err(e) => Err(Unclaimed::Store(e)),
        Ok(Begin::Conflict) => Err(Unclaimed::Conflict),
    }
}

/// Completes the key, with the output the work keeps ([`GuardedWork::keep`]), if any. (The
/// output is kept as text before the call: a reference to it held across the write would ask
/// the output to be `Sync`.)
pub(crate) async fn complete<S: IdempotencyStore, C: Clock>(
    store: &S,
    clock: &C,
    key: &str,
    lease: &Lease,
    kept: Option<String>,
) -> Result<(), StoreError> {
    match kept {
        // Boxed, as the refusals: only work that keeps its output pays for the room.
        Some(kept) => {
            Box::pin(async move {
                let kept = crate::store::bounded_output(key, Some(&kept));
                store.complete(key, lease, clock.now_ms(), kept).await
            })
            .await
        }
        None => store.complete(key, lease, clock.now_ms(), None).await,
    }
}

/// Finds out what became of an earlier attempt, if there may be one, and performs the work
/// unless that answers the question.
async fn attempt<W: GuardedWork, C: Clock>(
    work: &W,
    prior: Option<PriorAttempt>,
    clock: &C,
    policy: &GuardPolicy,
) -> Guarded<W::Output, W::Error> {
    if let Some(prior) = prior {
        let found = work.look_up().await;
        // Judged after the look-up, which may have taken its whole bound.
        let inside = policy.inside_key_window(prior.first_attempt_ms, clock.now_ms());
        let unsettled = match found {
            Ok(Found::Happened) => return Guarded::Reconciled,
            Ok(Found::Pending) => return Guarded::Pending,
            Ok(Found::Refused) => return Guarded::Rejected,
            // Not this payload's key, whatever its age: nothing is done under it.
            Ok(Found::Conflict) => return Guarded::Conflict,
            Ok(Found::Unclear) => Some(Unsettled::Unclear),
            Ok(Found::NotHappened) => None,
            // Inside the key window the other system still knows the key: resending it returns
            // the earlier attempt's result instead of doing the work twice.
            Ok(Found::Unknown) if inside || policy.durable_look_up => None,
            Err(_) if inside => None,
            Ok(Found::Unknown) => Some(Unsettled::NotFound),
            Err(error) => Some(Unsettled::LookUpFailed(error)),
        };
        if let Some(why) = unsettled {
            return Guarded::NeedsReconciliation {
                why,
                first_attempt_ms: prior.first_attempt_ms,
            };
        }
    }
    match work.perform().await {
        Ok(output) => Guarded::Performed(output),
        Err(Failed { error, effect }) => Guarded::Failed { error, effect },
    }
}

/// Records what the attempt came to: complete, release (a fresh key whose attempt provably did
/// nothing), or keep the key attempted (anything that may have taken effect, or did not happen
/// and proves nothing about an earlier attempt).
async fn settle<S: EffectStore, C: Clock, W: GuardedWork>(
    store: &S,
    clock: &C,
    key: &str,
    lease: &Lease,
    prior: Option<PriorAttempt>,
    work: &W,
    outcome: Guarded<W::Output, W::Error>,
) -> Guarded<W::Output, W::Error> {
    let result = match &outcome {
        Guarded::Performed(output) => complete(store, clock, key, lease, work.keep(output)).await,
        Guarded::Reconciled => store.complete(key, lease, clock.now_ms(), None).await,
        // Only the look-up gets here with a claim: an earlier attempt was refused for good.
        // Boxed, as the other refusal: a rare path does not grow every record's future.
        Guarded::Rejected => {
            Box::pin(async move {
                store
                    .reject(
                        key,
                        lease,
                        clock.now_ms(),
                        "refused for good, as the look-up found",
                    )
                    .await
            })
            .await
        }
        Guarded::Failed {
            error,
            effect: Effect::None,
        } => match work.refusal(error) {
            // Boxed: only a refusal pays for its reason's room in the run's future.
            Some(reason) => {
                Box::pin(async move { store.reject(key, lease, clock.now_ms(), &reason).await })
                    .await
            }
            None if prior.is_none() => store.release(key, lease).await,
            None => store.mark_attempted(key, lease, clock.now_ms()).await,
        },
        _ => store.mark_attempted(key, lease, clock.now_ms()).await,
    };
    recorded(key, outcome, result)
}

/// What a run came to once its outcome was written: a write that failed after the work was done
/// is [`Guarded::LeaseLost`] or [`Guarded::Store`]; after work not done, the decision stands.
fn recorded<T, E>(
    key: &str,
    outcome: Guarded<T, E>,
    result: Result<(), StoreError>,
) -> Guarded<T, E> {
    match (outcome, result) {
        (outcome, Ok(())) => outcome,
        // Done but not recorded: the next claim finds the effect through the look-up.
        (Guarded::Performed(_) | Guarded::Reconciled, Err(StoreError::LeaseLost)) => {
            Guarded::LeaseLost
        }
        (Guarded::Performed(_) | Guarded::Reconciled, Err(e)) => Guarded::Store(e),
        // Not done: the decision stands. If the write failed the lease simply runs out, and a
        // lease that ran out counts as an attempt whose effect may exist.
        (outcome, Err(e)) => {
            tracing::warn!(key, error = %e, "could not record the attempt's outcome");
            outcome
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::store::Status;
    use lambda_kit::ManualClock;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// The constructors users build with (the fields are not theirs to write): each sets what it
    /// names and leaves the rest as `new` has it, which trusts nothing.
    #[test]
    fn policies_and_claims_are_built_as_named() {
        let lease = LeasePolicy {
            lease_ms: 30_000,
            margin_ms: 2_000,
        };
        let policy = GuardPolicy::new(lease);
        assert_eq!(
            (
                policy.lease,
                policy.key_window_ms,
                policy.key_window_margin_ms
            ),
            (lease, 0, 0)
        );
        assert!(!policy.durable_look_up);
        // No window: nothing is ever safely inside it.
        assert!(!policy.inside_key_window(T0, T0));
        let windowed = policy.with_key_window(600_000, 60_000);
        assert_eq!(
            (windowed.key_window_ms, windowed.key_window_margin_ms),
            (600_000, 60_000)
        );
        assert!(windowed.inside_key_window(T0, T0 + 539_999));
        assert!(!windowed.inside_key_window(T0, T0 + 540_000));
        assert!(windowed.with_durable_look_up(true).durable_look_up);
        assert_eq!(windowed.with_durable_look_up(true).key_window_ms, 600_000);

        let fingerprint = Fingerprint(7);
        let claim = Claim::new("o-1", fingerprint, "m-1", T0);
        assert_eq!(
            (
                claim.key,
                claim.fingerprint,
                claim.message_id,
                claim.deadline_ms
            ),
            ("o-1", fingerprint, "m-1", T0)
        );
        assert_eq!(claim.earlier_attempt_ms, None);
        let redriven = claim.with_earlier_attempt_ms(Some(T0 - 1));
        assert_eq!(redriven.earlier_attempt_ms, Some(T0 - 1));
        assert_eq!((redriven.key, redriven.deadline_ms), ("o-1", T0));
    }

    const T0: u64 = 1_767_225_600_000;
    const POLICY: GuardPolicy = GuardPolicy {
        lease: LeasePolicy {
            lease_ms: 60_000,
            margin_ms: 1_000,
        },
        key_window_ms: 86_400_000,
        key_window_margin_ms: 0,
        durable_look_up: false,
    };

    /// Work whose look-up and attempts answer from scripts, counting attempts.
    #[derive(Default)]
    struct Scripted {
        look_up: Mutex<Vec<Result<Found, &'static str>>>,
        attempts: Mutex<Vec<Result<(), Failed<&'static str>>>>,
        performed: AtomicUsize,
        looked_up: AtomicUsize,
    }

    impl Scripted {
        fn attempts(results: Vec<Result<(), Failed<&'static str>>>) -> Self {
            Self {
                attempts: Mutex::new(results),
                ..Self::default()
            }
        }
    }

    impl GuardedWork for Scripted {
        type Output = ();
        type Error = &'static str;

        async fn look_up(&self) -> Result<Found, &'static str> {
            self.looked_up.fetch_add(1, Ordering::SeqCst);
            self.look_up.lock().unwrap().remove(0)
        }

        async fn perform(&self) -> Result<(), Failed<&'static str>> {
            self.performed.fetch_add(1, Ordering::SeqCst);
            self.attempts.lock().unwrap().remove(0)
        }
    }

    fn maybe() -> Result<(), Failed<&'static str>> {
        Err(Failed {
            error: "timed out",
            effect: Effect::Maybe,
        })
    }

    fn not_sent() -> Result<(), Failed<&'static str>> {
        Err(Failed {
            error: "refused",
            effect: Effect::None,
        })
    }

    fn claim(fingerprint: u64) -> Claim<'static> {
        Claim {
            key: "k",
            fingerprint: Fingerprint(fingerprint),
            message_id: "m",
            deadline_ms: u64::MAX,
            earlier_attempt_ms: None,
        }
    }

    /// A first attempt whose outcome is unknown: the key is left `ATTEMPTED`.
    async fn leave_attempted(store: &MemoryStore, clock: &ManualClock, policy: &GuardPolicy) {
        let _ = run(
            store,
            clock,
            policy,
            &claim(1),
            &Scripted::attempts(vec![maybe()]),
        )
        .await;
    }

    fn store() -> MemoryStore {
        MemoryStore::new(Duration::from_secs(18 * 86_400))
    }

    fn status_of(store: &MemoryStore) -> Option<Status> {
        store.state("k").map(|s| s.status)
    }

    #[tokio::test]
    async fn a_fresh_key_is_performed_and_recorded() {
        let (store, clock) = (store(), ManualClock::at(T0));
        let work = Scripted::attempts(vec![Ok(())]);
        let run = run(&store, &clock, &POLICY, &claim(1), &work).await;
        assert!(matches!(run.outcome, Guarded::Performed(())));
        assert!(run.lease.is_some() && run.prior.is_none());
        assert_eq!(work.looked_up.load(Ordering::SeqCst), 0);
        let again = super::run(&store, &clock, &POLICY, &claim(1), &work).await;
        assert!(matches!(again.outcome, Guarded::Duplicate));
    }

    #[tokio::test]
    async fn an_attempt_that_did_nothing_gives_a_fresh_key_back() {
        let (store, clock) = (store(), ManualClock::at(T0));
        let work = Scripted::attempts(vec![not_sent()]);
        let run = run(&store, &clock, &POLICY, &claim(1), &work).await;
        assert!(matches!(
            run.outcome,
            Guarded::Failed {
                effect: Effect::None,
                ..
            }
        ));
        assert_eq!(status_of(&store), None, "released");
    }

    #[tokio::test]
    async fn an_ambiguous_attempt_is_kept_and_the_next_claim_looks_it_up() {
        let (store, clock) = (store(), ManualClock::at(T0));
        let first = Scripted::attempts(vec![maybe()]);
        let _ = run(&store, &clock, &POLICY, &claim(1), &first).await;
        clock.advance_ms(5_000);
        let second = Scripted {
            look_up: Mutex::new(vec![Ok(Found::Happened)]),
            ..Scripted::default()
        };
        let run = run(&store, &clock, &POLICY, &claim(1), &second).await;
        assert!(matches!(run.outcome, Guarded::Reconciled));
        assert_eq!(
            run.prior,
            Some(PriorAttempt {
                first_attempt_ms: T0,
                attempts: 1
            })
        );
        assert_eq!(second.performed.load(Ordering::SeqCst), 0);
        assert_eq!(status_of(&store), Some(Status::Completed));
    }

    /// A charge that was pending, then declined: the look-up's decline is final at any age of
    /// the key. Before `Found::Refused`, a decline read as "failed" was charged again once the
    /// key window had passed (the simulator's "charged after a decline").
    #[tokio::test]
    async fn an_earlier_attempt_refused_for_good_is_recorded_and_never_redone() {
        let (store, clock) = (store(), ManualClock::at(T0));
        leave_attempted(&store, &clock, &POLICY).await;
        clock.advance_ms(2 * POLICY.key_window_ms);
        let work = Scripted {
            look_up: Mutex::new(vec![Ok(Found::Refused)]),
            attempts: Mutex::new(vec![Ok(())]),
            ..Scripted::default()
        };
        let refused = run(&store, &clock, &POLICY, &claim(1), &work).await;
        assert!(
            matches!(refused.outcome, Guarded::Rejected),
            "{:?}",
            refused.outcome
        );
        assert_eq!(work.performed.load(Ordering::SeqCst), 0);
        assert_eq!(status_of(&store), Some(Status::Rejected));
        let again = run(&store, &clock, &POLICY, &claim(1), &work).await;
        assert!(matches!(again.outcome, Guarded::Rejected));
        assert_eq!(
            work.looked_up.load(Ordering::SeqCst),
            1,
            "not even looked up again"
        );
    }

    #[tokio::test]
    async fn a_pending_earlier_attempt_is_not_redone() {
        let (store, clock) = (store(), ManualClock::at(T0));
        leave_attempted(&store, &clock, &POLICY).await;
        let work = Scripted {
            look_up: Mutex::new(vec![Ok(Found::Pending)]),
            ..Scripted::default()
        };
        let run = run(&store, &clock, &POLICY, &claim(1), &work).await;
        assert!(matches!(run.outcome, Guarded::Pending));
        assert_eq!(work.performed.load(Ordering::SeqCst), 0);
        assert_eq!(status_of(&store), Some(Status::Attempted));
    }

    #[tokio::test]
    async fn an_unanswered_look_up_resends_inside_the_key_window_and_never_after_it() {
        let (store, clock) = (store(), ManualClock::at(T0));
        leave_attempted(&store, &clock, &POLICY).await;
        clock.advance_ms(POLICY.key_window_ms - 1);
        let inside = Scripted {
            look_up: Mutex::new(vec![Err("lookup down")]),
            attempts: Mutex::new(vec![maybe()]),
            ..Scripted::default()
        };
        let _ = run(&store, &clock, &POLICY, &claim(1), &inside).await;
        assert_eq!(inside.performed.load(Ordering::SeqCst), 1);

        // The first attempt's time survives the second attempt: the window is not restarted.
        clock.advance_ms(1);
        let past = Scripted {
            look_up: Mutex::new(vec![Err("lookup down")]),
            ..Scripted::default()
        };
        let run = run(&store, &clock, &POLICY, &claim(1), &past).await;
        assert!(
            matches!(
                run.outcome,
                Guarded::NeedsReconciliation {
                    first_attempt_ms: T0,
                    ..
                }
            ),
            "{:?}",
            run.outcome
        );
        assert_eq!(past.performed.load(Ordering::SeqCst), 0);
        assert_eq!(status_of(&store), Some(Status::Attempted));
    }

    /// Past the key window only a definite "it did not happen" allows the work again; the other
    /// system's "unknown" may just mean it forgot, unless its look-up is declared durable.
    #[tokio::test]
    async fn past_the_key_window_unknown_is_proof_only_from_a_durable_look_up() {
        for (found, durable, performed) in [
            (Found::Unknown, false, 0),
            (Found::Unknown, true, 1),
            (Found::NotHappened, false, 1),
        ] {
            let (store, clock) = (store(), ManualClock::at(T0));
            let policy = GuardPolicy {
                durable_look_up: durable,
                ..POLICY
            };
            let first = Scripted::attempts(vec![maybe()]);
            let _ = run(&store, &clock, &policy, &claim(1), &first).await;
            clock.advance_ms(2 * POLICY.key_window_ms);
            let work = Scripted {
                look_up: Mutex::new(vec![Ok(found)]),
                attempts: Mutex::new(vec![Ok(())]),
                ..Scripted::default()
            };
            let run = run(&store, &clock, &policy, &claim(1), &work).await;
            assert_eq!(
                work.performed.load(Ordering::SeqCst),
                performed,
                "{found:?}, durable {durable}: {:?}",
                run.outcome
            );
            if performed == 0 {
                assert!(matches!(
                    run.outcome,
                    Guarded::NeedsReconciliation {
                        why: Unsettled::NotFound,
                        first_attempt_ms: T0
                    }
                ));
                assert_eq!(status_of(&store), Some(Status::Attempted));
            } else {
                assert!(matches!(run.outcome, Guarded::Performed(())));
            }
        }
    }

    /// A look-up that takes long, near the end of the key window: the window is judged when the
    /// resend would go out, not when the key was claimed, with the policy's margin.
    #[tokio::test]
    async fn the_key_window_is_judged_after_the_look_up_with_a_margin() {
        struct SlowLookUp<'a>(&'a ManualClock, AtomicUsize);
        impl GuardedWork for SlowLookUp<'_> {
            type Output = ();
            type Error = &'static str;
            async fn look_up(&self) -> Result<Found, &'static str> {
                self.0.advance_ms(15_000);
                Err("timed out")
            }
            async fn perform(&self) -> Result<(), Failed<&'static str>> {
                self.1.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
        let policy = GuardPolicy {
            key_window_margin_ms: 10_000,
            ..POLICY
        };
        let (store, clock) = (store(), ManualClock::at(T0));
        leave_attempted(&store, &clock, &policy).await;
        // Claimed 20 s before the window ends; the look-up takes 15 s of it.
        clock.advance_ms(POLICY.key_window_ms - 20_000);
        let work = SlowLookUp(&clock, AtomicUsize::new(0));
        let run = run(&store, &clock, &policy, &claim(1), &work).await;
        assert_eq!(work.1.load(Ordering::SeqCst), 0, "{:?}", run.outcome);
        assert!(matches!(
            run.outcome,
            Guarded::NeedsReconciliation {
                why: Unsettled::LookUpFailed("timed out"),
                ..
            }
        ));
    }

    #[tokio::test]
    async fn once_an_effect_may_exist_a_failure_that_did_nothing_keeps_the_record() {
        let (store, clock) = (store(), ManualClock::at(T0));
        leave_attempted(&store, &clock, &POLICY).await;
        let work = Scripted {
            look_up: Mutex::new(vec![Ok(Found::NotHappened)]),
            attempts: Mutex::new(vec![not_sent()]),
            ..Scripted::default()
        };
        let _ = run(&store, &clock, &POLICY, &claim(1), &work).await;
        assert_eq!(work.performed.load(Ordering::SeqCst), 1);
        assert_eq!(status_of(&store), Some(Status::Attempted));
    }

    #[tokio::test]
    async fn another_payload_never_takes_over_a_key_whose_effect_may_exist() {
        let (store, clock) = (store(), ManualClock::at(T0));
        leave_attempted(&store, &clock, &POLICY).await;
        let work = Scripted::default();
        let run = run(&store, &clock, &POLICY, &claim(2), &work).await;
        assert!(matches!(run.outcome, Guarded::Conflict));
        assert_eq!(work.performed.load(Ordering::SeqCst), 0);
    }
}
