//! The HTTP payment gateway: `POST {PAYMENT_API_URL}/charges` with the order id as the
//! `Idempotency-Key`, so every retry of the same charge is applied once by the provider.
//!
//! How each answer is read:
//! - 2xx: charged. The body is only logged (a charge id, when there is one); a body that does
//!   not parse does not undo a charge the provider confirmed, and retrying would only get the
//!   same answer for the same key.
//! - 409: the key was already used for this same request: charged.
//! - 408, 429, 5xx, timeouts, refused or reset connections: transient (RETRY).
//! - other 4xx: rejected (POISON), with the status and a short reason.
//! - anything else (1xx, 3xx: redirects are not followed for a charge): transient, since it
//!   means a misconfigured endpoint, which a deployment fixes, not the message.

use std::fmt;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use serde::Serialize;

use super::{ChargeRequest, PaymentError, PaymentGateway};

/// The longest provider reason kept for the log.
const REASON_MAX: usize = 200;

/// A secret that never shows in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// How to reach the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// The API base; charges go to `{base}/charges`.
    pub base_url: reqwest::Url,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<Secret>,
    pub connect_timeout: Duration,
    /// The whole request, response body included.
    pub timeout: Duration,
}

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    #[error("PAYMENT_API_URL cannot take a /charges path")]
    Url(#[source] url::ParseError),
    #[error("PAYMENT_API_KEY is not a valid header value")]
    ApiKey,
    #[error("the HTTP client could not be built")]
    Client(#[source] reqwest::Error),
}

#[derive(Debug)]
pub struct HttpGateway {
    client: reqwest::Client,
    charges_url: reqwest::Url,
    authorization: Option<HeaderValue>,
}

#[derive(Serialize)]
struct ChargeBody<'a> {
    order_id: &'a str,
    amount: f64,
}

impl HttpGateway {
    /// Builds the client once per container. No connection is opened here.
    pub fn new(settings: &HttpSettings) -> Result<Self, HttpSetupError> {
        let mut base = settings.base_url.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let charges_url = base.join("charges").map_err(HttpSetupError::Url)?;
        let authorization = match &settings.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                    .map_err(|_| HttpSetupError::ApiKey)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let client = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.timeout)
            // A charge is never replayed to another URL behind our back.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(HttpSetupError::Client)?;
        Ok(Self {
            client,
            charges_url,
            authorization,
        })
    }
}

impl PaymentGateway for HttpGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        let body = serde_json::to_vec(&ChargeBody {
            order_id: request.order_id,
            amount: request.amount,
        })
        .map_err(|e| PaymentError::Transient {
            reason: "the charge could not be encoded".into(),
            source: Some(Box::new(e)),
        })?;
        let mut call = self
            .client
            .post(self.charges_url.clone())
            .header("Idempotency-Key", request.idempotency_key)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(authorization) = &self.authorization {
            call = call.header(reqwest::header::AUTHORIZATION, authorization.clone());
        }
        let response = call.send().await.map_err(transport_error)?;
        let status = response.status();
        // The body is part of the answer; failing to read it in time is a transport failure.
        let text = response.text().await.map_err(transport_error)?;
        classify(status, &text)
    }
}

/// The decision for a provider's answer.
pub fn classify(status: StatusCode, body: &str) -> Result<(), PaymentError> {
    let code = status.as_u16();
    if status.is_success() {
        if serde_json::from_str::<serde_json::Value>(body).is_err() {
            tracing::warn!(
                status = code,
                body_length = body.len(),
                "payment 2xx with a body that is not JSON: treated as charged"
            );
        }
        return Ok(());
    }
    match code {
        409 => Ok(()),
        408 | 429 | 500..=599 => Err(PaymentError::Transient {
            reason: format!("HTTP {code}"),
            source: None,
        }),
        400..=499 => Err(PaymentError::Rejected {
            status: Some(code),
            reason: short_reason(status, body),
        }),
        _ => Err(PaymentError::Transient {
            reason: format!("unexpected HTTP {code} from the payment endpoint"),
            source: None,
        }),
    }
}

fn transport_error(error: reqwest::Error) -> PaymentError {
    let reason = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    PaymentError::Transient {
        reason: reason.into(),
        // Without the URL: it is configuration, not news, and keeps logs short.
        source: Some(Box::new(error.without_url())),
    }
}

/// A short reason from a provider's error body (`message`, `error.message`, `error`, `reason`),
/// else the status text.
fn short_reason(status: StatusCode, body: &str) -> String {
    let from_body = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            [
                v.get("message"),
                v.get("error").and_then(|e| e.get("message")),
                v.get("error"),
                v.get("reason"),
            ]
            .into_iter()
            .flatten()
            .find_map(|field| field.as_str().map(str::to_owned))
        });
    let reason =
        from_body.unwrap_or_else(|| status.canonical_reason().unwrap_or("rejected").to_owned());
    match reason.char_indices().nth(REASON_MAX) {
        Some((cut, _)) => format!("{}...", &reason[..cut]),
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).expect("status")
    }

    #[test]
    fn every_status_class_has_its_decision() {
        for code in [200, 201, 202, 204, 409] {
            assert!(classify(status(code), "{}").is_ok(), "{code}");
        }
        for code in [408, 429, 500, 502, 503, 504, 302, 101] {
            assert!(
                matches!(
                    classify(status(code), ""),
                    Err(PaymentError::Transient { .. })
                ),
                "{code}"
            );
        }
        for code in [400, 401, 402, 403, 404, 422] {
            assert!(
                matches!(classify(status(code), ""), Err(PaymentError::Rejected { status: Some(c), .. }) if c == code),
                "{code}"
            );
        }
    }

    #[test]
    fn a_2xx_with_a_body_that_is_not_json_is_charged() {
        assert!(classify(status(200), "<html>ok</html>").is_ok());
    }

    #[test]
    fn the_reason_comes_from_the_body_and_is_short() {
        let err = classify(status(402), r#"{"error":{"message":"card declined"}}"#)
            .expect_err("rejected");
        assert_eq!(
            err.to_string(),
            "payment rejected (HTTP 402): card declined"
        );
        let long = format!(r#"{{"message":"{}"}}"#, "x".repeat(1_000));
        match classify(status(400), &long) {
            Err(PaymentError::Rejected { reason, .. }) => assert_eq!(reason.len(), REASON_MAX + 3),
            other => panic!("{other:?}"),
        }
        match classify(status(404), "not json") {
            Err(PaymentError::Rejected { reason, .. }) => assert_eq!(reason, "Not Found"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn secrets_do_not_show_in_debug_output() {
        let settings = HttpSettings {
            base_url: "https://pay.example/v1".parse().expect("url"),
            api_key: Some(Secret::new("sk_live_SECRET")),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
        };
        assert!(!format!("{settings:?}").contains("SECRET"));
        let gateway = HttpGateway::new(&settings).expect("gateway");
        assert!(!format!("{gateway:?}").contains("SECRET"));
        assert_eq!(
            gateway.charges_url.as_str(),
            "https://pay.example/v1/charges"
        );
    }
}
