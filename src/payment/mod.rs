//! The payment port: charge an order once per idempotency key.

pub mod http;
pub mod simulated;

use std::future::Future;

pub use http::HttpGateway;
pub use simulated::SimulatedGateway;

/// One charge. The provider applies `idempotency_key` once: every retry of the same charge
/// sends the same key, so a crash between charge and completion cannot charge twice.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChargeRequest<'a> {
    pub order_id: &'a str,
    pub amount: f64,
    pub idempotency_key: &'a str,
}

/// Why a charge did not happen.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    /// May succeed later: timeout, connection error, 408, 429, 5xx.
    #[error("payment failed transiently: {reason}")]
    Transient {
        reason: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// Will never succeed as sent: the provider refused it.
    #[error("payment rejected{}: {reason}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Rejected { status: Option<u16>, reason: String },
}

/// A payment provider.
pub trait PaymentGateway: Send + Sync {
    fn charge(
        &self,
        request: &ChargeRequest<'_>,
    ) -> impl Future<Output = Result<(), PaymentError>> + Send;
}

impl<P: PaymentGateway + ?Sized> PaymentGateway for std::sync::Arc<P> {
    fn charge(
        &self,
        request: &ChargeRequest<'_>,
    ) -> impl Future<Output = Result<(), PaymentError>> + Send {
        (**self).charge(request)
    }
}

/// Every gateway this build can run with, chosen at start-up.
#[derive(Debug)]
pub enum AnyGateway {
    Simulated(SimulatedGateway),
    Http(HttpGateway),
}

impl PaymentGateway for AnyGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        match self {
            Self::Simulated(g) => g.charge(request).await,
            // Boxed: reqwest's future is kilobytes, and an enum's future is as large as its
            // largest arm, so every record's future (moved into the batch's queue) would be too.
            // One allocation per network call is nothing next to the call.
            Self::Http(g) => Box::pin(g.charge(request)).await,
        }
    }
}
