//! On-call operations on the queues, for the `orders-ops` binary: how deep each queue and its
//! DLQ are, a non-destructive look at what sits in a DLQ, and moving DLQ messages back to their
//! source queue (SQS's own move task, or by hand where the server has none).
//!
//! Every write here is ordered so that a crash can duplicate a message but never lose one: a
//! message leaves the DLQ only after its copy was accepted by the source queue. The function's
//! idempotency absorbs the duplicate.

use std::time::{Duration, Instant};

use std::borrow::Cow;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageAttributeValue, MessageSystemAttributeName, SendMessageBatchRequestEntry,
};

use process_orders::order::order_id_hint;
use sqs_admin::ToolError;
pub use sqs_admin::queues::{Depth, Queue, dead_letter_queue, depth, resolve};
use sqs_batch::dead_letter::{FAILURE_ATTRIBUTE, Failure};

/// One DLQ message, looked at without being consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    pub message_id: String,
    pub receive_count: Option<u64>,
    pub first_receive_ms: Option<u64>,
    pub sent_ms: Option<u64>,
    pub body_len: usize,
    /// The order id when the body names one (even if the order itself is invalid).
    pub order_id: Option<String>,
    pub group_id: Option<String>,
    /// Why the function moved it, when it did (its `dead-letter-failure` attribute); `None`
    /// for a message SQS's redrive moved after `maxReceiveCount`.
    pub failure: Option<Failure>,
}

/// Reads up to `max` messages of `url` and makes them visible again at once. Each look counts
/// as a receive (`ApproximateReceiveCount` rises), which a DLQ without its own redrive policy
/// ignores.
pub async fn inspect(sqs: &Client, url: &str, max: usize) -> Result<Vec<Peeked>, ToolError> {
    let mut peeked = Vec::new();
    let mut handles = Vec::new();
    // Held invisible while we look, so one pass sees each message once.
    while peeked.len() < max {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages((max - peeked.len()).min(10) as i32)
            .visibility_timeout(30)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names(FAILURE_ATTRIBUTE)
            .send()
            .await
            .map_err(|e| ToolError::aws("receive from the DLQ", e))?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let attribute = |name: MessageSystemAttributeName| {
                m.attributes().and_then(|a| a.get(&name)).cloned()
            };
            let number = |name| attribute(name).and_then(|v| v.parse().ok());
            let body = m.body().unwrap_or_default();
            peeked.push(Peeked {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receive_count: number(MessageSystemAttributeName::ApproximateReceiveCount),
                first_receive_ms: number(
                    MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
                ),
                sent_ms: number(MessageSystemAttributeName::SentTimestamp),
                body_len: body.len(),
                order_id: order_id_hint(body),
                group_id: attribute(MessageSystemAttributeName::MessageGroupId),
                failure: m
                    .message_attributes()
                    .and_then(|a| a.get(FAILURE_ATTRIBUTE))
                    .and_then(|v| v.string_value())
                    .and_then(|json| serde_json::from_str(json).ok()),
            });
            if let Some(handle) = m.receipt_handle() {
                handles.push(handle.to_owned());
            }
        }
    }
    release(sqs, url, &handles).await?;
    Ok(peeked)
}

/// Makes received messages visible again now.
async fn release(sqs: &Client, url: &str, handles: &[String]) -> Result<(), ToolError> {
    for chunk in handles.chunks(10) {
        let entries = chunk.iter().enumerate().map(|(i, handle)| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(handle)
                .visibility_timeout(0)
                .build()
        });
        let entries = entries
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ToolError::aws("build visibility entries", e))?;
        sqs.change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| ToolError::aws("make peeked messages visible again", e))?;
    }
    Ok(())
}

/// The `index`-th `:`-separated part of an ARN (3: region, 4: account).
pub fn arn_part(arn: &str, index: usize) -> Option<&str> {
    arn.split(':').nth(index).filter(|part| !part.is_empty())
}

