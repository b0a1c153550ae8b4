//! "Do this once": [`once`] guards any async work by a key and the payload it is for, with
//! defaults that need no payment vocabulary.
//!
//! | the key... | the work | `once` answers |
//! |---|---|---|
//! | is fresh | runs; `Ok` is recorded as done | [`Outcome::Performed`] with the work's output |
//! | is done, same payload | does not run | [`Outcome::Duplicate`], or [`Outcome::Replayed`] with the first run's output when it was kept ([`Once::keep_output`]) |
//! | belongs to another payload | does not run | [`Outcome::Conflict`] |
//! | is held by a live claim elsewhere | does not run | [`Outcome::Busy`] (until when) |
//! | is fresh | runs; `Err` gives the key back, so the next delivery runs it again | [`Outcome::Failed`] |
//! | was held by a claim whose lease ran out (its holder crashed) | runs again | as on a fresh key |
//! | the store fails | does not run | [`Outcome::Store`] |
//!
//! The last-but-one row is at-least-once: work cut off by a crash can run twice, as in
//! Powertools' idempotency utility. Work whose effect is in another system that takes an
//! idempotency key and can be asked what became of it (a payment) should say so through
//! [`guard::run`] and a [`guard::GuardedWork`] with a look-up: then no crash, timeout or key
//! window buys a second effect.
//!
//! The payload's fingerprint is its JSON with every object's keys sorted: reordering a struct's
//! fields, or a map's iteration order, never turns a duplicate into a conflict.
//!
//! ```
//! use idempotency::{MemoryStore, Outcome, once};
//!
//! #[derive(serde::Serialize)]
//! struct Welcome { user_id: String, email: String }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let store = MemoryStore::default();
//! let welcome = Welcome { user_id: "u-1".into(), email: "ada@example.com".into() };
//! let send = || async { Ok::<_, std::io::Error>("sent") };
//! let first = once(&store, &welcome.user_id, &welcome, send).await;
//! assert!(matches!(first, Outcome::Performed("sent")));
//! let again = once(&store, &welcome.user_id, &welcome, send).await;
//! assert!(matches!(again, Outcome::Duplicate));
//! # });
//! ```

use std::future::{Future, IntoFuture};
use std::pin::Pin;

use lambda_kit::{Clock, SystemClock};
use serde::Serialize;

#[cfg(doc)]
use crate::LeasePolicy;
use crate::guard::{self, Claim, Effect, Failed, Found, GuardPolicy, GuardedWork, Unclaimed};
use crate::{Fingerprint, IdempotencyStore, InvalidClaim, StoreError};

/// What came of [`once`]: the work's own words, none of the look-up layer's
/// ([`guard::Guarded`] is [`guard::run`]'s).
///
/// # Example
///
/// ```
/// use idempotency::{MemoryStore, Outcome, once};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::default();
/// let failed = once(&store, "k", &"p", || async { Err::<(), _>("down") }).await;
/// assert!(matches!(failed, Outcome::Failed("down")), "the key is given back");
/// let retried = once(&store, "k", &"p", || async { Ok::<_, &str>(()) }).await;
/// assert!(matches!(retried, Outcome::Performed(())));
/// # });
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome<T, E> {
    /// The work ran now and its completion is recorded.
    Performed(T),
    /// Done before with the same payload: the work did not run.
    Duplicate,
    /// Done before with the same payload, and this is the output that run kept
    /// ([`Once::keep_output`]): the work did not run.
    Replayed(T),
    /// Someone holds a live claim on the key until this epoch ms: the work did not run.
    Busy {
        /// Epoch ms.
        until_ms: u64,
    },
    /// The key belongs to another payload (or was refused for good by [`guard::run`], on a key
    /// the two share): the work did not run.
    Conflict,
    /// The work failed and the key was given back, so the next delivery runs it again.
    Failed(E),
    /// A store call failed: whether the work ran is not known for sure.
    Store(StoreError),
    /// The key or the payload cannot be guarded (an empty key, a payload with no JSON form):
    /// nothing was claimed and the work did not run, and no redelivery changes that.
    Invalid(InvalidClaim),
    /// The work ran, but its claim had run out and was taken over before the completion was
    /// recorded: the new holder runs it again.
    LeaseLost,
}

