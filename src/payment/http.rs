//! The HTTP payment gateway: `POST {PAYMENT_API_URL}/charges` with the order id as the
//! `Idempotency-Key`, and `GET {PAYMENT_API_URL}/charges/{key}` to look a key up.
//!
//! Each answer is read by [`super::answers`]: what it proves decides what the store keeps.
//! Redirects are never followed for a charge. The calls go through hyper's pooled client
//! (`crate::pooled`), whose errors say whether a request could have reached the provider.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use http::{Request, StatusCode};
use http_body_util::Full;
use serde::Serialize;

use super::answers::{Reading, RetryableFailures, classify, classify_lookup};
use super::key::secrets_manager::SECRETS_SDK;
use super::key::{ApiKey, Authorization, KeySetting, KeySetupError};
use super::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway, SettingsError};
use lambda_kit::{Env, EnvError};

/// The most of an answer's body that is read. A provider's JSON is small; anything larger is
/// not it (a proxy's page, a misrouted download) and is not worth the memory.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How to reach the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// The API base; charges go to `{base}/charges`.
    pub base_url: reqwest::Url,
    /// Sent as `Authorization: Bearer <key>`: none, a fixed value, or a secret read on first
    /// use (see [`super::key`]).
    pub api_key: KeySetting,
    /// How long a connection may take to open.
    pub connect_timeout: Duration,
    /// The whole request, response body included.
    pub timeout: Duration,
    /// The provider's failure codes that do not make a failed charge final.
    pub retryable_failures: RetryableFailures,
}

impl HttpSettings {
    /// `PAYMENT_API_URL`, its key (`PAYMENT_API_KEY` or `PAYMENT_API_KEY_SECRET`) and timeouts
    /// (`PAYMENT_CONNECT_TIMEOUT_MS`, `PAYMENT_TIMEOUT_MS`). `None` without a URL: the simulated
    /// gateway, for local runs.
    pub fn from_env(env: &Env<'_>) -> Result<Option<Self>, SettingsError> {
        // Read first, so two keys are refused even before a URL is set.
        let api_key = KeySetting::from_env(env)?;
        let Some(raw) = env.text("PAYMENT_API_URL") else {
            return Ok(None);
        };
        Ok(Some(Self {
            base_url: parse_http_url(&raw)?,
            api_key,
            connect_timeout: Duration::from_millis(env.ranged(
                "PAYMENT_CONNECT_TIMEOUT_MS",
                1_000,
                10,
                60_000,
            )?),
            timeout: Duration::from_millis(env.ranged("PAYMENT_TIMEOUT_MS", 5_000, 10, 300_000)?),
            retryable_failures: RetryableFailures::from_env(env)?,
        }))
    }

    /// The longest one record spends calling the provider: the look-up and the charge at their
    /// bound, and with a key in Secrets Manager its first read, a read after a refusal and the
    /// call retried.
    pub fn longest_calls_ms(&self) -> u64 {
        let call = self.timeout.as_millis() as u64;
        match self.api_key {
            KeySetting::SecretsManager { .. } => {
                3 * call + 2 * SECRETS_SDK.operation_timeout.as_millis() as u64
            }
            _ => 2 * call,
        }
    }

    /// How long after its look-up a resent charge can still reach the provider: one call, or
    /// with a stored key two reads of it and the call retried after a refusal.
    pub fn charge_reach_ms(&self) -> u64 {
        let call = self.timeout.as_millis() as u64;
        match self.api_key {
            KeySetting::SecretsManager { .. } => {
                2 * call + 2 * SECRETS_SDK.operation_timeout.as_millis() as u64
            }
            _ => call,
        }
    }
}

