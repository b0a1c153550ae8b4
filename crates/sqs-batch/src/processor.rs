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

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroUsize;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::Notify;
use tracing::{info, warn};

use lambda_kit::{Clock, Env, EnvError};

use crate::edge::{Message, QueueKind};
pub use crate::turns::KeyTurn;
use crate::turns::KeyTurns;

/// The old name of [`Decision`], kept for one release.
#[deprecated(
    since = "0.2.0",
    note = "renamed `Decision`: `idempotency::Outcome` is another thing"
)]
pub type Outcome = Decision;

/// What should become of a record: a [`Verdict`]'s decision.
///
/// A match on it outside this crate needs a wildcard arm; treat a decision you do not know as
/// [`Decision::Retry`] (never delete what you cannot name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Decision {
    /// Done, or a duplicate of finished work: delete the message.
    Ack,
    /// May succeed later: report it, SQS redelivers it.
    Retry,
    /// Will never succeed: report it, it reaches the DLQ after `maxReceiveCount`.
    Poison,
}

impl Decision {
    /// `ack`, `retry` or `poison`, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Retry => "retry",
            Self::Poison => "poison",
        }
    }
}

/// A handler's answer for one record: the outcome, and what the log needs to explain it.
///
/// Built with [`Verdict::ack`], [`Verdict::retry`] or [`Verdict::poison`] and the `with_`
/// methods; fields may be added.
///
/// # Example
///
/// ```
/// use sqs_batch::{Verdict, processor::Decision};
///
/// let verdict = Verdict::retry("busy").with_retry_after_ms(1_767_225_600_000);
/// assert_eq!((verdict.outcome, verdict.reason), (Decision::Retry, "busy"));
/// assert_eq!(Verdict::poison("invalid_body").outcome, Decision::Poison);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Verdict {
    /// What becomes of the record.
    pub outcome: Decision,
    /// A short, stable code (`charged`, `duplicate`, `busy`, `invalid_body`, ...).
    pub reason: &'static str,
    /// Human detail for the log. Never a body or a secret.
    pub detail: Option<Cow<'static, str>>,
    /// The business key the record is about (an order id, a user id), when the handler got
    /// that far. Logged as `key`.
    pub key: Option<String>,
    /// When retrying makes sense again, in epoch ms (for example a busy lease's end).
    pub retry_after_ms: Option<u64>,
    /// An id joining the log line to the handler's own records (an idempotency claim's lease
    /// token, for example). Logged as `correlation_id`.
    pub correlation_id: Option<String>,
}

impl Verdict {
    /// Done: delete the message.
    pub fn ack(reason: &'static str) -> Self {
        Self::new(Decision::Ack, reason)
    }

    /// May succeed later: report it.
    pub fn retry(reason: &'static str) -> Self {
        Self::new(Decision::Retry, reason)
    }

    /// Will never succeed: report it, for the DLQ.
    pub fn poison(reason: &'static str) -> Self {
        Self::new(Decision::Poison, reason)
    }

    fn new(outcome: Decision, reason: &'static str) -> Self {
        Self {
            outcome,
            reason,
            detail: None,
            key: None,
            retry_after_ms: None,
            correlation_id: None,
        }
    }

    /// Adds human detail for the log line.
    pub fn with_detail(mut self, detail: impl Into<Cow<'static, str>>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Names the business key the record is about.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// When a retry makes sense again, epoch ms (the backoff waits until then).
    pub fn with_retry_after_ms(mut self, at_ms: u64) -> Self {
        self.retry_after_ms = Some(at_ms);
        self
    }
}

/// The old name of [`Invocation`], which a handler gets besides its record: the two held the
/// same fields. Kept for one release.
#[deprecated(
    since = "0.2.0",
    note = "renamed `Invocation`: a record's context was its invocation"
)]
pub type RecordContext = Invocation;

/// The invocation a batch is processed in, as each record's handler gets it: its deadline and,
/// under Lambda, its request id and the function's ARN (shared, not copied: a record's is a
/// clone). A bare deadline converts into one (`From<u64>`), so the processing calls take either.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Invocation {
    /// The deadline, epoch ms: records are not started too close to it, and are cut off at it.
    pub deadline_ms: u64,
    /// The Lambda request id.
    pub request_id: Option<Arc<str>>,
    /// The ARN the function was invoked by.
    pub function_arn: Option<Arc<str>>,
}

