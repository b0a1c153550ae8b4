//! The table as one container's client sees it: the in-memory store's conditional rules behind
//! latency, failures, and writes applied whose answer is lost; or the real `DynamoDbStore`,
//! through its own client (as the function builds it), on dynoxide's engine ([`crate::dynamodb`], whose HTTP layer injects those
//! faults where DynamoDB's would be).

use std::sync::Arc;

use idempotency::{
    DynamoDbStore, IdempotencyStore, MemoryStore, StoreError, store::Begin, store::ClaimRequest,
    store::Lease,
};

use crate::world::Shared;

/// Which store a run's containers use.
pub enum Table {
    /// The in-memory store (faults injected here, around each call).
    Memory(Arc<MemoryStore>),
    /// The shipped DynamoDB store over the SDK (faults injected at the HTTP layer), and the
    /// world's own reader of the same table.
    DynamoDb(DynamoDbStore, crate::dynamodb::ItemReader),
}

/// The shared table as one container's client sees it.
pub struct SimStore {
    /// The table.
    pub inner: Table,
    /// The run.
    pub world: Shared,
    /// Share of calls that fail unapplied.
    pub error_rate: f64,
    /// Share of calls applied whose answer is lost.
    pub lost_rate: f64,
    /// Share of calls throttled: the SDK's retries take up to the operation timeout.
    pub slow_rate: f64,
    /// Share of calls for a record at the give-up's receive that outlast the invocation.
    pub hang_at_give_up_rate: f64,
    /// The SDK's operation timeout (`DYNAMODB_OPERATION_TIMEOUT_MS`), ms.
    pub operation_timeout_ms: u64,
    /// The invocation this container runs, when it is a Lambda container (set by its loop around
    /// each invocation), with the container's clock: each lease granted is judged against it.
    pub holder: Holder,
    /// The answers the DynamoDB table's HTTP layer lost below the store's client (its retry
    /// then meets its own write): a claim may succeed with its first answer lost.
    pub lost_below: crate::dynamodb::LostAnswers,
}

/// A container's current invocation and clock, for the world to judge the leases it is granted.
#[derive(Clone)]
pub struct Holder {
    /// The container, by the world's count.
    pub container: usize,
    /// The invocation, while one runs.
    pub invocation: Arc<std::sync::Mutex<Option<crate::world::Invocation>>>,
    /// The container's clock.
    pub clock: crate::world::SimClock,
    /// The configured lease, ms, as the template sets it.
    pub lease_ms: u64,
    /// The configured margin past the deadline, ms.
    pub margin_ms: u64,
    /// The configured retention of an item after its last write, ms.
    pub retention_ms: u64,
    /// The orders of the current invocation's records at the give-up's receive, by the world's
    /// reading of their bodies (set with the invocation).
    pub at_give_up: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// The `maxReceiveCount`s the queue's redrive policy told this container's function, and
    /// when: written by the simulated SQS as it answers.
    pub learned: crate::world::Told,
}

impl Holder {
    /// Container `container`'s holder, with no invocation yet.
    pub fn new(
        container: usize,
        clock: crate::world::SimClock,
        lease_ms: u64,
        margin_ms: u64,
        retention_ms: u64,
    ) -> Self {
        Self {
            container,
            invocation: Arc::default(),
            clock,
            lease_ms,
            margin_ms,
            retention_ms,
            at_give_up: Arc::default(),
            learned: crate::world::Told::default(),
        }
    }

    /// Who writes now, for a violation's detail.
    fn name(&self) -> String {
        self.id()
            .map_or_else(|| "its holder".to_owned(), |h| h.to_string())
    }

    /// Who writes now, by the world's record: this container in its current invocation.
    fn id(&self) -> Option<crate::world::HolderId> {
        self.invocation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .map(|invocation| crate::world::HolderId {
                container: self.container,
                invocation: invocation.seq,
            })
    }

    /// The container runs `invocation` now (`None`: between invocations), with these orders'
    /// records at the give-up's receive.
    pub fn set(
        &self,
        invocation: Option<crate::world::Invocation>,
        at_give_up: std::collections::HashSet<String>,
    ) {
        *self
            .invocation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = invocation;
        *self
            .at_give_up
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = at_give_up;
    }

