//! A record handler from a closure over typed bodies: [`json`] decodes each body on its own into
//! the closure's argument type (`serde::Deserialize`), so a body that does not decode is POISON
//! for that record only and the closure never sees it.
//!
//! The closure gets the body and a [`Record`] (owned, so the closure's future may keep it across
//! awaits) and returns a [`Verdict`]:
//!
//! ```
//! use sqs_batch::{BatchOptions, BatchProcessor, Record, Verdict};
//! use sqs_batch::lambda_kit::SystemClock;
//!
//! #[derive(serde::Deserialize)]
//! struct Welcome { user_id: String }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let handler = sqs_batch::json(|welcome: Welcome, _record: Record| async move {
//!     Verdict::ack("sent").with_key(welcome.user_id)
//! });
//! let processor = BatchProcessor::new(handler, SystemClock, BatchOptions::default());
//! let event = r#"{"Records": [
//!     {"messageId": "m1", "body": "{\"user_id\": \"u-1\"}"},
//!     {"messageId": "m2", "body": "{\"user\": 1}"}
//! ]}"#;
//! let deadline_ms = sqs_batch::lambda_kit::Clock::now_ms(&SystemClock) + 60_000;
//! let processed = sqs_batch::process_event(&processor, event, deadline_ms).await.unwrap();
//! assert_eq!(processed.report.reasons(), [("sent", 1), ("invalid_body", 1)]);
//! # });
//! ```

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::edge::Message;
use crate::processor::{Invocation, RecordHandler, Verdict};

/// What a typed handler knows of its record besides the body.
///
/// Owned, so the handler's future can hold it across awaits. Fields may be added.
///
/// # Example
///
/// ```
/// use sqs_batch::{Message, Record, processor::Invocation};
///
/// let message = Message::new("m-1", "{}").with_receive_count(Some(3));
/// let record = Record::new(&message, Invocation::new(1_767_225_600_000));
/// assert_eq!((record.message_id.as_str(), record.receive_count), ("m-1", Some(3)));
/// assert_eq!(record.earlier_attempt_ms, None, "never in a DLQ");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The SQS message id.
    pub message_id: String,
    /// The invocation's deadline, epoch ms: work that outlives it is abandoned.
    pub deadline_ms: u64,
    /// `ApproximateReceiveCount`, when SQS sent it.
    pub receive_count: Option<u32>,
    /// When an attempt at this message's work may already have been made, as the message itself
    /// says: a copy moved to the DLQ by this crate ([`crate::dead_letter`]) and redriven carries its
    /// first failure's time. `None` for most messages.
    pub earlier_attempt_ms: Option<u64>,
    /// The Lambda request id of the invocation, under Lambda (for logs that Powertools users
    /// expect to carry it).
    pub request_id: Option<Arc<str>>,
    /// The ARN the function was invoked by (with its alias or version), under Lambda.
    pub function_arn: Option<Arc<str>>,
}

impl Record {
    /// The record of `message`, processed with `context` (its invocation's deadline, request id
    /// and function ARN).
    pub fn new(message: &Message<'_>, context: Invocation) -> Self {
        Self {
            message_id: message.message_id.to_owned(),
            deadline_ms: context.deadline_ms,
            receive_count: message.receive_count,
            earlier_attempt_ms: crate::failure::earlier_attempt_ms(message),
            request_id: context.request_id,
            function_arn: context.function_arn,
        }
    }
}

