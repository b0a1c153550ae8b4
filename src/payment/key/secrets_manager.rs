//! The payment API key from AWS Secrets Manager (`GetSecretValue` on `PAYMENT_API_KEY_SECRET`).
//!
//! The client is built on the first read, on the container's shared SDK configuration: a
//! container that never charges never builds it, and the cold start does not pay for it.

use std::sync::OnceLock;

use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_secretsmanager::operation::get_secret_value::GetSecretValueError;

use super::{FetchFuture, Fetched, KeyError, KeySource, parse_secret_value};
use crate::aws::SdkSettings;

/// The read is rare (once per container, once per rotation) and a record waits for it: short
/// bounds, and one retry for a throttled or failed attempt.
pub const SECRETS_SDK: SdkSettings = SdkSettings {
    max_attempts: 2,
    attempt_timeout: std::time::Duration::from_millis(1_000),
    operation_timeout: std::time::Duration::from_millis(2_000),
};

/// A secret in Secrets Manager holding the payment API key.
pub struct SecretsManagerKey {
    sdk: aws_config::SdkConfig,
    settings: SdkSettings,
    secret_id: String,
    client: OnceLock<aws_sdk_secretsmanager::Client>,
}

impl std::fmt::Debug for SecretsManagerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretsManagerKey")
            .field("secret_id", &self.secret_id)
            .finish_non_exhaustive()
    }
}

impl SecretsManagerKey {
    /// Reads `secret_id` (an ARN or a name) with a client built on `sdk` at the first read.
    pub fn new(sdk: aws_config::SdkConfig, secret_id: impl Into<String>) -> Self {
        Self::with_settings(sdk, secret_id, SECRETS_SDK)
    }

    /// As [`SecretsManagerKey::new`], with other bounds (tests against a loaded local server).
    pub fn with_settings(
        sdk: aws_config::SdkConfig,
        secret_id: impl Into<String>,
        settings: SdkSettings,
    ) -> Self {
        Self {
            sdk,
            settings,
            secret_id: secret_id.into(),
            client: OnceLock::new(),
        }
    }

    fn client(&self) -> &aws_sdk_secretsmanager::Client {
        self.client.get_or_init(|| {
            let config = aws_sdk_secretsmanager::config::Builder::from(&self.sdk)
                .retry_config(self.settings.retry_config())
                .timeout_config(self.settings.timeout_config())
                .build();
            aws_sdk_secretsmanager::Client::from_conf(config)
        })
    }
}

impl KeySource for SecretsManagerKey {
    fn fetch(&self) -> FetchFuture<'_> {
        Box::pin(async move {
            let output = self
                .client()
                .get_secret_value()
                .secret_id(&self.secret_id)
                .send()
                .await
                .map_err(read_error)?;
            let value = match (output.secret_string(), output.secret_binary()) {
                (Some(text), _) => parse_secret_value(text)?,
                (None, Some(_)) => return Err(KeyError::Malformed("a binary secret")),
                (None, None) => return Err(KeyError::Malformed("no value")),
            };
            Ok(Fetched {
                value,
                version: output.version_id().map(str::to_owned),
            })
        })
    }

    fn name(&self) -> &str {
        &self.secret_id
    }
}

/// Whether a failed read may succeed if tried again later (throttling, a server error, a timeout,
/// the network), or needs a change of the deployment or the secret (access denied, no such
/// secret, a secret scheduled for deletion, a KMS key the role cannot use).
fn read_error(error: SdkError<GetSecretValueError>) -> KeyError {
    let (transient, reason) = match &error {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let code = service.err().code().unwrap_or("unknown");
            let transient = status >= 500
                || status == 429
                || matches!(
                    code,
                    "ThrottlingException"
                        | "Throttling"
                        | "TooManyRequestsException"
                        | "RequestLimitExceeded"
                        | "InternalServiceError"
                );
            // The service's message names the secret and the denied action, never the value.
            let message = service.err().message().unwrap_or("");
            (transient, format!("{code} (HTTP {status}) {message}"))
        }
        // The request could not be built (no region, no credentials provider): the deployment.
        SdkError::ConstructionFailure(_) => (false, "the request could not be built".to_owned()),
        SdkError::TimeoutError(_) => (true, "timed out".to_owned()),
        _ => (true, "Secrets Manager did not answer".to_owned()),
    };
    let reason = reason.trim().to_owned();
    let source: Option<Box<dyn std::error::Error + Send + Sync>> = Some(Box::new(error));
    if transient {
        KeyError::Unavailable { reason, source }
    } else {
        KeyError::Refused { reason, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_secretsmanager::error::ErrorMetadata;
    use aws_smithy_runtime_api::http::{Response, StatusCode};
    use aws_smithy_types::body::SdkBody;

    fn service_error(status: u16, code: &str) -> SdkError<GetSecretValueError> {
        let error = GetSecretValueError::generic(
            ErrorMetadata::builder()
                .code(code)
                .message("about arn:aws:secretsmanager:eu-west-1:1:secret:pay")
                .build(),
        );
        let raw = Response::new(
            StatusCode::try_from(status).expect("status"),
            SdkBody::empty(),
        );
        SdkError::service_error(error, raw)
    }

    /// moto answers neither access denied nor throttling, so the reading of each is checked
    /// here, on the errors the SDK builds from Secrets Manager's answers.
    #[test]
    fn a_refusal_is_configuration_and_throttling_or_a_timeout_is_transient() {
        let refused = |e| matches!(read_error(e), KeyError::Refused { .. });
        for code in [
            "AccessDeniedException",
            "ResourceNotFoundException",
            "DecryptionFailure",
            "InvalidRequestException",
            "UnrecognizedClientException",
        ] {
            assert!(refused(service_error(400, code)), "{code}");
        }
        for (status, code) in [
            (400, "ThrottlingException"),
            (429, "TooManyRequestsException"),
            (500, "InternalServiceError"),
            (503, "ServiceUnavailable"),
        ] {
            assert!(!refused(service_error(status, code)), "{code}");
        }
        assert!(!refused(SdkError::timeout_error("slow")));
        let message = read_error(service_error(400, "AccessDeniedException")).to_string();
        assert!(
            message.contains("AccessDeniedException (HTTP 400)"),
            "{message}"
        );
    }
}
