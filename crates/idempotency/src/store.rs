//! For store authors: the state machine every store shares, written once. A store keeps a
//! [`ClaimState`] per key and applies its writes atomically and fenced; what a claim may take
//! over ([`claimable`]), what a refused claim means ([`decide`]), what a successful one took over
//! ([`prior_attempt`]) and what it writes ([`claimed_state`]) are decided here, so every store
//! answers alike (the contract suite, feature `testkit`, holds them to it). A user of the crate
//! never needs this module.
//!
//! # Example
//!
//! ```
//! use idempotency::store::lease_end;
//!
//! // A claim made at 0 for work whose invocation ends at 60 s: leased until the deadline plus
//! // the margin, never past the configured lease.
//! assert_eq!(lease_end(0, 300_000, 60_000, 5_000), 65_000);
//! assert_eq!(lease_end(0, 30_000, 60_000, 5_000), 30_000);
//! ```

use std::fmt;
use std::future::Future;

use crate::{Fingerprint, StoreError};

/// The unique token of one claim. Only its holder may complete or release the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseToken(uuid::Uuid);

impl LeaseToken {
    /// A random version-4 UUID. The token only has to be unique among the claimants of one key,
    /// not secret (only this function writes the table), so it comes from the per-thread
    /// generator seeded from the OS at start, not from a system call per claim as
    /// `Uuid::new_v4` makes.
    pub fn new() -> Self {
        Self(uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid())
    }
}

impl Default for LeaseToken {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.as_hyphenated().fmt(f)
    }
}

/// A held claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The claim's token: only its holder may complete, mark or release the key.
    pub token: LeaseToken,
    /// Epoch ms after which another claimant may take the key over.
    pub until_ms: u64,
}

/// An earlier attempt at a key's work whose effect may exist: the claim took over an `ATTEMPTED`
/// key, or an `IN_PROGRESS` one whose holder's lease ran out before it recorded an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriorAttempt {
    /// When the first attempt under this key began, epoch ms: how old the key is downstream.
    pub first_attempt_ms: u64,
    /// Claims of this key so far, this one excluded.
    pub attempts: u32,
}

/// The answer to a claim.
///
/// `Rejected` is the look-up layer's state ([`EffectStore::reject`])
/// answered by the core's claim: a refusal lives on the key's one item, and the claim is one
/// conditional write that must refuse it in the same step, so the answer cannot come from a
/// second call. A store that serves only the core never writes `REJECTED` and never answers it;
/// [`decide`] produces it for stores that do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Begin {
    /// The caller owns the key until the lease ends. `prior` is set when an earlier attempt may
    /// have taken effect: find out before doing the work again (see [`guard`](crate::guard)).
    Started {
        /// The lease the caller now holds.
        lease: Lease,
        /// The earlier attempt, if one may have taken effect.
        prior: Option<PriorAttempt>,
    },
    /// Done before with the same payload: acknowledge the duplicate.
    Done {
        /// The work's output as kept with the completion ([`IdempotencyStore::complete`](crate::IdempotencyStore::complete)), for
        /// the duplicate to get back; `None` when none was kept.
        output: Option<String>,
    },
    /// Someone holds a live lease: retry later, never acknowledge.
    Busy {
        /// When that lease ends, epoch ms.
        until_ms: u64,
    },
    /// The key belongs to another payload.
    Conflict,
    /// Refused for good before with the same payload (see [`Status::Rejected`]): refuse the
    /// duplicate without doing the work.
    Rejected,
}

/// A claim request.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ClaimRequest<'a> {
    /// The business key.
    pub key: &'a str,
    /// The payload's fingerprint.
    pub fingerprint: Fingerprint,
    /// Now, epoch ms (injected).
    pub now_ms: u64,
    /// When the lease ends if the claim succeeds (see [`lease_end`]).
    pub lease_until_ms: u64,
    /// Kept on the item for forensics.
    pub message_id: &'a str,
    /// When an attempt under the key may already have been made, as known from outside the
    /// store (a dead-lettered message's failure history), epoch ms. A claim that finds the key
    /// fresh counts it as a prior attempt when an item written since then may have expired
    /// ([`earlier_attempt`]), and keeps it as the first attempt's time.
    pub earlier_attempt_ms: Option<u64>,
}

impl<'a> ClaimRequest<'a> {
    /// A claim of `key` for a payload of `fingerprint` at `now_ms`, leased until
    /// `lease_until_ms`, for the message `message_id`; no earlier attempt known from outside.
    pub const fn new(
        key: &'a str,
        fingerprint: Fingerprint,
        now_ms: u64,
        lease_until_ms: u64,
        message_id: &'a str,
    ) -> Self {
        Self {
            key,
            fingerprint,
            now_ms,
            lease_until_ms,
            message_id,
            earlier_attempt_ms: None,
        }
    }

