//! The function's own SQS calls under the simulator, through the real adapters: the shipped
//! `SqsVisibility` and `SqsDeadLetters`, wired as the function wires them (`app::sqs_visibility`,
//! `app::sqs_dead_letters`, their SDK bounds), talking through an in-process HTTP connector to
//! the simulated queue. So what the adapters do with SQS's answers, and what SQS refuses of
//! them, runs under every seed rather than being modelled.
//!
//! The connector serves the AWS JSON protocol's `GetQueueAttributes` (the source queue's
//! `RedrivePolicy` with its current `maxReceiveCount`, the DLQ's `MaximumMessageSize`),
//! `SendMessageBatch` and `ChangeMessageVisibilityBatch`, and holds them to SQS's limits:
//!
//! - a call of at most ten entries, with distinct ids, and at most [`BATCH_BYTES`] in all
//!   (`TooManyEntriesInBatchRequest`, `BatchEntryIdsNotDistinct`, `BatchRequestTooLong`, the
//!   whole call refused);
//! - a message of at most the DLQ's [`DLQ_MAX_MESSAGE_BYTES`], body and attributes counted as
//!   SQS counts them, at most ten attributes, names of SQS's characters, body and values in
//!   SQS's character set (the entry refused: `InvalidParameterValue`, `InvalidMessageContents`);
//! - a FIFO DLQ's group id required and its deduplication id honoured for five minutes;
//! - a visibility timeout of at most 12 hours from the receive (`InvalidParameterValue`), and
//!   only with the latest receipt (`ReceiptHandleIsInvalid`).
//!
//! Every refusal for a limit is recorded ([`crate::queue::Queue::refused`]) and is a broken
//! invariant: the adapters promise to fit SQS whatever the input. Transient faults stay as the
//! simulation has always had them, one roll per entry at `sqs_error_rate` (`InternalError`,
//! not a sender fault), so the SDK's retries (and their unseeded jitter) never run.

use aws_config::SdkConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};
use aws_smithy_runtime_api::client::http::HttpConnectorFuture;
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use serde_json::{Value, json};

use crate::http::{Serve, answer};
use std::sync::Arc;

use crate::queue::{self, Attr, Attrs, Dead, MAX_VISIBILITY_MS, SharedQueue, Stored};
use crate::worker::WorkerStop;
use crate::world::{EPOCH_MS, Shared, SimClock, Told};

/// SQS's limit on one batch call, all its entries together.
pub const BATCH_BYTES: usize = 1_048_576;
/// The DLQ's `MaximumMessageSize`: 256 KiB, the smallest SQS's queues are made with (the
/// template sets none), so a copy must fit the tightest DLQ a user may have.
pub const DLQ_MAX_MESSAGE_BYTES: usize = 262_144;
/// SQS's limit on a message's attributes.
pub const MAX_ATTRIBUTES: usize = 10;
/// A FIFO queue's deduplication window.
const DEDUPLICATION_MS: u64 = 300_000;

/// The source queue's ARN and its DLQ's, by queue kind.
pub fn arns(fifo: bool) -> (&'static str, &'static str) {
    if fifo {
        (
            "arn:aws:sqs:us-east-1:123456789012:orders.fifo",
            "arn:aws:sqs:us-east-1:123456789012:orders-dlq.fifo",
        )
    } else {
        (
            "arn:aws:sqs:us-east-1:123456789012:orders",
            "arn:aws:sqs:us-east-1:123456789012:orders-dlq",
        )
    }
}

/// A queue's URL, from its ARN.
pub fn url_of(arn: &str) -> String {
    let name = arn.rsplit(':').next().unwrap_or_default();
    format!("https://sqs.us-east-1.amazonaws.com/123456789012/{name}")
}

