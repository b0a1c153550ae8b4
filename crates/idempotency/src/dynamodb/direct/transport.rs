//! One request as the direct client hands it to its [`Transport`], and the answer it gets back:
//! the seam where the SDK's connector (or another HTTP client) plugs in.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use aws_smithy_runtime_api::client::http::{HttpConnector, SharedHttpConnector};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::byte_stream::ByteStream;

use super::error::DirectError;

/// One signed request of the store's client: a POST of a JSON body to the endpoint.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Outgoing<'a> {
    /// The endpoint's URL (`https://dynamodb.eu-west-1.amazonaws.com/`), the same for every
    /// request of a client.
    pub url: &'a str,
    /// Every header to send, in the order given: the Host, content type and length, the
    /// target, then the signature's. Names are in lower case.
    pub headers: &'a [Header<'a>],
    /// The JSON body.
    pub body: &'a [u8],
}

/// A header of an [`Outgoing`] request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Header<'a> {
    /// In lower case.
    pub name: &'static str,
    /// Its value (ASCII).
    pub value: &'a str,
    /// A secret (the signature, the session token): to be kept out of debug output.
    pub sensitive: bool,
}

/// DynamoDB's whole answer to an [`Outgoing`] request. Built with [`Answer::new`] and the
/// `with_` methods; fields may be added.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `x-amzn-errortype` header, when it was sent.
    pub error_type: Option<String>,
    /// The `Date` header (an HTTP date), when it was sent: the server's clock, which a request
    /// refused for clock skew is signed again by.
    pub date: Option<String>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Answer {
    /// An answer of `status` with `body` and no error type.
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            error_type: None,
            date: None,
            body: body.into(),
        }
    }

    /// The answer with its `Date` header.
    #[must_use]
    pub fn with_date(mut self, date: impl Into<String>) -> Self {
        self.date = Some(date.into());
        self
    }

    /// The answer with its `x-amzn-errortype` header.
    #[must_use]
    pub fn with_error_type(mut self, error_type: impl Into<String>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }
}

/// A request in flight: its whole answer, or why there is none ([`DirectError::Connector`] for
/// I/O errors and timeouts, read as the SDK reads a connector's, [`DirectError::Body`] for an
/// answer that broke off).
pub type Sending = Pin<Box<dyn Future<Output = Result<Answer, DirectError>> + Send>>;

/// How the client's requests reach DynamoDB. The SDK's connectors are transports
/// ([`SharedHttpConnector`]); an HTTP client of the caller's own can be one too, without the
/// conversions between its request type and the SDK's (the order function's reqwest client).
pub trait Transport: fmt::Debug + Send + Sync {
    /// Starts sending `request`: what it needs of the request is taken before this returns.
    fn send(&self, request: Outgoing<'_>) -> Sending;
}

impl Transport for SharedHttpConnector {
    fn send(&self, request: Outgoing<'_>) -> Sending {
        let mut builder = http::Request::builder().method("POST").uri(request.url);
        for header in request.headers {
            let mut value = match http::HeaderValue::from_str(header.value) {
                Ok(value) => value,
                Err(e) => {
                    return Box::pin(std::future::ready(Err(DirectError::Signing(Box::new(e)))));
                }
            };
            value.set_sensitive(header.sensitive);
            builder = builder.header(header.name, value);
        }
        let request = builder
            .body(SdkBody::from(request.body.to_vec()))
            .map_err(|e| DirectError::Signing(Box::new(e)))
            .and_then(|r| HttpRequest::try_from(r).map_err(|e| DirectError::Signing(Box::new(e))));
        let call = request.map(|request| self.call(request));
        Box::pin(async move {
            let response = call?.await.map_err(DirectError::Connector)?;
            let status = response.status().as_u16();
            let error_type = response
                .headers()
                .get("x-amzn-errortype")
                .map(str::to_owned);
            let date = response.headers().get("date").map(str::to_owned);
            let body = ByteStream::new(response.into_body())
                .collect()
                .await
                .map_err(|e| DirectError::Body(Box::new(e)))?
                .into_bytes();
            Ok(Answer {
                status,
                error_type,
                date,
                body: body.into(),
            })
        })
    }
}

impl<'a> Outgoing<'a> {
    /// A POST of `body` to `url` with `headers`.
    pub fn new(url: &'a str, headers: &'a [Header<'a>], body: &'a [u8]) -> Self {
        Self { url, headers, body }
    }
}

impl<'a> Header<'a> {
    /// A header that is not a secret.
    pub fn new(name: &'static str, value: &'a str) -> Self {
        Self {
            name,
            value,
            sensitive: false,
        }
    }

    /// A header whose value is a secret.
    pub fn secret(name: &'static str, value: &'a str) -> Self {
        Self {
            name,
            value,
            sensitive: true,
        }
    }
}