/// A [`RecordHandler`] that decodes each body as JSON into `T` and hands it to `handler`: a
/// closure of the body alone (`|welcome: Welcome| ...`), or of the body and its [`Record`]
/// (`|welcome: Welcome, record: Record| ...`).
///
/// A body that is not JSON, or not a `T`, is POISON with the reason `invalid_body`, and a detail
/// naming the kind of error and where (never the body's text: it may hold personal data).
///
/// # Example
///
/// ```
/// use sqs_batch::{Message, Record, RecordHandler, Verdict, processor::Invocation};
///
/// #[derive(serde::Deserialize)]
/// struct Welcome { user_id: String }
///
/// let handler = sqs_batch::json(|welcome: Welcome, record: Record| async move {
///     if welcome.user_id.is_empty() || record.receive_count > Some(5) {
///         return Verdict::poison("unwelcome");
///     }
///     Verdict::ack("welcomed")
/// });
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let ok = handler.handle(&Message::new("m-1", r#"{"user_id": "u-1"}"#), Invocation::new(0)).await;
/// assert_eq!(ok.reason, "welcomed");
/// let bad = handler.handle(&Message::new("m-2", r#"{"name": "x"}"#), Invocation::new(0)).await;
/// assert_eq!(bad.reason, "invalid_body");
/// # });
/// ```
pub fn json<T, A, F>(handler: F) -> Json<T, F, A>
where
    T: DeserializeOwned + Send,
    F: BodyHandler<T, A>,
{
    Json {
        handler,
        body: PhantomData,
    }
}

/// A closure [`json`] takes: `Fn(T) -> impl Future<Output = Verdict>` or
/// `Fn(T, Record) -> impl Future<Output = Verdict>`. `A` tells the two apart (`(T,)` and
/// `(T, Record)`); it is inferred from the closure, never written.
pub trait BodyHandler<T, A>: Send + Sync {
    /// What the closure returns.
    type Future: Future<Output = Verdict> + Send;

    /// Calls the closure with `body`, and the record when it takes one.
    fn call(&self, body: T, message: &Message<'_>, context: Invocation) -> Self::Future;
}

impl<T, F, Fut> BodyHandler<T, (T,)> for F
where
    F: Fn(T) -> Fut + Send + Sync,
    Fut: Future<Output = Verdict> + Send,
{
    type Future = Fut;

    fn call(&self, body: T, _message: &Message<'_>, _context: Invocation) -> Fut {
        self(body)
    }
}

impl<T, F, Fut> BodyHandler<T, (T, Record)> for F
where
    F: Fn(T, Record) -> Fut + Send + Sync,
    Fut: Future<Output = Verdict> + Send,
{
    type Future = Fut;

    fn call(&self, body: T, message: &Message<'_>, context: Invocation) -> Fut {
        self(body, Record::new(message, context))
    }
}

/// The handler [`json`] builds.
pub struct Json<T, F, A = (T, Record)> {
    handler: F,
    // `fn() -> (T, A)`: the handler makes `T`s, it holds none (so `Json` is Send and Sync
    // whatever `T` is).
    body: PhantomData<fn() -> (T, A)>,
}

impl<T, F, A> std::fmt::Debug for Json<T, F, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Json")
            .field("body", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}

impl<T, F, A> RecordHandler for Json<T, F, A>
where
    T: DeserializeOwned + Send,
    F: BodyHandler<T, A>,
{
    async fn handle(&self, message: &Message<'_>, context: Invocation) -> Verdict {
        match serde_json::from_str::<T>(message.body) {
            Ok(body) => self.handler.call(body, message, context).await,
            Err(error) => Verdict::poison("invalid_body").with_detail(why_not(&error)),
        }
    }
}

/// Why a body did not decode, without quoting it: serde's own message can repeat a value from
/// the body ("invalid type: string \"...\""), so only the kind of error and its place are kept.
fn why_not(error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match error.classify() {
        Category::Syntax | Category::Eof | Category::Io => "not JSON",
        Category::Data => "JSON, but not of the expected shape",
    };
    format!(
        "the body is {what} (line {}, column {})",
        error.line(),
        error.column()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::Decision;

    #[derive(Debug, serde::Deserialize)]
    struct Welcome {
        user_id: String,
    }

    fn handler() -> impl RecordHandler {
        json(|welcome: Welcome, record: Record| async move {
            Verdict::ack("sent")
                .with_key(welcome.user_id)
                .with_detail(format!("{} {}", record.message_id, record.deadline_ms))
        })
    }

    #[tokio::test]
    async fn a_body_of_the_type_reaches_the_handler_with_its_record() {
        let verdict = handler()
            .handle(
                &Message::new("m-1", r#"{"user_id":"u-1","extra":true}"#),
                Invocation::new(42),
            )
            .await;
        assert_eq!(verdict.outcome, Decision::Ack);
        assert_eq!(verdict.key.as_deref(), Some("u-1"));
        assert_eq!(verdict.detail.as_deref(), Some("m-1 42"));
    }

    #[tokio::test]
    async fn a_body_not_of_the_type_is_poison_and_its_text_is_not_logged() {
        for (body, kind) in [
            ("not json", "not JSON"),
            (r#"{"user_id":"#, "not JSON"),
            (r#"{"user_id":"secret@example.com"#, "not JSON"),
            (r#"{"user_id":7}"#, "JSON, but not of the expected shape"),
            (
                r#"{"email":"secret@example.com"}"#,
                "JSON, but not of the expected shape",
            ),
        ] {
            let verdict = handler()
                .handle(&Message::new("m-1", body), Invocation::new(0))
                .await;
            assert_eq!(verdict.outcome, Decision::Poison, "{body}");
            assert_eq!(verdict.reason, "invalid_body");
            let detail = verdict.detail.unwrap_or_default();
            assert!(
                detail.starts_with(&format!("the body is {kind} (line 1")),
                "{detail}"
            );
            assert!(!detail.contains("secret"), "{detail}");
        }
    }

    /// A closure of the body alone is a handler too: the record is not built for it.
    #[tokio::test]
    async fn a_closure_of_the_body_alone_is_a_handler() {
        let handler =
            json(|welcome: Welcome| async move { Verdict::ack("sent").with_key(welcome.user_id) });
        let verdict = handler
            .handle(
                &Message::new("m-1", r#"{"user_id":"u-2"}"#),
                Invocation::new(42),
            )
            .await;
        assert_eq!(
            (verdict.outcome, verdict.key.as_deref()),
            (Decision::Ack, Some("u-2"))
        );
        let verdict = handler
            .handle(&Message::new("m-2", "[]"), Invocation::new(42))
            .await;
        assert_eq!(verdict.reason, "invalid_body");
    }

    #[test]
    fn a_record_carries_the_messages_receive_count_and_its_invocation() {
        let mut message = Message::new("m-9", "{}");
        message.receive_count = Some(3);
        let invocation = crate::processor::Invocation::new(1_000).with_lambda(
            "req-1",
            "arn:aws:lambda:eu-west-1:123456789012:function:f:live",
        );
        let record = Record::new(&message, invocation.clone());
        assert_eq!(
            record,
            Record {
                message_id: "m-9".to_owned(),
                deadline_ms: 1_000,
                receive_count: Some(3),
                earlier_attempt_ms: None,
                request_id: Some("req-1".into()),
                function_arn: Some("arn:aws:lambda:eu-west-1:123456789012:function:f:live".into()),
            }
        );
    }
}
