//! # idempotency
//!
//! Claim a business key before doing its work, so every key's work is done once, even when the
//! work is a side effect in another system that may have happened without the caller learning
//! of it (a payment whose answer timed out).
//!
//! A claim is a lease with a unique token. [`IdempotencyStore::begin`] answers:
//! - [`Begin::Started`]: the caller owns the key until the lease ends, and learns whether an
//!   earlier attempt's effect may exist;
//! - [`Begin::Done`]: the work was finished with the same payload: acknowledge the duplicate;
//! - [`Begin::Busy`]: someone holds a live lease: retry later, never acknowledge;
//! - [`Begin::Conflict`]: the key belongs to a different payload.
//!
//! A key is `IN_PROGRESS` (held), `ATTEMPTED` (an attempt ended without proof either way: its
//! effect may exist) or `COMPLETED`. The state machine lives here once: the claim condition and
//! the reading of a refused claim ([`store::claimable`], [`store::decide`],
//! [`store::prior_attempt`]) and the
//! sequence of claim, look-up, work and settlement ([`guard::run`]). Each store only implements
//! atomic, fenced writes (`memory`, `dynamodb`, `redis`), and every store is run through the same
//! contract suite (feature `testkit`: `store_contract_tests!`).
//!
//! ## Layout
//!
//! | module | what |
//! |---|---|
//! | the crate root | [`once`](fn@once) and its [`Outcome`], the [`IdempotencyStore`] port (the core: claim, complete, give back), the stores, their settings |
//! | [`store`] | for store authors: the claim's types ([`store::Begin`], [`store::ClaimRequest`], [`store::Lease`]) and the shared state machine ([`store::claimable`], [`store::decide`], [`store::prior_attempt`], [`store::claimed_state`]) |
//! | [`guard`] | the look-up layer: [`guard::run`] (claim, look-up, work, settle) for any [`guard::GuardedWork`], on a store that also implements [`guard::EffectStore`] |
//! | `memory` | [`MemoryStore`], one process only |
//! | `cached` | [`CachedStore`]: completed keys answered from memory, in front of any store |
//! | `dynamodb` | `DynamoDbStore` and its table's schema (feature `dynamodb`) |
//! | `redis` | `RedisStore`, its item layout and its one compare-and-set script (feature `redis`) |
//! | `testkit` | the store contract suite (feature `testkit`); dynoxide and a `redis-server` for tests (`testkit-dynamodb`, `testkit-redis`) |
//!
//! ## Example
//!
//! Send a welcome email once per user id, with a provider that takes an idempotency key:
//!
//! ```
//! use std::time::Duration;
//! use idempotency::guard::{self, Claim, Failed, Found, GuardPolicy, Guarded, GuardedWork};
//! use idempotency::{Fingerprint, LeasePolicy, MemoryStore};
//! use lambda_kit::ManualClock;
//!
//! struct Welcome<'a> { user_id: &'a str }
//!
//! impl GuardedWork for Welcome<'_> {
//!     type Output = ();
//!     type Error = String;
//!     // Asked only when an earlier attempt may have sent it.
//!     async fn look_up(&self) -> Result<Found, String> { Ok(Found::NotHappened) }
//!     async fn perform(&self) -> Result<(), Failed<String>> { Ok(()) }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::new(Duration::from_secs(86_400));
//! let clock = ManualClock::at(1_767_225_600_000);
//! let policy = GuardPolicy::new(LeasePolicy::new(60_000, 5_000))
//!     .with_key_window(86_400_000, 60_000);
//! let fingerprint = Fingerprint::of(&[b"u-1", b"welcome"]);
//! let claim = Claim::new("u-1", fingerprint, "m-1", 1_767_225_660_000);
//! let first = guard::run(&store, &clock, &policy, &claim, &Welcome { user_id: "u-1" }).await;
//! assert!(matches!(first.outcome, Guarded::Performed(())));
//! let again = guard::run(&store, &clock, &policy, &claim, &Welcome { user_id: "u-1" }).await;
//! assert!(matches!(again.outcome, Guarded::Duplicate));
//! # });
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// The README's example is a doctest too, so the crate's front page cannot drift from its API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod cached;
#[cfg(feature = "dynamodb")]
mod configured;
#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub mod guard;
mod memory;
#[cfg(not(feature = "sqs-batch"))]
#[doc(hidden)]
pub mod no_verdict;
pub mod once;
#[cfg(feature = "redis")]
pub mod redis;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(feature = "sqs-batch")]
mod verdict;

