//! The IETF Idempotency-Key draft's own examples, as the project's provider stub speaks them: a
//! charge's `status` (`succeeded`, `pending`, `failed`), a failure's `decline_code` and `code`,
//! errors as problem documents (`type`, `title`, `detail`), a look-up's 404 with
//! `"status": "not_found"`, the money as `amount` (minor units) and `currency`.

use serde_json::{Map, Value};

use super::State;

/// What the draft's `status` (lower case) says became of a charge. `cancelled` is read as the
/// draft's British spelling of Stripe's `canceled`.
pub(super) fn state(status: &str) -> Option<State> {
    match status {
        "succeeded" => Some(State::Succeeded),
        "pending" => Some(State::Pending),
        "failed" | "cancelled" => Some(State::Failed { decline: false }),
        _ => None,
    }
}

/// The failure's `code`.
pub(super) fn failure_code_field(json: &Map<String, Value>) -> Option<&Value> {
    json.get("code")
}

/// Whether a failure names its decline: a `decline_code` that is not `null`.
pub(super) fn names_decline(json: &Map<String, Value>) -> bool {
    super::present(json.get("decline_code"))
}

/// Whether a refusal (400/422) carries a `decline_code` field at all.
pub(super) fn has_decline_code(json: &Map<String, Value>) -> bool {
    json.get("decline_code").is_some()
}

/// Whether a problem document's `title` names the idempotency key.
pub(super) fn title_names_idempotency(json: &Map<String, Value>) -> bool {
    json.get("title")
        .and_then(Value::as_str)
        .is_some_and(|t| t.to_ascii_lowercase().contains("idempotency"))
}

/// Whether a 404 is the draft's "no charge with this key": `"status": "not_found"`.
pub(super) fn names_missing_charge(json: &Map<String, Value>) -> bool {
    super::status_field(json) == Some("not_found")
}

/// The charge's `currency` (Stripe's too, lower case there).
pub(super) fn currency(json: &Map<String, Value>) -> Option<&Value> {
    json.get("currency")
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::money::Currency;

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).expect("status")
    }

    /// The draft's shapes (its examples, and the provider stub that follows it), read whole: a
    /// charge, a decline, its problem documents for a key in flight, reused or missing, a
    /// look-up of each state, the "no such charge", and the money in every wording.
    #[test]
    fn the_drafts_shapes_have_their_meaning() {
        let reading = Reading::default();
        let charge = |code, body: &str| classify(status(code), None, Some(body), reading);
        assert!(
            charge(
                201,
                r#"{"id":"ch_1","status":"succeeded","amount":1000,"currency":"EUR"}"#
            )
            .is_ok()
        );
        assert!(matches!(
            charge(402, r#"{"status":"failed","decline_code":"card_declined"}"#),
            Err(PaymentError::Declined { .. })
        ));
        assert!(matches!(
            charge(
                409,
                r#"{"type":"https://developer.example.com/idempotency","title":"A request is outstanding for this Idempotency-Key"}"#
            ),
            Err(PaymentError::InFlight { .. })
        ));
        assert!(matches!(
            charge(
                422,
                r#"{"type":"https://developer.example.com/idempotency","title":"Idempotency-Key is already used","detail":"This operation is idempotent and it requires correct usage of Idempotency Key. Idempotency Key MUST not be reused across different payloads of this operation."}"#
            ),
            Err(PaymentError::KeyReused { .. })
        ));
        assert!(matches!(
            charge(
                400,
                r#"{"type":"https://developer.example.com/idempotency","title":"Idempotency-Key is missing","detail":"This operation is idempotent and it requires correct usage of Idempotency Key."}"#
            ),
            Err(PaymentError::Misconfigured { .. })
        ));
        let ten = Money::parse("10", Currency::EUR).expect("amount");
        let lookup =
            |code, body: &str| classify_lookup(status(code), ten, Some(body), reading).ok();
        for (body, expected) in [
            (
                r#"{"status":"succeeded","amount":1000,"currency":"EUR"}"#,
                ChargeStatus::Succeeded,
            ),
            (
                r#"{"status":"pending","amount":1000,"currency":"EUR"}"#,
                ChargeStatus::Pending,
            ),
            (
                r#"{"status":"failed","decline_code":"card_declined","amount":1000,"currency":"EUR"}"#,
                ChargeStatus::Declined,
            ),
            (
                r#"{"status":"succeeded","amount":5000,"currency":"EUR"}"#,
                ChargeStatus::Conflict,
            ),
            (
                r#"{"status":"succeeded","amount":"1000","currency":"EUR"}"#,
                ChargeStatus::Unclear,
            ),
            (
                r#"{"status":"succeeded","amount":1000.0,"currency":"EUR"}"#,
                ChargeStatus::Unclear,
            ),
        ] {
            assert_eq!(lookup(200, body), Some(expected), "{body}");
        }
        assert_eq!(
            lookup(404, r#"{"status":"not_found"}"#),
            Some(ChargeStatus::Unknown)
        );
    }
}