/// The SDK configuration a container's SQS clients are built on: the function's own wiring
/// then builds them (its bounds, at the first call) over this connector.
/// `learned` records each `maxReceiveCount` the redrive policy tells the container.
pub fn sdk_config(
    queue: &SharedQueue,
    world: &Shared,
    clock: &SimClock,
    learned: Told,
) -> SdkConfig {
    config_over(SimSqs {
        queue: queue.clone(),
        world: world.clone(),
        clock: clock.clone(),
        stop: None,
        learned: Some(learned),
    })
}

/// The SDK configuration of one worker's queue client (`ReceiveMessage`, `DeleteMessageBatch`):
/// its receives may schedule its `stop` ([`WorkerStop`]).
pub fn worker_sdk_config(
    queue: &SharedQueue,
    world: &Shared,
    clock: &SimClock,
    stop: Arc<WorkerStop>,
) -> SdkConfig {
    config_over(SimSqs {
        queue: queue.clone(),
        world: world.clone(),
        clock: clock.clone(),
        stop: Some(stop),
        learned: None,
    })
}

fn config_over(connector: SimSqs) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "sim", "sim", None, None, "sim",
        )))
        .endpoint_url("http://sqs.sim")
        .http_client(crate::http::client(connector))
        .build()
}

/// The connector: SQS as the function's calls meet it.
#[derive(Clone)]
struct SimSqs {
    queue: SharedQueue,
    world: Shared,
    /// The true clock.
    clock: SimClock,
    /// The stop of the worker whose client this is, if it is a worker's.
    stop: Option<Arc<WorkerStop>>,
    /// Where the redrive policy's answers to this container are recorded (its function's
    /// clients, not a worker's queue client).
    learned: Option<Told>,
}

impl std::fmt::Debug for SimSqs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimSqs").finish_non_exhaustive()
    }
}

impl Serve for SimSqs {
    fn serve(&self, request: HttpRequest) -> HttpConnectorFuture {
        let this = self.clone();
        HttpConnectorFuture::new(async move {
            let operation = crate::http::operation(&request);
            let body: Value = request
                .body()
                .bytes()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null);
            this.world.latency(30).await;
            let (status, json) = match operation.as_str() {
                "GetQueueAttributes" => this.get_queue_attributes(&body),
                "SendMessageBatch" => this.send_message_batch(&body),
                "ChangeMessageVisibilityBatch" => this.change_visibility_batch(&body),
                "ReceiveMessage" => this.receive_message(&body).await,
                "DeleteMessageBatch" => this.delete_message_batch(&body),
                other => error(
                    "UnsupportedOperation",
                    &format!("the simulated SQS does not serve {other}"),
                ),
            };
            Ok(answer(status, &json.to_string()))
        })
    }
}

/// A whole call refused, as SQS's JSON protocol answers it.
fn error(code: &str, message: &str) -> (u16, Value) {
    (
        400,
        json!({ "__type": format!("com.amazonaws.sqs#{code}"), "message": message }),
    )
}

/// One entry refused.
fn failed(id: &str, sender_fault: bool, code: &str, message: &str) -> Value {
    json!({ "Id": id, "SenderFault": sender_fault, "Code": code, "Message": message })
}

/// Whether every character is one SQS accepts in a body or attribute value:
/// `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`.
fn in_sqs_charset(text: &str) -> bool {
    text.chars().all(|c| {
        matches!(c, '\u{9}' | '\u{a}' | '\u{d}' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
            || c >= '\u{10000}'
    })
}

/// Whether `name` is an attribute name SQS accepts: up to 256 of `A-Za-z0-9_-.`, no leading or
/// trailing period, no two in a row, not starting with `AWS.` or `Amazon.`.
fn valid_attribute_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !name.to_ascii_lowercase().starts_with("aws.")
        && !name.to_ascii_lowercase().starts_with("amazon.")
}

