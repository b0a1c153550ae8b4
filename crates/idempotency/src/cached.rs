//! A bounded, in-process cache of completed keys in front of any store: a duplicate that this
//! container has seen completed is answered without a request to the table.
//!
//! Only [`Begin::Done`] is ever answered from the cache, only for a key this process completed
//! itself (so the completion's time, and with it the item's expiry, is known), only for the
//! payload that completed it, and only for its time to live, which must be shorter than the
//! store's retention. A completed key stays completed until its retention ends, so the cache
//! can only be stale about a key a person deleted by hand, for at most its time to live. A
//! `Done` the store answers is not cached (the item may be about to expire), nor is an output
//! above [`MAX_CACHED_OUTPUT_BYTES`] (the cache's memory stays within capacity x that). Every
//! other answer (busy, conflict, a takeover) comes from the store, and every write goes to it.
//!
//! ```
//! use idempotency::{CachedStore, MemoryStore};
//!
//! // At most 1,024 keys, each kept 5 minutes (the default).
//! let store = CachedStore::new(MemoryStore::default(), 1_024);
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use crate::{
    Fingerprint, IdempotencyStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
    store::LeaseToken,
};

/// The largest output a cached completion keeps in memory; a completion with a larger one is
/// not cached (its duplicates go to the store).
pub const MAX_CACHED_OUTPUT_BYTES: usize = 4_096;

/// `store` with the completed keys this process saw kept in memory, the least recently used
/// dropped first.
///
/// # Example
///
/// ```
/// use idempotency::{CachedStore, MemoryStore, Outcome, once};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = CachedStore::new(MemoryStore::default(), 1_024);
/// let send = || async { Ok::<_, String>(()) };
/// assert!(matches!(once(&store, "u-1", &"hi", send).await, Outcome::Performed(())));
/// // Completed by this container: answered from memory, no request to the store behind it.
/// assert!(matches!(once(&store, "u-1", &"hi", send).await, Outcome::Duplicate));
/// # });
/// ```
#[derive(Debug)]
pub struct CachedStore<S> {
    inner: S,
    capacity: usize,
    ttl_ms: u64,
    // A std Mutex, not tokio's: it is never held across an await.
    entries: Mutex<Lru>,
}

impl<S> CachedStore<S> {
    /// `inner` with a cache of at most `capacity` keys (0 caches nothing), each answered from
    /// memory for 5 minutes after this process completed it.
    pub fn new(inner: S, capacity: usize) -> Self {
        Self {
            inner,
            capacity,
            ttl_ms: 300_000,
            entries: Mutex::default(),
        }
    }

    /// How long a completed key is answered from memory. It must be below the store's
    /// retention (minutes against days), and as short as a person deleting a completed key by
    /// hand (to have its work done again) can wait for every container to see it.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// The store behind the cache.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Lru> {
        // Every change is one insert or remove on each map, made together: still consistent.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn remember(&self, key: &str, entry: Entry) {
        if self.capacity > 0 {
            self.entries().put(key, entry, self.capacity);
        }
    }

    /// Drops what is known of `key` after a write by `lease` that did not complete it.
    fn forget_lease(&self, key: &str, lease: &Lease) {
        let mut entries = self.entries();
        if matches!(entries.get(key), Some(Entry::Held { token, .. }) if *token == lease.token) {
            entries.remove(key);
        }
    }
}

#[derive(Debug, Clone)]
enum Entry {
    /// Claimed by this process: what a completion by `token` completes.
    Held {
        token: LeaseToken,
        fingerprint: Fingerprint,
    },
    /// Completed for `fingerprint`; answered from memory until `until_ms`.
    Done {
        fingerprint: Fingerprint,
        output: Option<String>,
        until_ms: u64,
    },
}

/// Keys by last use: `order` maps a use's tick to its key, so the least recently used is the
/// first of `order`.
#[derive(Debug, Default)]
struct Lru {
    map: HashMap<String, (u64, Entry)>,
    order: BTreeMap<u64, String>,
    tick: u64,
}

impl Lru {
    fn get(&self, key: &str) -> Option<&Entry> {
        self.map.get(key).map(|(_, entry)| entry)
    }

    /// Marks `key` used now.
    fn touch(&mut self, key: &str) {
        self.tick += 1;
        if let Some((tick, _)) = self.map.get_mut(key) {
            if let Some(owned) = self.order.remove(tick) {
                self.order.insert(self.tick, owned);
            }
            *tick = self.tick;
        }
    }

