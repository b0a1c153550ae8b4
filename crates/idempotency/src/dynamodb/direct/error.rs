//! The direct client's errors: building it, and one request.

use std::time::Duration;

use aws_smithy_runtime_api::client::result::ConnectorError;

/// Why a direct client could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirectClientError {
    /// The SDK configuration names no region.
    #[error("the DynamoDB configuration has no region")]
    NoRegion,
    /// The SDK configuration has no credentials provider.
    #[error("the DynamoDB configuration has no credentials provider")]
    NoCredentials,
    /// The SDK configuration has no sleep and no runtime gives one (timeouts and backoff need
    /// it).
    #[error("the DynamoDB configuration has no async sleep")]
    NoSleep,
}

/// Why a request failed for good (after its retries): the store reads each as unavailable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirectError {
    /// The endpoint could not be resolved from the region and the override.
    #[error("no DynamoDB endpoint: {0}")]
    Endpoint(String),
    /// Credentials could not be loaded.
    #[error("no credentials for DynamoDB")]
    Credentials(#[source] aws_credential_types::provider::error::CredentialsError),
    /// The request could not be signed.
    #[error("signing the DynamoDB request failed")]
    Signing(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The connector failed (I/O, a timeout, a reset), on the last attempt.
    #[error("DynamoDB request failed")]
    Connector(#[source] ConnectorError),
    /// An attempt outlasted the attempt timeout, on the last attempt.
    #[error("DynamoDB attempt timed out after {0:?}")]
    AttemptTimeout(Duration),
    /// The whole call outlasted the operation timeout.
    #[error("DynamoDB call timed out after {0:?}")]
    OperationTimeout(Duration),
    /// DynamoDB answered with an error other than a failed condition.
    #[error("DynamoDB answered {status}: {kind}: {message}")]
    Service {
        /// The HTTP status.
        status: u16,
        /// The error's type, without its namespace (`ThrottlingException`).
        kind: String,
        /// Its message.
        message: String,
    },
    /// The answer's body broke off (a reset while it was read): retried, since the write
    /// may or may not have been applied, as an I/O error is.
    #[error("DynamoDB's answer broke off")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// DynamoDB refused the request's signature for its time: this host's clock is
    /// `skew_ms` off the server's. The next attempt is signed by the server's time, as the SDK
    /// does.
    #[error(
        "DynamoDB refused the request's time ({kind}): this clock is {skew_ms} ms off the server's"
    )]
    ClockSkew {
        /// The error's type (`InvalidSignatureException`, `RequestTimeTooSkewed`, ...).
        kind: String,
        /// The server's time minus this host's, as learned from the answer's `Date`.
        skew_ms: i64,
    },
    /// An answer that is not the JSON DynamoDB sends.
    #[error("unreadable DynamoDB answer ({status})")]
    Unreadable {
        /// The HTTP status.
        status: u16,
        /// Why it could not be read.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