/// An entry's `MessageAttributes` as SQS keeps them, or why they are refused.
fn attributes_of(entry: &Value) -> Result<Attrs, (&'static str, String)> {
    let mut out = Attrs::new();
    let Some(object) = entry.get("MessageAttributes").and_then(Value::as_object) else {
        return Ok(out);
    };
    if object.len() > MAX_ATTRIBUTES {
        return Err((
            "InvalidParameterValue",
            format!(
                "Number of message attributes [{}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].",
                object.len()
            ),
        ));
    }
    for (name, value) in object {
        if !valid_attribute_name(name) {
            return Err((
                "InvalidParameterValue",
                format!("Message attribute name '{name}' is invalid."),
            ));
        }
        let text = |field: &str| value.get(field).and_then(Value::as_str).map(str::to_owned);
        let attr = Attr {
            data_type: text("DataType").unwrap_or_default(),
            string_value: text("StringValue"),
            binary_value: text("BinaryValue"),
        };
        if attr.data_type.is_empty() || (attr.string_value.is_none() && attr.binary_value.is_none())
        {
            return Err((
                "InvalidParameterValue",
                format!("Message attribute '{name}' must have a type and a value."),
            ));
        }
        if attr
            .string_value
            .as_deref()
            .is_some_and(|v| !in_sqs_charset(v))
        {
            return Err((
                "InvalidMessageContents",
                format!("Message attribute '{name}' contains invalid characters."),
            ));
        }
        out.insert(name.clone(), attr);
    }
    Ok(out)
}

impl SimSqs {
    fn now_ms(&self) -> u64 {
        self.clock.sim_ms()
    }

    /// Records a refusal for one of SQS's limits.
    fn refuse(&self, code: &str, message: &str) {
        self.queue
            .lock()
            .refused
            .entry(code.to_owned())
            .or_default()
            .push(message.to_owned());
    }

    fn get_queue_attributes(&self, body: &Value) -> (u16, Value) {
        let url = body
            .get("QueueUrl")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let queue = self.queue.lock();
        let (source, dlq) = arns(queue.is_fifo());
        let names: Vec<&str> = body
            .get("AttributeNames")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut attributes = serde_json::Map::new();
        if url == url_of(source) {
            let asked = |name: &str| names.iter().any(|n| *n == name || *n == "All");
            if asked("QueueArn") {
                attributes.insert("QueueArn".into(), source.into());
            }
            if asked("ApproximateNumberOfMessages") {
                let visible = queue.visible(self.now_ms());
                attributes.insert(
                    "ApproximateNumberOfMessages".into(),
                    visible.to_string().into(),
                );
            }
            if names.iter().any(|n| matches!(*n, "RedrivePolicy" | "All")) {
                // SQS writes the count as a number; the adapter takes a string too.
                let policy = json!({
                    "deadLetterTargetArn": dlq,
                    "maxReceiveCount": queue.max_receive,
                });
                if let Some(learned) = &self.learned {
                    learned.record(self.now_ms(), queue.max_receive);
                }
                attributes.insert("RedrivePolicy".into(), policy.to_string().into());
            }
        } else if url == url_of(dlq) {
            if names
                .iter()
                .any(|n| matches!(*n, "MaximumMessageSize" | "All"))
            {
                attributes.insert(
                    "MaximumMessageSize".into(),
                    DLQ_MAX_MESSAGE_BYTES.to_string().into(),
                );
            }
        } else {
            return error("QueueDoesNotExist", "The specified queue does not exist.");
        }
        (200, json!({ "Attributes": attributes }))
    }