    /// The same claim, with an attempt under the key known from outside the store (see
    /// [`ClaimRequest::earlier_attempt_ms`]).
    pub const fn with_earlier_attempt(self, earlier_attempt_ms: Option<u64>) -> Self {
        Self {
            earlier_attempt_ms,
            ..self
        }
    }
}

impl Begin {
    /// A store's answer with the output it kept for the key attached when the answer is
    /// [`Begin::Done`] (as [`decide`] reads the item's state, not its output).
    pub fn with_output(self, kept: Option<String>) -> Self {
        match self {
            Self::Done { .. } => Self::Done { output: kept },
            other => other,
        }
    }
}

/// The earlier attempt a claim that found its key fresh (absent, or finished and past its TTL)
/// must assume, from [`ClaimRequest::earlier_attempt_ms`], whatever its age. The key's absence
/// proves nothing for such a request: its item may have expired, or never have been written (a
/// refused claim, a conflict or a refusal for good, writes nothing while an older item of the
/// key, since expired, held the effect). So the effect is looked up before the work is done
/// again: one look-up per such request is cheap, doing the work twice is not.
pub fn earlier_attempt(request: &ClaimRequest<'_>) -> Option<PriorAttempt> {
    let at = request.earlier_attempt_ms?;
    Some(PriorAttempt {
        first_attempt_ms: at,
        attempts: 0,
    })
}

/// The state of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// Claimed: the holder is working, or was, and its effect may exist once its lease is over.
    InProgress,
    /// An attempt ended without proof either way (a timeout after sending, a 5xx): its effect may
    /// exist. No lease; the next claim with the same payload takes it and must look the effect up.
    Attempted,
    /// Done: duplicates are acknowledged.
    Completed,
    /// Refused for good (a declined payment): the work is never attempted again for this key
    /// until the item expires or a person clears it; a duplicate is refused without a call.
    Rejected,
}

impl Status {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProgress => "IN_PROGRESS",
            Self::Attempted => "ATTEMPTED",
            Self::Completed => "COMPLETED",
            Self::Rejected => "REJECTED",
        }
    }

    /// Whether the key's work is over (done or refused for good): past its TTL such an item is
    /// a fresh start, never an earlier attempt whose effect may exist.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Completed | Self::Rejected)
    }

    /// A stored status.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "IN_PROGRESS" => Some(Self::InProgress),
            "ATTEMPTED" => Some(Self::Attempted),
            "COMPLETED" => Some(Self::Completed),
            "REJECTED" => Some(Self::Rejected),
            _ => None,
        }
    }
}

/// What a store keeps per key, as far as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimState {
    /// Where the key stands.
    pub status: Status,
    /// The payload the key belongs to.
    pub fingerprint: Fingerprint,
    /// The lease end of an in-progress claim, epoch ms.
    pub lease_until_ms: u64,
    /// The TTL, epoch seconds. Past it a completed item counts as absent even if not yet deleted.
    pub expires_at_s: u64,
    /// When the first attempt under the key began, epoch ms; cleared on completion.
    pub first_attempt_ms: Option<u64>,
    /// Claims so far; cleared on completion.
    pub attempts: u32,
}

/// The claim condition, for a claim of `fingerprint` at `now_ms`:
/// - absent, or completed or rejected and past its TTL: a fresh key;
/// - with the same fingerprint, `ATTEMPTED`, or `IN_PROGRESS` with a lease that has run out: a
///   takeover, which keeps the first attempt's time and reports it ([`Begin::Started`]'s prior).
///
/// Another payload never takes over a key whose effect may exist, whatever its age: DynamoDB
/// deletes expired items lazily, and until it does, the item is the only record of that effect.
pub fn claimable(existing: Option<&ClaimState>, fingerprint: Fingerprint, now_ms: u64) -> bool {
    match existing {
        None => true,
        Some(s) => match s.status {
            Status::Completed | Status::Rejected => s.expires_at_s.saturating_mul(1_000) <= now_ms,
            _ if s.fingerprint != fingerprint => false,
            Status::Attempted => true,
            Status::InProgress => s.lease_until_ms <= now_ms,
        },
    }
}

/// What a refused claim means, decided from the item that refused it.
pub fn decide(existing: &ClaimState, fingerprint: Fingerprint, now_ms: u64) -> Begin {
    if claimable(Some(existing), fingerprint, now_ms) {
        // The store refused a claim that looks claimable to us: clocks disagree, or the item
        // changed in between. Never acknowledge on uncertainty: come back shortly.
        return Begin::Busy { until_ms: now_ms };
    }
    match existing.status {
        _ if existing.fingerprint != fingerprint => Begin::Conflict,
        Status::Completed => Begin::Done { output: None },
        Status::Rejected => Begin::Rejected,
        Status::InProgress => Begin::Busy {
            until_ms: existing.lease_until_ms,
        },
        // Claimable with this fingerprint, so only a race gets here.
        Status::Attempted => Begin::Busy { until_ms: now_ms },
    }
}

