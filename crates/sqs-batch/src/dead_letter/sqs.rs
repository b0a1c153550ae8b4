//! The SQS adapter of the dead-letter port: each source queue's DLQ and `maxReceiveCount` learned
//! from its `RedrivePolicy`, and the DLQ's `MaximumMessageSize` (`GetQueueAttributes`, kept per
//! queue per container for [`POLICY_TTL`], so a policy edited in the console is seen within
//! minutes, not at the next deploy), and `SendMessageBatch` to it. The client is built at the
//! first use.
//!
//! Every copy fits SQS whatever the input: at most ten attributes, at most the DLQ's maximum
//! message size (body, and every attribute's name, type and value), and calls of at most ten
//! entries and [`BATCH_BYTES`]. What does not fit is trimmed from the failure first (its detail,
//! then its history), then the largest original attributes, and the failure names what was
//! trimmed; the body is always kept whole. A copy whose body alone is over the DLQ's size
//! cannot be moved (the DLQ is smaller than its source queue): it stays reported, for SQS's
//! own redrive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

// Tokio's instant is the system's in production and follows a paused clock in tests and the
// simulator, where a learned policy then expires on simulated time.
use tokio::time::Instant;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry};

use super::{FAILURE_ATTRIBUTE, Failure, Move, MoveFailure};
use crate::visibility::queue_url;

/// The SQS actions this adapter calls: `GetQueueAttributes` on the source queues and their
/// dead-letter queues, `SendMessage` on the dead-letter queues.
pub const ACTIONS: &[&str] = &["sqs:GetQueueAttributes", "sqs:SendMessage"];

/// SQS allows a message at most this many message attributes.
pub const MAX_ATTRIBUTES: usize = 10;
/// SQS allows one `SendMessageBatch` at most this many bytes, all its entries together.
pub const BATCH_BYTES: usize = 1_048_576;
/// The maximum message size assumed when the DLQ's own cannot be read: SQS's smallest default.
pub const ASSUMED_MAX_MESSAGE_BYTES: usize = 262_144;
/// How long a learned policy is kept before it is read again.
pub const POLICY_TTL: Duration = Duration::from_secs(300);

type Build = Box<dyn Fn() -> Client + Send + Sync>;

/// The dead-letter port over SQS. Cheap to clone; the client and the learned policies are
/// shared.
#[derive(Clone)]
pub struct SqsDeadLetters(Arc<Inner>);

struct Inner {
    build: Build,
    client: OnceLock<Client>,
    /// Source queue ARN to its learned policy. A queue without a redrive policy is not kept:
    /// one may be added without a redeploy.
    policies: Mutex<HashMap<String, (Instant, Policy)>>,
}