impl Invocation {
    /// An invocation ending at `deadline_ms` (epoch ms), outside Lambda.
    pub fn new(deadline_ms: u64) -> Self {
        Self {
            deadline_ms,
            request_id: None,
            function_arn: None,
        }
    }

    /// A copy of `invocation`: what `RecordContext::of` was.
    #[deprecated(since = "0.2.0", note = "`RecordContext` is `Invocation`: clone it")]
    pub fn of(invocation: &Invocation) -> Self {
        invocation.clone()
    }

    /// With Lambda's request id and the ARN the function was invoked by.
    pub fn with_lambda(self, request_id: &str, function_arn: &str) -> Self {
        Self {
            request_id: Some(Arc::from(request_id)),
            function_arn: Some(Arc::from(function_arn)),
            ..self
        }
    }
}

impl From<u64> for Invocation {
    fn from(deadline_ms: u64) -> Self {
        Self::new(deadline_ms)
    }
}

/// Anything that turns one record into a [`Verdict`].
///
/// # Example
///
/// ```
/// use sqs_batch::{Message, RecordHandler, Verdict, processor::Invocation};
///
/// /// Acknowledges a record whose body is a number, poisons anything else.
/// struct Numbers;
///
/// impl RecordHandler for Numbers {
///     async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
///         match message.body.trim().parse::<i64>() {
///             Ok(_) => Verdict::ack("number"),
///             Err(_) => Verdict::poison("not_a_number"),
///         }
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let verdict = Numbers.handle(&Message::new("m-1", "x"), Invocation::new(0)).await;
/// assert_eq!(verdict.reason, "not_a_number");
/// # });
/// ```
pub trait RecordHandler: Send + Sync {
    /// Decides one record. A panic here is RETRY for this record only.
    fn handle(
        &self,
        message: &Message<'_>,
        context: Invocation,
    ) -> impl Future<Output = Verdict> + Send;

    /// A span around the lines the processor writes about `message` (a record not acknowledged,
    /// or not started), so they carry the handler's own fields: an order handler adds its
    /// `order_id`, read from the body even when the body is not a valid order. Asked only for
    /// those lines, never on the ACK path. None by default.
    fn record_span(&self, message: &Message<'_>) -> tracing::Span {
        let _ = message;
        tracing::Span::none()
    }

    /// The record's business key (an order id), for the verdicts the processor makes itself (a
    /// panic, a record abandoned at the deadline or at a worker's stop), so that a DLQ copy of
    /// such a record still names what it is about, as the handler's own verdicts do
    /// ([`Verdict::with_key`]). Asked only for those. None by default.
    fn record_key(&self, message: &Message<'_>) -> Option<String> {
        let _ = message;
        None
    }
}

/// Which records a FIFO failure holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FifoScope {
    /// Stop the whole batch at the first failure (Lambda's contract).
    #[default]
    Batch,
    /// Stop only the failed message group.
    Group,
}

/// How the processor runs a batch.
///
/// [`BatchOptions::default`] or [`BatchOptions::from_env`], then the `with_` methods; fields may
/// be added.
///
/// # Example
///
/// ```
/// use sqs_batch::{BatchOptions, lambda_kit::Env};
///
/// let env = Env::new(|name| (name == "SQS_BATCH_MAX_CONCURRENCY").then(|| "4".to_owned()));
/// let options = BatchOptions::from_env(&env).unwrap();
/// assert_eq!(options.max_concurrency.get(), 4);
/// assert_eq!(BatchOptions::default().max_concurrency.get(), 16);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchOptions {
    /// Records (or FIFO groups in group scope) in flight at once.
    pub max_concurrency: NonZeroUsize,
    /// Which records a FIFO failure holds back.
    pub fifo_scope: FifoScope,
    /// A record is not started with less than this much time left.
    pub deadline_margin_ms: u64,
    /// How long past the deadline a record abandoned mid-work may still hold what it took (an
    /// idempotency lease margin): its retry is not due before then.
    pub abandoned_hold_ms: u64,
    /// The receive from which a RETRY gives up and becomes POISON `retries_exhausted` (with its
    /// reason in the detail): one before the queue's `maxReceiveCount`, so the record leaves
    /// alone, with its reason, instead of SQS's redrive moving it at the next receive together
    /// with the FIFO records behind it, which ride the same receive counts. `None`: never.
    pub give_up_at_receive: Option<u32>,
    /// Whether an invocation in which every record failed returns an error instead of reporting
    /// them all in `batchItemFailures` (`lambda::run` and the order function). The batch
    /// comes back either way; an error also counts in the function's `Errors` metric and makes
    /// the event source mapping scale its polling down, as Powertools does by default. Off by
    /// default: our own visibility backoff already spaces the retries, and `Errors` stays the
    /// signal for the function's own faults.
    pub fail_on_entire_batch_failure: bool,
}

