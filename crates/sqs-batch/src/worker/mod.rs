//! The same record handler outside Lambda (feature `worker`): a long-polling consumer for ECS,
//! EKS or EC2, with the processor, verdicts, FIFO scopes, visibility backoff and DLQ moves it has
//! under Lambda, and what Lambda's event source mapping did for it:
//!
//! - **Long polling**: `ReceiveMessage` with `WaitTimeSeconds` 20, up to 10 messages, every
//!   attribute, and `VisibilityTimeout` the heartbeat's extension (the messages are hidden for it
//!   from the receive on, whatever the queue's own timeout); several receives in flight
//!   ([`WorkerOptions::receives_in_flight`]). A failed
//!   receive is retried with jittered backoff, never a crash loop.
//! - **Delete after success**: the acknowledged and moved records of a batch are deleted with
//!   `DeleteMessageBatch`; every `Failed` entry is retried, then logged (the message comes back,
//!   and idempotency answers it as a duplicate).
//! - **Heartbeat**: while a batch's records run its messages' visibility is extended every third
//!   of the extension; never past SQS's 12 hours from the receive, which is logged as an error,
//!   not clamped. It stops before the DLQ moves and the visibility backoff, so a reported
//!   record's backoff is the last visibility it gets. A worker that dies stops extending, so its
//!   messages return within one extension.
//! - **Graceful shutdown**: once `shutdown` resolves (SIGTERM or SIGINT: `shutdown_signal`, feature `worker`) no
//!   receive starts; a receive in flight ends (at most `WaitTimeSeconds`) and what it brought is
//!   released (visibility 0); records already started finish, records not started are released,
//!   within [`WorkerOptions::drain_timeout_ms`]. At its end the records still running are
//!   abandoned ([`BatchProcessor::abandon_running`]) and released; the rest of their batch is
//!   settled as usual (the finished deleted, POISON moved), so nothing that finished comes back.
//! - **Scaling on backlog**: every minute (or [`WorkerOptions::metrics_interval_ms`]) the worker
//!   writes an EMF document with the queue's visible messages and its share of a consumer (1 a
//!   minute: the interval over 60 s), so that CloudWatch can divide the first by the sum of the
//!   second (the backlog per consumer, [`backlog_per_consumer`]) for a target-tracking policy.
//! - **Hooks** ([`WorkerHooks`], [`Worker::with_hooks`]): the owner hears each batch before it
//!   runs and once it is settled (what a Lambda function does per invocation: per-invocation
//!   limits, metrics) and gets the metrics documents to write (stdout by default).
//!
//! The platform's stop timeout must be longer than `WaitTimeSeconds` plus the drain timeout
//! ([`stop_timeout_s`]): the docs give the ECS and Kubernetes settings.
//!
//! # Example
//!
//! The platform settings the worker needs, from its options, and the seeds' scaling figures:
//!
//! ```
//! use sqs_batch::worker::{WorkerOptions, backlog_per_consumer, desired_consumers, stop_timeout_s};
//!
//! // A 20 s receive in flight, a 25 s drain and 5 s for the last deletes: ECS `stopTimeout`
//! // (or Kubernetes `terminationGracePeriodSeconds`) must be at least 50.
//! let options = WorkerOptions::default().with_drain_timeout_ms(25_000);
//! assert_eq!(stop_timeout_s(&options), 50);
//! // 1,500 visible messages, 0.1 s each, 10 s acceptable: 15 consumers, 100 messages each.
//! assert_eq!(desired_consumers(1_500, 0.1, 10.0), 15);
//! assert_eq!(backlog_per_consumer(1_500, 15), 100.0);
//! ```
//!
//! Running one (feature `worker`): [`Worker::new`] takes the record handler, a clock, the batch
//! options, the queue's and the visibility's SQS adapters and these options.

mod options;
mod port;
mod scaling;
#[cfg(feature = "worker")]
pub mod sqs;

