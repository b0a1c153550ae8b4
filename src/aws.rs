//! The AWS SDK configuration, loaded once per container and shared by every client.
//!
//! Loading does no network I/O: the region comes from the environment (never instance
//! metadata), credentials resolve lazily on the first request, and the endpoint override is the
//! SDK's own `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`.
//!
//! The SDK's HTTP client is [`http_client`]: reqwest on the compiled-in roots of
//! `tls`, the same stack as the payment gateway. The SDK's default client would read and parse
//! the system trust store at the first connector it builds (once a process, as
//! aws-smithy-http-client 1.5 caches the roots) and keep a second TLS stack beside reqwest's: a
//! few milliseconds of each cold start (docs/performance.md, "Init and first response").

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

/// The store client's transport: hyper's pooled HTTP/1.1 client, on the same rustls
/// configuration as every other client here, without reqwest's layers around it.
///
/// reqwest parses every request's URL three times (into its `Url`, back into a `Uri`, and again
/// in its redirect layer, which runs even when no redirect is followed) and wraps the answer in
/// its own types: about a third of what reqwest and `url` cost an order, for requests whose URL
/// never changes (docs/performance.md, "CPU per order on the shipped path"). Here the endpoint's
/// `Uri` is parsed once and cloned (reference counts), and the answer is read as it comes.
#[derive(Clone)]
pub struct HyperTransport {
    /// `Err` when the TLS configuration could not be built: every call then fails with the
    /// reason, as a connector error (the store error makes the record RETRY).
    client: Result<crate::pooled::PooledClient, String>,
    /// The last request's URL and its `Uri`: a client's requests all go to one endpoint.
    last_uri: Arc<Mutex<Option<(String, http::Uri)>>>,
}

impl std::fmt::Debug for HyperTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HyperTransport")
            .field("built", &self.client.is_ok())
            .finish_non_exhaustive()
    }
}

impl HyperTransport {
    /// A transport on the container's TLS configuration (`tls::client_config`), whose
    /// connections are made within `connect_timeout`.
    pub fn new(connect_timeout: Option<Duration>) -> Self {
        let client = crate::tls::client_config().map_err(|e| e.to_string());
        Self::with_tls(client, connect_timeout)
    }

    /// A transport on `tls` (a test's own trusted root).
    fn with_tls(
        tls: Result<rustls::ClientConfig, String>,
        connect_timeout: Option<Duration>,
    ) -> Self {
        let client = tls.map(|tls| crate::pooled::client(tls, connect_timeout));
        Self {
            client,
            last_uri: Arc::default(),
        }
    }

