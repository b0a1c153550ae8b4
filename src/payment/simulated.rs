//! A simulated provider, the local default: it applies idempotency keys as a real provider does
//! and counts what it was asked, so runs and tests can check "charged once".

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ChargeRequest, PaymentError, PaymentGateway};

/// Amounts above this are declined, so a local run can show a permanent payment failure.
pub const DECLINE_ABOVE: f64 = 1_000_000.0;

#[derive(Debug, Default)]
pub struct SimulatedGateway {
    requests: AtomicU64,
    // key -> amount charged. A std Mutex: never held across an await.
    charges: Mutex<HashMap<String, f64>>,
}

impl SimulatedGateway {
    pub fn new() -> Self {
        Self::default()
    }

    /// Charge requests received, retries included.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Distinct idempotency keys charged: the money that actually moved.
    pub fn effective_charges(&self) -> usize {
        self.charges().len()
    }

    /// Whether `key` was charged.
    pub fn charged(&self, key: &str) -> bool {
        self.charges().contains_key(key)
    }

    fn charges(&self) -> std::sync::MutexGuard<'_, HashMap<String, f64>> {
        self.charges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PaymentGateway for SimulatedGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if request.amount > DECLINE_ABOVE {
            return Err(PaymentError::Rejected {
                status: None,
                reason: "amount above the simulated limit".into(),
            });
        }
        let mut charges = self.charges();
        match charges.get(request.idempotency_key) {
            // Same key, same request: a provider answers with the original charge.
            Some(amount) if *amount == request.amount => Ok(()),
            Some(_) => Err(PaymentError::Rejected {
                status: None,
                reason: "idempotency key reused with a different request".into(),
            }),
            None => {
                charges.insert(request.idempotency_key.to_owned(), request.amount);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(key: &'a str, amount: f64) -> ChargeRequest<'a> {
        ChargeRequest {
            order_id: key,
            amount,
            idempotency_key: key,
        }
    }

    #[tokio::test]
    async fn the_same_key_charges_once() {
        let g = SimulatedGateway::new();
        g.charge(&req("o-1", 10.0)).await.expect("first charge");
        g.charge(&req("o-1", 10.0)).await.expect("replayed charge");
        assert_eq!(g.requests(), 2);
        assert_eq!(g.effective_charges(), 1);
        assert!(g.charged("o-1"));
    }

    #[tokio::test]
    async fn a_reused_key_with_another_amount_is_rejected() {
        let g = SimulatedGateway::new();
        g.charge(&req("o-1", 10.0)).await.expect("first charge");
        let err = g.charge(&req("o-1", 11.0)).await.expect_err("reuse");
        assert!(matches!(err, PaymentError::Rejected { .. }));
    }

    #[tokio::test]
    async fn amounts_above_the_limit_are_declined() {
        let g = SimulatedGateway::new();
        let err = g
            .charge(&req("o-1", DECLINE_ABOVE + 1.0))
            .await
            .expect_err("declined");
        assert!(matches!(err, PaymentError::Rejected { .. }));
        assert_eq!(g.effective_charges(), 0);
    }
}
