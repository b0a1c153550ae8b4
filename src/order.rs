//! The order: a record body decoded into an order, the id it names even when it is not one, and
//! the fingerprint a duplicate must match. What happens to an order is `handler`'s story.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use idempotency::Fingerprint;

use crate::money::{AmountError, Currency, Money};

/// Longest accepted `order_id`, in bytes. It is the idempotency key downstream too, and
/// providers cap those (Stripe: 255); DynamoDB caps a partition key at 2048 bytes.
pub const MAX_ORDER_ID_LEN: usize = 255;

/// A valid order: an `order_id` that can be carried exactly as the provider's idempotency key,
/// and an exact amount above zero in its currency.
#[derive(Debug, Clone, PartialEq)]
pub struct Order<'a> {
    /// The id: the store's key and the provider's idempotency key.
    pub order_id: Cow<'a, str>,
    /// The exact amount, in its currency.
    pub amount: Money,
}

impl Order<'_> {
    /// What a duplicate must match to be the same order: the id, the currency and the amount in
    /// minor units, however the body spelled them (`10.5`, `10.50`, `1.05e1`).
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&[
            self.order_id.as_bytes(),
            self.amount.currency.as_str().as_bytes(),
            &self.amount.minor.to_le_bytes(),
        ])
    }

    fn into_owned(self) -> Order<'static> {
        Order {
            order_id: Cow::Owned(self.order_id.into_owned()),
            amount: self.amount,
        }
    }
}

/// Why a body is not an order. The messages never quote the body: it may hold personal data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Nothing, or only white space.
    #[error("the body is empty")]
    Empty,
    /// Not JSON at all.
    #[error("the body is not valid JSON (line {line}, column {column})")]
    NotJson {
        /// Where the parser stopped.
        line: usize,
        /// Where the parser stopped.
        column: usize,
    },
    /// JSON, but not an object of order fields (an array, a wrong type, a duplicated key).
    #[error("the body is not a JSON object of order fields (line {line}, column {column})")]
    NotAnOrder {
        /// Where the parser stopped.
        line: usize,
        /// Where the parser stopped.
        column: usize,
    },
    /// No `order_id`, or null.
    #[error("order_id is missing")]
    MissingOrderId,
    /// `order_id` is not a string.
    #[error("order_id is not a string")]
    OrderIdNotString,
    /// `order_id` is the empty string.
    #[error("order_id is empty")]
    EmptyOrderId,
    /// `order_id` is longer than [`MAX_ORDER_ID_LEN`].
    #[error("order_id is longer than {MAX_ORDER_ID_LEN} bytes")]
    OrderIdTooLong,
    /// `order_id` has control characters.
    #[error("order_id contains control characters")]
    OrderIdControl,
    #[error(
        "order_id has leading or trailing white space, which an HTTP header drops: the charge \
         and its look-up would name different keys"
    )]
    /// `order_id` starts or ends with white space.
    OrderIdWhiteSpace,
    #[error(
        "order_id must be printable ASCII (it is sent as an HTTP header and a URL path segment)"
    )]
    /// `order_id` is not printable ASCII.
    OrderIdNotAscii,
    /// `order_id` is `.` or `..`.
    #[error("order_id cannot be \".\" or \"..\"")]
    OrderIdDotSegment,
    /// No `amount`.
    #[error("amount is missing")]
    MissingAmount,
    /// `amount` is not an exact amount above zero in its currency.
    #[error(transparent)]
    Amount(#[from] AmountError),
    /// `currency` is not a three-letter code.
    #[error("currency is not a three-letter ISO 4217 code")]
    CurrencyInvalid,
    /// An SNS envelope whose `Message` is not a string.
    #[error("the SNS envelope's Message is not a string")]
    EnvelopeMessageNotString,
    /// The order inside an SNS envelope is invalid.
    #[error("inside the SNS envelope: {0}")]
    InEnvelope(Box<DecodeError>),
}