/// What a source queue's attributes say of its dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Policy {
    dlq_url: String,
    /// The policy's `maxReceiveCount`.
    max_receive_count: Option<u32>,
    /// The DLQ's `MaximumMessageSize`.
    max_message_bytes: usize,
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
            policies: Mutex::new(HashMap::new()),
        }))
    }

    fn client(&self) -> &Client {
        self.0.client.get_or_init(&self.0.build)
    }

    fn policies(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Policy)>> {
        self.0
            .policies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The policy of `source_arn`, kept or read again.
    async fn policy(&self, source_arn: &str) -> Result<Policy, String> {
        if let Some((at, policy)) = self.policies().get(source_arn)
            && at.elapsed() < POLICY_TTL
        {
            return Ok(policy.clone());
        }
        let policy = self.learn(source_arn).await?;
        self.policies()
            .insert(source_arn.to_owned(), (Instant::now(), policy.clone()));
        Ok(policy)
    }

    async fn attribute(
        &self,
        url: &str,
        name: QueueAttributeName,
    ) -> Result<Option<String>, String> {
        let output = self
            .client()
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(name.clone())
            .send()
            .await
            .map_err(|e| lambda_kit::error_chain(&e))?;
        Ok(output.attributes().and_then(|a| a.get(&name)).cloned())
    }

    async fn learn(&self, source_arn: &str) -> Result<Policy, String> {
        let source_url =
            queue_url(source_arn).ok_or_else(|| format!("{source_arn} is not an SQS queue ARN"))?;
        let text = self
            .attribute(&source_url, QueueAttributeName::RedrivePolicy)
            .await?
            .ok_or_else(|| format!("{source_arn} has no redrive policy (no dead-letter queue)"))?;
        let (dlq_url, max_receive_count) = read_policy(&text)
            .ok_or_else(|| format!("the redrive policy of {source_arn} names no usable queue"))?;
        let max_message_bytes = match self
            .attribute(&dlq_url, QueueAttributeName::MaximumMessageSize)
            .await
        {
            Ok(Some(size)) => size.parse().unwrap_or(ASSUMED_MAX_MESSAGE_BYTES),
            Ok(None) => ASSUMED_MAX_MESSAGE_BYTES,
            Err(error) => {
                tracing::warn!(
                    dlq = dlq_url,
                    error,
                    "the dead-letter queue's MaximumMessageSize could not be read; copies are \
                     kept within 256 KiB"
                );
                ASSUMED_MAX_MESSAGE_BYTES
            }
        };
        Ok(Policy {
            dlq_url,
            max_receive_count,
            max_message_bytes,
        })
    }
}

