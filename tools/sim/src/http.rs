//! The in-process HTTP layer the simulated AWS services share: an SDK client's HTTP client that
//! hands each request to a simulated service, with no socket (a socket under a paused clock is
//! not deterministic), and the AWS JSON protocol's answers.

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;

/// A simulated service: answers one request.
pub trait Serve: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// The answer to `request`, after whatever the service does to it.
    fn serve(&self, request: HttpRequest) -> HttpConnectorFuture;
}

#[derive(Debug, Clone)]
struct InProcess<S>(S);

impl<S: Serve> HttpClient for InProcess<S> {
    fn http_connector(
        &self,
        _settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

impl<S: Serve> HttpConnector for InProcess<S> {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        self.0.serve(request)
    }
}

/// A connector over `service`, for a client that sends its own requests (the store's).
pub fn connector(service: impl Serve) -> SharedHttpConnector {
    SharedHttpConnector::new(InProcess(service))
}

/// An SDK HTTP client over `service`.
pub fn client(service: impl Serve) -> SharedHttpClient {
    SharedHttpClient::new(InProcess(service))
}

/// The operation an AWS JSON request names (`X-Amz-Target: Service.Operation`).
pub fn operation(request: &HttpRequest) -> String {
    request
        .headers()
        .get("x-amz-target")
        .unwrap_or_default()
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// An AWS JSON 1.0 answer.
pub fn answer(status: u16, json: &str) -> HttpResponse {
    let mut response = HttpResponse::new(
        status
            .try_into()
            .unwrap_or_else(|_| 500u16.try_into().expect("500")),
        SdkBody::from(json.to_owned()),
    );
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}
