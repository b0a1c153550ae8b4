//! A local event source mapping: what Lambda's SQS poller does, against a local SQS server.
//!
//! - Long-polls `ReceiveMessage` up to the batch size or until the batching window closes,
//!   asking for every system and message attribute.
//! - Builds the event exactly as Lambda delivers it (camelCase, FIFO attributes included), as
//!   `aws_lambda_events::sqs::SqsEvent`.
//! - Invokes the function (in-process by default, or over the Lambda invoke API of
//!   `cargo lambda watch`).
//! - Deletes every message not in `batchItemFailures` with `DeleteMessageBatch`, logging each
//!   failed entry, and leaves the reported ones to their visibility timeout, so the queue's
//!   redrive policy moves them to the DLQ after `maxReceiveCount`.
//! - Runs `concurrency` pollers. FIFO order across them is kept by SQS itself: a message group
//!   with messages in flight returns nothing more until they are deleted or visible again.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use tracing::{info, warn};

use lambda_kit::{Clock, SystemClock, error_chain};

use crate::LocalError;
use crate::queues::depth;
use crate::setup::QueuePair;

/// Something that runs the function on one event.
pub trait Invoke: Send + Sync {
    fn invoke(
        &self,
        event: &SqsEvent,
        deadline_ms: u64,
    ) -> impl Future<Output = Result<SqsBatchResponse, String>> + Send;
}

impl<S, P, C> Invoke for process_orders::app::App<S, P, C>
where
    S: idempotency::IdempotencyStore,
    P: process_orders::payment::PaymentGateway,
    C: Clock + Clone,
{
    async fn invoke(&self, event: &SqsEvent, deadline_ms: u64) -> Result<SqsBatchResponse, String> {
        self.handle(event, deadline_ms)
            .await
            .map_err(|e| error_chain(&e))
    }
}

/// The real binary behind the Lambda invoke API of `cargo lambda watch`.
#[derive(Debug, Clone)]
pub struct RuntimeApi {
    client: reqwest::Client,
    url: String,
}

impl RuntimeApi {
    /// `address` like `127.0.0.1:9000`; `function` the binary name.
    pub fn new(address: &str, function: &str) -> Self {
        Self {
            client: reqwest::Client::new(),
            url: format!("http://{address}/2015-03-31/functions/{function}/invocations"),
        }
    }
}

impl Invoke for RuntimeApi {
    async fn invoke(
        &self,
        event: &SqsEvent,
        _deadline_ms: u64,
    ) -> Result<SqsBatchResponse, String> {
        let body = serde_json::to_vec(event).map_err(|e| e.to_string())?;
        let response = self
            .client
            .post(&self.url)
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("invoke answered HTTP {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| format!("not a batch response ({e}): {text}"))
    }
}

/// How the mapping polls and invokes.
#[derive(Debug, Clone, Copy)]
pub struct EsmSettings {
    pub batch_size: usize,
    pub batching_window: Duration,
    pub concurrency: usize,
    /// The function timeout each invocation gets.
    pub function_timeout: Duration,
    /// Stop after this long even if the queue has not drained.
    pub max_run: Duration,
}

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EsmStats {
    pub invocations: u64,
    pub records: u64,
    pub reported: u64,
    pub deleted: u64,
    pub errors: u64,
}

#[derive(Default)]
struct Counters {
    invocations: AtomicU64,
    records: AtomicU64,
    reported: AtomicU64,
    deleted: AtomicU64,
    errors: AtomicU64,
}

/// Converts a received message into the record Lambda would deliver.
pub fn lambda_record(message: &Message, queue_arn: &str, region: &str) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id().map(str::to_owned);
    record.receipt_handle = message.receipt_handle().map(str::to_owned);
    record.body = message.body().map(str::to_owned);
    record.md5_of_body = message.md5_of_body().map(str::to_owned);
    record.md5_of_message_attributes = message.md5_of_message_attributes().map(str::to_owned);
    record.attributes = message
        .attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    record.message_attributes = message
        .message_attributes()
        .map(|attributes| {
            attributes
                .iter()
                .map(|(name, value)| {
                    let mut attribute = SqsMessageAttribute::default();
                    attribute.string_value = value.string_value().map(str::to_owned);
                    attribute.binary_value = value.binary_value().map(|b| {
                        // non_exhaustive: built through Default and DerefMut.
                        let mut data = Base64Data::default();
                        data.extend_from_slice(b.as_ref());
                        data
                    });
                    attribute.data_type = Some(value.data_type().to_owned());
                    (name.clone(), attribute)
                })
                .collect::<HashMap<_, _>>()
        })
        .unwrap_or_default();
    record.event_source = Some("aws:sqs".to_owned());
    record.event_source_arn = Some(queue_arn.to_owned());
    record.aws_region = Some(region.to_owned());
    record
}