/// An absolute http(s) URL with a host, without credentials, query or fragment.
fn parse_http_url(raw: &str) -> Result<reqwest::Url, EnvError> {
    // The message never repeats the value: a URL may carry a token.
    let bad = |expected: &str| EnvError::invalid("PAYMENT_API_URL", "(not shown)", expected);
    let url = reqwest::Url::parse(raw.trim())
        .map_err(|e| bad(&format!("an absolute http(s) URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("an http:// or https:// URL with a host"));
    }
    if !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(bad(
            "a URL without credentials, query or fragment (use PAYMENT_API_KEY)",
        ));
    }
    Ok(url)
}

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpSetupError {
    /// `PAYMENT_API_URL` cannot carry the charge paths.
    #[error("PAYMENT_API_URL cannot take a /charges path")]
    Url(#[source] url::ParseError),
    /// The API key's source cannot be used.
    #[error(transparent)]
    ApiKey(#[from] KeySetupError),
    /// The charges URL is not one an HTTP request can carry.
    #[error("PAYMENT_API_URL's /charges path is not a valid request URI")]
    Uri(#[source] http::uri::InvalidUri),
    /// The TLS configuration could not be built.
    #[error("the TLS configuration could not be built")]
    Tls(#[source] rustls::Error),
}

/// A payment provider that follows the IETF Idempotency-Key draft, over HTTP(S).
#[derive(Debug)]
pub struct HttpGateway {
    /// Boxed: hyper's client keeps its settings inline (about 400 bytes), and the gateway sits
    /// in an enum beside the small simulated one.
    client: Box<crate::pooled::PooledClient>,
    /// For look-ups, which add the key as a path segment (percent-encoded by `url`).
    charges_url: reqwest::Url,
    /// The charges URL parsed once as the request's URI: every charge goes there.
    charges_uri: http::Uri,
    /// The whole call, the answer's body included.
    timeout: Duration,
    key: ApiKey,
    retryable: RetryableFailures,
}

/// The charge as the provider receives it: the amount in integer minor units (`1050` for
/// 10.50 EUR) and the ISO 4217 currency code, as card providers take them.
#[derive(Serialize)]
struct ChargeBody<'a> {
    order_id: &'a str,
    amount: u64,
    currency: &'a str,
}

impl HttpGateway {
    /// Builds the client once per container, with the key the settings name (none or a fixed
    /// value; a stored key needs [`HttpGateway::with_key`]). No connection is opened here.
    pub fn new(settings: &HttpSettings) -> Result<Self, HttpSetupError> {
        Self::with_key(settings, ApiKey::from_setting(&settings.api_key, None)?)
    }

    /// Builds the client once per container, sending `key`. No connection is opened here.
    pub fn with_key(settings: &HttpSettings, key: ApiKey) -> Result<Self, HttpSetupError> {
        let mut base = settings.base_url.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let charges_url = base.join("charges").map_err(HttpSetupError::Url)?;
        let charges_uri = charges_url.as_str().parse().map_err(HttpSetupError::Uri)?;
        let tls = crate::tls::client_config().map_err(HttpSetupError::Tls)?;
        // hyper follows no redirect: a charge is never replayed to another URL behind our back.
        let client = Box::new(crate::pooled::client(tls, Some(settings.connect_timeout)));
        Ok(Self {
            client,
            charges_url,
            charges_uri,
            timeout: settings.timeout,
            key,
            retryable: settings.retryable_failures.clone(),
        })
    }

    /// How this gateway reads an answer to a request that carried `authorization`.
    fn reading<'a>(&'a self, authorization: Option<&'a HeaderValue>) -> Reading<'a> {
        Reading {
            retryable: &self.retryable,
            secret: authorization
                .and_then(|h| h.to_str().ok())
                .map(|h| h.strip_prefix("Bearer ").unwrap_or(h)),
        }
    }

    /// The key, for the invocation's bookkeeping (see [`PaymentGateway::new_invocation`]).
    pub fn key(&self) -> &ApiKey {
        &self.key
    }

    /// Runs `call` with the current key. When the provider refuses the key (401, 403) and its
    /// store has a newer one, `call` runs once more with it: the refused request was not
    /// processed, and the idempotency key makes even a processed one safe to repeat.
    async fn keyed<T, F, Fut>(&self, order_id: &str, call: F) -> Result<T, PaymentError>
    where
        F: Fn(Option<HeaderValue>) -> Fut,
        Fut: Future<Output = Result<T, PaymentError>>,
    {
        let used = self.key.current().await?;
        let first = scrubbed(
            call(used.as_ref().map(|a| a.header.clone())).await,
            used.as_deref(),
        );
        let (
            Some(used),
            Err(PaymentError::Misconfigured {
                status: Some(status @ (401 | 403)),
                ..
            }),
        ) = (&used, &first)
        else {
            return first;
        };
        match self.key.refresh(used, *status).await? {
            Some(fresh) => {
                tracing::info!(
                    order_id,
                    status,
                    "retrying the call with the payment API key read again"
                );
                scrubbed(call(Some(fresh.header.clone())).await, Some(&fresh))
            }
            None => first,
        }
    }
}

/// `result` with every run of the key of `authorization` scrubbed from its error's text.
fn scrubbed<T>(
    result: Result<T, PaymentError>,
    authorization: Option<&Authorization>,
) -> Result<T, PaymentError> {
    match (result, secret_of(authorization)) {
        (Err(e), Some(secret)) => Err(e.scrub(secret)),
        (result, _) => result,
    }
}

/// The key a request carried, as a gateway would echo it (without the scheme).
fn secret_of(authorization: Option<&Authorization>) -> Option<&str> {
    authorization
        .and_then(|a| a.header.to_str().ok())
        .map(|h| h.strip_prefix("Bearer ").unwrap_or(h))
}

/// A request to `uri` that asks for JSON, with the key's header when there is one.
fn request_to(
    method: http::Method,
    uri: http::Uri,
    authorization: Option<&HeaderValue>,
) -> http::request::Builder {
    let builder = Request::builder()
        .method(method)
        .uri(uri)
        .header(ACCEPT, "application/json");
    match authorization {
        Some(value) => builder.header(AUTHORIZATION, value),
        None => builder,
    }
}

/// An answer: its status, `Retry-After`, and its body unless it could not be read whole (cut
/// off, over [`MAX_BODY_BYTES`], not UTF-8, or not in by the call's deadline).
type Answer = (StatusCode, Option<Duration>, Option<String>);

impl HttpGateway {
    /// Sends `request` and reads its answer, the whole call within the gateway's timeout. A
    /// request that could not be built or whose connection failed never reached the provider;
    /// anything later may have been applied.
    async fn exchange(
        &self,
        request: Result<Request<Full<Bytes>>, http::Error>,
    ) -> Result<Answer, PaymentError> {
        let request = request.map_err(|e| PaymentError::NotSent {
            reason: "the request could not be built".into(),
            source: Some(Box::new(e)),
        })?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let response = match tokio::time::timeout_at(deadline, self.client.request(request)).await {
            Ok(Ok(response)) => response,
            Ok(Err(e)) => return Err(transport_error(e)),
            Err(elapsed) => {
                return Err(PaymentError::Ambiguous {
                    reason: "timed out after sending".into(),
                    source: Some(Box::new(elapsed)),
                });
            }
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        // A body still coming at the deadline is no answer; the status alone is read.
        let body = tokio::time::timeout_at(deadline, read_bounded(response.into_body()))
            .await
            .ok()
            .flatten();
        Ok((status, retry_after, body))
    }
}

/// The body whole, as UTF-8, unless it is cut off or over [`MAX_BODY_BYTES`].
async fn read_bounded<B>(body: B) -> Option<String>
where
    B: http_body::Body<Data = Bytes>,
{
    use http_body_util::BodyExt;
    let mut body = std::pin::pin!(body);
    let mut bytes = Vec::new();
    while let Some(frame) = body.as_mut().frame().await {
        // Trailers carry nothing the answer is read for.
        let Ok(chunk) = frame.ok()?.into_data() else {
            continue;
        };
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return None;
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).ok()
}

/// `Retry-After` in delta-seconds (the HTTP-date form is ignored: the backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

impl PaymentGateway for HttpGateway {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        let body: bytes::Bytes = serde_json::to_vec(&ChargeBody {
            order_id: request.order_id,
            amount: request.amount.minor,
            currency: request.amount.currency.as_str(),
        })
        .map_err(|e| PaymentError::NotSent {
            reason: "the charge could not be encoded".into(),
            source: Some(Box::new(e)),
        })?
        .into();
        self.keyed(request.order_id, |authorization| {
            let outgoing = request_to(
                http::Method::POST,
                self.charges_uri.clone(),
                authorization.as_ref(),
            )
            .header("Idempotency-Key", request.idempotency_key)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(body.clone()));
            async move {
                let (status, retry_after, body) = self.exchange(outgoing).await?;
                let reading = self.reading(authorization.as_ref());
                classify(status, retry_after, body.as_deref(), reading)
            }
        })
        .await
    }

    async fn lookup(&self, request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        let mut url = self.charges_url.clone();
        url.path_segments_mut()
            .map_err(|()| PaymentError::NotSent {
                reason: "PAYMENT_API_URL cannot take a path".into(),
                source: None,
            })?
            .push(request.idempotency_key);
        // The key as a path segment, percent-encoded by `url`; look-ups are rare, so the URL
        // is parsed again for each call.
        self.keyed(request.order_id, |authorization| {
            let outgoing = url
                .as_str()
                .parse::<http::Uri>()
                .map_err(http::Error::from)
                .and_then(|uri| {
                    request_to(http::Method::GET, uri, authorization.as_ref())
                        .body(Full::new(Bytes::new()))
                });
            async move {
                let (status, _, body) = self.exchange(outgoing).await?;
                let reading = self.reading(authorization.as_ref());
                classify_lookup(status, request.amount, body.as_deref(), reading)
            }
        })
        .await
    }

    fn new_invocation(&self) {
        self.key.new_invocation();
    }

    fn take_key_refreshes(&self) -> u64 {
        self.key.take_refreshes()
    }
}

fn transport_error(error: hyper_util::client::legacy::Error) -> PaymentError {
    // The provider's certificate was refused (expired, another host's, an unknown issuer): the
    // URL or the provider's setup is wrong, which no retry of the message fixes.
    if let Some(certificate) = certificate_error(&error) {
        return PaymentError::Misconfigured {
            status: None,
            reason: format!("the endpoint's TLS certificate was refused: {certificate}"),
        };
    }
    // A connect error (refused, DNS, TLS, connect timeout) never reached the provider. Anything
    // later went out, and may have been applied. hyper's errors carry no URL.
    let not_sent = error.is_connect();
    let source: Option<Box<dyn std::error::Error + Send + Sync>> = Some(Box::new(error));
    if not_sent {
        PaymentError::NotSent {
            reason: "connection failed".into(),
            source,
        }
    } else {
        PaymentError::Ambiguous {
            reason: "request failed".into(),
            source,
        }
    }
}

/// The rustls certificate error somewhere in `error`'s sources, if any.
fn certificate_error(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = error.source();
    while let Some(e) = next {
        if let Some(rustls::Error::InvalidCertificate(reason)) = e.downcast_ref() {
            return Some(format!("{reason:?}"));
        }
        // The TLS stream reports rustls' error inside io::Errors, whose own `source()` skips
        // the error they wrap: step into it instead.
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> StatusCode {
        StatusCode::from_u16(code).expect("status")
    }

    fn settings(api_key: KeySetting, timeout_ms: u64) -> HttpSettings {
        HttpSettings {
            base_url: "https://pay.example.com/v1".parse().expect("url"),
            api_key,
            connect_timeout: Duration::from_millis(100),
            timeout: Duration::from_millis(timeout_ms),
            retryable_failures: RetryableFailures::default(),
        }
    }

    /// The time budgets the configuration check and the key window's margin are built from:
    /// one call, or with a key in Secrets Manager the calls and two reads of the secret.
    #[test]
    fn a_records_calls_are_bounded_as_the_key_is_kept() {
        let secret_ms = SECRETS_SDK.operation_timeout.as_millis() as u64;
        assert_eq!(secret_ms, 2_000);
        let fixed = settings(
            KeySetting::Value(crate::payment::key::Secret::new("sk")),
            300,
        );
        assert_eq!(fixed.charge_reach_ms(), 300);
        assert_eq!(fixed.longest_calls_ms(), 600);
        assert_eq!(settings(KeySetting::None, 300).charge_reach_ms(), 300);
        let stored = settings(
            KeySetting::SecretsManager {
                secret_id: "payments/key".into(),
            },
            300,
        );
        assert_eq!(stored.charge_reach_ms(), 2 * 300 + 2 * 2_000);
        assert_eq!(stored.longest_calls_ms(), 3 * 300 + 2 * 2_000);
    }

    /// Credentials, a query or a fragment in the URL are each refused alone.
    #[test]
    fn the_url_carries_no_credentials_query_or_fragment() {
        assert!(parse_http_url("https://pay.example.com/v1").is_ok());
        for url in [
            "https://user@pay.example.com/v1",
            "https://:secret@pay.example.com/v1",
            "https://pay.example.com/v1?key=sk",
            "https://pay.example.com/v1#key",
            "ftp://pay.example.com/v1",
        ] {
            assert!(parse_http_url(url).is_err(), "{url} accepted");
        }
    }

    /// At most `MAX_BODY_BYTES` of an answer are read: exactly that many is an answer, one more
    /// is none.
    #[tokio::test]
    async fn an_answer_is_read_up_to_its_bound() {
        assert_eq!(MAX_BODY_BYTES, 65_536);
        let response = |body: Vec<u8>| Full::new(Bytes::from(body));
        let full = "x".repeat(MAX_BODY_BYTES);
        assert_eq!(
            read_bounded(response(full.clone().into_bytes())).await,
            Some(full.clone())
        );
        assert_eq!(
            read_bounded(response(format!("{full}y").into_bytes())).await,
            None
        );
        assert_eq!(
            read_bounded(response(br#"{"status":"succeeded"}"#.to_vec())).await,
            Some(r#"{"status":"succeeded"}"#.to_owned())
        );
        // Not UTF-8: no answer to read.
        assert_eq!(read_bounded(response(vec![0xff, 0xfe])).await, None);
    }

    /// A gateway reads an answer with the deployment's retryable codes and the key it sent,
    /// without the scheme, as a gateway would echo it.
    #[tokio::test]
    async fn a_gateway_reads_with_its_retryable_codes_and_the_key_it_sent() {
        let mut with_retryable = settings(
            KeySetting::Value(crate::payment::Secret::new("sk_live_1")),
            300,
        );
        with_retryable.retryable_failures = RetryableFailures::of(&["processing_error"]);
        let gateway = HttpGateway::new(&with_retryable).expect("gateway");
        let sent = gateway.key().current().await.expect("key").expect("a key");
        assert_eq!(secret_of(Some(&sent)), Some("sk_live_1"));
        assert_eq!(secret_of(None), None);
        let reading = gateway.reading(Some(&sent.header));
        assert_eq!(reading.secret, Some("sk_live_1"));
        assert!(reading.retryable.contains("processing_error"));
        assert_eq!(gateway.reading(None).secret, None);
    }

    #[test]
    fn secrets_do_not_show_in_debug_output() {
        let settings = HttpSettings {
            base_url: "https://pay.example/v1".parse().expect("url"),
            api_key: KeySetting::Value(crate::payment::Secret::new("sk_live_SECRET")),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            retryable_failures: RetryableFailures::default(),
        };
        assert!(!format!("{settings:?}").contains("SECRET"));
        let gateway = HttpGateway::new(&settings).expect("gateway");
        assert!(!format!("{gateway:?}").contains("SECRET"));
        assert_eq!(
            gateway.charges_url.as_str(),
            "https://pay.example/v1/charges"
        );
    }

    #[test]
    fn in_flight_carries_retry_after() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        let wait = retry_after(&headers);
        assert_eq!(wait, Some(Duration::from_secs(7)));
        match classify(status(409), wait, Some("{}"), Reading::default()) {
            Err(PaymentError::InFlight { retry_after }) => {
                assert_eq!(retry_after, Some(Duration::from_secs(7)))
            }
            other => panic!("{other:?}"),
        }
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
    }
}