use std::fmt;
use std::future::Future;

use store::{Begin, ClaimRequest, Lease};

pub use cached::CachedStore;
#[cfg(feature = "dynamodb")]
pub use configured::ConfiguredStore;
#[cfg(feature = "dynamodb")]
pub use dynamodb::DynamoDbStore;
/// The clock and settings the API takes, so a user adds this crate alone.
pub use lambda_kit;
pub use memory::MemoryStore;
pub use once::{Outcome, once};
#[cfg(feature = "redis")]
pub use redis::RedisStore;

/// A fingerprint of the payload a key was claimed for, to tell a duplicate from a conflict.
///
/// FNV-1a 64: stable across builds and platforms (it is stored for weeks), cheap, and
/// collisions only matter between two payloads of the same key. The hash is private, so it can
/// change without breaking the API: a store writes its [`Display`](fmt::Display) form and reads
/// it back with [`Fingerprint::parse`].
///
/// # Example
///
/// ```
/// use idempotency::Fingerprint;
///
/// let a = Fingerprint::of_json(&serde_json::json!({"amount": 10, "currency": "EUR"})).unwrap();
/// let b = Fingerprint::of_json(&serde_json::json!({"currency": "EUR", "amount": 10})).unwrap();
/// assert_eq!(a, b, "the keys' order does not matter");
/// assert_eq!(Fingerprint::parse(&a.to_string()), Some(a));
/// assert_ne!(Fingerprint::of(&[b"o-1", b"10"]), Fingerprint::of(&[b"o-1", b"11"]));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// A fingerprint from its stored form (what [`Display`](fmt::Display) writes); `None` when
    /// the text is not one.
    ///
    /// ```
    /// use idempotency::Fingerprint;
    ///
    /// let fingerprint = Fingerprint::of(&[b"u-1", b"welcome"]);
    /// assert_eq!(Fingerprint::parse(&fingerprint.to_string()), Some(fingerprint));
    /// assert_eq!(Fingerprint::parse("not hex"), None);
    /// ```
    pub fn parse(stored: &str) -> Option<Self> {
        u64::from_str_radix(stored, 16).ok().map(Self)
    }

    /// The fingerprint of a payload given as its parts (each part's length is hashed too).
    pub fn of(parts: &[&[u8]]) -> Self {
        let mut hash = lambda_kit::Fnv1a::new();
        for part in parts {
            // The length before each part keeps ("ab","c") and ("a","bc") apart.
            hash.write(&(part.len() as u64).to_le_bytes());
            hash.write(part);
        }
        Self(hash.finish())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// How leases are sized.
///
/// # Example
///
/// ```
/// use idempotency::{LeasePolicy, lambda_kit::Env};
///
/// let env = Env::new(|name| (name == "IDEMPOTENCY_LEASE_SECONDS").then(|| "60".to_owned()));
/// let policy = LeasePolicy::from_env(&env).unwrap();
/// assert_eq!(policy, LeasePolicy::new(60_000, 5_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeasePolicy {
    /// The longest a claim is held.
    pub lease_ms: u64,
    /// How far past the invocation deadline a lease may run.
    pub margin_ms: u64,
}

impl Default for LeasePolicy {
    /// As [`LeasePolicy::from_env`] with nothing set: 300 s, 5 s past the deadline.
    fn default() -> Self {
        Self {
            lease_ms: 300_000,
            margin_ms: 5_000,
        }
    }
}

