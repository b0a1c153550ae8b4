//! The guard's outcome as an SQS record's verdict (feature `sqs-batch`): the default mapping,
//! so a handler need not write one arm per outcome.

use std::fmt::Display;

use sqs_batch::Verdict;

use crate::InvalidClaim;
use crate::guard::{Effect, Guarded, Unsettled};
use crate::once::Outcome;

/// A claim that could not be asked for: no redelivery can fix the record.
fn invalid_verdict(invalid: &InvalidClaim) -> Verdict {
    Verdict::poison(invalid.reason()).with_detail(invalid.to_string())
}

impl<T, E: Display> Guarded<T, E> {
    /// The verdict for the record whose work this guarded: acknowledged only when the work is
    /// done (now, before, or by a duplicate); POISON only when no delivery can ever succeed (the
    /// key belongs to another payload, or was refused for good); RETRY for everything else, an
    /// outcome added in a later release included.
    ///
    /// | outcome | verdict | reason |
    /// |---|---|---|
    /// | `Performed` | ACK | `done` |
    /// | `Reconciled` | ACK | `done_before` |
    /// | `Duplicate` | ACK | `duplicate` |
    /// | `Replayed` | ACK | `duplicate` |
    /// | `Busy` | RETRY, after the holder's lease | `busy` |
    /// | `Pending` | RETRY | `pending` |
    /// | `Conflict` | POISON | `key_conflict` |
    /// | `Rejected` | POISON | `rejected` |
    /// | `Failed` | RETRY, the error as detail | `failed` |
    /// | `NeedsReconciliation` | RETRY, why as detail | `needs_reconciliation` |
    /// | `Store` | RETRY, the error chain as detail | `store_unavailable` |
    /// | `LeaseLost` | RETRY | `lease_lost` |
    /// | `Invalid` | POISON, why as detail | `invalid_key`, `invalid_payload` |
    ///
    /// A work whose own errors can be final (an address the provider refuses) matches that
    /// error first and calls this for the rest.
    pub fn into_verdict(self) -> Verdict {
        match self {
            Self::Performed(_) => Verdict::ack("done"),
            Self::Reconciled => Verdict::ack("done_before"),
            Self::Duplicate | Self::Replayed(_) => Verdict::ack("duplicate"),
            Self::Busy { until_ms } => Verdict::retry("busy").with_retry_after_ms(until_ms),
            Self::Pending => Verdict::retry("pending"),
            Self::Conflict => Verdict::poison("key_conflict"),
            Self::Rejected => Verdict::poison("rejected"),
            Self::Failed { error, effect } => Verdict::retry("failed").with_detail(match effect {
                Effect::None => error.to_string(),
                Effect::Maybe => format!("{error} (it may have taken effect)"),
            }),
            Self::NeedsReconciliation { why, .. } => Verdict::retry("needs_reconciliation")
                .with_detail(match why {
                    Unsettled::LookUpFailed(error) => format!("the look-up failed: {error}"),
                    Unsettled::NotFound => "the other system no longer knows the key".to_owned(),
                    Unsettled::Unclear => "the other system's answer was not understood".to_owned(),
                }),
            Self::Store(error) => {
                Verdict::retry("store_unavailable").with_detail(lambda_kit::error_chain(&error))
            }
            Self::LeaseLost => Verdict::retry("lease_lost"),
            Self::Invalid(invalid) => invalid_verdict(&invalid),
        }
    }
}

