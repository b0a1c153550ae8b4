//! The properties the fuzz targets check, shared with `make test`, which replays their
//! regression corpus (`fuzz/regressions/`) through the same checks.

use std::time::Duration;

use reqwest::StatusCode;

use crate::money::{Currency, Money};
use crate::payment::PaymentError;
use crate::payment::answers::{Reading, classify, classify_lookup};

/// A provider's answer from fuzz bytes: the first two bytes pick the status (100 to 599), the
/// rest is the body (lossy UTF-8; an empty rest is an unreadable body).
fn answer(data: &[u8]) -> (StatusCode, Option<String>) {
    let code = match data {
        [a, b, ..] => 100 + u16::from_le_bytes([*a, *b]) % 500,
        _ => 200,
    };
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    let body = data.get(2..).filter(|rest| !rest.is_empty());
    (
        status,
        body.map(|b| String::from_utf8_lossy(b).into_owned()),
    )
}

/// Any answer to a charge or a look-up: classified without a panic, and by what the status
/// proves: a 5xx or 429 is never a decline nor a success (the charge may exist), a 409 is in
/// flight, a 2xx that is not the provider's JSON is ambiguous; and a key-shaped word in the
/// answer never reaches the error's text.
pub fn answer_properties(data: &[u8]) {
    let (status, body) = answer(data);
    let body = body.as_deref();
    let charged = classify(
        status,
        Some(Duration::from_secs(1)),
        body,
        Reading::default(),
    );
    let code = status.as_u16();
    if code >= 500 || code == 429 {
        assert!(
            matches!(charged, Err(PaymentError::Ambiguous { .. })),
            "{code}: {charged:?}"
        );
    }
    if code == 409 {
        assert!(
            matches!(charged, Err(PaymentError::InFlight { .. })),
            "{charged:?}"
        );
    }
    if status.is_success()
        && body.is_none_or(|b| serde_json::from_str::<serde_json::Value>(b).is_err())
    {
        assert!(
            matches!(charged, Err(PaymentError::Ambiguous { .. })),
            "{charged:?}"
        );
    }
    let amount = Money {
        minor: 1_000,
        currency: Currency::EUR,
    };
    let looked_up = classify_lookup(status, amount, body, Reading::default());
    for text in [
        charged.err().map(|e| lambda_kit::error_chain(&e)),
        looked_up.err().map(|e| lambda_kit::error_chain(&e)),
    ]
    .into_iter()
    .flatten()
    {
        assert!(!text.contains("sk_live_"), "a key in the error: {text}");
    }
}
