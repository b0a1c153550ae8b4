//! What the code a record's handler runs can know without being handed it: the record
//! ([`current`]) and its processor's key turns ([`key_turn`]), in one task-local.

use std::sync::Arc;

use crate::turns::{KeyTurn, KeyTurns};

tokio::task_local! {
    pub(super) static CURRENT: InScope;
}

/// What a record's handler and everything it awaits can know without being handed it: the
/// record ([`current`]) and the keys its processor's running records hold ([`key_turn`]). One
/// task-local, so a record's future nests one scope deep.
#[derive(Debug)]
pub(super) struct InScope {
    pub(super) current: CurrentRecord,
    pub(super) turns: Arc<KeyTurns>,
}

/// Waits until no other record of the processor running this one holds `key`, then holds it
/// until the turn is dropped: records naming the same business key (a producer's send retried,
/// delivered twice in one batch) do their keyed work one after the other, so the second sees
/// the first's result instead of its live claim. Outside a [`BatchProcessor`](super::BatchProcessor) it holds nothing.
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

/// The record a [`BatchProcessor`](super::BatchProcessor) is handling, as the code its handler runs can know it
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

/// The record being handled, inside a [`RecordHandler::handle`](super::RecordHandler::handle) that a [`BatchProcessor`](super::BatchProcessor)
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