/// The variables this crate reads, with their defaults: [`LeasePolicy::from_env`] and
/// [`StoreSettings::from_env`].
///
/// # Example
///
/// ```
/// let (name, default) = idempotency::VARIABLES[0];
/// assert!(name.starts_with("IDEMPOTENCY_"), "{name} defaults to {default:?}");
/// ```
pub const VARIABLES: &[(&str, Option<&str>)] = &[
    ("IDEMPOTENCY_TABLE", None),
    ("IDEMPOTENCY_LEASE_SECONDS", Some("300")),
    ("IDEMPOTENCY_LEASE_MARGIN_MS", Some("5000")),
    ("IDEMPOTENCY_RETENTION_DAYS", Some("18")),
    ("IDEMPOTENCY_RETENTION_SECONDS", None),
    ("IDEMPOTENCY_KEY_PREFIX", None),
];

impl LeasePolicy {
    /// Leases of at most `lease_ms`, ending at most `margin_ms` past the holder's deadline.
    ///
    /// ```
    /// let policy = idempotency::LeasePolicy::new(60_000, 5_000);
    /// assert_eq!(policy.lease_ms, 60_000);
    /// ```
    pub const fn new(lease_ms: u64, margin_ms: u64) -> Self {
        Self {
            lease_ms,
            margin_ms,
        }
    }

    /// The least `IDEMPOTENCY_LEASE_MARGIN_MS` may be: below it a lease can end before its
    /// holder's last write.
    pub const MIN_MARGIN_MS: u64 = 1_000;

    /// `IDEMPOTENCY_LEASE_SECONDS` (300, 1-43200) and `IDEMPOTENCY_LEASE_MARGIN_MS` (5000, at
    /// least [`LeasePolicy::MIN_MARGIN_MS`]).
    pub fn from_env(env: &lambda_kit::Env<'_>) -> Result<Self, lambda_kit::EnvError> {
        let lease_s: u64 = env.ranged("IDEMPOTENCY_LEASE_SECONDS", 300, 1, 43_200)?;
        let margin_ms = env.ranged(
            "IDEMPOTENCY_LEASE_MARGIN_MS",
            5_000,
            Self::MIN_MARGIN_MS,
            900_000,
        )?;
        Ok(Self {
            lease_ms: lease_s * 1_000,
            margin_ms,
        })
    }
}

/// Where claims are kept: a table (`None`: in memory, one process only), how long a finished key
/// is remembered, and the prefix that keeps this function's keys apart from other users of a
/// shared table.
///
/// # Example
///
/// ```
/// use idempotency::{StoreSettings, lambda_kit::Env};
///
/// let env = Env::new(|name| match name {
///     "IDEMPOTENCY_TABLE" => Some("orders-idempotency".to_owned()),
///     "AWS_LAMBDA_FUNCTION_NAME" => Some("process-orders".to_owned()),
///     _ => None,
/// });
/// let settings = StoreSettings::from_env(&env).unwrap();
/// assert_eq!(settings.table.as_deref(), Some("orders-idempotency"));
/// assert_eq!(settings.key_prefix, "process-orders#");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreSettings {
    /// `IDEMPOTENCY_TABLE`.
    pub table: Option<String>,
    /// `IDEMPOTENCY_RETENTION_DAYS` (18), or `IDEMPOTENCY_RETENTION_SECONDS` (at least 60) in
    /// its place: keep it at least as long as a message can come back
    /// (queue retention plus the DLQ's).
    pub retention: std::time::Duration,
    /// `IDEMPOTENCY_KEY_PREFIX`, put before every key in the table.
    pub key_prefix: String,
}

impl StoreSettings {
    /// Claims in `table` (`None`: in memory), finished keys kept for `retention`, every key
    /// behind `key_prefix`.
    pub fn new(table: Option<String>, retention: std::time::Duration, key_prefix: String) -> Self {
        Self {
            table,
            retention,
            key_prefix,
        }
    }

