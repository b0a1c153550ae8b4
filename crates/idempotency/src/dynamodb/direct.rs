//! The store's two DynamoDB operations (`UpdateItem`, `DeleteItem`) on the JSON API directly:
//! one JSON body, SigV4 from `aws-sigv4`, one HTTP request through a [`Transport`] (the
//! connector the SDK client would use, or an HTTP client's own request type), without the SDK's
//! per-request orchestrator (interceptors, config bag, endpoint rules, the HTTP type conversions
//! between its layers). That machinery was about a quarter of an order's CPU in the order
//! function this crate was built for (its repository's CPU benchmark).
//!
//! It keeps what the store relies on from the SDK, taken from the same `SdkConfig` the SDK's
//! client would be built from: the region, FIPS and dual-stack endpoints, the endpoint override
//! (in code, `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL`, in the SDK's order), the credentials provider (credentials cached until ten seconds before they
//! expire), the retry settings (standard mode: attempts, exponential backoff with full jitter
//! unless the static base is asked for, throttling, 5xx, timeouts and I/O errors retried), the
//! attempt and operation timeouts, the sleep and the time source (the simulator's clock), the
//! retry quota (the token bucket that stops retries while most calls fail: [`quota`]), and
//! clock-skew correction. It leaves out adaptive retry mode's rate limiter (read as standard)
//! and `x-amz-retry-after`.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_sdk_dynamodb::config::endpoint::{Params, ResolveEndpoint};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_async::future::timeout::Timeout;
use aws_smithy_async::rt::sleep::{AsyncSleep, SharedAsyncSleep};
use aws_smithy_async::time::SharedTimeSource;
use aws_smithy_runtime_api::client::http::SharedHttpConnector;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::retry::{RetryConfig, RetrySpec};
use aws_types::SdkConfig;
use aws_types::service_config::ServiceConfigKey;

mod error;
mod quota;
mod sigv4;
mod transport;
mod wire;

pub use error::{DirectClientError, DirectError};
use quota::retry_kind;
#[cfg(test)]
use quota::retryable;
pub use transport::{Answer, Header, Outgoing, Sending, Transport};
use wire::{CONTENT_TYPE, read_answer, request_body};
pub(crate) use wire::{Key, Val, Write, Written};

/// A DynamoDB client for the store's conditional writes, without the SDK's orchestrator.
/// Built once per container from the SDK client's own configuration; clones share it. Its
/// `Debug` names the region and the endpoint override only: no credential, no signing key.
#[derive(Clone)]
pub struct DirectClient {
    inner: Arc<Inner>,
}

impl fmt::Debug for DirectClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectClient")
            .field("region", &self.inner.region)
            .field("endpoint_override", &self.inner.endpoint_override)
            .finish_non_exhaustive()
    }
}

struct Inner {
    transport: Box<dyn Transport>,
    region: String,
    endpoint_override: Option<String>,
    use_fips: bool,
    use_dual_stack: bool,
    /// The endpoint, resolved at the first request (no network: the SDK's rules on the region).
    endpoint: OnceLock<(String, String)>,
    credentials: SharedCredentialsProvider,
    /// The last credentials loaded, as the signer's identity.
    cached: Mutex<Option<Identity>>,
    signer: sigv4::Signer,
    sleep: SharedAsyncSleep,
    time: SharedTimeSource,
    retry: RetryConfig,
    attempt_timeout: Option<Duration>,
    operation_timeout: Option<Duration>,
    /// The server's time minus this host's, ms, learned from an answer that refused a request
    /// for its time: every request is signed at the host's time plus this.
    skew_ms: std::sync::atomic::AtomicI64,
    /// The tokens a retry takes ([`quota`]).
    quota: quota::RetryQuota,
}

/// How far a signature's time may be off the server's before a refusal of it is read as clock
/// skew: AWS accepts five minutes; four leaves room for the answer's own travel.
const SKEW_TOLERANCE: Duration = Duration::from_secs(240);

/// The errors AWS answers a request whose signature's time is off the server's (the SDKs'
/// clock-skew family).
fn is_clock_skew(kind: &str) -> bool {
    matches!(
        kind,
        "InvalidSignatureException"
            | "SignatureDoesNotMatch"
            | "RequestTimeTooSkewed"
            | "RequestExpired"
            | "RequestInTheFuture"
            | "AuthFailure"
    )
}

/// `time` moved by `skew_ms` (either way).
fn shifted(time: std::time::SystemTime, skew_ms: i64) -> std::time::SystemTime {
    let by = Duration::from_millis(skew_ms.unsigned_abs());
    if skew_ms >= 0 {
        time.checked_add(by).unwrap_or(time)
    } else {
        time.checked_sub(by).unwrap_or(time)
    }
}

/// Credentials are used until this long before they expire (the SDK's identity cache's buffer).
const CREDENTIALS_MARGIN: Duration = Duration::from_secs(10);

impl DirectClient {
    /// A client on `sdk`'s region, endpoint override, credentials, retry, timeouts, sleep and
    /// clock, sending through `connector`. No network until the first request. Settings of its
    /// own go into the configuration first (`sdk.to_builder().retry_config(...)`), as they
    /// would into the SDK client's.
    pub fn new(sdk: &SdkConfig, connector: SharedHttpConnector) -> Result<Self, DirectClientError> {
        Self::with_transport(sdk, connector)
    }