/// The default of [`Once`]: the work's output is not kept, and a duplicate is a plain
/// [`Outcome::Duplicate`].
#[derive(Debug, Clone, Copy, Default)]
pub struct DiscardOutput;

/// Set by [`Once::keep_output`]: the work's output is kept with the completion as JSON, and a
/// duplicate gets it back as [`Outcome::Replayed`].
#[derive(Debug, Clone, Copy, Default)]
pub struct KeepOutput;

/// Guards `work` by `key` for `payload`: see the [module](self) for what each state of the key
/// makes of it. Await the answer.
///
/// What it needs to know besides comes on its own when it can: inside a record handler that
/// `sqs_batch`'s processor runs (feature `sqs-batch`), the invocation's deadline bounds the
/// claim's lease and a copy redriven from the DLQ counts as an earlier attempt; the lease
/// settings are the store's ([`IdempotencyStore::lease_policy`]: `ConfiguredStore` reads
/// `IDEMPOTENCY_LEASE_SECONDS` and `IDEMPOTENCY_LEASE_MARGIN_MS`), else [`LeasePolicy::default`].
/// [`Once::deadline_ms`], [`Once::earlier_attempt_ms`] and [`Once::policy`] set them by hand.
///
/// # Example
///
/// ```
/// use idempotency::{MemoryStore, Outcome, once};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Receipt { id: String }
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::default();
/// let send = || async { Ok::<_, String>(Receipt { id: "r-1".into() }) };
/// once(&store, "u-1", &"welcome", send).keep_output().await;
/// // A duplicate gets the first run's output back.
/// let again = once(&store, "u-1", &"welcome", send).keep_output().await;
/// assert!(matches!(again, Outcome::Replayed(Receipt { id }) if id == "r-1"));
/// # });
/// ```
pub fn once<'a, S, P, F>(
    store: &'a S,
    key: &'a str,
    payload: &P,
    work: F,
) -> Once<'a, S, F, SystemClock, DiscardOutput>
where
    S: IdempotencyStore,
    P: Serialize + ?Sized,
{
    // An empty key (a field the caller reads from the payload, missing) would be one item that
    // every such record shares, each later one a duplicate of the first: refused, as
    // Powertools' `raise_on_no_idempotency_key`, before any claim.
    let fingerprint = if key.is_empty() {
        Err(InvalidClaim::EmptyKey)
    } else {
        Fingerprint::of_json(payload).map_err(|e| InvalidClaim::Payload(e.to_string()))
    };
    Once {
        store,
        key,
        fingerprint,
        work,
        clock: SystemClock,
        policy: None,
        deadline_ms: None,
        message_id: "",
        earlier_attempt_ms: None,
        output: DiscardOutput,
    }
}

/// A guarded run being set up: [`once`]'s answer. Await it to run.
#[must_use = "nothing runs until it is awaited"]
pub struct Once<'a, S, F, C = SystemClock, K = DiscardOutput> {
    store: &'a S,
    key: &'a str,
    fingerprint: Result<Fingerprint, InvalidClaim>,
    work: F,
    clock: C,
    /// `None`: the store's lease settings, else the default's.
    policy: Option<GuardPolicy>,
    /// `None`: the record's being handled, else none (the lease's whole length).
    deadline_ms: Option<u64>,
    message_id: &'a str,
    earlier_attempt_ms: Option<u64>,
    output: K,
}

impl<S, F, C, K> std::fmt::Debug for Once<'_, S, F, C, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Once")
            .field("key", &self.key)
            .field("fingerprint", &self.fingerprint)
            .field("policy", &self.policy)
            .field("deadline_ms", &self.deadline_ms)
            .finish_non_exhaustive()
    }
}