    /// The settings, with `IDEMPOTENCY_KEY_PREFIX` defaulting to `{AWS_LAMBDA_FUNCTION_NAME}#`
    /// (nothing outside Lambda): two functions sharing a table never see each other's keys.
    pub fn from_env(env: &lambda_kit::Env<'_>) -> Result<Self, lambda_kit::EnvError> {
        let default_prefix = env
            .text("AWS_LAMBDA_FUNCTION_NAME")
            .map(|name| format!("{name}#"))
            .unwrap_or_default();
        Self::from_env_with_prefix(env, &default_prefix)
    }

    /// As [`StoreSettings::from_env`], with `default_prefix` when `IDEMPOTENCY_KEY_PREFIX` is
    /// unset (a function whose table predates prefixes keeps `""`, so its items stay found).
    pub fn from_env_with_prefix(
        env: &lambda_kit::Env<'_>,
        default_prefix: &str,
    ) -> Result<Self, lambda_kit::EnvError> {
        let retention_days: u64 = env.ranged("IDEMPOTENCY_RETENTION_DAYS", 18, 1, 3_650)?;
        // Seconds, for a key that need not outlive a short retry window (Powertools'
        // `expires_after_seconds`); never with the days, whose default would hide a typo.
        let retention_s = match env.text("IDEMPOTENCY_RETENTION_SECONDS") {
            None => retention_days * 86_400,
            Some(_) if env.text("IDEMPOTENCY_RETENTION_DAYS").is_some() => {
                return Err(lambda_kit::EnvError::invalid(
                    "IDEMPOTENCY_RETENTION_SECONDS",
                    &env.text("IDEMPOTENCY_RETENTION_SECONDS")
                        .unwrap_or_default(),
                    "unset when IDEMPOTENCY_RETENTION_DAYS is set: one of the two",
                ));
            }
            Some(_) => env.ranged("IDEMPOTENCY_RETENTION_SECONDS", 0, 60, 3_650 * 86_400)?,
        };
        let prefix = env
            .text("IDEMPOTENCY_KEY_PREFIX")
            .unwrap_or_else(|| default_prefix.to_owned());
        Ok(Self {
            table: env.text("IDEMPOTENCY_TABLE"),
            retention: std::time::Duration::from_secs(retention_s),
            key_prefix: prefix,
        })
    }
}

/// Why a claim was not even asked for: the key or the payload cannot be guarded, and no
/// redelivery of the same record changes that, so it is POISON, never a store outage to retry.
///
/// # Example
///
/// ```
/// use idempotency::{InvalidClaim, MemoryStore, Outcome, once};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::default();
/// let answer = once(&store, "", &"payload", || async { Ok::<_, String>(()) }).await;
/// assert!(matches!(answer, Outcome::Invalid(InvalidClaim::EmptyKey)), "an empty key claims nothing");
/// # });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidClaim {
    /// The key is empty (a field the caller reads from the payload, missing): every record
    /// without one would share one item, each later one a duplicate of the first.
    #[error("the idempotency key is empty: every record without one would share one item")]
    EmptyKey,
    /// The payload has no JSON form to fingerprint ([`Fingerprint::of_json`]: a map whose keys
    /// are not strings, say).
    #[error("the payload cannot be fingerprinted: {0}")]
    Payload(String),
}

impl InvalidClaim {
    /// A short, stable code for logs and verdicts: `invalid_key` or `invalid_payload`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::EmptyKey => "invalid_key",
            Self::Payload(_) => "invalid_payload",
        }
    }
}

/// A store failure. Every one of them means RETRY for the record, and so does any variant added
/// later (a match outside this crate needs a wildcard arm).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The holder's condition failed on complete or release: the lease was taken over (or the
    /// item is gone). The new holder's item is left untouched.
    #[error("the lease on this key is no longer held by this claim")]
    LeaseLost,
    /// The store could not be reached or refused the request (throttling, 5xx, timeouts,
    /// missing table, ...), after the client's own retries.
    #[error("the idempotency store failed")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// An item that does not have the shape this code writes.
    #[error("a stored item is malformed: {0}")]
    Malformed(String),
}