/// The least `SQS_BATCH_DEADLINE_MARGIN_MS` may be: below it a record can run into the deadline.
pub const MIN_DEADLINE_MARGIN_MS: u64 = 1_000;

impl BatchOptions {
    /// `SQS_BATCH_MAX_CONCURRENCY` (16, 1-1000), `SQS_BATCH_FIFO_SCOPE` (`batch` or `group`; `batch`),
    /// `SQS_BATCH_DEADLINE_MARGIN_MS` (5000, at least [`MIN_DEADLINE_MARGIN_MS`]), `SQS_BATCH_MAX_RECEIVE_COUNT`
    /// (0, unknown) and `SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE` (false). `abandoned_hold_ms`
    /// starts at the deadline margin; a caller that holds leases sets its own.
    pub fn from_env(env: &Env<'_>) -> Result<Self, EnvError> {
        let env = &crate::with_old_names(env);
        let max_concurrency: usize = env.ranged("SQS_BATCH_MAX_CONCURRENCY", 16, 1, 1_000)?;
        let fifo_scope = match env.text("SQS_BATCH_FIFO_SCOPE").as_deref() {
            None => FifoScope::Batch,
            Some(v) if v.eq_ignore_ascii_case("batch") => FifoScope::Batch,
            Some(v) if v.eq_ignore_ascii_case("group") => FifoScope::Group,
            Some(v) => {
                return Err(EnvError::invalid(
                    "SQS_BATCH_FIFO_SCOPE",
                    v,
                    "batch or group",
                ));
            }
        };
        let deadline_margin_ms: u64 = env.ranged(
            "SQS_BATCH_DEADLINE_MARGIN_MS",
            5_000,
            MIN_DEADLINE_MARGIN_MS,
            900_000,
        )?;
        // The queue's maxReceiveCount, when the deployment states it (0: unknown).
        let max_receive_count: u32 = env.ranged("SQS_BATCH_MAX_RECEIVE_COUNT", 0, 0, 1_000)?;
        let fail_on_entire_batch_failure =
            env.flag("SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE", false)?;
        Ok(Self {
            fail_on_entire_batch_failure,
            max_concurrency: NonZeroUsize::new(max_concurrency).unwrap_or(NonZeroUsize::MIN),
            fifo_scope,
            deadline_margin_ms,
            abandoned_hold_ms: deadline_margin_ms,
            give_up_at_receive: (max_receive_count >= 2).then(|| max_receive_count - 1),
        })
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            max_concurrency: NonZeroUsize::new(16).unwrap_or(NonZeroUsize::MIN),
            fifo_scope: FifoScope::Batch,
            deadline_margin_ms: 5_000,
            abandoned_hold_ms: 5_000,
            give_up_at_receive: None,
            fail_on_entire_batch_failure: false,
        }
    }
}

impl BatchOptions {
    /// With at most `max_concurrency` records (or FIFO groups in group scope) in flight.
    pub fn with_max_concurrency(self, max_concurrency: NonZeroUsize) -> Self {
        Self {
            max_concurrency,
            ..self
        }
    }

    /// With this FIFO scope.
    pub fn with_fifo_scope(self, fifo_scope: FifoScope) -> Self {
        Self { fifo_scope, ..self }
    }

    /// With this deadline margin, ms.
    pub fn with_deadline_margin_ms(self, deadline_margin_ms: u64) -> Self {
        Self {
            deadline_margin_ms,
            ..self
        }
    }

    /// With this hold past the deadline for an abandoned record, ms.
    pub fn with_abandoned_hold_ms(self, abandoned_hold_ms: u64) -> Self {
        Self {
            abandoned_hold_ms,
            ..self
        }
    }

