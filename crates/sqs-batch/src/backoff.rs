//! Retry timing: how long a reported record stays invisible before SQS delivers it again.
//!
//! - RETRY: exponential backoff with equal jitter from `ApproximateReceiveCount`: with the
//!   bound b(n) = min(cap, base x 2^(n-1)) seconds, a uniform delay in [b(n)/2, b(n)], always
//!   under SQS's 12-hour limit. The floor makes the time a failing record survives known in
//!   advance: after receive n it has been away at least the sum of b(k)/2 for k <= n
//!   ([`BackoffPolicy::guaranteed_survival_s`]), so `maxReceiveCount` buys a known stretch of
//!   outage before SQS's redrive moves it.
//! - RETRY with a known time (a BUSY key's lease end, an abandoned record's claim, a provider's
//!   `Retry-After`): until then, plus up to `base` of jitter, so the retry finds the key DONE or
//!   claimable instead of BUSY again; never under the floor, so the guarantee holds for them too.
//! - POISON: 0, so it reaches `maxReceiveCount` and the DLQ without waiting (when the function
//!   does not move it to the DLQ itself, see [`crate::dead_letter`]).
//! - ACK and records skipped behind a failure or at the deadline: untouched (the queue's
//!   visibility timeout applies).
//!
//! # Example
//!
//! ```
//! use sqs_batch::backoff::BackoffPolicy;
//!
//! // The defaults of SQS_BATCH_VISIBILITY_BACKOFF: at most 5 s after the first receive, doubling to 900 s.
//! let policy = BackoffPolicy::new(5, 900);
//! // The third receive's delay lies in [10, 20] s whatever the random draw.
//! assert_eq!(policy.least_delay(3), 10);
//! assert!((10..=20).contains(&policy.delay(3, 7)));
//! // A record failing at each of 5 receives stays at least 2 + 5 + 10 + 20 + 40 s.
//! assert_eq!(policy.guaranteed_survival_s(5), 77);
//! ```

use lambda_kit::{Env, EnvError};

use crate::processor::{Decision, RecordStatus};

/// SQS refuses a visibility timeout of 12 hours (43,200 s) or more from the first receive.
pub const MAX_VISIBILITY_S: u64 = 43_199;

/// How long reported records stay away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackoffPolicy {
    /// The first retry's largest delay, seconds.
    pub base_s: u64,
    /// The largest delay, seconds.
    pub cap_s: u64,
}

impl BackoffPolicy {
    /// A first retry's largest delay of `base_s` seconds, doubling up to `cap_s`.
    ///
    /// ```
    /// let policy = sqs_batch::backoff::BackoffPolicy::new(5, 900);
    /// assert_eq!((policy.base_s, policy.cap_s), (5, 900));
    /// ```
    pub const fn new(base_s: u64, cap_s: u64) -> Self {
        Self { base_s, cap_s }
    }

    /// `SQS_BATCH_VISIBILITY_BACKOFF` (`false`): `None` when off; then `SQS_BATCH_BACKOFF_BASE_SECONDS` (5) and
    /// `SQS_BATCH_BACKOFF_CAP_SECONDS` (900), each under 12 hours, the base at most the cap.
    pub fn from_env(env: &Env<'_>) -> Result<Option<Self>, EnvError> {
        let env = &crate::with_old_names(env);
        if !env.flag("SQS_BATCH_VISIBILITY_BACKOFF", false)? {
            return Ok(None);
        }
        let base_s = env.ranged("SQS_BATCH_BACKOFF_BASE_SECONDS", 5, 0, MAX_VISIBILITY_S)?;
        let cap_s = env.ranged("SQS_BATCH_BACKOFF_CAP_SECONDS", 900, 0, MAX_VISIBILITY_S)?;
        if base_s > cap_s {
            return Err(EnvError::invalid(
                "SQS_BATCH_BACKOFF_BASE_SECONDS",
                &base_s.to_string(),
                format!("at most SQS_BATCH_BACKOFF_CAP_SECONDS ({cap_s})"),
            ));
        }
        let policy = Self { base_s, cap_s };
        let redrive = RedriveCheck::from_env(env)?;
        if let Some(count) = redrive.max_receive_count
            && let Some(problem) = redrive.survival_problem(count, &policy)
        {
            return Err(EnvError::invalid(
                "SQS_BATCH_MAX_RECEIVE_COUNT",
                &count.to_string(),
                format!(
                    "a count whose retries last SQS_BATCH_RETRY_SURVIVAL_HOURS: {problem}; raise \
                     maxReceiveCount or the cap"
                ),
            ));
        }
        Ok(Some(policy))
    }

