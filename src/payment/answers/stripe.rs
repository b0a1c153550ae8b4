//! Stripe's shapes: a Charge's `status` (`succeeded`, `pending`, `failed`) with its
//! `failure_code` and `outcome.type`; a PaymentIntent's (`succeeded`, `processing`, `canceled`,
//! and `requires_payment_method` after a failed attempt, with `last_payment_error`); errors as
//! `{"error": {"type", "code", "decline_code", "message"}}` (`card_error`, `idempotency_error`,
//! `resource_missing`); the money as an integer `amount`, a lower-case `currency`, and a
//! PaymentIntent's `amount_received`.

use serde_json::{Map, Value};

use super::State;

/// What a Charge's or PaymentIntent's `status` (lower case) says became of it. A PaymentIntent
/// back at `requires_payment_method` failed only when it carries its `last_payment_error`: one
/// never attempted has `"last_payment_error": null`.
pub(super) fn state(status: &str, json: &Map<String, Value>) -> Option<State> {
    match status {
        "succeeded" => Some(State::Succeeded),
        "pending" | "processing" => Some(State::Pending),
        "failed" | "canceled" => Some(State::Failed { decline: false }),
        "requires_payment_method" if super::present(json.get("last_payment_error")) => {
            Some(State::Failed { decline: false })
        }
        _ => None,
    }
}

fn nested<'j>(json: &'j Map<String, Value>, outer: &str, inner: &str) -> Option<&'j Value> {
    json.get(outer).and_then(|o| o.get(inner))
}

/// Where Stripe puts a failure's code, first first: a Charge's `failure_code`, a PaymentIntent's
/// `last_payment_error.code`, an error's `error.code`.
pub(super) fn failure_code_fields(json: &Map<String, Value>) -> [Option<&Value>; 3] {
    [
        json.get("failure_code"),
        nested(json, "last_payment_error", "code"),
        nested(json, "error", "code"),
    ]
}

/// Whether an answer names a decline in Stripe's words: a `decline_code` in `error` or in
/// `last_payment_error` (not `null`), `outcome.type` `issuer_declined` or `blocked`, or a
/// decline code as the Charge's `failure_code` or the attempt's `code` or `type`.
pub(super) fn names_decline(json: &Map<String, Value>) -> bool {
    let decline_code = super::present(nested(json, "error", "decline_code"))
        || super::present(nested(json, "last_payment_error", "decline_code"));
    let outcome = nested(json, "outcome", "type")
        .and_then(Value::as_str)
        .is_some_and(|t| matches!(t, "issuer_declined" | "blocked"));
    let words = [
        json.get("failure_code"),
        nested(json, "last_payment_error", "code"),
        nested(json, "last_payment_error", "type"),
    ]
    .into_iter()
    .flatten()
    .filter_map(Value::as_str)
    .any(super::is_decline_code);
    decline_code || outcome || words
}

/// Whether a refusal (400/422) carries an `error.decline_code` field at all.
pub(super) fn error_has_decline_code(json: &Map<String, Value>) -> bool {
    nested(json, "error", "decline_code").is_some()
}

/// A PaymentIntent's `amount_received` (0 until it succeeds).
pub(super) fn amount_received(json: &Map<String, Value>) -> Option<&Value> {
    json.get("amount_received")
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::money::Currency;

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).expect("status")
    }

    /// Stripe's documented shapes, read whole: a Charge and a PaymentIntent in each state, a
    /// card error, its idempotency errors, `resource_missing`, and amounts in every wording.
    #[test]
    fn stripes_shapes_have_their_meaning() {
        let reading = Reading::default();
        let charge = |code, body: &str| classify(status(code), None, Some(body), reading);
        assert!(charge(200, r#"{"id":"ch_1","object":"charge","amount":1000,"currency":"eur","status":"succeeded","outcome":{"type":"authorized"}}"#).is_ok());
        assert!(charge(200, r#"{"id":"pi_1","object":"payment_intent","amount":1000,"amount_received":1000,"currency":"eur","status":"succeeded"}"#).is_ok());
        assert!(matches!(
            charge(
                200,
                r#"{"id":"pi_1","object":"payment_intent","status":"processing"}"#
            ),
            Err(PaymentError::InFlight { .. })
        ));
        assert!(matches!(
            charge(
                402,
                r#"{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}"#
            ),
            Err(PaymentError::Declined { .. })
        ));
        assert!(matches!(
            charge(
                409,
                r#"{"error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotent Key."}}"#
            ),
            Err(PaymentError::InFlight { .. })
        ));
        assert!(matches!(
            charge(
                400,
                r#"{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}"#
            ),
            Err(PaymentError::KeyReused { .. })
        ));
        let ten = Money::parse("10", Currency::EUR).expect("amount");
        let lookup =
            |code, body: &str| classify_lookup(status(code), ten, Some(body), reading).ok();
        for (body, expected) in [
            (
                r#"{"object":"charge","amount":1000,"currency":"eur","status":"succeeded"}"#,
                ChargeStatus::Succeeded,
            ),
            (
                r#"{"object":"charge","amount":1000,"currency":"eur","status":"failed","failure_code":"card_declined","outcome":{"type":"issuer_declined"}}"#,
                ChargeStatus::Declined,
            ),
            (
                r#"{"object":"payment_intent","amount":1000,"amount_received":0,"currency":"eur","status":"processing"}"#,
                ChargeStatus::Pending,
            ),
            (
                r#"{"object":"payment_intent","amount":1000,"currency":"eur","status":"requires_payment_method","last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"do_not_honor"}}"#,
                ChargeStatus::Declined,
            ),
            (
                r#"{"object":"payment_intent","amount":1000,"currency":"eur","status":"requires_payment_method","last_payment_error":null}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"object":"payment_intent","amount":5000,"amount_received":5000,"currency":"eur","status":"succeeded"}"#,
                ChargeStatus::Conflict,
            ),
            (
                r#"{"object":"payment_intent","amount":1000,"amount_received":5000,"currency":"eur","status":"succeeded"}"#,
                ChargeStatus::Conflict,
            ),
            (
                r#"{"object":"charge","amount":"1000","currency":"eur","status":"succeeded"}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"object":"charge","amount":1000,"currency":"usd","status":"succeeded"}"#,
                ChargeStatus::Conflict,
            ),
        ] {
            assert_eq!(lookup(200, body), Some(expected), "{body}");
        }
        assert_eq!(
            lookup(
                404,
                r#"{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent: 'pi_1'"}}"#
            ),
            Some(ChargeStatus::Unknown)
        );
    }
}
