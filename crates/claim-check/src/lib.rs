//! # claim-check
//!
//! A payload too large for an SQS message (above its queue's `MaximumMessageSize`: 1 MiB at
//! most, and often set lower) travels through a store (S3), and the message carries a pointer
//! to it. A message whose `payload-pointer` attribute is `s3` has a
//! body of `{"bucket": ..., "key": ..., "size": ...}`; [`ClaimCheck`] wraps any
//! [`RecordHandler`], loads the object, and hands the inner handler the same message with the
//! payload as its body. Everything the inner handler decides stands; a pointer that can never be
//! loaded is POISON, a store outage RETRY.
//!
//! The S3 adapter is behind the `s3` feature, so a build without it carries no S3 client. The
//! consumer never deletes an object: a redelivery, or a redrive from the DLQ, needs it again; a
//! lifecycle rule expires it.
//!
//! ## Layout
//!
//! | item | what |
//! |---|---|
//! | [`ClaimCheck`] | the wrapper handler |
//! | [`Pointer`], [`resolve`], [`LoadError`] | the pointer and its loading |
//! | [`PayloadStore`], [`Payloads`] | the store port, and the stores of this build |
//! | `s3` | `S3Payloads` and the producer's `offload` (feature `s3`) |
//!
//! ## Example
//!
//! ```
//! use claim_check::{ClaimCheck, Payloads};
//! use sqs_batch::{Message, processor::Invocation, RecordHandler, Verdict};
//!
//! struct Echo;
//! impl RecordHandler for Echo {
//!     async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
//!         Verdict::ack("seen").with_detail(message.body.to_owned())
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! // Without a store, a plain message goes through untouched.
//! let handler = ClaimCheck::new(Echo, Payloads::Disabled);
//! let verdict = handler.handle(&Message::new("m1", "hello"), Invocation::new(0)).await;
//! assert_eq!(verdict.detail.as_deref(), Some("hello"));
//! # });
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// The README's example is a doctest too, so the crate's front page cannot drift from its API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(feature = "s3")]
pub mod s3;

use sqs_batch::{Message, RecordHandler, Verdict, processor::Decision, processor::Invocation};

/// The message attribute that marks a pointer.
pub const POINTER_ATTRIBUTE: &str = "payload-pointer";
/// The one kind of pointer there is: an S3 object.
pub const POINTER_S3: &str = "s3";
/// The key prefix producers offload payloads under; a bucket lifecycle rule on exactly this
/// prefix expires them after the queue's retention.
pub const PAYLOAD_PREFIX: &str = "payloads/";

/// Where a payload is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Pointer {
    /// The bucket.
    pub bucket: String,
    /// The object's key.
    pub key: String,
    /// The payload's length in bytes, as the producer wrote it.
    pub size: u64,
}

impl Pointer {
    /// The object `key` in `bucket`, of `size` bytes.
    pub fn new(bucket: String, key: String, size: u64) -> Self {
        Self { bucket, key, size }
    }
}

