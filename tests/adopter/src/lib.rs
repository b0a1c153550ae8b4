//! A team's own SQS Lambda: a webhook posted once per event, written from the crates' READMEs.

use std::future::Future;

use idempotency::{IdempotencyStore, once};
use sqs_batch::{RecordHandler, Verdict};

/// The producer's event.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
pub struct Event {
    /// The key: one webhook per event id.
    pub event_id: String,
    /// What the webhook says.
    pub text: String,
}

/// Where the webhook goes (an HTTP call in the team's function; a counter in its tests).
pub trait Webhook: Send + Sync {
    /// Posts `event`.
    fn post(&self, event: &Event) -> impl Future<Output = Result<(), String>> + Send;
}

/// The handler: each event's webhook posted once, duplicates acknowledged.
pub fn handler<'a, S: IdempotencyStore, W: Webhook>(
    store: &'a S,
    webhook: &'a W,
) -> impl RecordHandler + 'a {
    sqs_batch::json(move |event: Event| async move {
        once(store, &event.event_id, &event, || webhook.post(&event))
            .await
            .into_verdict()
    })
}