pub use options::{VARIABLES, WorkerOptions, stop_timeout_s};
use port::Mapped;
pub use port::{Delete, QueueError, QueuePort, WorkerHooks};
use scaling::queue_name;
pub use scaling::{backlog_document, backlog_per_consumer, desired_consumers};

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use futures_util::future::join_all;
use lambda_kit::Clock;
use tokio::sync::Notify;
use tracing::{error, info, warn};

use crate::backoff::BackoffPolicy;
use crate::batch::Backoff;
use crate::dead_letter::{DeadLetterPort, DeadLetters};
use crate::edge::{Batch, Message};
use crate::processor::{ABANDONED, BatchProcessor, RecordHandler, RecordStatus};
use crate::recovery::{Recovery, RecoveryPolicy};
use crate::visibility::{self, Change, VisibilityPort};

/// SQS keeps a received message invisible for at most 12 hours from the receive.
pub const VISIBILITY_CAP_MS: u64 = 12 * 3_600_000;

/// The reason a record not started before shutdown is reported with (then released). Defined
/// beside the status it names ([`crate::processor::RecordStatus::SkippedStopping`]), so the
/// processor never reads from the worker above it.
pub use crate::processor::SHUTTING_DOWN;

/// What a worker did, for its last log line and for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Batches processed.
    pub batches: u64,
    /// Messages deleted after their work succeeded (or they were moved).
    pub deleted: u64,
    /// Messages released (visibility 0) at shutdown: received, not finished.
    pub released: u64,
    /// Deletes that failed every attempt (the message comes back).
    pub delete_failures: u64,
    /// Receives that failed.
    pub receive_failures: u64,
}

/// The long-polling consumer: a [`BatchProcessor`] over a queue.
pub struct Worker<H, C, Q, V, D> {
    processor: BatchProcessor<H, C>,
    queue: Q,
    visibility: V,
    backoff: Option<BackoffPolicy>,
    recovery: Option<Arc<Recovery>>,
    dead_letters: Option<DeadLetters<D>>,
    options: WorkerOptions,
    namespace: String,
    hooks: Box<dyn WorkerHooks<H>>,
}

impl<H, C, Q, V, D> std::fmt::Debug for Worker<H, C, Q, V, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Counters shared by the lanes.
#[derive(Default)]
struct Counters {
    batches: std::sync::atomic::AtomicU64,
    deleted: std::sync::atomic::AtomicU64,
    released: std::sync::atomic::AtomicU64,
    delete_failures: std::sync::atomic::AtomicU64,
    receive_failures: std::sync::atomic::AtomicU64,
}

/// The stop, as the lanes see it.
struct Stop {
    stopping: Notify,
    /// Set at the drain's end, before the running records are abandoned.
    drain_is_over: AtomicBool,
}

