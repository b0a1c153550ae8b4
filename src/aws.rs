//! The AWS SDK configuration, loaded once per container and shared by every client.
//!
//! Loading does no network I/O: the region comes from the environment (never instance
//! metadata), credentials resolve lazily on the first request, and the endpoint override is the
//! SDK's own `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`.

use std::time::Duration;

use aws_config::environment::region::EnvironmentVariableRegionProvider;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

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
    pub fn retry_config(&self) -> RetryConfig {
        RetryConfig::standard().with_max_attempts(self.max_attempts)
    }

    pub fn timeout_config(&self) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.attempt_timeout)
            .operation_attempt_timeout(self.attempt_timeout)
            .operation_timeout(self.operation_timeout)
            .build()
    }
}

/// Loads the SDK configuration every client of the container shares: one HTTP client, so the
/// TLS trust store is read once (each read costs milliseconds of cold start).
pub async fn load() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(EnvironmentVariableRegionProvider::new())
        .load()
        .await
}

/// A DynamoDB client on the shared configuration, with its own retry and timeout bounds.
pub fn dynamodb(sdk: &SdkConfig, settings: &SdkSettings) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(sdk)
        .retry_config(settings.retry_config())
        .timeout_config(settings.timeout_config())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// An SQS client on the shared configuration, with its own retry and timeout bounds.
pub fn sqs(sdk: &SdkConfig, settings: &SdkSettings) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::config::Builder::from(sdk)
        .retry_config(settings.retry_config())
        .timeout_config(settings.timeout_config())
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}