/// The fields we read, each kept raw so a wrong type gets our own message, not serde's (which
/// would quote the value).
#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow, default)]
    order_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    amount: Option<&'a RawValue>,
    #[serde(borrow, default)]
    currency: Option<&'a RawValue>,
    #[serde(rename = "Type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(rename = "Message", borrow, default)]
    message: Option<&'a RawValue>,
}

/// Decodes a record body into an order, in `default_currency` unless it names one. An SNS
/// notification envelope (`"Type": "Notification"` with the order as a JSON string in
/// `Message`) is unwrapped once; raw delivery works as is.
pub fn decode_order(body: &str, default_currency: Currency) -> Result<Order<'_>, DecodeError> {
    let raw = parse_raw(body)?;
    if raw.kind.is_some_and(|k| k.get() == r#""Notification""#)
        && let Some(message) = raw.message
    {
        let inner = json_string(message).ok_or(DecodeError::EnvelopeMessageNotString)?;
        let order = parse_raw(&inner)
            .and_then(|inner_raw| order_from(&inner_raw, default_currency))
            .map_err(|e| DecodeError::InEnvelope(Box::new(e)))?;
        return Ok(order.into_owned());
    }
    order_from(&raw, default_currency)
}

/// The order id a body names, even when it is not a valid order (a conflicting amount, a bad
/// field), so an operator can still look it up in the table. Same envelope rule as
/// [`decode_order`].
pub fn order_id_hint(body: &str) -> Option<String> {
    let raw = parse_raw(body).ok()?;
    if raw.kind.is_some_and(|k| k.get() == r#""Notification""#)
        && let Some(message) = raw.message
    {
        let inner = json_string(message)?;
        let inner_raw = parse_raw(&inner).ok()?;
        return json_string(inner_raw.order_id?).map(Cow::into_owned);
    }
    json_string(raw.order_id?).map(Cow::into_owned)
}

fn parse_raw(body: &str) -> Result<RawBody<'_>, DecodeError> {
    let trimmed = body.trim_start();
    if trimmed.is_empty() {
        return Err(DecodeError::Empty);
    }
    // serde's derived structs also accept a JSON array (fields by position): refuse it here.
    if trimmed.starts_with('[') {
        return Err(DecodeError::NotAnOrder { line: 1, column: 1 });
    }
    serde_json::from_str(body).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        match e.classify() {
            serde_json::error::Category::Data => DecodeError::NotAnOrder { line, column },
            _ => DecodeError::NotJson { line, column },
        }
    })
}

/// A JSON string value, borrowed from the input unless it has escapes to undo.
fn json_string(raw: &RawValue) -> Option<Cow<'_, str>> {
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(text) => Some(Cow::Borrowed(text)),
        Err(_) => serde_json::from_str::<String>(raw.get())
            .ok()
            .map(Cow::Owned),
    }
}