impl<H, C, Q, V, D> Worker<H, C, Q, V, D>
where
    H: RecordHandler,
    C: Clock,
    Q: QueuePort,
    V: VisibilityPort + Clone,
    D: DeadLetterPort,
{
    /// A worker running `handler` on the records of `queue` as a [`BatchProcessor`] with
    /// `batch_options` would, its heartbeats and releases through `visibility`. With
    /// [`Worker::with_backoff`], reported records get their retry timing as under Lambda; with
    /// [`Worker::with_dead_letters`], POISON is moved at once.
    pub fn new(
        handler: H,
        clock: C,
        batch_options: crate::BatchOptions,
        queue: Q,
        visibility: V,
        options: WorkerOptions,
    ) -> Self {
        Self {
            processor: BatchProcessor::new(handler, clock, batch_options),
            queue,
            visibility,
            backoff: None,
            recovery: None,
            dead_letters: None,
            options,
            namespace: "SqsWorker".to_owned(),
            hooks: Box::new(()),
        }
    }

    /// What the worker tells its owner ([`WorkerHooks`]).
    pub fn with_hooks(mut self, hooks: impl WorkerHooks<H> + 'static) -> Self {
        self.hooks = Box::new(hooks);
        self
    }

    /// The options it runs with.
    pub fn options(&self) -> &WorkerOptions {
        &self.options
    }

    /// Reported records get their visibility from `policy`.
    pub fn with_backoff(mut self, policy: BackoffPolicy) -> Self {
        self.backoff = Some(policy);
        self
    }

    /// With the backoff, while a dependency is down one record probes and the others are parked,
    /// woken when a record finds it up ([`crate::recovery`]); meanwhile the worker receives only
    /// its probe, one record per probe interval, and resumes at the first success.
    pub fn with_recovery(mut self, policy: RecoveryPolicy) -> Self {
        self.recovery = Some(Arc::new(Recovery::new(policy)));
        self
    }

    /// POISON records are moved to their queue's DLQ at once.
    pub fn with_dead_letters(mut self, dead_letters: DeadLetters<D>) -> Self {
        self.dead_letters = Some(dead_letters);
        self
    }

    /// The backlog document's CloudWatch namespace (`SqsWorker`).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The record handler.
    pub fn handler(&self) -> &H {
        self.processor.handler()
    }

    /// The same worker over `wrap(handler)` (an observer, a gate around the handler), its hooks
    /// kept: they are given the wrapped handler through `inner`.
    pub fn map_handler<H2: RecordHandler + 'static>(
        self,
        wrap: impl FnOnce(H) -> H2,
        inner: fn(&H2) -> &H,
    ) -> Worker<H2, C, Q, V, D>
    where
        H: 'static,
    {
        let (handler, clock, batch_options) = self.processor.into_parts();
        Worker {
            processor: BatchProcessor::new(wrap(handler), clock, batch_options),
            queue: self.queue,
            visibility: self.visibility,
            backoff: self.backoff,
            recovery: self.recovery,
            dead_letters: self.dead_letters,
            options: self.options,
            namespace: self.namespace,
            hooks: Box::new(Mapped {
                hooks: self.hooks,
                inner,
            }),
        }
    }

    /// Consumes the queue until `shutdown` resolves, then drains (see the module) and returns.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) -> WorkerReport {
        let counters = Counters::default();
        let stop = Stop {
            stopping: Notify::new(),
            drain_is_over: AtomicBool::new(false),
        };
        let lanes =
            join_all((0..self.options.receives_in_flight).map(|_| self.lane(&stop, &counters)));
        let metrics = self.metrics(&stop);
        let stopper = async {
            shutdown.await;
            info!("shutting down: no more receives; draining what started");
            self.processor.stop_starting();
            stop.stopping.notify_waiters();
            tokio::time::sleep(Duration::from_millis(self.options.drain_timeout_ms)).await;
            stop.drain_is_over.store(true, Ordering::SeqCst);
            self.processor.abandon_running();
        };
        // Every select here is `biased` (its branches polled in the order written, not at random),
        // so that a seeded runtime replays the worker event for event (the simulator's `worker`
        // profile); no branch can starve another, since each returns or waits.
        tokio::select! {
            biased;
            _ = async { tokio::join!(lanes, metrics) } => {}
            // The stopper never ends first: its last step is the drain's end, at which the
            // running records are abandoned and the lanes settle their batches and return.
            () = async { stopper.await; std::future::pending::<()>().await } => {}
        }
        let report = WorkerReport {
            batches: counters.batches.load(Ordering::SeqCst),
            deleted: counters.deleted.load(Ordering::SeqCst),
            released: counters.released.load(Ordering::SeqCst),
            delete_failures: counters.delete_failures.load(Ordering::SeqCst),
            receive_failures: counters.receive_failures.load(Ordering::SeqCst),
        };
        info!(?report, "worker stopped");
        report
    }

    fn stopping(&self) -> bool {
        self.processor.is_stopping()
    }

    /// Resolves once the worker is stopping (at once if it already is): the waiter is registered
    /// before the flag is read, so a stop between the two is never missed (a missed one would
    /// keep a backoff or the metrics' interval, up to a minute, past the stop timeout).
    async fn stopped(&self, stop: &Stop) {
        let notified = stop.stopping.notified();
        if self.stopping() {
            return;
        }
        notified.await;
    }

    /// One receive after another until the stop.
    async fn lane(&self, stop: &Stop, counters: &Counters) {
        let mut failures: u32 = 0;
        while !self.stopping() {
            // While a dependency is down, only the probe is received: one record per interval
            // for the container, the rest left in the queue on their schedule.
            let mut max_messages = self.options.max_messages;
            if let Some(recovery) = &self.recovery
                && recovery.is_down()
            {
                if let Err(wait_ms) = recovery.receive_slot(self.processor.clock().now_ms()) {
                    tokio::select! {
                        biased;
                        () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
                        () = self.stopped(stop) => {}
                    }
                    continue;
                }
                max_messages = 1;
            }
            let received = self
                .queue
                .receive(
                    max_messages,
                    self.options.wait_time_seconds,
                    self.receive_visibility_s(),
                )
                .await;
            let messages = match received {
                Ok(messages) => {
                    failures = 0;
                    messages
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    counters.receive_failures.fetch_add(1, Ordering::SeqCst);
                    let wait = receive_backoff(failures, fastrand::u64(..));
                    warn!(error = %lambda_kit::error_chain(&e), retry_in_ms = wait.as_millis() as u64, "receive failed");
                    tokio::select! {
                        biased;
                        () = tokio::time::sleep(wait) => {}
                        () = self.stopped(stop) => {}
                    }
                    continue;
                }
            };
            if messages.is_empty() {
                continue;
            }
            if self.stopping() {
                // Received after the stop: nothing of it starts.
                self.release_all(messages, counters).await;
                break;
            }
            self.batch(messages, stop, counters).await;
        }
    }

    /// The visibility a receive gives its messages: the extension, so they are hidden from the
    /// start for as long as each heartbeat hides them, and the first heartbeat (a third of it
    /// later) comes before the queue's own visibility timeout could end.
    fn receive_visibility_s(&self) -> u32 {
        u32::try_from(
            self.options
                .visibility_extension_s
                .min(VISIBILITY_CAP_MS / 1_000),
        )
        .unwrap_or(u32::MAX)
    }

    /// One batch: processed with a heartbeat, then its finished records deleted.
    async fn batch(&self, messages: Vec<SqsMessage>, stop: &Stop, counters: &Counters) {
        counters.batches.fetch_add(1, Ordering::SeqCst);
        let received_at = tokio::time::Instant::now();
        let mut event = SqsEvent::default();
        event.records = messages;
        for record in &mut event.records {
            record.event_source_arn = Some(self.queue.arn().to_owned());
        }
        let batch = match Batch::from_event(&event) {
            Ok(batch) => batch,
            Err(e) => {
                // SQS gives every message an id; nothing to process, nothing deleted.
                error!(error = %e, "a received batch cannot be processed");
                return;
            }
        };
        let deadline_ms = self
            .processor
            .clock()
            .now_ms()
            .saturating_add(self.options.batch_timeout_ms);
        let backoff = self.backoff.map(|policy| Backoff {
            recovery: self.recovery.clone(),
            ..Backoff::new(self.visibility.clone(), policy)
        });
        let dead_letters = self.dead_letters.as_ref();
        self.hooks.batch_starting(self.processor.handler(), &batch);
        let records = async {
            let learned =
                crate::batch::learn(&self.processor, &batch, deadline_ms, dead_letters).await;
            let report = crate::batch::run(
                &self.processor,
                &batch,
                deadline_ms.into(),
                &learned,
                self.recovery.as_deref(),
            )
            .await;
            (learned, report)
        };
        // The heartbeat runs while the records do, and stops before the moves and the backoff:
        // the visibility the backoff gives a reported record must be its last.
        let (learned, report) = tokio::select! {
            biased;
            done = records => done,
            never = self.heartbeat(&batch.messages, received_at) => match never {},
        };
        let settled = crate::batch::settle(
            &self.processor,
            &batch,
            deadline_ms,
            report,
            learned,
            backoff.as_ref(),
            dead_letters,
        )
        .await;
        let processed = match settled {
            Ok(processed) => processed,
            Err(e) => {
                error!(error = %e, "a batch's response failed its check: nothing deleted");
                return;
            }
        };
        self.hooks.batch_settled(
            self.processor.handler(),
            &batch,
            &processed,
            received_at.elapsed(),
        );
        let reported: std::collections::HashSet<&str> = processed
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        let done: Vec<Delete<'_>> = batch
            .messages
            .iter()
            .filter(|m| !reported.contains(m.message_id))
            .filter_map(|m| {
                Some(Delete {
                    message_id: m.message_id,
                    receipt_handle: m.receipt_handle?,
                })
            })
            .collect();
        self.delete(&done, counters).await;
        // Back to the queue at once, whatever the receive count: what the stop kept from
        // starting, what the drain's end abandoned, and what a FIFO hold kept behind either.
        let drain_is_over = stop.drain_is_over.load(Ordering::SeqCst);
        let statuses = &processed.report.statuses;
        let cut_by_stop = |status: &RecordStatus| match status {
            RecordStatus::SkippedStopping => true,
            RecordStatus::Handled(verdict) => drain_is_over && verdict.reason == ABANDONED,
            _ => false,
        };
        let unfinished: Vec<&Message<'_>> = batch
            .messages
            .iter()
            .zip(statuses)
            .filter(|(_, status)| match status {
                RecordStatus::SkippedAfter { culprit } => {
                    statuses.get(*culprit).is_some_and(cut_by_stop)
                }
                other => cut_by_stop(other),
            })
            .map(|(m, _)| m)
            .collect();
        if drain_is_over && !unfinished.is_empty() {
            warn!(
                records = unfinished.len(),
                "the drain timeout ended this batch: its unfinished records are released"
            );
        }
        self.release(unfinished.into_iter(), counters).await;
    }

    /// Extends the batch's visibility every third of the extension, until SQS's cap; never
    /// returns (the batch's end drops it).
    async fn heartbeat(
        &self,
        messages: &[Message<'_>],
        received_at: tokio::time::Instant,
    ) -> std::convert::Infallible {
        let extension_ms = self.options.visibility_extension_s.saturating_mul(1_000);
        let every = Duration::from_millis((extension_ms / 3).max(1));
        loop {
            tokio::time::sleep(every).await;
            let elapsed_ms = received_at.elapsed().as_millis() as u64;
            if elapsed_ms.saturating_add(extension_ms) > VISIBILITY_CAP_MS {
                error!(
                    records = messages.len(),
                    elapsed_ms,
                    "a batch reached SQS's 12-hour visibility cap: its heartbeat stops, and its records will be received again while they run"
                );
                return std::future::pending().await;
            }
            self.set_visibility(messages.iter(), self.options.visibility_extension_s)
                .await;
        }
    }

    /// Sets the visibility of `messages` to `seconds`, in calls of ten; failures logged.
    /// Returns how many changes were asked for (messages with a receipt handle).
    async fn set_visibility<'m>(
        &self,
        messages: impl Iterator<Item = &'m Message<'m>>,
        seconds: u64,
    ) -> usize {
        let changes: Vec<Change<'_>> = messages
            .filter_map(|m| {
                Some(Change {
                    message_id: m.message_id,
                    receipt_handle: m.receipt_handle?,
                    seconds,
                })
            })
            .collect();
        if changes.is_empty() {
            return 0;
        }
        let Some(url) = visibility::queue_url(self.queue.arn()) else {
            warn!(
                queue_arn = self.queue.arn(),
                "not an SQS queue ARN: no visibility change"
            );
            return 0;
        };
        for chunk in changes.chunks(visibility::BATCH_LIMIT) {
            for failure in self.visibility.change(&url, chunk).await {
                warn!(
                    message_id = failure.message_id,
                    reason = failure.reason,
                    "visibility change failed"
                );
            }
        }
        changes.len()
    }

    /// Back to the queue at once (visibility 0).
    async fn release<'m>(
        &self,
        messages: impl Iterator<Item = &'m Message<'m>>,
        counters: &Counters,
    ) {
        let released = self.set_visibility(messages, 0).await;
        counters
            .released
            .fetch_add(released as u64, Ordering::SeqCst);
    }

    /// Received after the stop: released without being started.
    async fn release_all(&self, messages: Vec<SqsMessage>, counters: &Counters) {
        let mut event = SqsEvent::default();
        event.records = messages;
        if let Ok(batch) = Batch::from_event(&event) {
            self.release(batch.messages.iter(), counters).await;
        }
    }

    /// Deletes in calls of ten, each failed entry retried up to the attempts, then logged.
    async fn delete(&self, done: &[Delete<'_>], counters: &Counters) {
        for chunk in done.chunks(10) {
            let mut pending: Vec<Delete<'_>> = chunk.to_vec();
            for attempt in 1..=self.options.delete_attempts.max(1) {
                match self.queue.delete(&pending).await {
                    Ok(failed) => {
                        let before = pending.len();
                        pending.retain(|d| failed.iter().any(|id| id == d.message_id));
                        counters
                            .deleted
                            .fetch_add((before - pending.len()) as u64, Ordering::SeqCst);
                    }
                    Err(e) => {
                        warn!(error = %lambda_kit::error_chain(&e), attempt, "delete failed");
                    }
                }
                if pending.is_empty() {
                    break;
                }
                if attempt < self.options.delete_attempts {
                    tokio::time::sleep(Duration::from_millis(100 << attempt.min(6))).await;
                }
            }
            for left in &pending {
                counters.delete_failures.fetch_add(1, Ordering::SeqCst);
                warn!(
                    message_id = left.message_id,
                    "not deleted after every attempt: the message comes back, and its key answers it as a duplicate"
                );
            }
        }
    }

    /// The backlog document every interval until the stop.
    async fn metrics(&self, stop: &Stop) {
        if self.options.metrics_interval_ms == 0 {
            return;
        }
        let interval = Duration::from_millis(self.options.metrics_interval_ms);
        while !self.stopping() {
            tokio::select! {
                biased;
                () = tokio::time::sleep(interval) => {}
                () = self.stopped(stop) => return,
            }
            match self.queue.visible_messages().await {
                Ok(visible) => self.hooks.write_metrics(&backlog_document(
                    &self.namespace,
                    queue_name(self.queue.arn()),
                    visible,
                    self.options.metrics_interval_ms as f64 / 60_000.0,
                    self.processor.clock().now_ms(),
                )),
                Err(e) => {
                    warn!(error = %lambda_kit::error_chain(&e), "the queue's depth could not be read")
                }
            }
        }
    }
}

/// The wait after `failures` failed receives in a row: equal jitter in [bound/2, bound], the
/// bound doubling from 1 s to 60 s.
pub fn receive_backoff(failures: u32, random: u64) -> Duration {
    let bound_ms = 1_000u64
        .saturating_mul(1u64 << failures.saturating_sub(1).min(6))
        .min(60_000);
    let half = bound_ms / 2;
    Duration::from_millis(half + random % (half + 1))
}

/// Resolves on SIGTERM (ECS, Kubernetes) or SIGINT (a terminal's Ctrl-C).
#[cfg(feature = "worker")]
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => info!("SIGTERM"),
                _ = tokio::signal::ctrl_c() => info!("SIGINT"),
            }
        }
        Err(e) => {
            warn!(error = %e, "SIGTERM cannot be watched: only SIGINT stops the worker");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests;
