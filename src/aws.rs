//! The AWS SDK configuration, loaded once per container and shared by every client.
//!
//! Loading does no network I/O: the region comes from the environment (never instance
//! metadata), credentials resolve lazily on the first request, and the endpoint override is the
//! SDK's own `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`.
//!
//! The SDK's HTTP client is [`http_client`]: reqwest on the compiled-in roots of
//! `tls`, the same stack as the payment gateway. The SDK's default client would read
//! the system trust store, and parse it again for every connector it builds (one per timeout
//! setting, and one for the STS client of the default credentials chain): about 2 to 4 ms of
//! each cold start.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::environment::credentials::EnvironmentVariableCredentialsProvider;
use aws_config::environment::region::EnvironmentVariableRegionProvider;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use idempotency::dynamodb::{Answer, DirectError, Outgoing, Sending, Transport};

/// Retry and timeout bounds for AWS calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdkSettings {
    /// Attempts per call, the first included (throttling and 5xx are retried with backoff).
    pub max_attempts: u32,
    /// One attempt, connect included.
    pub attempt_timeout: Duration,
    /// A whole call, retries included.
    pub operation_timeout: Duration,
}

impl SdkSettings {
    /// The DynamoDB client's bounds: `DYNAMODB_MAX_ATTEMPTS` (3), `DYNAMODB_ATTEMPT_TIMEOUT_MS`
    /// (1000) and `DYNAMODB_OPERATION_TIMEOUT_MS` (3000).
    pub fn dynamodb_from_env(env: &lambda_kit::Env<'_>) -> Result<Self, lambda_kit::EnvError> {
        Ok(Self {
            max_attempts: env.ranged("DYNAMODB_MAX_ATTEMPTS", 3, 1, 10)?,
            attempt_timeout: Duration::from_millis(env.ranged(
                "DYNAMODB_ATTEMPT_TIMEOUT_MS",
                1_000,
                50,
                60_000,
            )?),
            operation_timeout: Duration::from_millis(env.ranged(
                "DYNAMODB_OPERATION_TIMEOUT_MS",
                3_000,
                50,
                300_000,
            )?),
        })
    }

    /// The SDK's retry configuration for these bounds (standard mode).
    pub fn retry_config(&self) -> RetryConfig {
        RetryConfig::standard().with_max_attempts(self.max_attempts)
    }

    /// The SDK's timeout configuration for these bounds.
    pub fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.attempt_timeout)
            .operation_attempt_timeout(self.attempt_timeout)
            .operation_timeout(self.operation_timeout)
            .build()
    }
}

/// Loads the SDK configuration every client of the container shares: one HTTP client
/// ([`http_client`]). Credentials come from the environment when it has them (Lambda always
/// sets them): the default chain would also build an STS client, for web identity, at start-up.
pub async fn load() -> SdkConfig {
    let loader = aws_config::defaults(BehaviorVersion::latest())
        .region(EnvironmentVariableRegionProvider::new())
        .http_client(http_client());
    let loader = match std::env::var_os("AWS_ACCESS_KEY_ID") {
        Some(_) => loader.credentials_provider(EnvironmentVariableCredentialsProvider::new()),
        None => loader,
    };
    loader.load().await
}

/// The SDK's HTTP client: reqwest, with the container's rustls configuration. One reqwest
/// client per connect timeout the SDK asks for, built when a service client is built (at
/// start-up, without network I/O) and kept for the container.
pub fn http_client() -> SharedHttpClient {
    SharedHttpClient::new(ReqwestHttpClient::default())
}

/// The connect and read timeouts a connector was built for.
type Timeouts = (Option<Duration>, Option<Duration>);

#[derive(Debug, Default)]
struct ReqwestHttpClient {
    // A std Mutex: held only to find or insert a client, never across an await.
    connectors: Mutex<HashMap<Timeouts, SharedHttpConnector>>,
}

impl HttpClient for ReqwestHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        let mut connectors = self
            .connectors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        connectors
            .entry(key)
            .or_insert_with(|| SharedHttpConnector::new(ReqwestConnector::new(key.0, key.1)))
            .clone()
    }
}

