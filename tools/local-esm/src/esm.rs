//! A local event source mapping: what Lambda's SQS poller does, against a local SQS server.
//!
//! - Long-polls `ReceiveMessage` until the batch size, the batching window or Lambda's 6 MB
//!   payload limit is reached, asking for every system and message attribute. A batch larger
//!   than the payload limit is split into invocations below it.
//! - Builds the event exactly as Lambda delivers it (camelCase, FIFO attributes included), as
//!   `aws_lambda_events::sqs::SqsEvent`.
//! - Invokes the function (in-process by default, or over the Lambda invoke API of
//!   `cargo lambda watch`).
//! - Gives each invocation the function timeout: a late answer is discarded and nothing is
//!   deleted, as Lambda does (it retries the whole batch after the visibility timeout).
//! - Checks the response as Lambda does: a `batchItemFailures` entry with an empty id, or an id
//!   that is not a message of the batch, fails the whole invocation (nothing deleted).
//! - Deletes every message not in `batchItemFailures` with `DeleteMessageBatch`, logging each
//!   failed entry, and leaves the reported ones to their visibility timeout, so the queue's
//!   redrive policy moves them to the DLQ after `maxReceiveCount`.
//! - Runs `concurrency` pollers. FIFO order across them is kept by SQS itself: a message group
//!   with messages in flight returns nothing more until they are deleted or visible again.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName};
use tracing::{info, warn};

use lambda_kit::{Clock, SystemClock, error_chain};

use crate::ToolError;
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
    S: idempotency::guard::EffectStore,
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

/// Lambda's payload limit for a synchronous invocation: an event never exceeds it.
pub const PAYLOAD_LIMIT: usize = 6 * 1024 * 1024;

/// How the mapping polls and invokes.
#[derive(Debug, Clone, Copy)]
pub struct EsmSettings {
    pub batch_size: usize,
    pub batching_window: Duration,
    pub concurrency: usize,
    /// The function timeout each invocation gets.
    pub function_timeout: Duration,
    /// The queue has drained once no message has been received, and no invocation has ended,
    /// for this long. It must be longer than a message can stay invisible: the queue's
    /// visibility timeout, and the longest visibility the function sets on a record it reports
    /// (counted from the end of that invocation). A fact from receives, where SQS's
    /// approximate counts could be read in the middle of another poller's receive.
    pub drained_after: Duration,
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
    /// The run ended because the queue drained (`drained_after`), not at `max_run`.
    pub drained: bool,
}

/// Running totals of a mapping, shared by its pollers.
#[derive(Debug, Default)]
pub struct Counters {
    invocations: AtomicU64,
    records: AtomicU64,
    reported: AtomicU64,
    deleted: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    /// The totals so far.
    pub fn stats(&self) -> EsmStats {
        EsmStats {
            invocations: self.invocations.load(Ordering::SeqCst),
            records: self.records.load(Ordering::SeqCst),
            reported: self.reported.load(Ordering::SeqCst),
            deleted: self.deleted.load(Ordering::SeqCst),
            errors: self.errors.load(Ordering::SeqCst),
            drained: false,
        }
    }
}

/// Converts a received message into the record Lambda would deliver: the worker runtime's own
/// conversion, so the emulator and the worker hand a handler the same record.
pub use sqs_batch::worker::sqs::lambda_record;

/// Polls `queue` and invokes `function` until the queue drains (`drained_after`) or `max_run`
/// passes.
pub async fn run<I: Invoke + 'static>(
    sqs: aws_sdk_sqs::Client,
    queue: QueuePair,
    function: Arc<I>,
    settings: EsmSettings,
) -> Result<EsmStats, ToolError> {
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    // When a poller last received messages, in ms since `started`; stored after the
    // invocation and its deletes, so a record the function gave a visibility is covered too.
    let last_active = Arc::new(AtomicU64::new(0));
    let mut pollers = Vec::new();
    for _ in 0..settings.concurrency.max(1) {
        let (sqs, queue, function, counters, last_active) = (
            sqs.clone(),
            queue.clone(),
            Arc::clone(&function),
            Arc::clone(&counters),
            Arc::clone(&last_active),
        );
        pollers.push(tokio::spawn(async move {
            let since_start = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            while started.elapsed() < settings.max_run {
                let errors = counters.errors.load(Ordering::SeqCst);
                let received =
                    poll_once(&sqs, &queue, function.as_ref(), &settings, &counters).await;
                if received > 0 {
                    last_active.fetch_max(since_start(), Ordering::SeqCst);
                    continue;
                }
                // A failed call proves nothing and may have left messages invisible: it counts
                // as activity. A poller that stops while another one is still invoking is safe:
                // that one goes on until it is idle itself.
                if counters.errors.load(Ordering::SeqCst) != errors {
                    last_active.fetch_max(since_start(), Ordering::SeqCst);
                    continue;
                }
                let quiet = since_start().saturating_sub(last_active.load(Ordering::SeqCst));
                if Duration::from_millis(quiet) >= settings.drained_after {
                    return true;
                }
            }
            false
        }));
    }
    let mut drained = true;
    for poller in pollers {
        drained &= poller
            .await
            .map_err(|e| ToolError::Other(format!("poller died: {e}")))?;
    }
    Ok(EsmStats {
        drained,
        ..counters.stats()
    })
}

