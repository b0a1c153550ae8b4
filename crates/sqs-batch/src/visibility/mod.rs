//! Visibility backoff: after a batch, reported records get their retry timing from
//! [`BackoffPolicy`] through `ChangeMessageVisibilityBatch` calls of up to 10 records, run
//! concurrently and bounded by the time the invocation has left. A failed or unfinished call is
//! logged and changes nothing else: the record is reported either way, and the queue's own
//! visibility timeout then applies.
//!
//! # Example
//!
//! A port of your own (a queue that is not SQS, or a test's record of the calls): it gets up to
//! [`BATCH_LIMIT`] changes of one queue a call and answers with those it could not apply.
//!
//! ```
//! use std::sync::Mutex;
//! use sqs_batch::visibility::{Change, ChangeFailure, VisibilityPort};
//!
//! #[derive(Default)]
//! struct Recorded(Mutex<Vec<(String, u64)>>);
//!
//! impl VisibilityPort for Recorded {
//!     async fn change(&self, _queue_url: &str, changes: &[Change<'_>]) -> Vec<ChangeFailure> {
//!         let mut seen = self.0.lock().unwrap();
//!         seen.extend(changes.iter().map(|c| (c.message_id.to_owned(), c.seconds)));
//!         Vec::new() // every change applied
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let port = Recorded::default();
//! let change = Change { message_id: "m-1", receipt_handle: "rh-1", seconds: 30 };
//! assert!(port.change("https://sqs.example/orders", &[change]).await.is_empty());
//! assert_eq!(*port.0.lock().unwrap(), [("m-1".to_owned(), 30)]);
//! # });
//! ```

#[cfg(feature = "visibility")]
pub mod sqs;

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tracing::warn;

use crate::backoff::BackoffPolicy;
use crate::edge::Message;
use crate::processor::BatchReport;

#[cfg(feature = "visibility")]
pub use sqs::SqsVisibility;

/// SQS takes at most 10 entries per `ChangeMessageVisibilityBatch`.
pub const BATCH_LIMIT: usize = 10;

/// One visibility change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change<'a> {
    /// The record's message id (for the log).
    pub message_id: &'a str,
    /// The receipt handle SQS gave the receive.
    pub receipt_handle: &'a str,
    /// The new visibility timeout.
    pub seconds: u64,
}

/// An entry SQS did not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeFailure {
    /// The record's message id.
    pub message_id: String,
    /// What SQS or the call said.
    pub reason: String,
}

/// The port: change the visibility of up to [`BATCH_LIMIT`] messages of one queue.
pub trait VisibilityPort: Send + Sync {
    /// Applies `changes` to the queue at `queue_url`; returns the entries that failed.
    fn change(
        &self,
        queue_url: &str,
        changes: &[Change<'_>],
    ) -> impl Future<Output = Vec<ChangeFailure>> + Send;
}

/// No visibility port: the type to name when a function runs without backoff.
#[derive(Debug, Clone, Copy)]
pub enum NoVisibility {}

impl VisibilityPort for NoVisibility {
    async fn change(&self, _queue_url: &str, _changes: &[Change<'_>]) -> Vec<ChangeFailure> {
        match *self {}
    }
}

/// The queue URL of an SQS queue ARN (`arn:PARTITION:sqs:REGION:ACCOUNT:NAME`).
pub(crate) fn queue_url(arn: &str) -> Option<String> {
    let mut parts = arn.split(':');
    let (Some("arn"), Some(partition), Some("sqs"), Some(region), Some(account), Some(name), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if region.is_empty() || account.is_empty() || name.is_empty() {
        return None;
    }
    let domain = match partition {
        "aws-cn" => "amazonaws.com.cn",
        _ => "amazonaws.com",
    };
    Some(format!("https://sqs.{region}.{domain}/{account}/{name}"))
}

/// The changes a report calls for, in batch order.
pub(crate) fn changes<'a>(
    policy: &BackoffPolicy,
    batch: &'a [Message<'a>],
    report: &BatchReport,
    now_ms: u64,
    mut random: impl FnMut() -> u64,
) -> Vec<Change<'a>> {
    batch
        .iter()
        .zip(&report.statuses)
        .filter_map(|(message, status)| {
            let seconds =
                policy.visibility(status, message.receive_count.unwrap_or(1), now_ms, random())?;
            Some(Change {
                message_id: message.message_id,
                receipt_handle: message.receipt_handle?,
                seconds,
            })
        })
        .collect()
}

/// The most `ChangeMessageVisibilityBatch` calls in flight at once (a batch of 10,000 records
/// reports up to 1,000 calls' worth).
pub(crate) const MAX_CALLS_IN_FLIGHT: usize = 16;

