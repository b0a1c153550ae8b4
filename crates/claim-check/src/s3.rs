//! The S3 adapter of the claim check (feature `s3`), and the producer side that offloads a large
//! body.

use aws_sdk_s3::Client;
use aws_sdk_s3::operation::get_object::GetObjectError;
use aws_sdk_s3::primitives::ByteStream;

use super::{LoadError, PayloadStore, Pointer};

/// Payloads in one bucket, loaded up to a size limit.
#[derive(Debug, Clone)]
pub struct S3Payloads {
    client: Client,
    bucket: String,
    max_bytes: u64,
}

impl S3Payloads {
    /// Payloads in `bucket`, each at most `max_bytes`.
    pub fn new(client: Client, bucket: impl Into<String>, max_bytes: u64) -> Self {
        Self {
            client,
            bucket: bucket.into(),
            max_bytes,
        }
    }
}

impl PayloadStore for S3Payloads {
    async fn load(&self, pointer: &Pointer) -> Result<String, LoadError> {
        // The function may read only its own bucket: another one is a producer bug, not an
        // outage, and an AccessDenied there would be retried until the DLQ.
        if pointer.bucket != self.bucket {
            return Err(LoadError::WrongBucket(pointer.bucket.clone()));
        }
        if pointer.size > self.max_bytes {
            return Err(LoadError::TooLarge {
                size: pointer.size,
                limit: self.max_bytes,
            });
        }
        let object = self
            .client
            .get_object()
            .bucket(&pointer.bucket)
            .key(&pointer.key)
            .send()
            .await
            .map_err(|e| match e.as_service_error() {
                Some(GetObjectError::NoSuchKey(_)) => LoadError::Missing,
                _ => LoadError::Unavailable(Box::new(e)),
            })?;
        let declared = object.content_length().and_then(|n| u64::try_from(n).ok());
        if let Some(actual) = declared
            && actual != pointer.size
        {
            return Err(LoadError::SizeMismatch {
                expected: pointer.size,
                actual,
            });
        }
        let bytes = object
            .body
            .collect()
            .await
            .map_err(|e| LoadError::Unavailable(Box::new(e)))?
            .into_bytes();
        let actual = bytes.len() as u64;
        if actual != pointer.size {
            return Err(LoadError::SizeMismatch {
                expected: pointer.size,
                actual,
            });
        }
        String::from_utf8(bytes.to_vec()).map_err(|_| LoadError::NotText)
    }
}

/// The producer side: writes `body` under `prefix` in `bucket` and returns the pointer to send
/// instead (with the `payload-pointer` attribute set to `s3`).
pub async fn offload(
    client: &Client,
    bucket: &str,
    prefix: &str,
    body: &str,
) -> Result<Pointer, aws_sdk_s3::Error> {
    let key = format!("{prefix}{}", uuid::Uuid::new_v4());
    client
        .put_object()
        .bucket(bucket)
        .key(&key)
        .content_type("application/json")
        .body(ByteStream::from(body.as_bytes().to_vec()))
        .send()
        .await?;
    Ok(Pointer {
        bucket: bucket.to_owned(),
        key,
        size: body.len() as u64,
    })
}