    /// [`Self::new`], sending through `transport`.
    pub fn with_transport(
        sdk: &SdkConfig,
        transport: impl Transport + 'static,
    ) -> Result<Self, DirectClientError> {
        // The SDK's precedence: an endpoint set in code, then DynamoDB's own variable
        // (`AWS_ENDPOINT_URL_DYNAMODB`), then the shared one.
        let endpoint_override = if sdk.get_origin("endpoint_url").is_client_config() {
            sdk.endpoint_url().map(str::to_owned)
        } else {
            sdk.service_config()
                .and_then(|config| {
                    let key = ServiceConfigKey::builder()
                        .service_id("DynamoDB")
                        .env("AWS_ENDPOINT_URL")
                        .profile("endpoint_url")
                        .build()
                        .ok()?;
                    config.load_config(key)
                })
                .or_else(|| sdk.endpoint_url().map(str::to_owned))
        };
        Ok(Self {
            inner: Arc::new(Inner {
                transport: Box::new(transport),
                region: sdk.region().ok_or(DirectClientError::NoRegion)?.to_string(),
                endpoint_override,
                use_fips: sdk.use_fips().unwrap_or(false),
                use_dual_stack: sdk.use_dual_stack().unwrap_or(false),
                endpoint: OnceLock::new(),
                credentials: sdk
                    .credentials_provider()
                    .ok_or(DirectClientError::NoCredentials)?,
                cached: Mutex::new(None),
                signer: sigv4::Signer::default(),
                sleep: sdk
                    .sleep_impl()
                    .or_else(aws_smithy_async::rt::sleep::default_async_sleep)
                    .ok_or(DirectClientError::NoSleep)?,
                time: sdk.time_source().unwrap_or_default(),
                quota: quota::RetryQuota::new(
                    if sdk
                        .retry_config()
                        .and_then(RetryConfig::retry_spec)
                        .is_some_and(|spec| spec.is_at_least(RetrySpec::V2_1))
                    {
                        quota::Costs::V2_1
                    } else {
                        quota::Costs::LEGACY
                    },
                ),
                retry: sdk
                    .retry_config()
                    .cloned()
                    .unwrap_or_else(RetryConfig::standard),
                attempt_timeout: sdk
                    .timeout_config()
                    .and_then(|t| t.operation_attempt_timeout()),
                operation_timeout: sdk.timeout_config().and_then(|t| t.operation_timeout()),
                skew_ms: std::sync::atomic::AtomicI64::new(0),
            }),
        })
    }

    /// Sends `write`, retrying what the SDK's standard mode retries, within the operation
    /// timeout.
    pub(crate) async fn write(&self, write: &Write<'_>) -> Result<Written, DirectError> {
        let body = request_body(write).map_err(|e| DirectError::Signing(Box::new(e)))?;
        let target = if write.update.is_some() {
            "DynamoDB_20120810.UpdateItem"
        } else {
            "DynamoDB_20120810.DeleteItem"
        };
        // Boxed: one allocation a write keeps the nesting of the callers' futures (the store's,
        // the guard's, the handler's, the runtime's) under the compiler's default depth limit.
        let call = Box::pin(self.with_retries(target, body));
        match self.inner.operation_timeout {
            Some(limit) => Timeout::new(call, self.inner.sleep.sleep(limit))
                .await
                .unwrap_or(Err(DirectError::OperationTimeout(limit))),
            None => call.await,
        }
    }

