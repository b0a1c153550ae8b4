//! Time, injected.
//!
//! Leases, TTLs and the invocation deadline are all decided in epoch milliseconds read from a
//! [`Clock`], so tests move time forward instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// Epoch milliseconds (not `Instant`) because the Lambda deadline and the lease expiry stored in
/// DynamoDB are both epoch values shared with other processes.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // A clock before 1970 is a broken host; saturating to 0 keeps us from panicking on it.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn at(now_ms: u64) -> Self {
        Self(Arc::new(AtomicU64::new(now_ms)))
    }

    /// Moves the clock to `now_ms` (backwards too).
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the clock forward by `ms`.
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_ms(&self) -> u64 {
        (**self).now_ms()
    }
}

/// Any epoch-ms deadline before this (2001-09-09) cannot be real.
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

/// The proleptic Gregorian date `(year, month, day)` of `days` since 1970-01-01 (Howard
/// Hinnant's algorithm): for writing timestamps (log lines, SigV4's `x-amz-date`) without a
/// date crate.
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The invocation deadline in epoch ms, from the Runtime API's `Lambda-Runtime-Deadline-Ms`.
///
/// Lambda sends an epoch timestamp. Some local emulators (cargo-lambda 1.9's `watch`) send the
/// timeout as a plain duration instead (`600000`); taken literally, every record would look
/// late. A value that cannot be an epoch timestamp is read as a duration from now.
pub fn invocation_deadline(header_ms: u64, now_ms: u64) -> u64 {
    if header_ms < EPOCH_MS_FLOOR {
        now_ms.saturating_add(header_ms)
    } else {
        header_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_counts_are_gregorian_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_793), (2026, 12, 6));
        assert_eq!(civil_from_days(47_540), (2100, 2, 28));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1));
    }

    #[test]
    fn manual_clock_clones_share_time() {
        let clock = ManualClock::at(1_000);
        let other = clock.clone();
        clock.advance_ms(500);
        assert_eq!(other.now_ms(), 1_500);
        other.set(7);
        assert_eq!(clock.now_ms(), 7);
    }

    #[test]
    fn system_clock_is_after_2020() {
        // 2020-01-01T00:00:00Z in epoch ms: a sanity floor, not a timing.
        assert!(SystemClock.now_ms() > 1_577_836_800_000);
    }

    #[test]
    fn an_epoch_deadline_is_taken_as_is_and_a_duration_is_read_from_now() {
        let now = 1_767_225_600_000;
        assert_eq!(invocation_deadline(now + 30_000, now), now + 30_000);
        assert_eq!(invocation_deadline(600_000, now), now + 600_000);
    }
}