    fn put(&mut self, key: &str, entry: Entry, capacity: usize) {
        if capacity == 0 {
            return;
        }
        self.tick += 1;
        if let Some((old_tick, _)) = self.map.remove(key) {
            self.order.remove(&old_tick);
        }
        while self.map.len() >= capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&oldest);
        }
        self.order.insert(self.tick, key.to_owned());
        self.map.insert(key.to_owned(), (self.tick, entry));
    }

    fn remove(&mut self, key: &str) {
        if let Some((tick, _)) = self.map.remove(key) {
            self.order.remove(&tick);
        }
    }
}

impl<S: IdempotencyStore> IdempotencyStore for CachedStore<S> {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        {
            let mut entries = self.entries();
            if let Some(Entry::Done {
                fingerprint,
                output,
                until_ms,
            }) = entries.get(request.key)
                && *fingerprint == request.fingerprint
                && request.now_ms < *until_ms
            {
                let output = output.clone();
                entries.touch(request.key);
                return Ok(Begin::Done { output });
            }
        }
        let answer = self.inner.begin(request).await?;
        match &answer {
            Begin::Started { lease, .. } => self.remember(
                request.key,
                Entry::Held {
                    token: lease.token,
                    fingerprint: request.fingerprint,
                },
            ),
            // Not cached: when the item was completed, and so when it expires, is unknown here.
            _ => self.entries().remove(request.key),
        }
        Ok(answer)
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        let result = self.inner.complete(key, lease, now_ms, output).await;
        let mut entries = self.entries();
        match (entries.get(key), &result) {
            (Some(Entry::Held { token, fingerprint }), Ok(()))
                if *token == lease.token
                    && output.is_none_or(|o| o.len() <= MAX_CACHED_OUTPUT_BYTES) =>
            {
                let done = Entry::Done {
                    fingerprint: *fingerprint,
                    output: output.map(str::to_owned),
                    until_ms: now_ms.saturating_add(self.ttl_ms),
                };
                entries.put(key, done, self.capacity);
            }
            (Some(Entry::Held { token, .. }), _) if *token == lease.token => entries.remove(key),
            _ => {}
        }
        result
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        let result = self.inner.release(key, lease).await;
        self.forget_lease(key, lease);
        result
    }

    fn lease_policy(&self) -> Option<crate::LeasePolicy> {
        self.inner.lease_policy()
    }
}

impl<S: crate::store::EffectStore> crate::store::EffectStore for CachedStore<S> {
    async fn mark_attempted(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let result = self.inner.mark_attempted(key, lease, now_ms).await;
        self.forget_lease(key, lease);
        result
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        let result = self.inner.reject(key, lease, now_ms, reason).await;
        self.forget_lease(key, lease);
        result
    }
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::store::EffectStore as _;
    use crate::testkit::{FP, RETENTION, claim, started, t0};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A memory store that counts the claims that reach it.
    #[derive(Default)]
    struct Counting {
        store: MemoryStore,
        begins: AtomicUsize,
    }

    impl IdempotencyStore for Counting {
        async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
            self.begins.fetch_add(1, Ordering::SeqCst);
            self.store.begin(request).await
        }
        async fn complete(
            &self,
            key: &str,
            lease: &Lease,
            now_ms: u64,
            output: Option<&str>,
        ) -> Result<(), StoreError> {
            self.store.complete(key, lease, now_ms, output).await
        }