    /// A client whose retries take nothing from a quota: every retry the configuration
    /// allows, however many calls fail. For measuring what the quota saves (the simulator's
    /// store brownout); the function never builds one. Call it on a new client, before it is
    /// cloned (a clone shares the quota it has).
    #[must_use]
    pub fn without_retry_quota(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.quota = quota::RetryQuota::unlimited();
        }
        self
    }

    /// The retry quota's tokens left (500 when full).
    pub fn retry_quota_tokens(&self) -> u32 {
        self.inner.quota.tokens()
    }

    async fn with_retries(&self, target: &str, body: Vec<u8>) -> Result<Written, DirectError> {
        let attempts = self.inner.retry.max_attempts().max(1);
        let mut attempt = 1;
        // What the last retry took from the quota, given back if the call then succeeds.
        let mut held = 0;
        loop {
            let result = self.attempt(target, &body).await;
            let kind = match &result {
                Ok(_) => {
                    self.inner.quota.succeeded(held);
                    return result;
                }
                Err(e) => retry_kind(e),
            };
            let Some(kind) = kind.filter(|_| attempt < attempts) else {
                return result;
            };
            // The SDK's rule: what an earlier retry took is spent, not given back.
            match self.inner.quota.acquire(kind) {
                Some(cost) => held = cost,
                None => {
                    tracing::debug!(
                        attempt,
                        "DynamoDB call not retried: the retry quota is spent"
                    );
                    return result;
                }
            }
            self.inner.sleep.sleep(self.backoff(attempt)).await;
            attempt += 1;
        }
    }

    /// Standard mode's delay before attempt `attempt + 1`: the initial backoff doubled per
    /// attempt, capped, times a random factor unless the static base was asked for.
    fn backoff(&self, attempt: u32) -> Duration {
        let retry = &self.inner.retry;
        let doubled = retry
            .initial_backoff()
            .saturating_mul(1 << (attempt - 1).min(16))
            .min(retry.max_backoff());
        if retry.use_static_exponential_base() {
            doubled
        } else {
            doubled.mul_f64(fastrand::f64())
        }
    }

    /// One attempt: the request and the whole answer, within the attempt timeout.
    async fn attempt(&self, target: &str, body: &[u8]) -> Result<Written, DirectError> {
        let (url, host) = self.endpoint()?;
        let identity = self.identity().await?;
        let local = self.inner.time.now();
        let skew_ms = self
            .inner
            .skew_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        let now = shifted(local, skew_ms);
        // The shape every request here has, signed by the client's own signer; anything else
        // (an endpoint override with a path) by aws-sigv4's general one.
        let signature: Vec<(&'static str, String, bool)> =
            match (at_root(url, host), identity.data::<Credentials>()) {
                (true, Some(credentials)) => {
                    let signed = self.inner.signer.sign(
                        credentials,
                        &self.inner.region,
                        host,
                        target,
                        body,
                        now,
                    );
                    let mut headers = Vec::with_capacity(3);
                    headers.push(("x-amz-date", signed.date, false));
                    if let Some(token) = signed.security_token {
                        headers.push(("x-amz-security-token", token, true));
                    }
                    headers.push(("authorization", signed.authorization, true));
                    headers
                }
                _ => self
                    .signature(&identity, url, host, target, body, now)?
                    .into_parts()
                    .0
                    .iter()
                    .map(|h| (h.name(), h.value().to_owned(), h.sensitive()))
                    .collect(),
            };
        let length = body.len().to_string();
        let mut headers = Vec::with_capacity(8);
        headers.extend([
            Header::new("host", host),
            Header::new("content-type", CONTENT_TYPE),
            Header::new("x-amz-target", target),
            Header::new("content-length", &length),
        ]);
        headers.extend(signature.iter().map(|(name, value, sensitive)| Header {
            name,
            value,
            sensitive: *sensitive,
        }));
        let sending = self.inner.transport.send(Outgoing {
            url,
            headers: &headers,
            body,
        });
        let exchange = async {
            let answer = sending.await?;
            let read = read_answer(answer.status, answer.error_type.as_deref(), &answer.body);
            match read {
                Err(DirectError::Service { kind, .. }) if is_clock_skew(&kind) => {
                    match self.learn_skew(answer.date.as_deref(), local, skew_ms) {
                        Some(skew_ms) => Err(DirectError::ClockSkew { kind, skew_ms }),
                        // The server's clock agrees with the signature's: a real refusal.
                        None => read_answer(answer.status, Some(&kind), &answer.body),
                    }
                }
                read => read,
            }
        };
        match self.inner.attempt_timeout {
            Some(limit) => Timeout::new(exchange, self.inner.sleep.sleep(limit))
                .await
                .map_err(|_| DirectError::AttemptTimeout(limit))?,
            None => exchange.await,
        }
    }

    /// The server's time minus this host's, from an answer's `Date` received for a request
    /// signed at `local` shifted by `skew_ms`: `Some` (and kept for every later request) when
    /// the signature's time was more than [`SKEW_TOLERANCE`] off the server's, `None` when they
    /// agree or the answer has no readable date.
    fn learn_skew(
        &self,
        date: Option<&str>,
        local: std::time::SystemTime,
        skew_ms: i64,
    ) -> Option<i64> {
        let server = aws_smithy_types::DateTime::from_str(
            date?,
            aws_smithy_types::date_time::Format::HttpDate,
        )
        .ok()?;
        let server_ms = server.to_millis().ok()?;
        let local_ms = aws_smithy_types::DateTime::from(local).to_millis().ok()?;
        let signed_ms = local_ms.saturating_add(skew_ms);
        if server_ms.abs_diff(signed_ms) <= SKEW_TOLERANCE.as_millis() as u64 {
            return None;
        }
        let learned = server_ms.saturating_sub(local_ms);
        self.inner
            .skew_ms
            .store(learned, std::sync::atomic::Ordering::Relaxed);
        Some(learned)
    }

    /// The SigV4 headers for a POST of `body` to `url` with these headers.
    fn signature(
        &self,
        identity: &Identity,
        url: &str,
        host: &str,
        target: &str,
        body: &[u8],
        now: std::time::SystemTime,
    ) -> Result<aws_sigv4::http_request::SigningInstructions, DirectError> {
        let params = v4::SigningParams::builder()
            .identity(identity)
            .region(&self.inner.region)
            .name("dynamodb")
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| DirectError::Signing(Box::new(e)))?
            .into();
        let signed = [
            ("content-type", CONTENT_TYPE),
            ("x-amz-target", target),
            ("host", host),
        ];
        let signable = SignableRequest::new(
            "POST",
            url,
            signed.iter().copied(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| DirectError::Signing(Box::new(e)))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| DirectError::Signing(Box::new(e)))?
            .into_parts();
        Ok(instructions)
    }

    /// The endpoint URL and its host, resolved once.
    fn endpoint(&self) -> Result<&(String, String), DirectError> {
        if let Some(endpoint) = self.inner.endpoint.get() {
            return Ok(endpoint);
        }
        let url = match &self.inner.endpoint_override {
            Some(url) => url.clone(),
            None => {
                let params = Params::builder()
                    .region(self.inner.region.clone())
                    .use_fips(self.inner.use_fips)
                    .use_dual_stack(self.inner.use_dual_stack)
                    .build()
                    .map_err(|e| DirectError::Endpoint(e.to_string()))?;
                let resolver = aws_sdk_dynamodb::config::endpoint::DefaultResolver::new();
                let endpoint = resolve_now(&resolver, &params)?;
                endpoint.url().to_owned()
            }
        };
        let uri: http::Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| DirectError::Endpoint(e.to_string()))?;
        let scheme = uri.scheme_str().unwrap_or("https");
        // The Host signed is the Host sent: a scheme's default port is left out of both, as
        // HTTP clients leave it out of the header they write.
        let host = match (uri.host(), uri.port_u16()) {
            (Some(host), Some(443)) if scheme == "https" => host.to_owned(),
            (Some(host), Some(80)) if scheme == "http" => host.to_owned(),
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_owned(),
            (None, _) => return Err(DirectError::Endpoint(format!("{url} has no host"))),
        };
        let path = if uri.path().is_empty() {
            "/"
        } else {
            uri.path()
        };
        let url = format!("{scheme}://{host}{path}");
        Ok(self.inner.endpoint.get_or_init(|| (url, host)))
    }

    /// The credentials as the signer's identity, loaded again shortly before they expire.
    async fn identity(&self) -> Result<Identity, DirectError> {
        let now = self.inner.time.now();
        let fresh = |i: &Identity| {
            i.expiration()
                .is_none_or(|expiry| expiry > now + CREDENTIALS_MARGIN)
        };
        if let Some(cached) = self
            .inner
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .filter(|i| fresh(i))
        {
            return Ok(cached.clone());
        }
        let loaded: Identity = self
            .inner
            .credentials
            .provide_credentials()
            .await
            .map_err(DirectError::Credentials)?
            .into();
        *self
            .inner
            .cached
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(loaded.clone());
        Ok(loaded)
    }
}