    fn entries<'b>(&self, body: &'b Value) -> Result<&'b [Value], (u16, Value)> {
        let entries = body
            .get("Entries")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let refuse = |code: &str, message: &str| {
            self.refuse(code, message);
            Err(error(code, message))
        };
        if entries.is_empty() {
            return refuse("EmptyBatchRequest", "There should be at least one entry.");
        }
        if entries.len() > 10 {
            return refuse(
                "TooManyEntriesInBatchRequest",
                &format!(
                    "Maximum number of entries per request are 10. You have sent {}.",
                    entries.len()
                ),
            );
        }
        let mut ids = std::collections::HashSet::new();
        if !entries
            .iter()
            .all(|e| ids.insert(e.get("Id").and_then(Value::as_str).unwrap_or_default()))
        {
            return refuse(
                "BatchEntryIdsNotDistinct",
                "Two or more batch entries have the same Id.",
            );
        }
        Ok(entries)
    }

    fn send_message_batch(&self, body: &Value) -> (u16, Value) {
        let entries = match self.entries(body) {
            Ok(entries) => entries,
            Err(refused) => return refused,
        };
        let url = body
            .get("QueueUrl")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let fifo = self.queue.lock().is_fifo();
        if url != url_of(arns(fifo).1) {
            return error("QueueDoesNotExist", "The specified queue does not exist.");
        }
        // Sizes first: SQS refuses the whole call when its entries together are too large.
        let mut parsed = Vec::with_capacity(entries.len());
        let mut total = 0;
        for entry in entries {
            let text = entry
                .get("MessageBody")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let attributes = attributes_of(entry);
            let bytes = text.len()
                + attributes
                    .as_ref()
                    .map_or(0, |a| a.iter().map(|(n, v)| v.bytes(n)).sum());
            total += bytes;
            parsed.push((entry, text, attributes, bytes));
        }
        if total > BATCH_BYTES {
            let message = format!(
                "Batch requests cannot be longer than {BATCH_BYTES} bytes. You have sent {total} bytes."
            );
            self.refuse("BatchRequestTooLong", &message);
            return error("BatchRequestTooLong", &message);
        }
        let now_ms = self.now_ms();
        let mut successful = Vec::new();
        let mut failures = Vec::new();
        for (entry, text, attributes, bytes) in parsed {
            let id = entry.get("Id").and_then(Value::as_str).unwrap_or_default();
            let refused = match attributes {
                Err(refused) => Err(refused),
                Ok(_) if text.is_empty() => Err((
                    "InvalidParameterValue",
                    "The message body must not be empty.".to_owned(),
                )),
                Ok(_) if !in_sqs_charset(&text) => Err((
                    "InvalidMessageContents",
                    "Invalid binary character in the message body.".to_owned(),
                )),
                Ok(_) if bytes > DLQ_MAX_MESSAGE_BYTES => Err((
                    "InvalidParameterValue",
                    format!(
                        "One or more parameters are invalid. Reason: Message must be shorter \
                         than {DLQ_MAX_MESSAGE_BYTES} bytes."
                    ),
                )),
                Ok(_) if fifo && entry.get("MessageGroupId").is_none() => Err((
                    "MissingParameter",
                    "The request must contain the parameter MessageGroupId.".to_owned(),
                )),
                Ok(attributes) => Ok(attributes),
            };
            let attributes = match refused {
                Ok(attributes) => attributes,
                Err((code, message)) => {
                    self.refuse(code, &message);
                    failures.push(failed(id, true, code, &message));
                    continue;
                }
            };
            {
                let mut queue = self.queue.lock();
                if let (Some(payload), Some(receive)) = (
                    queue.payload_of(&attributes),
                    failure_receive_count(&attributes),
                ) {
                    queue.moves_tried.insert((payload, receive));
                }
            }
            if self.world.chance(self.queue.lock().sqs_error_rate) {
                let at_give_up =
                    failure_reason(&attributes).is_some_and(|r| r == "retries_exhausted");
                // The world's record of a move that failed, at the receive it names: that
                // record may come back past its give-up.
                {
                    let mut queue = self.queue.lock();
                    if let (Some(payload), Some(receive), Some(reason)) = (
                        queue.payload_of(&attributes),
                        failure_receive_count(&attributes),
                        failure_reason(&attributes),
                    ) {
                        let moved = queue
                            .message_of(payload, Some(receive))
                            .filter(|m| m.receive_count == receive)
                            .map(|m| m.id.clone());
                        queue
                            .failed_moves
                            .insert((payload, receive), (reason, moved));
                    }
                }
                self.world.count(|f| {
                    f.sqs_errors += 1;
                    f.dlq_failures_at_give_up += usize::from(at_give_up);
                });
                failures.push(failed(id, false, "InternalError", "simulated"));
                continue;
            }
            successful.push(json!({
                "Id": id,
                "MessageId": format!("dlq-{now_ms}-{id}"),
                "MD5OfMessageBody": "00000000000000000000000000000000",
            }));
            self.arrive(entry, text, attributes, now_ms);
        }
        (200, json!({ "Successful": successful, "Failed": failures }))
    }

    /// A copy accepted into the DLQ (once per deduplication id on a FIFO DLQ).
    fn arrive(&self, entry: &Value, body: String, attributes: Attrs, now_ms: u64) {
        let mut queue = self.queue.lock();
        if let Some(dedup) = entry.get("MessageDeduplicationId").and_then(Value::as_str) {
            if queue
                .deduplication
                .get(dedup)
                .is_some_and(|at| now_ms < at + DEDUPLICATION_MS)
            {
                return;
            }
            queue.deduplication.insert(dedup.to_owned(), now_ms);
        }
        let reason = failure_reason(&attributes).unwrap_or_else(|| "(no failure attribute)".into());
        let Some(payload) = queue.payload_of(&attributes) else {
            queue.untraceable.push(reason);
            return;
        };
        // Two messages may carry one payload (a copy redriven twice): the one moved is at the
        // receive the function's failure attribute names.
        let moved_at = failure_receive_count(&attributes);
        let source = queue.message_of(payload, moved_at).map(|m| {
            self.world
                .tell(&m.order_id, || format!("a copy reaches the DLQ: {reason}"));
            (m.id.clone(), m.receive_count)
        });
        queue.dlq.push(Dead {
            payload,
            reason,
            body,
            attributes,
            at_ms: now_ms,
            source,
        });
    }

    /// `ReceiveMessage` on the source queue, for a worker: up to `MaxNumberOfMessages`, waiting
    /// up to `WaitTimeSeconds` for one to be sent or become visible (long polling), each with
    /// its system attributes and message attributes. A record handed out at the give-up's
    /// receive may bring the worker's stop.
    async fn receive_message(&self, body: &Value) -> (u16, Value) {
        let url = body
            .get("QueueUrl")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let fifo = self.queue.lock().is_fifo();
        if url != url_of(arns(fifo).0) {
            return error("QueueDoesNotExist", "The specified queue does not exist.");
        }
        let number =
            |name: &str, default: u64| body.get(name).and_then(Value::as_u64).unwrap_or(default);
        let max = usize::try_from(number("MaxNumberOfMessages", 1).clamp(1, 10)).unwrap_or(1);
        let until_ms = self.now_ms() + number("WaitTimeSeconds", 0).min(20) * 1_000;
        let received = loop {
            let now_ms = self.now_ms();
            let sent = self.queue.sent().notified();
            let (received, next_ms) = {
                let mut queue = self.queue.lock();
                let received = queue.receive(max, now_ms, &self.world);
                (received, queue.next_visible_ms(now_ms))
            };
            if !received.is_empty() || now_ms >= until_ms {
                break received;
            }
            let wait_ms = next_ms.map_or(until_ms, |at| at.min(until_ms)) - now_ms;
            tokio::select! {
                biased;
                () = sent => {}
                () = tokio::time::sleep(std::time::Duration::from_millis(wait_ms.max(1))) => {}
            }
        };
        let give_up = self.queue.lock().give_up_receive();
        for m in &received {
            self.world.tell(&m.order_id, || {
                format!(
                    "{}: received by a worker (receive {})",
                    m.id, m.receive_count
                )
            });
        }
        if let Some(stop) = &self.stop
            && received.iter().any(|m| m.receive_count >= give_up)
            && stop.maybe_at_give_up(&self.world, self.now_ms())
        {
            for m in received.iter().filter(|m| m.receive_count >= give_up) {
                self.world.tell(&m.order_id, || {
                    format!("{}: its worker is stopped while it holds it", m.id)
                });
            }
        }
        let messages: Vec<Value> = received.iter().map(|m| message_json(m, fifo)).collect();
        (200, json!({ "Messages": messages }))
    }

    /// `DeleteMessageBatch` on the source queue, for a worker: only with a message's latest
    /// receipt. A delete is what the worker makes of a decision, so the world holds it to one:
    /// the handler acknowledged the message at this receive, or a copy of it reached the DLQ
    /// since (a POISON the worker moved); anything else is recorded.
    fn delete_message_batch(&self, body: &Value) -> (u16, Value) {
        let entries = match self.entries(body) {
            Ok(entries) => entries,
            Err(refused) => return refused,
        };
        let error_rate = self.queue.lock().sqs_error_rate;
        let mut successful = Vec::new();
        let mut failures = Vec::new();
        for entry in entries {
            let id = entry.get("Id").and_then(Value::as_str).unwrap_or_default();
            let receipt = entry
                .get("ReceiptHandle")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if self.world.chance(error_rate) {
                self.world.count(|f| f.sqs_errors += 1);
                failures.push(failed(id, false, "InternalError", "simulated"));
                continue;
            }
            let mut queue = self.queue.lock();
            let Some(message) = queue.current(receipt) else {
                failures.push(failed(
                    id,
                    true,
                    "ReceiptHandleIsInvalid",
                    "The receipt handle has expired.",
                ));
                continue;
            };
            let (mid, count, payload, order) = (
                message.id.clone(),
                message.receive_count,
                message.payload,
                message.order_id.clone(),
            );
            let received_ms = message.received_ms;
            let outcome = self.world.lock().tried.get(&(mid.clone(), count)).copied();
            let moved = queue
                .dlq
                .iter()
                .any(|d| d.payload == payload && d.at_ms >= received_ms);
            let acked = outcome == Some(Some(sqs_batch::processor::Decision::Ack));
            if !acked && !moved {
                queue.deleted_undecided.push((
                    payload,
                    format!(
                        "{mid} deleted at receive {count}, where its handler answered {outcome:?}"
                    ),
                ));
            }
            queue.delete(receipt, if moved { "moved" } else { "acknowledged" });
            drop(queue);
            self.world
                .tell(&order, || format!("{mid}: deleted by its worker"));
            successful.push(json!({ "Id": id }));
        }
        (200, json!({ "Successful": successful, "Failed": failures }))
    }

    fn change_visibility_batch(&self, body: &Value) -> (u16, Value) {
        let entries = match self.entries(body) {
            Ok(entries) => entries,
            Err(refused) => return refused,
        };
        let now_ms = self.now_ms();
        let error_rate = self.queue.lock().sqs_error_rate;
        let mut successful = Vec::new();
        let mut failures = Vec::new();
        for entry in entries {
            let id = entry.get("Id").and_then(Value::as_str).unwrap_or_default();
            let receipt = entry
                .get("ReceiptHandle")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let seconds = entry
                .get("VisibilityTimeout")
                .and_then(Value::as_i64)
                .unwrap_or(-1);
            if self.world.chance(error_rate) {
                self.world.count(|f| f.sqs_errors += 1);
                failures.push(failed(id, false, "InternalError", "simulated"));
                continue;
            }
            let mut queue = self.queue.lock();
            let Some(message) = queue.current(receipt) else {
                failures.push(failed(
                    id,
                    true,
                    "ReceiptHandleIsInvalid",
                    "The receipt handle has expired.",
                ));
                continue;
            };
            let until_ms = u64::try_from(seconds)
                .ok()
                .map(|s| now_ms + s * 1_000)
                .filter(|until| *until <= message.received_ms + MAX_VISIBILITY_MS);
            let Some(until_ms) = until_ms else {
                let message = format!(
                    "Value {seconds} for parameter VisibilityTimeout is invalid. Reason: \
                     Total VisibilityTimeout for the message is beyond the limit [43200 seconds]."
                );
                drop(queue);
                self.refuse("InvalidParameterValue", &message);
                failures.push(failed(id, true, "InvalidParameterValue", &message));
                continue;
            };
            let early = (message.backed_off && until_ms < message.visible_at_ms).then(|| {
                queue::EarlyReturn {
                    order_id: message.order_id.clone(),
                    id: message.id.clone(),
                    receive_count: message.receive_count,
                    first_receive_ms: message.first_receive_ms,
                    back_ms: until_ms,
                }
            });
            message.visible_at_ms = until_ms;
            message.visibility_set_s = u64::try_from(seconds).ok();
            let (order, mid) = (message.order_id.clone(), message.id.clone());
            queue.early_returns.extend(early);
            drop(queue);
            self.world
                .tell(&order, || format!("{mid}: visible again in {seconds} s"));
            successful.push(json!({ "Id": id }));
        }
        (200, json!({ "Successful": successful, "Failed": failures }))
    }
}

