//! The payment port: charge an order once per idempotency key, and look up what became of a key.
//!
//! Providers follow the IETF Idempotency-Key draft (draft-ietf-httpapi-idempotency-key-header):
//! a retried request with the same key is applied once, a key still being processed answers 409,
//! a key reused with another payload answers 422, and a key is remembered only for a window
//! (about 24 hours). Every failure says whether the charge may have happened
//! ([`PaymentError::effect`]), which decides whether the idempotency item keeps a "may exist"
//! record (see `idempotency::guard`).

pub mod answers;
pub mod http;
pub mod key;
pub mod redact;
pub mod simulated;

use std::future::Future;
use std::time::Duration;

pub use http::HttpGateway;
pub use key::{ApiKey, KeySetting, Secret};
pub use simulated::SimulatedGateway;

use idempotency::guard::Effect;

use crate::money::Money;

/// Why the payment settings cannot be read: the payment module's own, so that it depends on
/// nothing of the function's configuration (`config::ConfigError` takes it in).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// A variable's value cannot be used.
    #[error(transparent)]
    Invalid(#[from] lambda_kit::EnvError),
    /// Two sources for one key: which one is meant cannot be guessed.
    #[error(
        "PAYMENT_API_KEY and PAYMENT_API_KEY_SECRET are both set: set one (the secret in AWS, \
         the plain value for local use)"
    )]
    TwoKeys,
}

/// One charge. The provider applies `idempotency_key` once: every retry of the same charge
/// sends the same key, so a crash between charge and completion cannot charge twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChargeRequest<'a> {
    /// The order being charged.
    pub order_id: &'a str,
    /// Exact, in the currency's minor units.
    pub amount: Money,
    /// The `Idempotency-Key` header's value (the order id).
    pub idempotency_key: &'a str,
}

/// What the provider says became of a key (`GET /charges/{key}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargeStatus {
    /// Charged.
    Succeeded,
    /// Definitely not charged, for a reason the deployment lists as retryable
    /// (`PAYMENT_RETRYABLE_FAILURES`): the same key may be charged again.
    Failed,
    /// Definitely not charged, and final: any failure the deployment does not list as
    /// retryable, a decline above all (found by the look-up after a charge that was pending or
    /// unanswered). Never sent again, like a decline answered at once.
    Declined,
    /// Still being processed.
    Pending,
    /// The provider has no charge under the key.
    Unknown,
    /// The provider holds a charge under the key for another amount or currency: the key is not
    /// this order's (CONFLICT).
    Conflict,
    /// The provider answered, in a shape or with a status this reader does not understand: it
    /// settles nothing, and nothing is charged on it.
    Unclear,
}

