//! Recovery after an outage: records that wait for a dependency come back when it does.
//!
//! The survival schedule ([`crate::backoff`]) keeps a record through a day-long outage by sending
//! it away for up to its cap (15 minutes by default) at a time; on its own it also keeps the
//! record away for up to that long after the outage ends. A handler that says a record failed
//! because a dependency every record needs is down ([`Health::Down`]) lets the container do
//! better, with what it already holds: the receipt handle of every record it backed off stays
//! valid until that record is received again.
//!
//! - **Probe.** Of the records backed off for an outage, one per container at a time comes back
//!   after the probe interval (`SQS_BATCH_PROBE_SECONDS`, 30 s) instead of its schedule, so the
//!   container meets the dependency again about that often, whatever the schedule has grown to.
//!   A record probes only when the time it has already been away pays for it
//!   ([`RecoveryPolicy::may_probe`]): its give-up receive can then come no earlier than if it
//!   had waited out the floor of every delay of the schedule, so a probe never brings an order
//!   closer to the DLQ than the schedule guarantees. What it spends is the jitter above each
//!   floor, which the schedule's delays carry (a quarter of the cap on average): a backlog of a
//!   few dozen records keeps a probe going through a day-long outage; a smaller one probes less
//!   often, and its records still come back on their schedule.
//! - **Park.** The others keep their schedule, and their receipt handles are kept with the time
//!   they come back (at most [`RecoveryPolicy::max_parked`]; the one that comes back soonest is
//!   dropped first, as it loses the least).
//! - **Wake.** A batch with a record whose handler found the dependency up ([`Health::Up`])
//!   makes parked records visible again (`ChangeMessageVisibilityBatch` to 0), and so does
//!   every later batch while the dependency is not down again: at most
//!   `SQS_BATCH_MAX_CONCURRENCY` records for each second since the container's last wake (ten
//!   seconds' worth at most, one at the return), so the queue refills at the pace a container
//!   runs records, not all at once. A handle that is no longer valid (its record was received again meanwhile) fails
//!   harmlessly: counted and dropped. A record another consumer holds is not charged twice
//!   because of a wake: its work is claimed, and a copy received meanwhile finds the claim.
//!
//! A container recycled while it holds parked handles loses only the early wake: each record
//! still comes back on its schedule.
//!
//! # Example
//!
//! ```
//! use sqs_batch::backoff::BackoffPolicy;
//! use sqs_batch::recovery::RecoveryPolicy;
//!
//! let schedule = BackoffPolicy::new(5, 900);
//! let recovery = RecoveryPolicy::new(30);
//! const MINUTE: u64 = 60_000;
//! // At its 10th receive a record has floors of 2+5+10+20+40+80+160+320+450+450 = 1,537 s
//! // behind it: away 20 minutes, a 30 s probe would bring its give-up closer than the
//! // schedule allows; away 30 minutes, the probe is paid for.
//! assert!(!recovery.may_probe(&schedule, 10, Some(0), 20 * MINUTE));
//! assert!(recovery.may_probe(&schedule, 10, Some(0), 30 * MINUTE));
//! // Without its first receive's time a record never probes.
//! assert!(!recovery.may_probe(&schedule, 10, None, 30 * MINUTE));
//! ```

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use lambda_kit::{Env, EnvError};

use crate::backoff::{BackoffPolicy, MAX_VISIBILITY_S};
use crate::edge::Batch;
use crate::processor::{Decision, Health, RecordStatus, Verdict};
use crate::visibility::{self, Change, VisibilityPort};

/// Records in a row that must find a dependency down before a container holds its records back
/// and probes it: one failure (a throttled write, a single 503) is the schedule's to retry.
pub const TRIP_AFTER: u32 = 3;

/// How far the container's clock may be from SQS's, which stamps the first receive: an early
/// return is paid for with this much to spare (the function's clock-skew allowance between two
/// clocks, `PAYMENT_CLOCK_SKEW_MS`'s default; the simulator's skewed containers are 30 s off).
const CLOCK_MARGIN_MS: u64 = 60_000;

/// How records that wait for a dependency come back: the probe interval and how many receipt
/// handles a container keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryPolicy {
    /// How long the probe record stays away, seconds.
    pub probe_s: u64,
    /// The most receipt handles kept per container (about 1 KB each).
    pub max_parked: usize,
}

impl RecoveryPolicy {
    /// The default probe interval, seconds.
    pub const PROBE_S: u64 = 30;
    /// The default bound on kept receipt handles.
    pub const MAX_PARKED: usize = 1_000;

    /// A probe every `probe_s` seconds, [`Self::MAX_PARKED`] handles kept.
    pub const fn new(probe_s: u64) -> Self {
        Self {
            probe_s,
            max_parked: Self::MAX_PARKED,
        }
    }

    /// `SQS_BATCH_PROBE_SECONDS` (30; 0 turns probing and waking off), under 12 hours.
    pub fn from_env(env: &Env<'_>) -> Result<Option<Self>, EnvError> {
        let probe_s = env.ranged(
            "SQS_BATCH_PROBE_SECONDS",
            Self::PROBE_S,
            0,
            MAX_VISIBILITY_S,
        )?;
        Ok((probe_s > 0).then(|| Self::new(probe_s)))
    }

    /// Whether a record at its `receive_count`-th receive, first received at `first_receive_ms`
    /// (SQS's clock), may come back after the probe interval at `now_ms` without reaching the
    /// DLQ sooner than under `schedule` ([`may_come_back_at`]).
    pub fn may_probe(
        &self,
        schedule: &BackoffPolicy,
        receive_count: u32,
        first_receive_ms: Option<u64>,
        now_ms: u64,
    ) -> bool {
        may_come_back_at(
            schedule,
            receive_count,
            first_receive_ms,
            now_ms.saturating_add(self.probe_s.saturating_mul(1_000)),
        )
    }
}

