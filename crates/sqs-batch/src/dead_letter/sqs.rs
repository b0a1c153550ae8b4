//! The SQS adapter of the dead-letter port: each source queue's DLQ learned from its
//! `RedrivePolicy` (`GetQueueAttributes`, once per queue per container: no setting to drift from
//! the queue), and `SendMessageBatch` to it. The client is built at the first move.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry};

use super::{FAILURE_ATTRIBUTE, Move, MoveFailure};
use crate::visibility::queue_url;

/// The SQS actions this adapter calls: `GetQueueAttributes` on the source queues,
/// `SendMessage` on their dead-letter queues.
pub const ACTIONS: &[&str] = &["sqs:GetQueueAttributes", "sqs:SendMessage"];

/// SQS allows a message at most this many message attributes.
const MAX_ATTRIBUTES: usize = 10;

type Build = Box<dyn Fn() -> Client + Send + Sync>;

/// The dead-letter port over SQS. Cheap to clone; the client and the learned DLQs are shared.
#[derive(Clone)]
pub struct SqsDeadLetters(Arc<Inner>);

struct Inner {
    build: Build,
    client: OnceLock<Client>,
    /// Source queue ARN to its DLQ's URL, once learned. A queue without a redrive policy is not
    /// cached: one may be added without a redeploy.
    dlqs: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for SqsDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsDeadLetters")
            .field("client_built", &self.0.client.get().is_some())
            .finish_non_exhaustive()
    }
}

impl SqsDeadLetters {
    /// The client is built by `build` at the first move, not at start-up.
    pub fn on_first_use(build: impl Fn() -> Client + Send + Sync + 'static) -> Self {
        Self(Arc::new(Inner {
            build: Box::new(build),
            client: OnceLock::new(),
            dlqs: Mutex::new(HashMap::new()),
        }))
    }

    fn client(&self) -> &Client {
        self.0.client.get_or_init(&self.0.build)
    }

    /// The DLQ URL of `source_arn`, from the cache or its `RedrivePolicy`.
    async fn dlq_url(&self, source_arn: &str) -> Result<String, String> {
        if let Some(url) = self.cached(source_arn) {
            return Ok(url);
        }
        let source_url =
            queue_url(source_arn).ok_or_else(|| format!("{source_arn} is not an SQS queue ARN"))?;
        let output = self
            .client()
            .get_queue_attributes()
            .queue_url(source_url)
            .attribute_names(QueueAttributeName::RedrivePolicy)
            .send()
            .await
            .map_err(|e| lambda_kit::error_chain(&e))?;
        let policy = output
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
            .ok_or_else(|| format!("{source_arn} has no redrive policy (no dead-letter queue)"))?;
        let url = dlq_from_policy(policy)
            .ok_or_else(|| format!("the redrive policy of {source_arn} names no usable queue"))?;
        self.0
            .dlqs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(source_arn.to_owned(), url.clone());
        Ok(url)
    }

    fn cached(&self, source_arn: &str) -> Option<String> {
        self.0
            .dlqs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(source_arn)
            .cloned()
    }
}

/// The DLQ URL a `RedrivePolicy` names (`{"deadLetterTargetArn": "...", "maxReceiveCount": N}`).
fn dlq_from_policy(policy: &str) -> Option<String> {
    let policy: serde_json::Value = serde_json::from_str(policy).ok()?;
    queue_url(policy.get("deadLetterTargetArn")?.as_str()?)
}

/// The copy's attributes: the original ones (at most nine, by name, so the failure fits SQS's
/// ten) and the failure.
fn attributes(one: &Move<'_>) -> HashMap<String, MessageAttributeValue> {
    let mut original: Vec<_> = one.message.attributes.to_map().into_iter().collect();
    original.sort_by(|a, b| a.0.cmp(&b.0));
    if original.len() >= MAX_ATTRIBUTES {
        let dropped: Vec<&str> = original[MAX_ATTRIBUTES - 1..]
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        tracing::warn!(
            message_id = one.message.message_id,
            dropped = %dropped.join(","),
            "the moved copy keeps nine of the message's attributes, to carry the failure"
        );
    }
    let mut attributes: HashMap<String, MessageAttributeValue> = original
        .into_iter()
        .take(MAX_ATTRIBUTES - 1)
        .filter_map(|(name, value)| {
            let data_type = value.data_type.unwrap_or_else(|| "String".to_owned());
            let mut builder = MessageAttributeValue::builder().data_type(data_type);
            if let Some(text) = value.string_value {
                builder = builder.string_value(text);
            }
            if let Some(bytes) = value.binary_value {
                builder = builder.binary_value(Blob::new(bytes.0));
            }
            builder.build().ok().map(|v| (name, v))
        })
        .collect();
    if let Ok(failure) = serde_json::to_string(&one.failure)
        && let Ok(value) = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(failure)
            .build()
    {
        attributes.insert(FAILURE_ATTRIBUTE.to_owned(), value);
    }
    attributes
}

impl super::DeadLetterPort for SqsDeadLetters {
    async fn send(&self, source_arn: &str, moves: &[Move<'_>]) -> Vec<MoveFailure> {
        let fail_all = |reason: String| -> Vec<MoveFailure> {
            moves
                .iter()
                .map(|one| MoveFailure {
                    message_id: one.message.message_id.to_owned(),
                    reason: reason.clone(),
                })
                .collect()
        };
        let dlq = match self.dlq_url(source_arn).await {
            Ok(url) => url,
            Err(reason) => return fail_all(reason),
        };
        let fifo = dlq.ends_with(".fifo");
        let entries: Vec<_> = moves
            .iter()
            .enumerate()
            .filter_map(|(index, one)| {
                let mut entry = SendMessageBatchRequestEntry::builder()
                    // Unique in the call; a message id may repeat in a batch.
                    .id(index.to_string())
                    .message_body(one.message.body)
                    .set_message_attributes(Some(attributes(one)));
                if fifo {
                    // The same group keeps the copies of one group in order, and the source
                    // message's id deduplicates a move repeated after a crash.
                    entry = entry
                        .message_group_id(one.message.group_id.unwrap_or("dead-letter"))
                        .message_deduplication_id(one.message.message_id);
                }
                entry.build().ok()
            })
            .collect();
        let result = self
            .client()
            .send_message_batch()
            .queue_url(&dlq)
            .set_entries(Some(entries))
            .send()
            .await;
        match result {
            Ok(output) => crate::sqs_entries::failed_entries(output.failed(), |i| {
                moves.get(i).map(|one| one.message.message_id)
            })
            .into_iter()
            .map(|(message_id, reason)| MoveFailure { message_id, reason })
            .collect(),
            Err(error) => fail_all(lambda_kit::error_chain(&error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dlq_comes_from_the_redrive_policy() {
        assert_eq!(
            dlq_from_policy(
                r#"{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:123456789012:orders-dlq","maxReceiveCount":"200"}"#
            )
            .as_deref(),
            Some("https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq")
        );
        assert_eq!(dlq_from_policy("{}"), None);
        assert_eq!(dlq_from_policy("not json"), None);
    }
}
