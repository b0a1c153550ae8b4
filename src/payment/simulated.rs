//! A simulated provider, the local default. It behaves as a provider following the IETF
//! Idempotency-Key draft does: one charge per key, a replay of the original answer for a finished
//! key, 409 while a key is in flight, 422 for a key reused with another payload, a key window
//! after which the key is forgotten (and would charge again), and a lookup that remembers every
//! charge. It counts what it was asked, so runs and tests can check "charged once".
//!
//! Like a provider's test card numbers, a few amounts (in minor units, whatever the currency)
//! pick an outcome, so `make run` shows each:
//!
//! | amount (minor units) | in EUR | answer |
//! |---|---|---|
//! | above [`DECLINE_ABOVE`] | above 1,000,000.00 | declined (402) |
//! | [`MISCONFIGURED_AMOUNT`] | 401.01 | 401: the API key is wrong (a configuration error) |
//! | [`AMBIGUOUS_AMOUNT`] | 504.04 | charges, then answers 504 (the outcome is unknown to the caller) |
//! | [`IN_FLIGHT_AMOUNT`] | 409.09 | stays in flight for [`IN_FLIGHT_FOR`] (409 meanwhile), then charges |

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway};
use crate::money::Money;
use lambda_kit::{Clock, SystemClock};

/// Amounts above this many minor units are declined.
pub const DECLINE_ABOVE: u64 = 100_000_000;
/// This amount (minor units) is answered 401.
pub const MISCONFIGURED_AMOUNT: u64 = 40_101;
/// This amount (minor units) is charged and then answered 504.
pub const AMBIGUOUS_AMOUNT: u64 = 50_404;
/// This amount (minor units) stays in flight for [`IN_FLIGHT_FOR`].
pub const IN_FLIGHT_AMOUNT: u64 = 40_909;
/// How long a simulated charge stays in flight before it settles.
pub const IN_FLIGHT_FOR: Duration = Duration::from_secs(5);
/// How long a key is remembered after its first request, as providers do.
pub const KEY_WINDOW: Duration = Duration::from_secs(86_400);

#[derive(Debug, Clone, Copy)]
struct KeyUse {
    amount: Money,
    first_seen_ms: u64,
    /// The request under this key is in flight until then; then it charges.
    in_flight_until_ms: Option<u64>,
    charged: bool,
}

/// What the provider holds for one idempotency key. One entry per key, not a map per field: a
/// charge hashes and copies its key once (docs/performance.md, section a).
#[derive(Debug, Default)]
struct Account {
    /// The key's use the provider remembers, within its window.
    used: Option<KeyUse>,
    /// What became of the key, and for which amount, kept for good (the lookup's source).
    fate: Option<(ChargeStatus, Money)>,
    /// Money movements: 1 is right, 2 is a double charge.
    charges: usize,
}

impl Account {
    /// Finishes an in-flight request whose time has come.
    fn settle(&mut self, now_ms: u64) {
        if let Some(used) = &mut self.used
            && used.in_flight_until_ms.is_some_and(|until| until <= now_ms)
        {
            used.in_flight_until_ms = None;
            used.charged = true;
            self.charges += 1;
            self.fate = Some((ChargeStatus::Succeeded, used.amount));
        }
    }
}

/// The accounts by idempotency key, hashed with rustc-hash's Fx rather than SipHash: a local
/// double, and hashing keys was a tenth of a record's CPU in memory (docs/performance.md,
/// section a).
type Ledger = HashMap<String, Account, rustc_hash::FxBuildHasher>;

/// A provider in memory with the draft's semantics (a key window, replays, 409 in flight): local runs and tests.
pub struct SimulatedGateway {
    clock: Arc<dyn Clock>,
    key_window_ms: u64,
    requests: AtomicU64,
    // A std Mutex: never held across an await.
    ledger: Mutex<Ledger>,
}

impl std::fmt::Debug for SimulatedGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatedGateway")
            .field("key_window_ms", &self.key_window_ms)
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

impl Default for SimulatedGateway {
    fn default() -> Self {
        Self::new()
    }
}