/// How long a manual redrive holds a received batch invisible: far more than a send and a
/// delete take, and short enough that a killed run's batch is soon back in the DLQ.
pub const REDRIVE_HOLD: Duration = Duration::from_secs(10);

/// What a manual redrive did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    pub moved: usize,
    /// Sends the source queue refused (those messages stay in the DLQ), and messages sent but
    /// not deleted from the DLQ (a later redrive sends them again).
    pub failed: usize,
}

/// The checklist the seeds give for a redrive, printed before any message moves.
pub const REDRIVE_CHECKLIST: &str = "Before a redrive:
  1. The fix for whatever sent these messages to the DLQ is deployed (inspect first).
  2. The handler is idempotent: a redriven message that was half done must not charge twice.
  3. The rate is low enough for the store and the payment provider (--rate, default 10/s).";

/// Moves every message of `dlq` back to `source` by hand, at most `rate` per second: receive,
/// send a copy (FIFO: same group, fresh deduplication id), and delete from the DLQ only the
/// messages whose copy the source accepted. Stops when the DLQ looks empty. `progress` hears the
/// running totals after every batch (a progress bar).
pub async fn redrive_manual(
    sqs: &Client,
    dlq: &Queue,
    source: &Queue,
    rate: u32,
    mut progress: impl FnMut(Moved),
) -> Result<Moved, ToolError> {
    let rate = rate.max(1);
    let mut total = Moved::default();
    let started = Instant::now();
    let mut empty_polls = 0;
    while empty_polls < 2 {
        let out = sqs
            .receive_message()
            .queue_url(&dlq.url)
            .max_number_of_messages(rate.min(10) as i32)
            .visibility_timeout(REDRIVE_HOLD.as_secs() as i32)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| ToolError::aws("receive from the DLQ", e))?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            empty_polls += 1;
            continue;
        }
        empty_polls = 0;
        let mut entries = Vec::with_capacity(messages.len());
        for (i, m) in messages.iter().enumerate() {
            let mut entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(m.body().unwrap_or_default())
                .set_message_attributes(m.message_attributes.clone());
            if source.fifo {
                let group = m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                    .cloned()
                    .unwrap_or_else(|| "redrive".to_owned());
                entry = entry
                    .message_group_id(group)
                    .message_deduplication_id(uuid::Uuid::new_v4().to_string());
            }
            entries.push(
                entry
                    .build()
                    .map_err(|e| ToolError::aws("build send entries", e))?,
            );
        }
        let sent = sqs
            .send_message_batch()
            .queue_url(&source.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| ToolError::aws("send to the source queue", e))?;
        for failure in sent.failed() {
            tracing::warn!(
                id = failure.id(),
                code = failure.code(),
                "the source queue refused a redriven message; it stays in the DLQ"
            );
        }
        total.failed += sent.failed().len();
        if sent.successful().is_empty() {
            // Nothing this round was accepted: stop rather than spin on the same messages.
            return Err(ToolError::Other(format!(
                "the source queue refused every message of a batch ({} moved before); see the warnings",
                total.moved
            )));
        }
        let deletes = sent
            .successful()
            .iter()
            .filter_map(|ok| {
                let handle = messages
                    .get(ok.id().parse::<usize>().ok()?)?
                    .receipt_handle()?;
                DeleteMessageBatchRequestEntry::builder()
                    .id(ok.id())
                    .receipt_handle(handle)
                    .build()
                    .ok()
            })
            .collect::<Vec<_>>();
        if !deletes.is_empty() {
            let deleted = sqs
                .delete_message_batch()
                .queue_url(&dlq.url)
                .set_entries(Some(deletes))
                .send()
                .await
                .map_err(|e| ToolError::aws("delete from the DLQ", e))?;
            for failure in deleted.failed() {
                tracing::warn!(
                    id = failure.id(),
                    code = failure.code(),
                    "a redriven message could not be deleted from the DLQ: it is in the source \
                     queue and still in the DLQ, and a later redrive sends it again (a duplicate \
                     the function absorbs)"
                );
            }
            total.moved += deleted.successful().len();
            total.failed += deleted.failed().len();
            // A fact an observer can wait on (the tests do): this batch is in the source queue
            // and gone from the DLQ.
            tracing::info!(
                moved = total.moved,
                failed = total.failed,
                "redrive batch moved"
            );
        }
        progress(total);
        // Pace: `moved` messages should have taken at least moved / rate seconds.
        let due = Duration::from_secs_f64(total.moved as f64 / f64::from(rate));
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    Ok(total)
}