/// Whether a record failing at its `receive_count`-th receive, first received at
/// `first_receive_ms` (SQS's clock), may be delivered again at `back_ms` without reaching the
/// DLQ sooner than under `schedule`: the time from its first receive to `back_ms` covers the
/// floors of its delays so far, this receive's included (with a margin for the clocks).
///
/// Under the schedule alone its give-up receive comes no sooner than its first receive plus the
/// floors of every delay before it; back at `back_ms`, no sooner than `back_ms` plus the floors
/// of the delays after this receive. The first is never later than the second exactly when this
/// holds. A record the function brings back early (a probe, a wake) is judged again at its next
/// receive, so no sequence of early returns brings its give-up closer: it spends only the
/// jitter the schedule's delays carry above their floors, and the time it was being handled.
pub fn may_come_back_at(
    schedule: &BackoffPolicy,
    receive_count: u32,
    first_receive_ms: Option<u64>,
    back_ms: u64,
) -> bool {
    let Some(first_receive_ms) = first_receive_ms else {
        return false;
    };
    let floors_ms = (1..=receive_count.max(1))
        .map(|n| schedule.least_delay(n).saturating_mul(1_000))
        .fold(0u64, u64::saturating_add);
    back_ms
        .saturating_sub(first_receive_ms)
        .saturating_sub(CLOCK_MARGIN_MS)
        >= floors_ms
}

/// The reason of a record held back, not started, while the dependency it needs is down.
pub const DEPENDENCY_DOWN: &str = "dependency_down";

/// Which records of a batch may run ([`Recovery::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admit {
    /// Nothing is down: every record.
    All,
    /// `dependency` is down and this container's probe call is due: one record, then the
    /// others if it found the dependency up.
    Probe {
        /// What is down.
        dependency: &'static str,
    },
    /// `dependency` is down and the probe call was made within the interval: none.
    None {
        /// What is down.
        dependency: &'static str,
    },
}

/// A record held back while `dependency` is down: RETRY [`DEPENDENCY_DOWN`], not started,
/// parked with the others.
pub fn held(dependency: &'static str) -> RecordStatus {
    RecordStatus::Handled(
        Verdict::retry(DEPENDENCY_DOWN)
            .with_health(Health::Down(dependency))
            .with_detail(format!(
                "not started: {dependency} is down for every record; this container probes it \
                 and wakes the records it holds when it is back"
            )),
    )
}

/// What a container's recovery has done since it started, for tests and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryCounts {
    /// Records sent away for the probe interval.
    pub probes: u64,
    /// Records parked (a record parked at two receives counts twice).
    pub parked: u64,
    /// Parked records made visible again.
    pub woken: u64,
    /// Wakes SQS did not apply (a handle no longer valid, a failed call): dropped.
    pub wake_failed: u64,
    /// Handles let go unwoken: past the bound, back on their own, or replaced by a later
    /// receive of the same record.
    pub dropped: u64,
}

/// One container's recovery: its policy, its parked receipt handles and its probe. Shared by
/// every batch the container runs (build it once, with the clients).
#[derive(Debug)]
pub struct Recovery {
    policy: RecoveryPolicy,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Parked records, oldest first.
    parked: VecDeque<Parked>,
    /// Until when this container's probe is away: no other record probes before.
    probe_until_ms: u64,
    /// The dependency whose last word was that it is down, if any.
    down: Option<&'static str>,
    /// Records that found a dependency down since one last found it up.
    downs_in_a_row: u32,
    /// When parked records were last woken, epoch ms.
    last_wake_ms: u64,
    /// When the next record may call it while it is down (the probe call), epoch ms.
    next_call_ms: u64,
    /// When a worker may next receive its probe while a dependency is down, epoch ms.
    next_receive_ms: u64,
    counts: RecoveryCounts,
}

/// A record backed off while its dependency was down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parked {
    pub(crate) queue_url: String,
    pub(crate) message_id: String,
    pub(crate) receipt_handle: String,
    /// When it comes back on its own, epoch ms.
    pub(crate) back_at_ms: u64,
    /// Its receive, and its first receive's time (SQS's clock): when a wake may bring it back
    /// ([`may_come_back_at`]).
    pub(crate) receive_count: u32,
    pub(crate) first_receive_ms: Option<u64>,
}

impl Recovery {
    /// A container's recovery under `policy`, nothing parked.
    pub fn new(policy: RecoveryPolicy) -> Self {
        Self {
            policy,
            state: Mutex::new(State::default()),
        }
    }

    /// Its policy.
    pub fn policy(&self) -> &RecoveryPolicy {
        &self.policy
    }

    /// What it has done so far.
    pub fn counts(&self) -> RecoveryCounts {
        self.lock().counts
    }

    /// How many receipt handles it holds.
    pub fn parked(&self) -> usize {
        self.lock().parked.len()
    }

    /// Whether the last word of a dependency was that it is down: a record waits for it, and
    /// none found it up since.
    pub fn is_down(&self) -> bool {
        self.lock().down.is_some()
    }

    /// Which records of a standard queue's batch may run at `now_ms`: all while nothing is
    /// down; while a dependency is down, one per probe interval per container (the probe call)
    /// and none between, so a container sends the failing dependency at most one record per
    /// interval whatever the batches bring.
    pub fn admit(&self, now_ms: u64) -> Admit {
        let mut state = self.lock();
        let Some(dependency) = state.down else {
            return Admit::All;
        };
        if now_ms < state.next_call_ms {
            return Admit::None { dependency };
        }
        state.next_call_ms = now_ms.saturating_add(self.policy.probe_s.saturating_mul(1_000));
        Admit::Probe { dependency }
    }