/// Polls `queue` and invokes `function` until the queue drains (nothing visible, in flight or
/// delayed) or `max_run` passes.
pub async fn run<I: Invoke + 'static>(
    sqs: aws_sdk_sqs::Client,
    queue: QueuePair,
    function: Arc<I>,
    settings: EsmSettings,
) -> Result<EsmStats, LocalError> {
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let mut pollers = Vec::new();
    for _ in 0..settings.concurrency.max(1) {
        let (sqs, queue, function, counters) = (
            sqs.clone(),
            queue.clone(),
            Arc::clone(&function),
            Arc::clone(&counters),
        );
        pollers.push(tokio::spawn(async move {
            while started.elapsed() < settings.max_run {
                // Like Lambda's poller, a failed SQS call is logged and retried, never fatal.
                let batch = match receive_batch(&sqs, &queue, &settings).await {
                    Ok(batch) => batch,
                    Err(e) => {
                        warn!(error = %error_chain(&e), "receive failed; retrying");
                        counters.errors.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                if batch.is_empty() {
                    if depth(&sqs, &queue.url).await.is_ok_and(|d| d.total() == 0) {
                        return Ok::<(), LocalError>(());
                    }
                    continue;
                }
                let done =
                    invoke_and_delete(&sqs, &queue, function.as_ref(), batch, &settings, &counters);
                if let Err(e) = done.await {
                    warn!(error = %error_chain(&e), "delete failed; the messages come back");
                    counters.errors.fetch_add(1, Ordering::SeqCst);
                }
            }
            Ok(())
        }));
    }
    for poller in pollers {
        poller
            .await
            .map_err(|e| LocalError::Other(format!("poller died: {e}")))??;
    }
    Ok(EsmStats {
        invocations: counters.invocations.load(Ordering::SeqCst),
        records: counters.records.load(Ordering::SeqCst),
        reported: counters.reported.load(Ordering::SeqCst),
        deleted: counters.deleted.load(Ordering::SeqCst),
        errors: counters.errors.load(Ordering::SeqCst),
    })
}

/// Up to `batch_size` messages, gathered until the batching window closes (Lambda's rules).
async fn receive_batch(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueuePair,
    settings: &EsmSettings,
) -> Result<Vec<Message>, LocalError> {
    let window_ends = Instant::now() + settings.batching_window;
    let mut batch: Vec<Message> = Vec::new();
    loop {
        let want = (settings.batch_size - batch.len()).min(10);
        let remaining = window_ends.saturating_duration_since(Instant::now());
        // Long-poll for the first message; then only until the window closes.
        let wait_s = if batch.is_empty() {
            1
        } else {
            remaining.as_secs().min(1) as i32
        };
        let output = sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(want as i32)
            .wait_time_seconds(wait_s)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| LocalError::aws("receive messages", e))?;
        let got = output.messages.unwrap_or_default();
        let drained = got.is_empty();
        batch.extend(got);
        // Full, window closed, or nothing more to gather right now: invoke with what we have.
        if drained || batch.len() >= settings.batch_size || Instant::now() >= window_ends {
            return Ok(batch);
        }
    }
}

async fn invoke_and_delete<I: Invoke>(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueuePair,
    function: &I,
    batch: Vec<Message>,
    settings: &EsmSettings,
    counters: &Counters,
) -> Result<(), LocalError> {
    let mut event = SqsEvent::default();
    event.records = batch
        .iter()
        .map(|m| lambda_record(m, &queue.arn, "us-east-1"))
        .collect();
    let deadline_ms = SystemClock.now_ms() + settings.function_timeout.as_millis() as u64;
    counters.invocations.fetch_add(1, Ordering::SeqCst);
    counters
        .records
        .fetch_add(batch.len() as u64, Ordering::SeqCst);
    let reported: HashSet<String> = match function.invoke(&event, deadline_ms).await {
        Ok(response) => response
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier)
            .collect(),
        Err(error) => {
            // A failed invocation: Lambda retries the whole batch after the visibility timeout.
            warn!(
                error,
                records = batch.len(),
                "invocation failed: nothing deleted"
            );
            counters.errors.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
    };
    counters
        .reported
        .fetch_add(reported.len() as u64, Ordering::SeqCst);
    let done: Vec<&Message> = batch
        .iter()
        .filter(|m| m.message_id().is_some_and(|id| !reported.contains(id)))
        .collect();
    for chunk in done.chunks(10) {
        let entries: Vec<_> = chunk
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .build()
                    .ok()
            })
            .collect();
        let output = sqs
            .delete_message_batch()
            .queue_url(&queue.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| LocalError::aws("delete messages", e))?;
        for failed in output.failed() {
            warn!(
                id = failed.id(),
                code = failed.code(),
                message = failed.message(),
                "delete failed"
            );
        }
        counters
            .deleted
            .fetch_add(output.successful().len() as u64, Ordering::SeqCst);
    }
    info!(
        queue = queue.name,
        records = batch.len(),
        reported = reported.len(),
        "batch done"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName as Attr};

    fn keys(value: &serde_json::Value) -> Vec<String> {
        let mut keys: Vec<String> = value.as_object().expect("object").keys().cloned().collect();
        keys.sort();
        keys
    }

    /// The local mapping's records have the shape of the sample events (Lambda's shape).
    #[test]
    fn records_have_the_shape_lambda_delivers() {
        let message = Message::builder()
            .message_id("m1")
            .receipt_handle("rh")
            .body(r#"{"order_id":"o-1","amount":1}"#)
            .md5_of_body("abc")
            .attributes(Attr::ApproximateReceiveCount, "2")
            .attributes(Attr::MessageGroupId, "g")
            .message_attributes(
                "trace",
                MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value("t-1")
                    .build()
                    .expect("attribute"),
            )
            .build();
        let record = lambda_record(&message, "arn:aws:sqs:us-east-1:1:orders.fifo", "us-east-1");
        let json = serde_json::to_value(&record).expect("json");
        let sample: serde_json::Value =
            serde_json::from_str(include_str!("../../../events/standard.json")).expect("sample");
        let mut expected = keys(&sample["Records"][0]);
        expected.retain(|k| k != "md5OfMessageAttributes");
        let mut got = keys(&json);
        got.retain(|k| k != "md5OfMessageAttributes");
        assert_eq!(got, expected);
        assert_eq!(json["attributes"]["ApproximateReceiveCount"], "2");
        assert_eq!(json["attributes"]["MessageGroupId"], "g");
        assert_eq!(json["messageAttributes"]["trace"]["stringValue"], "t-1");
        assert_eq!(json["messageAttributes"]["trace"]["dataType"], "String");
        assert_eq!(
            json["eventSourceARN"],
            "arn:aws:sqs:us-east-1:1:orders.fifo"
        );
        // And the function's own parser reads it back.
        let event: SqsEvent =
            serde_json::from_value(serde_json::json!({ "Records": [json] })).expect("event");
        let batch = sqs_batch::Batch::from_event(&event)
            .expect("batch")
            .messages;
        assert_eq!(
            (
                batch[0].message_id,
                batch[0].receive_count,
                batch[0].group_id
            ),
            ("m1", Some(2), Some("g"))
        );
    }
}
