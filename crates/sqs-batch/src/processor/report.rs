//! What became of each record of a batch: its [`RecordStatus`], and the batch's [`BatchReport`]
//! that the response, the settling and the metrics are built from.

use crate::edge::{Message, QueueKind};

use super::record::{Decision, Verdict};

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
    /// Not started: the runtime is stopping ([`BatchProcessor::stop_starting`](super::BatchProcessor::stop_starting), a worker's
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
/// runtime stopped waiting ([`BatchProcessor::abandon_running`](super::BatchProcessor::abandon_running)).
pub const ABANDONED: &str = "abandoned";
