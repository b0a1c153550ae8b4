//! The SQS adapter of the visibility port: `ChangeMessageVisibilityBatch`, client built once per
//! container, and only when the backoff is on.

use std::sync::{Arc, OnceLock};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;

use super::{Change, ChangeFailure, VisibilityPort};

/// The SQS action this adapter calls; IAM grants it on the source queues.
pub const ACTIONS: &[&str] = &["sqs:ChangeMessageVisibility"];

/// The visibility port over SQS. Cheap to clone; the client is shared.
#[derive(Clone)]
pub struct SqsVisibility(Arc<Source>);

type Build = Box<dyn Fn() -> Client + Send + Sync>;

enum Source {
    Built(Client),
    /// Built by `build` when first needed.
    OnFirstUse {
        build: Build,
        client: OnceLock<Client>,
    },
}

impl std::fmt::Debug for SqsVisibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let built = match &*self.0 {
            Source::Built(_) => true,
            Source::OnFirstUse { client, .. } => client.get().is_some(),
        };
        f.debug_struct("SqsVisibility")
            .field("client_built", &built)
            .finish()
    }
}

impl SqsVisibility {
    /// Over `client`.
    pub fn new(client: Client) -> Self {
        Self(Arc::new(Source::Built(client)))
    }

    /// The client is built by `build` at the first visibility change, not at start-up: only an
    /// invocation that reports records needs it, and building an SDK client costs a cold start
    /// about 0.2 ms (its endpoint rules' partition table is parsed then).
    pub fn on_first_use(build: impl Fn() -> Client + Send + Sync + 'static) -> Self {
        Self(Arc::new(Source::OnFirstUse {
            build: Box::new(build),
            client: OnceLock::new(),
        }))
    }

    fn client(&self) -> &Client {
        match &*self.0 {
            Source::Built(client) => client,
            Source::OnFirstUse { build, client } => client.get_or_init(build),
        }
    }
}

impl VisibilityPort for SqsVisibility {
    async fn change(&self, queue_url: &str, changes: &[Change<'_>]) -> Vec<ChangeFailure> {
        let entries: Vec<_> = changes
            .iter()
            .enumerate()
            .filter_map(|(index, change)| {
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    // The entry id only has to be unique in the call; a message id may not be.
                    .id(index.to_string())
                    .receipt_handle(change.receipt_handle)
                    .visibility_timeout(i32::try_from(change.seconds).unwrap_or(i32::MAX))
                    .build()
                    .ok()
            })
            .collect();
        let result = self
            .client()
            .change_message_visibility_batch()
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await;
        match result {
            Ok(output) => crate::sqs_entries::failed_entries(output.failed(), |i| {
                changes.get(i).map(|c| c.message_id)
            })
            .into_iter()
            .map(|(message_id, reason)| ChangeFailure { message_id, reason })
            .collect(),
            Err(error) => {
                let reason = lambda_kit::error_chain(&error);
                changes
                    .iter()
                    .map(|c| ChangeFailure {
                        message_id: c.message_id.to_owned(),
                        reason: reason.clone(),
                    })
                    .collect()
            }
        }
    }
}