/// Whether `url` is `host`'s root (`https://host/`): the shape [`sigv4::Signer`] signs.
fn at_root(url: &str, host: &str) -> bool {
    url.strip_suffix('/')
        .and_then(|rest| rest.strip_suffix(host))
        .is_some_and(|scheme| scheme.ends_with("://") && !scheme[..scheme.len() - 3].contains('/'))
}

/// The SDK's default resolver answers at once (rules over the region, no I/O).
fn resolve_now(
    resolver: &aws_sdk_dynamodb::config::endpoint::DefaultResolver,
    params: &Params,
) -> Result<aws_smithy_types::endpoint::Endpoint, DirectError> {
    let future = resolver.resolve_endpoint(params);
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(result) => result.map_err(|e| DirectError::Endpoint(e.to_string())),
        std::task::Poll::Pending => Err(DirectError::Endpoint(
            "the endpoint resolver did not answer at once".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::wire::{Item, item};
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;
    use aws_smithy_runtime_api::client::http::HttpConnector;
    use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
    use aws_smithy_types::body::SdkBody;
    use serde_json::Value;
    use std::collections::HashMap;

    #[test]
    fn an_item_in_dynamodb_json_reads_as_the_sdk_would() {
        let original: Item = HashMap::from([
            ("s".to_owned(), AttributeValue::S("a \"quoted\" é".into())),
            ("n".to_owned(), AttributeValue::N("12.50".into())),
            ("b".to_owned(), AttributeValue::Bool(true)),
            ("z".to_owned(), AttributeValue::Null(true)),
            (
                "bin".to_owned(),
                AttributeValue::B(aws_smithy_types::Blob::new(vec![0, 255, 7])),
            ),
            (
                "ss".to_owned(),
                AttributeValue::Ss(vec!["x".into(), "y".into()]),
            ),
            (
                "m".to_owned(),
                AttributeValue::M(HashMap::from([(
                    "l".to_owned(),
                    AttributeValue::L(vec![AttributeValue::N("1".into())]),
                )])),
            ),
        ]);
        // DynamoDB's JSON for it, written out by hand (base64 of 0, 255, 7 is "AP8H").
        let json = serde_json::json!({
            "s": {"S": "a \"quoted\" é"},
            "n": {"N": "12.50"},
            "b": {"BOOL": true},
            "z": {"NULL": true},
            "bin": {"B": "AP8H"},
            "ss": {"SS": ["x", "y"]},
            "m": {"M": {"l": {"L": [{"N": "1"}]}}},
        });
        assert_eq!(item(&json).expect("readable"), original);
    }

    #[test]
    fn the_body_names_every_part_of_the_write() {
        let write = Write {
            table: "t",
            key: Key {
                attribute: "pk",
                prefix: "",
                key: "o-1",
                partition: None,
            },
            update: Some("SET #s = :p"),
            condition: "attribute_not_exists(#s)",
            names: vec![("#s", "status")],
            values: vec![(":p", Val::S("IN_PROGRESS"))],
            old_on_success: true,
            old_on_failure: true,
        };
        let body: Value =
            serde_json::from_slice(&request_body(&write).expect("a body")).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({
                "TableName": "t",
                "Key": {"pk": {"S": "o-1"}},
                "UpdateExpression": "SET #s = :p",
                "ConditionExpression": "attribute_not_exists(#s)",
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {":p": {"S": "IN_PROGRESS"}},
                "ReturnValues": "ALL_OLD",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            })
        );
        let delete = Write {
            update: None,
            old_on_success: false,
            old_on_failure: false,
            ..write
        };
        let body: Value =
            serde_json::from_slice(&request_body(&delete).expect("a body")).expect("JSON");
        assert!(body.get("UpdateExpression").is_none());
        assert!(body.get("ReturnValues").is_none());
        assert!(body.get("ReturnValuesOnConditionCheckFailure").is_none());
    }

    #[test]
    fn keys_and_values_are_written_as_the_sdk_client_sends_them() {
        // A single-table key with a prefix, and a value of each kind, with text JSON escapes.
        let token = "9b2f\"\n";
        let key = Key {
            attribute: "sk",
            prefix: "orders#",
            key: "o-\"1\"é",
            partition: Some(("pk", "tenant\\a")),
        };
        let values = vec![
            (":s", Val::S("a\tb")),
            (":t", Val::Shown(&token)),
            (":n", Val::N(u64::MAX)),
            (":z", Val::N(0)),
        ];
        let write = Write {
            table: "t",
            key,
            update: Some("SET #s = :s"),
            condition: "#s = :t",
            names: vec![("#s", "status")],
            values: values.clone(),
            old_on_success: false,
            old_on_failure: false,
        };
        let body: Value =
            serde_json::from_slice(&request_body(&write).expect("a body")).expect("JSON");
        // What the SDK's client would send for the same key and values, read the same way.
        let sdk_key: Item = key.to_item();
        let sdk_values: Item = values
            .iter()
            .map(|(placeholder, value)| ((*placeholder).to_owned(), value.to_attribute()))
            .collect();
        assert_eq!(item(&body["Key"]).expect("a key"), sdk_key);
        assert_eq!(
            item(&body["ExpressionAttributeValues"]).expect("values"),
            sdk_values
        );
        assert_eq!(
            body["Key"],
            serde_json::json!({"sk": {"S": "orders#o-\"1\"é"}, "pk": {"S": "tenant\\a"}})
        );
        assert_eq!(
            body["ExpressionAttributeValues"],
            serde_json::json!({
                ":s": {"S": "a\tb"},
                ":t": {"S": "9b2f\"\n"},
                ":n": {"N": "18446744073709551615"},
                ":z": {"N": "0"},
            })
        );
    }

    #[test]
    fn answers_read_as_applied_refused_or_an_error() {
        let applied = read_answer(200, None, br#"{"Attributes":{"status":{"S":"COMPLETED"}}}"#);
        assert!(
            matches!(applied, Ok(Written::Applied(Some(old))) if old["status"] == AttributeValue::S("COMPLETED".into()))
        );
        assert!(matches!(
            read_answer(200, None, b"{}"),
            Ok(Written::Applied(None))
        ));
        let refused = read_answer(
            400,
            None,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed","Item":{"lease_token":{"S":"t-1"}}}"#,
        );
        assert!(
            matches!(refused, Ok(Written::Refused(Some(old))) if old["lease_token"] == AttributeValue::S("t-1".into()))
        );
        let throttled = read_answer(
            400,
            None,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}"#,
        );
        let Err(throttled) = throttled else {
            panic!("a throttle is an error: {throttled:?}")
        };
        assert!(retryable(&throttled), "{throttled}");
        let missing = read_answer(
            400,
            None,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"no table"}"#,
        );
        let Err(missing) = missing else {
            panic!("a missing table is an error: {missing:?}")
        };
        assert!(!retryable(&missing), "{missing}");
        assert!(matches!(
            read_answer(502, None, b"<html>bad gateway</html>"),
            Err(e @ DirectError::Unreadable { .. }) if retryable(&e)
        ));
    }

    #[test]
    fn the_error_is_named_as_the_sdk_reads_it() {
        let refused = |header: Option<&str>, body: &[u8]| {
            matches!(read_answer(400, header, body), Ok(Written::Refused(_)))
        };
        // DynamoDB's own form, the header (which wins), `code`, and a trailing URL.
        assert!(refused(
            None,
            br#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#
        ));
        assert!(refused(
            Some("ConditionalCheckFailedException:http://internal.amazon.com/"),
            br#"{"__type":"Other"}"#
        ));
        assert!(refused(
            None,
            br#"{"code":"ConditionalCheckFailedException","__type":"Other"}"#
        ));
        assert!(!refused(
            Some("ThrottlingException"),
            br#"{"__type":"ConditionalCheckFailedException"}"#
        ));
        // Any 2xx is applied; an answer that is not an object, or a NULL that is not true, is
        // not read as anything.
        assert!(matches!(
            read_answer(204, None, b""),
            Ok(Written::Applied(None))
        ));
        assert!(matches!(
            read_answer(200, None, br#"{"Attributes":null}"#),
            Ok(Written::Applied(None))
        ));
        assert!(matches!(
            read_answer(200, None, b"[]"),
            Err(DirectError::Unreadable { .. })
        ));
        assert!(matches!(
            read_answer(200, None, b"null"),
            Err(DirectError::Unreadable { .. })
        ));
        assert!(matches!(
            read_answer(200, None, br#"{"Attributes":{"x":{"NULL":false}}}"#),
            Err(DirectError::Unreadable { .. })
        ));
    }

    /// Requests as a connector receives them.
    #[derive(Debug, Clone, Default)]
    struct Capture(Arc<Mutex<Vec<HttpRequest>>>);

    impl HttpConnector for Capture {
        fn call(
            &self,
            request: HttpRequest,
        ) -> aws_smithy_runtime_api::client::http::HttpConnectorFuture {
            self.0.lock().expect("not poisoned").push(request);
            aws_smithy_runtime_api::client::http::HttpConnectorFuture::ready(Ok(
                aws_smithy_runtime_api::client::orchestrator::HttpResponse::new(
                    200.try_into().expect("a status"),
                    SdkBody::from("{}"),
                ),
            ))
        }
    }

    /// A client on `sdk` with a secret and a session token, sending into `capture`.
    fn captured_client(
        sdk: aws_types::sdk_config::Builder,
        secret: &str,
        token: &str,
        capture: &Capture,
    ) -> DirectClient {
        use aws_credential_types::Credentials;
        let sdk = sdk
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKID",
                secret,
                Some(token.into()),
                None,
                "test",
            )))
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build();
        DirectClient::new(&sdk, SharedHttpConnector::new(capture.clone())).expect("a client")
    }

    fn sent(sdk: aws_types::sdk_config::Builder) -> HttpRequest {
        let capture = Capture::default();
        let client = captured_client(sdk, "secret", "session-token", &capture);
        let write = Write {
            table: "t",
            key: Key {
                attribute: "pk",
                prefix: "",
                key: "o-1",
                partition: None,
            },
            update: None,
            condition: "#s = :r",
            names: vec![("#s", "status")],
            values: vec![(":r", Val::S("REJECTED"))],
            old_on_success: false,
            old_on_failure: false,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        runtime.block_on(client.write(&write)).expect("applied");
        let mut requests = capture.0.lock().expect("not poisoned");
        assert_eq!(requests.len(), 1);
        requests.remove(0)
    }

    /// After a signed request, neither the client's `Debug` nor its store's shows the secret key,
    /// the session token or the day's signing key (derived from the secret: it signs for a day),
    /// and the store's is short (it printed the whole SDK configuration).
    #[test]
    fn no_secret_reaches_a_debug_line_and_the_stores_is_short() {
        const SECRET: &str = "wJalrXUtnFEMI-known-secret-K7MDENG";
        const TOKEN: &str = "IQoJb3JpZ2luX2VjEXAMPLE-known-session-token";
        let capture = Capture::default();
        let sdk =
            aws_types::SdkConfig::builder().region(aws_types::region::Region::new("eu-west-1"));
        let client = captured_client(sdk, SECRET, TOKEN, &capture);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        runtime.block_on(client.write(&delete())).expect("applied");
        let day_key = client
            .inner
            .signer
            .day_key()
            .expect("the day's key, after a signature");
        let hex: String = day_key.iter().map(|b| format!("{b:02x}")).collect();
        let listed = format!("{day_key:?}");
        let listed = &listed[1..listed.len() - 1];
        let store = crate::DynamoDbStore::direct(client.clone(), "orders", Duration::from_secs(60));
        for text in [
            format!("{client:?}"),
            format!("{store:?}"),
            format!("{store:#?}"),
        ] {
            for secret in [SECRET, TOKEN, hex.as_str(), listed] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
        }
        let short = format!("{store:?}");
        assert!(short.len() < 300 && short.contains("orders"), "{short}");
    }

    /// The client's own signer takes an endpoint's root only; a path goes to aws-sigv4's.
    #[test]
    fn only_an_endpoints_root_is_signed_by_the_clients_own_signer() {
        for (url, host, root) in [
            (
                "https://dynamodb.eu-west-1.amazonaws.com/",
                "dynamodb.eu-west-1.amazonaws.com",
                true,
            ),
            ("http://127.0.0.1:8000/", "127.0.0.1:8000", true),
            ("http://127.0.0.1:8000/dynamodb/", "127.0.0.1:8000", false),
            (
                "http://127.0.0.1:8000/x/127.0.0.1:8000/",
                "127.0.0.1:8000",
                false,
            ),
            ("http://a/b://127.0.0.1:8000/", "127.0.0.1:8000", false),
            ("http://127.0.0.1:8000", "127.0.0.1:8000", false),
            ("http://other:8000/", "127.0.0.1:8000", false),
        ] {
            assert_eq!(at_root(url, host), root, "{url}");
        }
    }

    /// What is signed is what is sent: the Host (a scheme's default port left out of both, as
    /// HTTP clients write it), the target, the session token, the region's endpoint and the
    /// FIPS one, and an override's path.
    #[test]
    fn the_signed_request_is_the_request_sent() {
        let region = aws_types::region::Region::new("eu-west-1");
        for (sdk, url, host) in [
            (
                aws_types::SdkConfig::builder().region(region.clone()),
                "https://dynamodb.eu-west-1.amazonaws.com/",
                "dynamodb.eu-west-1.amazonaws.com",
            ),
            (
                aws_types::SdkConfig::builder()
                    .region(region.clone())
                    .use_fips(true),
                "https://dynamodb-fips.eu-west-1.amazonaws.com/",
                "dynamodb-fips.eu-west-1.amazonaws.com",
            ),
            (
                aws_types::SdkConfig::builder()
                    .region(region.clone())
                    .endpoint_url("https://ddb.example:443"),
                "https://ddb.example/",
                "ddb.example",
            ),
            (
                aws_types::SdkConfig::builder()
                    .region(region.clone())
                    .endpoint_url("http://localhost:80"),
                "http://localhost/",
                "localhost",
            ),
            (
                aws_types::SdkConfig::builder()
                    .region(region.clone())
                    .endpoint_url("http://127.0.0.1:443"),
                "http://127.0.0.1:443/",
                "127.0.0.1:443",
            ),
            (
                aws_types::SdkConfig::builder()
                    .region(region.clone())
                    .endpoint_url("https://ddb.example:80"),
                "https://ddb.example:80/",
                "ddb.example:80",
            ),
            (
                aws_types::SdkConfig::builder()
                    .region(region.clone())
                    .endpoint_url("http://127.0.0.1:8000/prefix"),
                "http://127.0.0.1:8000/prefix",
                "127.0.0.1:8000",
            ),
        ] {
            let request = sent(sdk);
            assert_eq!(request.uri(), url);
            let headers = request.headers();
            assert_eq!(headers.get("host"), Some(host), "{url}");
            assert_eq!(
                headers.get("x-amz-target"),
                Some("DynamoDB_20120810.DeleteItem")
            );
            assert_eq!(
                headers.get("content-type"),
                Some("application/x-amz-json-1.0")
            );
            assert_eq!(headers.get("x-amz-security-token"), Some("session-token"));
            let authorization = headers.get("authorization").expect("signed");
            assert!(
                authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKID/")
                    && authorization.contains("/eu-west-1/dynamodb/aws4_request")
                    && authorization.contains(
                        "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
                    ),
                "{authorization}"
            );
            let body = request.body().bytes().expect("an in-memory body");
            assert_eq!(
                headers.get("content-length"),
                Some(body.len().to_string().as_str())
            );
        }
    }

    /// A sleep that records what it is asked for: the backoff's delays pass at once, the
    /// timeouts (an hour here) never do.
    #[derive(Debug, Clone, Default)]
    struct Delays(Arc<Mutex<Vec<Duration>>>);

    impl AsyncSleep for Delays {
        fn sleep(&self, duration: Duration) -> aws_smithy_async::rt::sleep::Sleep {
            if duration >= Duration::from_secs(3_600) {
                return aws_smithy_async::rt::sleep::Sleep::new(std::future::pending());
            }
            self.0.lock().expect("not poisoned").push(duration);
            aws_smithy_async::rt::sleep::Sleep::new(std::future::ready(()))
        }
    }

    /// A connector that answers every request with `status` and `body`, counting them.
    #[derive(Debug, Clone)]
    struct Always(u16, &'static str, Arc<std::sync::atomic::AtomicUsize>);

    impl HttpConnector for Always {
        fn call(
            &self,
            _request: HttpRequest,
        ) -> aws_smithy_runtime_api::client::http::HttpConnectorFuture {
            self.2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            aws_smithy_runtime_api::client::http::HttpConnectorFuture::ready(Ok(
                aws_smithy_runtime_api::client::orchestrator::HttpResponse::new(
                    self.0.try_into().expect("a status"),
                    SdkBody::from(self.1),
                ),
            ))
        }
    }

    /// Answers every request with the status it holds now (`{}` as the body), counting them.
    #[derive(Debug, Clone, Default)]
    struct Switchable {
        status: Arc<std::sync::atomic::AtomicU16>,
        sent: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl HttpConnector for Switchable {
        fn call(
            &self,
            _request: HttpRequest,
        ) -> aws_smithy_runtime_api::client::http::HttpConnectorFuture {
            use std::sync::atomic::Ordering::SeqCst;
            self.sent.fetch_add(1, SeqCst);
            aws_smithy_runtime_api::client::http::HttpConnectorFuture::ready(Ok(
                aws_smithy_runtime_api::client::orchestrator::HttpResponse::new(
                    self.status.load(SeqCst).try_into().expect("a status"),
                    SdkBody::from("{}"),
                ),
            ))
        }
    }

    /// The SDK's retry quota: while every call fails, retries drain the 500 tokens (a retry
    /// after a 5xx takes 10) and then stop, so a failing table gets one request a call instead
    /// of four; first-attempt successes refill it a token each.
    #[test]
    fn a_failing_table_spends_the_retry_quota_then_gets_one_request_a_call() {
        use std::sync::atomic::Ordering::SeqCst;
        let run = |quota: bool| {
            let server = Switchable::default();
            server.status.store(503, SeqCst);
            let sdk = config(
                Delays::default(),
                Duration::from_secs(3_600),
                SharedCredentialsProvider::new(aws_credential_types::Credentials::new(
                    "AKID", "secret", None, None, "test",
                )),
            );
            let client = DirectClient::new(&sdk, SharedHttpConnector::new(server.clone()))
                .expect("a client");
            let client = if quota {
                client
            } else {
                client.without_retry_quota()
            };
            for _ in 0..40 {
                assert!(block_on(client.write(&delete())).is_err());
            }
            let failing = server.sent.load(SeqCst);
            server.status.store(200, SeqCst);
            block_on(client.write(&delete())).expect("the table is back");
            (failing, client.retry_quota_tokens())
        };
        // 16 calls retried in full (4 requests, 30 tokens each), the 17th twice (20 tokens
        // left), the other 23 not at all.
        assert_eq!(run(true), (16 * 4 + 3 + 23, 1));
        assert_eq!(run(false).0, 40 * 4, "every retry without the quota");
    }

    /// A configuration with `sleep`, 4 attempts from 100 ms doubling to 300 ms, and `attempt`
    /// for the attempt timeout (the operation's an hour).
    fn config(
        sleep: Delays,
        attempt: Duration,
        credentials: SharedCredentialsProvider,
    ) -> aws_types::SdkConfig {
        aws_types::SdkConfig::builder()
            .region(aws_types::region::Region::new("eu-west-1"))
            .credentials_provider(credentials)
            .sleep_impl(SharedAsyncSleep::new(sleep))
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(4)
                    .with_initial_backoff(Duration::from_millis(100))
                    .with_max_backoff(Duration::from_millis(300))
                    .with_use_static_exponential_base(true),
            )
            .timeout_config(
                aws_smithy_types::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(attempt)
                    .operation_timeout(Duration::from_secs(3_600))
                    .build(),
            )
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .build()
    }

    fn delete() -> Write<'static> {
        Write {
            table: "t",
            key: Key {
                attribute: "pk",
                prefix: "",
                key: "o-1",
                partition: None,
            },
            update: None,
            condition: "#s = :r",
            names: vec![("#s", "status")],
            values: vec![(":r", Val::S("REJECTED"))],
            old_on_success: false,
            old_on_failure: false,
        }
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    /// Requests sent and delays slept for one write answered `status` and `body` every time.
    fn attempts(status: u16, body: &'static str, jitter: bool) -> (usize, Vec<Duration>) {
        let delays = Delays::default();
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sdk = config(
            delays.clone(),
            Duration::from_secs(3_600),
            SharedCredentialsProvider::new(aws_credential_types::Credentials::new(
                "AKID", "secret", None, None, "test",
            )),
        );
        let sdk = match sdk.retry_config().cloned() {
            Some(retry) if jitter => sdk
                .to_builder()
                .retry_config(retry.with_use_static_exponential_base(false))
                .build(),
            _ => sdk,
        };
        let connector = SharedHttpConnector::new(Always(status, body, sent.clone()));
        let client = DirectClient::new(&sdk, connector).expect("a client");
        let _ = block_on(client.write(&delete()));
        let slept = delays.0.lock().expect("not poisoned").clone();
        (sent.load(std::sync::atomic::Ordering::SeqCst), slept)
    }

    /// DynamoDB as a server whose clock is `ahead` of this host's answers: a request whose
    /// signature's time is more than five minutes off its clock is refused
    /// (`InvalidSignatureException`, "Signature expired", with its `Date`), and with
    /// `refuse_all` every request is refused so (a wrong secret); anything else is applied.
    #[derive(Debug, Clone)]
    struct SkewedServer {
        ahead: Duration,
        refuse_all: bool,
        answers: Arc<Mutex<Vec<&'static str>>>,
    }

    impl SkewedServer {
        fn new(ahead: Duration, refuse_all: bool) -> Self {
            Self {
                ahead,
                refuse_all,
                answers: Arc::default(),
            }
        }

        fn answers(&self) -> Vec<&'static str> {
            self.answers.lock().expect("not poisoned").clone()
        }
    }

    impl Transport for SkewedServer {
        fn send(&self, request: Outgoing<'_>) -> Sending {
            use aws_smithy_types::date_time::Format;
            let server_now = std::time::SystemTime::now() + self.ahead;
            let server = aws_smithy_types::DateTime::from(server_now);
            // x-amz-date is ISO 8601 basic (20261207T150849Z): read as RFC 3339.
            let signed = request
                .headers
                .iter()
                .find(|h| h.name == "x-amz-date")
                .map(|h| h.value)
                .filter(|v| v.len() == 16)
                .and_then(|v| {
                    let extended = format!(
                        "{}-{}-{}T{}:{}:{}Z",
                        &v[0..4],
                        &v[4..6],
                        &v[6..8],
                        &v[9..11],
                        &v[11..13],
                        &v[13..15]
                    );
                    aws_smithy_types::DateTime::from_str(&extended, Format::DateTime).ok()
                });
            let off = signed.is_none_or(|signed| signed.secs().abs_diff(server.secs()) > 300);
            let answer = if self.refuse_all || off {
                self.answers.lock().expect("not poisoned").push("refused");
                Answer::new(
                    400,
                    r#"{"__type":"com.amazon.coral.service#InvalidSignatureException","message":"Signature expired"}"#,
                )
            } else {
                self.answers.lock().expect("not poisoned").push("applied");
                Answer::new(200, "{}")
            };
            let date = server.fmt(Format::HttpDate).expect("an HTTP date");
            Box::pin(std::future::ready(Ok(answer.with_date(date))))
        }
    }

    fn skewed_client(server: &SkewedServer) -> DirectClient {
        let sdk = config(
            Delays::default(),
            Duration::from_secs(3_600),
            SharedCredentialsProvider::new(aws_credential_types::Credentials::new(
                "AKID", "secret", None, None, "test",
            )),
        );
        DirectClient::with_transport(&sdk, server.clone()).expect("a client")
    }

    /// A host whose clock is 20 minutes behind the server's: its first request is refused for
    /// its time, the next is signed by the server's (the answer's `Date`) and applied, and every
    /// later request is signed so from the start, as the SDK corrects clock skew.
    #[test]
    fn a_request_refused_for_clock_skew_is_signed_again_by_the_servers_time() {
        let server = SkewedServer::new(Duration::from_secs(20 * 60), false);
        let client = skewed_client(&server);
        block_on(client.write(&delete())).expect("applied once signed by the server's time");
        assert_eq!(server.answers(), ["refused", "applied"]);
        block_on(client.write(&delete())).expect("applied");
        assert_eq!(
            server.answers(),
            ["refused", "applied", "applied"],
            "the skew is kept"
        );
    }

    /// A signature refused by a server whose clock agrees with this host's is a real refusal (a
    /// wrong secret): one request, the service's error, no retry.
    #[test]
    fn a_signature_refused_with_the_same_time_is_not_retried() {
        let server = SkewedServer::new(Duration::ZERO, true);
        let client = skewed_client(&server);
        let refused = block_on(client.write(&delete())).expect_err("a wrong secret");
        assert!(
            matches!(&refused, DirectError::Service { kind, .. } if kind == "InvalidSignatureException"),
            "{refused:?}"
        );
        assert_eq!(server.answers(), ["refused"]);
    }

    /// Standard mode: every attempt the configuration allows, the delay doubling from the
    /// initial backoff to its cap (each at most that with jitter); nothing retried that is not
    /// retryable, and nothing after a success or a refusal.
    #[test]
    fn retries_follow_the_standard_schedule() {
        let ms = Duration::from_millis;
        let throttled = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"}"#;
        assert_eq!(
            attempts(400, throttled, false),
            (4, vec![ms(100), ms(200), ms(300)])
        );
        assert_eq!(
            attempts(500, "{}", false),
            (4, vec![ms(100), ms(200), ms(300)])
        );
        let (sent, jittered) = attempts(503, "{}", true);
        assert_eq!(sent, 4);
        assert!(
            jittered
                .iter()
                .zip([ms(100), ms(200), ms(300)])
                .all(|(d, bound)| *d <= bound),
            "{jittered:?}"
        );
        let missing = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"}"#;
        assert_eq!(attempts(400, missing, false), (1, vec![]));
        let refused =
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException"}"#;
        assert_eq!(attempts(400, refused, false), (1, vec![]));
        assert_eq!(attempts(200, "{}", false), (1, vec![]));
    }

    /// An attempt that never answers ends at the attempt timeout and is retried, every attempt
    /// the configuration allows; the call fails as a timeout.
    #[test]
    fn an_attempt_that_never_answers_is_retried() {
        #[derive(Debug, Clone)]
        struct Silent(Arc<std::sync::atomic::AtomicUsize>);
        impl HttpConnector for Silent {
            fn call(
                &self,
                _request: HttpRequest,
            ) -> aws_smithy_runtime_api::client::http::HttpConnectorFuture {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                aws_smithy_runtime_api::client::http::HttpConnectorFuture::new(
                    std::future::pending(),
                )
            }
        }
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sdk = config(
            Delays::default(),
            Duration::from_millis(50),
            SharedCredentialsProvider::new(aws_credential_types::Credentials::new(
                "AKID", "secret", None, None, "test",
            )),
        );
        let client = DirectClient::new(&sdk, SharedHttpConnector::new(Silent(sent.clone())))
            .expect("a client");
        let result = block_on(client.write(&delete()));
        assert!(
            matches!(result, Err(DirectError::AttemptTimeout(_))),
            "{result:?}"
        );
        assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    /// Credentials are loaded once and kept while they have more than 10 s left; closer to their
    /// expiry (or past it) each write loads them again.
    #[test]
    fn credentials_are_kept_until_shortly_before_they_expire() {
        #[derive(Debug)]
        struct Counting(
            Arc<std::sync::atomic::AtomicUsize>,
            Option<std::time::SystemTime>,
        );
        impl ProvideCredentials for Counting {
            fn provide_credentials<'a>(
                &'a self,
            ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
            where
                Self: 'a,
            {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                aws_credential_types::provider::future::ProvideCredentials::ready(Ok(
                    aws_credential_types::Credentials::new("AKID", "secret", None, self.1, "test"),
                ))
            }
        }
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let loads = |expiry: Option<std::time::SystemTime>| {
            let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let sdk = config(
                Delays::default(),
                Duration::from_secs(3_600),
                SharedCredentialsProvider::new(Counting(count.clone(), expiry)),
            )
            .to_builder()
            .time_source(aws_smithy_async::time::StaticTimeSource::new(now))
            .build();
            let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let client = DirectClient::new(&sdk, SharedHttpConnector::new(Always(200, "{}", sent)))
                .expect("a client");
            for _ in 0..3 {
                block_on(client.write(&delete())).expect("applied");
            }
            count.load(std::sync::atomic::Ordering::SeqCst)
        };
        assert_eq!(loads(None), 1, "no expiry");
        assert_eq!(loads(Some(now + Duration::from_secs(11))), 1, "11 s left");
        assert_eq!(loads(Some(now + Duration::from_secs(10))), 3, "10 s left");
        assert_eq!(loads(Some(now - Duration::from_secs(1))), 3, "expired");
    }
}