fn order_from<'a>(raw: &RawBody<'a>, default_currency: Currency) -> Result<Order<'a>, DecodeError> {
    let order_id = raw.order_id.ok_or(DecodeError::MissingOrderId)?;
    let order_id = json_string(order_id).ok_or(DecodeError::OrderIdNotString)?;
    if order_id.is_empty() {
        return Err(DecodeError::EmptyOrderId);
    }
    if order_id.len() > MAX_ORDER_ID_LEN {
        return Err(DecodeError::OrderIdTooLong);
    }
    // It is the one key of the store, the charge's `Idempotency-Key` header and the look-up's
    // path segment, so it must read the same in all three. Headers cannot carry control
    // characters, and servers trim white space around a value; non-ASCII has no one encoding
    // in both a header and a path. Printable ASCII with no space at either end reads the same.
    if order_id.chars().any(char::is_control) {
        return Err(DecodeError::OrderIdControl);
    }
    if order_id.starts_with(char::is_whitespace) || order_id.ends_with(char::is_whitespace) {
        return Err(DecodeError::OrderIdWhiteSpace);
    }
    if !order_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(DecodeError::OrderIdNotAscii);
    }
    // It is also a path segment of the provider's lookup (`/charges/{order_id}`), where these
    // two would name another resource.
    if order_id == "." || order_id == ".." {
        return Err(DecodeError::OrderIdDotSegment);
    }
    let amount = raw.amount.ok_or(DecodeError::MissingAmount)?;
    let currency = match raw.currency {
        None => default_currency,
        Some(code) => json_string(code)
            .and_then(|code| Currency::parse(&code))
            .ok_or(DecodeError::CurrencyInvalid)?,
    };
    // The number's own text: exact, never through a float.
    let amount = Money::parse(amount.get(), currency)?;
    Ok(Order { order_id, amount })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: &str) -> Result<Order<'_>, DecodeError> {
        decode_order(body, Currency::EUR)
    }

    #[test]
    fn decodes_a_plain_order_borrowing_the_id() {
        let order = decode(r#"{"order_id": "o-1", "amount": 10, "note": "x"}"#).expect("order");
        assert_eq!(order.order_id, "o-1");
        assert!(matches!(order.order_id, Cow::Borrowed(_)));
        assert_eq!(order.amount.to_string(), "10.00 EUR");
        let yen = decode(r#"{"order_id": "o-1", "amount": 10, "currency": "jpy"}"#).expect("yen");
        assert_eq!(yen.amount.to_string(), "10 JPY");
    }

    #[test]
    fn an_order_id_is_read_even_from_an_invalid_order() {
        assert_eq!(
            order_id_hint(r#"{"order_id":"o-1","amount":-5}"#).as_deref(),
            Some("o-1")
        );
        let envelope = r#"{"Type":"Notification","Message":"{\"order_id\":\"o-2\"}"}"#;
        assert_eq!(order_id_hint(envelope).as_deref(), Some("o-2"));
        assert_eq!(order_id_hint(r#"{"order_id":7}"#), None);
        assert_eq!(order_id_hint("not json"), None);
    }

    #[test]
    fn unwraps_an_sns_envelope() {
        let body = r#"{"Type":"Notification","MessageId":"x","Message":"{\"order_id\":\"o-9\",\"amount\":2.5}"}"#;
        let order = decode(body).expect("order");
        assert_eq!(order.order_id.as_ref(), "o-9");
        assert_eq!(order.amount.minor, 250);
    }

    #[test]
    fn an_envelope_whose_message_is_not_an_order_is_refused() {
        let body = r#"{"Type":"Notification","Message":"not json"}"#;
        assert!(matches!(decode(body), Err(DecodeError::InEnvelope(_))));
        let body = r#"{"Type":"Notification","Message":42}"#;
        assert_eq!(decode(body), Err(DecodeError::EnvelopeMessageNotString));
    }

    /// The longest id is accepted, one byte more is not (255: DynamoDB's key and the header
    /// both take it).
    #[test]
    fn an_order_id_of_the_longest_length_is_accepted() {
        let id = "x".repeat(MAX_ORDER_ID_LEN);
        let body = format!(r#"{{"order_id":"{id}","amount":1}}"#);
        assert_eq!(
            decode(&body).map(|o| o.order_id.len()),
            Ok(MAX_ORDER_ID_LEN)
        );
    }

    #[test]
    fn every_invalid_body_has_its_own_reason() {
        let long = format!(
            r#"{{"order_id":"{}","amount":1}}"#,
            "x".repeat(MAX_ORDER_ID_LEN + 1)
        );
        let cases: &[(&str, DecodeError)] = &[
            ("", DecodeError::Empty),
            ("   ", DecodeError::Empty),
            ("{", DecodeError::NotJson { line: 1, column: 1 }),
            ("[1,2]", DecodeError::NotAnOrder { line: 1, column: 0 }),
            (r#"{"amount":1}"#, DecodeError::MissingOrderId),
            (
                r#"{"order_id":null,"amount":1}"#,
                DecodeError::MissingOrderId,
            ),
            (
                r#"{"order_id":7,"amount":1}"#,
                DecodeError::OrderIdNotString,
            ),
            (r#"{"order_id":"","amount":1}"#, DecodeError::EmptyOrderId),
            (&long, DecodeError::OrderIdTooLong),
            (
                r#"{"order_id":"a\nb","amount":1}"#,
                DecodeError::OrderIdControl,
            ),
            (
                r#"{"order_id":"..","amount":1}"#,
                DecodeError::OrderIdDotSegment,
            ),
            (
                r#"{"order_id":" o-1","amount":1}"#,
                DecodeError::OrderIdWhiteSpace,
            ),
            (
                r#"{"order_id":"o-1\t","amount":1}"#,
                DecodeError::OrderIdControl,
            ),
            (
                r#"{"order_id":"o-1\u00a0","amount":1}"#,
                DecodeError::OrderIdWhiteSpace,
            ),
            (
                r#"{"order_id":"o\u00e9-1","amount":1}"#,
                DecodeError::OrderIdNotAscii,
            ),
            (
                r#"{"order_id":".","amount":1}"#,
                DecodeError::OrderIdDotSegment,
            ),
            (r#"{"order_id":"o"}"#, DecodeError::MissingAmount),
            (
                r#"{"order_id":"o","amount":"10"}"#,
                DecodeError::Amount(AmountError::NotNumber),
            ),
            (
                r#"{"order_id":"o","amount":"NaN"}"#,
                DecodeError::Amount(AmountError::NotNumber),
            ),
            (
                r#"{"order_id":"o","amount":1e400}"#,
                DecodeError::Amount(AmountError::TooLarge),
            ),
            (
                r#"{"order_id":"o","amount":0}"#,
                DecodeError::Amount(AmountError::NotPositive),
            ),
            (
                r#"{"order_id":"o","amount":-0.0}"#,
                DecodeError::Amount(AmountError::NotPositive),
            ),
            (
                r#"{"order_id":"o","amount":-5}"#,
                DecodeError::Amount(AmountError::NotPositive),
            ),
            (
                r#"{"order_id":"o","amount":1.005}"#,
                DecodeError::Amount(AmountError::TooPrecise { allowed: 2 }),
            ),
            (
                r#"{"order_id":"o","amount":1.5,"currency":"JPY"}"#,
                DecodeError::Amount(AmountError::TooPrecise { allowed: 0 }),
            ),
            (
                r#"{"order_id":"o","amount":1,"currency":"EURO"}"#,
                DecodeError::CurrencyInvalid,
            ),
            (
                r#"{"order_id":"o","amount":1,"currency":978}"#,
                DecodeError::CurrencyInvalid,
            ),
        ];
        for (body, expected) in cases {
            let got = decode(body);
            match (expected, &got) {
                // serde's column for a type error is not worth pinning.
                (DecodeError::NotAnOrder { .. }, Err(DecodeError::NotAnOrder { .. })) => {}
                _ => assert_eq!(got.as_ref().err(), Some(expected), "body {body:?}"),
            }
        }
    }

    #[test]
    fn duplicated_keys_are_not_an_order() {
        let got = decode(r#"{"order_id":"a","order_id":"b","amount":1}"#);
        assert!(
            matches!(got, Err(DecodeError::NotAnOrder { .. })),
            "{got:?}"
        );
    }

    #[test]
    fn decode_errors_never_quote_the_body() {
        for body in [
            r#""SECRET-MARKER""#,
            r#"{"order_id":"SECRET-MARKER"}"#,
            r#"{"order_id":1,"amount":"SECRET-MARKER"}"#,
        ] {
            let err = decode(body).expect_err("invalid");
            assert!(!err.to_string().contains("SECRET"), "{err}");
        }
    }

    #[test]
    fn the_fingerprint_changes_with_the_amount_not_the_spelling() {
        let a = decode(r#"{"order_id":"o","amount":10}"#).expect("a");
        let b =
            decode(r#"{"amount":1.000e1,"order_id":"o","extra":1,"currency":"eur"}"#).expect("b");
        let c = decode(r#"{"order_id":"o","amount":11}"#).expect("c");
        let d = decode(r#"{"order_id":"o","amount":10,"currency":"USD"}"#).expect("d");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_ne!(a.fingerprint(), d.fingerprint());
    }
}