/// A received message as `ReceiveMessage` answers it in the AWS JSON protocol: its system
/// attributes (receive count, first receive, group) and its message attributes.
fn message_json(m: &Stored, fifo: bool) -> Value {
    let mut system = serde_json::Map::new();
    system.insert(
        "ApproximateReceiveCount".into(),
        m.receive_count.to_string().into(),
    );
    if let Some(first) = m.first_receive_ms {
        system.insert(
            "ApproximateFirstReceiveTimestamp".into(),
            first.to_string().into(),
        );
    }
    system.insert("SentTimestamp".into(), EPOCH_MS.to_string().into());
    if fifo && let Some(group) = &m.group {
        system.insert("MessageGroupId".into(), group.clone().into());
    }
    let attributes: serde_json::Map<String, Value> = m
        .attributes
        .iter()
        .map(|(name, a)| {
            let mut value = serde_json::Map::new();
            value.insert("DataType".into(), a.data_type.clone().into());
            if let Some(text) = &a.string_value {
                value.insert("StringValue".into(), text.clone().into());
            }
            if let Some(binary) = &a.binary_value {
                value.insert("BinaryValue".into(), binary.clone().into());
            }
            (name.clone(), Value::Object(value))
        })
        .collect();
    json!({
        "MessageId": m.id,
        "ReceiptHandle": m.receipt,
        "Body": m.body,
        "Attributes": system,
        "MessageAttributes": attributes,
    })
}

