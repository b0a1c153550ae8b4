//! One invocation's batch from start to response: learn the give-up's receive, run the
//! records, settle (DLQ moves, the response and its check, the visibility backoff).

use std::sync::Arc;
use std::time::Duration;

use crate::backoff::BackoffPolicy;
use crate::dead_letter::{self, DeadLetters};
use crate::edge::EntireBatchFailed;
use crate::edge::{Batch, EventError, EventView, SqsBatchResponse, check_response, response};
use crate::edge::{Message, QueueKind};
use crate::processor::{
    BatchProcessor, BatchReport, Decision, Invocation, RecordHandler, RecordStatus,
};
use crate::recovery::{Admit, Recovery, RecoveryPolicy};
use crate::visibility;
use lambda_kit::Clock;

/// The visibility backoff a batch gets after processing: the port, the policy and, when on, the
/// container's recovery after an outage. Build it once per container: clones share the
/// recovery's parked records.
///
/// ```
/// use sqs_batch::{Backoff, backoff::BackoffPolicy, recovery::RecoveryPolicy};
///
/// // The port is SQS's (`visibility::SqsVisibility`) in a function; any value in this example.
/// let backoff = Backoff::new("port", BackoffPolicy::new(5, 900))
///     .with_recovery(Some(RecoveryPolicy::new(30)));
/// let shared = backoff.clone();
/// assert_eq!(shared.recovery.map(|r| r.policy().probe_s), Some(30));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Backoff<V> {
    /// Where the visibility changes go.
    pub port: V,
    /// How long each reported record stays away.
    pub policy: BackoffPolicy,
    /// Probing and waking while a dependency is down ([`crate::recovery`]), when on.
    pub recovery: Option<Arc<Recovery>>,
}

impl<V> Backoff<V> {
    /// Visibility changes through `port` under `policy`, without recovery.
    pub fn new(port: V, policy: BackoffPolicy) -> Self {
        Self {
            port,
            policy,
            recovery: None,
        }
    }

    /// With the container's recovery under `policy` (`None`: off).
    pub fn with_recovery(self, policy: Option<RecoveryPolicy>) -> Self {
        Self {
            recovery: policy.map(|policy| Arc::new(Recovery::new(policy))),
            ..self
        }
    }
}

/// What one invocation came to.
///
/// # Example
///
/// ```
/// use sqs_batch::{BatchOptions, BatchProcessor, Verdict, lambda_kit::{Clock, SystemClock}};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let handler = sqs_batch::json(|n: u32| async move {
///     if n > 0 { Verdict::ack("counted") } else { Verdict::poison("zero") }
/// });
/// let processor = BatchProcessor::new(handler, SystemClock, BatchOptions::default());
/// let event = r#"{"Records": [{"messageId": "a", "body": "1"}, {"messageId": "b", "body": "0"}]}"#;
/// let processed = sqs_batch::process_event(&processor, event, SystemClock.now_ms() + 60_000)
///     .await
///     .unwrap();
/// assert_eq!(processed.report.statuses.len(), 2);
/// assert_eq!(processed.response.batch_item_failures.len(), 1);
/// # });
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Processed {
    /// The response for Lambda, checked.
    pub response: SqsBatchResponse,
    /// Every record's status, in batch order.
    pub report: BatchReport,
    /// The `maxReceiveCount` of the queue's redrive policy, when this batch needed it and it
    /// was learned (see [`process_batch`]): for the caller to hold against what it was
    /// deployed with.
    pub max_receive_count: Option<u32>,
}

impl Processed {
    /// The response, or [`EntireBatchFailed`] when `fail_on_entire_batch_failure` is set and
    /// every record failed ([`BatchOptions::fail_on_entire_batch_failure`](crate::BatchOptions::fail_on_entire_batch_failure)).
    pub fn into_response(
        self,
        fail_on_entire_batch_failure: bool,
    ) -> Result<SqsBatchResponse, EntireBatchFailed> {
        if fail_on_entire_batch_failure {
            check_entire_batch(&self.report)?;
        }
        Ok(self.response)
    }
}

