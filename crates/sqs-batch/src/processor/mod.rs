//! The batch processor: runs a [`RecordHandler`] over a batch with the SQS partial-failure
//! contract, and knows nothing of orders.
//!
//! - Standard queues: records run concurrently, at most `max_concurrency` at a time; every
//!   non-ACK record is reported, once, in batch order.
//! - FIFO, batch scope (the Lambda contract): records run one by one in batch order; the first
//!   non-ACK record and every record after it are reported, and nothing after it is started.
//! - FIFO, group scope: only the failed message group's later records are skipped, and only
//!   after a RETRY (a POISON record never succeeds, so it does not hold its group: see
//!   `Hold::RetryOnly`); groups run concurrently, in order inside each group.
//! - A record is not started when the invocation's remaining time is below the deadline margin;
//!   it is reported instead. A started record still running when half the margin is left is
//!   abandoned and reported RETRY. Either way the response leaves before the function timeout.
//!   A runtime that stops waiting ([`BatchProcessor::abandon_running`], a worker's drain
//!   timeout) abandons every record still running at once, the same way.
//! - A panic inside a handler is RETRY for that record only.
//!
//! # Example
//!
//! ```
//! use sqs_batch::Verdict;
//! use sqs_batch::edge::{Message, QueueKind};
//! use sqs_batch::processor::{BatchReport, RecordStatus};
//!
//! let batch = [Message::new("m-1", "{}"), Message::new("m-2", "{}")];
//! let report = BatchReport::new(
//!     QueueKind::Standard,
//!     vec![
//!         RecordStatus::Handled(Verdict::ack("done")),
//!         RecordStatus::Handled(Verdict::retry("busy")),
//!     ],
//! );
//! assert_eq!(report.failed_ids(&batch).collect::<Vec<_>>(), ["m-2"]);
//! ```

mod options;
mod record;
mod report;
mod scope;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::Notify;
use tracing::{info, warn};

use lambda_kit::Clock;

use crate::edge::{Message, QueueKind};
pub use crate::turns::KeyTurn;
use crate::turns::KeyTurns;

pub use options::{BatchOptions, FifoScope, MIN_DEADLINE_MARGIN_MS};
#[allow(deprecated)]
pub use record::{Decision, Health, Invocation, Outcome, RecordContext, RecordHandler, Verdict};
pub use report::{ABANDONED, BatchReport, Counts, RecordStatus, SHUTTING_DOWN};
use scope::{CURRENT, InScope};
#[allow(deprecated)]
pub use scope::{Current, CurrentRecord, current, key_turn};

/// Drives a [`RecordHandler`] over batches.
///
/// # Example
///
/// ```
/// use sqs_batch::{BatchOptions, BatchProcessor, Message, Verdict};
/// use sqs_batch::edge::QueueKind;
/// use sqs_batch::lambda_kit::{Clock, SystemClock};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let processor = BatchProcessor::new(
///     sqs_batch::json(|n: u32| async move { Verdict::ack(if n % 2 == 0 { "even" } else { "odd" }) }),
///     SystemClock,
///     BatchOptions::default(),
/// );
/// let batch = [Message::new("m-1", "4"), Message::new("m-2", "x")];
/// let report = processor
///     .process(&batch, QueueKind::Standard, SystemClock.now_ms() + 60_000)
///     .await;
/// assert!(report.statuses[0].is_ack());
/// assert_eq!(report.failed_ids(&batch).collect::<Vec<_>>(), ["m-2"]);
/// # });
/// ```
#[derive(Debug)]
pub struct BatchProcessor<H, C> {
    handler: H,
    clock: C,
    options: BatchOptions,
    /// Set once the runtime stops: no record starts after it ([`RecordStatus::SkippedStopping`]).
    stopping: AtomicBool,
    /// Set once the runtime stops waiting: the records running are abandoned.
    abandoning: AtomicBool,
    /// Wakes the running records when `abandoning` is set.
    abandon: Notify,
    /// The business keys its running records hold ([`key_turn`]).
    turns: Arc<KeyTurns>,
}

impl<H: Clone, C: Clone> Clone for BatchProcessor<H, C> {
    /// Another processor with the same handler, clock and options, neither stopping nor
    /// abandoning.
    fn clone(&self) -> Self {
        Self {
            handler: self.handler.clone(),
            clock: self.clock.clone(),
            options: self.options,
            stopping: AtomicBool::new(false),
            abandoning: AtomicBool::new(false),
            abandon: Notify::new(),
            turns: Arc::default(),
        }
    }
}

impl<H: RecordHandler, C: Clock> BatchProcessor<H, C> {
    /// Drives `handler`, deciding deadlines on `clock`.
    pub fn new(handler: H, clock: C, options: BatchOptions) -> Self {
        Self {
            handler,
            clock,
            options,
            stopping: AtomicBool::new(false),
            abandoning: AtomicBool::new(false),
            abandon: Notify::new(),
            turns: Arc::default(),
        }
    }

