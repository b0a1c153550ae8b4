//! The retry quota of the SDK's standard retry mode: a bucket of tokens, shared by every call a
//! client makes, that a retry must take from. While calls succeed the bucket stays full; when
//! most of them fail (a brownout, a throttled table), retries drain it and the client stops
//! retrying until first-attempt successes refill it, so a struggling table is not sent three
//! requests for every write. The figures and the rules are `aws-smithy-runtime`'s
//! (`TokenBucket`, `StandardRetryStrategy`): 500 tokens; a retry after a timeout or a 5xx takes
//! 10, after throttling 5, after anything else 5 (Retry Behavior 2.1: 14, 5 and 14); a call that
//! succeeds on a retry gives back what its last retry took (what its earlier retries took is
//! gone); a call that succeeds at once adds one token, up to the 500.
//!
//! The SDK keeps one bucket per retry partition (the service and region) for the process; here
//! it is one per [`super::DirectClient`] and its clones, which is one per container where the
//! function builds one client.

use std::sync::atomic::{AtomicU32, Ordering};

use super::error::DirectError;

/// A bucket's size, and the tokens it starts with.
pub(super) const CAPACITY: u32 = 500;

/// Why a call is retried, as the SDK's classifiers sort it: the cost of the retry depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RetryKind {
    /// An I/O error, a timeout, a broken-off answer, a 5xx.
    Transient,
    /// Throttling (429, `ThrottlingException`, `ProvisionedThroughputExceededException`, ...).
    Throttling,
    /// Any other retryable error (a request refused for clock skew).
    Other,
}

/// What a retry of each kind costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Costs {
    transient: u32,
    throttling: u32,
    other: u32,
}

impl Costs {
    /// Retry Behavior 2.0, the SDK's default.
    pub(super) const LEGACY: Self = Self {
        transient: 10,
        throttling: 5,
        other: 5,
    };
    /// Retry Behavior 2.1 (`RetryConfig::with_retry_spec(RetrySpec::v2_1())`).
    pub(super) const V2_1: Self = Self {
        transient: 14,
        throttling: 5,
        other: 14,
    };

    fn of(self, kind: RetryKind) -> u32 {
        match kind {
            RetryKind::Transient => self.transient,
            RetryKind::Throttling => self.throttling,
            RetryKind::Other => self.other,
        }
    }
}

/// The bucket, or none when the client was built without one.
#[derive(Debug)]
pub(super) struct RetryQuota {
    tokens: AtomicU32,
    costs: Costs,
    enabled: bool,
}

impl RetryQuota {
    pub(super) fn new(costs: Costs) -> Self {
        Self {
            tokens: AtomicU32::new(CAPACITY),
            costs,
            enabled: true,
        }
    }

    /// No quota: every retry the configuration allows, however many calls fail.
    pub(super) fn unlimited() -> Self {
        Self {
            enabled: false,
            ..Self::new(Costs::LEGACY)
        }
    }

    /// Takes a retry's cost for `kind`: `Some(cost)` when the bucket held it, `None` (no retry)
    /// when it did not.
    pub(super) fn acquire(&self, kind: RetryKind) -> Option<u32> {
        if !self.enabled {
            return Some(0);
        }
        let cost = self.costs.of(kind);
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                tokens.checked_sub(cost)
            })
            .ok()
            .map(|_| cost)
    }

    /// A call succeeded: `held` is what its last retry took (0 when it succeeded at once, which
    /// earns one token instead).
    pub(super) fn succeeded(&self, held: u32) {
        if !self.enabled {
            return;
        }
        let back = if held == 0 { 1 } else { held };
        // Saturating at the capacity: a bucket never holds more than it started with.
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                Some(tokens.saturating_add(back).min(CAPACITY))
            });
    }

    /// The tokens left.
    pub(super) fn tokens(&self) -> u32 {
        self.tokens.load(Ordering::Acquire)
    }
}

#[cfg(test)]
pub(super) fn retryable(error: &DirectError) -> bool {
    retry_kind(error).is_some()
}

/// What the SDK's standard mode retries, and as what (a retry's cost to the quota depends on
/// it): I/O errors and timeouts, a broken-off answer, 500, 502, 503 and 504 (transient), its
/// throttling codes and 429 (throttling: every write here is conditional, so a retry is always
/// safe), and a refusal for clock skew.
pub(super) fn retry_kind(error: &DirectError) -> Option<RetryKind> {
    use RetryKind::{Other, Throttling, Transient};
    match error {
        DirectError::Connector(e) if e.is_io() || e.is_timeout() => Some(Transient),
        // Signed again by the server's time, which the failed attempt taught.
        DirectError::ClockSkew { .. } => Some(Other),
        DirectError::AttemptTimeout(_) | DirectError::Body(_) => Some(Transient),
        DirectError::Service { status: 429, .. } => Some(Throttling),
        DirectError::Service { status, kind, .. } => {
            if matches!(kind.as_str(), "RequestTimeout" | "RequestTimeoutException") {
                return Some(Transient);
            }
            let throttling = matches!(
                kind.as_str(),
                // Throttling, as the SDK lists it.
                "Throttling"
                    | "ThrottlingException"
                    | "ThrottledException"
                    | "RequestThrottledException"
                    | "TooManyRequestsException"
                    | "ProvisionedThroughputExceededException"
                    | "TransactionInProgressException"
                    | "RequestLimitExceeded"
                    | "BandwidthLimitExceeded"
                    | "LimitExceededException"
                    | "RequestThrottled"
                    | "SlowDown"
                    | "PriorRequestNotComplete"
                    | "EC2ThrottledException"
            );
            if throttling {
                Some(Throttling)
            } else {
                matches!(status, 500 | 502 | 503 | 504).then_some(Transient)
            }
        }
        DirectError::Unreadable { status: 429, .. } => Some(Throttling),
        DirectError::Unreadable { status, .. } => {
            matches!(status, 500 | 502 | 503 | 504).then_some(Transient)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_drain_the_bucket_and_successes_refill_it() {
        let quota = RetryQuota::new(Costs::LEGACY);
        // 50 retries after timeouts take the 500 tokens; the 51st is refused.
        for _ in 0..50 {
            assert_eq!(quota.acquire(RetryKind::Transient), Some(10));
        }
        assert_eq!(quota.acquire(RetryKind::Transient), None);
        assert_eq!(quota.acquire(RetryKind::Throttling), None);
        // A first-attempt success earns one token; five earn a throttling retry.
        for _ in 0..5 {
            quota.succeeded(0);
        }
        assert_eq!(quota.acquire(RetryKind::Throttling), Some(5));
        // A retried success gives back what its retry took.
        quota.succeeded(5);
        assert_eq!(quota.tokens(), 5);
        // Never above the capacity.
        let full = RetryQuota::new(Costs::V2_1);
        full.succeeded(0);
        full.succeeded(14);
        assert_eq!(full.tokens(), CAPACITY);
        assert_eq!(full.acquire(RetryKind::Other), Some(14));
    }

    #[test]
    fn without_a_quota_every_retry_is_allowed() {
        let quota = RetryQuota::unlimited();
        for _ in 0..1_000 {
            assert!(quota.acquire(RetryKind::Transient).is_some());
        }
    }
}