/// Why a charge did not (or may not) happen. The variants follow what the answer proves.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    /// Nothing reached the provider: connection refused, DNS, TLS, connect timeout.
    #[error("the charge was not sent: {reason}")]
    NotSent {
        /// What happened, for people.
        reason: String,
        /// The transport's error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// Sent, and no definite answer: a timeout after sending, a reset, 408, 429, 5xx, or a 2xx
    /// that is not the provider's JSON. The charge may exist.
    #[error("the charge's outcome is unknown: {reason}")]
    Ambiguous {
        /// What happened, for people.
        reason: String,
        /// The transport's error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A request with this key is still being processed (409, or a 2xx saying "pending").
    #[error("a charge with this key is still in flight at the provider")]
    InFlight {
        /// The provider's `Retry-After`, if it gave one.
        retry_after: Option<Duration>,
    },
    /// A definite business refusal: 402, or 400/422 whose JSON says it is a decline.
    #[error("payment declined{}: {reason}", http_status(*status))]
    Declined {
        /// The HTTP status, if the answer came over HTTP.
        status: Option<u16>,
        /// The provider's words, redacted.
        reason: String,
    },
    /// The key was used before with another payload (422 or 400 with an idempotency error).
    #[error("the provider refused the idempotency key, used before with another payload{}: {reason}", http_status(*status))]
    KeyReused {
        /// The HTTP status, if the answer came over HTTP.
        status: Option<u16>,
        /// The provider's words, redacted.
        reason: String,
    },
    /// Our side is wrong: credentials, URL or method (401, 403, 404, 405, 407, 3xx, a missing or
    /// stripped `Idempotency-Key`, ...). The answer does not depend on the order, so every other
    /// order would get it too. A deployment fixes it, not the message, so it is never POISON.
    #[error("the payment endpoint refused our configuration{}: {reason}", http_status(*status))]
    Misconfigured {
        /// The HTTP status, if the answer came over HTTP.
        status: Option<u16>,
        /// The provider's words, redacted.
        reason: String,
    },
    /// The provider says the charge failed, for a reason the deployment lists as retryable
    /// (`PAYMENT_RETRYABLE_FAILURES`: a processing error, never a decline). Nothing was charged;
    /// the order is retried.
    #[error("the charge failed ({code}){}: {reason}", http_status(*status))]
    Failed {
        /// The HTTP status, if the answer came over HTTP.
        status: Option<u16>,
        /// The provider's failure code, as listed.
        code: String,
        /// The provider's words, redacted.
        reason: String,
    },
    /// The provider refused this order's request as invalid (400/422 with its JSON, neither a
    /// decline nor a key reuse: a missing parameter, a contract change). Our request is wrong,
    /// so it is retried like a configuration error, but it says nothing of the other orders.
    #[error("the payment endpoint refused the request{}: {reason}", http_status(*status))]
    Refused {
        /// The HTTP status, if the answer came over HTTP.
        status: Option<u16>,
        /// The provider's words, redacted.
        reason: String,
    },
}

fn http_status(status: Option<u16>) -> String {
    status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
}

impl PaymentError {
    /// Whether the charge may have happened despite the error.
    pub fn effect(&self) -> Effect {
        match self {
            Self::Ambiguous { .. } | Self::InFlight { .. } => Effect::Maybe,
            // A redirect (303 See Other) may follow a POST the provider processed.
            Self::Misconfigured {
                status: Some(300..=399),
                ..
            } => Effect::Maybe,
            Self::NotSent { .. }
            | Self::Declined { .. }
            | Self::KeyReused { .. }
            | Self::Failed { .. }
            | Self::Misconfigured { .. }
            | Self::Refused { .. } => Effect::None,
        }
    }

    /// Whether our request or setup is wrong (retried slowly, counted as a configuration error).
    pub fn is_configuration(&self) -> bool {
        matches!(self, Self::Misconfigured { .. } | Self::Refused { .. })
    }

    /// Whether every other order would get the same answer (the invocation's breaker counts it).
    pub fn is_endpoint_wide(&self) -> bool {
        matches!(self, Self::Misconfigured { .. })
    }

    /// The error with every run of `secret` in the provider's text replaced
    /// ([`redact::scrub_key`]): a gateway may echo the credential it refused, whole, cut or
    /// split. The provider's own reason was scrubbed before it was cut (`http::short_reason`);
    /// this covers every other text an error carries.
    pub fn scrub(mut self, secret: &str) -> Self {
        match &mut self {
            Self::Declined { reason, .. }
            | Self::KeyReused { reason, .. }
            | Self::Misconfigured { reason, .. }
            | Self::Refused { reason, .. }
            | Self::Failed { reason, .. }
            | Self::NotSent { reason, .. }
            | Self::Ambiguous { reason, .. } => {
                if let Some(scrubbed) = redact::scrub_key(reason, secret) {
                    *reason = scrubbed;
                }
            }
            Self::InFlight { .. } => {}
        }
        self
    }
}

/// A payment provider.
pub trait PaymentGateway: Send + Sync {
    /// Charges once per `request.idempotency_key`.
    fn charge(
        &self,
        request: &ChargeRequest<'_>,
    ) -> impl Future<Output = Result<(), PaymentError>> + Send;

    /// What became of the charge under `request.idempotency_key`. A charge found with another
    /// amount or currency is [`ChargeStatus::Conflict`]: it is not this order's. An error means
    /// the provider cannot tell now.
    fn lookup(
        &self,
        request: &ChargeRequest<'_>,
    ) -> impl Future<Output = Result<ChargeStatus, PaymentError>> + Send;

    /// An invocation starts: per-invocation limits (a refused key is read again at most once
    /// per invocation) start over.
    fn new_invocation(&self) {}

    /// How many times the API key was read again after the provider refused it, since the last
    /// call (for the metrics).
    fn take_key_refreshes(&self) -> u64 {
        0
    }
}

impl<P: PaymentGateway + ?Sized> PaymentGateway for std::sync::Arc<P> {
    fn charge(
        &self,
        request: &ChargeRequest<'_>,
    ) -> impl Future<Output = Result<(), PaymentError>> + Send {
        (**self).charge(request)
    }

    fn lookup(
        &self,
        request: &ChargeRequest<'_>,
    ) -> impl Future<Output = Result<ChargeStatus, PaymentError>> + Send {
        (**self).lookup(request)
    }

    fn new_invocation(&self) {
        (**self).new_invocation();
    }

    fn take_key_refreshes(&self) -> u64 {
        (**self).take_key_refreshes()
    }
}

/// Every gateway this build can run with, chosen at start-up.
#[derive(Debug)]
pub enum AnyGateway {
    /// Local runs and tests: charges nobody.
    Simulated(SimulatedGateway),
    /// A provider over HTTPS.
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

    async fn lookup(&self, request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        match self {
            Self::Simulated(g) => g.lookup(request).await,
            Self::Http(g) => Box::pin(g.lookup(request)).await,
        }
    }

    fn new_invocation(&self) {
        match self {
            Self::Simulated(g) => g.new_invocation(),
            Self::Http(g) => g.new_invocation(),
        }
    }

    fn take_key_refreshes(&self) -> u64 {
        match self {
            Self::Simulated(g) => g.take_key_refreshes(),
            Self::Http(g) => g.take_key_refreshes(),
        }
    }
}