    /// For a consumer that chooses when to receive (the worker): while a dependency is down,
    /// `Ok` once per probe interval (take one record, the probe), else how long to wait, ms.
    /// `Ok` at once while nothing is down.
    pub fn receive_slot(&self, now_ms: u64) -> Result<(), u64> {
        let mut state = self.lock();
        if state.down.is_none() {
            return Ok(());
        }
        if now_ms < state.next_receive_ms {
            return Err(state.next_receive_ms - now_ms);
        }
        state.next_receive_ms = now_ms.saturating_add(self.policy.probe_s.saturating_mul(1_000));
        // The record received is the probe call: its batch is admitted ([`Self::admit`]),
        // whatever the call slot's own timing (the two would drift a batch apart otherwise).
        state.next_call_ms = now_ms;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while the lock was held leaves a consistent queue of handles.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adjusts a batch's visibility `changes` (in batch order, from [`visibility::changes`])
    /// for the records whose dependency is down: one may become the probe, the others are
    /// parked. Returns the parked records to wake now, while the dependency is not down: at most
    /// `wake_per_second` for each second since the last wake. A record of this batch is never
    /// among them.
    pub(crate) fn settle_batch(
        &self,
        schedule: &BackoffPolicy,
        batch: &Batch<'_>,
        statuses: &[RecordStatus],
        changes: &mut [Change<'_>],
        now_ms: u64,
        wake_per_second: usize,
    ) -> Vec<Parked> {
        let mut state = self.lock();
        let health = |status: &RecordStatus| verdict(status).and_then(|v| v.health);
        let recovered = statuses
            .iter()
            .any(|status| health(status).is_some_and(|h| h.is_up()));
        if recovered {
            if state.down.is_some() {
                // Back: the first wake brings one second's worth.
                state.last_wake_ms = now_ms.saturating_sub(1_000);
            }
            // The probe's own slot is kept: a dependency that falls again within the interval
            // gets its next probe when the interval ends.
            state.next_receive_ms = 0;
            state.next_call_ms = 0;
            state.down = None;
            state.downs_in_a_row = 0;
        }
        // Parked records come back while their dependency is not down for this container: at a
        // record that found it up, and at every later batch until it is down again; at most
        // `wake_per_second` for each second since the last wake (ten seconds' worth at most).
        let mut wake = Vec::new();
        if (recovered || state.down.is_none()) && !state.parked.is_empty() {
            let seconds = (now_ms.saturating_sub(state.last_wake_ms) / 1_000).clamp(1, 10);
            let budget = wake_per_second.saturating_mul(seconds as usize);
            state.last_wake_ms = now_ms;
            let mut not_yet = Vec::new();
            while wake.len() < budget {
                let Some(parked) = state.parked.pop_front() else {
                    break;
                };
                // One already back on its own needs nothing, and its handle may be stale.
                if parked.back_at_ms <= now_ms {
                    state.counts.dropped += 1;
                    continue;
                }
                // One that has not been away long enough yet would give up sooner than its
                // schedule allows if the dependency fell again: it waits (kept for a later wake).
                if !may_come_back_at(
                    schedule,
                    parked.receive_count,
                    parked.first_receive_ms,
                    now_ms,
                ) {
                    not_yet.push(parked);
                    continue;
                }
                wake.push(parked);
            }
            for parked in not_yet.into_iter().rev() {
                state.parked.push_front(parked);
            }
        }
        let Some(queue_url) = batch.queue_arn.and_then(visibility::queue_url) else {
            return wake;
        };
        // The changes are in batch order: walk the two together.
        let mut changes = changes.iter_mut().peekable();
        for (message, status) in batch.messages.iter().zip(statuses) {
            let Some(receipt_handle) = message.receipt_handle else {
                continue;
            };
            let Some(change) = changes.next_if(|c| c.receipt_handle == receipt_handle) else {
                continue;
            };
            // A batch that found the dependency both up and down says nothing for certain: its
            // records are parked, and the next batch decides. Otherwise the dependency is down
            // for this container once [`TRIP_AFTER`] records in a row found it so.
            if !recovered && let Some(Health::Down(name)) = health(status) {
                state.downs_in_a_row = state.downs_in_a_row.saturating_add(1);
                if state.down.is_none() && state.downs_in_a_row >= TRIP_AFTER {
                    // The records that found it down are this container's calls so far.
                    state.next_call_ms =
                        now_ms.saturating_add(self.policy.probe_s.saturating_mul(1_000));
                    state.down = Some(name);
                } else if state.down.is_some() {
                    state.down = Some(name);
                }
            }
            if !verdict(status).is_some_and(waits_for_dependency) {
                continue;
            }
            let probe_free = state.probe_until_ms <= now_ms && state.down.is_some();
            if probe_free
                && self.policy.probe_s < change.seconds
                && self.policy.may_probe(
                    schedule,
                    message.receive_count.unwrap_or(1),
                    message.first_receive_ms,
                    now_ms,
                )
            {
                change.seconds = self.policy.probe_s;
                state.probe_until_ms =
                    now_ms.saturating_add(self.policy.probe_s.saturating_mul(1_000));
                state.counts.probes += 1;
                continue;
            }
            park(
                &mut state,
                &self.policy,
                Parked {
                    queue_url: queue_url.clone(),
                    message_id: message.message_id.to_owned(),
                    receipt_handle: receipt_handle.to_owned(),
                    back_at_ms: now_ms.saturating_add(change.seconds.saturating_mul(1_000)),
                    receive_count: message.receive_count.unwrap_or(1),
                    first_receive_ms: message.first_receive_ms,
                },
                now_ms,
            );
        }
        wake
    }

    /// Makes `parked` visible again, in calls of up to ten per queue. What SQS does not apply
    /// is counted and dropped: the record comes back on its schedule.
    pub(crate) async fn wake<V: VisibilityPort>(&self, port: &V, parked: &[Parked]) {
        let mut woken = 0u64;
        let mut failed = 0u64;
        let mut start = 0;
        while start < parked.len() {
            let url = &parked[start].queue_url;
            let end = parked[start..]
                .iter()
                .take(visibility::BATCH_LIMIT)
                .take_while(|p| &p.queue_url == url)
                .count()
                + start;
            let changes: Vec<Change<'_>> = parked[start..end]
                .iter()
                .map(|p| Change {
                    message_id: &p.message_id,
                    receipt_handle: &p.receipt_handle,
                    seconds: 0,
                })
                .collect();
            let failures = port.change(url, &changes).await;
            for failure in &failures {
                tracing::debug!(
                    message_id = failure.message_id,
                    reason = failure.reason,
                    "a parked record could not be woken; it comes back on its schedule"
                );
            }
            let missed = failures.len().min(changes.len()) as u64;
            failed += missed;
            woken += changes.len() as u64 - missed;
            start = end;
        }
        if !parked.is_empty() {
            tracing::info!(
                woken,
                failed,
                "a dependency is back: parked records made visible again"
            );
        }
        let mut state = self.lock();
        state.counts.woken += woken;
        state.counts.wake_failed += failed;
    }
}

fn verdict(status: &RecordStatus) -> Option<&Verdict> {
    match status {
        RecordStatus::Handled(verdict) => Some(verdict),
        _ => None,
    }
}

/// A RETRY because a dependency is down, with no time of its own to wait for (a provider's
/// `Retry-After` is kept: the probe and the wake never bring a record back before it).
fn waits_for_dependency(verdict: &Verdict) -> bool {
    verdict.outcome == Decision::Retry
        && verdict.retry_after_ms.is_none()
        && matches!(verdict.health, Some(Health::Down(_)))
}

/// Keeps a record's handle (replacing an older receive's, and dropping those already back on
/// their own, whose handles a wake has no use for), dropping the one that comes back soonest
/// past the bound.
fn park(state: &mut State, policy: &RecoveryPolicy, parked: Parked, now_ms: u64) {
    let before = state.parked.len();
    state.parked.retain(|p| {
        p.back_at_ms > now_ms
            && !(p.message_id == parked.message_id && p.queue_url == parked.queue_url)
    });
    let gone = before - state.parked.len();
    state.counts.dropped += gone as u64;
    state.parked.push_back(parked);
    state.counts.parked += 1;
    while state.parked.len() > policy.max_parked.max(1) {
        let soonest = state
            .parked
            .iter()
            .enumerate()
            .min_by_key(|(_, p)| p.back_at_ms)
            .map(|(i, _)| i);
        if let Some(i) = soonest {
            state.parked.remove(i);
            state.counts.dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;

    use super::*;
    use crate::edge::Message;
    use crate::visibility::ChangeFailure;

    const SCHEDULE: BackoffPolicy = BackoffPolicy::new(5, 900);
    const URL: &str = "https://sqs.us-east-1.amazonaws.com/1/q";
    const ARN: &str = "arn:aws:sqs:us-east-1:1:q";
    const HOUR_MS: u64 = 3_600_000;

    /// The floors of a record's first `n` delays under [`SCHEDULE`], ms.
    fn floors_ms(n: u32) -> u64 {
        (1..=n).map(|k| SCHEDULE.least_delay(k) * 1_000).sum()
    }

    #[test]
    fn a_record_comes_back_early_only_when_its_time_away_covers_its_floors() {
        let first = 1_000_000;
        for n in [1, 2, 5, 9, 40, 200] {
            let enough = first + floors_ms(n) + CLOCK_MARGIN_MS;
            assert!(may_come_back_at(&SCHEDULE, n, Some(first), enough), "{n}");
            assert!(
                !may_come_back_at(&SCHEDULE, n, Some(first), enough - 1),
                "receive {n}: a millisecond short"
            );
        }
        assert!(!may_come_back_at(&SCHEDULE, 3, None, u64::MAX));
        // A first receive in the container's future (a clock behind SQS's) pays nothing.
        assert!(!may_come_back_at(&SCHEDULE, 1, Some(first), first - 10));
        let recovery = RecoveryPolicy::new(30);
        let at = first + floors_ms(4) + CLOCK_MARGIN_MS - 30_000;
        assert!(recovery.may_probe(&SCHEDULE, 4, Some(first), at));
        assert!(!recovery.may_probe(&SCHEDULE, 4, Some(first), at - 1));
    }

    #[test]
    fn the_probe_seconds_come_from_the_environment_and_zero_turns_it_off() {
        let env = |value: &'static str| {
            RecoveryPolicy::from_env(&Env::new(move |name| {
                (name == "SQS_BATCH_PROBE_SECONDS").then(|| value.to_owned())
            }))
        };
        assert_eq!(
            RecoveryPolicy::from_env(&Env::new(|_| None)).unwrap(),
            Some(RecoveryPolicy::new(RecoveryPolicy::PROBE_S))
        );
        assert_eq!(env("45").unwrap(), Some(RecoveryPolicy::new(45)));
        assert_eq!(env("0").unwrap(), None);
        assert!(env("-1").is_err());
        assert!(env("43200").is_err(), "past SQS's 12 hours");
    }

    /// Owned records for a batch: id, receipt handle, receive count, first receive.
    struct Records(Vec<(String, String, u32, u64)>);

    impl Records {
        fn new(ids: std::ops::Range<u32>, receive_count: u32, first_receive_ms: u64) -> Self {
            Self(
                ids.map(|i| {
                    (
                        format!("m{i}"),
                        format!("rh{i}/{receive_count}"),
                        receive_count,
                        first_receive_ms,
                    )
                })
                .collect(),
            )
        }

        /// A standard queue's batch of these records with `bodies`.
        fn batch(&self, bodies: &'static [&'static str]) -> Batch<'_> {
            Batch {
                messages: self
                    .messages()
                    .into_iter()
                    .zip(bodies)
                    .map(|(m, body)| Message { body, ..m })
                    .collect(),
                kind: crate::edge::QueueKind::Standard,
                queue_arn: Some(ARN),
            }
        }

        fn messages(&self) -> Vec<Message<'_>> {
            self.0
                .iter()
                .map(|(id, rh, n, first)| {
                    Message::new(id, "")
                        .with_receive_count(Some(*n))
                        .with_first_receive_ms(Some(*first))
                        .with_receipt_handle(Some(rh))
                })
                .collect()
        }
    }