    /// Giving up a RETRY at this receive (`None`: never).
    pub fn with_give_up_at_receive(self, give_up_at_receive: Option<u32>) -> Self {
        Self {
            give_up_at_receive,
            ..self
        }
    }

    /// Failing the invocation when every record failed
    /// ([`BatchOptions::fail_on_entire_batch_failure`]).
    pub fn with_fail_on_entire_batch_failure(self, fail: bool) -> Self {
        Self {
            fail_on_entire_batch_failure: fail,
            ..self
        }
    }
}

/// The reason a record not started because its runtime is stopping is reported with
/// ([`RecordStatus::SkippedStopping`]; the worker then releases it).
pub const SHUTTING_DOWN: &str = "shutting_down";

/// What happened to one record.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum RecordStatus {
    /// The handler ran and decided.
    Handled(Verdict),
    /// Not started: too close to the deadline.
    SkippedDeadline,
    /// Not started: the runtime is stopping ([`BatchProcessor::stop_starting`], a worker's
    /// shutdown). Released, whatever its receive count: it was never tried.
    SkippedStopping,
    /// Not started: an earlier record (by index) failed, and FIFO order must hold.
    SkippedAfter {
        /// The index of the record that failed first.
        culprit: usize,
    },
    /// POISON, and moved to the dead-letter queue by the function ([`crate::dead_letter`]):
    /// acknowledged, so Lambda deletes it from its queue.
    Moved(Verdict),
}

impl RecordStatus {
    /// What it comes to (skipped records are RETRY; a moved one stays POISON).
    pub fn outcome(&self) -> Decision {
        match self {
            Self::Handled(v) => v.outcome,
            Self::Moved(_) => Decision::Poison,
            Self::SkippedDeadline | Self::SkippedStopping | Self::SkippedAfter { .. } => {
                Decision::Retry
            }
        }
    }

    /// Deleted by Lambda: acknowledged, or moved to the dead-letter queue.
    pub fn is_ack(&self) -> bool {
        matches!(self, Self::Moved(_)) || self.outcome() == Decision::Ack
    }
}

/// The statuses of a batch, in batch order.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BatchReport {
    /// How the batch ran.
    pub kind: QueueKind,
    /// Each record's status, in batch order.
    pub statuses: Vec<RecordStatus>,
}

impl BatchReport {
    /// A report of `statuses`, in batch order, for a batch run as `kind` (a handler's tests
    /// build one to check what they derive from it).
    pub fn new(kind: QueueKind, statuses: Vec<RecordStatus>) -> Self {
        Self { kind, statuses }
    }

    /// The message ids to report as failed, in batch order.
    pub fn failed_ids<'m>(&self, batch: &'m [Message<'m>]) -> impl Iterator<Item = &'m str> {
        batch
            .iter()
            .zip(&self.statuses)
            .filter(|(_, s)| !s.is_ack())
            .map(|(m, _)| m.message_id)
    }

    /// Records per outcome: (ack, retry, poison), skipped records counted as retry.
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::default();
        for status in &self.statuses {
            match status {
                RecordStatus::Handled(v) => match v.outcome {
                    Decision::Ack => counts.ack += 1,
                    Decision::Retry => counts.retry += 1,
                    Decision::Poison => counts.poison += 1,
                },
                RecordStatus::Moved(_) => {
                    counts.poison += 1;
                    counts.moved += 1;
                }
                RecordStatus::SkippedDeadline
                | RecordStatus::SkippedStopping
                | RecordStatus::SkippedAfter { .. } => counts.skipped += 1,
            }
        }
        counts
    }
}

