//! The provider's answers, read: what a charge's answer proves ([`classify`]) and what a
//! look-up's answer says became of a key ([`classify_lookup`]), in the dialects the function
//! knows, each in a module of its own (`draft.rs`, `stripe.rs`, `adyen.rs`: where that provider
//! puts each thing, with its documented shapes as fixtures).
//!
//! How each answer to a charge is read (what it proves decides what the store keeps):
//! - 2xx whose JSON says what became of the charge, in any dialect [`read_charge`] knows (the
//!   draft's and Stripe's `status`, Adyen's `resultCode`): succeeded is charged, pending or
//!   processing is in flight, and a failure is a decline, final, unless it names a failure the
//!   deployment lists as retryable (`PAYMENT_RETRYABLE_FAILURES`). Any other 2xx (no body, not
//!   JSON, a proxy's page, cut off, a status not known) proves nothing: ambiguous.
//! - 409: a request with this key is still being processed (IETF draft): in flight, never
//!   charged-yet, with `Retry-After` when given.
//! - 402, or 400/422 whose JSON names a decline: declined.
//! - 400/422 whose JSON names idempotency (the draft's `application/problem+json`, Stripe's
//!   `idempotency_error`): a 422, or a text saying the key was reused with another request, is
//!   a key reused with another payload; a text saying the key is in use or outstanding is in
//!   flight; anything else (the draft's "Idempotency-Key is missing", a malformed key, a proxy
//!   that strips the header) is our configuration.
//! - any other 400/422 with the provider's JSON: this request was refused (retried slowly; it
//!   says nothing of other orders).
//! - 408, 429, 5xx, a timeout after sending, a reset: ambiguous.
//! - refused connections, DNS, TLS, a connect timeout: not sent.
//! - anything else (401, 403, 404, 405, 407, 3xx, other 4xx, a 400/422 that is not the
//!   provider's JSON): our configuration is wrong. Redirects are never followed for a charge.
//!
//! Provider text is kept only short and redacted ([`super::redact`]), and every run of the API
//! key is scrubbed from the provider's text before it is cut ([`Reading::secret`]) and from
//! every error a call returns ([`PaymentError::scrub`]).

mod adyen;
mod draft;
mod stripe;

use std::time::Duration;

use reqwest::StatusCode;

use super::redact::redact;
use super::{ChargeStatus, PaymentError};
use crate::money::{Currency, Money};
use lambda_kit::{Env, EnvError};

/// The longest provider reason kept for the log, in characters.
const REASON_MAX: usize = 200;

/// `PAYMENT_RETRYABLE_FAILURES`: the failure codes (comma-separated, empty by default) that a
/// failed charge may name and still be charged again, such as a processor's transient
/// `processing_error`. Every other failure is final, like a decline: recorded, moved with its
/// reason, never sent again. A code that names a decline is refused at start-up, and an answer
/// that names a decline anywhere is final whatever its code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryableFailures(Vec<String>);

impl RetryableFailures {
    /// The codes, as `PAYMENT_RETRYABLE_FAILURES` gives them.
    pub fn from_env(env: &Env<'_>) -> Result<Self, EnvError> {
        let Some(text) = env.text("PAYMENT_RETRYABLE_FAILURES") else {
            return Ok(Self::default());
        };
        let mut codes = Vec::new();
        for code in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            let code = code.to_ascii_lowercase();
            if code.len() > 64
                || !code
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
            {
                return Err(EnvError::invalid(
                    "PAYMENT_RETRYABLE_FAILURES",
                    &text,
                    "failure codes of letters, digits, '_', '.' and '-', separated by commas",
                ));
            }
            if is_decline_code(&code) {
                return Err(EnvError::invalid(
                    "PAYMENT_RETRYABLE_FAILURES",
                    &text,
                    format!("no decline ({code} is one): a declined card is never sent again"),
                ));
            }
            codes.push(code);
        }
        Ok(Self(codes))
    }

    /// These codes.
    pub fn of(codes: &[&str]) -> Self {
        Self(codes.iter().map(|c| c.to_ascii_lowercase()).collect())
    }

    pub(crate) fn contains(&self, code: &str) -> bool {
        self.0.iter().any(|c| c.eq_ignore_ascii_case(code))
    }
}

/// What reading an answer needs besides the answer itself.
#[derive(Debug, Clone, Copy)]
pub struct Reading<'a> {
    /// The failures the deployment lets be charged again.
    pub retryable: &'a RetryableFailures,
    /// The key the request carried: every run of it is scrubbed from the provider's text
    /// before that text is cut for the log.
    pub secret: Option<&'a str>,
}

/// No failure retryable, no key sent.
impl Default for Reading<'_> {
    fn default() -> Self {
        static NONE: RetryableFailures = RetryableFailures(Vec::new());
        Self {
            retryable: &NONE,
            secret: None,
        }
    }
}

/// The provider's JSON: an object.
fn provider_json(body: Option<&str>) -> Option<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_str(body?) {
        Ok(serde_json::Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// The `status` field of the provider's JSON.
fn status_field(json: &serde_json::Map<String, serde_json::Value>) -> Option<&str> {
    json.get("status").and_then(serde_json::Value::as_str)
}

/// What a provider's JSON says became of a charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChargeState {
    /// Charged.
    Succeeded,
    /// Still being processed.
    Pending,
    /// Not charged.
    Failed {
        /// The provider's failure code, if it gives one (lower case).
        code: Option<String>,
        /// Whether the answer names a decline anywhere.
        decline: bool,
    },
}

/// What `json` says became of a charge, in the dialects this reader knows, or `None` when it
/// does not say in a way known here (then it proves nothing):
/// - `status` (the IETF draft's examples, a Stripe Charge or PaymentIntent): `succeeded`;
///   `pending`, `processing`; `failed`, `canceled`, and a PaymentIntent back at
///   `requires_payment_method` after a failed attempt (`last_payment_error`);
/// - `resultCode` (Adyen): `Authorised`; `Pending`, `Received`; `Refused` (a decline),
///   `Cancelled`, `Error`.
///
/// Anything else (`requires_action`, `requires_capture`, `refunded`, `RedirectShopper`, a status
/// not documented) is not understood.
pub fn read_charge(json: &serde_json::Map<String, serde_json::Value>) -> Option<ChargeState> {
    let state = match status_field(json) {
        Some(status) => {
            let status = status.to_ascii_lowercase();
            draft::state(&status).or_else(|| stripe::state(&status, json))?
        }
        None => adyen::state(json)?,
    };
    Some(match state {
        State::Succeeded => ChargeState::Succeeded,
        State::Pending => ChargeState::Pending,
        State::Failed { decline } => ChargeState::Failed {
            code: failure_code(json),
            decline: decline || names_decline(json),
        },
    })
}

/// What one dialect's own words say became of a charge, before the failure's details are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Succeeded,
    Pending,
    Failed {
        /// The words themselves name a decline (Adyen's `Refused`).
        decline: bool,
    },
}