/// The most an output kept with a completion may weigh, in bytes of its JSON: a larger one is
/// not kept (the key is still completed, and a duplicate gets no output back). DynamoDB bills a
/// write per KiB and caps an item at 400 KiB; 64 KiB leaves the rest of the item, and a key of
/// any allowed length, far below that cap.
pub const MAX_OUTPUT_BYTES: usize = 65_536;

/// `output` when it is at most [`MAX_OUTPUT_BYTES`]; a larger one is dropped with a warning
/// (the key is still completed: the work is never redone for want of room for its answer).
/// The guard and every store apply it, so a direct caller of a store cannot write an item
/// DynamoDB would refuse.
pub fn bounded_output<'o>(key: &str, output: Option<&'o str>) -> Option<&'o str> {
    output.filter(|kept| {
        let fits = kept.len() <= MAX_OUTPUT_BYTES;
        if !fits {
            tracing::warn!(
                key,
                bytes = kept.len(),
                "the output is too large to keep: duplicates will not get it back"
            );
        }
        fits
    })
}

/// What a successful claim took over: the item that was there before it, if any. A finished
/// item (past its TTL) is a fresh start, as is no item, unless the request knows of an earlier
/// attempt that the store may have forgotten ([`earlier_attempt`]); anything else may carry an
/// earlier attempt's effect.
pub fn prior_attempt(
    replaced: Option<&ClaimState>,
    request: &ClaimRequest<'_>,
) -> Option<PriorAttempt> {
    match replaced.filter(|s| !s.status.is_final()) {
        Some(old) => Some(PriorAttempt {
            // Unknown (an item without its first time): the oldest possible, so a key window
            // can never be assumed to still hold.
            first_attempt_ms: old.first_attempt_ms.unwrap_or(0),
            attempts: old.attempts,
        }),
        None => earlier_attempt(request),
    }
}

/// The item a successful claim writes, given the one it replaces: the first attempt's time and
/// the attempt count carry over (DynamoDB: `if_not_exists` and `ADD`; completion clears both).
/// A takeover of an item whose first attempt is unknown records it as 0, the oldest possible,
/// as [`prior_attempt`] reads it; a fresh key's first attempt is now, or the earlier attempt the
/// request knows of when it counts ([`earlier_attempt`]).
pub fn claimed_state(
    replaced: Option<&ClaimState>,
    request: &ClaimRequest<'_>,
    expires_at_s: u64,
) -> ClaimState {
    let first_attempt_ms = match replaced {
        Some(old) if !old.status.is_final() => old.first_attempt_ms.unwrap_or(0),
        _ => first_attempt_of_fresh(request),
    };
    ClaimState {
        status: Status::InProgress,
        fingerprint: request.fingerprint,
        lease_until_ms: request.lease_until_ms,
        expires_at_s,
        first_attempt_ms: Some(first_attempt_ms),
        attempts: replaced.map_or(0, |s| s.attempts).saturating_add(1),
    }
}

/// The first attempt's time a claim that found its key fresh writes: the earlier attempt it
/// must assume ([`earlier_attempt`]), else now.
pub fn first_attempt_of_fresh(request: &ClaimRequest<'_>) -> u64 {
    earlier_attempt(request).map_or(request.now_ms, |p| p.first_attempt_ms)
}

/// Lease end = min(now + configured lease, invocation deadline + margin): a claim never outlives
/// the invocation that took it by much, so a crash blocks the key only briefly.
pub fn lease_end(now_ms: u64, lease_ms: u64, deadline_ms: u64, margin_ms: u64) -> u64 {
    now_ms
        .saturating_add(lease_ms)
        .min(deadline_ms.saturating_add(margin_ms))
}

/// The two writes [`guard::run`](crate::guard::run) needs beyond the core [`IdempotencyStore`](crate::IdempotencyStore): an attempt that may have
/// taken effect, and a refusal for good. A store that implements only the core serves
/// [`once()`](fn@crate::once); one that implements this too serves [`guard::run`](crate::guard::run), its look-ups and its
/// key windows. Both writes are fenced by the lease, as the core's are.
pub trait EffectStore: crate::IdempotencyStore {
    /// Ends the lease and keeps the key `ATTEMPTED`: the work's effect may exist, so the next
    /// claim (same payload only) must find out before doing it again. The retention starts over,
    /// so the record outlives every delivery that may still come. Only the holder may.
    fn mark_attempted(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Records that the work was refused for good (a declined payment), with `reason`: a later
    /// claim with the same payload gets [`Begin::Rejected`] until the retention ends or a person
    /// removes the item. Only the holder may.
    fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl<S: EffectStore + ?Sized> EffectStore for std::sync::Arc<S> {
    fn mark_attempted(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).mark_attempted(key, lease, now_ms)
    }

    fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).reject(key, lease, now_ms, reason)
    }
}