/// A store of claims: the core a store author implements, three primitives (claim, complete,
/// give back), all fenced by the claim's lease. Implementations must make `begin` atomic per
/// key. [`once()`](fn@crate::once) needs nothing more; [`guard::run`], which also records work
/// that may have taken effect and work refused for good, needs the two writes of
/// [`guard::EffectStore`] besides.
///
/// # Example
///
/// Work done once per key on any store of the core:
///
/// ```
/// use idempotency::{IdempotencyStore, MemoryStore, Outcome, once};
///
/// async fn welcome<S: IdempotencyStore>(store: &S, user_id: &str) -> bool {
///     let sent = once(store, user_id, &"welcome", || async { Ok::<_, String>(()) }).await;
///     matches!(sent, Outcome::Performed(()))
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::default();
/// assert!(welcome(&store, "u-1").await);
/// assert!(!welcome(&store, "u-1").await, "a duplicate");
/// # });
/// ```
pub trait IdempotencyStore: Send + Sync {
    /// Claims `request.key`, or says why not.
    fn begin(
        &self,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Begin, StoreError>> + Send;

    /// Marks the key done, keeping `output` (the work's result as text) for a duplicate to get
    /// back in [`Begin::Done`]; an output above [`MAX_OUTPUT_BYTES`](store::MAX_OUTPUT_BYTES) is dropped
    /// ([`bounded_output`](store::bounded_output)). Only the current holder of `lease` may.
    fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives the key up so the next delivery can claim it at once; only the current holder may.
    /// Only for work proven not to have taken effect.
    fn release(
        &self,
        key: &str,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The lease settings this store was configured with, if any: what [`once()`](fn@crate::once) leases claims by
    /// unless told otherwise (`ConfiguredStore` reads `IDEMPOTENCY_LEASE_SECONDS` and
    /// `IDEMPOTENCY_LEASE_MARGIN_MS`). `None` by default: [`LeasePolicy::default`].
    fn lease_policy(&self) -> Option<LeasePolicy> {
        None
    }
}

impl<S: IdempotencyStore + ?Sized> IdempotencyStore for std::sync::Arc<S> {
    fn begin(
        &self,
        request: &ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Begin, StoreError>> + Send {
        (**self).begin(request)
    }

    fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).complete(key, lease, now_ms, output)
    }

    fn release(
        &self,
        key: &str,
        lease: &Lease,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).release(key, lease)
    }

    fn lease_policy(&self) -> Option<LeasePolicy> {
        (**self).lease_policy()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::*;

    const FP: Fingerprint = Fingerprint(1);

    fn state(status: Status, lease_until_ms: u64, expires_at_s: u64) -> ClaimState {
        ClaimState {
            status,
            fingerprint: FP,
            lease_until_ms,
            expires_at_s,
            first_attempt_ms: Some(500),
            attempts: 1,
        }
    }

    #[test]
    fn claimable_when_absent_done_and_expired_or_taken_over_by_the_same_payload() {
        let other = Fingerprint(2);
        assert!(claimable(None, FP, 0));
        // A completed item past its TTL is a fresh key, for any payload.
        assert!(claimable(
            Some(&state(Status::Completed, 0, 10)),
            other,
            10_000
        ));
        assert!(!claimable(
            Some(&state(Status::Completed, 0, 100)),
            FP,
            5_000
        ));
        // A lease that ran out, or an attempted key: the same payload only.
        let ran_out = state(Status::InProgress, 5_000, 100);
        assert!(claimable(Some(&ran_out), FP, 5_000));
        assert!(!claimable(Some(&ran_out), other, 5_000));
        assert!(!claimable(
            Some(&state(Status::InProgress, 5_001, 100)),
            FP,
            5_000
        ));
        let attempted = state(Status::Attempted, 0, 100);
        assert!(claimable(Some(&attempted), FP, 0));
        assert!(!claimable(Some(&attempted), other, 0));
        // Past its TTL a key whose effect may exist still belongs to its payload.
        assert!(!claimable(
            Some(&state(Status::Attempted, 0, 1)),
            other,
            5_000
        ));
    }

    #[test]
    fn decide_tells_done_conflict_and_busy_apart() {
        let done = state(Status::Completed, 0, 100);
        assert_eq!(decide(&done, FP, 1_000), Begin::Done { output: None });
        assert_eq!(decide(&done, Fingerprint(2), 1_000), Begin::Conflict);
        let held = state(Status::InProgress, 9_000, 100);
        assert_eq!(decide(&held, FP, 1_000), Begin::Busy { until_ms: 9_000 });
        // Another payload is a conflict in every state, held or not.
        assert_eq!(decide(&held, Fingerprint(2), 1_000), Begin::Conflict);
        let attempted = state(Status::Attempted, 0, 100);
        assert_eq!(decide(&attempted, Fingerprint(2), 1_000), Begin::Conflict);
    }

    #[test]
    fn a_refused_claim_that_looks_claimable_is_busy_never_done() {
        let expired = state(Status::Completed, 0, 1);
        assert_eq!(decide(&expired, FP, 5_000), Begin::Busy { until_ms: 5_000 });
        let attempted = state(Status::Attempted, 0, 100);
        assert_eq!(
            decide(&attempted, FP, 5_000),
            Begin::Busy { until_ms: 5_000 }
        );
    }

    fn request(now_ms: u64, earlier_attempt_ms: Option<u64>) -> ClaimRequest<'static> {
        ClaimRequest {
            key: "k",
            fingerprint: FP,
            now_ms,
            lease_until_ms: now_ms + 10_000,
            message_id: "m",
            earlier_attempt_ms,
        }
    }

