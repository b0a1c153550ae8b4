//! For store authors: the state machine every store shares, written once. A store keeps a
//! [`ClaimState`] per key and applies its writes atomically and fenced; what a claim may take
//! over ([`claimable`]), what a refused claim means ([`decide`]), what a successful one took over
//! ([`prior_attempt`]) and what it writes ([`claimed_state`]) are decided here, so every store
//! answers alike (the contract suite, feature `testkit`, holds them to it). A user of the crate
//! never needs this module.

use crate::{Begin, ClaimRequest, Fingerprint, PriorAttempt};

/// The earlier attempt a claim that found its key fresh (absent, or finished and past its TTL)
/// must assume, from [`ClaimRequest::earlier_attempt_ms`], whatever its age. The key's absence
/// proves nothing for such a request: its item may have expired, or never have been written (a
/// refused claim, a conflict or a refusal for good, writes nothing while an older item of the
/// key, since expired, held the effect). So the effect is looked up before the work is done
/// again: one look-up per such request is cheap, doing the work twice is not.
pub fn earlier_attempt(request: &ClaimRequest<'_>) -> Option<PriorAttempt> {
    let at = request.earlier_attempt_ms?;
    if lambda_kit::mutation::active("store.trusts_absence_of_young_copies") {
        // The rule before issue 49: only once an item written then may have expired.
        const RETENTION_MS: u64 = 18 * 86_400_000;
        if request.now_ms < at.saturating_add(RETENTION_MS) {
            return None;
        }
    }
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
            Status::Completed if lambda_kit::mutation::active("store.forgets_completed") => true,
            Status::Completed | Status::Rejected => s.expires_at_s.saturating_mul(1_000) <= now_ms,
            _ if s.fingerprint != fingerprint
                && !lambda_kit::mutation::active("store.ignores_fingerprint") =>
            {
                false
            }
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
        _ if existing.fingerprint != fingerprint
            && !lambda_kit::mutation::active("store.ignores_fingerprint") =>
        {
            Begin::Conflict
        }
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
