//! Ports that fail on demand, wrapped around the real in-memory ones.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use process_orders::idempotency::{
    Begin, ClaimRequest, IdempotencyStore, Lease, MemoryStore, StoreError,
};
use process_orders::payment::{ChargeRequest, PaymentError, PaymentGateway, SimulatedGateway};

/// What the scripted gateway does for one order id (default: charge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    Transient,
    Reject,
    Panic,
}

/// The simulated gateway, with per-order failures scripted by the test.
#[derive(Debug, Default)]
pub struct ScriptedGateway {
    pub inner: SimulatedGateway,
    scripts: Mutex<HashMap<String, Script>>,
}

impl ScriptedGateway {
    pub fn script(&self, order_id: &str, script: Script) {
        self.scripts
            .lock()
            .unwrap()
            .insert(order_id.to_owned(), script);
    }

    pub fn clear(&self, order_id: &str) {
        self.scripts.lock().unwrap().remove(order_id);
    }
}

impl PaymentGateway for ScriptedGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        let script = self.scripts.lock().unwrap().get(request.order_id).copied();
        match script {
            Some(Script::Transient) => Err(PaymentError::Transient {
                reason: "scripted 503".into(),
                source: None,
            }),
            Some(Script::Reject) => Err(PaymentError::Rejected {
                status: Some(402),
                reason: "scripted decline".into(),
            }),
            Some(Script::Panic) => panic!("scripted gateway panic"),
            None => self.inner.charge(request).await,
        }
    }
}

/// The memory store, with store calls that fail on demand, counting every call.
#[derive(Debug)]
pub struct FlakyStore {
    pub inner: MemoryStore,
    pub fail_begin: std::sync::atomic::AtomicBool,
    pub fail_complete: std::sync::atomic::AtomicBool,
    pub calls: AtomicUsize,
}

impl FlakyStore {
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

    async fn complete(&self, key: &str, lease: &Lease, now_ms: u64) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail_complete.load(Ordering::SeqCst) {
            return Err(Self::unavailable());
        }
        self.inner.complete(key, lease, now_ms).await
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, lease).await
    }
}