/// One round of a poller: receive a batch (Lambda's rules), invoke the function on it (split
/// below the payload limit), delete what it did not report. Returns how many messages were
/// received. Like Lambda's poller, a failed SQS call is logged, counted and retried later,
/// never fatal.
pub async fn poll_once<I: Invoke>(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueuePair,
    function: &I,
    settings: &EsmSettings,
    counters: &Counters,
) -> usize {
    let batch = match receive_batch(sqs, queue, settings).await {
        Ok(batch) => batch,
        Err(e) => {
            warn!(error = %error_chain(&e), "receive failed; retrying");
            counters.errors.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            return 0;
        }
    };
    let received = batch.len();
    for part in split_by_payload(batch) {
        let done = invoke_and_delete(sqs, queue, function, part, settings, counters);
        if let Err(e) = done.await {
            warn!(error = %error_chain(&e), "delete failed; the messages come back");
            counters.errors.fetch_add(1, Ordering::SeqCst);
        }
    }
    received
}

/// The size a message adds to an event's JSON.
fn record_size(message: &Message, queue_arn: &str) -> usize {
    serde_json::to_vec(&lambda_record(message, queue_arn, "us-east-1")).map_or(0, |v| v.len() + 1)
}

/// The envelope around the records: `{"Records":[...]}`.
const ENVELOPE: usize = 16;

/// Cuts a received batch (each message with its record's size) into invocations whose events
/// stay within [`PAYLOAD_LIMIT`], keeping the receive order (a FIFO group's messages stay in
/// order across the parts). A single message above the limit cannot occur: SQS caps a message
/// far below it.
fn split_by_payload(batch: Vec<(Message, usize)>) -> Vec<Vec<Message>> {
    let mut parts: Vec<Vec<Message>> = Vec::new();
    let mut size = ENVELOPE;
    for (message, add) in batch {
        match parts.last_mut() {
            Some(part) if size + add <= PAYLOAD_LIMIT => {
                part.push(message);
                size += add;
            }
            _ => {
                parts.push(vec![message]);
                size = ENVELOPE + add;
            }
        }
    }
    parts
}

/// Up to `batch_size` messages, gathered until the batching window closes or the payload
/// limit is reached (Lambda's rules). An empty receive does not close the window: Lambda keeps
/// polling until it ends. Without a window the first non-empty receive is the batch. Each
/// message comes with the size of its record, measured once.
async fn receive_batch(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueuePair,
    settings: &EsmSettings,
) -> Result<Vec<(Message, usize)>, ToolError> {
    let window_ends = Instant::now() + settings.batching_window;
    let mut batch: Vec<(Message, usize)> = Vec::new();
    let mut payload = ENVELOPE;
    loop {
        let want = (settings.batch_size - batch.len()).min(10);
        let remaining = window_ends.saturating_duration_since(Instant::now());
        // Long-poll for the first message; then only within the window (SQS waits in whole
        // seconds: under one second left, short polls).
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
            .await;
        let output = match output {
            Ok(output) => output,
            // The messages already received are in flight: invoke with them rather than leave
            // them to their visibility timeout.
            Err(e) if !batch.is_empty() => {
                warn!(error = %error_chain(&e), "a receive within the batching window failed; invoking with the batch so far");
                return Ok(batch);
            }
            Err(e) => return Err(ToolError::aws("receive messages", e)),
        };
        let got = output.messages.unwrap_or_default();
        let empty = got.is_empty();
        for message in got {
            let size = record_size(&message, &queue.arn);
            payload += size;
            batch.push((message, size));
        }
        let window_over = Instant::now() >= window_ends;
        if batch.is_empty() {
            // Nothing yet: the caller decides whether the queue drained.
            return Ok(batch);
        }
        if batch.len() >= settings.batch_size || payload >= PAYLOAD_LIMIT || window_over {
            return Ok(batch);
        }
        if empty && wait_s == 0 {
            // A short poll found nothing: do not spin while the window runs.
            tokio::time::sleep(Duration::from_millis(50).min(remaining)).await;
        }
    }
}

/// The ids a response reports, checked as Lambda checks them: an empty id, or one that is not a
/// message of the batch, makes the whole invocation a failure.
fn reported_ids(response: SqsBatchResponse, batch: &[Message]) -> Result<HashSet<String>, String> {
    let ids: HashSet<&str> = batch.iter().filter_map(Message::message_id).collect();
    response
        .batch_item_failures
        .into_iter()
        .map(|failure| {
            let id = failure.item_identifier;
            if id.is_empty() || !ids.contains(id.as_str()) {
                Err(format!(
                    "batchItemFailures names {id:?}, which is not a message of the batch: the whole invocation failed"
                ))
            } else {
                Ok(id)
            }
        })
        .collect()
}

async fn invoke_and_delete<I: Invoke>(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueuePair,
    function: &I,
    batch: Vec<Message>,
    settings: &EsmSettings,
    counters: &Counters,
) -> Result<(), ToolError> {
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
    // The function timeout, as Lambda enforces it: a late answer is never read.
    let answer = match tokio::time::timeout(
        settings.function_timeout,
        function.invoke(&event, deadline_ms),
    )
    .await
    {
        Ok(answer) => answer,
        Err(_) => Err(format!(
            "the function ran past its timeout of {} ms",
            settings.function_timeout.as_millis()
        )),
    };
    let reported = answer.and_then(|response| reported_ids(response, &batch));
    let reported: HashSet<String> = match reported {
        Ok(reported) => reported,
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
            .map_err(|e| ToolError::aws("delete messages", e))?;
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
        let batch = sqs_batch::edge::Batch::from_event(&event)
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