    /// The largest delay for the n-th receive: min(cap, base x 2^(n-1)), under 12 hours.
    pub(crate) fn bound(&self, receive_count: u32) -> u64 {
        let exponent = receive_count.max(1) - 1;
        let grown = 1u64
            .checked_shl(exponent)
            .and_then(|factor| self.base_s.checked_mul(factor))
            .unwrap_or(u64::MAX);
        grown.min(self.cap_s).min(MAX_VISIBILITY_S)
    }

    /// The shortest delay for the n-th receive: half its bound (the equal jitter's floor).
    pub fn least_delay(&self, receive_count: u32) -> u64 {
        self.bound(receive_count) / 2
    }

    /// Equal jitter: `random` mapped uniformly enough onto [bound/2, bound].
    pub fn delay(&self, receive_count: u32, random: u64) -> u64 {
        let bound = self.bound(receive_count);
        let floor = bound / 2;
        floor + random % (bound - floor + 1)
    }

    /// The least time, in seconds, a record that fails at every one of `max_receive_count`
    /// receives stays in its queue before SQS's redrive moves it: the sum of the floors.
    pub fn guaranteed_survival_s(&self, max_receive_count: u32) -> u64 {
        (1..=max_receive_count)
            .map(|n| self.least_delay(n))
            .fold(0u64, u64::saturating_add)
    }

    /// The visibility, in seconds, a record should get; `None` leaves it alone.
    pub fn visibility(
        &self,
        status: &RecordStatus,
        receive_count: u32,
        now_ms: u64,
        random: u64,
    ) -> Option<u64> {
        let RecordStatus::Handled(verdict) = status else {
            return None;
        };
        match (verdict.outcome, verdict.retry_after_ms) {
            (Decision::Ack, _) => None,
            (Decision::Poison, _) => Some(0),
            (Decision::Retry, Some(at_ms)) => {
                let wait_s = at_ms.saturating_sub(now_ms).div_ceil(1_000);
                let jitter = random % (self.base_s + 1);
                Some(
                    wait_s
                        .saturating_add(jitter)
                        .max(self.least_delay(receive_count))
                        .min(MAX_VISIBILITY_S),
                )
            }
            (Decision::Retry, None) => Some(self.delay(receive_count, random)),
        }
    }
}

/// What a deployment expects of its queue's redrive policy: `SQS_BATCH_MAX_RECEIVE_COUNT` (0 or unset:
/// not stated) and `SQS_BATCH_RETRY_SURVIVAL_HOURS` (24). Checked at start-up against the backoff, and
/// again against the queue's own `maxReceiveCount` whenever it is learned ([`Self::problem`]),
/// since an operator may edit the policy without a deploy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedriveCheck {
    /// The `maxReceiveCount` the deployment states.
    pub max_receive_count: Option<u32>,
    /// How long a transiently failing record must be retried before it can leave, hours.
    pub survival_hours: u64,
}

impl RedriveCheck {
    /// `SQS_BATCH_MAX_RECEIVE_COUNT` (0-1000, 0: not stated) and `SQS_BATCH_RETRY_SURVIVAL_HOURS` (24, 0-336).
    pub fn from_env(env: &Env<'_>) -> Result<Self, EnvError> {
        let env = &crate::with_old_names(env);
        let count: u32 = env.ranged("SQS_BATCH_MAX_RECEIVE_COUNT", 0, 0, 1_000)?;
        Ok(Self {
            max_receive_count: (count > 0).then_some(count),
            survival_hours: env.ranged("SQS_BATCH_RETRY_SURVIVAL_HOURS", 24, 0, 336)?,
        })
    }

    /// Why retries under `max_receive_count` receives would not last the survival hours with
    /// `policy`, if they would not. A record fails its receives 1..=M-2 with their delays; at
    /// receive M-1 it gives up and leaves ([`crate::BatchOptions::give_up_at_receive`]), before
    /// SQS's redrive would take it at M+1 with the FIFO records behind it.
    pub fn survival_problem(
        &self,
        max_receive_count: u32,
        policy: &BackoffPolicy,
    ) -> Option<String> {
        let survival_s = policy.guaranteed_survival_s(max_receive_count.saturating_sub(2));
        (survival_s < self.survival_hours * 3_600).then(|| {
            format!(
                "with SQS_BATCH_BACKOFF_BASE_SECONDS={} and SQS_BATCH_BACKOFF_CAP_SECONDS={} a record failing at \
                 every one of {max_receive_count} receives is guaranteed only {survival_s} s, \
                 less than SQS_BATCH_RETRY_SURVIVAL_HOURS ({} h)",
                policy.base_s, policy.cap_s, self.survival_hours
            )
        })
    }