/// [`EntireBatchFailed`] when the batch had records and none was acknowledged (or moved): the
/// response reports every one. Judged on the statuses, not the response, which names a
/// repeated message id once.
pub fn check_entire_batch(report: &BatchReport) -> Result<(), EntireBatchFailed> {
    let records = report.statuses.len();
    if records == 0 || report.statuses.iter().any(RecordStatus::is_ack) {
        return Ok(());
    }
    let reasons: Vec<String> = report
        .reasons()
        .iter()
        .map(|(reason, n)| format!("{reason}: {n}"))
        .collect();
    Err(EntireBatchFailed {
        records,
        reasons: reasons.join(", "),
    })
}

/// One invocation from Lambda's payload: parse ([`EventView`]), process, build and check the
/// response.
///
/// A payload that is not an SQS event, a record without a usable `messageId`, or a response that
/// fails its check is an [`EventError`]: fail the invocation so Lambda retries the batch.
///
/// # Example
///
/// ```
/// use sqs_batch::{BatchOptions, BatchProcessor, Verdict, lambda_kit::{Clock, SystemClock}};
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let processor = BatchProcessor::new(
///     sqs_batch::json(|_: serde_json::Value| async { Verdict::ack("seen") }),
///     SystemClock,
///     BatchOptions::default(),
/// );
/// let event = r#"{"Records": [{"messageId": "a", "body": "{}"}, {"messageId": "b", "body": "not json"}]}"#;
/// let processed = sqs_batch::process_event(&processor, event, SystemClock.now_ms() + 60_000)
///     .await
///     .unwrap();
/// let failed: Vec<&str> = processed
///     .response
///     .batch_item_failures
///     .iter()
///     .map(|f| f.item_identifier.as_str())
///     .collect();
/// assert_eq!(failed, ["b"]);
/// assert!(sqs_batch::process_event(&processor, "[]", 0).await.is_err(), "not an SQS event");
/// # });
/// ```
pub async fn process_event<H: RecordHandler, C: Clock>(
    processor: &BatchProcessor<H, C>,
    json: &str,
    invocation: impl Into<Invocation>,
) -> Result<Processed, EventError> {
    let view = EventView::parse(json)?;
    let no_backoff: Option<&Backoff<visibility::NoVisibility>> = None;
    let no_moves: Option<&DeadLetters<dead_letter::NoDeadLetters>> = None;
    process_batch(
        processor,
        &Batch::from_view(&view)?,
        invocation,
        no_backoff,
        no_moves,
    )
    .await
}

/// As [`process_event`], for a [`Batch`] already built (from [`EventView`] or from
/// `aws_lambda_events`' types), with the POISON records moved to their queue's dead-letter queue
/// when `dead_letters` is given (a moved record is acknowledged; one that could not be moved
/// becomes RETRY), then the visibility changes for the reported records when `backoff` is given.
/// Both get the time left before `deadline_ms` minus a quarter of the deadline margin. With
/// `dead_letters`, a RETRY gives up at the receive before the queue's own `maxReceiveCount`
/// ([`dead_letter::DeadLetterPort::max_receive_count`]), else at
/// [`BatchOptions::give_up_at_receive`](crate::BatchOptions::give_up_at_receive).
pub async fn process_batch<H, C, V, D>(
    processor: &BatchProcessor<H, C>,
    batch: &Batch<'_>,
    invocation: impl Into<Invocation>,
    backoff: Option<&Backoff<V>>,
    dead_letters: Option<&DeadLetters<D>>,
) -> Result<Processed, EventError>
where
    H: RecordHandler,
    C: Clock,
    V: visibility::VisibilityPort,
    D: dead_letter::DeadLetterPort,
{
    let invocation = invocation.into();
    let deadline_ms = invocation.deadline_ms;
    let learned = learn(processor, batch, deadline_ms, dead_letters).await;
    let recovery = backoff.and_then(|backoff| backoff.recovery.as_deref());
    let report = run(processor, batch, invocation, &learned, recovery).await;
    settle(
        processor,
        batch,
        deadline_ms,
        report,
        learned,
        backoff,
        dead_letters,
    )
    .await
}

/// What a batch learned before its records ran ([`learn`]), for [`run`] and [`settle`].
#[derive(Debug)]
pub(crate) struct Learned {
    /// The batch's trace span: the records' and the SQS calls' spans are its children.
    span: tracing::Span,
    /// The queue's `maxReceiveCount`, when it was asked for and answered.
    max_receive_count: Option<u32>,
    /// The receive from which a RETRY gives up.
    give_up_at_receive: Option<u32>,
}

/// The first step of [`process_batch`]: the batch's span, and the receive from which its RETRYs
/// give up.
pub(crate) async fn learn<H, C, D>(
    processor: &BatchProcessor<H, C>,
    batch: &Batch<'_>,
    deadline_ms: u64,
    dead_letters: Option<&DeadLetters<D>>,
) -> Learned
where
    H: RecordHandler,
    C: Clock,
    D: dead_letter::DeadLetterPort,
{
    let records = &batch.messages;
    // Trace spans (DEBUG, target `sqs_batch`): disabled, and free, unless a trace exporter asks
    // for them; the records' spans are children of this one.
    let span = tracing::debug_span!(
        "batch",
        queue = batch.queue_arn,
        kind = batch.kind.as_str(),
        records = records.len()
    );
    // The give-up's receive comes from the queue's redrive policy, the one source of its
    // maxReceiveCount (an operator may lower it in the console), learned through the DLQ port
    // (kept per container for minutes). Only a batch with a record received before asks: a
    // first receive gives up only under a policy of two receives, which no schedule survives.
    let max_receive_count = match (dead_letters, batch.queue_arn) {
        (Some(dead_letters), Some(arn))
            if records
                .iter()
                .any(|m| m.receive_count.is_some_and(|n| n >= 2)) =>
        {
            let budget = Duration::from_millis(
                deadline_ms
                    .saturating_sub(processor.clock().now_ms())
                    .min(LEARN_BUDGET_MS.saturating_mul(4))
                    / 4,
            );
            tokio::time::timeout(budget, dead_letters.port.max_receive_count(arn))
                .await
                .ok()
                .flatten()
        }
        _ => None,
    };
    let give_up_at_receive = match max_receive_count {
        Some(count) => (count >= 2).then(|| count - 1),
        None => processor.options().give_up_at_receive,
    };
    Learned {
        span,
        max_receive_count,
        give_up_at_receive,
    }
}

/// The second step of [`process_batch`]: the records, each to its status. While a dependency
/// is down ([`Recovery::admit`]) a standard queue's records are held back, not started, except
/// the probe call and the records at their give-up receive (which must leave with their
/// reason); once the probe finds the dependency up, the rest run.
pub(crate) async fn run<H, C>(
    processor: &BatchProcessor<H, C>,
    batch: &Batch<'_>,
    invocation: Invocation,
    learned: &Learned,
    recovery: Option<&Recovery>,
) -> BatchReport
where
    H: RecordHandler,
    C: Clock,
{
    use tracing::Instrument;
    let give_up = learned.give_up_at_receive;
    let admit = match (recovery, batch.kind) {
        (Some(recovery), QueueKind::Standard) => recovery.admit(processor.clock().now_ms()),
        _ => Admit::All,
    };
    let (dependency, mut probes) = match admit {
        Admit::Probe { dependency } => (dependency, 1),
        Admit::None { dependency } => (dependency, 0),
        _ => {
            return processor
                .process_until(&batch.messages, batch.kind, invocation, give_up)
                .instrument(learned.span.clone())
                .await;
        }
    };
    let at_give_up =
        |m: &Message<'_>| give_up.is_some_and(|last| m.receive_count.is_some_and(|n| n >= last));
    // The probe call first, with the records that must run anyway.
    let mut first = Vec::new();
    let mut rest = Vec::new();
    for (i, message) in batch.messages.iter().enumerate() {
        if at_give_up(message) {
            first.push(i);
        } else if probes > 0 {
            probes -= 1;
            first.push(i);
        } else {
            rest.push(i);
        }
    }
    let mut statuses: Vec<Option<RecordStatus>> = vec![None; batch.messages.len()];
    let subset = |indexes: &[usize]| -> Vec<Message<'_>> {
        indexes.iter().map(|&i| batch.messages[i].clone()).collect()
    };
    let ran = processor
        .process_until(&subset(&first), batch.kind, invocation.clone(), give_up)
        .instrument(learned.span.clone())
        .await;
    let found_up = ran
        .statuses
        .iter()
        .any(|s| matches!(s, RecordStatus::Handled(v) if v.health.is_some_and(|h| h.is_up())));
    for (&i, status) in first.iter().zip(ran.statuses) {
        statuses[i] = Some(status);
    }
    if found_up {
        let ran = processor
            .process_until(&subset(&rest), batch.kind, invocation, give_up)
            .instrument(learned.span.clone())
            .await;
        for (&i, status) in rest.iter().zip(ran.statuses) {
            statuses[i] = Some(status);
        }
    }
    BatchReport {
        kind: batch.kind,
        statuses: statuses
            .into_iter()
            .map(|status| status.unwrap_or_else(|| crate::recovery::held(dependency)))
            .collect(),
    }
}