#[derive(Debug, Clone)]
struct ReqwestConnector {
    /// `Err` when the client could not be built: every call then fails with the reason, as a
    /// connector error the SDK reports (the store error makes the record RETRY).
    client: Result<reqwest::Client, String>,
    /// The last request's URI and its URL as reqwest takes it: a client's requests all go to
    /// one endpoint, and parsing its text again (the host through IDNA's mapping) was about 2%
    /// of an order's CPU (docs/performance.md, "CPU per order on the shipped path").
    last_url: Arc<Mutex<Option<(http::Uri, reqwest::Url)>>>,
}

impl ReqwestConnector {
    fn new(connect_timeout: Option<Duration>, read_timeout: Option<Duration>) -> Self {
        let client = crate::tls::client_config()
            .map_err(|e| e.to_string())
            .and_then(|tls| {
                let mut builder = reqwest::Client::builder()
                    .tls_backend_preconfigured(tls)
                    // The SDK signs and sends exactly its requests: no redirects followed.
                    .redirect(reqwest::redirect::Policy::none());
                if let Some(timeout) = connect_timeout {
                    builder = builder.connect_timeout(timeout);
                }
                if let Some(timeout) = read_timeout {
                    builder = builder.read_timeout(timeout);
                }
                builder.build().map_err(|e| e.to_string())
            });
        Self {
            client,
            last_url: Arc::default(),
        }
    }

    /// `uri` as reqwest's URL, parsed once while the endpoint stays the same.
    fn url_of(&self, uri: &http::Uri) -> Result<reqwest::Url, url::ParseError> {
        let mut last = self
            .last_url
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((seen, url)) = last.as_ref()
            && seen == uri
        {
            return Ok(url.clone());
        }
        let url = reqwest::Url::parse(&uri.to_string())?;
        *last = Some((uri.clone(), url.clone()));
        Ok(url)
    }

    /// The SDK's request as reqwest's, its URL from [`Self::url_of`].
    fn outgoing(&self, request: HttpRequest) -> Result<reqwest::Request, ConnectorError> {
        let request = request
            .try_into_http1x()
            .map_err(|e| ConnectorError::user(e.into()))?;
        let (parts, body) = request.into_parts();
        // In-memory bodies (every DynamoDB and SQS request) go as bytes, so their length is
        // known up front; a streaming body is wrapped.
        let body = match body.bytes() {
            Some(bytes) => reqwest::Body::from(bytes.to_vec()),
            None => reqwest::Body::wrap(body),
        };
        if !parts.extensions.is_empty() {
            // reqwest's own conversion keeps extensions; its builder cannot take them.
            return reqwest::Request::try_from(http::Request::from_parts(parts, body))
                .map_err(|e| ConnectorError::user(e.into()));
        }
        let url = self
            .url_of(&parts.uri)
            .map_err(|e| ConnectorError::user(e.into()))?;
        let mut outgoing = reqwest::Request::new(parts.method, url);
        *outgoing.headers_mut() = parts.headers;
        *outgoing.version_mut() = parts.version;
        *outgoing.body_mut() = Some(body);
        Ok(outgoing)
    }
}

/// The store's own client sends through reqwest directly: its request is built from the signed
/// parts, without the SDK's request type between them (two conversions and a copy of every
/// header and of the body each way; docs/performance.md, "CPU per order on the shipped path").
impl Transport for ReqwestConnector {
    fn send(&self, request: Outgoing<'_>) -> Sending {
        let client = self.client.clone();
        let request = self.direct(request);
        Box::pin(async move {
            let client = client
                .map_err(|e| DirectError::Connector(ConnectorError::other(e.into(), None)))?;
            let response = client
                .execute(request?)
                .await
                .map_err(|e| DirectError::Connector(connector_error(e)))?;
            let status = response.status().as_u16();
            let error_type = response
                .headers()
                .get("x-amzn-errortype")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = response
                .bytes()
                .await
                .map_err(|e| DirectError::Body(Box::new(e)))?;
            Ok(Answer {
                status,
                error_type,
                body: body.into(),
            })
        })
    }
}

