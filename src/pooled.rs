//! The container's own HTTP/1.1 client stack: hyper's pooled client on the TLS configuration
//! of `tls`, for the two calls every order makes (the store's writes and the charge).
//!
//! reqwest wraps the same pooled client in layers these calls do not use (its URL type parsed
//! again into a `Uri` and once more by its redirect layer on every request, its own request and
//! response types, a timeout future per request): a measurable share of an order's CPU
//! (docs/performance.md, "CPU per order on the shipped path"). The rest of the container (the
//! AWS SDK's other clients, the trace exporter) keeps reqwest.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

/// hyper's pooled client over plain TCP or TLS, sending whole bodies.
pub type PooledClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A client on `tls` whose connections are opened within `connect_timeout`, kept idle for 90 s.
/// No connection is opened here.
pub fn client(tls: rustls::ClientConfig, connect_timeout: Option<Duration>) -> PooledClient {
    let mut http = HttpConnector::new();
    // hyper's connector refuses https:// unless told the TLS layer above it takes it.
    http.enforce_http(false);
    http.set_connect_timeout(connect_timeout);
    // As reqwest sets it: a request's small writes are not held back for an ACK.
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(hyper_util::rt::TokioExecutor::new())
        // Idle connections are closed after 90 s, as reqwest's are; the timer is how.
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(https)
}