/// Applies the report's visibility changes to the queue, in calls of up to ten entries run
/// concurrently, within `budget`: calls not finished by then are dropped and logged, and the
/// queue's own visibility timeout applies to their records. The response must leave before the
/// invocation's deadline whatever SQS does; Lambda would discard a late one and retry the
/// whole batch. Failures are logged only.
pub async fn apply<V: VisibilityPort>(
    port: &V,
    policy: &BackoffPolicy,
    queue_arn: Option<&str>,
    batch: &[Message<'_>],
    report: &BatchReport,
    now_ms: u64,
    budget: Duration,
) {
    let changes = changes(policy, batch, report, now_ms, || fastrand::u64(..));
    apply_changes(port, queue_arn, &changes, budget).await;
}

/// Applies `changes` to the queue of `queue_arn`, as [`apply`] does.
pub(crate) async fn apply_changes<V: VisibilityPort>(
    port: &V,
    queue_arn: Option<&str>,
    changes: &[Change<'_>],
    budget: Duration,
) {
    if changes.is_empty() {
        return;
    }
    let Some(url) = queue_arn.and_then(queue_url) else {
        warn!(
            queue_arn,
            "no usable queue ARN on the event: visibility backoff skipped"
        );
        return;
    };
    let mut chunks = changes.chunks(BATCH_LIMIT).enumerate();
    let mut done = vec![false; changes.len().div_ceil(BATCH_LIMIT)];
    let mut in_flight = FuturesUnordered::new();
    let calls = async {
        for (index, chunk) in chunks.by_ref().take(MAX_CALLS_IN_FLIGHT) {
            in_flight.push(call(port, &url, index, chunk));
        }
        while let Some((index, failures)) = in_flight.next().await {
            done[index] = true;
            for failure in failures {
                warn!(
                    message_id = failure.message_id,
                    reason = failure.reason,
                    "visibility change failed; the queue's visibility timeout applies"
                );
            }
            if let Some((index, chunk)) = chunks.next() {
                in_flight.push(call(port, &url, index, chunk));
            }
        }
    };
    if tokio::time::timeout(budget, calls).await.is_err() {
        let skipped: Vec<&str> = changes
            .chunks(BATCH_LIMIT)
            .zip(&done)
            .filter(|(_, done)| !**done)
            .flat_map(|(chunk, _)| chunk.iter().map(|c| c.message_id))
            .collect();
        warn!(
            skipped = skipped.len(),
            budget_ms = budget.as_millis() as u64,
            message_ids = %skipped.join(","),
            "visibility changes not made in the time left before the deadline; the queue's \
             visibility timeout applies to these records"
        );
    }
}

async fn call<'c, V: VisibilityPort>(
    port: &V,
    url: &str,
    index: usize,
    chunk: &'c [Change<'c>],
) -> (usize, Vec<ChangeFailure>) {
    (index, port.change(url, chunk).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::QueueKind;
    use crate::processor::{RecordStatus, Verdict};
    use std::sync::Mutex;

    #[test]
    fn queue_urls_come_from_arns() {
        assert_eq!(
            queue_url("arn:aws:sqs:eu-west-1:123456789012:orders.fifo").as_deref(),
            Some("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo")
        );
        assert_eq!(
            queue_url("arn:aws-cn:sqs:cn-north-1:123456789012:q").as_deref(),
            Some("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q")
        );
        for bad in [
            "",
            "arn:aws:sns:us-east-1:1:t",
            "arn:aws:sqs:us-east-1:1",
            "arn:aws:sqs::1:q",
            "x:aws:sqs:r:1:q:extra",
        ] {
            assert_eq!(queue_url(bad), None, "{bad}");
        }
    }

    /// One call: the queue URL and its (message id, seconds) entries.
    type Call = (String, Vec<(String, u64)>);

    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<Call>>,
    }

    impl VisibilityPort for Recorder {
        async fn change(&self, queue_url: &str, changes: &[Change<'_>]) -> Vec<ChangeFailure> {
            let entries = changes
                .iter()
                .map(|c| (c.message_id.to_owned(), c.seconds))
                .collect();
            self.calls
                .lock()
                .unwrap()
                .push((queue_url.to_owned(), entries));
            vec![ChangeFailure {
                message_id: changes[0].message_id.to_owned(),
                reason: "test".into(),
            }]
        }
    }

    #[tokio::test]
    async fn reported_records_are_changed_in_calls_of_ten() {
        let ids: Vec<String> = (0..23).map(|i| format!("m{i}")).collect();
        let batch: Vec<Message<'_>> = ids
            .iter()
            .map(|id| Message {
                receipt_handle: Some("rh"),
                ..Message::new(id, "")
            })
            .collect();
        let mut statuses: Vec<RecordStatus> = (0..23)
            .map(|_| RecordStatus::Handled(Verdict::poison("bad")))
            .collect();
        statuses[0] = RecordStatus::Handled(Verdict::ack("charged"));
        let report = BatchReport {
            kind: QueueKind::Standard,
            statuses,
        };
        let recorder = Recorder::default();
        let policy = BackoffPolicy {
            base_s: 5,
            cap_s: 900,
        };
        apply(
            &recorder,
            &policy,
            Some("arn:aws:sqs:us-east-1:1:q"),
            &batch,
            &report,
            0,
            Duration::from_secs(1),
        )
        .await;
        let calls = recorder.calls.lock().unwrap();
        let sizes: Vec<usize> = calls.iter().map(|(_, e)| e.len()).collect();
        assert_eq!(sizes, [10, 10, 2]);
        assert!(
            calls
                .iter()
                .all(|(url, _)| url == "https://sqs.us-east-1.amazonaws.com/1/q")
        );
        assert_eq!(calls[0].1[0], ("m1".to_owned(), 0));
    }
}