impl<'a, S, F, C, K> Once<'a, S, F, C, K> {
    /// The invocation's deadline, epoch ms: the claim's lease ends at most the lease margin after
    /// it, so work cut off at the deadline frees its key soon. Inside a record handler that
    /// `sqs_batch`'s processor runs it is the record's own without this call; elsewhere, without
    /// one, the lease is the policy's whole lease (5 minutes by default), and work running longer
    /// than that can be taken over and run twice.
    pub fn deadline_ms(mut self, deadline_ms: u64) -> Self {
        self.deadline_ms = Some(deadline_ms);
        self
    }

    /// The message the claim is made for, kept on the stored item for forensics.
    pub fn message_id(mut self, message_id: &'a str) -> Self {
        self.message_id = message_id;
        self
    }

    /// When the message says an attempt may already have been made (a dead-lettered copy's
    /// failure history): see [`Claim::earlier_attempt_ms`].
    pub fn earlier_attempt_ms(mut self, earlier_attempt_ms: Option<u64>) -> Self {
        self.earlier_attempt_ms = earlier_attempt_ms;
        self
    }

    /// The record being processed (feature `sqs-batch`): its deadline, message id and earlier
    /// attempt at once. Inside the processor the deadline and the earlier attempt come without
    /// it; this adds the message id, kept on the stored item.
    #[cfg(feature = "sqs-batch")]
    pub fn for_record(self, record: &'a sqs_batch::Record) -> Self {
        self.deadline_ms(record.deadline_ms)
            .message_id(&record.message_id)
            .earlier_attempt_ms(record.earlier_attempt_ms)
    }

    /// How claims are leased (the store's [`IdempotencyStore::lease_policy`], else
    /// [`LeasePolicy::default`], unless set).
    pub fn policy(mut self, policy: GuardPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// The clock leases and retention are reckoned by (the system's unless set).
    pub fn clock<C2: Clock>(self, clock: C2) -> Once<'a, S, F, C2, K> {
        Once {
            store: self.store,
            key: self.key,
            fingerprint: self.fingerprint,
            work: self.work,
            clock,
            policy: self.policy,
            deadline_ms: self.deadline_ms,
            message_id: self.message_id,
            earlier_attempt_ms: self.earlier_attempt_ms,
            output: self.output,
        }
    }

    /// Keeps the work's output (serde JSON, at most [`crate::store::MAX_OUTPUT_BYTES`]) with the
    /// completion, so a duplicate gets it back as [`Outcome::Replayed`], as Powertools'
    /// idempotent functions return the first call's response. An output that does not fit, or
    /// that serde cannot write, is not kept: the duplicate is then a plain
    /// [`Outcome::Duplicate`], as is one whose kept JSON no longer reads as the output type.
    pub fn keep_output(self) -> Once<'a, S, F, C, KeepOutput> {
        Once {
            store: self.store,
            key: self.key,
            fingerprint: self.fingerprint,
            work: self.work,
            clock: self.clock,
            policy: self.policy,
            deadline_ms: self.deadline_ms,
            message_id: self.message_id,
            earlier_attempt_ms: self.earlier_attempt_ms,
            output: KeepOutput,
        }
    }
}

impl<'a, S, F, C, Fut, T, E> IntoFuture for Once<'a, S, F, C, DiscardOutput>
where
    S: IdempotencyStore,
    C: Clock + 'a,
    F: Fn() -> Fut + Send + Sync + 'a,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Send + 'a,
    E: Send + 'a,
{
    type Output = Outcome<T, E>;
    // Boxed: a record's future holds it, and a box keeps that future small and its type shallow.
    type IntoFuture = Pin<Box<dyn Future<Output = Outcome<T, E>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        self.run(|_| None, |_| None)
    }
}