/// The last step of [`process_batch`], after the records: the DLQ moves, the response and its
/// check, then the visibility backoff. A worker runs it once its heartbeat has stopped, so the
/// visibility the backoff sets is the last one a reported record gets.
pub(crate) async fn settle<H, C, V, D>(
    processor: &BatchProcessor<H, C>,
    batch: &Batch<'_>,
    deadline_ms: u64,
    mut report: BatchReport,
    learned: Learned,
    backoff: Option<&Backoff<V>>,
    dead_letters: Option<&DeadLetters<D>>,
) -> Result<Processed, EventError>
where
    H: RecordHandler,
    C: Clock,
    V: visibility::VisibilityPort,
    D: dead_letter::DeadLetterPort,
{
    use tracing::Instrument;
    let records = &batch.messages;
    let span = learned.span;
    // A quarter of the margin stays free for the response itself.
    let reserve_ms = processor.options().deadline_margin_ms / 4;
    let budget = |now_ms: u64| {
        Duration::from_millis(
            deadline_ms
                .saturating_sub(now_ms)
                .saturating_sub(reserve_ms),
        )
    };
    if let Some(dead_letters) = dead_letters {
        let now_ms = processor.clock().now_ms();
        let moved = dead_letter::apply(
            dead_letters,
            batch.queue_arn,
            records,
            &report,
            now_ms,
            budget(now_ms),
        )
        .instrument(tracing::debug_span!(parent: &span, "sqs.dead_letter_moves"))
        .await;
        for (status, moved) in report.statuses.iter_mut().zip(moved) {
            settle_move(status, moved);
        }
    }
    let response = response(report.failed_ids(records));
    check_response(&response, records)?;
    if let Some(backoff) = backoff {
        let now_ms = processor.clock().now_ms();
        let budget = budget(now_ms);
        let mut changes = visibility::changes(&backoff.policy, records, &report, now_ms, || {
            fastrand::u64(..)
        });
        // While a dependency is down one record probes and the others are parked; once a record
        // finds it up, parked records of earlier batches come back now.
        let wake = backoff.recovery.as_deref().map(|recovery| {
            let parked = recovery.settle_batch(
                &backoff.policy,
                batch,
                &report.statuses,
                &mut changes,
                now_ms,
                processor.options().max_concurrency.get(),
            );
            (recovery, parked)
        });
        let settle_visibility = async {
            visibility::apply_changes(&backoff.port, batch.queue_arn, &changes, budget).await;
            if let Some((recovery, parked)) = &wake {
                recovery.wake(&backoff.port, parked).await;
            }
        };
        // The wake shares the backoff's budget: past it, the parked records come back on
        // their schedule.
        let _ = tokio::time::timeout(budget, settle_visibility)
            .instrument(tracing::debug_span!(parent: &span, "sqs.change_visibility"))
            .await;
    }
    Ok(Processed {
        response,
        report,
        max_receive_count: learned.max_receive_count,
    })
}

/// The longest a batch waits to learn its queue's `maxReceiveCount` before it starts (a
/// quarter of the time left, at most this): past it, `SQS_BATCH_MAX_RECEIVE_COUNT` applies.
const LEARN_BUDGET_MS: u64 = 2_000;

/// A POISON record after its move: moved (acknowledged), or RETRY when its copy could not be
/// sent, so it is never acknowledged without one and comes back after its backoff.
fn settle_move(status: &mut RecordStatus, moved: bool) {
    let RecordStatus::Handled(verdict) = status else {
        return;
    };
    if verdict.outcome != Decision::Poison {
        return;
    }
    if moved {
        *status = RecordStatus::Moved(verdict.clone());
    } else {
        verdict.outcome = Decision::Retry;
    }
}