    /// The store's signed request as hyper's: to its own URL (the `Uri` parsed last reused only
    /// for the same text), every header with its secrets marked, the body whole.
    fn request(
        &self,
        request: Outgoing<'_>,
    ) -> Result<http::Request<http_body_util::Full<bytes::Bytes>>, DirectError> {
        let signing = |e: Box<dyn std::error::Error + Send + Sync>| DirectError::Signing(e);
        let uri = {
            let mut last = self
                .last_uri
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match last.as_ref() {
                Some((seen, uri)) if seen == request.url => uri.clone(),
                _ => {
                    let uri: http::Uri = request.url.parse().map_err(|e| signing(Box::new(e)))?;
                    *last = Some((request.url.to_owned(), uri.clone()));
                    uri
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
        let mut outgoing = http::Request::new(http_body_util::Full::new(
            bytes::Bytes::copy_from_slice(request.body),
        ));
        *outgoing.method_mut() = http::Method::POST;
        *outgoing.uri_mut() = uri;
        *outgoing.headers_mut() = headers;
        Ok(outgoing)
    }
}

impl Transport for HyperTransport {
    fn send(&self, request: Outgoing<'_>) -> Sending {
        let client = self.client.clone();
        let request = self.request(request);
        Box::pin(async move {
            use http_body_util::BodyExt;
            let client = client
                .map_err(|e| DirectError::Connector(ConnectorError::other(e.into(), None)))?;
            // Every failure to exchange (refused, reset, closed before the answer) is one the
            // SDK's standard mode retries: a write applied whose answer was lost is recognised
            // as ours by the store when its retry meets it.
            let response = client
                .request(request?)
                .await
                .map_err(|e| DirectError::Connector(ConnectorError::io(e.into())))?;
            let status = response.status().as_u16();
            let error_type = response
                .headers()
                .get("x-amzn-errortype")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let date = response
                .headers()
                .get(http::header::DATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| DirectError::Body(Box::new(e)))?
                .to_bytes();
            let answer = Answer::new(status, body);
            let answer = match error_type {
                Some(error_type) => answer.with_error_type(error_type),
                None => answer,
            };
            Ok(match date {
                Some(date) => answer.with_date(date),
                None => answer,
            })
        })
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

/// Which client the idempotency store writes through (`DYNAMODB_CLIENT`, read once at
/// start-up): the store's own (`direct`, the default: it measured about 40% less CPU an order)
/// or the AWS SDK's (`sdk`), the way back without a code change. Both pass the same store
/// contract, fault cases and a differential test against one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DynamoDbClient {
    /// [`idempotency::dynamodb::DirectClient`] over [`HyperTransport`].
    Direct,
    /// The SDK's `aws_sdk_dynamodb::Client`.
    Sdk,
}

impl DynamoDbClient {
    /// `DYNAMODB_CLIENT`: `direct` (the default) or `sdk`; anything else is refused.
    pub fn from_env(env: &lambda_kit::Env<'_>) -> Result<Self, lambda_kit::EnvError> {
        match env.text("DYNAMODB_CLIENT").as_deref().map(str::trim) {
            None | Some("direct") => Ok(Self::Direct),
            Some("sdk") => Ok(Self::Sdk),
            Some(other) => Err(lambda_kit::EnvError::invalid(
                "DYNAMODB_CLIENT",
                other,
                "direct (the store's own client, the default) or sdk (the AWS SDK's)",
            )),
        }
    }
}

/// The idempotency store on `table`, through the client `which` names, with `settings`' bounds.
pub fn dynamodb_store(
    sdk: &SdkConfig,
    settings: &SdkSettings,
    which: DynamoDbClient,
    table: &str,
    retention: Duration,
) -> Result<idempotency::DynamoDbStore, idempotency::dynamodb::DirectClientError> {
    Ok(match which {
        DynamoDbClient::Direct => {
            idempotency::DynamoDbStore::direct(dynamodb_direct(sdk, settings)?, table, retention)
        }
        DynamoDbClient::Sdk => {
            idempotency::DynamoDbStore::new(dynamodb(sdk, settings), table, retention)
        }
    })
}

/// The idempotency store's DynamoDB client on the shared configuration, with the same bounds
/// as [`dynamodb`]'s: the store's own client on the JSON API
/// ([`idempotency::dynamodb::DirectClient`]), over hyper on the same TLS configuration as every
/// client here ([`HyperTransport`]), without the SDK's per-request machinery (docs/performance.md, "CPU per order on the shipped path").
pub fn dynamodb_direct(
    sdk: &SdkConfig,
    settings: &SdkSettings,
) -> Result<idempotency::dynamodb::DirectClient, idempotency::dynamodb::DirectClientError> {
    let sdk = sdk
        .to_builder()
        .retry_config(settings.retry_config())
        .timeout_config(settings.timeout_config())
        .build();
    let transport = HyperTransport::new(Some(settings.attempt_timeout));
    idempotency::dynamodb::DirectClient::with_transport(&sdk, transport)
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
        let transport = HyperTransport::new(None);
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
            let outgoing = transport.request(request).expect("a request");
            assert_eq!(outgoing.uri().to_string(), url);
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
            let body = block_on(http_body_util::BodyExt::collect(outgoing.into_body()))
                .expect("a body")
                .to_bytes();
            assert_eq!(&body[..], b"{\"a\":1}");
        }
        let bad = [Header::new("host", "bad\nvalue")];
        let request = idempotency::dynamodb::Outgoing::new("https://h/", &bad, b"");
        assert!(matches!(
            transport.request(request),
            Err(DirectError::Signing(_))
        ));
        let request = idempotency::dynamodb::Outgoing::new("not a url", &[], b"");
        assert!(matches!(
            transport.request(request),
            Err(DirectError::Signing(_))
        ));
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(future)
    }

    /// A server certificate for 127.0.0.1 and localhost (`tests/tls/leaf.pem`), its key, and
    /// the test root that signed it (`tests/tls/ca.pem`; webpki takes no self-signed leaf).
    fn test_certificate() -> (
        Vec<rustls::pki_types::CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
        rustls::pki_types::CertificateDer<'static>,
    ) {
        use rustls::pki_types::pem::PemObject;
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls");
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(format!("{dir}/leaf.pem"))
            .expect("leaf.pem")
            .collect::<Result<Vec<_>, _>>()
            .expect("certificates");
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(format!("{dir}/leaf-key.pem"))
            .expect("leaf-key.pem");
        let root = rustls::pki_types::CertificateDer::from_pem_file(format!("{dir}/ca.pem"))
            .expect("ca.pem");
        (certs, key, root)
    }

    /// An HTTPS server on the test certificate that reads one request a connection (headers
    /// and a body of `content-length`) and answers a failed condition, as DynamoDB does.
    async fn https_server() -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (certs, key, _) = test_certificate();
        let acceptor = crate::testkit::tls_acceptor(certs, key);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(socket).await else {
                        return;
                    };
                    let mut seen = Vec::new();
                    let mut chunk = [0_u8; 1024];
                    loop {
                        let Ok(n) = tls.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&chunk[..n]);
                        let text = String::from_utf8_lossy(&seen);
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let length = text[..end]
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|l| l.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() < end + 4 + length {
                            continue;
                        }
                        let sent = &seen[end + 4..end + 4 + length];
                        let body = format!("{{\"echo\":{}}}", String::from_utf8_lossy(sent));
                        let answer = format!(
                            "HTTP/1.1 400 Bad Request\r\nx-amzn-errortype: \
                             ConditionalCheckFailedException:http://internal\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = tls.write_all(answer.as_bytes()).await;
                        seen.clear();
                    }
                });
            }
        });
        format!("https://127.0.0.1:{}/", addr.port())
    }

    /// Over TLS the transport sends the request and reads the whole answer (status, error
    /// type, body), twice on one connection; a server whose certificate no trusted root
    /// signed is refused in the handshake, as a connector error the client retries.
    #[test]
    fn the_transport_talks_https_and_refuses_an_untrusted_certificate() {
        use idempotency::dynamodb::Header;
        block_on(async {
            let url = https_server().await;
            let (_, _, root) = test_certificate();
            let mut roots = rustls::RootCertStore::empty();
            roots.add(root).expect("a root");
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let trusting = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("versions")
                .with_root_certificates(roots)
                .with_no_client_auth();
            let transport = HyperTransport::with_tls(Ok(trusting), Some(Duration::from_secs(5)));
            let host = url.trim_start_matches("https://").trim_end_matches('/');
            let headers = [
                Header::new("host", host),
                Header::new("content-length", "7"),
            ];
            for _ in 0..2 {
                let answer = transport
                    .send(Outgoing::new(&url, &headers, b"{\"a\":1}"))
                    .await
                    .expect("an answer");
                assert_eq!(answer.status, 400);
                assert_eq!(
                    answer.error_type.as_deref(),
                    Some("ConditionalCheckFailedException:http://internal")
                );
                assert_eq!(answer.body, b"{\"echo\":{\"a\":1}}");
            }
            // The container's own configuration trusts Mozilla's roots only.
            let shipped = HyperTransport::new(Some(Duration::from_secs(5)));
            let refused = shipped
                .send(Outgoing::new(&url, &headers, b"{\"a\":1}"))
                .await;
            assert!(
                matches!(&refused, Err(DirectError::Connector(e)) if e.is_io()),
                "{refused:?}"
            );
        });
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