    #[test]
    fn a_takeover_reports_the_first_attempt_and_a_fresh_key_does_not() {
        let fresh = request(9_000, None);
        assert_eq!(prior_attempt(None, &fresh), None);
        assert_eq!(
            prior_attempt(Some(&state(Status::Completed, 0, 1)), &fresh),
            None
        );
        let prior = Some(PriorAttempt {
            first_attempt_ms: 500,
            attempts: 1,
        });
        assert_eq!(
            prior_attempt(Some(&state(Status::Attempted, 0, 9)), &fresh),
            prior
        );
        assert_eq!(
            prior_attempt(Some(&state(Status::InProgress, 1, 9)), &fresh),
            prior
        );
        let unknown = ClaimState {
            first_attempt_ms: None,
            ..state(Status::InProgress, 1, 9)
        };
        assert_eq!(
            prior_attempt(Some(&unknown), &fresh).map(|p| p.first_attempt_ms),
            Some(0)
        );
    }

    /// A moved message's history says an attempt may have been made at 1,000: a fresh key
    /// counts it at any age, the next day as 20 days later (issue 49: a refused claim wrote no
    /// item, so the key's absence proves nothing), and keeps it as the first attempt's time.
    #[test]
    fn an_earlier_attempt_known_from_outside_counts_at_any_age() {
        let earlier = Some(PriorAttempt {
            first_attempt_ms: 1_000,
            attempts: 0,
        });
        for now_ms in [1_001, 1_000 + 86_400_000, 1_000 + 20 * 86_400_000] {
            assert_eq!(
                prior_attempt(None, &request(now_ms, Some(1_000))),
                earlier,
                "at {now_ms}"
            );
            // An expired finished item is a fresh start too, and the history still counts.
            assert_eq!(
                prior_attempt(
                    Some(&state(Status::Completed, 0, 1)),
                    &request(now_ms, Some(1_000))
                ),
                earlier
            );
            // The claim keeps that time as its first attempt, so the next one judges the same age.
            let claimed = claimed_state(None, &request(now_ms, Some(1_000)), 77);
            assert_eq!(claimed.first_attempt_ms, Some(1_000));
        }
        assert_eq!(prior_attempt(None, &request(5_000, None)), None);
        assert_eq!(
            claimed_state(None, &request(5_000, None), 77).first_attempt_ms,
            Some(5_000)
        );
    }