impl<T, E: Display> Outcome<T, E> {
    /// The verdict for the record whose work [`once`](fn@crate::once) guarded: acknowledged
    /// only when the work is done (now or before); POISON only for another payload's key, which
    /// no delivery of this one can take; RETRY for everything else, an outcome added in a later
    /// release included.
    ///
    /// | outcome | verdict | reason |
    /// |---|---|---|
    /// | `Performed` | ACK | `done` |
    /// | `Duplicate`, `Replayed` | ACK | `duplicate` |
    /// | `Busy` | RETRY, after the holder's lease | `busy` |
    /// | `Conflict` | POISON | `key_conflict` |
    /// | `Failed` | RETRY, the error as detail | `failed` |
    /// | `Store` | RETRY, the error chain as detail | `store_unavailable` |
    /// | `LeaseLost` | RETRY | `lease_lost` |
    /// | `Invalid` | POISON, why as detail | `invalid_key`, `invalid_payload` |
    ///
    /// ```
    /// use idempotency::Outcome;
    /// use sqs_batch::processor::Decision;
    ///
    /// let verdict = Outcome::<(), &str>::Busy { until_ms: 9 }.into_verdict();
    /// assert_eq!((verdict.outcome, verdict.reason), (Decision::Retry, "busy"));
    /// assert_eq!(verdict.retry_after_ms, Some(9));
    /// ```
    pub fn into_verdict(self) -> Verdict {
        match self {
            Self::Performed(_) => Verdict::ack("done"),
            Self::Duplicate | Self::Replayed(_) => Verdict::ack("duplicate"),
            Self::Busy { until_ms } => Verdict::retry("busy").with_retry_after_ms(until_ms),
            Self::Conflict => Verdict::poison("key_conflict"),
            Self::Failed(error) => Verdict::retry("failed").with_detail(error.to_string()),
            Self::Store(error) => {
                Verdict::retry("store_unavailable").with_detail(lambda_kit::error_chain(&error))
            }
            Self::LeaseLost => Verdict::retry("lease_lost"),
            Self::Invalid(invalid) => invalid_verdict(&invalid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreError;
    use sqs_batch::processor::Decision;

    fn verdict(
        outcome: Guarded<u8, &str>,
    ) -> (Decision, &'static str, Option<String>, Option<u64>) {
        let v = outcome.into_verdict();
        (
            v.outcome,
            v.reason,
            v.detail.map(|d| d.into_owned()),
            v.retry_after_ms,
        )
    }

    /// `once`'s outcomes map as `Guarded`'s of the same name do.
    #[test]
    fn once_outcomes_map_as_the_guards_of_the_same_name() {
        use crate::Outcome as OnceOutcome;
        type Pair = (OnceOutcome<u8, &'static str>, Guarded<u8, &'static str>);
        let pairs: Vec<Pair> = vec![
            (OnceOutcome::Performed(1), Guarded::Performed(1)),
            (OnceOutcome::Duplicate, Guarded::Duplicate),
            (OnceOutcome::Replayed(1), Guarded::Replayed(1)),
            (
                OnceOutcome::Busy { until_ms: 9 },
                Guarded::Busy { until_ms: 9 },
            ),
            (OnceOutcome::Conflict, Guarded::Conflict),
            (
                OnceOutcome::Failed("down"),
                Guarded::Failed {
                    error: "down",
                    effect: Effect::None,
                },
            ),
            (
                OnceOutcome::Store(StoreError::Malformed("x".to_owned())),
                Guarded::Store(StoreError::Malformed("x".to_owned())),
            ),
            (OnceOutcome::LeaseLost, Guarded::LeaseLost),
        ];
        for (once, guarded) in pairs {
            let label = format!("{once:?}");
            let (a, b) = (once.into_verdict(), guarded.into_verdict());
            assert_eq!(
                (a.outcome, a.reason, a.detail, a.retry_after_ms),
                (b.outcome, b.reason, b.detail, b.retry_after_ms),
                "{label}"
            );
        }
    }

    /// Two records with one key in one batch (a producer's send retried): the second waits
    /// for the first and sees its result, a duplicate to acknowledge, instead of meeting its
    /// live claim and coming back after the lease. The work runs once.
    #[tokio::test]
    async fn two_records_of_one_key_in_one_batch_run_one_after_the_other() {
        use sqs_batch::edge::{Message, QueueKind};
        use sqs_batch::{BatchOptions, BatchProcessor, RecordHandler, processor::Invocation};
        use std::sync::atomic::{AtomicUsize, Ordering};

        struct Welcome<'a> {
            store: &'a crate::MemoryStore,
            runs: &'a AtomicUsize,
        }
        impl RecordHandler for Welcome<'_> {
            async fn handle(&self, message: &Message<'_>, _: Invocation) -> Verdict {
                let work = || async {
                    self.runs.fetch_add(1, Ordering::SeqCst);
                    // Long enough for the other record to reach its claim meanwhile.
                    for _ in 0..10 {
                        tokio::task::yield_now().await;
                    }
                    Ok::<_, String>(())
                };
                crate::once(self.store, message.body, &message.body, work)
                    .await
                    .into_verdict()
            }
        }
        let (store, runs) = (crate::MemoryStore::default(), AtomicUsize::new(0));
        let processor = BatchProcessor::new(
            Welcome {
                store: &store,
                runs: &runs,
            },
            lambda_kit::SystemClock,
            BatchOptions::default(),
        );
        let batch = [Message::new("m-1", "u-1"), Message::new("m-2", "u-1")];
        let deadline_ms = lambda_kit::Clock::now_ms(&lambda_kit::SystemClock) + 60_000;
        let report = processor
            .process(&batch, QueueKind::Standard, deadline_ms)
            .await;
        assert_eq!(
            report.failed_ids(&batch).count(),
            0,
            "{:?}",
            report.statuses
        );
        assert_eq!(report.reasons(), [("done", 1), ("duplicate", 1)]);
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// An empty key is POISON at its first receive, with its reason: no redelivery can give the
    /// record a key, and a RETRY would spend every receive as a "store outage" on the way to the
    /// DLQ.
    #[tokio::test]
    async fn an_empty_key_is_poison_with_its_reason_not_a_store_outage() {
        let store = crate::MemoryStore::default();
        let verdict = crate::once(&store, "", &"payload", || async { Ok::<_, String>(()) })
            .await
            .into_verdict();
        assert_eq!(
            (verdict.outcome, verdict.reason),
            (Decision::Poison, "invalid_key")
        );
        let detail = verdict.detail.expect("the reason's detail");
        assert!(detail.contains("key is empty"), "{detail}");
    }

    #[test]
    fn only_done_work_is_acknowledged_and_only_a_settled_refusal_is_poison() {
        use Decision::{Ack, Poison, Retry};
        let cases: Vec<(Guarded<u8, &str>, _)> = vec![
            (Guarded::Performed(1), (Ack, "done", None, None)),
            (Guarded::Reconciled, (Ack, "done_before", None, None)),
            (Guarded::Duplicate, (Ack, "duplicate", None, None)),
            (Guarded::Replayed(1), (Ack, "duplicate", None, None)),
            (
                Guarded::Busy { until_ms: 9 },
                (Retry, "busy", None, Some(9)),
            ),
            (Guarded::Pending, (Retry, "pending", None, None)),
            (Guarded::Conflict, (Poison, "key_conflict", None, None)),
            (Guarded::Rejected, (Poison, "rejected", None, None)),
            (
                Guarded::Failed {
                    error: "down",
                    effect: Effect::None,
                },
                (Retry, "failed", Some("down".to_owned()), None),
            ),
            (
                Guarded::Failed {
                    error: "timeout",
                    effect: Effect::Maybe,
                },
                (
                    Retry,
                    "failed",
                    Some("timeout (it may have taken effect)".to_owned()),
                    None,
                ),
            ),
            (
                Guarded::NeedsReconciliation {
                    why: Unsettled::LookUpFailed("503"),
                    first_attempt_ms: 0,
                },
                (
                    Retry,
                    "needs_reconciliation",
                    Some("the look-up failed: 503".to_owned()),
                    None,
                ),
            ),
            (
                Guarded::NeedsReconciliation {
                    why: Unsettled::NotFound,
                    first_attempt_ms: 0,
                },
                (
                    Retry,
                    "needs_reconciliation",
                    Some("the other system no longer knows the key".to_owned()),
                    None,
                ),
            ),
            (
                Guarded::NeedsReconciliation {
                    why: Unsettled::Unclear,
                    first_attempt_ms: 0,
                },
                (
                    Retry,
                    "needs_reconciliation",
                    Some("the other system's answer was not understood".to_owned()),
                    None,
                ),
            ),
            (
                Guarded::Store(StoreError::Malformed("no status".to_owned())),
                (
                    Retry,
                    "store_unavailable",
                    Some("a stored item is malformed: no status".to_owned()),
                    None,
                ),
            ),
            (Guarded::LeaseLost, (Retry, "lease_lost", None, None)),
        ];
        for (outcome, expected) in cases {
            let name = format!("{outcome:?}");
            assert_eq!(verdict(outcome), expected, "{name}");
        }
    }
}