    /// How long until just past the current invocation's deadline, by this container's clock,
    /// when `key`'s record is at the give-up's receive (`None` otherwise).
    fn past_deadline_at_give_up(&self, key: &str) -> Option<u64> {
        let invocation = (*self
            .invocation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))?;
        self.at_give_up
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(key)
            .then(|| {
                invocation
                    .deadline_ms
                    .saturating_sub(lambda_kit::Clock::now_ms(&self.clock))
                    + 1_000
            })
    }
}

impl SimStore {
    /// Before the call: `Err` when it fails unapplied; after: whether to lose the answer. The
    /// DynamoDB table's faults happen below the SDK instead.
    async fn before(&self, key: &str, call: &str) -> Result<bool, StoreError> {
        // A call that outlasts the invocation while its record is at the last receive the
        // function sees (an operation timeout edited longer than the function's own, a
        // connection that black-holes): the processor must abandon the record and still move it
        // with its order's key.
        if let Some(ms) = self.holder.past_deadline_at_give_up(key)
            && self.world.chance(self.hang_at_give_up_rate)
        {
            self.world.count(|f| f.store_hangs_at_give_up += 1);
            self.world
                .tell(key, || format!("store {call}: hangs past the deadline"));
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        if matches!(self.inner, Table::DynamoDb(..)) {
            return Ok(false);
        }
        if self.world.chance(self.slow_rate) {
            self.world.count(|f| f.store_throttled += 1);
            self.world.latency(self.operation_timeout_ms).await;
        } else {
            self.world.latency(20).await;
        }
        let r = self.world.roll();
        if r < self.error_rate {
            self.world.count(|f| f.store_errors += 1);
            self.world
                .tell(key, || format!("store {call}: failed, not applied"));
            return Err(StoreError::Unavailable("simulated store error".into()));
        }
        let lost = r < self.error_rate + self.lost_rate;
        if lost {
            self.world.count(|f| f.store_answers_lost += 1);
        }
        Ok(lost)
    }

    /// The fence audit's view of a fenced write the table answered.
    fn audit(&self, key: &str, call: &str, lease: &Lease, result: &Result<(), StoreError>) {
        if result.is_ok() {
            let writer = self.holder.id();
            self.world
                .lock()
                .fence
                .applied(key, call, lease.token, writer);
        }
        // A finishing write answered `Ok` must have left the holder's lease: an item still in
        // progress under the writer's token is a write the table never applied (a completion
        // or release the store reported and did not make). Nothing but the writer's own claim
        // puts its token back in progress, so whatever ran between the write and this read
        // cannot make it look unapplied.
        if result.is_ok()
            && let Table::DynamoDb(_, table) = &self.inner
            && let Some((token, status)) = table.token_and_status(key)
            && token == lease.token.to_string()
            && status == "IN_PROGRESS"
        {
            let writer = self.holder.name();
            self.world.lock().fence.unapplied_writes.push((
                key.to_owned(),
                format!(
                    "{call} for {writer} answered Ok, but the table's item is still in progress \
                     under its token"
                ),
            ));
        }
        // A write refused as a lost lease while the table's item still carries the writer's
        // token, in progress or in the state this write sets: the holder's own write (applied,
        // its answer lost, sent again by the client) read as a takeover, or a holder refused
        // for nothing. Judged by the table's item as the world reads it, not by the store.
        if matches!(result, Err(StoreError::LeaseLost))
            && let Table::DynamoDb(_, table) = &self.inner
            && let Some((token, status)) = table.token_and_status(key)
        {
            let sets = match call {
                "complete" => "COMPLETED",
                "reject" => "REJECTED",
                "mark_attempted" => "ATTEMPTED",
                _ => "IN_PROGRESS",
            };
            if token == lease.token.to_string() && (status == "IN_PROGRESS" || status == sets) {
                let writer = self.holder.name();
                self.world.lock().fence.refused_retries.push((
                    key.to_owned(),
                    format!(
                        "{call} for {writer} refused as a lost lease, though the table's item \
                         carries its token ({status})"
                    ),
                ));
            }
        }
    }

    /// A finishing write (complete, mark_attempted, reject) applied whose answer was lost, as
    /// the client's standard retries meet it: on the DynamoDB table the client retries below the
    /// SDK for real; on the in-memory table the world retries every second such write once (the
    /// others stay store errors, as after the client's last attempt), and the retry's answer is
    /// the caller's. A retry the table refuses as a lost lease, after it applied the same write
    /// for the same holder a moment before, is the holder's own write read as a takeover
    /// (issue 51: a charge completed, then retried as `lease_lost`).
    async fn retry_lost(
        &self,
        key: &str,
        call: &str,
        lost: bool,
        first: &Result<(), StoreError>,
        again: impl std::future::Future<Output = Result<(), StoreError>>,
    ) -> Option<Result<(), StoreError>> {
        if !lost || first.is_err() || matches!(self.inner, Table::DynamoDb(..)) {
            return None;
        }
        if self.world.lock().faults.store_answers_lost % 2 == 1 {
            return None;
        }
        self.world.count(|f| f.store_answers_lost_retried += 1);
        self.world.tell(key, || {
            format!("store {call}: applied, answer lost; the client sends it again")
        });
        let result = again.await;
        if matches!(result, Err(StoreError::LeaseLost)) {
            let writer = self.holder.name();
            self.world.lock().fence.refused_retries.push((
                key.to_owned(),
                format!("{call} applied for {writer}, then its retry refused as a lost lease"),
            ));
        }
        Some(result)
    }

    fn answer<T: std::fmt::Debug>(
        &self,
        key: &str,
        call: &str,
        lost: bool,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if matches!(result, Err(StoreError::LeaseLost)) {
            self.world.count(|f| f.fenced_writes += 1);
        }
        self.world.tell(key, || {
            let lost = if lost { " (answer lost)" } else { "" };
            match &result {
                Ok(v) => format!("store {call}: {v:?}{lost}"),
                Err(e) => format!("store {call}: {e}{lost}"),
            }
        });
        if lost {
            return Err(StoreError::Unavailable(
                "simulated: applied, answer lost".into(),
            ));
        }
        result
    }
}

impl IdempotencyStore for SimStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        // The world's record that this invocation started the order's record, before any fault.
        if let Some(caller) = self.holder.id() {
            self.world
                .lock()
                .begun
                .entry(caller)
                .or_default()
                .insert(request.key.to_owned());
        }
        let lost = self.before(request.key, "begin").await?;
        let invocation = *self
            .holder
            .invocation
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let granted_to = invocation.map(|invocation| crate::world::HolderId {
            container: self.holder.container,
            invocation: invocation.seq,
        });
        // A claim the table may grant from here on, as long as the design's rule lets it last:
        // what a BUSY answer to anyone else may name. Recorded before the call, since a call
        // can be applied whatever becomes of its caller (a crash drops it mid-call; on the
        // DynamoDB store an answer can be lost on the way back); withdrawn only when the table
        // answers that it granted nothing.
        let now_ms = lambda_kit::Clock::now_ms(&self.holder.clock);
        let may_end_ms = crate::world::lease_may_end(
            invocation,
            now_ms,
            self.holder.lease_ms,
            self.holder.margin_ms,
        );
        self.world
            .lock()
            .fence
            .leased(request.key, granted_to, may_end_ms);
        // Only this call's lost answers count (an earlier call's about the same item do not).
        self.lost_below.take(request.key);
        let result = match &self.inner {
            Table::Memory(store) => store.begin(request).await,
            Table::DynamoDb(store, _) => store.begin(request).await,
        };
        let granted_at_ms = lambda_kit::Clock::now_ms(&self.holder.clock);
        let mut world = self.world.lock();
        if result.is_ok()
            && world
                .fence
                .unfinished_other(
                    request.key,
                    request.fingerprint,
                    granted_at_ms,
                    self.holder.retention_ms,
                )
                .is_some()
        {
            world.faults.other_payloads_on_unfinished_claims += 1;
        }
        if matches!(result, Ok(ref begin) if !matches!(begin, Begin::Started { .. })) {
            world.fence.not_leased(request.key, granted_to, may_end_ms);
        }
        if let Ok(Begin::Started { lease, .. }) = &result {
            let lost = lost || self.lost_below.take(request.key);
            // A lease its holder never ended, or an attempt it marked unfinished: either way
            // the world's record says the key's latest claim is not done.
            let cut_off = world.fence.claimed(request.key, lease.token, granted_to);
            let took_over = world.fence.took_over(
                request.key,
                granted_to,
                granted_at_ms,
                self.holder.retention_ms,
            );
            if took_over {
                world.faults.takeovers_owing_lookups += 1;
            }
            if (cut_off || took_over) && lost {
                world.faults.answers_lost_at_takeover += 1;
            }
            world.fence.granted_payload(
                request.key,
                request.fingerprint,
                granted_at_ms,
                self.holder.retention_ms,
            );
            // Judged by the world's own clock for this container and its own record of the
            // invocation, not by the claim's `now_ms` or deadline, which the code under test
            // computed.
            if let Some(invocation) = invocation {
                world.faults.leases_checked += 1;
                if lease.until_ms <= invocation.deadline_ms {
                    world.faults.leases_ending_by_the_deadline += 1;
                }
                if let Some(what) = crate::world::lease_rule_broken(
                    invocation,
                    granted_at_ms,
                    lease.until_ms,
                    self.holder.lease_ms,
                    self.holder.margin_ms,
                ) {
                    world
                        .fence
                        .uncovering_leases
                        .push((request.key.to_owned(), what));
                }
            }
        }
        drop(world);
        self.answer(request.key, "begin", lost, result)
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        self.world.lock().fence.ending(key);
        let lost = self.before(key, "complete").await?;
        // Once, and again when the world sends a write whose answer it lost (`retry_lost`).
        let send = || async {
            match &self.inner {
                Table::Memory(store) => store.complete(key, lease, now_ms, output).await,
                Table::DynamoDb(store, _) => store.complete(key, lease, now_ms, output).await,
            }
        };
        let result = send().await;
        self.audit(key, "complete", lease, &result);
        if let Some(retried) = self
            .retry_lost(key, "complete", lost, &result, send())
            .await
        {
            return self.answer(key, "complete (sent again)", false, retried);
        }
        self.answer(key, "complete", lost, result)
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        self.world.lock().fence.ending(key);
        let lost = self.before(key, "release").await?;
        let result = match &self.inner {
            Table::Memory(store) => store.release(key, lease).await,
            Table::DynamoDb(store, _) => store.release(key, lease).await,
        };
        self.audit(key, "release", lease, &result);
        self.answer(key, "release", lost, result)
    }
}

