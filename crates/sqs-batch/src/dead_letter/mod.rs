//! Dead-letter moves: a POISON record leaves at its first receive. The function sends it to its
//! queue's dead-letter queue itself, saying why, and acknowledges it; SQS's own redrive
//! (`maxReceiveCount`) stays as the safety net for what the function could not move. This keeps
//! "how fast poison leaves" apart from "how many receives a transient failure may use", so a
//! queue can allow a day of retries without poison costing a day of receives.
//!
//! A copy keeps the body and every attribute of the message it copies, and carries why in one
//! attribute ([`FAILURE_ATTRIBUTE`], a [`Failure`]). A copy moved again (a redrive that failed
//! again) replaces its old failure attribute with the new one, which folds the old one's history
//! in ([`Failure::history`], the earliest first failure). Every text in it is bounded and in
//! SQS's character set ([`attribute_text`]): an order id of 200 KB or with U+FFFF in it is cut and
//! hashed, never refused by SQS. The adapter fits each copy and each call within SQS's sizes.
//!
//! A move that fails leaves the record reported, as RETRY with its backoff: it is never
//! acknowledged without its copy. A move that succeeded, followed by a crash before the
//! response, leaves a copy in the DLQ and the message in its queue: the next receive is POISON
//! again and moved again (on a FIFO DLQ with the same deduplication id, so within five minutes
//! SQS keeps one copy). A second copy is harmless: a redrive of either is POISON again, or a
//! duplicate that is acknowledged.
//!
//! # Example
//!
//! ```
//! use sqs_batch::Message;
//! use sqs_batch::dead_letter::{FAILURE_ATTRIBUTE, earlier_attempt_ms};
//!
//! // A message that was never in a DLQ carries no failure history.
//! assert_eq!(earlier_attempt_ms(&Message::new("m-1", "{}")), None);
//! assert_eq!(FAILURE_ATTRIBUTE, "dead-letter-failure");
//! ```

#[cfg(feature = "dead-letter")]
pub mod sqs;

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tracing::warn;

use crate::edge::Message;
use crate::processor::{BatchReport, Decision, RecordStatus};

#[cfg(feature = "dead-letter")]
pub use sqs::SqsDeadLetters;

// The copy's failure attribute, defined below the processor (which reads a record's earlier
// attempt from it) and named here as before.
use crate::failure::bounded;
pub use crate::failure::{
    EarlierMove, FAILURE_ATTRIBUTE, Failure, MAX_DETAIL_CHARS, MAX_HISTORY, MAX_KEY_BYTES,
    UNREADABLE_REASON, attribute_key, attribute_text, earlier_attempt_ms, sqs_allows,
};

/// SQS takes at most 10 entries per `SendMessageBatch`.
pub const BATCH_LIMIT: usize = 10;

/// One record to move.
#[derive(Debug, Clone)]
pub struct Move<'a> {
    /// The record as received: body, attributes, group.
    pub message: &'a Message<'a>,
    /// Why.
    pub failure: Failure,
}

/// A record the port could not move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveFailure {
    /// The record's message id.
    pub message_id: String,
    /// What SQS or the call said.
    pub reason: String,
}