impl ReqwestConnector {
    /// The store's signed request as reqwest's, its URL from [`Self::url_of`].
    fn direct(&self, request: Outgoing<'_>) -> Result<reqwest::Request, DirectError> {
        let signing = |e: Box<dyn std::error::Error + Send + Sync>| DirectError::Signing(e);
        let url = {
            let mut last = self
                .last_url
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match last.as_ref() {
                Some((seen, url)) if seen == request.url => url.clone(),
                _ => {
                    let uri: http::Uri = request.url.parse().map_err(|e| signing(Box::new(e)))?;
                    let url = reqwest::Url::parse(request.url).map_err(|e| signing(Box::new(e)))?;
                    *last = Some((uri, url.clone()));
                    url
                }
            }
        };
        let mut headers = http::HeaderMap::with_capacity(request.headers.len());
        for header in request.headers {
            let mut value =
                http::HeaderValue::from_str(header.value).map_err(|e| signing(Box::new(e)))?;
            value.set_sensitive(header.sensitive);
            let name = http::HeaderName::from_bytes(header.name.as_bytes())
                .map_err(|e| signing(Box::new(e)))?;
            headers.insert(name, value);
        }
        let mut outgoing = reqwest::Request::new(http::Method::POST, url);
        *outgoing.headers_mut() = headers;
        *outgoing.body_mut() = Some(reqwest::Body::from(request.body.to_vec()));
        Ok(outgoing)
    }
}

impl HttpConnector for ReqwestConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        let request = self.outgoing(request);
        HttpConnectorFuture::new(async move {
            let client = client.map_err(|e| ConnectorError::other(e.into(), None))?;
            let request = request?;
            let response = client.execute(request).await.map_err(connector_error)?;
            let response: http::Response<reqwest::Body> = response.into();
            HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                .map_err(|e| ConnectorError::other(e.into(), None))
        })
    }
}

/// The SDK retries timeouts and I/O errors as transient; anything else is not retried.
fn connector_error(error: reqwest::Error) -> ConnectorError {
    if error.is_timeout() {
        ConnectorError::timeout(error.into())
    } else if error.is_connect() || error.is_request() || error.is_body() {
        ConnectorError::io(error.into())
    } else {
        ConnectorError::other(error.into(), None)
    }
}

/// A DynamoDB client on the shared configuration, with its own retry and timeout bounds.
///
/// Without the SDK's stalled-stream protection: it watches the throughput of every request and
/// response body with timers of its own, per call, to catch a stream that stops for longer
/// than its grace period (5 s). Every body here is a few kilobytes at most, and the attempt
/// timeout (1 s by default) ends a stalled attempt sooner; the watch only cost CPU
/// (docs/performance.md, "CPU per order on the shipped path").
pub fn dynamodb(sdk: &SdkConfig, settings: &SdkSettings) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(sdk)
        .retry_config(settings.retry_config())
        .timeout_config(settings.timeout_config())
        .stalled_stream_protection(
            aws_sdk_dynamodb::config::StalledStreamProtectionConfig::disabled(),
        )
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// The idempotency store's DynamoDB client on the shared configuration, with the same bounds
/// as [`dynamodb`]'s: the store's own client on the JSON API
/// ([`idempotency::dynamodb::DirectClient`]), over reqwest like every client here, without the
/// SDK's per-request machinery (docs/performance.md, "CPU per order on the shipped path").
pub fn dynamodb_direct(
    sdk: &SdkConfig,
    settings: &SdkSettings,
) -> Result<idempotency::dynamodb::DirectClient, idempotency::dynamodb::DirectClientError> {
    let sdk = sdk
        .to_builder()
        .retry_config(settings.retry_config())
        .timeout_config(settings.timeout_config())
        .build();
    let connector = ReqwestConnector::new(Some(settings.attempt_timeout), None);
    idempotency::dynamodb::DirectClient::with_transport(&sdk, connector)
}

