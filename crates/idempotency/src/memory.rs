//! An in-memory store with the same semantics as the DynamoDB one. It protects one process
//! only, so the function refuses it inside Lambda; it serves local runs and tests.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{
    IdempotencyStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
    store::LeaseToken,
};
use crate::store::{ClaimState, Status, claimable, claimed_state, decide, prior_attempt};

/// The items by key, hashed with rustc-hash's Fx rather than the standard SipHash: hashing keys
/// was a tenth of a record's CPU in memory, and this store
/// serves one process's local runs and tests, whose keys no adversary picks.
type Items = HashMap<String, Item, rustc_hash::FxBuildHasher>;

#[derive(Debug, Clone)]
struct Item {
    state: ClaimState,
    token: Option<LeaseToken>,
    /// The output kept by the completion, if any.
    output: Option<String>,
}

/// Claims kept in this process's memory.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use idempotency::{MemoryStore, Outcome, once};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let store = MemoryStore::new(Duration::from_secs(3_600));
/// let first = once(&store, "k", &1, || async { Ok::<_, String>("done") }).await;
/// assert!(matches!(first, Outcome::Performed("done")));
/// let other = once(&store, "k", &2, || async { Ok::<_, String>("done") }).await;
/// assert!(matches!(other, Outcome::Conflict), "another payload under the key");
/// # });
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    retention_s: u64,
    // A std Mutex, not tokio's: it is never held across an await, and it is cheaper.
    items: Mutex<Items>,
}

impl Default for MemoryStore {
    /// Finished keys remembered for 18 days, as `IDEMPOTENCY_RETENTION_DAYS` does when unset.
    fn default() -> Self {
        Self::new(Duration::from_secs(18 * 86_400))
    }
}

impl MemoryStore {
    /// A store that remembers finished keys for `retention`.
    pub fn new(retention: Duration) -> Self {
        Self {
            retention_s: retention.as_secs(),
            items: Mutex::default(),
        }
    }

    fn items(&self) -> std::sync::MutexGuard<'_, Items> {
        // A panic while the lock was held cannot leave a half-written item (every write is one
        // insert or remove), so a poisoned lock is still consistent.
        self.items
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Clears a refusal on `key` (see `DynamoDbStore::clear_rejected`); whether there was one.
    pub fn clear_rejected(&self, key: &str) -> bool {
        let mut items = self.items();
        let rejected = items
            .get(key)
            .is_some_and(|item| item.state.status == Status::Rejected);
        if rejected {
            items.remove(key);
        }
        rejected
    }

    /// The state of `key`, as stored (for tests and local tools).
    pub fn state(&self, key: &str) -> Option<ClaimState> {
        self.items().get(key).map(|item| item.state)
    }

    fn expires_at(&self, now_ms: u64) -> u64 {
        (now_ms / 1_000).saturating_add(self.retention_s)
    }
}

impl MemoryStore {
    /// Applies `change`, a write that leaves the item `writes`, to the key's item if `lease`
    /// holds it (the token is the lease's and the item in progress), else `LeaseLost`. The
    /// holder's token stays on the item it finished, so the same write repeated (a retry of one
    /// whose answer was lost, as the DynamoDB store meets it) finds its own work and succeeds;
    /// any other write by that holder is refused.
    fn fenced(
        &self,
        key: &str,
        lease: &Lease,
        writes: Status,
        change: impl FnOnce(&mut Item),
    ) -> Result<(), StoreError> {
        let mut items = self.items();
        match items.get_mut(key) {
            Some(item)
                if item.token == Some(lease.token) && item.state.status == Status::InProgress =>
            {
                change(item);
                Ok(())
            }
            Some(item) if item.token == Some(lease.token) && item.state.status == writes => Ok(()),
            _ => Err(StoreError::LeaseLost),
        }
    }
}

impl MemoryStore {
    /// Ends the holder's work for good (`COMPLETED` or `REJECTED`): the lease and the attempt
    /// record go (the token stays, spent: see [`MemoryStore::fenced`]), the retention starts
    /// over, and `output` is kept.
    fn finish(
        &self,
        key: &str,
        lease: &Lease,
        status: Status,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        let expires_at_s = self.expires_at(now_ms);
        self.fenced(key, lease, status, |item| {
            item.output = output.map(str::to_owned);
            item.state = ClaimState {
                status,
                expires_at_s,
                lease_until_ms: 0,
                first_attempt_ms: None,
                attempts: 0,
                ..item.state
            };
        })
    }
}

impl IdempotencyStore for MemoryStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        let mut items = self.items();
        // One lookup for the whole decision: a new key is hashed once more, to insert it.
        let item = items.get_mut(request.key);
        let existing = item.as_ref().map(|item| item.state);
        if !claimable(existing.as_ref(), request.fingerprint, request.now_ms) {
            let item = item.ok_or_else(|| StoreError::Malformed("vanished item".into()))?;
            return Ok(decide(&item.state, request.fingerprint, request.now_ms)
                .with_output(item.output.clone()));
        }
        let lease = Lease {
            token: LeaseToken::new(),
            until_ms: request.lease_until_ms,
        };
        let claimed = Item {
            state: claimed_state(existing.as_ref(), request, self.expires_at(request.now_ms)),
            token: Some(lease.token),
            output: None,
        };
        match item {
            Some(item) => *item = claimed,
            None => {
                items.insert(request.key.to_owned(), claimed);
            }
        }
        Ok(Begin::Started {
            lease,
            prior: prior_attempt(existing.as_ref(), request),
        })
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        let output = crate::store::bounded_output(key, output);
        self.finish(key, lease, Status::Completed, now_ms, output)
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        let mut items = self.items();
        match items.get(key) {
            Some(item)
                if item.token == Some(lease.token) && item.state.status == Status::InProgress =>
            {
                items.remove(key);
                Ok(())
            }
            _ => Err(StoreError::LeaseLost),
        }
    }
}

impl crate::store::EffectStore for MemoryStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        let expires_at_s = self.expires_at(at_ms);
        self.fenced(key, lease, Status::Attempted, |item| {
            item.state.status = Status::Attempted;
            item.state.lease_until_ms = 0;
            item.state.expires_at_s = expires_at_s;
        })
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        _reason: &str,
    ) -> Result<(), StoreError> {
        self.finish(key, lease, Status::Rejected, now_ms, None)
    }
}