/// SQS's largest message body; a larger one must go through the claim check.
pub const INLINE_LIMIT: usize = 256 * 1024;

/// Where a large body goes instead of the queue.
#[derive(Debug, Clone, Copy)]
pub struct Offload<'a> {
    #[cfg(feature = "s3-claim-check")]
    pub s3: &'a aws_sdk_s3::Client,
    pub bucket: &'a str,
    /// Bodies longer than this many bytes are offloaded (at most [`INLINE_LIMIT`]).
    pub threshold: usize,
}

/// The message to send for `body`: the body itself, or a pointer and its attribute.
type Outgoing<'b> = (Cow<'b, str>, Option<MessageAttributeValue>);

/// Sends one order body to `queue` (FIFO: in `group`, with a fresh deduplication id). With
/// `offload`, a body above its threshold is written to S3 first and the message carries the
/// pointer, marked by the `payload-pointer` attribute. Returns whether it was offloaded.
pub async fn send_order(
    sqs: &Client,
    queue: &Queue,
    body: &str,
    group: Option<&str>,
    offload: Option<Offload<'_>>,
) -> Result<bool, ToolError> {
    let (text, pointer_attribute): Outgoing<'_> = match offload {
        Some(o) if body.len() > o.threshold.min(INLINE_LIMIT) => offload_body(o, body).await?,
        _ => (Cow::Borrowed(body), None),
    };
    if text.len() > INLINE_LIMIT {
        return Err(ToolError::Other(format!(
            "the body is {} bytes, above SQS's {INLINE_LIMIT}: it needs the claim check (--bucket)",
            text.len()
        )));
    }
    let offloaded = pointer_attribute.is_some();
    let mut send = sqs
        .send_message()
        .queue_url(&queue.url)
        .message_body(text.as_ref());
    if let Some(attribute) = pointer_attribute {
        send = send.message_attributes(claim_check::POINTER_ATTRIBUTE, attribute);
    }
    if queue.fifo {
        send = send
            .message_group_id(group.unwrap_or("orders"))
            .message_deduplication_id(uuid::Uuid::new_v4().to_string());
    }
    send.send()
        .await
        .map_err(|e| ToolError::aws("send the order", e))?;
    Ok(offloaded)
}

#[cfg(feature = "s3-claim-check")]
async fn offload_body<'b>(o: Offload<'_>, body: &'b str) -> Result<Outgoing<'b>, ToolError> {
    let pointer = claim_check::s3::offload(o.s3, o.bucket, PAYLOAD_PREFIX, body)
        .await
        .map_err(|e| ToolError::aws("write the payload to S3", e))?;
    let text = serde_json::to_string(&pointer).map_err(|e| ToolError::Other(e.to_string()))?;
    let attribute = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(claim_check::POINTER_S3)
        .build()
        .map_err(|e| ToolError::aws("build the pointer attribute", e))?;
    Ok((Cow::Owned(text), Some(attribute)))
}

#[cfg(not(feature = "s3-claim-check"))]
async fn offload_body<'b>(o: Offload<'_>, body: &'b str) -> Result<Outgoing<'b>, ToolError> {
    Err(ToolError::Other(format!(
        "the body is {} bytes, above the {}-byte threshold for bucket {}, and this build has no \
         claim check: build with --features s3-claim-check",
        body.len(),
        o.threshold,
        o.bucket
    )))
}

pub use claim_check::PAYLOAD_PREFIX;