    fn down() -> RecordStatus {
        RecordStatus::Handled(
            Verdict::retry("payment_not_sent").with_health(Health::Down("payment")),
        )
    }

    fn up() -> RecordStatus {
        RecordStatus::Handled(Verdict::ack("charged").with_health(Health::Up("payment")))
    }

    /// Runs [`Recovery::settle_batch`] on a batch of `statuses` whose changes are the schedule's
    /// (600 s each for RETRY, as a record at the cap might get): the seconds each change ends
    /// with, and the records to wake.
    fn settle(
        recovery: &Recovery,
        records: &Records,
        statuses: &[RecordStatus],
        now_ms: u64,
    ) -> (Vec<u64>, Vec<String>) {
        let batch = Batch {
            messages: records.messages(),
            kind: crate::edge::QueueKind::Standard,
            queue_arn: Some(ARN),
        };
        let mut changes: Vec<Change<'_>> = batch
            .messages
            .iter()
            .map(|m| Change {
                message_id: m.message_id,
                receipt_handle: m.receipt_handle.unwrap_or_default(),
                seconds: 600,
            })
            .collect();
        let wake = recovery.settle_batch(&SCHEDULE, &batch, statuses, &mut changes, now_ms, 4);
        (
            changes.iter().map(|c| c.seconds).collect(),
            wake.into_iter().map(|p| p.message_id).collect(),
        )
    }