impl BatchReport {
    /// Records per reason code, in order of first appearance (`deadline` and `after_failure`
    /// for skipped records).
    pub fn reasons(&self) -> Vec<(&'static str, usize)> {
        let mut reasons: Vec<(&'static str, usize)> = Vec::new();
        for status in &self.statuses {
            let reason = match status {
                RecordStatus::Handled(v) | RecordStatus::Moved(v) => v.reason,
                RecordStatus::SkippedDeadline => "deadline",
                RecordStatus::SkippedStopping => SHUTTING_DOWN,
                RecordStatus::SkippedAfter { .. } => "after_failure",
            };
            match reasons.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, n)) => *n += 1,
                None => reasons.push((reason, 1)),
            }
        }
        reasons
    }

    /// [`BatchReport::reasons`] as `charged=2 duplicate=1`, for the summary log line.
    pub fn reasons_text(&self) -> String {
        let parts: Vec<String> = self
            .reasons()
            .iter()
            .map(|(reason, n)| format!("{reason}={n}"))
            .collect();
        parts.join(" ")
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
/// Records per outcome.
#[non_exhaustive]
pub struct Counts {
    /// Acknowledged.
    pub ack: usize,
    /// Handled, RETRY.
    pub retry: usize,
    /// Handled, POISON (moved ones included).
    pub poison: usize,
    /// POISON moved to the dead-letter queue by the function.
    pub moved: usize,
    /// Not started (deadline or FIFO hold).
    pub skipped: usize,
}

/// The reason of a RETRY for a record abandoned while it ran: near the deadline, or when the
/// runtime stopped waiting ([`BatchProcessor::abandon_running`]).
pub const ABANDONED: &str = "abandoned";

tokio::task_local! {
    static CURRENT: InScope;
}

/// What a record's handler and everything it awaits can know without being handed it: the
/// record ([`current`]) and the keys its processor's running records hold ([`key_turn`]). One
/// task-local, so a record's future nests one scope deep.
#[derive(Debug)]
struct InScope {
    current: CurrentRecord,
    turns: Arc<KeyTurns>,
}

/// Waits until no other record of the processor running this one holds `key`, then holds it
/// until the turn is dropped: records naming the same business key (a producer's send retried,
/// delivered twice in one batch) do their keyed work one after the other, so the second sees
/// the first's result instead of its live claim. Outside a [`BatchProcessor`] it holds nothing.
/// `idempotency`'s claims take it on their own.
///
/// ```
/// use sqs_batch::processor::key_turn;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let turn = key_turn("u-1").await; // outside a processor: at once, holding nothing
/// drop(turn);
/// # });
/// ```
pub async fn key_turn(key: &str) -> KeyTurn {
    match CURRENT.try_with(|scope| Arc::clone(&scope.turns)) {
        Ok(turns) => turns.take(key).await,
        Err(_) => KeyTurn::none(),
    }
}

/// The old name of [`CurrentRecord`], kept for one release.
#[deprecated(since = "0.2.0", note = "renamed `CurrentRecord`")]
pub type Current = CurrentRecord;

/// The record a [`BatchProcessor`] is handling, as the code its handler runs can know it
/// without being handed it ([`current`]): what bounds work done for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CurrentRecord {
    /// The invocation's deadline, epoch ms.
    pub deadline_ms: u64,
    /// When an attempt at the record's work may already have been made, as the record itself
    /// says (a copy redriven from the DLQ: [`crate::dead_letter::earlier_attempt_ms`]).
    pub earlier_attempt_ms: Option<u64>,
}

/// The record being handled, inside a [`RecordHandler::handle`] that a [`BatchProcessor`]
/// runs (and in everything that handler awaits); `None` elsewhere.
///
/// ```
/// use sqs_batch::{BatchOptions, BatchProcessor, Message, processor::Invocation, RecordHandler, Verdict};
/// use sqs_batch::processor::current;
///
/// struct Deadlines;
///
/// impl RecordHandler for Deadlines {
///     async fn handle(&self, _message: &Message<'_>, context: Invocation) -> Verdict {
///         match current() {
///             Some(record) if record.deadline_ms == context.deadline_ms => Verdict::ack("known"),
///             _ => Verdict::retry("unknown"),
///         }
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// assert_eq!(current(), None);
/// let processor = BatchProcessor::new(Deadlines, sqs_batch::lambda_kit::SystemClock, BatchOptions::default());
/// let deadline_ms = sqs_batch::lambda_kit::Clock::now_ms(&sqs_batch::lambda_kit::SystemClock) + 60_000;
/// let event = r#"{"Records": [{"messageId": "m1", "body": "{}"}]}"#;
/// let processed = sqs_batch::process_event(&processor, event, deadline_ms).await.unwrap();
/// assert_eq!(processed.report.reasons(), [("known", 1)]);
/// # });
/// ```
pub fn current() -> Option<CurrentRecord> {
    CURRENT.try_with(|scope| scope.current).ok()
}

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
    use lambda_kit::ManualClock;
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