impl<'a, S, F, C, Fut, T, E> IntoFuture for Once<'a, S, F, C, KeepOutput>
where
    S: IdempotencyStore,
    C: Clock + 'a,
    F: Fn() -> Fut + Send + Sync + 'a,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Serialize + serde::de::DeserializeOwned + Send + 'a,
    E: Send + 'a,
{
    type Output = Outcome<T, E>;
    type IntoFuture = Pin<Box<dyn Future<Output = Outcome<T, E>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        self.run(
            |output| serde_json::to_string(output).ok(),
            |kept| serde_json::from_str(kept).ok(),
        )
    }
}

impl<'a, S, F, C, K> Once<'a, S, F, C, K> {
    /// The guarded run, keeping and replaying outputs as `keep` and `replay` say.
    fn run<Fut, T, E>(
        self,
        keep: fn(&T) -> Option<String>,
        replay: fn(&str) -> Option<T>,
    ) -> Pin<Box<dyn Future<Output = Outcome<T, E>> + Send + 'a>>
    where
        S: IdempotencyStore,
        C: Clock + 'a,
        F: Fn() -> Fut + Send + Sync + 'a,
        Fut: Future<Output = Result<T, E>> + Send,
        T: Send + 'a,
        E: Send + 'a,
    {
        Box::pin(async move {
            let fingerprint = match self.fingerprint {
                Ok(fingerprint) => fingerprint,
                Err(invalid) => return Outcome::Invalid(invalid),
            };
            let current = current_record();
            let deadline_ms = self
                .deadline_ms
                .or(current.map(|(deadline_ms, _)| deadline_ms))
                .unwrap_or(u64::MAX);
            let earlier_attempt_ms = self
                .earlier_attempt_ms
                .or(current.and_then(|(_, earlier)| earlier));
            let policy = self
                .policy
                .unwrap_or_else(|| GuardPolicy::new(self.store.lease_policy().unwrap_or_default()));
            let claim = Claim::new(self.key, fingerprint, self.message_id, deadline_ms)
                .with_earlier_attempt_ms(earlier_attempt_ms);
            // Another record of the batch with this key finishes first: this one then meets
            // its result, not its live claim.
            let _turn = guard::key_turn(self.key).await;
            let work = Closure {
                work: &self.work,
                keep,
                replay,
            };
            run(self.store, &self.clock, &policy, &claim, &work).await
        })
    }
}

/// The deadline and earlier attempt of the record `sqs_batch`'s processor is handling, if any.
#[cfg(feature = "sqs-batch")]
fn current_record() -> Option<(u64, Option<u64>)> {
    sqs_batch::processor::current().map(|record| (record.deadline_ms, record.earlier_attempt_ms))
}

/// Without `sqs-batch` no processor tells the record.
#[cfg(not(feature = "sqs-batch"))]
fn current_record() -> Option<(u64, Option<u64>)> {
    None
}

/// The core alone, for work with nothing to look up: claim, perform, then complete, or give
/// the key back on a failure. An earlier attempt the claim took over (a holder's lease ran out)
/// is not looked up: such work runs again, at-least-once on a crash.
async fn run<S, C, W>(
    store: &S,
    clock: &C,
    policy: &GuardPolicy,
    claim: &Claim<'_>,
    work: &W,
) -> Outcome<W::Output, W::Error>
where
    S: IdempotencyStore,
    C: Clock,
    W: GuardedWork,
{
    let (lease, _prior) = match guard::claim_key(store, clock, policy, claim, work).await {
        Ok(held) => held,
        Err(Unclaimed::Duplicate) => return Outcome::Duplicate,
        Err(Unclaimed::Replayed(output)) => return Outcome::Replayed(output),
        Err(Unclaimed::Busy { until_ms }) => return Outcome::Busy { until_ms },
        Err(Unclaimed::Conflict | Unclaimed::Rejected) => return Outcome::Conflict,
        Err(Unclaimed::Store(e)) => return Outcome::Store(e),
        Err(Unclaimed::Invalid(invalid)) => return Outcome::Invalid(invalid),
    };
    match work.perform().await {
        Ok(output) => {
            let kept = work.keep(&output);
            match guard::complete(store, clock, claim.key, &lease, kept).await {
                Ok(()) => Outcome::Performed(output),
                // Done but not recorded: the next holder runs it again (at-least-once).
                Err(StoreError::LeaseLost) => Outcome::LeaseLost,
                Err(e) => Outcome::Store(e),
            }
        }
        Err(Failed { error, .. }) => {
            // Not done: if the key cannot be given back, the lease runs out and the next
            // delivery takes it over, as after a crash.
            if let Err(e) = store.release(claim.key, &lease).await {
                tracing::warn!(key = claim.key, error = %e, "could not give the key back");
            }
            Outcome::Failed(error)
        }
    }
}

