//! Ports that fail on demand, wrapped around the real in-memory ones.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::payment::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway, SimulatedGateway};
use idempotency::{
    IdempotencyStore, MemoryStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
};

/// What the scripted gateway does for one order id (default: charge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    /// The request never left (connection refused): nothing charged.
    NotSent,
    /// Sent, no answer (a timeout): the charge may exist. Nothing is charged here.
    Ambiguous,
    /// Declined.
    Reject,
    /// The handler panics.
    Panic,
}

/// The simulated gateway, with per-order failures scripted by the test.
#[derive(Debug, Default)]
pub struct ScriptedGateway {
    /// The gateway that answers when no script applies.
    pub inner: SimulatedGateway,
    scripts: Mutex<HashMap<String, Script>>,
}

impl ScriptedGateway {
    /// Scripts one order's answer.
    pub fn script(&self, order_id: &str, script: Script) {
        self.scripts
            .lock()
            .unwrap()
            .insert(order_id.to_owned(), script);
    }

    /// Removes one order's script.
    pub fn clear(&self, order_id: &str) {
        self.scripts.lock().unwrap().remove(order_id);
    }
}

impl PaymentGateway for ScriptedGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        let script = self.scripts.lock().unwrap().get(request.order_id).copied();
        match script {
            Some(Script::NotSent) => Err(PaymentError::NotSent {
                reason: "scripted connection refused".into(),
                source: None,
            }),
            Some(Script::Ambiguous) => Err(PaymentError::Ambiguous {
                reason: "scripted timeout".into(),
                source: None,
            }),
            Some(Script::Reject) => Err(PaymentError::Declined {
                status: Some(402),
                reason: "scripted decline".into(),
            }),
            Some(Script::Panic) => panic!("scripted gateway panic"),
            None => self.inner.charge(request).await,
        }
    }

    async fn lookup(&self, request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        self.inner.lookup(request).await
    }
}

/// The memory store, with store calls that fail on demand, counting every call.
#[derive(Debug)]
pub struct FlakyStore {
    /// The store that answers.
    pub inner: MemoryStore,
    /// `begin` fails while set.
    pub fail_begin: std::sync::atomic::AtomicBool,
    /// `complete` fails while set.
    pub fail_complete: std::sync::atomic::AtomicBool,
    /// Calls so far.
    pub calls: AtomicUsize,
}

impl Default for FlakyStore {
    fn default() -> Self {
        Self::new()
    }
}

impl FlakyStore {
    /// A store that does not fail until told to.
    pub fn new() -> Self {
        Self {
            inner: MemoryStore::new(std::time::Duration::from_secs(86_400)),
            fail_begin: Default::default(),
            fail_complete: Default::default(),
            calls: AtomicUsize::new(0),
        }
    }

    fn unavailable() -> StoreError {
        StoreError::Unavailable("scripted outage".into())
    }
}

impl IdempotencyStore for FlakyStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_begin.load(Ordering::SeqCst) {
            return Err(Self::unavailable());
        }
        self.inner.begin(request).await
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_complete.load(Ordering::SeqCst) {
            return Err(Self::unavailable());
        }
        self.inner.complete(key, lease, now_ms, output).await
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, lease).await
    }
}

impl idempotency::guard::EffectStore for FlakyStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.mark_attempted(key, lease, at_ms).await
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.reject(key, lease, now_ms, reason).await
    }
}

/// Any store, with random faults: store errors on `begin` and `complete`, and a `complete` that
/// never returns (the invocation is abandoned after its claims, before completing them).
#[derive(Debug)]
pub struct FaultyStore<S> {
    /// The store that answers.
    pub inner: S,
    /// The share of calls that fail.
    pub error_rate: f64,
    /// The share of calls that never answer.
    pub hang_rate: f64,
    rng: Mutex<fastrand::Rng>,
    /// Calls failed so far.
    pub errors: AtomicUsize,
    /// Calls hung so far.
    pub hangs: AtomicUsize,
}

impl<S> FaultyStore<S> {
    /// Wraps `inner`, failing and hanging at these rates, from `seed`.
    pub fn new(inner: S, error_rate: f64, hang_rate: f64, seed: u64) -> Self {
        Self {
            inner,
            error_rate,
            hang_rate,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            errors: AtomicUsize::new(0),
            hangs: AtomicUsize::new(0),
        }
    }

    fn roll(&self) -> f64 {
        self.rng.lock().unwrap().f64()
    }

    fn fail(&self) -> Result<(), StoreError> {
        if self.roll() < self.error_rate {
            self.errors.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable("injected store fault".into()));
        }
        Ok(())
    }
}

impl<S: IdempotencyStore> IdempotencyStore for FaultyStore<S> {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        self.fail()?;
        self.inner.begin(request).await
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        if self.roll() < self.hang_rate {
            self.hangs.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        self.fail()?;
        self.inner.complete(key, lease, now_ms, output).await
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        self.inner.release(key, lease).await
    }
}

impl<S: idempotency::guard::EffectStore> idempotency::guard::EffectStore for FaultyStore<S> {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        self.inner.mark_attempted(key, lease, at_ms).await
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.inner.reject(key, lease, now_ms, reason).await
    }
}