impl SimulatedGateway {
    /// A provider on the system clock with a 24-hour key window.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock), KEY_WINDOW)
    }

    /// A provider whose key window and in-flight time run on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>, key_window: Duration) -> Self {
        Self {
            clock,
            key_window_ms: u64::try_from(key_window.as_millis()).unwrap_or(u64::MAX),
            requests: AtomicU64::new(0),
            ledger: Mutex::default(),
        }
    }

    /// Charge requests received, retries included.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Money movements over all keys: with every key charged once, the number of keys charged.
    pub fn effective_charges(&self) -> usize {
        self.ledger().values().map(|account| account.charges).sum()
    }

    /// Money movements for `key`.
    pub fn charges(&self, key: &str) -> usize {
        self.ledger().get(key).map_or(0, |account| account.charges)
    }

    /// Whether `key` was charged.
    pub fn charged(&self, key: &str) -> bool {
        self.charges(key) > 0
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn declined() -> PaymentError {
    PaymentError::Declined {
        status: Some(402),
        reason: "amount above the simulated limit".into(),
    }
}

impl PaymentGateway for SimulatedGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let minor = request.amount.minor;
        if minor == MISCONFIGURED_AMOUNT {
            return Err(PaymentError::Misconfigured {
                status: Some(401),
                reason: "invalid API key (simulated)".into(),
            });
        }
        let now_ms = self.clock.now_ms();
        let key = request.idempotency_key;
        let mut ledger = self.ledger();
        let account = ledger.entry(key.to_owned()).or_default();
        account.settle(now_ms);
        if let Some(used) = &account.used
            && used.in_flight_until_ms.is_none()
            && now_ms.saturating_sub(used.first_seen_ms) >= self.key_window_ms
        {
            // Past the window the provider has forgotten the key: this request is a new charge.
            account.used = None;
        }
        if let Some(used) = &account.used {
            return match used.in_flight_until_ms {
                _ if used.amount != request.amount => Err(PaymentError::KeyReused {
                    status: Some(422),
                    reason: "idempotency key reused with another payload (simulated)".into(),
                }),
                Some(until_ms) => Err(PaymentError::InFlight {
                    retry_after: Some(Duration::from_millis(until_ms - now_ms)),
                }),
                // A replay answers as the first request was answered in the end.
                None if used.charged => Ok(()),
                None => Err(declined()),
            };
        }
        let mut used = KeyUse {
            amount: request.amount,
            first_seen_ms: now_ms,
            in_flight_until_ms: None,
            charged: false,
        };
        let (fate, answer) = if minor > DECLINE_ABOVE {
            (ChargeStatus::Declined, Err(declined()))
        } else if minor == IN_FLIGHT_AMOUNT {
            let for_ms = IN_FLIGHT_FOR.as_millis() as u64;
            used.in_flight_until_ms = Some(now_ms.saturating_add(for_ms));
            let answer = Err(PaymentError::InFlight {
                retry_after: Some(IN_FLIGHT_FOR),
            });
            (ChargeStatus::Pending, answer)
        } else {
            used.charged = true;
            account.charges += 1;
            let answer = if minor == AMBIGUOUS_AMOUNT {
                Err(PaymentError::Ambiguous {
                    reason: "HTTP 504 (simulated: charged, then the gateway timed out)".into(),
                    source: None,
                })
            } else {
                Ok(())
            };
            (ChargeStatus::Succeeded, answer)
        };
        account.used = Some(used);
        account.fate = Some((fate, request.amount));
        answer
    }

    async fn lookup(&self, request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        let mut ledger = self.ledger();
        let Some(account) = ledger.get_mut(request.idempotency_key) else {
            return Ok(ChargeStatus::Unknown);
        };
        account.settle(self.clock.now_ms());
        match &account.fate {
            None => Ok(ChargeStatus::Unknown),
            // Another payload's charge under the key: not this order's.
            Some((_, amount)) if *amount != request.amount => Ok(ChargeStatus::Conflict),
            Some((status, _)) => Ok(*status),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_kit::ManualClock;

    fn req(key: &str, minor: u64) -> ChargeRequest<'_> {
        ChargeRequest {
            order_id: key,
            amount: Money {
                minor,
                currency: crate::money::Currency::EUR,
            },
            idempotency_key: key,
        }
    }

    fn gateway() -> (SimulatedGateway, ManualClock) {
        let clock = ManualClock::at(1_000_000);
        let gateway = SimulatedGateway::with_clock(Arc::new(clock.clone()), KEY_WINDOW);
        (gateway, clock)
    }

    #[tokio::test]
    async fn the_same_key_charges_once_and_replays() {
        let (g, _) = gateway();
        g.charge(&req("o-1", 1_000)).await.expect("first charge");
        g.charge(&req("o-1", 1_000)).await.expect("replayed charge");
        assert_eq!(g.requests(), 2);
        assert_eq!(g.effective_charges(), 1);
        assert_eq!(
            g.lookup(&req("o-1", 1_000)).await.ok(),
            Some(ChargeStatus::Succeeded)
        );
        assert_eq!(
            g.lookup(&req("o-2", 1_000)).await.ok(),
            Some(ChargeStatus::Unknown)
        );
    }

    #[tokio::test]
    async fn a_reused_key_with_another_amount_is_refused() {
        let (g, _) = gateway();
        g.charge(&req("o-1", 1_000)).await.expect("first charge");
        let err = g.charge(&req("o-1", 1_100)).await.expect_err("reuse");
        assert!(matches!(err, PaymentError::KeyReused { .. }));
        // Its look-up shows another payload's charge under the key.
        assert_eq!(
            g.lookup(&req("o-1", 1_100)).await.ok(),
            Some(ChargeStatus::Conflict)
        );
    }

    #[tokio::test]
    async fn past_the_key_window_the_key_is_forgotten_and_charges_again() {
        let (g, clock) = gateway();
        g.charge(&req("o-1", 1_000)).await.expect("first charge");
        clock.advance_ms(KEY_WINDOW.as_millis() as u64);
        g.charge(&req("o-1", 1_000)).await.expect("a new charge");
        assert_eq!(
            g.charges("o-1"),
            2,
            "what a blind resend past the window does"
        );
    }

    #[tokio::test]
    async fn magic_amounts_pick_their_outcome() {
        let (g, clock) = gateway();
        let err = g
            .charge(&req("o-1", DECLINE_ABOVE + 1))
            .await
            .expect_err("declined");
        assert!(matches!(err, PaymentError::Declined { .. }));
        assert_eq!(
            g.lookup(&req("o-1", DECLINE_ABOVE + 1)).await.ok(),
            Some(ChargeStatus::Declined)
        );
        let err = g
            .charge(&req("o-2", MISCONFIGURED_AMOUNT))
            .await
            .expect_err("401");
        assert!(matches!(
            err,
            PaymentError::Misconfigured {
                status: Some(401),
                ..
            }
        ));
        let err = g
            .charge(&req("o-3", AMBIGUOUS_AMOUNT))
            .await
            .expect_err("504");
        assert!(matches!(err, PaymentError::Ambiguous { .. }));
        assert_eq!(g.charges("o-3"), 1, "charged despite the 504");
        let err = g
            .charge(&req("o-4", IN_FLIGHT_AMOUNT))
            .await
            .expect_err("in flight");
        assert!(matches!(err, PaymentError::InFlight { .. }));
        assert!(matches!(
            g.charge(&req("o-4", IN_FLIGHT_AMOUNT)).await,
            Err(PaymentError::InFlight { .. })
        ));
        assert_eq!(
            g.lookup(&req("o-4", IN_FLIGHT_AMOUNT)).await.ok(),
            Some(ChargeStatus::Pending)
        );
        clock.advance_ms(IN_FLIGHT_FOR.as_millis() as u64);
        assert_eq!(
            g.lookup(&req("o-4", IN_FLIGHT_AMOUNT)).await.ok(),
            Some(ChargeStatus::Succeeded)
        );
        g.charge(&req("o-4", IN_FLIGHT_AMOUNT))
            .await
            .expect("replay");
        assert_eq!(g.effective_charges(), 2);
    }
}