/// Why a pointed-at payload could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The attribute names a kind of pointer this build does not read.
    #[error("payload-pointer {0:?} is not a kind this function reads (only \"s3\")")]
    UnknownKind(String),
    /// The body is not a pointer.
    #[error("the pointer body is not {{\"bucket\", \"key\", \"size\"}}: {0}")]
    BadPointer(#[source] serde_json::Error),
    /// No payload store in this build or configuration.
    #[error(
        "claim check is not enabled (build with the s3-claim-check feature and set CLAIM_CHECK_BUCKET)"
    )]
    Disabled,
    /// The pointer names another bucket than the one configured.
    #[error("the pointer names bucket {0:?}, not the configured claim-check bucket")]
    WrongBucket(String),
    /// The payload is larger than the configured limit (checked before any download).
    #[error("the payload is {size} bytes, above the {limit}-byte limit")]
    TooLarge {
        /// The pointer's size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The object does not exist.
    #[error("the object does not exist")]
    Missing,
    /// The object's size is not the pointer's.
    #[error("the object is {actual} bytes, the pointer says {expected}")]
    SizeMismatch {
        /// The pointer's size.
        expected: u64,
        /// The object's.
        actual: u64,
    },
    /// The payload is not UTF-8.
    #[error("the payload is not UTF-8 text")]
    NotText,
    /// The store could not be reached or refused (retried).
    #[error("the payload store failed")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl LoadError {
    /// Only a failure of the store itself may pass; everything else is in the message or the
    /// object and will never change.
    pub fn outcome(&self) -> Decision {
        match self {
            Self::Unavailable(_) => Decision::Retry,
            _ => Decision::Poison,
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

/// The variables this crate reads, with their defaults: [`ClaimCheckSettings::from_env`].
pub const VARIABLES: &[(&str, Option<&str>)] = &[
    ("CLAIM_CHECK_BUCKET", None),
    ("CLAIM_CHECK_MAX_BYTES", Some("10485760")),
];

/// Where claim-check payloads live and how large one may be.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimCheckSettings {
    /// `CLAIM_CHECK_BUCKET`: the one bucket pointers may name.
    pub bucket: String,
    /// `CLAIM_CHECK_MAX_BYTES` (10 MiB): a larger payload is POISON, without a download.
    pub max_bytes: u64,
}

impl ClaimCheckSettings {
    /// Payloads in `bucket`, at most `max_bytes` each.
    pub fn new(bucket: String, max_bytes: u64) -> Self {
        Self { bucket, max_bytes }
    }

    /// `None` when `CLAIM_CHECK_BUCKET` is unset: the claim check is off.
    pub fn from_env(env: &lambda_kit::Env<'_>) -> Result<Option<Self>, lambda_kit::EnvError> {
        let Some(bucket) = env.text("CLAIM_CHECK_BUCKET") else {
            return Ok(None);
        };
        let max_bytes = env.ranged(
            "CLAIM_CHECK_MAX_BYTES",
            10 * 1024 * 1024,
            1,
            1024 * 1024 * 1024,
        )?;
        Ok(Some(Self { bucket, max_bytes }))
    }
}

/// A store of payloads.
pub trait PayloadStore: Send + Sync {
    /// The payload a pointer names.
    fn load(&self, pointer: &Pointer) -> impl Future<Output = Result<String, LoadError>> + Send;
}

/// The payload store this build runs with.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum Payloads {
    /// No claim check: a pointer message is POISON (it reaches the DLQ, to be redriven once
    /// claim check is on).
    #[default]
    Disabled,
    /// Payloads in S3.
    #[cfg(feature = "s3")]
    S3(s3::S3Payloads),
}

impl PayloadStore for Payloads {
    async fn load(&self, pointer: &Pointer) -> Result<String, LoadError> {
        match self {
            Self::Disabled => {
                let _ = pointer;
                Err(LoadError::Disabled)
            }
            // Boxed for the same reason as the store's network adapter: a small record future.
            #[cfg(feature = "s3")]
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

/// Wraps a handler: a pointer message's payload is loaded and handed to `inner` as the body.
#[derive(Debug)]
pub struct ClaimCheck<H, P> {
    inner: H,
    payloads: P,
}

impl<H, P> ClaimCheck<H, P> {
    /// `inner`, with payloads loaded from `payloads`.
    pub fn new(inner: H, payloads: P) -> Self {
        Self { inner, payloads }
    }

    /// The wrapped handler.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// The payload store.
    pub fn payloads(&self) -> &P {
        &self.payloads
    }

    /// The payload store, to replace it after building.
    pub fn payloads_mut(&mut self) -> &mut P {
        &mut self.payloads
    }
}

impl<H: RecordHandler, P: PayloadStore> RecordHandler for ClaimCheck<H, P> {
    async fn handle(&self, message: &Message<'_>, context: Invocation) -> Verdict {
        match message.attributes.string(POINTER_ATTRIBUTE) {
            None => self.inner.handle(message, context).await,
            // Boxed: every record's future is as large as its largest state, and this one holds
            // the loaded payload and a second message beside the inner future. Pointers are
            // rare and wait on S3 anyway; the common path should not pay for them.
            Some(kind) => Box::pin(self.load_then_handle(kind, message, context)).await,
        }
    }

    /// The inner handler's span; a pointer's body names nothing the inner handler can read.
    fn record_span(&self, message: &Message<'_>) -> tracing::Span {
        self.inner.record_span(message)
    }

    fn record_key(&self, message: &Message<'_>) -> Option<String> {
        self.inner.record_key(message)
    }
}

impl<H: RecordHandler, P: PayloadStore> ClaimCheck<H, P> {
    async fn load_then_handle(
        &self,
        kind: std::borrow::Cow<'_, str>,
        message: &Message<'_>,
        context: Invocation,
    ) -> Verdict {
        match resolve(&self.payloads, &kind, message.body).await {
            Ok(payload) => {
                let loaded = message.with_body(&payload);
                self.inner.handle(&loaded, context).await
            }
            Err(e) => {
                let verdict = match e.outcome() {
                    Decision::Retry => Verdict::retry(e.reason()),
                    _ => Verdict::poison(e.reason()),
                };
                verdict.with_detail(lambda_kit::error_chain(&e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pointers_are_checked_before_any_load() {
        let disabled = Payloads::Disabled;
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
                (Decision::Poison, reason),
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
        assert_eq!(unavailable.outcome(), Decision::Retry);
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
            assert_eq!(poison.outcome(), Decision::Poison, "{poison}");
        }
    }
}
