//! Adyen's shapes: a payment's `resultCode` (`Authorised`; `Pending`, `Received`; `Refused`,
//! a decline, with `refusalReason` and `refusalReasonCode`; `Cancelled`, `Error`), answered 200
//! for a refusal and 422 for an error; errors with `status`, `errorCode`, `errorType`,
//! `message` (`errorCode` 704: a request with this key is already processed or in progress);
//! the money nested as `"amount": {"value": minor units, "currency": ...}`.

use serde_json::{Map, Value};

use super::State;

/// What a `resultCode` says became of a payment. Anything else (`RedirectShopper`,
/// `IdentifyShopper`, a code not documented) is not understood.
pub(super) fn state(json: &Map<String, Value>) -> Option<State> {
    match json.get("resultCode").and_then(Value::as_str)? {
        "Authorised" => Some(State::Succeeded),
        "Pending" | "Received" => Some(State::Pending),
        "Refused" => Some(State::Failed { decline: true }),
        "Cancelled" | "Error" => Some(State::Failed { decline: false }),
        _ => None,
    }
}

/// A refusal's `refusalReasonCode`.
pub(super) fn failure_code_field(json: &Map<String, Value>) -> Option<&Value> {
    json.get("refusalReasonCode")
}

/// The nested money, when `amount` is an object: its `value` (`null` when it is missing, so
/// that an amount without its value is read, and found unreadable) and its `currency`.
pub(super) fn money(json: &Map<String, Value>) -> Option<(Option<&Value>, Option<&Value>)> {
    match json.get("amount") {
        Some(Value::Object(money)) => Some((
            Some(money.get("value").unwrap_or(&Value::Null)),
            money.get("currency"),
        )),
        _ => None,
    }
}

/// Whether an error is Adyen's 704: a request with this key already processed or in progress.
pub(super) fn in_flight(json: &Map<String, Value>) -> bool {
    json.get("errorCode").and_then(Value::as_str) == Some("704")
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::money::Currency;

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).expect("status")
    }

    /// Adyen's documented shapes, read whole: each `resultCode`, a refusal answered 200, a 422
    /// with 704 for a key in flight, its 404, and the nested amount in every wording.
    #[test]
    fn adyens_shapes_have_their_meaning() {
        let reading = Reading::default();
        let charge = |code, body: &str| classify(status(code), None, Some(body), reading);
        assert!(charge(200, r#"{"pspReference":"psp_1","resultCode":"Authorised","amount":{"value":1000,"currency":"EUR"},"merchantReference":"o-1"}"#).is_ok());
        assert!(matches!(
            charge(
                200,
                r#"{"pspReference":"psp_1","resultCode":"Refused","refusalReason":"Not enough balance","refusalReasonCode":"51"}"#
            ),
            Err(PaymentError::Declined { .. })
        ));
        assert!(matches!(
            charge(200, r#"{"pspReference":"psp_1","resultCode":"Received"}"#),
            Err(PaymentError::InFlight { .. })
        ));
        assert!(matches!(
            charge(
                422,
                r#"{"status":422,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}"#
            ),
            Err(PaymentError::InFlight { .. })
        ));
        assert!(matches!(
            charge(
                200,
                r#"{"pspReference":"psp_1","resultCode":"RedirectShopper"}"#
            ),
            Err(PaymentError::Ambiguous { .. })
        ));
        let ten = Money::parse("10", Currency::EUR).expect("amount");
        let lookup =
            |code, body: &str| classify_lookup(status(code), ten, Some(body), reading).ok();
        for (body, expected) in [
            (
                r#"{"resultCode":"Authorised","amount":{"value":1000,"currency":"EUR"}}"#,
                ChargeStatus::Succeeded,
            ),
            (
                r#"{"resultCode":"Received","amount":{"value":1000,"currency":"EUR"}}"#,
                ChargeStatus::Pending,
            ),
            (
                r#"{"resultCode":"Refused","refusalReasonCode":"51","amount":{"value":1000,"currency":"EUR"}}"#,
                ChargeStatus::Declined,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"value":5000,"currency":"EUR"}}"#,
                ChargeStatus::Conflict,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"value":"5000","currency":"EUR"}}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"value":1000.0,"currency":"EUR"}}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"resultCode":"Authorised","amount":{"currency":"EUR"}}"#,
                ChargeStatus::Unclear,
            ),
        ] {
            assert_eq!(lookup(200, body), Some(expected), "{body}");
        }
        assert_eq!(
            lookup(
                404,
                r#"{"status":404,"errorCode":"not_found","errorType":"validation","message":"Payment not found"}"#
            ),
            Some(ChargeStatus::Unknown)
        );
    }
}