/// A failure's code, lower case, in the order the dialects put it: Stripe's (a Charge's
/// `failure_code`, a PaymentIntent's `last_payment_error.code`, an error's `error.code`), the
/// draft's `code`, Adyen's `refusalReasonCode`.
fn failure_code(json: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    stripe::failure_code_fields(json)
        .into_iter()
        .chain([
            draft::failure_code_field(json),
            adyen::failure_code_field(json),
        ])
        .flatten()
        .find_map(|v| match v {
            serde_json::Value::String(text) => Some(text.to_ascii_lowercase()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
}

/// Whether an answer names a decline anywhere: the draft's `decline_code`, Stripe's signs
/// ([`stripe::names_decline`]), a failure code that is a decline code, or a type or code that
/// says "declin" or `card_error`.
fn names_decline(json: &serde_json::Map<String, serde_json::Value>) -> bool {
    let code = failure_code(json).is_some_and(|code| is_decline_code(&code));
    draft::names_decline(json)
        || stripe::names_decline(json)
        || code
        || names(json, &["card_error", "declin"])
}

/// Whether a JSON field is there and not `null` (Stripe sends absent objects as `null`).
fn present(value: Option<&serde_json::Value>) -> bool {
    value.is_some_and(|v| !v.is_null())
}

/// Card networks' and providers' codes that are declines whatever else an answer says (Stripe's
/// decline codes, Adyen's refusal reasons): a failure naming one is final, and
/// `PAYMENT_RETRYABLE_FAILURES` may not list one.
const DECLINE_CODES: &[&str] = &[
    "authentication_required",
    "call_issuer",
    "card_not_supported",
    "card_velocity_exceeded",
    "currency_not_supported",
    "do_not_honor",
    "do_not_try_again",
    "expired_card",
    "fraudulent",
    "incorrect_cvc",
    "incorrect_number",
    "incorrect_pin",
    "incorrect_zip",
    "insufficient_funds",
    "invalid_account",
    "invalid_amount",
    "invalid_cvc",
    "invalid_expiry_month",
    "invalid_expiry_year",
    "invalid_number",
    "lost_card",
    "merchant_blacklist",
    "new_account_information_available",
    "no_action_taken",
    "not_permitted",
    "pickup_card",
    "restricted_card",
    "revocation_of_all_authorizations",
    "revocation_of_authorization",
    "security_violation",
    "service_not_allowed",
    "stolen_card",
    "stop_payment_order",
    "testmode_decline",
    "transaction_not_allowed",
    "try_again_later",
    "withdrawal_count_limit_exceeded",
];

/// Whether `code` is one of [`DECLINE_CODES`], or names a decline.
fn is_decline_code(code: &str) -> bool {
    let code = code.to_ascii_lowercase();
    code.contains("declin") || DECLINE_CODES.contains(&code.as_str())
}

/// A failure as a charge's answer: a decline, final, unless the deployment lists its code as
/// retryable and the answer names no decline.
fn failed_charge(
    status: StatusCode,
    body: Option<&str>,
    code: Option<String>,
    decline: bool,
    reading: Reading<'_>,
) -> PaymentError {
    let reason = short_reason(status, body, reading.secret);
    match code {
        Some(code) if !decline && reading.retryable.contains(&code) => PaymentError::Failed {
            status: Some(status.as_u16()),
            code,
            reason,
        },
        _ => PaymentError::Declined {
            status: Some(status.as_u16()),
            reason,
        },
    }
}

/// The decision for a provider's answer to a charge.
pub fn classify(
    status: StatusCode,
    retry_after: Option<Duration>,
    body: Option<&str>,
    reading: Reading<'_>,
) -> Result<(), PaymentError> {
    let secret = reading.secret;
    let code = status.as_u16();
    if status.is_success() {
        let json = provider_json(body);
        return match json.as_ref().and_then(read_charge) {
            Some(ChargeState::Succeeded) => Ok(()),
            Some(ChargeState::Pending) => Err(PaymentError::InFlight { retry_after }),
            Some(ChargeState::Failed { code, decline }) => {
                Err(failed_charge(status, body, code, decline, reading))
            }
            None => Err(PaymentError::Ambiguous {
                reason: format!(
                    "HTTP {code} without the provider's JSON (body {})",
                    match body {
                        None => "unreadable".to_owned(),
                        Some(text) => format!("of {} bytes", text.len()),
                    }
                ),
                source: None,
            }),
        };
    }
    match code {
        409 => Err(PaymentError::InFlight { retry_after }),
        402 => Err(PaymentError::Declined {
            status: Some(code),
            reason: short_reason(status, body, secret),
        }),
        400 | 422 => match provider_json(body) {
            Some(json) if names_idempotency(&json) => Err(idempotency_refusal(
                status,
                retry_after,
                &json,
                body,
                secret,
            )),
            Some(json) if is_decline(&json) => Err(PaymentError::Declined {
                status: Some(code),
                reason: short_reason(status, body, secret),
            }),
            // Adyen answers a refusal 200 and an error 422 with its `resultCode`.
            Some(json) if json.contains_key("resultCode") => match read_charge(&json) {
                Some(ChargeState::Failed { code, decline }) => {
                    Err(failed_charge(status, body, code, decline, reading))
                }
                _ => Err(PaymentError::Refused {
                    status: Some(code),
                    reason: short_reason(status, body, secret),
                }),
            },
            // The provider's JSON, but no decline: a missing parameter, a contract change. This
            // request is wrong, never POISON; other orders may well pass.
            Some(_) => Err(PaymentError::Refused {
                status: Some(code),
                reason: short_reason(status, body, secret),
            }),
            // Not the provider's JSON: a validator or a WAF in front of it. Our setup.
            None => Err(misconfigured(status, body, secret)),
        },
        _ => Err(unanswered(status, body, secret)),
    }
}

/// The decision for a provider's answer to a lookup of `amount`'s charge.
///
/// | answer | status |
/// |---|---|
/// | 2xx, succeeded | `Succeeded` |
/// | 2xx, pending or processing; 409 | `Pending` |
/// | 2xx, a failure whose code is listed retryable and that names no decline | `Failed` |
/// | 2xx, any other failure | `Declined` (final) |
/// | 2xx, the provider's JSON in a shape or status not known here | `Unclear` (nothing charged) |
/// | 2xx, any of the above for another amount or currency | `Conflict` |
/// | 404 that is the provider's "no such charge" | `Unknown` |
/// | 2xx without JSON, any other 404 | an error: cannot tell now |
/// | anything else | an error, as a charge's answer would be |
pub fn classify_lookup(
    status: StatusCode,
    amount: Money,
    body: Option<&str>,
    reading: Reading<'_>,
) -> Result<ChargeStatus, PaymentError> {
    let json = provider_json(body);
    let found = match (status.as_u16(), &json) {
        (409, _) => ChargeStatus::Pending,
        (200..=299, Some(json)) => match read_charge(json) {
            Some(ChargeState::Succeeded) => ChargeStatus::Succeeded,
            Some(ChargeState::Pending) => ChargeStatus::Pending,
            // Listed as retryable and no decline: definitely not charged, may be again.
            Some(ChargeState::Failed {
                code: Some(code),
                decline: false,
            }) if reading.retryable.contains(&code) => ChargeStatus::Failed,
            // Any other failure is final: charging again after the key window would send a
            // declined card (or a failure nobody said may be retried) to the network again.
            Some(ChargeState::Failed { .. }) => ChargeStatus::Declined,
            None => ChargeStatus::Unclear,
        },
        // Only the provider's own "no such charge" counts. A 404 may just as well be a missing
        // route (an API gateway answers those in JSON too), and reading that as "never charged"
        // would charge again.
        (404, Some(json)) if names_missing_charge(json) => return Ok(ChargeStatus::Unknown),
        (200..=299 | 404, _) => {
            return Err(PaymentError::Ambiguous {
                reason: format!("lookup answered HTTP {status} without a known status"),
                source: None,
            });
        }
        _ => return Err(unanswered(status, body, reading.secret)),
    };
    let Some(json) = json.as_ref() else {
        return Ok(found);
    };
    Ok(
        match charged_money(json, amount, found == ChargeStatus::Succeeded) {
            MoneyHeld::Same => found,
            MoneyHeld::Other => ChargeStatus::Conflict,
            MoneyHeld::Unreadable => ChargeStatus::Unclear,
        },
    )
}

/// What a look-up's answer says of the money under our key, held against the order's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MoneyHeld {
    /// Every amount and currency it names is the order's (or it names none).
    Same,
    /// It names another amount or currency, read exactly: not this order's charge.
    Other,
    /// It names an amount or currency that cannot be read exactly (text, a decimal, a nested
    /// object without its value, null): never a match, so the check fails closed.
    Unreadable,
}

/// The money a look-up's answer names, in each dialect's own fields: the draft's and a Stripe
/// Charge's integer `amount` and `currency`, a Stripe PaymentIntent's `amount` and, once
/// succeeded, `amount_received`, Adyen's `amount.value` and `amount.currency`. Amounts are read
/// only as JSON integers of minor units (as sent), currencies only as three-letter codes.
fn charged_money(
    json: &serde_json::Map<String, serde_json::Value>,
    order: Money,
    succeeded: bool,
) -> MoneyHeld {
    // Adyen's nested money, else the draft's and Stripe's top-level `amount` and `currency`.
    let (amount, nested_currency) = adyen::money(json).unwrap_or((json.get("amount"), None));
    let received = stripe::amount_received(json).filter(|_| succeeded);
    let amounts = [amount, received].into_iter().flatten().map(|value| {
        // `as_u64` reads integers only: `5000.0`, `"5000"` and `-1` are not read.
        match value.as_u64() {
            Some(minor) if minor == order.minor => MoneyHeld::Same,
            Some(_) => MoneyHeld::Other,
            None => MoneyHeld::Unreadable,
        }
    });
    let named_currencies = [draft::currency(json), nested_currency];
    let currencies = named_currencies.into_iter().flatten().map(|value| {
        match value.as_str().and_then(Currency::parse) {
            Some(code) if code == order.currency => MoneyHeld::Same,
            Some(_) => MoneyHeld::Other,
            None => MoneyHeld::Unreadable,
        }
    });
    // A charge said to have succeeded for an amount without any currency is no proof that it is
    // this order's (1000 of what?): never a match. (A failure moved no money, so it is read by
    // its status.)
    let no_currency =
        (succeeded && amount.is_some() && named_currencies.iter().all(Option::is_none))
            .then_some(MoneyHeld::Unreadable);
    amounts
        .chain(currencies)
        .chain(no_currency)
        .fold(MoneyHeld::Same, |held, field| match (held, field) {
            (MoneyHeld::Other, _) | (_, MoneyHeld::Other) => MoneyHeld::Other,
            (MoneyHeld::Unreadable, _) | (_, MoneyHeld::Unreadable) => MoneyHeld::Unreadable,
            _ => MoneyHeld::Same,
        })
}

/// A status that is neither an answer nor a refusal of the charge itself.
fn unanswered(status: StatusCode, body: Option<&str>, secret: Option<&str>) -> PaymentError {
    match status.as_u16() {
        408 | 429 | 500..=599 => PaymentError::Ambiguous {
            reason: format!("HTTP {}", status.as_u16()),
            source: None,
        },
        _ => misconfigured(status, body, secret),
    }
}

fn misconfigured(status: StatusCode, body: Option<&str>, secret: Option<&str>) -> PaymentError {
    PaymentError::Misconfigured {
        status: Some(status.as_u16()),
        reason: short_reason(status, body, secret),
    }
}

/// Whether the provider's error type or code (`type`, `code`, `error.type`, `error.code`,
/// Adyen's `errorCode`) contains one of `words` (Stripe: `error.type` `idempotency_error`,
/// `card_error`; others put it in `code`).
fn names(json: &serde_json::Map<String, serde_json::Value>, words: &[&str]) -> bool {
    let error = json.get("error");
    [
        json.get("type"),
        json.get("code"),
        json.get("errorCode"),
        error.and_then(|e| e.get("type")),
        error.and_then(|e| e.get("code")),
    ]
    .into_iter()
    .flatten()
    .filter_map(serde_json::Value::as_str)
    .map(str::to_ascii_lowercase)
    .any(|text| words.iter().any(|word| text.contains(word)))
}

/// Whether the provider's error is about the idempotency key: its type or code names it (the
/// draft's problem `type` URI, Stripe's `idempotency_error`), or its title does, or it is
/// Adyen's `errorCode` 704 ("request already processed or in progress").
fn names_idempotency(json: &serde_json::Map<String, serde_json::Value>) -> bool {
    names(json, &["idempotency"]) || adyen::in_flight(json) || draft::title_names_idempotency(json)
}

/// What a 400/422 about the idempotency key means. Only a key reused with another request is a
/// conflict (POISON): the draft answers it 422, Stripe 400 with a text saying so. A key that is
/// missing or malformed (the draft's 400 "Idempotency-Key is missing", a proxy that strips the
/// header) is our setup, and every order would get it: never POISON. When the text cannot tell,
/// RETRY is the side that loses nothing.
fn idempotency_refusal(
    status: StatusCode,
    retry_after: Option<Duration>,
    json: &serde_json::Map<String, serde_json::Value>,
    body: Option<&str>,
    secret: Option<&str>,
) -> PaymentError {
    let text = problem_text(json);
    let says = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if says(&[
        "in use",
        "in_use",
        "outstanding",
        "in progress",
        "being processed",
    ]) {
        return PaymentError::InFlight { retry_after };
    }
    if says(&[
        "missing",
        "required",
        "malformed",
        "invalid",
        "format",
        "too long",
    ]) {
        return misconfigured(status, body, secret);
    }
    if status == StatusCode::UNPROCESSABLE_ENTITY
        || says(&[
            "reuse",
            "already used",
            "different",
            "same parameters",
            "does not match",
        ])
    {
        return PaymentError::KeyReused {
            status: Some(status.as_u16()),
            reason: short_reason(status, body, secret),
        };
    }
    misconfigured(status, body, secret)
}

/// The provider's words about an error, lower-cased: the problem's `title` and `detail`, the
/// `message`, and the codes (`code`, `error.code`, `error.message`). Not the `type`, a URI.
fn problem_text(json: &serde_json::Map<String, serde_json::Value>) -> String {
    let error = json.get("error");
    [
        json.get("title"),
        json.get("detail"),
        json.get("message"),
        json.get("code"),
        error.and_then(|e| e.get("message")),
        error.and_then(|e| e.get("code")),
    ]
    .into_iter()
    .flatten()
    .filter_map(serde_json::Value::as_str)
    .map(str::to_ascii_lowercase)
    .collect::<Vec<_>>()
    .join(" | ")
}

/// Whether a 400/422 body is the provider declining the payment (a `card_error`, a code or type
/// naming a decline, or a `decline_code`), as opposed to refusing our request.
fn is_decline(json: &serde_json::Map<String, serde_json::Value>) -> bool {
    draft::has_decline_code(json)
        || stripe::error_has_decline_code(json)
        || names(json, &["card_error", "declin"])
}

/// Whether a 404 body is the provider's "no charge with this key" (`status: not_found`, or a
/// code such as Stripe's `resource_missing`).
fn names_missing_charge(json: &serde_json::Map<String, serde_json::Value>) -> bool {
    draft::names_missing_charge(json)
        || names(json, &["resource_missing", "charge_not_found", "not_found"])
}

/// A short reason from a provider's error body (`message`, `error.message`, `error`, `reason`,
/// or a problem's `title`), else the status text; every run of the key the request carried
/// scrubbed from the whole text first ([`super::redact::scrub_key`], so a key that straddles the
/// cut is still found), then cut to [`REASON_MAX`] characters, with the provider's error code
/// when it gives one, redacted ([`redact`]).
fn short_reason(status: StatusCode, body: Option<&str>, secret: Option<&str>) -> String {
    let json = body.and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok());
    let field = |names: &[Option<&serde_json::Value>]| {
        names
            .iter()
            .flatten()
            .find_map(|field| field.as_str().map(str::to_owned))
    };
    let from_body = json.as_ref().and_then(|v| {
        field(&[
            v.get("message"),
            v.get("error").and_then(|e| e.get("message")),
            v.get("error"),
            v.get("reason"),
            v.get("title"),
        ])
    });
    let code = json
        .as_ref()
        .and_then(|v| field(&[v.get("error").and_then(|e| e.get("code")), v.get("code")]));
    let reason =
        from_body.unwrap_or_else(|| status.canonical_reason().unwrap_or("rejected").to_owned());
    let scrub = |reason: String| match secret.and_then(|key| super::redact::scrub_key(&reason, key))
    {
        Some(scrubbed) => scrubbed,
        None => reason,
    };
    let cut = |reason: String| match reason.char_indices().nth(REASON_MAX) {
        Some((cut, _)) => format!("{}...", &reason[..cut]),
        None => reason,
    };
    // Scrubbed before it is cut: a key cut in two is no longer found whole.
    let reason = cut(scrub(reason));
    match code {
        Some(code) if code.len() <= 64 && !reason.contains(&code) => {
            redact(&format!("{reason} ({code})"))
        }
        _ => redact(&reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).expect("status")
    }

    fn charge(code: u16, body: &str) -> Result<(), PaymentError> {
        classify(status(code), None, Some(body), Reading::default())
    }

    /// A code of 64 characters is a code; one of 65 is refused with the variable's name.
    #[test]
    fn a_retryable_failure_code_is_at_most_64_characters() {
        let read = |codes: String| {
            RetryableFailures::from_env(&Env::new(move |name| {
                (name == "PAYMENT_RETRYABLE_FAILURES").then(|| codes.clone())
            }))
        };
        let longest = "p".repeat(64);
        let codes = read(format!("{longest}, processing_error")).expect("64 characters");
        assert!(codes.contains(&longest) && codes.contains("processing_error"));
        let error = read("p".repeat(65)).expect_err("65 characters");
        assert!(error.to_string().contains("PAYMENT_RETRYABLE_FAILURES"));
    }

    const SUCCEEDED: &str = r#"{"id":"ch_1","status":"succeeded"}"#;
    const DRAFT_MISSING: &str = r#"{"type":"https://developer.example.com/idempotency","title":"Idempotency-Key is missing","detail":"This operation is idempotent and it requires correct usage of Idempotency Key."}"#;
    const DRAFT_REUSED: &str = r#"{"type":"https://developer.example.com/idempotency","title":"Idempotency-Key is already used","detail":"This operation is idempotent and it requires correct usage of Idempotency Key. Idempotency Key MUST not be reused across different payloads of this operation."}"#;

    #[test]
    fn every_answer_has_its_decision() {
        let kind = |r: Result<(), PaymentError>| match r {
            Ok(()) => "charged",
            Err(PaymentError::NotSent { .. }) => "not sent",
            Err(PaymentError::Ambiguous { .. }) => "ambiguous",
            Err(PaymentError::InFlight { .. }) => "in flight",
            Err(PaymentError::Declined { .. }) => "declined",
            Err(PaymentError::KeyReused { .. }) => "key reused",
            Err(PaymentError::Misconfigured { .. }) => "misconfigured",
            Err(PaymentError::Refused { .. }) => "refused",
            Err(PaymentError::Failed { .. }) => "failed",
        };
        let declined = r#"{"error":{"type":"card_error","message":"card declined"}}"#;
        let reused = r#"{"error":{"type":"idempotency_error","message":"reused"}}"#;
        let invalid = r#"{"error":{"type":"invalid_request_error","message":"Missing currency"}}"#;
        let cases: &[(u16, &str, &str)] = &[
            (200, SUCCEEDED, "charged"),
            (201, SUCCEEDED, "charged"),
            (202, r#"{"status":"pending"}"#, "in flight"),
            (200, r#"{"status":"processing"}"#, "in flight"),
            (200, r#"{"status":"failed"}"#, "declined"),
            (200, "<html>ok</html>", "ambiguous"),
            (200, "", "ambiguous"),
            (204, "", "ambiguous"),
            (200, r#"{"id":"ch_1"}"#, "ambiguous"),
            (200, r#"{"status":"refunded"}"#, "ambiguous"),
            (409, "{}", "in flight"),
            (402, "", "declined"),
            (402, declined, "declined"),
            (400, declined, "declined"),
            (422, declined, "declined"),
            (
                422,
                r#"{"code":"insufficient_funds","decline_code":"x"}"#,
                "declined",
            ),
            (400, r#"{"code":"payment_declined"}"#, "declined"),
            // The provider's JSON, but no decline: this request is wrong, not the payment.
            (400, invalid, "refused"),
            (400, r#"{"message":"Invalid request body"}"#, "refused"),
            (422, reused, "key reused"),
            // Stripe: another request with the key is still running.
            (400, r#"{"code":"idempotency_key_in_use"}"#, "in flight"),
            // Stripe's answer to a key reused with other parameters.
            (
                400,
                r#"{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}"#,
                "key reused",
            ),
            // The IETF draft's own examples (application/problem+json).
            (400, DRAFT_MISSING, "misconfigured"),
            (422, DRAFT_REUSED, "key reused"),
            (
                400,
                r#"{"type":"https://example.com/idempotency","title":"Idempotency-Key is malformed"}"#,
                "misconfigured",
            ),
            (
                400,
                r#"{"type":"https://example.com/idempotency","title":"Idempotency-Key problem"}"#,
                "misconfigured",
            ),
            (400, "<html>bad request</html>", "misconfigured"),
            (422, "", "misconfigured"),
            (408, "", "ambiguous"),
            (429, "", "ambiguous"),
            (500, "", "ambiguous"),
            (502, "", "ambiguous"),
            (503, "", "ambiguous"),
            (504, "", "ambiguous"),
            (401, "", "misconfigured"),
            (403, "", "misconfigured"),
            (404, "", "misconfigured"),
            (405, "", "misconfigured"),
            (407, "", "misconfigured"),
            (410, "", "misconfigured"),
            (301, "", "misconfigured"),
            (302, "", "misconfigured"),
            (101, "", "misconfigured"),
        ];
        for (code, body, expected) in cases {
            assert_eq!(kind(charge(*code, body)), *expected, "{code} {body}");
        }
        assert_eq!(
            kind(classify(status(200), None, None, Reading::default())),
            "ambiguous"
        );
        // Other dialects: Stripe's PaymentIntent and Charge, Adyen's resultCode.
        let dialects: &[(u16, &str, &str)] = &[
            (
                200,
                r#"{"object":"payment_intent","status":"processing"}"#,
                "in flight",
            ),
            (
                200,
                r#"{"object":"payment_intent","status":"requires_payment_method","last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline"}}"#,
                "declined",
            ),
            (
                200,
                r#"{"object":"payment_intent","status":"requires_action"}"#,
                "ambiguous",
            ),
            // Created and never attempted: Stripe sends the absent error as null.
            (
                200,
                r#"{"object":"payment_intent","status":"requires_payment_method","last_payment_error":null}"#,
                "ambiguous",
            ),
            (
                200,
                r#"{"status":"failed","outcome":{"type":"issuer_declined"}}"#,
                "declined",
            ),
            (
                200,
                r#"{"resultCode":"Authorised","pspReference":"x"}"#,
                "charged",
            ),
            (
                200,
                r#"{"resultCode":"Refused","refusalReason":"Not enough balance"}"#,
                "declined",
            ),
            (200, r#"{"resultCode":"Received"}"#, "in flight"),
            (200, r#"{"resultCode":"RedirectShopper"}"#, "ambiguous"),
            (
                422,
                r#"{"resultCode":"Refused","refusalReason":"CVC Declined"}"#,
                "declined",
            ),
            // Adyen's error shape (`errorCode`, `errorType`, `message`): 704 is its key in
            // flight, not a request of ours that is wrong.
            (
                422,
                r#"{"status":422,"errorCode":"704","errorType":"validation","message":"request already processed or in progress"}"#,
                "in flight",
            ),
            (
                422,
                r#"{"status":422,"errorCode":"14_030","errorType":"validation","message":"Return URL is missing."}"#,
                "refused",
            ),
        ];
        for (code, body, expected) in dialects {
            assert_eq!(kind(charge(*code, body)), *expected, "{code} {body}");
        }
        // A failure the deployment lists as retryable, and names no decline: not final.
        let retryable = RetryableFailures::of(&["processing_error"]);
        let reading = Reading {
            retryable: &retryable,
            secret: None,
        };
        let processing = r#"{"status":"failed","failure_code":"processing_error"}"#;
        assert_eq!(
            kind(classify(status(200), None, Some(processing), reading)),
            "failed"
        );
        assert_eq!(kind(charge(200, processing)), "declined", "unless listed");
        let declined_too = r#"{"status":"failed","failure_code":"processing_error","decline_code":"do_not_honor"}"#;
        assert_eq!(
            kind(classify(status(200), None, Some(declined_too), reading)),
            "declined",
            "a decline is never retryable"
        );
    }

    #[test]
    fn only_a_failure_that_went_out_may_have_charged() {
        use idempotency::guard::Effect;
        for (code, effect) in [
            (504, Effect::Maybe),
            (409, Effect::Maybe),
            // A 303 See Other may follow a POST the provider did process.
            (303, Effect::Maybe),
            (402, Effect::None),
            (401, Effect::None),
        ] {
            assert_eq!(
                charge(code, "").expect_err("failed").effect(),
                effect,
                "{code}"
            );
        }
    }

    #[test]
    fn a_lookup_answer_has_its_meaning() {
        let ten = Money::parse("10", crate::money::Currency::EUR).expect("amount");
        let retryable = RetryableFailures::of(&["processing_error"]);
        let reading = Reading {
            retryable: &retryable,
            secret: None,
        };
        let lookup = |code, body: &str| classify_lookup(status(code), ten, Some(body), reading);
        let cases: &[(u16, &str, ChargeStatus)] = &[
            (
                200,
                r#"{"status":"succeeded","amount":1000,"currency":"eur"}"#,
                ChargeStatus::Succeeded,
            ),
            (200, r#"{"status":"pending"}"#, ChargeStatus::Pending),
            (409, "{}", ChargeStatus::Pending),
            // Any failure is final, whatever it names, unless listed retryable.
            (200, r#"{"status":"failed"}"#, ChargeStatus::Declined),
            (
                200,
                r#"{"status":"failed","decline_code":"insufficient_funds"}"#,
                ChargeStatus::Declined,
            ),
            (
                200,
                r#"{"status":"failed","error":{"type":"card_error","code":"card_declined"}}"#,
                ChargeStatus::Declined,
            ),
            (
                200,
                r#"{"status":"failed","failure_code":"processing_error"}"#,
                ChargeStatus::Failed,
            ),
            (
                200,
                r#"{"status":"failed","failure_code":"processing_error","outcome":{"type":"blocked"}}"#,
                ChargeStatus::Declined,
            ),
            // Stripe's PaymentIntent after a declined attempt, and Adyen's refusal.
            (
                200,
                r#"{"object":"payment_intent","amount":1000,"currency":"eur","status":"requires_payment_method","last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds"}}"#,
                ChargeStatus::Declined,
            ),
            (
                200,
                r#"{"resultCode":"Refused","amount":{"value":1000,"currency":"EUR"}}"#,
                ChargeStatus::Declined,
            ),
            (
                200,
                r#"{"resultCode":"Authorised","amount":{"value":1000,"currency":"EUR"}}"#,
                ChargeStatus::Succeeded,
            ),
            // The provider's JSON, but a status (or no status) not known here: unclear.
            (200, r#"{"status":"under_review"}"#, ChargeStatus::Unclear),
            (
                200,
                r#"{"object":"payment_intent","status":"requires_payment_method","last_payment_error":null,"decline_code":null}"#,
                ChargeStatus::Unclear,
            ),
            // A null decline code names no decline; a known decline code does, without one.
            (
                200,
                r#"{"status":"failed","failure_code":"processing_error","decline_code":null}"#,
                ChargeStatus::Failed,
            ),
            (
                200,
                r#"{"status":"failed","code":"insufficient_funds"}"#,
                ChargeStatus::Declined,
            ),
            (200, r#"{"id":"ch_1"}"#, ChargeStatus::Unclear),
            (
                200,
                r#"{"object":"payment_intent","status":"requires_capture"}"#,
                ChargeStatus::Unclear,
            ),
            // A charge under the key for another amount or currency is not this order's.
            (
                200,
                r#"{"status":"succeeded","amount":1100}"#,
                ChargeStatus::Conflict,
            ),
            (
                200,
                r#"{"status":"succeeded","amount":1000,"currency":"USD"}"#,
                ChargeStatus::Conflict,
            ),
            (
                200,
                r#"{"resultCode":"Authorised","amount":{"value":999,"currency":"EUR"}}"#,
                ChargeStatus::Conflict,
            ),
            (
                404,
                r#"{"error":{"code":"resource_missing","message":"No such charge"}}"#,
                ChargeStatus::Unknown,
            ),
            (404, r#"{"status":"not_found"}"#, ChargeStatus::Unknown),
            // Adyen's error shape names its code in `errorCode`.
            (
                404,
                r#"{"status":404,"errorCode":"not_found","errorType":"validation","message":"Payment not found"}"#,
                ChargeStatus::Unknown,
            ),
        ];
        for (code, body, expected) in cases {
            assert_eq!(lookup(*code, body).ok(), Some(*expected), "{code} {body}");
        }
        // A 404 that is not the provider's "no such charge" (a missing route, an API gateway's
        // JSON) cannot tell: never read as "never charged".
        for foreign in ["Not Found", r#"{"message":"Not Found"}"#, ""] {
            assert!(lookup(404, foreign).is_err(), "{foreign}");
        }
        assert!(matches!(
            lookup(200, "<html>"),
            Err(PaymentError::Ambiguous { .. })
        ));
        assert!(matches!(
            lookup(503, ""),
            Err(PaymentError::Ambiguous { .. })
        ));
        assert!(matches!(
            lookup(401, ""),
            Err(PaymentError::Misconfigured { .. })
        ));
    }

    /// A deployment can list a processing error as retryable, never a decline.
    #[test]
    fn retryable_failures_never_name_a_decline() {
        let read = |value: &str| {
            let value = value.to_owned();
            RetryableFailures::from_env(&Env::new(move |name| {
                (name == "PAYMENT_RETRYABLE_FAILURES").then(|| value.clone())
            }))
        };
        assert_eq!(
            read(" processing_error, Issuer_Unavailable "),
            Ok(RetryableFailures::of(&[
                "processing_error",
                "issuer_unavailable"
            ]))
        );
        for decline in [
            "card_declined",
            "insufficient_funds",
            "do_not_honor",
            "expired_card",
        ] {
            let refused = read(&format!("processing_error,{decline}")).expect_err(decline);
            assert!(
                refused.to_string().contains("PAYMENT_RETRYABLE_FAILURES"),
                "{refused}"
            );
        }
        assert!(read("bad code!").is_err());
        assert_eq!(read(""), Ok(RetryableFailures::default()));
    }

    /// The key echoed past the cut: scrubbed from the whole text before it is cut, by runs.
    #[test]
    fn the_key_is_scrubbed_before_the_reason_is_cut() {
        const KEY: &str = "QwertyUiopAsdfGhjkLzxcVbnmMnbvCxzL";
        for filler in [180, 190, 199] {
            let body = format!(r#"{{"error":{{"message":"{}{KEY}"}}}}"#, "r".repeat(filler));
            let reading = Reading {
                secret: Some(KEY),
                ..Reading::default()
            };
            let Err(PaymentError::Misconfigured { reason, .. }) =
                classify(status(401), None, Some(&body), reading)
            else {
                panic!("refused");
            };
            if filler < 190 {
                assert!(reason.contains("[redacted]"), "{filler}: {reason}");
            }
            for run in KEY.as_bytes().windows(8) {
                assert!(
                    !reason.contains(std::str::from_utf8(run).expect("ascii")),
                    "{filler}: {reason}"
                );
            }
        }
    }

    #[test]
    fn the_reason_comes_from_the_body_and_is_short() {
        let err = charge(402, r#"{"error":{"message":"card declined"}}"#).expect_err("declined");
        assert_eq!(
            err.to_string(),
            "payment declined (HTTP 402): card declined"
        );
        let long = format!(
            r#"{{"code":"card_declined","message":"{}"}}"#,
            "x".repeat(1_000)
        );
        match charge(400, &long) {
            Err(PaymentError::Declined { reason, .. }) => {
                assert_eq!(
                    reason,
                    format!("{}... (card_declined)", "x".repeat(REASON_MAX))
                )
            }
            other => panic!("{other:?}"),
        }
        // A gateway that echoes the credential it refused: the reason keeps the words, not it.
        let echoed = r#"{"error":{"code":"unauthorized","message":"bad header Authorization: Bearer sk_live_abc123"}}"#;
        match charge(401, echoed) {
            Err(PaymentError::Misconfigured { reason, .. }) => assert_eq!(
                reason,
                "bad header Authorization: Bearer [redacted] (unauthorized)"
            ),
            other => panic!("{other:?}"),
        }
        match charge(404, "not json") {
            Err(PaymentError::Misconfigured { reason, .. }) => assert_eq!(reason, "Not Found"),
            other => panic!("{other:?}"),
        }
    }

    /// Each place an answer can name a decline is enough alone; without one, none is named.
    #[test]
    fn a_decline_named_anywhere_is_a_decline() {
        let names = |body: &str| {
            let json = provider_json(Some(body)).expect("json");
            names_decline(&json)
        };
        for body in [
            r#"{"decline_code":"generic"}"#,
            r#"{"error":{"decline_code":"generic"}}"#,
            r#"{"last_payment_error":{"decline_code":"generic"}}"#,
            r#"{"outcome":{"type":"issuer_declined"}}"#,
            r#"{"outcome":{"type":"blocked"}}"#,
            r#"{"last_payment_error":{"type":"card_declined_now"}}"#,
            r#"{"last_payment_error":{"code":"expired_card"}}"#,
            // Every field is read, not only the first code found.
            r#"{"failure_code":"processing_error","last_payment_error":{"code":"expired_card"}}"#,
            r#"{"refusalReasonCode":"stolen_card"}"#,
            r#"{"type":"card_error"}"#,
            r#"{"error":{"code":"card_declined"}}"#,
        ] {
            assert!(names(body), "{body}");
        }
        for body in [
            r#"{"decline_code":null,"outcome":{"type":"authorized"}}"#,
            r#"{"failure_code":"processing_error","last_payment_error":null}"#,
            r#"{"status":"failed"}"#,
        ] {
            assert!(!names(body), "{body}");
        }
    }

    /// Adyen's answers in each of its result codes, and a numeric refusal reason read as text.
    #[test]
    fn adyen_result_codes_have_their_states() {
        let read = |body: &str| read_charge(&provider_json(Some(body)).expect("json"));
        assert_eq!(
            read(r#"{"resultCode":"Authorised"}"#),
            Some(ChargeState::Succeeded)
        );
        assert_eq!(
            read(r#"{"resultCode":"Received"}"#),
            Some(ChargeState::Pending)
        );
        for (body, decline) in [
            (r#"{"resultCode":"Refused","refusalReasonCode":14}"#, true),
            (
                r#"{"resultCode":"Cancelled","refusalReasonCode":14}"#,
                false,
            ),
            (r#"{"resultCode":"Error","refusalReasonCode":14}"#, false),
        ] {
            assert_eq!(
                read(body),
                Some(ChargeState::Failed {
                    code: Some("14".to_owned()),
                    decline
                }),
                "{body}"
            );
        }
        assert_eq!(read(r#"{"resultCode":"RedirectShopper"}"#), None);
    }

    /// A 400 or 422 is read as a charge's state only in Adyen's shape (`resultCode`): the
    /// draft's or Stripe's `status` in a refusal is a wrong request, even with a retryable code.
    #[test]
    fn only_adyen_refusals_are_read_as_a_charges_state() {
        let retryable = RetryableFailures::of(&["processing_error"]);
        let reading = Reading {
            retryable: &retryable,
            secret: None,
        };
        let answer = |body: &str| classify(status(422), None, Some(body), reading);
        assert!(matches!(
            answer(r#"{"status":"failed","code":"processing_error"}"#),
            Err(PaymentError::Refused { .. })
        ));
        assert!(matches!(
            answer(r#"{"resultCode":"Error","refusalReasonCode":"processing_error"}"#),
            Err(PaymentError::Failed { .. })
        ));
    }

    /// Issue 49, finding 1: the money a look-up names is read in each dialect's own fields, and
    /// only exactly (integers of minor units, three-letter codes). Another amount read exactly
    /// is a conflict; an amount or currency present but not readable so is unclear, even when
    /// its text looks like the order's: never a match.
    #[test]
    fn the_money_a_look_up_names_is_read_exactly_or_not_at_all() {
        let ten = Money::parse("10", crate::money::Currency::EUR).expect("amount");
        let retryable = RetryableFailures::default();
        let reading = Reading {
            retryable: &retryable,
            secret: None,
        };
        let lookup = |body: &str| classify_lookup(status(200), ten, Some(body), reading);
        let cases: &[(&str, ChargeStatus)] = &[
            // The draft's and Stripe's integer amount, a lower-case currency.
            (
                r#"{"status":"succeeded","amount":5000,"currency":"EUR"}"#,
                ChargeStatus::Conflict,
            ),
            (
                r#"{"status":"succeeded","amount":1000,"currency":"eur"}"#,
                ChargeStatus::Succeeded,
            ),
            // Worded otherwise: not read, whatever it says.
            (
                r#"{"status":"succeeded","amount":"5000","currency":"EUR"}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":"1000","currency":"EUR"}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":5000.0,"currency":"EUR"}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":1000.0}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":1e3}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":-1000}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":null}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":1000,"currency":978}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":1000,"currency":"EURO"}"#,
                ChargeStatus::Unclear,
            ),
            // Adyen's nested money: its value read as an integer, its currency beside it.
            (
                r#"{"resultCode":"Authorised","amount":{"value":"5000","currency":"EUR"}}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"value":1000,"currency":"USD"}}"#,
                ChargeStatus::Conflict,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"currency":"EUR"}}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"value":1000,"currency":"EUR"}}"#,
                ChargeStatus::Succeeded,
            ),
            // A Stripe PaymentIntent: what it received counts once it succeeded; before, it is 0.
            (
                r#"{"object":"payment_intent","status":"succeeded","amount":1000,"amount_received":5000,"currency":"eur"}"#,
                ChargeStatus::Conflict,
            ),
            (
                r#"{"object":"payment_intent","status":"succeeded","amount":1000,"amount_received":"1000","currency":"eur"}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"object":"payment_intent","status":"succeeded","amount":1000,"amount_received":1000,"currency":"eur"}"#,
                ChargeStatus::Succeeded,
            ),
            (
                r#"{"object":"payment_intent","status":"processing","amount":1000,"amount_received":0,"currency":"eur"}"#,
                ChargeStatus::Pending,
            ),
            // Another amount read exactly wins over a field that cannot be read: a conflict.
            (
                r#"{"status":"succeeded","amount":5000,"currency":"€"}"#,
                ChargeStatus::Conflict,
            ),
            // An amount without its currency cannot be read as money: 1000 of what? (The
            // simulator's `bare` look-ups completed a currency-only conflict as paid so.)
            (
                r#"{"status":"succeeded","amount":1000}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"value":1000}}"#,
                ChargeStatus::Unclear,
            ),
            // No money named at all: the status alone.
            (r#"{"status":"succeeded"}"#, ChargeStatus::Succeeded),
        ];
        for (body, expected) in cases {
            assert_eq!(lookup(body).ok(), Some(*expected), "{body}");
        }
    }

    /// A look-up's failure with a code nobody listed as retryable is final.
    #[test]
    fn a_looked_up_failure_not_listed_is_final() {
        let ten = Money::parse("10", crate::money::Currency::EUR).expect("amount");
        let retryable = RetryableFailures::of(&["processing_error"]);
        let reading = Reading {
            retryable: &retryable,
            secret: None,
        };
        let lookup = |body: &str| classify_lookup(status(200), ten, Some(body), reading);
        assert!(matches!(
            lookup(r#"{"status":"failed","failure_code":"issuer_unavailable"}"#),
            Ok(ChargeStatus::Declined)
        ));
        assert!(matches!(
            lookup(r#"{"status":"failed","failure_code":"processing_error"}"#),
            Ok(ChargeStatus::Failed)
        ));
    }

    /// The provider's code is added to the reason once, and only when it is short.
    #[test]
    fn the_code_is_added_to_the_reason_once_and_short() {
        let reason = |body: &str| short_reason(status(400), Some(body), None);
        assert_eq!(
            reason(r#"{"code":"card_declined","message":"card_declined: no"}"#),
            "card_declined: no"
        );
        assert_eq!(
            reason(r#"{"code":"card_declined","message":"no"}"#),
            "no (card_declined)"
        );
        let long = "c".repeat(65);
        assert_eq!(
            reason(&format!(r#"{{"code":"{long}","message":"no"}}"#)),
            "no"
        );
        let longest = "c".repeat(64);
        assert_eq!(
            reason(&format!(r#"{{"code":"{longest}","message":"no"}}"#)),
            format!("no ({longest})")
        );
    }
}