/// A closure as guarded work: nothing to look up, and a failure did nothing.
struct Closure<'f, F, T> {
    work: &'f F,
    keep: fn(&T) -> Option<String>,
    replay: fn(&str) -> Option<T>,
}

impl<F, Fut, T, E> GuardedWork for Closure<'_, F, T>
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Result<T, E>> + Send,
    T: Send,
    E: Send,
{
    type Output = T;
    type Error = E;

    /// Asked only after a claim whose lease ran out: a closure cannot say what became of it, so
    /// the work runs again (at-least-once on a crash; see the module).
    async fn look_up(&self) -> Result<Found, E> {
        Ok(Found::NotHappened)
    }

    async fn perform(&self) -> Result<T, Failed<E>> {
        (self.work)().await.map_err(|error| Failed {
            error,
            effect: Effect::None,
        })
    }

    fn keep(&self, output: &T) -> Option<String> {
        (self.keep)(output)
    }

    fn replay(&self, kept: &str) -> Option<T> {
        (self.replay)(kept)
    }
}

impl Fingerprint {
    /// The fingerprint of a payload's JSON, canonical: every object's keys sorted, so the order
    /// a struct declares its fields in, or a map iterates, changes nothing. A payload serde
    /// cannot write as JSON (a map with keys that are not strings) is an error.
    pub fn of_json<P: Serialize + ?Sized>(payload: &P) -> Result<Self, serde_json::Error> {
        let value = serde_json::to_value(payload)?;
        let mut hash = lambda_kit::Fnv1a::new();
        canonical(&value, &mut hash);
        Ok(Self(hash.finish()))
    }
}