    #[test]
    fn one_record_probes_per_interval_and_the_others_are_parked() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        // Received for the 10th time, first three hours ago: well paid for.
        let now = 10 * HOUR_MS;
        let records = Records::new(0..5, 10, now - 3 * HOUR_MS);
        let (seconds, wake) = settle(
            &recovery,
            &records,
            &[down(), down(), down(), down(), down()],
            now,
        );
        // The third record in a row that finds it down makes it down for the container: it
        // probes; the two before it are parked like the rest.
        assert_eq!(seconds, [600, 600, 30, 600, 600]);
        assert!(wake.is_empty());
        assert_eq!(recovery.parked(), 4);
        assert!(recovery.is_down());
        // Within the probe's 30 s no other record probes; after it, one does again.
        let later = Records::new(5..7, 10, now - 3 * HOUR_MS);
        let (seconds, _) = settle(&recovery, &later, &[down(), down()], now + 29_000);
        assert_eq!(seconds, [600, 600]);
        let again = Records::new(7..9, 10, now - 3 * HOUR_MS);
        let (seconds, _) = settle(&recovery, &again, &[down(), down()], now + 30_000);
        assert_eq!(seconds, [30, 600]);
        let counts = recovery.counts();
        assert_eq!((counts.probes, counts.parked), (2, 7));
    }

    #[test]
    fn a_record_whose_time_away_does_not_pay_for_the_probe_keeps_its_schedule() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        let now = 10 * HOUR_MS;
        // Its 10th receive, first received 20 minutes ago: its floors are 1,537 s.
        let records = Records::new(0..2, 10, now - 20 * 60_000);
        let (seconds, _) = settle(&recovery, &records, &[down(), down()], now);
        assert_eq!(seconds, [600, 600]);
        assert_eq!(recovery.counts().probes, 0);
        assert_eq!(recovery.parked(), 2);
    }

    #[test]
    fn records_with_their_own_time_or_another_failure_are_neither_probed_nor_parked() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        let now = 10 * HOUR_MS;
        let records = Records::new(0..4, 10, now - 3 * HOUR_MS);
        let statuses = [
            // The provider said when: its time is kept.
            RecordStatus::Handled(
                Verdict::retry("payment_ambiguous")
                    .with_health(Health::Down("payment"))
                    .with_retry_after_ms(now + 120_000),
            ),
            // A failure of this order alone.
            RecordStatus::Handled(Verdict::retry("busy")),
            RecordStatus::Handled(Verdict::poison("invalid_body")),
            RecordStatus::SkippedDeadline,
        ];
        let (seconds, wake) = settle(&recovery, &records, &statuses, now);
        assert_eq!(seconds, [600, 600, 600, 600]);
        assert!(wake.is_empty());
        assert_eq!(recovery.parked(), 0);
        assert!(!recovery.is_down());
    }

    #[test]
    fn a_record_that_finds_the_dependency_up_wakes_parked_records_a_few_at_a_time() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        let now = 10 * HOUR_MS;
        let first = now - 3 * HOUR_MS;
        let parked = Records::new(0..7, 10, first);
        settle(&recovery, &parked, &vec![down(); 7], now);
        assert_eq!(recovery.parked(), 6, "one probes");
        // The probe comes back and is charged; another record of its batch is still down (a
        // flap): it is parked, never woken by its own batch.
        let batch = Records::new(100..102, 11, first);
        let (seconds, wake) = settle(&recovery, &batch, &[up(), down()], now + 31_000);
        assert_eq!(
            wake,
            ["m0", "m1", "m3", "m4"],
            "the oldest first, four at once"
        );
        assert_eq!(seconds, [600, 600], "no probe in a batch that found it up");
        assert!(!recovery.is_down());
        let next = Records::new(200..201, 1, now);
        let (_, wake) = settle(&recovery, &next, &[up()], now + 32_000);
        assert_eq!(wake, ["m5", "m6", "m101"]);
        assert_eq!(recovery.parked(), 0);
    }

    #[test]
    fn a_wake_leaves_records_not_yet_paid_for_and_drops_those_already_back() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        let now = 10 * HOUR_MS;
        // m0 at its 10th receive, away long enough; m1 at its 10th, first received 20 minutes
        // ago (floors 1,537 s); m2 at its 1st, back on its own after its 600 s. The provider is
        // down for the container meanwhile, its probe away.
        recovery.lock().probe_until_ms = u64::MAX;
        recovery.lock().down = Some("payment");
        let statuses = [down()];
        settle(
            &recovery,
            &Records::new(0..1, 10, now - 3 * HOUR_MS),
            &statuses,
            now,
        );
        recovery.lock().probe_until_ms = u64::MAX;
        settle(
            &recovery,
            &Records::new(1..2, 10, now - 20 * 60_000),
            &statuses,
            now,
        );
        settle(
            &recovery,
            &Records::new(2..3, 1, now),
            &statuses,
            now - 600_000,
        );
        let (_, wake) = settle(
            &recovery,
            &Records::new(9..10, 1, now),
            &[up()],
            now + 1_000,
        );
        assert_eq!(wake, ["m0"], "m1 not yet paid for, m2 back on its own");
        assert_eq!(recovery.parked(), 1);
        assert_eq!(recovery.counts().dropped, 1);
        // Once m1's floors are paid, the next success wakes it.
        let paid = now - 20 * 60_000 + floors_ms(10) + CLOCK_MARGIN_MS;
        let (_, wake) = settle(&recovery, &Records::new(9..10, 1, now), &[up()], paid);
        assert_eq!(wake, ["m1"]);
    }

    #[test]
    fn parked_handles_are_bounded_and_a_later_receive_replaces_an_earlier() {
        let recovery = Recovery::new(RecoveryPolicy {
            probe_s: 30,
            max_parked: 3,
        });
        // Down, its probe away: nothing probes and nothing is woken.
        recovery.lock().probe_until_ms = u64::MAX;
        recovery.lock().down = Some("payment");
        let now = 10 * HOUR_MS;
        let first = now - 3 * HOUR_MS;
        // m0 comes back in 100 s, the others in 600 s: m0 is dropped first.
        let records = Records::new(0..1, 10, first);
        let batch = Batch {
            messages: records.messages(),
            kind: crate::edge::QueueKind::Standard,
            queue_arn: Some(ARN),
        };
        let mut changes = vec![Change {
            message_id: "m0",
            receipt_handle: "rh0/10",
            seconds: 100,
        }];
        recovery.settle_batch(&SCHEDULE, &batch, &[down()], &mut changes, now, 4);
        settle(
            &recovery,
            &Records::new(1..4, 10, first),
            &vec![down(); 3],
            now,
        );
        assert_eq!(recovery.parked(), 3);
        assert_eq!(recovery.counts().dropped, 1);
        // m1 received again: its new handle replaces the old one.
        settle(
            &recovery,
            &Records::new(1..2, 11, first),
            &[down()],
            now + 1_000,
        );
        let handles: Vec<String> = recovery
            .lock()
            .parked
            .iter()
            .map(|p| p.receipt_handle.clone())
            .collect();
        assert_eq!(handles, ["rh2/10", "rh3/10", "rh1/11"]);
    }

    /// A queue that refuses the handles it is told are stale.
    #[derive(Default)]
    struct Sqs {
        calls: StdMutex<Vec<Vec<(String, u64)>>>,
        stale: Vec<&'static str>,
    }

    impl VisibilityPort for Sqs {
        async fn change(&self, queue_url: &str, changes: &[Change<'_>]) -> Vec<ChangeFailure> {
            assert_eq!(queue_url, URL);
            self.calls.lock().unwrap().push(
                changes
                    .iter()
                    .map(|c| (c.receipt_handle.to_owned(), c.seconds))
                    .collect(),
            );
            changes
                .iter()
                .filter(|c| self.stale.contains(&c.receipt_handle))
                .map(|c| ChangeFailure {
                    message_id: c.message_id.to_owned(),
                    reason: "ReceiptHandleIsInvalid".into(),
                })
                .collect()
        }
    }

    #[tokio::test]
    async fn a_wake_sets_visibility_zero_in_calls_of_ten_and_counts_stale_handles() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        let parked: Vec<Parked> = (0..12)
            .map(|i| Parked {
                queue_url: URL.to_owned(),
                message_id: format!("m{i}"),
                receipt_handle: format!("rh{i}"),
                back_at_ms: u64::MAX,
                receive_count: 1,
                first_receive_ms: Some(0),
            })
            .collect();
        let sqs = Sqs {
            stale: vec!["rh3", "rh11"],
            ..Sqs::default()
        };
        recovery.wake(&sqs, &parked).await;
        let calls = sqs.calls.lock().unwrap();
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [10, 2]);
        assert!(calls.iter().flatten().all(|(_, seconds)| *seconds == 0));
        let counts = recovery.counts();
        assert_eq!((counts.woken, counts.wake_failed), (10, 2));
    }

    #[test]
    fn a_worker_receives_one_probe_per_interval_while_a_dependency_is_down() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        let now = 10 * HOUR_MS;
        assert_eq!(recovery.receive_slot(now), Ok(()));
        assert_eq!(recovery.receive_slot(now), Ok(()), "nothing down: no limit");
        settle(
            &recovery,
            &Records::new(0..2, 1, now),
            &[down(), down()],
            now,
        );
        assert_eq!(recovery.receive_slot(now), Ok(()));
        assert_eq!(
            recovery.receive_slot(now),
            Ok(()),
            "two failures: not yet down"
        );
        settle(&recovery, &Records::new(2..3, 1, now), &[down()], now);
        assert_eq!(recovery.receive_slot(now), Ok(()));
        // The record it receives is the probe call, though the trip set the call slot later.
        assert_eq!(
            recovery.admit(now + 5),
            Admit::Probe {
                dependency: "payment"
            }
        );
        assert_eq!(recovery.receive_slot(now + 10_000), Err(20_000));
        assert_eq!(recovery.receive_slot(now + 30_000), Ok(()));
        assert!(matches!(recovery.admit(now + 30_007), Admit::Probe { .. }));
        settle(
            &recovery,
            &Records::new(1..2, 1, now),
            &[up()],
            now + 31_000,
        );
        assert_eq!(recovery.receive_slot(now + 31_000), Ok(()));
        assert_eq!(
            recovery.receive_slot(now + 31_001),
            Ok(()),
            "up again: no limit"
        );
    }

    /// RETRY with the provider down for "down", ACK with it up for anything else.
    struct Provider;

    impl crate::RecordHandler for Provider {
        async fn handle(
            &self,
            message: &Message<'_>,
            _context: crate::processor::Invocation,
        ) -> Verdict {
            match message.body {
                "down" => Verdict::retry("payment_not_sent").with_health(Health::Down("payment")),
                _ => Verdict::ack("charged").with_health(Health::Up("payment")),
            }
        }
    }

    /// Through `process_batch`, as a function runs it: a batch with the provider down gets one
    /// probe and the schedule for the rest; the next batch that finds it up makes the parked
    /// records visible at once.
    #[tokio::test]
    async fn a_batch_probes_and_parks_and_the_next_success_wakes_them() {
        let now = 10 * HOUR_MS;
        let clock = lambda_kit::ManualClock::at(now);
        let processor = crate::BatchProcessor::new(
            Provider,
            clock.clone(),
            crate::BatchOptions::default()
                .with_max_concurrency(std::num::NonZeroUsize::MIN.saturating_add(1)),
        );
        let backoff = crate::Backoff::new(Sqs::default(), SCHEDULE)
            .with_recovery(Some(RecoveryPolicy::new(30)));
        let none: Option<&crate::dead_letter::DeadLetters<crate::dead_letter::NoDeadLetters>> =
            None;
        let down = Records::new(0..4, 10, now - 3 * HOUR_MS);
        crate::process_batch(
            &processor,
            &down.batch(&["down"; 4]),
            now + 60_000,
            Some(&backoff),
            none,
        )
        .await
        .expect("processed");
        let first: Vec<(String, u64)> = backoff.port.calls.lock().unwrap().concat();
        assert_eq!(first.len(), 4);
        assert_eq!(
            first[2],
            ("rh2/10".to_owned(), 30),
            "the probe: the third down in a row"
        );
        assert!(
            [&first[..2], &first[3..]]
                .concat()
                .iter()
                .all(|(_, s)| (SCHEDULE.least_delay(10)..=SCHEDULE.cap_s).contains(s)),
            "the schedule: {first:?}"
        );
        clock.advance_ms(31_000);
        let probe = Records::new(0..1, 11, now - 3 * HOUR_MS);
        crate::process_batch(
            &processor,
            &probe.batch(&["ok"]),
            now + 91_000,
            Some(&backoff),
            none,
        )
        .await
        .expect("processed");
        let calls = backoff.port.calls.lock().unwrap().clone();
        assert_eq!(
            calls.last().cloned(),
            Some(vec![("rh0/10".to_owned(), 0), ("rh1/10".to_owned(), 0)]),
            "two at once (the concurrency), the oldest first: {calls:?}"
        );
        let counts = backoff.recovery.as_ref().map(|r| r.counts());
        assert_eq!(
            counts.map(|c| (c.probes, c.parked, c.woken)),
            Some((1, 3, 2))
        );
    }

    /// Counts the records it is given; RETRY with its dependency down for bodies "down".
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl crate::RecordHandler for Counting {
        async fn handle(
            &self,
            message: &Message<'_>,
            context: crate::processor::Invocation,
        ) -> Verdict {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Provider.handle(message, context).await
        }
    }

    /// While the provider is down a container calls it with one record per probe interval:
    /// between probes every record is held back unstarted (RETRY `dependency_down`), except one
    /// at its give-up receive, which must leave with its reason; a probe that finds the provider
    /// down holds the rest of its batch, one that finds it up lets them run.
    #[tokio::test]
    async fn while_a_dependency_is_down_only_the_probe_call_and_the_give_up_run() {
        let now = 10 * HOUR_MS;
        let clock = lambda_kit::ManualClock::at(now);
        let processor = crate::BatchProcessor::new(
            Counting::default(),
            clock.clone(),
            crate::BatchOptions::default().with_give_up_at_receive(Some(20)),
        );
        let backoff = crate::Backoff::new(Sqs::default(), SCHEDULE)
            .with_recovery(Some(RecoveryPolicy::new(30)));
        let none: Option<&crate::dead_letter::DeadLetters<crate::dead_letter::NoDeadLetters>> =
            None;
        let first = now - 3 * HOUR_MS;
        let run = |records: Records, bodies: &'static [&'static str], at_ms: u64| {
            let processor = &processor;
            let backoff = &backoff;
            clock.set(at_ms);
            async move {
                let batch = records.batch(bodies);
                let processed =
                    crate::process_batch(processor, &batch, at_ms + 60_000, Some(backoff), none)
                        .await
                        .expect("processed");
                processed
                    .report
                    .statuses
                    .iter()
                    .map(|s| match s {
                        RecordStatus::Handled(v) | RecordStatus::Moved(v) => v.reason.to_owned(),
                        other => format!("{other:?}"),
                    })
                    .collect::<Vec<_>>()
            }
        };
        let calls = || {
            processor
                .handler()
                .0
                .load(std::sync::atomic::Ordering::SeqCst)
        };
        // The provider goes down: every record of the first batch meets it.
        let reasons = run(Records::new(0..3, 10, first), &["down"; 3], now).await;
        assert_eq!(reasons, ["payment_not_sent"; 3]);
        assert_eq!(calls(), 3);
        // Within the interval: held, except the record at its give-up receive.
        let mut batch = Records::new(3..6, 10, first);
        batch.0[2].2 = 20;
        let reasons = run(batch, &["down"; 3], now + 10_000).await;
        assert_eq!(
            reasons,
            [DEPENDENCY_DOWN, DEPENDENCY_DOWN, "retries_exhausted"]
        );
        assert_eq!(calls(), 4);
        // The probe call, still down: the others are held.
        let reasons = run(Records::new(6..9, 10, first), &["down"; 3], now + 30_000).await;
        assert_eq!(
            reasons,
            ["payment_not_sent", DEPENDENCY_DOWN, DEPENDENCY_DOWN]
        );
        assert_eq!(calls(), 5);
        let reasons = run(Records::new(9..11, 10, first), &["ok", "ok"], now + 45_000).await;
        assert_eq!(
            reasons, [DEPENDENCY_DOWN; 2],
            "no call before the interval ends"
        );
        assert_eq!(calls(), 5);
        // The next probe call finds it up: the whole batch runs.
        let reasons = run(Records::new(11..14, 10, first), &["ok"; 3], now + 60_000).await;
        assert_eq!(reasons, ["charged"; 3]);
        assert_eq!(calls(), 8);
        assert!(!backoff.recovery.as_ref().is_some_and(|r| r.is_down()));
    }

    /// One failure is the schedule's to retry: a container holds records back only after
    /// [`TRIP_AFTER`] in a row found the dependency down. Once a record found it up, every later
    /// batch that does not find it down goes on waking what is parked.
    #[test]
    fn it_is_down_after_three_failures_in_a_row_and_waking_goes_on_while_it_is_up() {
        let recovery = Recovery::new(RecoveryPolicy::new(30));
        let now = 10 * HOUR_MS;
        let first = now - 3 * HOUR_MS;
        let parked = |recovery: &Recovery| -> Vec<String> {
            let state = recovery.lock();
            state.parked.iter().map(|p| p.message_id.clone()).collect()
        };
        settle(
            &recovery,
            &Records::new(0..2, 10, first),
            &[down(), down()],
            now,
        );
        assert!(!recovery.is_down());
        assert_eq!(recovery.admit(now), Admit::All);
        assert_eq!(parked(&recovery), ["m0", "m1"]);
        // A success between failures starts the count over; while nothing is down, each batch
        // wakes what the one before parked.
        let (_, wake) = settle(
            &recovery,
            &Records::new(2..4, 10, first),
            &[up(), down()],
            now,
        );
        assert_eq!(wake, ["m0", "m1"]);
        let (_, wake) = settle(
            &recovery,
            &Records::new(4..6, 10, first),
            &[down(), down()],
            now + 1_000,
        );
        assert_eq!(wake, ["m3"]);
        assert!(!recovery.is_down(), "two in a row since the success");
        let (seconds, wake) = settle(
            &recovery,
            &Records::new(6..7, 10, first),
            &[down()],
            now + 2_000,
        );
        assert_eq!(wake, ["m4", "m5"]);
        assert!(recovery.is_down());
        assert_eq!(seconds, [30], "the third in a row probes");
        assert_eq!(
            recovery.admit(now + 3_000),
            Admit::None {
                dependency: "payment"
            }
        );
        // While down nothing is woken; six more are parked.
        let (_, wake) = settle(
            &recovery,
            &Records::new(20..26, 10, first),
            &vec![down(); 6],
            now + 4_000,
        );
        assert!(wake.is_empty());
        // Back: one second's worth (four) at the success, four a second after.
        let (_, wake) = settle(
            &recovery,
            &Records::new(7..8, 10, first),
            &[up()],
            now + 60_000,
        );
        assert_eq!(wake, ["m20", "m21", "m22", "m23"]);
        // A batch that says nothing of the dependency (a duplicate) goes on.
        let quiet = [RecordStatus::Handled(Verdict::ack("duplicate"))];
        let (_, wake) = settle(
            &recovery,
            &Records::new(8..9, 10, first),
            &quiet,
            now + 61_000,
        );
        assert_eq!(wake, ["m24", "m25"]);
        // Down again: what it parks waits.
        let downs = [down(), down(), down()];
        settle(
            &recovery,
            &Records::new(9..12, 10, first),
            &downs,
            now + 62_000,
        );
        let (_, wake) = settle(
            &recovery,
            &Records::new(12..13, 10, first),
            &quiet,
            now + 63_000,
        );
        assert!(wake.is_empty());
        assert!(!parked(&recovery).is_empty());
    }
}