/// An SQS client on the shared configuration, with its own retry and timeout bounds; without
/// stalled-stream protection, for [`dynamodb`]'s reason (every SQS body is small, and every
/// attempt has a timeout of its own).
pub fn sqs(sdk: &SdkConfig, settings: &SdkSettings) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(sdk)
        .retry_config(settings.retry_config())
        .timeout_config(settings.timeout_config())
        .stalled_stream_protection(aws_sdk_sqs::config::StalledStreamProtectionConfig::disabled())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// An SDK configuration for a local server (moto, dynoxide): its endpoint, a fixed region and
/// static test credentials, over the function's HTTP client. For the local tools and the tests.
pub fn local_config(endpoint: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "local"),
        ))
        .endpoint_url(endpoint)
        .http_client(http_client())
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str) -> HttpRequest {
        let request = http::Request::builder()
            .method("POST")
            .uri(uri)
            .header("x-amz-target", "DynamoDB_20120810.UpdateItem")
            .body(SdkBody::from("{}"))
            .expect("a request");
        HttpRequest::try_from(request).expect("an SDK request")
    }

    /// The store's signed request goes as it was signed: to its own URL (the one parsed last
    /// reused only for the same text), every header with its secrets marked, the body whole.
    #[test]
    fn a_direct_request_is_sent_as_signed() {
        use idempotency::dynamodb::Header;
        let connector = ReqwestConnector::new(None, None);
        for url in [
            "https://dynamodb.eu-west-1.amazonaws.com/",
            "https://dynamodb.eu-west-1.amazonaws.com/",
            "http://127.0.0.1:8000/",
            "https://dynamodb-fips.us-east-1.amazonaws.com/",
        ] {
            let secret = Header::secret("authorization", "AWS4-HMAC-SHA256 Credential=AKID");
            let headers = [
                Header::new("host", "dynamodb.eu-west-1.amazonaws.com"),
                Header::new("x-amz-target", "DynamoDB_20120810.UpdateItem"),
                secret,
            ];
            let request = idempotency::dynamodb::Outgoing::new(url, &headers, b"{\"a\":1}");
            let outgoing = connector.direct(request).expect("a reqwest request");
            assert_eq!(outgoing.url().as_str(), url);
            assert_eq!(outgoing.method(), http::Method::POST);
            assert_eq!(outgoing.headers().len(), 3);
            assert_eq!(
                outgoing.headers()["x-amz-target"],
                "DynamoDB_20120810.UpdateItem"
            );
            assert_eq!(
                outgoing.headers()["host"],
                "dynamodb.eu-west-1.amazonaws.com"
            );
            assert!(outgoing.headers()["authorization"].is_sensitive());
            assert!(!outgoing.headers()["host"].is_sensitive());
            let body = outgoing.body().and_then(reqwest::Body::as_bytes);
            assert_eq!(body, Some(&b"{\"a\":1}"[..]));
        }
        let bad = [Header::new("host", "bad\nvalue")];
        let request = idempotency::dynamodb::Outgoing::new("https://h/", &bad, b"");
        assert!(matches!(
            connector.direct(request),
            Err(DirectError::Signing(_))
        ));
    }

    /// The URL parsed once is reused only for the same URI: a connector shared by two clients
    /// (DynamoDB and SQS with the same timeouts) sends each request to its own endpoint.
    #[test]
    fn each_request_goes_to_its_own_uri_with_its_method_headers_and_body() {
        let connector = ReqwestConnector::new(None, None);
        for uri in [
            "https://dynamodb.eu-west-1.amazonaws.com/",
            "https://dynamodb.eu-west-1.amazonaws.com/",
            "https://sqs.eu-west-1.amazonaws.com/",
            "http://127.0.0.1:8000/",
            "https://dynamodb.eu-west-1.amazonaws.com/",
        ] {
            let outgoing = connector.outgoing(request(uri)).expect("a reqwest request");
            assert_eq!(outgoing.url().as_str(), uri);
            assert_eq!(outgoing.method(), http::Method::POST);
            assert_eq!(
                outgoing.headers()["x-amz-target"],
                "DynamoDB_20120810.UpdateItem"
            );
            let body = outgoing.body().and_then(reqwest::Body::as_bytes);
            assert_eq!(body, Some(&b"{}"[..]));
        }
    }
}