/// The receive count a DLQ copy's failure attribute names, if it carries a readable one.
fn failure_receive_count(attributes: &Attrs) -> Option<u32> {
    attributes
        .get(sqs_batch::dead_letter::FAILURE_ATTRIBUTE)
        .and_then(|a| a.string_value.as_deref())
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|failure| failure.get("receive_count")?.as_u64())
        .and_then(|n| u32::try_from(n).ok())
}

/// The reason a DLQ copy's failure attribute names, if it carries a readable one.
fn failure_reason(attributes: &Attrs) -> Option<String> {
    attributes
        .get(sqs_batch::dead_letter::FAILURE_ATTRIBUTE)
        .and_then(|a| a.string_value.as_deref())
        .and_then(|text| serde_json::from_str::<Value>(text).ok())
        .and_then(|failure| failure.get("reason")?.as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqs_characters_and_attribute_names_are_checked_as_sqs_does() {
        assert!(in_sqs_charset("an order \u{e9}\t\n\r \u{1f600}"));
        assert!(!in_sqs_charset("nul \u{0}"));
        assert!(!in_sqs_charset("bell \u{7}"));
        assert!(!in_sqs_charset("not a character \u{ffff}"));
        assert!(valid_attribute_name("dead-letter-failure"));
        assert!(valid_attribute_name("trace.id_2"));
        for bad in [
            "",
            ".x",
            "x.",
            "a..b",
            "AWS.trace",
            "amazon.x",
            "sp ace",
            "é",
        ] {
            assert!(!valid_attribute_name(bad), "{bad:?}");
        }
        assert!(!valid_attribute_name(&"a".repeat(257)));
    }
}