    /// What is wrong with a queue whose redrive policy says `learned`, if anything: another count
    /// than the deployment states (the give-up follows the queue), or one whose retries do not
    /// last the survival hours under `backoff`.
    pub fn problem(&self, learned: u32, backoff: Option<&BackoffPolicy>) -> Option<String> {
        let mut problems = Vec::new();
        if let Some(stated) = self.max_receive_count.filter(|stated| *stated != learned) {
            problems.push(format!(
                "the queue's RedrivePolicy says maxReceiveCount {learned}, the deployment \
                 SQS_BATCH_MAX_RECEIVE_COUNT {stated}: retries give up at receive {}",
                learned.saturating_sub(1)
            ));
        }
        if let Some(problem) = backoff.and_then(|policy| self.survival_problem(learned, policy)) {
            problems.push(problem);
        }
        (!problems.is_empty()).then(|| problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::Verdict;

    const POLICY: BackoffPolicy = BackoffPolicy {
        base_s: 5,
        cap_s: 900,
    };

    /// The base may be the cap, never above it.
    #[test]
    fn the_base_is_at_most_the_cap() {
        let policy = |base: &'static str, cap: &'static str| {
            BackoffPolicy::from_env(&Env::new(move |name| match name {
                "SQS_BATCH_VISIBILITY_BACKOFF" => Some("true".into()),
                "SQS_BATCH_BACKOFF_BASE_SECONDS" => Some(base.into()),
                "SQS_BATCH_BACKOFF_CAP_SECONDS" => Some(cap.into()),
                _ => None,
            }))
        };
        assert_eq!(
            policy("5", "900").expect("valid"),
            Some(BackoffPolicy {
                base_s: 5,
                cap_s: 900
            })
        );
        assert_eq!(
            policy("900", "900").expect("valid"),
            Some(BackoffPolicy {
                base_s: 900,
                cap_s: 900
            })
        );
        assert!(policy("901", "900").is_err());
    }

    /// Retries that last exactly the survival hours are enough.
    #[test]
    fn retries_lasting_exactly_the_survival_hours_are_enough() {
        let check = RedriveCheck {
            max_receive_count: None,
            survival_hours: 1,
        };
        let policy = BackoffPolicy {
            base_s: 3_600,
            cap_s: 3_600,
        };
        let exactly = (2..50)
            .find(|&count| policy.guaranteed_survival_s(count - 2) == 3_600)
            .expect("a count whose retries last exactly an hour");
        assert_eq!(check.survival_problem(exactly, &policy), None);
        assert!(check.survival_problem(exactly - 1, &policy).is_some());
    }

    #[test]
    fn the_bound_doubles_from_base_up_to_the_cap() {
        let bounds: Vec<u64> = (0..=10).map(|n| POLICY.bound(n)).collect();
        assert_eq!(bounds, [5, 5, 10, 20, 40, 80, 160, 320, 640, 900, 900]);
        assert_eq!(POLICY.bound(u32::MAX), 900);
        let huge = BackoffPolicy {
            base_s: u64::MAX,
            cap_s: u64::MAX,
        };
        assert_eq!(huge.bound(64), MAX_VISIBILITY_S);
    }

    #[test]
    fn each_outcome_gets_its_visibility() {
        let retry = RecordStatus::Handled(Verdict::retry("payment_ambiguous"));
        // Receive 3: bound 20, so a delay in [10, 20].
        assert_eq!(POLICY.visibility(&retry, 3, 0, 30), Some(10 + 30 % 11));
        let poison = RecordStatus::Handled(Verdict::poison("invalid_body"));
        assert_eq!(POLICY.visibility(&poison, 3, 0, 7), Some(0));
        let ack = RecordStatus::Handled(Verdict::ack("charged"));
        assert_eq!(POLICY.visibility(&ack, 3, 0, 7), None);
        assert_eq!(
            POLICY.visibility(&RecordStatus::SkippedDeadline, 3, 0, 7),
            None
        );
        assert_eq!(
            POLICY.visibility(&RecordStatus::SkippedAfter { culprit: 0 }, 3, 0, 7),
            None
        );
    }

    /// Whatever the random source draws, every delay lies in [bound/2, bound], so the time a
    /// record survives is known in advance.
    #[test]
    fn every_delay_has_its_floor_and_its_bound() {
        let mut rng = fastrand::Rng::with_seed(7);
        for n in 1..=40 {
            for random in [0, 1, u64::MAX, u64::MAX - 1, rng.u64(..), rng.u64(..)] {
                let delay = POLICY.delay(n, random);
                assert!(
                    (POLICY.least_delay(n)..=POLICY.bound(n)).contains(&delay),
                    "receive {n}: {delay}"
                );
            }
        }
        assert_eq!(POLICY.least_delay(1), 2);
        assert_eq!(POLICY.least_delay(9), 450);
        // 2 + 5 + 10 + 20 + 40 + 80 + 160 + 320, then 450 a receive.
        assert_eq!(POLICY.guaranteed_survival_s(8), 637);
        assert_eq!(POLICY.guaranteed_survival_s(10), 637 + 2 * 450);
        assert_eq!(POLICY.guaranteed_survival_s(0), 0);
    }

    /// A deployment whose receives cannot last the survival floor does not start.
    #[test]
    fn start_up_refuses_a_schedule_shorter_than_the_survival_floor() {
        let read = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            BackoffPolicy::from_env(&Env::new(move |name| {
                vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
            }))
        };
        let on = ("SQS_BATCH_VISIBILITY_BACKOFF", "true");
        assert_eq!(
            read(&[on, ("SQS_BATCH_MAX_RECEIVE_COUNT", "201")]),
            Ok(Some(POLICY))
        );
        let short = read(&[on, ("SQS_BATCH_MAX_RECEIVE_COUNT", "5")]).expect_err("five receives");
        assert!(
            short.to_string().contains("SQS_BATCH_MAX_RECEIVE_COUNT"),
            "{short}"
        );
        assert!(
            short.to_string().contains("SQS_BATCH_RETRY_SURVIVAL_HOURS"),
            "{short}"
        );
        // 201 receives give up at 200 after 199 delays: 86,587 s; 200 only 86,137 s, under a day.
        assert!(read(&[on, ("SQS_BATCH_MAX_RECEIVE_COUNT", "201")]).is_ok());
        assert!(read(&[on, ("SQS_BATCH_MAX_RECEIVE_COUNT", "200")]).is_err());
        assert!(
            read(&[
                on,
                ("SQS_BATCH_MAX_RECEIVE_COUNT", "5"),
                ("SQS_BATCH_RETRY_SURVIVAL_HOURS", "0")
            ])
            .is_ok()
        );
        // Unknown count: nothing to check.
        assert_eq!(read(&[on]), Ok(Some(POLICY)));
    }

    /// A queue whose policy an operator edited: another count than the deployment's is named,
    /// and a count too low for the survival hours says why.
    #[test]
    fn a_learned_count_is_held_against_the_deployment() {
        let check = RedriveCheck {
            max_receive_count: Some(201),
            survival_hours: 24,
        };
        assert_eq!(check.problem(201, Some(&POLICY)), None);
        let lowered = check.problem(5, Some(&POLICY)).expect("a problem");
        assert!(lowered.contains("maxReceiveCount 5"), "{lowered}");
        assert!(
            lowered.contains("SQS_BATCH_RETRY_SURVIVAL_HOURS"),
            "{lowered}"
        );
        // Without the backoff there is no schedule to outlast: only the mismatch is named.
        let no_backoff = check.problem(5, None).expect("a problem");
        assert!(
            !no_backoff.contains("SQS_BATCH_RETRY_SURVIVAL_HOURS"),
            "{no_backoff}"
        );
        // Raised above the deployment's: a mismatch, but the schedule lasts.
        let raised = check.problem(400, Some(&POLICY)).expect("a problem");
        assert!(
            !raised.contains("SQS_BATCH_RETRY_SURVIVAL_HOURS"),
            "{raised}"
        );
        let unstated = RedriveCheck {
            max_receive_count: None,
            ..check
        };
        assert_eq!(unstated.problem(400, Some(&POLICY)), None);
    }

    #[test]
    fn an_abandoned_record_waits_for_its_claim_not_the_exponential_backoff() {
        // The exponential bound for a first receive may be 0 s, while the claim it left behind
        // is held until the deadline plus the lease margin.
        let abandoned =
            RecordStatus::Handled(Verdict::retry("abandoned").with_retry_after_ms(65_000));
        assert_eq!(POLICY.visibility(&abandoned, 1, 60_000, 0), Some(5));
    }

    #[test]
    fn busy_waits_for_the_lease_end_plus_jitter() {
        let busy = RecordStatus::Handled(Verdict::retry("busy").with_retry_after_ms(10_500));
        assert_eq!(POLICY.visibility(&busy, 1, 1_000, 0), Some(10));
        assert_eq!(POLICY.visibility(&busy, 1, 1_000, 5), Some(15));
        let far = RecordStatus::Handled(Verdict::retry("busy").with_retry_after_ms(u64::MAX));
        assert_eq!(POLICY.visibility(&far, 1, 0, 0), Some(MAX_VISIBILITY_S));
    }
}
