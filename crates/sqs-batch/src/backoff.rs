//! Retry timing: how long a reported record stays invisible before SQS delivers it again.
//!
//! - RETRY: exponential backoff with full jitter from `ApproximateReceiveCount`: a uniform
//!   delay in [0, min(cap, base x 2^(n-1))] seconds, always under SQS's 12-hour limit.
//! - RETRY with a known time (a BUSY key's lease end, an abandoned record's claim, a provider's
//!   `Retry-After`): until then, plus up to `base` of jitter, so the retry finds the key DONE or
//!   claimable instead of BUSY again.
//! - POISON: 0, so it reaches `maxReceiveCount` and the DLQ without waiting.
//! - ACK and records skipped behind a failure or at the deadline: untouched (the queue's
//!   visibility timeout applies).

use lambda_kit::{Env, EnvError};

use crate::processor::{Outcome, RecordStatus};

/// SQS refuses a visibility timeout of 12 hours (43,200 s) or more from the first receive.
pub const MAX_VISIBILITY_S: u64 = 43_199;

/// How long reported records stay away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// The first retry's largest delay, seconds.
    pub base_s: u64,
    /// The largest delay, seconds.
    pub cap_s: u64,
}

impl BackoffPolicy {
    /// `VISIBILITY_BACKOFF` (`false`): `None` when off; then `BACKOFF_BASE_SECONDS` (5) and
    /// `BACKOFF_CAP_SECONDS` (900), each under 12 hours, the base at most the cap.
    pub fn from_env(env: &Env<'_>) -> Result<Option<Self>, EnvError> {
        if !env.flag("VISIBILITY_BACKOFF", false)? {
            return Ok(None);
        }
        let base_s = env.ranged("BACKOFF_BASE_SECONDS", 5, 0, MAX_VISIBILITY_S)?;
        let cap_s = env.ranged("BACKOFF_CAP_SECONDS", 900, 0, MAX_VISIBILITY_S)?;
        if base_s > cap_s {
            return Err(EnvError::invalid(
                "BACKOFF_BASE_SECONDS",
                &base_s.to_string(),
                format!("at most BACKOFF_CAP_SECONDS ({cap_s})"),
            ));
        }
        Ok(Some(Self { base_s, cap_s }))
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

    /// Full jitter: `random` mapped uniformly enough onto [0, bound].
    pub fn delay(&self, receive_count: u32, random: u64) -> u64 {
        random % (self.bound(receive_count) + 1)
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
            (Outcome::Ack, _) => None,
            (Outcome::Poison, _) => Some(0),
            (Outcome::Retry, Some(at_ms)) => {
                let wait_s = at_ms.saturating_sub(now_ms).div_ceil(1_000);
                let jitter = random % (self.base_s + 1);
                Some(wait_s.saturating_add(jitter).min(MAX_VISIBILITY_S))
            }
            (Outcome::Retry, None) => Some(self.delay(receive_count, random)),
        }
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
        assert_eq!(POLICY.visibility(&retry, 3, 0, 30), Some(30 % 21));
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
