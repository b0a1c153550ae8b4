//! The idempotency store as the function runs it: the store this build was configured with,
//! chosen once at start-up ([`AnyStore`]), and every call to it timed for the metrics
//! (`Timed`).

use idempotency::{IdempotencyStore, StoreError, store::Begin, store::ClaimRequest, store::Lease};

use tracing::Instrument;

use crate::metrics::Latency;

/// Every store this build can run with, chosen at start-up: the library's own enum, built here
/// by the function's rules (its HTTP client, `PROCESS_ORDERS_LOCAL`) rather than by
/// `ConfiguredStore::from_env`.
pub type AnyStore = idempotency::ConfiguredStore;

/// A store with every call timed, for the metrics' store latency.
pub(crate) struct Timed<'a, S> {
    store: &'a S,
    latency: &'a Latency,
}

impl<'a, S> Timed<'a, S> {
    /// `store`'s calls, each recorded in `latency`.
    pub(crate) fn new(store: &'a S, latency: &'a Latency) -> Self {
        Self { store, latency }
    }
}

/// Each store request is also a trace span (DEBUG: free unless traces are on).
impl<S: IdempotencyStore> IdempotencyStore for Timed<'_, S> {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        let span = tracing::debug_span!("store.begin", error = tracing::field::Empty);
        let out = self
            .latency
            .time(self.store.begin(request))
            .instrument(span.clone())
            .await;
        crate::telemetry::record_error(&span, &out);
        out
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        let span = tracing::debug_span!("store.complete", error = tracing::field::Empty);
        let out = self
            .latency
            .time(self.store.complete(key, lease, now_ms, output))
            .instrument(span.clone())
            .await;
        crate::telemetry::record_error(&span, &out);
        out
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        let span = tracing::debug_span!("store.release", error = tracing::field::Empty);
        let out = self
            .latency
            .time(self.store.release(key, lease))
            .instrument(span.clone())
            .await;
        crate::telemetry::record_error(&span, &out);
        out
    }
}

impl<S: idempotency::guard::EffectStore> idempotency::guard::EffectStore for Timed<'_, S> {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        let span = tracing::debug_span!("store.mark_attempted", error = tracing::field::Empty);
        let out = self
            .latency
            .time(self.store.mark_attempted(key, lease, at_ms))
            .instrument(span.clone())
            .await;
        crate::telemetry::record_error(&span, &out);
        out
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        let span = tracing::debug_span!("store.reject", error = tracing::field::Empty);
        let out = self
            .latency
            .time(self.store.reject(key, lease, now_ms, reason))
            .instrument(span.clone())
            .await;
        crate::telemetry::record_error(&span, &out);
        out
    }
}