        async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
            self.store.release(key, lease).await
        }
    }

    impl crate::store::EffectStore for Counting {
        async fn mark_attempted(
            &self,
            key: &str,
            lease: &Lease,
            at: u64,
        ) -> Result<(), StoreError> {
            self.store.mark_attempted(key, lease, at).await
        }

        async fn reject(&self, k: &str, l: &Lease, at: u64, why: &str) -> Result<(), StoreError> {
            self.store.reject(k, l, at, why).await
        }
    }

    fn cached(capacity: usize) -> CachedStore<Counting> {
        CachedStore::new(
            Counting {
                store: MemoryStore::new(RETENTION),
                begins: AtomicUsize::new(0),
            },
            capacity,
        )
        .with_ttl(Duration::from_secs(60))
    }

    fn done(output: Option<&str>) -> Begin {
        Begin::Done {
            output: output.map(str::to_owned),
        }
    }

    async fn complete(store: &CachedStore<Counting>, key: &str, output: Option<&str>) {
        let lease = started(store, &claim(key, t0())).await;
        store
            .complete(key, &lease, t0() + 1, output)
            .await
            .expect("complete");
    }

    #[tokio::test]
    async fn a_key_completed_here_is_answered_from_memory_until_its_ttl() {
        let store = cached(8);
        complete(&store, "k", Some("r-1")).await;
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), 1);
        for at in [t0() + 2, t0() + 60_000] {
            let again = store.begin(&claim("k", at)).await.expect("begin");
            assert_eq!(again, done(Some("r-1")));
        }
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), 1, "no request");
        // Past the time to live the store is asked, every time: its `Done` is not cached (the
        // item may be about to expire).
        for at in [t0() + 60_001, t0() + 60_002] {
            let late = store.begin(&claim("k", at)).await.expect("begin");
            assert_eq!(late, done(Some("r-1")));
        }
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), 3);
    }

    /// A key whose retention ends right after a completion seen elsewhere is started afresh,
    /// never answered `Done` from memory past its expiry.
    #[tokio::test]
    async fn a_done_from_the_store_is_not_cached() {
        let store = cached(8);
        let lease = started(store.inner(), &claim("k", t0())).await;
        store
            .inner()
            .complete("k", &lease, t0(), None)
            .await
            .expect("complete");
        let expiry = t0() + RETENTION.as_millis() as u64;
        let before = store
            .begin(&claim("k", expiry - 1_000))
            .await
            .expect("begin");
        assert_eq!(before, done(None));
        let after = store
            .begin(&claim("k", expiry + 1_000))
            .await
            .expect("begin");
        assert!(matches!(after, Begin::Started { .. }), "{after:?}");
    }

    #[tokio::test]
    async fn a_large_output_is_not_kept_in_memory() {
        let store = cached(8);
        let large = "x".repeat(MAX_CACHED_OUTPUT_BYTES + 1);
        complete(&store, "k", Some(&large)).await;
        let again = store.begin(&claim("k", t0() + 2)).await.expect("begin");
        assert_eq!(again, done(Some(&large)), "from the store");
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), 2);
        assert!(store.entries().map.is_empty());
    }

    #[tokio::test]
    async fn only_the_completing_payload_is_answered_from_memory() {
        let store = cached(8);
        complete(&store, "k", None).await;
        let other = ClaimRequest {
            fingerprint: Fingerprint(FP.0 ^ 1),
            ..claim("k", t0() + 2)
        };
        assert_eq!(store.begin(&other).await.expect("begin"), Begin::Conflict);
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), 2, "asked");
    }

    /// A key held, attempted, released or refused is never answered from memory: the store
    /// decides, and a later completion by another lease (a takeover elsewhere) is not ours to
    /// cache.
    #[tokio::test]
    async fn nothing_but_a_completion_is_kept() {
        let store = cached(8);
        let lease = started(&store, &claim("k", t0())).await;
        let busy = store.begin(&claim("k", t0() + 1)).await.expect("begin");
        assert!(matches!(busy, Begin::Busy { .. }));
        store
            .mark_attempted("k", &lease, t0() + 2)
            .await
            .expect("mark");
        let taken = started(&store, &claim("k", t0() + 3)).await;
        // The first holder's late completion is refused and caches nothing.
        assert!(store.complete("k", &lease, t0() + 4, None).await.is_err());
        store.release("k", &taken).await.expect("release");
        let asked = store.inner().begins.load(Ordering::SeqCst);
        started(&store, &claim("k", t0() + 5)).await;
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), asked + 1);
    }

    #[tokio::test]
    async fn the_least_recently_used_key_goes_first() {
        let store = cached(2);
        complete(&store, "a", None).await;
        complete(&store, "b", None).await;
        // "a" used again, so "b" is the least recently used when "c" comes.
        store.begin(&claim("a", t0() + 2)).await.expect("begin");
        complete(&store, "c", None).await;
        let asked = store.inner().begins.load(Ordering::SeqCst);
        store.begin(&claim("a", t0() + 3)).await.expect("begin");
        store.begin(&claim("c", t0() + 3)).await.expect("begin");
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), asked);
        store.begin(&claim("b", t0() + 3)).await.expect("begin");
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), asked + 1);
        let entries = store.entries();
        assert_eq!((entries.map.len(), entries.order.len()), (2, 2));
    }

    #[tokio::test]
    async fn a_capacity_of_zero_caches_nothing() {
        let store = cached(0);
        complete(&store, "k", None).await;
        store.begin(&claim("k", t0() + 2)).await.expect("begin");
        assert_eq!(store.inner().begins.load(Ordering::SeqCst), 2);
    }
}