/// The DLQ URL and `maxReceiveCount` a `RedrivePolicy` names
/// (`{"deadLetterTargetArn": "...", "maxReceiveCount": N}`, the count a number or a string).
fn read_policy(policy: &str) -> Option<(String, Option<u32>)> {
    let policy: serde_json::Value = serde_json::from_str(policy).ok()?;
    let url = queue_url(policy.get("deadLetterTargetArn")?.as_str()?)?;
    let count = match policy.get("maxReceiveCount") {
        Some(serde_json::Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Some(serde_json::Value::String(text)) => text.trim().parse().ok(),
        _ => None,
    };
    Some((url, count))
}

/// A copy ready to send, and its size as SQS counts it.
struct Copy {
    attributes: HashMap<String, MessageAttributeValue>,
    bytes: usize,
}

/// One of the message's own attributes, and what it counts towards the copy's size.
struct Original {
    name: String,
    value: MessageAttributeValue,
    bytes: usize,
}

/// The message's own attributes, without an earlier failure (which the new one replaces), by
/// name; `None` when they cannot be read.
fn originals(one: &Move<'_>) -> Option<Vec<Original>> {
    let mut originals: Vec<Original> = one
        .message
        .attributes
        .try_to_map()?
        .into_iter()
        .filter(|(name, _)| name != FAILURE_ATTRIBUTE)
        .filter_map(|(name, value)| {
            let data_type = value.data_type.unwrap_or_else(|| "String".to_owned());
            let mut bytes = name.len() + data_type.len();
            let mut builder = MessageAttributeValue::builder().data_type(data_type);
            if let Some(text) = value.string_value {
                bytes += text.len();
                builder = builder.string_value(text);
            }
            if let Some(data) = value.binary_value {
                bytes += data.0.len();
                builder = builder.binary_value(Blob::new(data.0));
            }
            let value = builder.build().ok()?;
            Some(Original { name, value, bytes })
        })
        .collect();
    originals.sort_by(|a, b| a.name.cmp(&b.name));
    Some(originals)
}

/// Drops the largest original attribute, naming it in the failure; whether there was one.
fn drop_largest(originals: &mut Vec<Original>, failure: &mut Failure) -> bool {
    let Some(largest) = (0..originals.len()).max_by_key(|&i| originals[i].bytes) else {
        return false;
    };
    let dropped = originals.remove(largest);
    failure.trimmed.push(format!("attribute {}", dropped.name));
    true
}

/// The copy of `one` within `max_bytes` and SQS's ten attributes, or why it cannot be.
fn fit(one: &Move<'_>, max_bytes: usize) -> Result<Copy, String> {
    let body = one.message.body.len();
    let mut failure = one.failure.clone();
    let mut originals = originals(one).unwrap_or_else(|| {
        failure.trimmed.push("attributes (unreadable)".to_owned());
        Vec::new()
    });
    while originals.len() >= MAX_ATTRIBUTES {
        drop_largest(&mut originals, &mut failure);
    }
    loop {
        let text = serde_json::to_string(&failure).map_err(|e| e.to_string())?;
        let failure_bytes = FAILURE_ATTRIBUTE.len() + "String".len() + text.len();
        let bytes = body + failure_bytes + originals.iter().map(|o| o.bytes).sum::<usize>();
        if bytes <= max_bytes {
            let mut attributes: HashMap<String, MessageAttributeValue> =
                originals.into_iter().map(|o| (o.name, o.value)).collect();
            let value = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(text)
                .build()
                .map_err(|e| e.to_string())?;
            attributes.insert(FAILURE_ATTRIBUTE.to_owned(), value);
            return Ok(Copy { attributes, bytes });
        }
        // What a person needs least goes first; the body and the reason always stay.
        if failure.detail.take().is_some() {
            failure.trimmed.push("detail".to_owned());
        } else if !failure.history.is_empty() {
            failure.history.clear();
            failure.trimmed.push("history".to_owned());
        } else if !drop_largest(&mut originals, &mut failure) {
            return Err(format!(
                "the copy cannot fit the dead-letter queue's MaximumMessageSize ({max_bytes} \
                 bytes): its body alone is {body} bytes"
            ));
        }
    }
}

/// The message attributes of `one`'s copy: the message's own (without an earlier failure) and
/// `one.failure`, within SQS's ten attributes and `max_bytes` (body included), trimmed as the
/// function trims its own moves and named in the failure's `trimmed`; or why it cannot fit (the
/// body alone is too large). For a tool that sends such copies itself (an operator's redrive
/// that stamps the messages SQS's redrive moved), so that every copy is fitted by this one rule.
pub fn copy_attributes(
    one: &Move<'_>,
    max_bytes: usize,
) -> Result<HashMap<String, MessageAttributeValue>, String> {
    fit(one, max_bytes).map(|copy| copy.attributes)
}

/// The copies in calls of at most ten entries and [`BATCH_BYTES`], in their order.
fn calls(copies: Vec<(usize, Copy)>) -> Vec<Vec<(usize, Copy)>> {
    let mut calls: Vec<Vec<(usize, Copy)>> = Vec::new();
    let mut call_bytes = 0;
    for (index, copy) in copies {
        match calls.last_mut() {
            Some(call)
                if call.len() < super::BATCH_LIMIT && call_bytes + copy.bytes <= BATCH_BYTES =>
            {
                call_bytes += copy.bytes;
                call.push((index, copy));
            }
            _ => {
                call_bytes = copy.bytes;
                calls.push(vec![(index, copy)]);
            }
        }
    }
    calls
}

impl super::DeadLetterPort for SqsDeadLetters {
    async fn send(&self, source_arn: &str, moves: &[Move<'_>]) -> Vec<MoveFailure> {
        let fail = |one: &Move<'_>, reason: String| MoveFailure {
            message_id: one.message.message_id.to_owned(),
            reason,
        };
        let policy = match self.policy(source_arn).await {
            Ok(policy) => policy,
            Err(reason) => return moves.iter().map(|one| fail(one, reason.clone())).collect(),
        };
        let fifo = policy.dlq_url.ends_with(".fifo");
        let mut failures = Vec::new();
        let mut copies = Vec::with_capacity(moves.len());
        for (index, one) in moves.iter().enumerate() {
            match fit(one, policy.max_message_bytes) {
                Ok(copy) => copies.push((index, copy)),
                Err(reason) => {
                    tracing::error!(
                        message_id = one.message.message_id,
                        reason,
                        "a POISON record cannot be moved; it stays reported for SQS's redrive"
                    );
                    failures.push(fail(one, reason));
                }
            }
        }
        for call in calls(copies) {
            let mut indexes = Vec::with_capacity(call.len());
            let mut entries = Vec::with_capacity(call.len());
            for (index, copy) in call {
                let one = &moves[index];
                let mut entry = SendMessageBatchRequestEntry::builder()
                    // Unique in the call; a message id may repeat in a batch.
                    .id(index.to_string())
                    .message_body(one.message.body)
                    .set_message_attributes(Some(copy.attributes));
                if fifo {
                    // The same group keeps the copies of one group in order, and the source
                    // message's id deduplicates a move repeated after a crash.
                    entry = entry
                        .message_group_id(one.message.group_id.unwrap_or("dead-letter"))
                        .message_deduplication_id(one.message.message_id);
                }
                // A copy that cannot be built is a failed move, never one left out unnoticed.
                match entry.build() {
                    Ok(entry) => {
                        indexes.push(index);
                        entries.push(entry);
                    }
                    Err(error) => failures.push(fail(one, error.to_string())),
                }
            }
            if entries.is_empty() {
                continue;
            }
            let result = self
                .client()
                .send_message_batch()
                .queue_url(&policy.dlq_url)
                .set_entries(Some(entries))
                .send()
                .await;
            match result {
                Ok(output) => failures.extend(
                    crate::sqs_entries::failed_entries(output.failed(), |i| {
                        moves.get(i).map(|one| one.message.message_id)
                    })
                    .into_iter()
                    .map(|(message_id, reason)| MoveFailure { message_id, reason }),
                ),
                Err(error) => {
                    let reason = lambda_kit::error_chain(&error);
                    failures.extend(indexes.iter().map(|&i| fail(&moves[i], reason.clone())));
                }
            }
        }
        failures
    }

    async fn max_receive_count(&self, source_arn: &str) -> Option<u32> {
        match self.policy(source_arn).await {
            Ok(policy) => policy.max_receive_count,
            Err(reason) => {
                tracing::warn!(
                    queue = source_arn,
                    reason,
                    "the queue's maxReceiveCount could not be learned; SQS_BATCH_MAX_RECEIVE_COUNT applies"
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::{Message, MessageAttributes};

    #[test]
    fn the_dlq_and_the_count_come_from_the_redrive_policy() {
        assert_eq!(
            read_policy(
                r#"{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:123456789012:orders-dlq","maxReceiveCount":"200"}"#
            ),
            Some((
                "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq".to_owned(),
                Some(200)
            ))
        );
        assert_eq!(
            read_policy(
                r#"{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:1:q","maxReceiveCount":5}"#
            )
            .and_then(|p| p.1),
            Some(5)
        );
        assert_eq!(read_policy("{}"), None);
        assert_eq!(read_policy("not json"), None);
    }

    fn attributes_json(count: usize, value_len: usize) -> String {
        let entries: Vec<String> = (0..count)
            .map(|i| {
                format!(
                    r#""a{i}":{{"stringValue":"{}","dataType":"String"}}"#,
                    "v".repeat(value_len)
                )
            })
            .collect();
        format!("{{{}}}", entries.join(","))
    }

    /// Ten attributes of its own: the copy keeps nine, drops the largest and says so; a copy
    /// over the DLQ's size loses its detail first, then its largest attribute; a body over it
    /// cannot be moved.
    #[test]
    fn a_copy_fits_ten_attributes_and_the_dlqs_size() {
        let raw = attributes_json(10, 10);
        let raw: Box<serde_json::value::RawValue> =
            serde_json::from_str(&raw).expect("raw attributes");
        let message = Message {
            attributes: MessageAttributes::Raw(&raw),
            ..Message::new("m1", "body")
        };
        let one = Move {
            message: &message,
            failure: Failure {
                reason: "invalid_body".into(),
                detail: Some("d".repeat(500)),
                ..Failure::default()
            },
        };
        let copy = fit(&one, 262_144).expect("fits");
        assert_eq!(copy.attributes.len(), MAX_ATTRIBUTES);
        let failure: Failure = serde_json::from_str(
            copy.attributes[FAILURE_ATTRIBUTE]
                .string_value()
                .expect("failure"),
        )
        .expect("json");
        assert_eq!(failure.trimmed.len(), 1, "{failure:?}");
        assert!(failure.detail.is_some());

        let small = fit(&one, copy.bytes - 100).expect("fits smaller");
        assert!(small.bytes <= copy.bytes - 100);
        let failure: Failure = serde_json::from_str(
            small.attributes[FAILURE_ATTRIBUTE]
                .string_value()
                .expect("failure"),
        )
        .expect("json");
        assert!(failure.detail.is_none());
        assert!(
            failure.trimmed.contains(&"detail".to_owned()),
            "{failure:?}"
        );

        // Without its detail still too large: the largest attribute goes, and the copy fits.
        let smaller = fit(&one, small.bytes - 1).expect("fits without an attribute");
        assert!(smaller.bytes < small.bytes);
        assert_eq!(smaller.attributes.len(), MAX_ATTRIBUTES - 1);

        assert!(fit(&one, 3).is_err(), "a body over the size cannot fit");
    }

    /// Calls of at most ten entries and 1 MiB, in order, each as full as those limits allow.
    #[test]
    fn copies_are_sent_in_calls_of_ten_entries_and_a_mebibyte() {
        let split = |sizes: &[usize]| -> Vec<Vec<usize>> {
            let copies = sizes
                .iter()
                .enumerate()
                .map(|(index, &bytes)| {
                    (
                        index,
                        Copy {
                            attributes: HashMap::new(),
                            bytes,
                        },
                    )
                })
                .collect();
            calls(copies)
                .into_iter()
                .map(|call| call.into_iter().map(|(index, _)| index).collect())
                .collect()
        };
        assert_eq!(split(&[1; 11]), [(0..10).collect(), vec![10]]);
        let half = BATCH_BYTES / 2;
        assert_eq!(split(&[half, half, 1]), [vec![0, 1], vec![2]]);
        assert_eq!(
            split(&[600_000, 400_000, 100_000, 1]),
            [vec![0, 1], vec![2, 3]]
        );
        assert_eq!(split(&[BATCH_BYTES, 1, 1]), [vec![0], vec![1, 2]]);
        // The call's bytes add up: three copies that fill 1 MiB exactly share one call.
        assert_eq!(split(&[3, 3, BATCH_BYTES - 6]), [vec![0, 1, 2]]);
        assert!(split(&[]).is_empty());
    }

    /// A copy's size is counted as SQS counts it: the body, and every attribute's name, type and
    /// value (a binary value by its bytes).
    #[test]
    fn a_copys_size_is_what_sqs_counts() {
        let raw = r#"{"trace":{"stringValue":"abc","dataType":"String"},"blob":{"binaryValue":"AAEC","dataType":"Binary"}}"#;
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(raw).expect("raw");
        let message = Message {
            attributes: MessageAttributes::Raw(&raw),
            ..Message::new("m1", "the body")
        };
        let one = Move {
            message: &message,
            failure: Failure {
                reason: "invalid_body".into(),
                ..Failure::default()
            },
        };
        let copy = fit(&one, 262_144).expect("fits");
        let counted: usize = "the body".len()
            + copy
                .attributes
                .iter()
                .map(|(name, value)| {
                    name.len()
                        + value.data_type().len()
                        + value.string_value().map_or(0, str::len)
                        + value.binary_value().map_or(0, |b| b.as_ref().len())
                })
                .sum::<usize>();
        assert_eq!(copy.bytes, counted);
        assert_eq!(
            copy.attributes["blob"]
                .binary_value()
                .map(|b| b.as_ref().to_vec()),
            Some(vec![0, 1, 2])
        );
        assert_eq!(copy.attributes.len(), 3);
    }
}
