//! Claim check: a payload too large for an SQS message (256 KiB) travels through S3, and the
//! message carries a pointer to it. A message whose `payload-pointer` attribute is `s3` has a
//! body of `{"bucket": ..., "key": ..., "size": ...}`; the function loads the object and decodes
//! it as the order.
//!
//! The S3 adapter is behind the `s3-claim-check` Cargo feature (off by default), so a build
//! without it carries no S3 client. The consumer never deletes an object: a redelivery, or a
//! redrive from the DLQ, needs it again; a lifecycle rule expires it (see `template.yaml`).

#[cfg(feature = "s3-claim-check")]
pub mod s3;

use crate::batch::Outcome;

/// The message attribute that marks a pointer, and the one kind of pointer there is.
pub const POINTER_ATTRIBUTE: &str = "payload-pointer";
pub const POINTER_S3: &str = "s3";

/// Where a payload is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pointer {
    pub bucket: String,
    pub key: String,
    /// The payload's length in bytes, as the producer wrote it.
    pub size: u64,
}

/// Why a pointed-at payload could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("payload-pointer {0:?} is not a kind this function reads (only \"s3\")")]
    UnknownKind(String),
    #[error("the pointer body is not {{\"bucket\", \"key\", \"size\"}}: {0}")]
    BadPointer(#[source] serde_json::Error),
    #[error(
        "claim check is not enabled (build with the s3-claim-check feature and set CLAIM_CHECK_BUCKET)"
    )]
    Disabled,
    #[error("the pointer names bucket {0:?}, not the configured claim-check bucket")]
    WrongBucket(String),
    #[error("the payload is {size} bytes, above the {limit}-byte limit")]
    TooLarge { size: u64, limit: u64 },
    #[error("the object does not exist")]
    Missing,
    #[error("the object is {actual} bytes, the pointer says {expected}")]
    SizeMismatch { expected: u64, actual: u64 },
    #[error("the payload is not UTF-8 text")]
    NotText,
    #[error("the payload store failed")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl LoadError {
    /// Only a failure of the store itself may pass; everything else is in the message or the
    /// object and will never change.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Unavailable(_) => Outcome::Retry,
            _ => Outcome::Poison,
        }
    }

    /// A short, stable code for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Unavailable(_) => "payload_unavailable",
            Self::Missing => "payload_missing",
            _ => "payload_invalid",
        }
    }
}

/// A store of payloads.
pub trait PayloadStore: Send + Sync {
    fn load(&self, pointer: &Pointer) -> impl Future<Output = Result<String, LoadError>> + Send;
}

/// The payload store this build runs with.
#[derive(Debug, Default)]
pub enum AnyPayloads {
    /// No claim check: a pointer message is POISON (it reaches the DLQ, to be redriven once
    /// claim check is on).
    #[default]
    Disabled,
    #[cfg(feature = "s3-claim-check")]
    S3(s3::S3Payloads),
}

impl PayloadStore for AnyPayloads {
    async fn load(&self, pointer: &Pointer) -> Result<String, LoadError> {
        match self {
            Self::Disabled => {
                let _ = pointer;
                Err(LoadError::Disabled)
            }
            // Boxed for the same reason as the store's network adapter: a small record future.
            #[cfg(feature = "s3-claim-check")]
            Self::S3(s3) => Box::pin(s3.load(pointer)).await,
        }
    }
}

/// Loads the payload a pointer message names: `kind` is its `payload-pointer` attribute and
/// `body` the pointer.
pub async fn resolve<P: PayloadStore>(
    payloads: &P,
    kind: &str,
    body: &str,
) -> Result<String, LoadError> {
    if kind != POINTER_S3 {
        return Err(LoadError::UnknownKind(kind.chars().take(32).collect()));
    }
    let pointer: Pointer = serde_json::from_str(body).map_err(LoadError::BadPointer)?;
    payloads.load(&pointer).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pointers_are_checked_before_any_load() {
        let disabled = AnyPayloads::Disabled;
        let good = r#"{"bucket":"b","key":"k","size":3}"#;
        let cases = [
            ("sqs", good, "payload_invalid"),
            ("s3", "{}", "payload_invalid"),
            (
                "s3",
                r#"{"bucket":"b","key":"k","size":3,"extra":1}"#,
                "payload_invalid",
            ),
            ("s3", good, "payload_invalid"),
        ];
        for (kind, body, reason) in cases {
            let error = resolve(&disabled, kind, body).await.expect_err("refused");
            assert_eq!(
                (error.outcome(), error.reason()),
                (Outcome::Poison, reason),
                "{kind} {body}"
            );
        }
        assert!(matches!(
            resolve(&disabled, "s3", good).await,
            Err(LoadError::Disabled)
        ));
    }

    #[test]
    fn only_a_store_failure_is_retried() {
        let unavailable = LoadError::Unavailable("timeout".into());
        assert_eq!(unavailable.outcome(), Outcome::Retry);
        for poison in [
            LoadError::Missing,
            LoadError::TooLarge { size: 2, limit: 1 },
            LoadError::SizeMismatch {
                expected: 1,
                actual: 2,
            },
            LoadError::WrongBucket("x".into()),
            LoadError::NotText,
        ] {
            assert_eq!(poison.outcome(), Outcome::Poison, "{poison}");
        }
    }
}
