//! The provider's answers as they arrive on the wire, in the dialect a run chooses
//! (`make sim PROVIDER=...`), read back by the function's own readers
//! ([`classify`], [`classify_lookup`]): the simulated provider decides what happened, this
//! module says it as that provider would, and the shipped code decides what it means. So a
//! misreading of a real provider's shape (a bare `failed`, Adyen's 422 for a key in flight, an
//! unknown status) happens under a seed, not only in a unit test of the reader.

use std::time::Duration;

use process_orders::money::Money;
use process_orders::payment::answers::{Reading, classify, classify_lookup};
use process_orders::payment::{ChargeStatus, PaymentError};
use reqwest::StatusCode;
use serde_json::json;

/// How the simulated provider words its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// `draft`: the IETF Idempotency-Key draft's examples (the project's own stub): `status`,
    /// 402 with a `decline_code`, 409 and 422 as problem documents, 404 `not_found`.
    #[default]
    Draft,
    /// `stripe`: PaymentIntents (`processing`, `requires_payment_method` with
    /// `last_payment_error`), 402 `card_error`, 409 `idempotency_key_in_use`, 400
    /// `idempotency_error`, 404 `resource_missing`.
    Stripe,
    /// `adyen`: `resultCode` (`Authorised`, `Received`, `Refused` with `refusalReason`),
    /// `amount.value`, 422 `errorCode` 704 for a key in flight.
    Adyen,
    /// `bare`: a provider that says little: a bare `failed` with no code, unknown fields
    /// everywhere, and statuses nobody documented (`under_review`) while a charge is pending.
    Bare,
}

/// Every dialect, as `PROVIDER=` names it.
pub const DIALECTS: [(&str, Dialect); 4] = [
    ("draft", Dialect::Draft),
    ("stripe", Dialect::Stripe),
    ("adyen", Dialect::Adyen),
    ("bare", Dialect::Bare),
];

impl Dialect {
    /// `draft`, `stripe`, `adyen` or `bare`.
    pub fn parse(name: &str) -> Option<Self> {
        DIALECTS.iter().find(|(n, _)| *n == name).map(|(_, d)| *d)
    }

    /// The name `PROVIDER=` takes.
    pub fn name(self) -> &'static str {
        DIALECTS
            .iter()
            .find(|(_, d)| *d == self)
            .map_or("draft", |(n, _)| n)
    }
}

/// How a look-up words the amounts it names. A provider's charge answers are read for their
/// status alone; its look-ups are read for the money under the key too, and some providers word
/// it otherwise than the integer of minor units the charge sent (Braintree's and PayPal's
/// decimal strings, a gateway that re-serialises every number as a float).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Amounts {
    /// `5000`: an integer of minor units, as sent.
    #[default]
    Integers,
    /// `"5000"`: the same digits as text.
    Text,
    /// `5000.0`: the same number as a decimal.
    Decimals,
}

impl Amounts {
    /// `minor` units as this wording writes them.
    pub fn word(self, minor: u64) -> serde_json::Value {
        match self {
            Self::Integers => json!(minor),
            Self::Text => json!(minor.to_string()),
            Self::Decimals => serde_json::Number::from_f64(minor as f64)
                .map_or_else(|| json!(minor), serde_json::Value::Number),
        }
    }
}

/// What the provider has to say about a charge request.
#[derive(Debug, Clone, Copy)]
pub enum ChargeAnswer {
    /// Money moved (now, or in the first request a replay answers for).
    Charged {
        /// A replay of the first request's answer.
        replay: bool,
    },
    /// The card's bank refused.
    Declined,
    /// The key's first request is still being processed.
    InFlight(Duration),
    /// Another payload under the key.
    KeyReused,
    /// Accepted; the outcome comes later.
    Pending(Duration),
    /// The API key the request carried was rotated away.
    KeyRotated,
}

/// What the provider's status look-up has to say about a key.
#[derive(Debug, Clone, Copy)]
pub enum LookupAnswer {
    /// No charge under the key (never, or forgotten).
    Missing,
    /// Being processed, for this amount (in its currency).
    Pending(Money),
    /// Charged this amount.
    Charged(Money),
    /// Declined, for this amount.
    Declined(Money),
    /// The status endpoint failed.
    Failing,
}