    /// From now on no record starts: each one not yet started is
    /// [`RecordStatus::SkippedStopping`] (and never gives up as `retries_exhausted`, whatever
    /// its receive count). Records already running finish. For a runtime that is shutting down.
    pub fn stop_starting(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether [`BatchProcessor::stop_starting`] was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// From now on no record starts ([`BatchProcessor::stop_starting`]), and every record still
    /// running is abandoned at once: RETRY [`ABANDONED`], reported like one abandoned near the
    /// deadline, so its batch ends with every other record's status. For a runtime that stops
    /// waiting (a worker's drain timeout). It never gives up as `retries_exhausted`: the stop
    /// cut it, not its own failures.
    pub fn abandon_running(&self) {
        self.stop_starting();
        self.abandoning.store(true, Ordering::SeqCst);
        self.abandon.notify_waiters();
    }

    /// Resolves once [`BatchProcessor::abandon_running`] is called (at once if it was). The
    /// waiter is registered before the flag is read, so a call between the two is never missed.
    async fn abandoned(&self) {
        let notified = self.abandon.notified();
        if self.abandoning.load(Ordering::SeqCst) {
            return;
        }
        notified.await;
    }

    /// `verdict`, made by the processor for `message`, with the key the handler names for it.
    fn keyed(&self, message: &Message<'_>, verdict: Verdict) -> Verdict {
        match self.handler.record_key(message) {
            Some(key) => verdict.with_key(key),
            None => verdict,
        }
    }

    /// The handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The handler, to change it after building.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// The options it runs with.
    pub fn options(&self) -> &BatchOptions {
        &self.options
    }

    /// The clock its deadlines are decided on.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The handler, the clock and the options it was built from (to build another runtime
    /// around them: [`crate::worker::Worker`]).
    pub fn into_parts(self) -> (H, C, BatchOptions) {
        (self.handler, self.clock, self.options)
    }

    /// Processes a batch and logs every record that is not acknowledged, plus one summary line.
    ///
    /// Needs a Tokio runtime with the time driver (Lambda's runtime has it): records still
    /// running near the deadline are cut off with a timer.
    pub async fn process(
        &self,
        batch: &[Message<'_>],
        kind: QueueKind,
        invocation: impl Into<Invocation>,
    ) -> BatchReport {
        self.process_until(batch, kind, invocation, self.options.give_up_at_receive)
            .await
    }

    /// As [`BatchProcessor::process`], with the receive from which a RETRY gives up learned for
    /// this batch (from its queue's redrive policy) instead of
    /// [`BatchOptions::give_up_at_receive`].
    pub async fn process_until(
        &self,
        batch: &[Message<'_>],
        kind: QueueKind,
        invocation: impl Into<Invocation>,
        give_up_at_receive: Option<u32>,
    ) -> BatchReport {
        let invocation = invocation.into();
        let deadline_ms = invocation.deadline_ms;
        let limits = Limits {
            deadline_ms,
            give_up_at_receive,
            invocation: &invocation,
        };
        let started_ms = self.clock.now_ms();
        if !batch.is_empty()
            && deadline_ms.saturating_sub(started_ms) < self.options.deadline_margin_ms
        {
            // Nothing can start: most likely the margin exceeds the function timeout.
            tracing::error!(
                deadline_ms,
                now_ms = started_ms,
                deadline_margin_ms = self.options.deadline_margin_ms,
                "the invocation starts inside the deadline margin, so no record can run: \
                 keep SQS_BATCH_DEADLINE_MARGIN_MS well below the function timeout"
            );
        }
        let statuses = match (kind, self.options.fifo_scope) {
            (QueueKind::Standard, _) => self.concurrent(batch, limits).await,
            (QueueKind::Fifo, FifoScope::Batch) => self.in_order(batch, limits).await,
            (QueueKind::Fifo, FifoScope::Group) => self.by_group(batch, limits).await,
        };
        let report = BatchReport { kind, statuses };
        log_report(
            &self.handler,
            batch,
            &report,
            self.clock.now_ms().saturating_sub(started_ms),
        );
        report
    }

    /// Runs one record unless the deadline is too close; a panic becomes RETRY.
    async fn run_one(&self, message: &Message<'_>, limits: Limits<'_>) -> RecordStatus {
        let deadline_ms = limits.deadline_ms;
        let remaining = deadline_ms.saturating_sub(self.clock.now_ms());
        if remaining < self.options.deadline_margin_ms {
            return RecordStatus::SkippedDeadline;
        }
        if self.is_stopping() {
            return RecordStatus::SkippedStopping;
        }
        let context = limits.invocation.clone();
        // The record's trace span (DEBUG: free unless a trace exporter is on), linked to the
        // producer's trace (`AWSTraceHeader`); its outcome is recorded once decided.
        let span = tracing::debug_span!(
            "record",
            message_id = message.message_id,
            trace_header = message.trace_header,
            key = tracing::field::Empty,
            outcome = tracing::field::Empty,
            reason = tracing::field::Empty,
        );
        // A started record may run until half the margin is left; then it is abandoned and
        // reported, so the response and the visibility calls still leave before Lambda ends
        // the invocation (which would retry the whole batch). Dropping it mid-call is safe: its
        // claim stays STARTED until the lease ends, and a charge that did go out carries the
        // idempotency key the redelivery will send again.
        let budget = Duration::from_millis(remaining - self.options.deadline_margin_ms / 2);
        // AssertUnwindSafe: after a panic the handler's state is only read through its own
        // synchronisation (stores lock, clients are stateless), so no broken invariant leaks.
        // The record is known to the code the handler runs (`current`): an idempotent claim
        // takes the deadline and the earlier attempt from it without being handed the record.
        let current = CurrentRecord {
            deadline_ms,
            earlier_attempt_ms: crate::failure::earlier_attempt_ms(message),
        };
        let scope = InScope {
            current,
            turns: self.turns.clone(),
        };
        let handled = AssertUnwindSafe(CURRENT.scope(
            scope,
            tracing::Instrument::instrument(self.handler.handle(message, context), span.clone()),
        ))
        .catch_unwind();
        // Biased: a record that finished as the runtime stopped waiting keeps its verdict.
        let verdict = tokio::select! {
            biased;
            handled = tokio::time::timeout(budget, handled) => {
                let verdict = match handled {
                    Ok(Ok(verdict)) => verdict,
                    Ok(Err(_)) => self.keyed(
                        message,
                        Verdict::retry("panic").with_detail("the record handler panicked"),
                    ),
                    // Its claim may be held until the lease ends: retrying sooner would only
                    // meet BUSY.
                    Err(_) => self.keyed(
                        message,
                        Verdict::retry(ABANDONED)
                            .with_retry_after_ms(
                                deadline_ms.saturating_add(self.options.abandoned_hold_ms),
                            )
                            .with_detail(
                                "still running when the invocation's time was nearly up: \
                                 abandoned and reported",
                            ),
                    ),
                };
                give_up_if_exhausted(verdict, message.receive_count, limits.give_up_at_receive)
            }
            // Dropping it mid-call is safe for the reasons above.
            () = self.abandoned() => self.keyed(
                message,
                Verdict::retry(ABANDONED).with_detail(
                    "still running when the runtime stopped waiting (a worker's drain timeout): \
                     abandoned",
                ),
            ),
        };
        span.record("key", verdict.key.as_deref());
        span.record("outcome", verdict.outcome.as_str());
        span.record("reason", verdict.reason);
        RecordStatus::Handled(verdict)
    }
}

/// What bounds one batch's records: its deadline, and the receive from which a RETRY gives up.
#[derive(Debug, Clone, Copy)]
struct Limits<'a> {
    deadline_ms: u64,
    give_up_at_receive: Option<u32>,
    /// What each record's context carries.
    invocation: &'a Invocation,
}

/// The reason of a record that gave up: RETRY at the receive before the queue's redrive.
const GAVE_UP: &str = "retries_exhausted";

/// A RETRY at or past `give_up_at_receive` ([`BatchOptions::give_up_at_receive`], or the
/// queue's own) becomes POISON `retries_exhausted`: it has outlived its retry schedule, and only
/// a person can settle it.
fn give_up_if_exhausted(
    verdict: Verdict,
    receive_count: Option<u32>,
    give_up_at_receive: Option<u32>,
) -> Verdict {
    match (give_up_at_receive, receive_count) {
        (Some(last), Some(n)) if n >= last && verdict.outcome == Decision::Retry => {
            let detail = format!(
                "{} at receive {n}, the last before the queue's redrive{}",
                verdict.reason,
                verdict
                    .detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            );
            Verdict {
                outcome: Decision::Poison,
                reason: GAVE_UP,
                detail: Some(detail.into()),
                retry_after_ms: None,
                ..verdict
            }
        }
        _ => verdict,
    }
}

impl<H: RecordHandler, C: Clock> BatchProcessor<H, C> {
    // The two concurrent modes below feed `FuturesUnordered` from plain loops,
    // not from stream closures: a closure returning a borrowing future hits a compiler limit
    // (rust-lang/rust#110338) that makes the whole batch future fail to prove `Send`.

    async fn concurrent(&self, batch: &[Message<'_>], limits: Limits<'_>) -> Vec<RecordStatus> {
        let limit = self.options.max_concurrency.get();
        let mut pending = batch.iter().enumerate();
        let mut in_flight = FuturesUnordered::new();
        // Every slot is written once a record finishes; the placeholder is never reported.
        let mut statuses = vec![RecordStatus::SkippedDeadline; batch.len()];
        for (index, message) in pending.by_ref().take(limit) {
            in_flight.push(self.run_at(index, message, limits));
        }
        // Whichever record finishes first frees its slot for the next one; the statuses go back
        // into batch order by index.
        while let Some((index, status)) = in_flight.next().await {
            statuses[index] = status;
            if let Some((index, message)) = pending.next() {
                in_flight.push(self.run_at(index, message, limits));
            }
        }
        statuses
    }

    async fn run_at(
        &self,
        index: usize,
        message: &Message<'_>,
        limits: Limits<'_>,
    ) -> (usize, RecordStatus) {
        (index, self.run_one(message, limits).await)
    }

    async fn in_order(&self, batch: &[Message<'_>], limits: Limits<'_>) -> Vec<RecordStatus> {
        // The whole batch is one group.
        let all = (0..batch.len()).collect();
        let statuses = self.run_group(batch, all, limits, Hold::AnyFailure).await;
        statuses.into_iter().map(|(_, status)| status).collect()
    }

    async fn by_group(&self, batch: &[Message<'_>], limits: Limits<'_>) -> Vec<RecordStatus> {
        // Records without a group id share one anonymous group: ordered, never reordered.
        // Fx, not SipHash: a FIFO batch holds at most ten records, so no producer's choice of
        // group ids can make this map slow, and hashing them was a fortieth of a record.
        let mut group_of: HashMap<Option<&str>, usize, rustc_hash::FxBuildHasher> =
            HashMap::default();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (index, message) in batch.iter().enumerate() {
            let next = groups.len();
            let group = *group_of.entry(message.group_id).or_insert(next);
            if group == next {
                groups.push(Vec::new());
            }
            groups[group].push(index);
        }
        let limit = self.options.max_concurrency.get();
        let mut pending = groups.into_iter();
        let mut in_flight = FuturesUnordered::new();
        for members in pending.by_ref().take(limit) {
            in_flight.push(self.run_group(batch, members, limits, Hold::RetryOnly));
        }
        let mut per_group = Vec::new();
        while let Some(done) = in_flight.next().await {
            per_group.push(done);
            if let Some(members) = pending.next() {
                in_flight.push(self.run_group(batch, members, limits, Hold::RetryOnly));
            }
        }
        let mut statuses = vec![RecordStatus::SkippedDeadline; batch.len()];
        for (index, status) in per_group.into_iter().flatten() {
            statuses[index] = status;
        }
        statuses
    }
}

impl<H: RecordHandler, C: Clock> BatchProcessor<H, C> {
    /// One message group, in order; after a failure that `hold` counts, the group's later
    /// records are skipped.
    async fn run_group(
        &self,
        batch: &[Message<'_>],
        members: Vec<usize>,
        limits: Limits<'_>,
        hold: Hold,
    ) -> Vec<(usize, RecordStatus)> {
        let mut out = Vec::with_capacity(members.len());
        let mut culprit = None;
        for index in members {
            let status = match culprit {
                Some(culprit) => RecordStatus::SkippedAfter { culprit },
                None => self.run_one(&batch[index], limits).await,
            };
            if culprit.is_none() && hold.holds(&status) {
                culprit = Some(index);
            }
            out.push((index, status));
        }
        out
    }
}

/// Which failures hold back the rest of their group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// Batch scope: any failure stops the rest (Lambda's FIFO contract).
    AnyFailure,
    /// Group scope: a RETRY holds its group back; a POISON does not. A poison message can never
    /// succeed and ends in the DLQ; the records behind it would then be processed after it is
    /// gone. Holding them meanwhile only makes them ride along on every receive, so their
    /// receive counts climb with the poison's and SQS moves them to the DLQ with it. Processing
    /// them now gives the order a DLQ hand-off would, without losing them. A record that gave up
    /// (`retries_exhausted`) holds its group for this receive all the same: its work may still
    /// be done if its move fails and it comes back, and then it must not come after the records
    /// behind it.
    RetryOnly,
}

impl Hold {
    fn holds(self, status: &RecordStatus) -> bool {
        match self {
            Self::AnyFailure => !status.is_ack(),
            Self::RetryOnly => {
                status.outcome() == Decision::Retry
                    || matches!(status, RecordStatus::Handled(v) if v.reason == GAVE_UP)
            }
        }
    }
}

/// One line per record that is not acknowledged, in the handler's span for it, and one summary
/// line.
fn log_report<H: RecordHandler>(
    handler: &H,
    batch: &[Message<'_>],
    report: &BatchReport,
    duration_ms: u64,
) {
    for (message, status) in batch.iter().zip(&report.statuses) {
        if status.is_ack() {
            continue;
        }
        let _span = handler.record_span(message).entered();
        let receive_count = message.receive_count.unwrap_or(0);
        match status {
            // Acknowledged records were skipped above; moves happen after this log (the record
            // was logged as POISON).
            RecordStatus::Moved(_) => {}
            RecordStatus::Handled(v) => warn!(
                message_id = message.message_id,
                key = v.key.as_deref(),
                outcome = v.outcome.as_str(),
                reason = v.reason,
                detail = v.detail.as_deref().unwrap_or(""),
                receive_count,
                first_receive_ms = message.first_receive_ms,
                group_id = message.group_id,
                correlation_id = v.correlation_id.as_deref(),
                retry_after_ms = v.retry_after_ms,
                "record not acknowledged"
            ),
            RecordStatus::SkippedDeadline => warn!(
                message_id = message.message_id,
                outcome = Decision::Retry.as_str(),
                reason = "deadline",
                receive_count,
                first_receive_ms = message.first_receive_ms,
                group_id = message.group_id,
                "record not started: too close to the invocation deadline"
            ),
            RecordStatus::SkippedStopping => warn!(
                message_id = message.message_id,
                outcome = Decision::Retry.as_str(),
                reason = SHUTTING_DOWN,
                receive_count,
                first_receive_ms = message.first_receive_ms,
                group_id = message.group_id,
                "record not started: the runtime is stopping"
            ),
            RecordStatus::SkippedAfter { culprit } => warn!(
                message_id = message.message_id,
                outcome = Decision::Retry.as_str(),
                reason = "after_failure",
                caused_by = batch[*culprit].message_id,
                receive_count,
                first_receive_ms = message.first_receive_ms,
                group_id = message.group_id,
                "record not started: an earlier record failed and FIFO order must hold"
            ),
        }
    }
    let counts = report.counts();
    info!(
        queue_kind = report.kind.as_str(),
        records = batch.len(),
        ack = counts.ack,
        retry = counts.retry,
        poison = counts.poison,
        skipped = counts.skipped,
        reasons = %report.reasons_text(),
        duration_ms,
        "batch processed"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_kit::{Env, ManualClock};
    use std::num::NonZeroUsize;
    use std::sync::Mutex;

    /// The options users build with (the fields are not theirs to write): each `with_` sets
    /// what it names and nothing else.
    #[test]
    fn options_are_built_as_named() {
        let base = BatchOptions::default();
        let two = NonZeroUsize::new(2).expect("two");
        let built = base
            .with_max_concurrency(two)
            .with_fifo_scope(FifoScope::Group)
            .with_deadline_margin_ms(7)
            .with_abandoned_hold_ms(11)
            .with_give_up_at_receive(Some(4))
            .with_fail_on_entire_batch_failure(true);
        assert_eq!(
            built,
            BatchOptions {
                max_concurrency: two,
                fifo_scope: FifoScope::Group,
                deadline_margin_ms: 7,
                abandoned_hold_ms: 11,
                give_up_at_receive: Some(4),
                fail_on_entire_batch_failure: true,
            }
        );
        // One at a time, the rest untouched.
        assert_eq!(
            base.with_fifo_scope(FifoScope::Group),
            BatchOptions {
                fifo_scope: FifoScope::Group,
                ..base
            }
        );
        assert_eq!(
            base.with_deadline_margin_ms(7),
            BatchOptions {
                deadline_margin_ms: 7,
                ..base
            }
        );
        assert_eq!(
            base.with_abandoned_hold_ms(11),
            BatchOptions {
                abandoned_hold_ms: 11,
                ..base
            }
        );
        assert_eq!(Invocation::new(42).deadline_ms, 42);
    }

    /// Decides by body: "ack", "retry", "poison", "panic", "slow:<ms>" (advances the clock, acks),
    /// "sleep:<ms>" (waits on Tokio's timer, acks).
    struct Scripted {
        clock: ManualClock,
        started: Mutex<Vec<String>>,
        /// When each record started, on Tokio's clock (paused in the tests that read it).
        started_at: Mutex<Vec<(String, std::time::Duration)>>,
        epoch: tokio::time::Instant,
    }

    impl RecordHandler for Scripted {
        async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
            self.started
                .lock()
                .expect("lock")
                .push(message.message_id.to_owned());
            self.started_at
                .lock()
                .expect("lock")
                .push((message.message_id.to_owned(), self.epoch.elapsed()));
            if let Some(ms) = message.body.strip_prefix("sleep:") {
                let ms = ms.parse().unwrap_or(0);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                return Verdict::ack("ok");
            }
            match message.body {
                "ack" => Verdict::ack("ok"),
                "retry" => Verdict::retry("transient"),
                "poison" => Verdict::poison("bad"),
                "panic" => panic!("scripted panic"),
                "hang" => std::future::pending().await,
                slow => {
                    let ms = slow.trim_start_matches("slow:").parse().unwrap_or(0);
                    self.clock.advance_ms(ms);
                    Verdict::ack("ok")
                }
            }
        }

        fn record_key(&self, message: &Message<'_>) -> Option<String> {
            (message.message_id != "unkeyed").then(|| format!("k-{}", message.message_id))
        }
    }

    fn processor(scope: FifoScope, clock: &ManualClock) -> BatchProcessor<Scripted, ManualClock> {
        let handler = Scripted {
            clock: clock.clone(),
            started: Mutex::default(),
            started_at: Mutex::default(),
            epoch: tokio::time::Instant::now(),
        };
        let options = BatchOptions {
            fifo_scope: scope,
            deadline_margin_ms: 1_000,
            ..BatchOptions::default()
        };
        BatchProcessor::new(handler, clock.clone(), options)
    }

    fn batch<'a>(specs: &'a [(&'a str, Option<&'a str>, &'a str)]) -> Vec<Message<'a>> {
        specs
            .iter()
            .map(|(id, group, body)| Message {
                group_id: *group,
                ..Message::new(id, body)
            })
            .collect()
    }

    async fn run(
        scope: FifoScope,
        kind: QueueKind,
        specs: &[(&str, Option<&str>, &str)],
    ) -> (Vec<String>, Vec<String>) {
        let clock = ManualClock::at(0);
        let p = processor(scope, &clock);
        let messages = batch(specs);
        let report = p.process(&messages, kind, 60_000).await;
        let failed = report.failed_ids(&messages).map(str::to_owned).collect();
        let started = p.handler().started.lock().expect("lock").clone();
        (failed, started)
    }

    #[tokio::test]
    async fn standard_reports_exactly_the_failed_records_in_order() {
        let specs = [
            ("a", None, "ack"),
            ("b", None, "retry"),
            ("c", None, "ack"),
            ("d", None, "poison"),
        ];
        let (failed, started) = run(FifoScope::Batch, QueueKind::Standard, &specs).await;
        assert_eq!(failed, ["b", "d"]);
        assert_eq!(started.len(), 4);
    }

    #[tokio::test]
    async fn a_panic_is_retry_for_that_record_only() {
        let specs = [("a", None, "panic"), ("b", None, "ack")];
        let clock = ManualClock::at(0);
        let p = processor(FifoScope::Batch, &clock);
        let messages = batch(&specs);
        let report = p.process(&messages, QueueKind::Standard, 60_000).await;
        assert_eq!(report.failed_ids(&messages).collect::<Vec<_>>(), ["a"]);
        assert!(matches!(&report.statuses[0], RecordStatus::Handled(v) if v.reason == "panic"));
        assert!(report.statuses[1].is_ack());
    }

    #[tokio::test(start_paused = true)]
    async fn the_verdicts_the_processor_makes_name_the_handlers_key() {
        // GIVEN a record that panics, one that never finishes and one the handler names no key
        // for, WHEN the processor decides them itself, THEN each names the handler's key, as
        // its DLQ copy will, and the one without a key names none.
        let specs = [
            ("a", None, "panic"),
            ("b", None, "hang"),
            ("unkeyed", None, "panic"),
        ];
        let clock = ManualClock::at(0);
        let p = processor(FifoScope::Batch, &clock);
        let messages = batch(&specs);
        let report = p.process(&messages, QueueKind::Standard, 5_000).await;
        let keys: Vec<_> = report
            .statuses
            .iter()
            .map(|status| match status {
                RecordStatus::Handled(v) => (v.reason, v.key.clone()),
                other => panic!("not handled: {other:?}"),
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("panic", Some("k-a".to_owned())),
                (ABANDONED, Some("k-b".to_owned())),
                ("panic", None)
            ]
        );
    }

    #[tokio::test]
    async fn fifo_batch_scope_stops_at_the_first_failure() {
        let specs = [
            ("a", Some("g1"), "ack"),
            ("b", Some("g2"), "retry"),
            ("c", Some("g1"), "ack"),
            ("d", Some("g2"), "ack"),
        ];
        let (failed, started) = run(FifoScope::Batch, QueueKind::Fifo, &specs).await;
        assert_eq!(failed, ["b", "c", "d"]);
        assert_eq!(started, ["a", "b"]);
    }

    #[tokio::test]
    async fn fifo_group_scope_holds_back_only_the_failed_group() {
        let specs = [
            ("a", Some("g1"), "ack"),
            ("b", Some("g2"), "retry"),
            ("c", Some("g1"), "ack"),
            ("d", Some("g2"), "ack"),
            ("e", Some("g3"), "ack"),
        ];
        let (failed, started) = run(FifoScope::Group, QueueKind::Fifo, &specs).await;
        assert_eq!(failed, ["b", "d"]);
        assert!(!started.contains(&"d".to_owned()));
        assert_eq!(started.len(), 4);
    }

    #[tokio::test]
    async fn in_group_scope_a_poison_record_does_not_hold_its_group() {
        let specs = [
            ("a", Some("g1"), "poison"),
            ("b", Some("g1"), "ack"),
            ("c", Some("g1"), "retry"),
            ("d", Some("g1"), "ack"),
        ];
        let (failed, started) = run(FifoScope::Group, QueueKind::Fifo, &specs).await;
        assert_eq!(failed, ["a", "c", "d"]);
        assert_eq!(started, ["a", "b", "c"]);
    }

    /// A RETRY at the last receive before the queue's redrive gives up: POISON
    /// `retries_exhausted` with its reason. In group scope it still holds its group for this
    /// receive: its move to the DLQ may fail, and then it would come back and be charged after
    /// the records behind it (the simulator's `worker` profile found that). Once it is moved,
    /// the group goes on at the next receive. A RETRY before that receive holds it as ever.
    #[tokio::test]
    async fn a_retry_at_its_last_receive_gives_up_and_holds_its_group_for_that_receive() {
        let clock = ManualClock::at(0);
        let mut p = processor(FifoScope::Group, &clock);
        p.options.give_up_at_receive = Some(199);
        let specs = [
            ("a", Some("g1"), "retry", 199),
            ("b", Some("g1"), "ack", 199),
            ("c", Some("g2"), "retry", 198),
            ("d", Some("g2"), "ack", 198),
        ];
        let messages: Vec<Message<'_>> = specs
            .iter()
            .map(|(id, group, body, receives)| Message {
                group_id: *group,
                receive_count: Some(*receives),
                ..Message::new(id, body)
            })
            .collect();
        let report = p.process(&messages, QueueKind::Fifo, 60_000).await;
        let failed: Vec<_> = report.failed_ids(&messages).collect();
        assert_eq!(failed, ["a", "b", "c", "d"]);
        match &report.statuses[0] {
            RecordStatus::Handled(v) => {
                assert_eq!(
                    (v.outcome, v.reason),
                    (Decision::Poison, "retries_exhausted")
                );
                assert!(
                    v.detail
                        .as_deref()
                        .is_some_and(|d| d.starts_with("transient at receive 199"))
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            report.statuses[1],
            RecordStatus::SkippedAfter { culprit: 0 },
            "b ran behind the given-up record"
        );
        assert_eq!(report.statuses[2].outcome(), Decision::Retry);
        assert!(matches!(
            report.statuses[3],
            RecordStatus::SkippedAfter { culprit: 2 }
        ));
    }

    #[tokio::test]
    async fn skipped_records_name_the_record_that_held_them_back() {
        let clock = ManualClock::at(0);
        let p = processor(FifoScope::Batch, &clock);
        let specs = [("a", Some("g"), "poison"), ("b", Some("h"), "ack")];
        let messages = batch(&specs);
        let report = p.process(&messages, QueueKind::Fifo, 60_000).await;
        assert_eq!(
            report.statuses[1],
            RecordStatus::SkippedAfter { culprit: 0 }
        );
    }

    #[tokio::test]
    async fn no_record_starts_inside_the_deadline_margin() {
        // GIVEN a deadline 5 s away and a margin of 1 s, WHEN the second record takes 4.5 s,
        // THEN the third is not started and is reported.
        let specs = [
            ("a", None, "ack"),
            ("b", None, "slow:4500"),
            ("c", None, "ack"),
        ];
        let clock = ManualClock::at(0);
        let mut p = processor(FifoScope::Batch, &clock);
        p.options.max_concurrency = NonZeroUsize::MIN;
        let messages = batch(&specs);
        let report = p.process(&messages, QueueKind::Standard, 5_000).await;
        assert_eq!(report.statuses[2], RecordStatus::SkippedDeadline);
        assert_eq!(report.failed_ids(&messages).collect::<Vec<_>>(), ["c"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_still_running_near_the_deadline_is_abandoned_and_reported() {
        // GIVEN a deadline 5 s away and a margin of 1 s, WHEN a record never finishes, THEN it
        // is abandoned with 0.5 s left and reported; the records around it are unaffected.
        let specs = [("a", None, "ack"), ("b", None, "hang"), ("c", None, "ack")];
        let clock = ManualClock::at(0);
        let p = processor(FifoScope::Batch, &clock);
        let messages = batch(&specs);
        let started = tokio::time::Instant::now();
        let report = p.process(&messages, QueueKind::Standard, 5_000).await;
        assert_eq!(started.elapsed(), std::time::Duration::from_millis(4_500));
        assert_eq!(report.failed_ids(&messages).collect::<Vec<_>>(), ["b"]);
        match &report.statuses[1] {
            RecordStatus::Handled(v) => {
                assert_eq!((v.outcome, v.reason), (Decision::Retry, "abandoned"));
                // Its claim may live until the deadline plus the lease margin: not due before.
                assert_eq!(v.retry_after_ms, Some(5_000 + p.options.abandoned_hold_ms));
            }
            other => panic!("expected an abandoned record, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn abandon_running_cuts_the_running_records_at_once_and_starts_no_other() {
        // GIVEN one record at a time, the first hanging at the receive that gives up, WHEN the
        // runtime stops waiting a second in, THEN that record is RETRY `abandoned` at once (not
        // `retries_exhausted`: the stop cut it) and the next one never starts.
        let specs = [("a", None, "hang"), ("b", None, "ack")];
        let clock = ManualClock::at(0);
        let mut p = processor(FifoScope::Batch, &clock);
        p.options.max_concurrency = NonZeroUsize::MIN;
        let messages: Vec<Message<'_>> = batch(&specs)
            .into_iter()
            .map(|m| Message {
                receive_count: Some(3),
                ..m
            })
            .collect();
        let started = tokio::time::Instant::now();
        let (report, ()) = tokio::join!(
            p.process_until(&messages, QueueKind::Standard, 60_000, Some(3)),
            async {
                tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
                p.abandon_running();
            }
        );
        assert_eq!(started.elapsed(), std::time::Duration::from_millis(1_000));
        match &report.statuses[0] {
            RecordStatus::Handled(v) => {
                assert_eq!((v.outcome, v.reason), (Decision::Retry, ABANDONED));
            }
            other => panic!("expected an abandoned record, got {other:?}"),
        }
        assert_eq!(report.statuses[1], RecordStatus::SkippedStopping);
        assert_eq!(*p.handler().started.lock().expect("lock"), ["a"]);
    }

    #[tokio::test]
    async fn fifo_deadline_skip_reports_everything_after_it() {
        let specs = [
            ("a", Some("g"), "slow:4500"),
            ("b", Some("g"), "ack"),
            ("c", Some("h"), "ack"),
        ];
        let clock = ManualClock::at(0);
        let p = processor(FifoScope::Batch, &clock);
        let messages = batch(&specs);
        let report = p.process(&messages, QueueKind::Fifo, 5_000).await;
        assert_eq!(report.failed_ids(&messages).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(report.statuses[1], RecordStatus::SkippedDeadline);
        assert_eq!(
            report.statuses[2],
            RecordStatus::SkippedAfter { culprit: 1 }
        );
    }

    #[tokio::test]
    async fn the_report_counts_reasons_in_order_of_appearance() {
        let clock = ManualClock::at(0);
        let p = processor(FifoScope::Batch, &clock);
        let specs = [("a", None, "ack"), ("b", None, "retry"), ("c", None, "ack")];
        let messages = batch(&specs);
        let report = p.process(&messages, QueueKind::Standard, 60_000).await;
        assert_eq!(report.reasons(), [("ok", 2), ("transient", 1)]);
        assert_eq!(report.reasons_text(), "ok=2 transient=1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_slot_is_refilled_at_once_whatever_finishes_first() {
        // GIVEN two slots and a first record that takes 3 s, WHEN the second finishes at 0.5 s,
        // THEN the third starts at 0.5 s, not when the first finishes; the response keeps batch
        // order.
        let specs = [
            ("a", None, "sleep:3000"),
            ("b", None, "sleep:500"),
            ("c", None, "retry"),
            ("d", None, "sleep:100"),
        ];
        let clock = ManualClock::at(0);
        let mut p = processor(FifoScope::Batch, &clock);
        p.options.max_concurrency = NonZeroUsize::new(2).expect("two");
        let messages = batch(&specs);
        let report = p.process(&messages, QueueKind::Standard, 60_000).await;
        let started_at = p.handler().started_at.lock().expect("lock").clone();
        let at = |id: &str| {
            started_at
                .iter()
                .find(|(m, _)| m == id)
                .map(|(_, t)| t.as_millis())
        };
        assert_eq!((at("c"), at("d")), (Some(500), Some(500)), "{started_at:?}");
        assert_eq!(report.failed_ids(&messages).collect::<Vec<_>>(), ["c"]);
        assert!(report.statuses[0].is_ack() && report.statuses[3].is_ack());
    }

    #[tokio::test]
    async fn an_empty_batch_reports_nothing() {
        let (failed, started) = run(FifoScope::Batch, QueueKind::Standard, &[]).await;
        assert!(failed.is_empty() && started.is_empty());
    }
    /// What the logs and metrics call each outcome.
    #[test]
    fn outcomes_are_named_for_logs() {
        let names: Vec<&str> = [Decision::Ack, Decision::Retry, Decision::Poison]
            .into_iter()
            .map(Decision::as_str)
            .collect();
        assert_eq!(names, ["ack", "retry", "poison"]);
    }

    /// `SQS_BATCH_FIFO_SCOPE` in any case, and the give-up one receive before the stated redrive.
    #[test]
    fn options_are_read_from_the_environment() {
        let options = |vars: &'static [(&'static str, &'static str)]| {
            BatchOptions::from_env(&Env::new(move |name| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            }))
        };
        let defaults = options(&[]).expect("defaults");
        assert_eq!(defaults.fifo_scope, FifoScope::Batch);
        assert_eq!(defaults.give_up_at_receive, None);
        assert_eq!(defaults.deadline_margin_ms, 5_000);
        assert_eq!(defaults.max_concurrency.get(), 16);
        for (scope, expected) in [
            ("group", FifoScope::Group),
            ("GROUP", FifoScope::Group),
            ("Batch", FifoScope::Batch),
        ] {
            let vars: &'static [(&str, &str)] =
                Box::leak(Box::new([("SQS_BATCH_FIFO_SCOPE", scope)]));
            assert_eq!(options(vars).expect("a scope").fifo_scope, expected);
        }
        assert!(options(&[("SQS_BATCH_FIFO_SCOPE", "grouped")]).is_err());
        for (count, give_up) in [("5", Some(4)), ("2", Some(1)), ("1", None), ("0", None)] {
            let vars: &'static [(&str, &str)] =
                Box::leak(Box::new([("SQS_BATCH_MAX_RECEIVE_COUNT", count)]));
            assert_eq!(options(vars).expect("a count").give_up_at_receive, give_up);
        }
    }

    /// Each status counts once, in its column.
    #[test]
    fn a_report_counts_each_status_once() {
        let report = BatchReport {
            kind: QueueKind::Standard,
            statuses: vec![
                RecordStatus::Handled(Verdict::ack("a")),
                RecordStatus::Handled(Verdict::ack("a")),
                RecordStatus::Handled(Verdict::retry("r")),
                RecordStatus::Handled(Verdict::retry("r")),
                RecordStatus::Handled(Verdict::poison("p")),
                RecordStatus::Handled(Verdict::poison("p")),
                RecordStatus::Moved(Verdict::poison("p")),
                RecordStatus::Moved(Verdict::poison("p")),
                RecordStatus::SkippedDeadline,
            ],
        };
        assert_eq!(
            report.counts(),
            Counts {
                ack: 2,
                retry: 2,
                poison: 4,
                moved: 2,
                skipped: 1,
            }
        );
    }

    /// The processor keeps the options it was given.
    #[test]
    fn the_options_given_are_the_options_used() {
        let clock = ManualClock::at(0);
        let processor = processor(FifoScope::Group, &clock);
        assert_eq!(processor.options().fifo_scope, FifoScope::Group);
        assert_eq!(processor.options().deadline_margin_ms, 1_000);
    }

    /// A RETRY given up becomes POISON with no retry time of its own (it leaves the queue).
    #[test]
    fn a_retry_given_up_keeps_no_retry_time() {
        let verdict = Verdict::retry("busy").with_retry_after_ms(5_000);
        let given_up = give_up_if_exhausted(verdict.clone(), Some(4), Some(4));
        assert_eq!(given_up.outcome, Decision::Poison);
        assert_eq!(given_up.reason, "retries_exhausted");
        assert_eq!(given_up.retry_after_ms, None);
        assert_eq!(
            give_up_if_exhausted(verdict.clone(), Some(3), Some(4)),
            verdict
        );
    }

    /// A record starts with exactly the deadline margin left, and not with less.
    #[tokio::test]
    async fn a_record_starts_with_exactly_the_margin_left() {
        let clock = ManualClock::at(10_000);
        let processor = processor(FifoScope::Batch, &clock);
        let batch = batch(&[("m1", None, "ack")]);
        let report = processor.process(&batch, QueueKind::Standard, 11_000).await;
        assert!(matches!(report.statuses[0], RecordStatus::Handled(_)));
        let report = processor.process(&batch, QueueKind::Standard, 10_999).await;
        assert_eq!(report.statuses[0], RecordStatus::SkippedDeadline);
    }

    /// What the processor logs while `run` runs, as text lines (the JSON layer is the
    /// function's; the fields are the same).
    async fn logs_of<F: std::future::Future<Output = ()>>(run: F) -> Vec<String> {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("lock").extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || writer.clone())
            .finish();
        // The tests run on a current-thread runtime, so the thread's default sees every event.
        let _default = tracing::subscriber::set_default(subscriber);
        run.await;
        let text = String::from_utf8_lossy(&lines.0.lock().expect("lock")).into_owned();
        text.lines().map(str::to_owned).collect()
    }

    /// Every record not acknowledged is logged once, with its outcome and reason; an
    /// acknowledged one is not (the log is an operator's only trace of a retry).
    #[tokio::test]
    async fn each_record_not_acknowledged_is_logged_once_with_its_reason() {
        let clock = ManualClock::at(0);
        let processor = processor(FifoScope::Batch, &clock);
        let batch = batch(&[
            ("m-ok", None, "ack"),
            ("m-r", None, "retry"),
            ("m-p", None, "poison"),
        ]);
        let lines = logs_of(async {
            processor.process(&batch, QueueKind::Standard, 60_000).await;
        })
        .await;
        let not_acked: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("record not acknowledged"))
            .collect();
        assert_eq!(not_acked.len(), 2, "{lines:#?}");
        assert!(not_acked[0].contains("m-r") && not_acked[0].contains("reason=\"transient\""));
        assert!(not_acked[1].contains("m-p") && not_acked[1].contains("outcome=\"poison\""));
        assert!(!lines.iter().any(|l| l.contains("m-ok")), "{lines:#?}");
    }

    /// A batch that starts with less than the margin left says why nothing runs, once; with
    /// exactly the margin left, or with nothing to run, it does not.
    #[tokio::test]
    async fn a_batch_started_inside_the_margin_says_so() {
        const SAYS: &str = "the invocation starts inside the deadline margin";
        let clock = ManualClock::at(10_000);
        let processor = processor(FifoScope::Batch, &clock);
        let batch = batch(&[("m1", None, "ack")]);
        for (deadline_ms, records, expected) in [
            (10_999, &batch[..], 1),
            (5_000, &batch[..], 1),
            (11_000, &batch[..], 0),
            (60_000, &batch[..], 0),
            (10_999, &batch[..0], 0),
        ] {
            let lines = logs_of(async {
                processor
                    .process(records, QueueKind::Standard, deadline_ms)
                    .await;
            })
            .await;
            let said = lines.iter().filter(|l| l.contains(SAYS)).count();
            assert_eq!(
                said,
                expected,
                "deadline {deadline_ms}, {} records: {lines:#?}",
                records.len()
            );
        }
    }
}