/// Feeds `value` to `hash` with a tag before each value and a length before each string, keys
/// sorted, so two different documents never feed the same bytes.
fn canonical(value: &serde_json::Value, hash: &mut lambda_kit::Fnv1a) {
    use serde_json::Value;
    let text = |hash: &mut lambda_kit::Fnv1a, text: &str| {
        hash.write(&(text.len() as u64).to_le_bytes());
        hash.write(text.as_bytes());
    };
    match value {
        Value::Null => hash.write(b"n"),
        Value::Bool(b) => hash.write(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            hash.write(b"#");
            text(hash, &n.to_string());
        }
        Value::String(s) => {
            hash.write(b"s");
            text(hash, s);
        }
        Value::Array(items) => {
            hash.write(b"[");
            hash.write(&(items.len() as u64).to_le_bytes());
            for item in items {
                canonical(item, hash);
            }
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            hash.write(b"{");
            hash.write(&(entries.len() as u64).to_le_bytes());
            for (key, value) in entries {
                text(hash, key);
                canonical(value, hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use lambda_kit::ManualClock;
    use std::collections::{BTreeMap, HashMap};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const T0: u64 = 1_767_225_600_000;

    #[derive(Serialize)]
    struct Welcome<'a> {
        user_id: &'a str,
        email: &'a str,
    }

    #[derive(Serialize)]
    struct Reordered<'a> {
        email: &'a str,
        user_id: &'a str,
    }

    #[test]
    fn a_payloads_fingerprint_ignores_field_and_map_order_and_nothing_else() {
        let a = Fingerprint::of_json(&Welcome {
            user_id: "u-1",
            email: "a@b.c",
        })
        .unwrap();
        let b = Fingerprint::of_json(&Reordered {
            email: "a@b.c",
            user_id: "u-1",
        })
        .unwrap();
        assert_eq!(a, b);
        let map: HashMap<&str, &str> = [("user_id", "u-1"), ("email", "a@b.c")].into();
        assert_eq!(Fingerprint::of_json(&map).unwrap(), a);
        let other = Fingerprint::of_json(&Welcome {
            user_id: "u-1",
            email: "a@b.d",
        })
        .unwrap();
        assert_ne!(a, other);
        // Values of other types that print alike are told apart, and so are nested shapes.
        let of = |json: &str| {
            Fingerprint::of_json(&serde_json::from_str::<serde_json::Value>(json).unwrap()).unwrap()
        };
        let all = [
            of(r#"{"a":"1"}"#),
            of(r#"{"a":1}"#),
            of(r#"{"a":[1]}"#),
            of(r#"{"a":null}"#),
            of(r#"{"a":true}"#),
            of(r#"{"a":false}"#),
            of(r#"{"a":{}}"#),
            of(r#"{"a":[]}"#),
            of(r#"{"ab":""}"#),
            of(r#"{"a":"b"}"#),
            of(r#"[["a"],[]]"#),
            of(r#"[[],["a"]]"#),
        ];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
        // Not JSON: a map whose keys are not strings.
        let unwritable: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        assert!(Fingerprint::of_json(&unwritable).is_err());
    }

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Receipt {
        id: String,
        cents: u64,
    }

    /// An empty key is refused before any claim, each time: records whose key field was
    /// missing never share one item, the first run making the others duplicates.
    #[tokio::test]
    async fn an_empty_key_is_refused_and_claims_nothing() {
        let runs = AtomicUsize::new(0);
        let work = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        };
        let store = MemoryStore::default();
        for email in ["a@b.c", "d@e.f"] {
            let payload = Welcome { user_id: "", email };
            let answer = once(&store, "", &payload, work).await;
            let Outcome::Invalid(InvalidClaim::EmptyKey) = answer else {
                panic!("an empty key is refused, got {answer:?}");
            };
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0, "the work never ran");
        assert!(matches!(
            once(
                &store,
                "u-1",
                &Welcome {
                    user_id: "u-1",
                    email: "a@b.c"
                },
                work
            )
            .await,
            Outcome::Performed(())
        ));
    }

    /// A kept output comes back to each duplicate, in front of a cache too; without
    /// `keep_output`, or when it does not fit or no longer reads, a duplicate is plain.
    #[tokio::test]
    async fn a_kept_output_is_replayed_to_duplicates() {
        let runs = AtomicUsize::new(0);
        let work = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(Receipt {
                id: "r-1".into(),
                cents: 1_050,
            })
        };
        let payload = Welcome {
            user_id: "u-1",
            email: "a@b.c",
        };
        let store = crate::CachedStore::new(MemoryStore::default(), 16);
        let first = once(&store, "u-1", &payload, work).keep_output().await;
        assert!(
            matches!(&first, Outcome::Performed(r) if r.cents == 1_050),
            "{first:?}"
        );
        for _ in 0..2 {
            let again = once(&store, "u-1", &payload, work).keep_output().await;
            let Outcome::Replayed(receipt) = again else {
                panic!("expected the kept receipt, got {again:?}");
            };
            assert_eq!(
                receipt,
                Receipt {
                    id: "r-1".into(),
                    cents: 1_050
                }
            );
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Kept as JSON in the store behind the cache too.
        let behind = once(store.inner(), "u-1", &payload, work)
            .keep_output()
            .await;
        assert!(matches!(behind, Outcome::Replayed(_)), "{behind:?}");
        // Kept, but asked for without replay: a plain duplicate.
        let plain = once(&store, "u-1", &payload, work).await;
        assert!(matches!(plain, Outcome::Duplicate), "{plain:?}");

        // Not asked to keep it: nothing to replay.
        let store = MemoryStore::default();
        once(&store, "u-2", &payload, work).await;
        let again = once(&store, "u-2", &payload, work).keep_output().await;
        assert!(matches!(again, Outcome::Duplicate), "{again:?}");

        // Kept JSON that no longer reads as the output type (a deploy changed it): plain.
        once(&store, "u-3", &payload, || async {
            Ok::<_, String>("text".to_owned())
        })
        .keep_output()
        .await;
        let again = once(&store, "u-3", &payload, work).keep_output().await;
        assert!(matches!(again, Outcome::Duplicate), "{again:?}");
    }

    #[tokio::test]
    async fn an_output_past_the_bound_is_not_kept_and_the_key_is_still_done() {
        let store = MemoryStore::default();
        let big = || async { Ok::<_, String>("x".repeat(crate::store::MAX_OUTPUT_BYTES)) };
        let payload = ("u-1", 1);
        let first = once(&store, "big", &payload, big).keep_output().await;
        assert!(matches!(first, Outcome::Performed(_)));
        // Its JSON is two quotes longer than the bound.
        let again = once(&store, "big", &payload, big).keep_output().await;
        assert!(
            matches!(again, Outcome::Duplicate),
            "done, without its output"
        );
        let fits = || async { Ok::<_, String>("x".repeat(crate::store::MAX_OUTPUT_BYTES - 2)) };
        once(&store, "fits", &payload, fits).keep_output().await;
        let again = once(&store, "fits", &payload, fits).keep_output().await;
        assert!(
            matches!(&again, Outcome::Replayed(s) if s.len() == crate::store::MAX_OUTPUT_BYTES - 2),
            "exactly at the bound it is kept"
        );
    }

    #[tokio::test]
    async fn work_runs_once_per_key_and_payload() {
        let store = MemoryStore::default();
        let runs = AtomicUsize::new(0);
        let work = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(7)
        };
        let payload = Welcome {
            user_id: "u-1",
            email: "a@b.c",
        };
        let first = once(&store, "u-1", &payload, work).await;
        assert!(matches!(first, Outcome::Performed(7)), "{first:?}");
        let again = once(&store, "u-1", &payload, work).await;
        assert!(matches!(again, Outcome::Duplicate), "{again:?}");
        let other = Welcome {
            email: "x@y.z",
            ..payload
        };
        let conflict = once(&store, "u-1", &other, work).await;
        assert!(matches!(conflict, Outcome::Conflict), "{conflict:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failure_gives_the_key_back_for_the_next_delivery() {
        let store = MemoryStore::default();
        let failing = || async { Err::<(), _>("provider down") };
        let failed = once(&store, "k", "p", failing).await;
        assert!(
            matches!(failed, Outcome::Failed("provider down")),
            "{failed:?}"
        );
        let retried = once(&store, "k", "p", || async { Ok::<_, &str>(()) }).await;
        assert!(matches!(retried, Outcome::Performed(())), "{retried:?}");
    }

    /// A store that implements the core alone (claim, complete, give back) and nothing of
    /// `guard::EffectStore`: what a store author writes first.
    struct CoreOnly {
        inner: MemoryStore,
        releases: AtomicUsize,
    }

    impl IdempotencyStore for CoreOnly {
        async fn begin(
            &self,
            request: &crate::store::ClaimRequest<'_>,
        ) -> Result<crate::store::Begin, StoreError> {
            self.inner.begin(request).await
        }

        async fn complete(
            &self,
            key: &str,
            lease: &crate::store::Lease,
            now_ms: u64,
            output: Option<&str>,
        ) -> Result<(), StoreError> {
            self.inner.complete(key, lease, now_ms, output).await
        }

        async fn release(&self, key: &str, lease: &crate::store::Lease) -> Result<(), StoreError> {
            self.releases.fetch_add(1, Ordering::SeqCst);
            self.inner.release(key, lease).await
        }
    }

    /// `once` needs only the core: a store of three primitives runs the work once per key,
    /// answers a duplicate, and gets the key back after a failure, also when the claim took over
    /// a holder's lease that ran out.
    #[tokio::test]
    async fn a_store_of_the_core_alone_serves_once() {
        let store = CoreOnly {
            inner: MemoryStore::default(),
            releases: AtomicUsize::new(0),
        };
        let first = once(&store, "k", "p", || async { Ok::<_, &str>(1) }).await;
        assert!(matches!(first, Outcome::Performed(1)), "{first:?}");
        let again = once(&store, "k", "p", || async { Ok::<_, &str>(2) }).await;
        assert!(matches!(again, Outcome::Duplicate), "{again:?}");
        let failed = once(&store, "f", "p", || async { Err::<(), _>("down") }).await;
        assert!(matches!(failed, Outcome::Failed(_)), "{failed:?}");
        assert_eq!(store.releases.load(Ordering::SeqCst), 1);
        let retried = once(&store, "f", "p", || async { Ok::<_, &str>(()) }).await;
        assert!(matches!(retried, Outcome::Performed(())), "{retried:?}");

        let clock = ManualClock::at(T0);
        let deadline_ms = T0 + 10_000;
        let never = || std::future::pending::<Result<(), &str>>();
        let cut_off = tokio::time::timeout(
            std::time::Duration::from_millis(10),
            once(&store, "t", "p", never)
                .clock(clock.clone())
                .deadline_ms(deadline_ms)
                .into_future(),
        )
        .await;
        assert!(cut_off.is_err());
        clock.set(deadline_ms + crate::LeasePolicy::default().margin_ms);
        let taken_over_failed = once(&store, "t", "p", || async { Err::<(), _>("down") })
            .clock(clock.clone())
            .await;
        assert!(
            matches!(taken_over_failed, Outcome::Failed(_)),
            "{taken_over_failed:?}"
        );
        assert_eq!(
            store.releases.load(Ordering::SeqCst),
            2,
            "given back, not kept"
        );
        let after = once(&store, "t", "p", || async { Ok::<_, &str>(()) })
            .clock(clock.clone())
            .await;
        assert!(matches!(after, Outcome::Performed(())), "{after:?}");
    }

    /// A claim whose holder died is busy until its lease ends (the deadline plus the margin),
    /// then taken over and the work runs again.
    #[tokio::test]
    async fn a_claim_cut_off_is_busy_until_its_lease_ends_then_runs_again() {
        let store = MemoryStore::default();
        let clock = ManualClock::at(T0);
        let deadline_ms = T0 + 10_000;
        let never = || std::future::pending::<Result<(), &str>>();
        let cut_off = tokio::time::timeout(
            std::time::Duration::from_millis(10),
            once(&store, "k", "p", never)
                .clock(clock.clone())
                .deadline_ms(deadline_ms)
                .message_id("m-1")
                .into_future(),
        )
        .await;
        assert!(cut_off.is_err());
        let lease_end = deadline_ms + crate::LeasePolicy::default().margin_ms;
        let busy = once(&store, "k", "p", || async { Ok::<_, &str>(()) })
            .clock(clock.clone())
            .await;
        assert!(
            matches!(busy, Outcome::Busy { until_ms } if until_ms == lease_end),
            "{busy:?}"
        );
        clock.set(lease_end);
        let taken_over = once(&store, "k", "p", || async { Ok::<_, &str>(()) })
            .clock(clock.clone())
            .await;
        assert!(
            matches!(taken_over, Outcome::Performed(())),
            "{taken_over:?}"
        );
    }

    #[tokio::test]
    async fn a_payload_with_no_json_form_is_invalid_and_runs_nothing() {
        let store = MemoryStore::default();
        let unwritable: BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let runs = AtomicUsize::new(0);
        let outcome = once(&store, "k", &unwritable, || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, &str>(())
        })
        .await;
        assert!(
            matches!(outcome, Outcome::Invalid(InvalidClaim::Payload(_))),
            "{outcome:?}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }
}