/// The port: send up to [`BATCH_LIMIT`] records of one queue to that queue's dead-letter queue.
pub trait DeadLetterPort: Send + Sync {
    /// Sends `moves`, records of the queue `source_arn`, to its dead-letter queue; returns the
    /// ones that were not sent (all of them when the queue has no dead-letter queue or it cannot
    /// be learned now).
    fn send(
        &self,
        source_arn: &str,
        moves: &[Move<'_>],
    ) -> impl Future<Output = Vec<MoveFailure>> + Send;

    /// The `maxReceiveCount` of the redrive policy of `source_arn`, if it can be learned now:
    /// the source of the give-up's receive and of the survival check, so that a policy edited
    /// in the console cannot silently void them ([`crate::process_batch`]). `None` by default.
    fn max_receive_count(&self, source_arn: &str) -> impl Future<Output = Option<u32>> + Send {
        let _ = source_arn;
        async { None }
    }
}

/// No dead-letter port: the type to name when a function runs without moves.
#[derive(Debug, Clone, Copy)]
pub enum NoDeadLetters {}

impl DeadLetterPort for NoDeadLetters {
    async fn send(&self, _source_arn: &str, _moves: &[Move<'_>]) -> Vec<MoveFailure> {
        match *self {}
    }
}

/// The dead-letter moves a batch gets after processing: the port, and what the copies name as
/// their mover.
#[derive(Debug, Clone)]
pub struct DeadLetters<D> {
    /// Where the copies go.
    pub port: D,
    /// Put in each copy's [`Failure::moved_by`] (a function's name and version).
    pub moved_by: String,
}

/// The most `SendMessageBatch` calls in flight at once.
const MAX_CALLS_IN_FLIGHT: usize = 8;

/// Moves the report's POISON records to the dead-letter queue of `source_arn`, in calls of up to
/// ten run concurrently within `budget`; returns, per record of `batch`, whether it was moved.
/// A record not moved (no ARN, a failed or unfinished call) stays reported.
pub async fn apply<D: DeadLetterPort>(
    dead_letters: &DeadLetters<D>,
    source_arn: Option<&str>,
    batch: &[Message<'_>],
    report: &BatchReport,
    now_ms: u64,
    budget: Duration,
) -> Vec<bool> {
    let mut moved = vec![false; batch.len()];
    let indexes: Vec<usize> = report
        .statuses
        .iter()
        .enumerate()
        .filter(|(_, status)| {
            matches!(status, RecordStatus::Handled(v) if v.outcome == Decision::Poison)
        })
        .map(|(index, _)| index)
        .collect();
    if indexes.is_empty() {
        return moved;
    }
    let Some(source_arn) = source_arn else {
        warn!("no queue ARN on the event: POISON records are left to the queue's redrive policy");
        return moved;
    };
    let moves: Vec<Move<'_>> = indexes
        .iter()
        .filter_map(|&index| {
            let RecordStatus::Handled(verdict) = &report.statuses[index] else {
                return None;
            };
            let message = &batch[index];
            let failure = Failure {
                reason: verdict.reason.to_owned(),
                detail: verdict
                    .detail
                    .as_deref()
                    .map(|d| bounded(d, MAX_DETAIL_CHARS)),
                key: verdict.key.as_deref().map(attribute_key),
                source_queue_arn: source_arn.to_owned(),
                receive_count: message.receive_count,
                first_failure_ms: message.first_receive_ms,
                last_failure_ms: now_ms,
                moved_by: dead_letters.moved_by.clone(),
                ..Failure::default()
            };
            Some(Move {
                message,
                failure: failure.after(Failure::of(message)),
            })
        })
        .collect();
    let chunks: Vec<(&[usize], &[Move<'_>])> = indexes
        .chunks(BATCH_LIMIT)
        .zip(moves.chunks(BATCH_LIMIT))
        .collect();
    let mut pending = 0..chunks.len();
    let mut in_flight = FuturesUnordered::new();
    let send = |chunk: usize| {
        let port = &dead_letters.port;
        let moves = chunks[chunk].1;
        async move { (chunk, port.send(source_arn, moves).await) }
    };
    let calls = async {
        for chunk in pending.by_ref().take(MAX_CALLS_IN_FLIGHT) {
            in_flight.push(send(chunk));
        }
        while let Some((chunk, failures)) = in_flight.next().await {
            let (chunk_indexes, chunk_moves) = chunks[chunk];
            for (index, one) in chunk_indexes.iter().zip(chunk_moves) {
                match failures
                    .iter()
                    .find(|f| f.message_id == one.message.message_id)
                {
                    None => {
                        moved[*index] = true;
                        tracing::info!(
                            message_id = one.message.message_id,
                            reason = one.failure.reason,
                            "moved to the dead-letter queue"
                        );
                    }
                    Some(failure) => warn!(
                        message_id = one.message.message_id,
                        reason = failure.reason,
                        "dead-letter move failed; the record stays reported and is retried"
                    ),
                }
            }
            if let Some(chunk) = pending.next() {
                in_flight.push(send(chunk));
            }
        }
    };
    if tokio::time::timeout(budget, calls).await.is_err() {
        warn!(
            budget_ms = budget.as_millis() as u64,
            "dead-letter moves not finished in the time left before the deadline; the records \
             not moved stay reported"
        );
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::BackoffPolicy;
    use crate::visibility::{Change, ChangeFailure, VisibilityPort};
    use crate::{
        BatchOptions, BatchProcessor, RecordHandler, Verdict, batch::Backoff, batch::process_batch,
        edge::Batch, edge::QueueKind, processor::Invocation,
    };
    use lambda_kit::ManualClock;
    use std::sync::Mutex;

    /// ACK for "ok", RETRY for "later", POISON for anything else.
    struct Bodies;

    impl RecordHandler for Bodies {
        async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
            match message.body {
                "ok" => Verdict::ack("ok"),
                "later" => Verdict::retry("later"),
                _ => Verdict::poison("bad")
                    .with_key("k-1".to_owned())
                    .with_detail("amount is missing"),
            }
        }
    }

    /// Records what it was asked to send; refuses the ids in `refuse`.
    #[derive(Default)]
    struct Recorder {
        sent: Mutex<Vec<(String, Failure)>>,
        refuse: Vec<&'static str>,
    }

    impl DeadLetterPort for Recorder {
        async fn send(&self, _source_arn: &str, moves: &[Move<'_>]) -> Vec<MoveFailure> {
            let mut failures = Vec::new();
            for one in moves {
                if self.refuse.contains(&one.message.message_id) {
                    failures.push(MoveFailure {
                        message_id: one.message.message_id.to_owned(),
                        reason: "refused".into(),
                    });
                } else {
                    self.sent
                        .lock()
                        .unwrap()
                        .push((one.message.message_id.to_owned(), one.failure.clone()));
                }
            }
            failures
        }
    }

    /// The visibility each record is given.
    #[derive(Default)]
    struct Visibility(Mutex<Vec<(String, u64)>>);

    impl VisibilityPort for Visibility {
        async fn change(&self, _url: &str, changes: &[Change<'_>]) -> Vec<ChangeFailure> {
            let mut seen = self.0.lock().unwrap();
            seen.extend(changes.iter().map(|c| (c.message_id.to_owned(), c.seconds)));
            Vec::new()
        }
    }

    async fn run(
        bodies: &[(&'static str, &'static str)],
        port: Recorder,
    ) -> (
        Vec<String>,
        crate::processor::BatchReport,
        Recorder,
        Visibility,
    ) {
        let clock = ManualClock::at(1_000_000);
        let processor = BatchProcessor::new(Bodies, clock, BatchOptions::default());
        let batch = Batch {
            messages: bodies
                .iter()
                .map(|(id, body)| Message {
                    receipt_handle: Some("rh"),
                    receive_count: Some(1),
                    first_receive_ms: Some(999_000),
                    ..Message::new(id, body)
                })
                .collect(),
            kind: QueueKind::Standard,
            queue_arn: Some("arn:aws:sqs:us-east-1:1:q"),
        };
        let dead_letters = DeadLetters {
            port,
            moved_by: "fn:3".to_owned(),
        };
        let backoff = Backoff::new(Visibility::default(), BackoffPolicy::new(5, 900));
        let processed = process_batch(
            &processor,
            &batch,
            1_000_000 + 60_000,
            Some(&backoff),
            Some(&dead_letters),
        )
        .await
        .expect("processed");
        let failed = processed
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        (failed, processed.report, dead_letters.port, backoff.port)
    }

    /// A POISON record is moved with why and acknowledged; the others keep their outcome.
    #[tokio::test]
    async fn poison_is_moved_with_its_reason_and_acknowledged() {
        let (failed, report, port, visibility) = run(
            &[("m1", "ok"), ("m2", "bad"), ("m3", "later")],
            Recorder::default(),
        )
        .await;
        assert_eq!(failed, ["m3"]);
        assert!(matches!(report.statuses[1], RecordStatus::Moved(_)));
        assert_eq!(report.counts().moved, 1);
        assert_eq!(report.counts().poison, 1);
        let sent = port.sent.lock().unwrap();
        assert_eq!(
            *sent,
            [(
                "m2".to_owned(),
                Failure {
                    reason: "bad".into(),
                    detail: Some("amount is missing".into()),
                    key: Some("k-1".into()),
                    source_queue_arn: "arn:aws:sqs:us-east-1:1:q".into(),
                    receive_count: Some(1),
                    first_failure_ms: Some(999_000),
                    last_failure_ms: 1_000_000,
                    moved_by: "fn:3".into(),
                    ..Failure::default()
                }
            )]
        );
        // The moved record's visibility is left alone: Lambda deletes it.
        let changed: Vec<String> = visibility
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.0.clone())
            .collect();
        assert_eq!(changed, ["m3"]);
    }

    /// A redriven copy's history says when its work may first have been tried; one whose failure
    /// attribute cannot be read still says it was moved, as of unknown time (the oldest).
    #[test]
    fn a_moved_copys_history_names_its_earliest_failure() {
        let with = |failure: &str| {
            let raw = serde_json::json!({ FAILURE_ATTRIBUTE: {
                "stringValue": failure, "dataType": "String" } })
            .to_string();
            let raw: Box<serde_json::value::RawValue> = serde_json::from_str(&raw).expect("raw");
            let message = Message {
                attributes: crate::edge::MessageAttributes::Raw(&raw),
                ..Message::new("m1", "{}")
            };
            earlier_attempt_ms(&message)
        };
        let moved_twice = serde_json::json!({
            "reason": "retries_exhausted", "first_failure_ms": 5_000, "last_failure_ms": 9_000,
            "history": [{ "reason": "invalid_body", "last_failure_ms": 3_000 }],
        });
        assert_eq!(with(&moved_twice.to_string()), Some(3_000));
        assert_eq!(with(r#"{"reason":"x","history":[{"reason":7}]}"#), Some(0));
        assert_eq!(with("not json"), Some(0));
        assert_eq!(earlier_attempt_ms(&Message::new("m1", "{}")), None);
    }

    /// A copy whose failure attribute cannot be read reads as a move for an unreadable reason, at
    /// the oldest time: what the next move's attribute then says.
    #[test]
    fn an_unreadable_failure_reads_as_an_unreadable_move_of_unknown_time() {
        let raw = serde_json::json!({ FAILURE_ATTRIBUTE: {
            "stringValue": "not json", "dataType": "String" } })
        .to_string();
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(&raw).expect("raw");
        let message = Message {
            attributes: crate::edge::MessageAttributes::Raw(&raw),
            ..Message::new("m1", "{}")
        };
        let failure = Failure::of(&message).expect("a moved copy");
        assert_eq!(failure.reason, "unreadable");
        assert_eq!(failure.first_failure_ms, Some(0));
    }

    /// Exactly SQS's character set, at each edge of its ranges.
    #[test]
    fn sqs_allows_exactly_its_character_set() {
        for (c, allowed) in [
            ('\u{0}', false),
            ('\u{8}', false),
            ('\u{9}', true),
            ('\u{a}', true),
            ('\u{b}', false),
            ('\u{d}', true),
            ('\u{1f}', false),
            ('\u{20}', true),
            ('\u{d7ff}', true),
            ('\u{e000}', true),
            ('\u{fffd}', true),
            ('\u{fffe}', false),
            ('\u{10000}', true),
            ('\u{10ffff}', true),
        ] {
            assert_eq!(sqs_allows(c), allowed, "{c:?}");
        }
    }

    /// Texts are cleaned and cut at their bound; a key is kept as it is up to its bound and in
    /// SQS's characters, and past either is cut on a character boundary and hashed.
    #[test]
    fn texts_are_cut_and_keys_hashed_at_their_bounds() {
        assert_eq!(bounded("abcdef", 3), "abc...");
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("a\u{0}c", 5), "a\u{fffd}c");
        let hashed = |key: &str| {
            let mut hash = lambda_kit::Fnv1a::new();
            hash.write(key.as_bytes());
            format!("{:016x}", hash.finish())
        };
        assert_eq!(attribute_key("o-1"), "o-1");
        let longest = "k".repeat(MAX_KEY_BYTES);
        assert_eq!(attribute_key(&longest), longest);
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            attribute_key(&long),
            format!("{}...#{}", "k".repeat(200), hashed(&long))
        );
        let odd = "o-\u{0}1";
        assert_eq!(
            attribute_key(odd),
            format!("o-\u{fffd}1...#{}", hashed(odd))
        );
        // Three bytes a character: 200 bytes is no boundary, 198 is.
        let wide = "\u{20ac}".repeat(100);
        assert_eq!(
            attribute_key(&wide),
            format!("{}...#{}", "\u{20ac}".repeat(66), hashed(&wide))
        );
    }

    /// A first move says nothing of earlier moves; a second says one.
    #[test]
    fn only_a_copy_moved_before_counts_its_earlier_moves() {
        let first = Failure {
            reason: "invalid_body".into(),
            ..Failure::default()
        };
        let json = serde_json::to_value(&first).expect("json");
        assert!(json.get("earlier_moves").is_none(), "{json}");
        let again = Failure {
            reason: "retries_exhausted".into(),
            ..Failure::default()
        }
        .after(Some(first));
        assert_eq!(
            serde_json::to_value(&again).expect("json")["earlier_moves"],
            1
        );
    }

    /// A move that fails is never acknowledged: the record is RETRY, reported, and backs off
    /// (not visibility 0, which would spend receives).
    #[tokio::test]
    async fn a_failed_move_is_retry_with_its_backoff() {
        let refusing = Recorder {
            refuse: vec!["m2"],
            ..Recorder::default()
        };
        let (failed, report, port, visibility) =
            run(&[("m1", "ok"), ("m2", "bad")], refusing).await;
        assert_eq!(failed, ["m2"]);
        assert_eq!(report.statuses[1].outcome(), Decision::Retry);
        assert!(port.sent.lock().unwrap().is_empty());
        let changes = visibility.0.lock().unwrap();
        assert_eq!(changes.len(), 1);
        assert!(changes[0].1 >= 2, "backed off: {:?}", changes[0]);
    }
}
