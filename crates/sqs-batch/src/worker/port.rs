//! What a worker needs of its queue ([`QueuePort`]; `sqs.rs` is SQS's) and the hooks its
//! owner may add ([`WorkerHooks`]).

use std::future::Future;

use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;

use crate::batch::Processed;
use crate::edge::Batch;

/// A queue failure, after the client's own retries.
#[derive(Debug, thiserror::Error)]
#[error("{action} failed")]
pub struct QueueError {
    /// The SQS action.
    pub action: &'static str,
    /// Why.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// A delete of one received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delete<'a> {
    /// The message id (the entry's id, and the log's).
    pub message_id: &'a str,
    /// The receive's handle.
    pub receipt_handle: &'a str,
}

/// The queue a worker consumes: receive, delete, and its depth.
pub trait QueuePort: Send + Sync {
    /// The queue's ARN (its kind, the DLQ moves, the visibility changes go by it).
    fn arn(&self) -> &str;

    /// Up to `max` messages, waiting up to `wait_s` for the first, with every attribute, each
    /// invisible for `visibility_s` from the receive (`ReceiveMessage`'s `VisibilityTimeout`,
    /// at most 12 hours) whatever the queue's own visibility timeout.
    fn receive(
        &self,
        max: u8,
        wait_s: u8,
        visibility_s: u32,
    ) -> impl Future<Output = Result<Vec<SqsMessage>, QueueError>> + Send;

    /// Deletes up to ten messages; returns the message ids of the entries SQS did not delete.
    fn delete(
        &self,
        entries: &[Delete<'_>],
    ) -> impl Future<Output = Result<Vec<String>, QueueError>> + Send;

    /// `ApproximateNumberOfMessages`: visible, waiting to be received.
    fn visible_messages(&self) -> impl Future<Output = Result<u64, QueueError>> + Send;
}

/// What the owner of a worker hears from it: each batch before its records run and once it is
/// settled, and each metrics document. Every method has a default.
pub trait WorkerHooks<H>: Send + Sync {
    /// A batch is about to run on `handler`: for what the owner starts over per batch, as a
    /// Lambda function does per invocation. Nothing by default.
    fn batch_starting(&self, handler: &H, batch: &Batch<'_>) {
        let _ = (handler, batch);
    }

    /// A batch was settled (its records run, POISON moved, the backoff set) `elapsed` after its
    /// receive, before its deletes: for the owner's own metrics. Nothing by default.
    fn batch_settled(
        &self,
        handler: &H,
        batch: &Batch<'_>,
        processed: &Processed,
        elapsed: Duration,
    ) {
        let _ = (handler, batch, processed, elapsed);
    }

    /// Writes one metrics document (the backlog's): by default one line on stdout, where
    /// CloudWatch Logs' embedded metric format finds it.
    fn write_metrics(&self, document: &str) {
        println!("{document}");
    }
}

/// No hooks: the defaults.
impl<H> WorkerHooks<H> for () {}

/// The hooks of a handler, given a handler wrapped around it ([`Worker::map_handler`]).
pub(super) struct Mapped<H, H2> {
    pub(super) hooks: Box<dyn WorkerHooks<H>>,
    pub(super) inner: fn(&H2) -> &H,
}

impl<H, H2> WorkerHooks<H2> for Mapped<H, H2> {
    fn batch_starting(&self, handler: &H2, batch: &Batch<'_>) {
        self.hooks.batch_starting((self.inner)(handler), batch);
    }

    fn batch_settled(
        &self,
        handler: &H2,
        batch: &Batch<'_>,
        processed: &Processed,
        elapsed: Duration,
    ) {
        self.hooks
            .batch_settled((self.inner)(handler), batch, processed, elapsed);
    }

    fn write_metrics(&self, document: &str) {
        self.hooks.write_metrics(document);
    }
}