    #[test]
    fn a_claim_keeps_the_first_attempt_and_counts_attempts() {
        let request = request(9_000, None);
        let fresh = claimed_state(None, &request, 77);
        assert_eq!((fresh.first_attempt_ms, fresh.attempts), (Some(9_000), 1));
        assert_eq!(
            (fresh.status, fresh.lease_until_ms),
            (Status::InProgress, 19_000)
        );
        let again = claimed_state(Some(&state(Status::Attempted, 0, 9)), &request, 77);
        assert_eq!((again.first_attempt_ms, again.attempts), (Some(500), 2));
    }

    #[test]
    fn lease_end_is_capped_by_the_deadline() {
        assert_eq!(lease_end(1_000, 60_000, 10_000, 2_000), 12_000);
        assert_eq!(lease_end(1_000, 5_000, 10_000, 2_000), 6_000);
    }

    #[test]
    fn fingerprints_are_stable_and_separate_parts() {
        // Pinned: items written by earlier builds must keep matching.
        // FNV-1a 64 over the part's length (u64, little endian) and then its bytes.
        assert_eq!(Fingerprint::of(&[b"o-1"]).to_string(), "d40952d25cc9dcb9");
        assert_ne!(
            Fingerprint::of(&[b"ab", b"c"]),
            Fingerprint::of(&[b"a", b"bc"])
        );
        assert_eq!(Fingerprint::of(&[]).0, 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn lease_tokens_are_unique_version_4_uuids() {
        let a = LeaseToken::new();
        assert_ne!(a, LeaseToken::new());
        let uuid = uuid::Uuid::parse_str(&a.to_string()).expect("a UUID");
        assert_eq!(uuid.get_version_num(), 4, "a version-4 UUID");
        let many: std::collections::HashSet<_> = (0..10_000).map(|_| LeaseToken::new()).collect();
        assert_eq!(many.len(), 10_000);
    }

    /// The variables are read in their documented units: seconds and days, kept as
    /// milliseconds and a duration.
    #[test]
    fn settings_are_read_in_their_units() {
        let read = |name: &str| match name {
            "IDEMPOTENCY_LEASE_SECONDS" => Some("7".to_owned()),
            "IDEMPOTENCY_LEASE_MARGIN_MS" => Some("2500".to_owned()),
            "IDEMPOTENCY_RETENTION_DAYS" => Some("3".to_owned()),
            "IDEMPOTENCY_TABLE" => Some("claims".to_owned()),
            _ => None,
        };
        let env = lambda_kit::Env::new(read);
        let lease = LeasePolicy::from_env(&env).expect("lease");
        assert_eq!((lease.lease_ms, lease.margin_ms), (7_000, 2_500));
        let store = StoreSettings::from_env_with_prefix(&env, "fn#").expect("store");
        assert_eq!(store.retention, std::time::Duration::from_secs(3 * 86_400));
        assert_eq!(store.table.as_deref(), Some("claims"));
        assert_eq!(store.key_prefix, "fn#");
    }

    /// The retention in seconds, Powertools' unit, stands in for the days; both at once is a
    /// configuration error, and so is less than a minute.
    #[test]
    fn retention_is_read_in_seconds_in_place_of_days() {
        let settings = |vars: &'static [(&'static str, &'static str)]| {
            let read = |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            };
            StoreSettings::from_env_with_prefix(&lambda_kit::Env::new(read), "")
        };
        let hour = settings(&[("IDEMPOTENCY_RETENTION_SECONDS", "3600")]).expect("an hour");
        assert_eq!(hour.retention, std::time::Duration::from_secs(3_600));
        let both = settings(&[
            ("IDEMPOTENCY_RETENTION_SECONDS", "3600"),
            ("IDEMPOTENCY_RETENTION_DAYS", "18"),
        ]);
        assert!(
            both.unwrap_err()
                .to_string()
                .contains("IDEMPOTENCY_RETENTION_SECONDS"),
            "both set is refused, naming the variable"
        );
        assert!(settings(&[("IDEMPOTENCY_RETENTION_SECONDS", "59")]).is_err());
        let days = settings(&[]).expect("the default");
        assert_eq!(days.retention, std::time::Duration::from_secs(18 * 86_400));
    }
}