/// One answer on the wire.
#[derive(Debug, Clone)]
pub struct Wire {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After`.
    pub retry_after: Option<Duration>,
    /// The body.
    pub body: String,
}

fn wire(status: u16, body: serde_json::Value) -> Wire {
    Wire {
        status,
        retry_after: None,
        body: body.to_string(),
    }
}

/// Whole seconds, rounded up, as `Retry-After` carries them.
fn retry_after(after: Duration) -> Option<Duration> {
    Some(Duration::from_secs(after.as_millis().div_ceil(1_000) as u64))
}

impl Dialect {
    /// The answer to a charge of `money` under `key`, as this provider words it.
    pub fn charge(self, answer: ChargeAnswer, key: &str, money: Money) -> Wire {
        let (minor, currency) = (money.minor, money.currency.as_str());
        let lower = currency.to_ascii_lowercase();
        match (self, answer) {
            (Self::Draft, ChargeAnswer::Charged { .. }) => wire(
                201,
                json!({"id": key, "status": "succeeded", "amount": minor, "currency": currency}),
            ),
            (Self::Stripe, ChargeAnswer::Charged { .. }) => wire(
                200,
                json!({"id": "pi_sim", "object": "payment_intent", "status": "succeeded",
                       "amount": minor, "amount_received": minor, "currency": lower,
                       "last_payment_error": null, "livemode": false}),
            ),
            (Self::Adyen, ChargeAnswer::Charged { .. }) => wire(
                200,
                json!({"pspReference": "SIM", "resultCode": "Authorised",
                       "amount": {"value": minor, "currency": currency},
                       "merchantReference": key, "additionalData": {"cardBin": "411111"}}),
            ),
            (Self::Bare, ChargeAnswer::Charged { replay }) => wire(
                if replay { 200 } else { 201 },
                json!({"status": "succeeded", "ref": key, "extra": {"risk": [1, 2], "note": null}}),
            ),
            (Self::Draft, ChargeAnswer::Declined) => wire(
                402,
                json!({"error": {"type": "card_error", "decline_code": "insufficient_funds",
                                 "message": "card declined (simulated)"}}),
            ),
            (Self::Stripe, ChargeAnswer::Declined) => wire(
                402,
                json!({"error": {"type": "card_error", "code": "card_declined",
                                 "decline_code": "insufficient_funds",
                                 "message": "Your card has insufficient funds.",
                                 "payment_intent": {"status": "requires_payment_method"}}}),
            ),
            // Adyen answers a refusal 200, with its reason.
            (Self::Adyen, ChargeAnswer::Declined) => wire(
                200,
                json!({"pspReference": "SIM", "resultCode": "Refused",
                       "refusalReason": "Not enough balance", "refusalReasonCode": "51",
                       "merchantReference": key}),
            ),
            (Self::Bare, ChargeAnswer::Declined) => wire(200, json!({"status": "failed"})),
            (Self::Draft | Self::Bare, ChargeAnswer::InFlight(after)) => Wire {
                retry_after: retry_after(after),
                ..wire(
                    409,
                    json!({"type": "https://example.com/idempotency-key-in-use",
                           "title": "A request with this Idempotency-Key is being processed"}),
                )
            },
            (Self::Stripe, ChargeAnswer::InFlight(_)) => wire(
                409,
                json!({"error": {"type": "idempotency_error", "code": "idempotency_key_in_use",
                                 "message": "There is currently another in-progress request using this Idempotent Key."}}),
            ),
            (Self::Adyen, ChargeAnswer::InFlight(_)) => wire(
                422,
                json!({"status": 422, "errorCode": "704", "errorType": "validation",
                       "message": "request already processed or in progress"}),
            ),
            (Self::Draft | Self::Bare, ChargeAnswer::KeyReused) => wire(
                422,
                json!({"type": "https://example.com/idempotency-key-reused",
                       "title": "Idempotency-Key is already used for another request"}),
            ),
            (Self::Stripe, ChargeAnswer::KeyReused) => wire(
                400,
                json!({"error": {"type": "idempotency_error",
                                 "message": "Keys for idempotent requests can only be used with the same parameters they were first used with."}}),
            ),
            (Self::Adyen, ChargeAnswer::KeyReused) => wire(
                422,
                json!({"status": 422, "errorCode": "idempotency", "errorType": "validation",
                       "message": "Idempotency key reused with a different request body"}),
            ),
            (Self::Draft, ChargeAnswer::Pending(after)) => Wire {
                retry_after: retry_after(after),
                ..wire(202, json!({"id": key, "status": "pending"}))
            },
            (Self::Stripe, ChargeAnswer::Pending(_)) => wire(
                200,
                json!({"id": "pi_sim", "object": "payment_intent", "status": "processing",
                       "amount": minor, "currency": lower, "last_payment_error": null}),
            ),
            (Self::Adyen, ChargeAnswer::Pending(_)) => wire(
                200,
                json!({"pspReference": "SIM", "resultCode": "Received", "merchantReference": key}),
            ),
            (Self::Bare, ChargeAnswer::Pending(_)) => {
                wire(202, json!({"status": "under_review", "eta": "soon"}))
            }
            (Self::Stripe, ChargeAnswer::KeyRotated) => wire(
                401,
                json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key provided"}}),
            ),
            (Self::Adyen, ChargeAnswer::KeyRotated) => wire(
                401,
                json!({"status": 401, "errorCode": "000", "errorType": "security", "message": "HTTP Status Response - Unauthorized"}),
            ),
            (Self::Draft | Self::Bare, ChargeAnswer::KeyRotated) => {
                wire(401, json!({"title": "invalid API key"}))
            }
        }
    }

    /// The look-up's answer about `key`, asked for `money`: a charge it knows is worded in its
    /// own currency (another payload's may differ from the one asked for), its amounts as
    /// `amounts` words them.
    pub fn lookup(self, answer: LookupAnswer, key: &str, money: Money, amounts: Amounts) -> Wire {
        let known = match answer {
            LookupAnswer::Pending(known)
            | LookupAnswer::Charged(known)
            | LookupAnswer::Declined(known) => known,
            LookupAnswer::Missing | LookupAnswer::Failing => money,
        };
        let currency = known.currency.as_str();
        let lower = currency.to_ascii_lowercase();
        let minor = amounts.word(known.minor);
        match (self, answer) {
            (_, LookupAnswer::Failing) => wire(503, json!({"message": "Service Unavailable"})),
            (Self::Draft | Self::Bare, LookupAnswer::Missing) => {
                wire(404, json!({"status": "not_found"}))
            }
            (Self::Stripe, LookupAnswer::Missing) => wire(
                404,
                json!({"error": {"type": "invalid_request_error", "code": "resource_missing",
                                 "message": "No such payment_intent"}}),
            ),
            (Self::Adyen, LookupAnswer::Missing) => wire(
                404,
                json!({"status": 404, "errorCode": "not_found", "errorType": "validation",
                       "message": "Payment not found"}),
            ),
            (Self::Draft, LookupAnswer::Pending(_)) => wire(
                200,
                json!({"id": key, "status": "pending", "amount": minor, "currency": currency}),
            ),
            (Self::Stripe, LookupAnswer::Pending(_)) => wire(
                200,
                json!({"object": "payment_intent", "status": "processing", "amount": minor,
                       "currency": lower}),
            ),
            (Self::Adyen, LookupAnswer::Pending(_)) => wire(
                200,
                json!({"resultCode": "Received", "amount": {"value": minor, "currency": currency}}),
            ),
            (Self::Bare, LookupAnswer::Pending(_)) => wire(200, json!({"status": "under_review"})),
            (Self::Draft, LookupAnswer::Charged(_)) => wire(
                200,
                json!({"id": key, "status": "succeeded", "amount": minor, "currency": currency}),
            ),
            (Self::Stripe, LookupAnswer::Charged(_)) => wire(
                200,
                json!({"object": "payment_intent", "status": "succeeded", "amount": minor,
                       "amount_received": minor, "currency": lower, "last_payment_error": null}),
            ),
            (Self::Adyen, LookupAnswer::Charged(_)) => wire(
                200,
                json!({"resultCode": "Authorised", "amount": {"value": minor, "currency": currency}}),
            ),
            (Self::Bare, LookupAnswer::Charged(_)) => wire(
                200,
                json!({"status": "succeeded", "amount": minor, "meta": {"v": 3}}),
            ),
            (Self::Draft, LookupAnswer::Declined(_)) => wire(
                200,
                json!({"id": key, "status": "failed", "amount": minor, "currency": currency,
                       "decline_code": "insufficient_funds"}),
            ),
            (Self::Stripe, LookupAnswer::Declined(_)) => wire(
                200,
                json!({"object": "payment_intent", "status": "requires_payment_method",
                       "amount": minor, "currency": lower,
                       "last_payment_error": {"type": "card_error", "code": "card_declined",
                                              "decline_code": "insufficient_funds"}}),
            ),
            (Self::Adyen, LookupAnswer::Declined(_)) => wire(
                200,
                json!({"resultCode": "Refused", "refusalReason": "Not enough balance",
                       "amount": {"value": minor, "currency": currency}}),
            ),
            // The bare `failed`: no code, no decline named.
            (Self::Bare, LookupAnswer::Declined(_)) => {
                wire(200, json!({"status": "failed", "amount": minor}))
            }
        }
    }
}

fn status(wire: &Wire) -> StatusCode {
    StatusCode::from_u16(wire.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// A charge's answer as the function reads it.
pub fn read_charge(wire: &Wire, reading: Reading<'_>) -> Result<(), PaymentError> {
    classify(status(wire), wire.retry_after, Some(&wire.body), reading)
}

/// A look-up's answer as the function reads it.
pub fn read_lookup(
    wire: &Wire,
    money: Money,
    reading: Reading<'_>,
) -> Result<ChargeStatus, PaymentError> {
    classify_lookup(status(wire), money, Some(&wire.body), reading)
}