impl idempotency::guard::EffectStore for SimStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        let lost = self.before(key, "mark_attempted").await?;
        // Once, and again when the world sends a write whose answer it lost (`retry_lost`).
        let send = || async {
            match &self.inner {
                Table::Memory(store) => store.mark_attempted(key, lease, at_ms).await,
                Table::DynamoDb(store, _) => store.mark_attempted(key, lease, at_ms).await,
            }
        };
        let result = send().await;
        self.audit(key, "mark_attempted", lease, &result);
        if let Some(retried) = self
            .retry_lost(key, "mark_attempted", lost, &result, send())
            .await
        {
            return self.answer(key, "mark_attempted (sent again)", false, retried);
        }
        self.answer(key, "mark_attempted", lost, result)
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        // The world notes a decline its table did not record (`crate::check`).
        let unwritten = || {
            self.world.lock().unwritten_rejects.insert(key.to_owned());
        };
        self.world.lock().fence.ending(key);
        let lost = self
            .before(key, "reject")
            .await
            .inspect_err(|_| unwritten())?;
        // Once, and again when the world sends a write whose answer it lost (`retry_lost`).
        let send = || async {
            match &self.inner {
                Table::Memory(store) => store.reject(key, lease, now_ms, reason).await,
                Table::DynamoDb(store, _) => store.reject(key, lease, now_ms, reason).await,
            }
        };
        let result = send().await;
        if result.is_err() {
            unwritten();
        }
        self.audit(key, "reject", lease, &result);
        if let Some(retried) = self.retry_lost(key, "reject", lost, &result, send()).await {
            return self.answer(key, "reject (sent again)", false, retried);
        }
        self.answer(key, "reject", lost, result)
    }
}
