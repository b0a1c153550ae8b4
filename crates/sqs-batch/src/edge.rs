//! The SQS edge: Lambda's event in, `batchItemFailures` out.
//!
//! A function reads Lambda's payload through [`EventView`], which borrows the fields the
//! processor uses straight from the JSON text; `aws_lambda_events`' owned types stay at the edges
//! (responses, tests, a local event source mapping) and produce the same [`Batch`]. Everything
//! else sees each record through [`Message`], so the processor never depends on how the event
//! was parsed.
//!
//! # Example
//!
//! ```
//! use sqs_batch::edge::{Batch, EventView, check_response, response};
//!
//! let json = r#"{"Records": [
//!     {"messageId": "m-1", "body": "{}", "attributes": {"ApproximateReceiveCount": "2"}},
//!     {"messageId": "m-2", "body": "{}"}
//! ]}"#;
//! let view = EventView::parse(json).unwrap();
//! let batch = Batch::from_view(&view).unwrap();
//! assert_eq!(batch.messages[0].receive_count, Some(2));
//! // Report m-2; the check refuses an id the batch does not have.
//! let answer = response(["m-2"]);
//! assert!(check_response(&answer, &batch.messages).is_ok());
//! assert!(check_response(&response(["m-9"]), &batch.messages).is_err());
//! ```

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use aws_lambda_events::sqs::SqsMessageAttribute;
/// `aws_lambda_events`' owned SQS types, which the edge converts from and to.
pub use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use serde_json::value::RawValue;

/// A whole event that cannot be processed. Lambda retries the batch. Variants may be added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The payload is not an SQS event.
    #[error("the event is not an SQS event: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error(
        "record {index} has no usable messageId, so it could not be reported as failed; \
         failing the invocation so Lambda retries the batch"
    )]
    /// A record's `messageId` is missing or blank.
    MissingMessageId {
        /// The record's position in the batch.
        index: usize,
    },
    #[error(
        "the response failed its check ({0}); failing the invocation so Lambda retries the batch"
    )]
    /// The response would be refused or misread by Lambda.
    InvalidResponse(#[from] ResponseError),
    /// Every record failed, and the function was asked to fail the invocation then
    /// (`SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE`).
    #[error(transparent)]
    EntireBatchFailed(#[from] EntireBatchFailed),
}

/// Every record of the invocation failed, and the function was asked to fail the invocation
/// then ([`BatchOptions::fail_on_entire_batch_failure`](crate::BatchOptions::fail_on_entire_batch_failure)): Lambda returns the whole batch to the
/// queue, as it would have with every record reported.
#[derive(Debug, thiserror::Error)]
#[error("all {records} records of the batch failed ({reasons})")]
#[non_exhaustive]
pub struct EntireBatchFailed {
    /// How many records the batch had.
    pub records: usize,
    /// Records per reason, as the summary line has them.
    pub reasons: String,
}

/// Typed access to the SQS system attributes Lambda puts on a record.
pub trait SqsMessageExt {
    /// `ApproximateReceiveCount`; `None` when absent or not a number.
    fn receive_count(&self) -> Option<u32>;
    /// `MessageGroupId` (FIFO queues only).
    fn message_group_id(&self) -> Option<&str>;
    /// `SequenceNumber` (FIFO queues only).
    fn sequence_number(&self) -> Option<&str>;
    /// `ApproximateFirstReceiveTimestamp` in epoch milliseconds.
    fn first_receive_ms(&self) -> Option<u64>;
    /// The ARN of the queue the record came from.
    fn queue_arn(&self) -> Option<&str>;
}

impl SqsMessageExt for SqsMessage {
    fn receive_count(&self) -> Option<u32> {
        self.attributes.get("ApproximateReceiveCount")?.parse().ok()
    }

    fn message_group_id(&self) -> Option<&str> {
        self.attributes.get("MessageGroupId").map(String::as_str)
    }

    fn sequence_number(&self) -> Option<&str> {
        self.attributes.get("SequenceNumber").map(String::as_str)
    }

    fn first_receive_ms(&self) -> Option<u64> {
        self.attributes
            .get("ApproximateFirstReceiveTimestamp")?
            .parse()
            .ok()
    }

    fn queue_arn(&self) -> Option<&str> {
        self.event_source_arn.as_deref()
    }
}

/// One record, as the processor and the handlers see it.
///
/// Fields will be added as SQS adds attributes worth reading; build one with [`Message::new`]
/// and the `with_` methods.
///
/// # Example
///
/// ```
/// use sqs_batch::Message;
///
/// let message = Message::new("m-1", r#"{"order_id": "o-1"}"#).with_receive_count(Some(2));
/// assert_eq!((message.message_id, message.receive_count), ("m-1", Some(2)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message<'a> {
    /// The SQS message id: what `batchItemFailures` reports.
    pub message_id: &'a str,
    /// The body; an absent body reads as empty, which no handler accepts.
    pub body: &'a str,
    /// `ApproximateReceiveCount`; `None` when absent or not a number.
    pub receive_count: Option<u32>,
    /// `MessageGroupId`: FIFO queues, and standard queues with fair queueing.
    pub group_id: Option<&'a str>,
    /// `ApproximateFirstReceiveTimestamp`, epoch ms.
    pub first_receive_ms: Option<u64>,
    /// Needed only to change the record's visibility.
    pub receipt_handle: Option<&'a str>,
    /// `AWSTraceHeader`: the producer's X-Ray trace (`Root=...;Parent=...;Sampled=...`), which
    /// the record's trace span links to.
    pub trace_header: Option<&'a str>,
    /// `DeadLetterQueueSourceArn`: SQS sets it on a message it moved to a dead-letter queue
    /// itself. A record received with it has been in a DLQ (when a redrive keeps it, which AWS
    /// does not document either way).
    pub dead_letter_source: Option<&'a str>,
    /// The producer's message attributes, read when a handler asks for one.
    pub attributes: MessageAttributes<'a>,
}

impl<'a> Message<'a> {
    /// A record with only an id and a body, for tests and tools.
    pub fn new(message_id: &'a str, body: &'a str) -> Self {
        Self {
            message_id,
            body,
            receive_count: None,
            group_id: None,
            first_receive_ms: None,
            receipt_handle: None,
            trace_header: None,
            dead_letter_source: None,
            attributes: MessageAttributes::None,
        }
    }

    /// The same record with another body (a claim check's loaded payload, for example).
    pub fn with_body(&self, body: &'a str) -> Self {
        Self {
            body,
            ..self.clone()
        }
    }

    /// With its `ApproximateReceiveCount`.
    pub fn with_receive_count(self, receive_count: Option<u32>) -> Self {
        Self {
            receive_count,
            ..self
        }
    }

    /// With its `MessageGroupId`.
    pub fn with_group_id(self, group_id: Option<&'a str>) -> Self {
        Self { group_id, ..self }
    }

    /// With its `ApproximateFirstReceiveTimestamp`, epoch ms.
    pub fn with_first_receive_ms(self, first_receive_ms: Option<u64>) -> Self {
        Self {
            first_receive_ms,
            ..self
        }
    }

    /// With its receipt handle.
    pub fn with_receipt_handle(self, receipt_handle: Option<&'a str>) -> Self {
        Self {
            receipt_handle,
            ..self
        }
    }

    /// With its `AWSTraceHeader`.
    pub fn with_trace_header(self, trace_header: Option<&'a str>) -> Self {
        Self {
            trace_header,
            ..self
        }
    }

    /// With its `DeadLetterQueueSourceArn`.
    pub fn with_dead_letter_source(self, dead_letter_source: Option<&'a str>) -> Self {
        Self {
            dead_letter_source,
            ..self
        }
    }

    /// With its message attributes.
    pub fn with_attributes(self, attributes: MessageAttributes<'a>) -> Self {
        Self { attributes, ..self }
    }
}

/// A record's message attributes (the producer's, not SQS's system attributes). Kept as they
/// came, raw JSON or `aws_lambda_events`' map, and read only when a handler asks for one: most
/// handlers never do, and parsing every record's attributes would cost every batch.
#[derive(Debug, Clone, Copy, Default)]
pub enum MessageAttributes<'a> {
    /// None were sent.
    #[default]
    None,
    /// The `messageAttributes` object of Lambda's payload, unparsed.
    Raw(&'a RawValue),
    /// As `aws_lambda_events` parsed them.
    Parsed(&'a HashMap<String, SqsMessageAttribute>),
}

impl<'a> MessageAttributes<'a> {
    /// The `stringValue` of the attribute `name` (String and Number attributes carry one).
    pub fn string(&self, name: &str) -> Option<Cow<'a, str>> {
        match self {
            Self::None => None,
            Self::Raw(raw) => {
                use serde::de::DeserializeSeed;
                let mut json = serde_json::Deserializer::from_str(raw.get());
                FindAttribute(name).deserialize(&mut json).ok().flatten()
            }
            Self::Parsed(map) => map.get(name)?.string_value.as_deref().map(Cow::Borrowed),
        }
    }
}

impl<'a> MessageAttributes<'a> {
    /// Lambda's raw `messageAttributes`; an empty object or `null` is no attributes.
    fn from_raw(raw: Option<&'a RawValue>) -> Self {
        match raw.map(RawValue::get) {
            None | Some("null") => Self::None,
            Some(text)
                if text
                    .strip_prefix('{')
                    .and_then(|t| t.strip_suffix('}'))
                    .is_some_and(|inner| inner.trim().is_empty()) =>
            {
                Self::None
            }
            Some(_) => raw.map_or(Self::None, Self::Raw),
        }
    }

    /// Every attribute, parsed (for comparisons and dead-letter copies, not the hot path); none
    /// when they cannot be read.
    pub(crate) fn to_map(self) -> HashMap<String, SqsMessageAttribute> {
        self.try_to_map().unwrap_or_default()
    }

    /// Every attribute, parsed, or `None` when Lambda's raw attributes cannot be read.
    pub(crate) fn try_to_map(self) -> Option<HashMap<String, SqsMessageAttribute>> {
        match self {
            Self::None => Some(HashMap::new()),
            Self::Raw(raw) => serde_json::from_str(raw.get()).ok(),
            Self::Parsed(map) => Some(map.clone()),
        }
    }
}

/// The same attributes, however each side holds them.
impl PartialEq for MessageAttributes<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Raw(a), Self::Raw(b)) => a.get() == b.get(),
            (Self::Parsed(a), Self::Parsed(b)) => a == b,
            _ => self.to_map() == other.to_map(),
        }
    }
}

impl Eq for MessageAttributes<'_> {}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttributeValueView<'a> {
    #[serde(borrow, default)]
    string_value: Option<Text<'a>>,
}

/// Reads one attribute's `stringValue` out of the raw `messageAttributes` object, skipping the
/// others without storing them (no map built per record).
struct FindAttribute<'n>(&'n str);

impl<'de, 'n> serde::de::DeserializeSeed<'de> for FindAttribute<'n> {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, 'n> serde::de::Visitor<'de> for FindAttribute<'n> {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object of message attributes")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Text<'de>>()? {
            if found.is_none() && key.0 == self.0 {
                let value: AttributeValueView<'de> = map.next_value()?;
                found = value.string_value.map(|t| t.0);
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// How a batch must be processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueueKind {
    /// Records are independent.
    Standard,
    /// Order matters (the ARN ends in `.fifo`).
    Fifo,
}

impl QueueKind {
    /// `standard` or `fifo`, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Fifo => "fifo",
        }
    }
}

/// Parses an event from JSON text into `aws_lambda_events`' owned types (tests and tools; the
/// function itself reads events with [`EventView`]).
pub fn parse_event(json: &str) -> Result<SqsEvent, EventError> {
    serde_json::from_str(json).map_err(EventError::Malformed)
}

/// One event's records, ready for the processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch<'a> {
    /// The records, in batch order.
    pub messages: Vec<Message<'a>>,
    /// FIFO when the source ARN ends in `.fifo` (without an ARN: when a record has a group).
    pub kind: QueueKind,
    /// The source queue's ARN (all records of one event come from one queue).
    pub queue_arn: Option<&'a str>,
}

/// The fields of one record the function reads, whichever parser produced them.
struct Fields<'a> {
    message_id: Option<&'a str>,
    body: Option<&'a str>,
    receive_count: Option<&'a str>,
    group_id: Option<&'a str>,
    first_receive_ms: Option<&'a str>,
    receipt_handle: Option<&'a str>,
    queue_arn: Option<&'a str>,
    trace_header: Option<&'a str>,
    dead_letter_source: Option<&'a str>,
    attributes: MessageAttributes<'a>,
}

impl<'a> Batch<'a> {
    /// From `aws_lambda_events`' owned event (the local event source mapping, tests).
    pub fn from_event(event: &'a SqsEvent) -> Result<Self, EventError> {
        Self::collect(event.records.iter().map(|r| {
            Fields {
                message_id: r.message_id.as_deref(),
                body: r.body.as_deref(),
                receive_count: r
                    .attributes
                    .get("ApproximateReceiveCount")
                    .map(String::as_str),
                group_id: r.message_group_id(),
                first_receive_ms: r
                    .attributes
                    .get("ApproximateFirstReceiveTimestamp")
                    .map(String::as_str),
                receipt_handle: r.receipt_handle.as_deref(),
                queue_arn: r.queue_arn(),
                trace_header: r.attributes.get("AWSTraceHeader").map(String::as_str),
                dead_letter_source: r
                    .attributes
                    .get("DeadLetterQueueSourceArn")
                    .map(String::as_str),
                attributes: if r.message_attributes.is_empty() {
                    MessageAttributes::None
                } else {
                    MessageAttributes::Parsed(&r.message_attributes)
                },
            }
        }))
    }

    /// From the borrowed view the function parses Lambda's payload into.
    pub fn from_view(event: &'a EventView<'_>) -> Result<Self, EventError> {
        Self::collect(event.records.iter().map(|r| {
            let attributes = r.attributes.as_ref();
            Fields {
                message_id: text(&r.message_id),
                body: text(&r.body),
                receive_count: attributes.and_then(|a| text(&a.receive_count)),
                group_id: attributes.and_then(|a| text(&a.group_id)),
                first_receive_ms: attributes.and_then(|a| text(&a.first_receive_ms)),
                receipt_handle: text(&r.receipt_handle),
                queue_arn: text(&r.event_source_arn),
                trace_header: attributes.and_then(|a| text(&a.trace_header)),
                dead_letter_source: attributes.and_then(|a| text(&a.dead_letter_source)),
                attributes: MessageAttributes::from_raw(r.message_attributes),
            }
        }))
    }

    fn collect(records: impl ExactSizeIterator<Item = Fields<'a>>) -> Result<Self, EventError> {
        let mut batch = Batch {
            messages: Vec::with_capacity(records.len()),
            kind: QueueKind::Standard,
            queue_arn: None,
        };
        let mut any_group = false;
        for (index, r) in records.enumerate() {
            let message_id = r
                .message_id
                .filter(|id| !id.trim().is_empty())
                .ok_or(EventError::MissingMessageId { index })?;
            any_group |= r.group_id.is_some();
            batch.queue_arn = batch.queue_arn.or(r.queue_arn);
            batch.messages.push(Message {
                message_id,
                body: r.body.unwrap_or(""),
                // A count or timestamp that is not a number reads as unknown.
                receive_count: r.receive_count.and_then(|v| v.parse().ok()),
                group_id: r.group_id,
                first_receive_ms: r.first_receive_ms.and_then(|v| v.parse().ok()),
                receipt_handle: r.receipt_handle,
                trace_header: r.trace_header,
                dead_letter_source: r.dead_letter_source,
                attributes: r.attributes,
            });
        }
        // The queue decides, not the records: standard queues carry group ids too when producers
        // use SQS fair queues, and must not be slowed to FIFO order. Lambda always names the
        // queue; only a hand-written event without any ARN falls back to the group ids.
        batch.kind = match batch.queue_arn {
            Some(arn) if arn.ends_with(".fifo") => QueueKind::Fifo,
            None if any_group => QueueKind::Fifo,
            _ => QueueKind::Standard,
        };
        Ok(batch)
    }
}

/// Lambda's SQS event, read borrowed from the payload: only the fields the function uses, each
/// string borrowed unless JSON escapes force a copy (bodies holding JSON do). Every other field
/// is skipped without being stored. `aws_lambda_events::sqs::SqsEvent` builds owned strings and
/// two maps per record; on a 10,000-record event that costs more than the whole processing.
#[derive(Debug, serde::Deserialize)]
pub struct EventView<'a> {
    #[serde(rename = "Records", borrow)]
    records: Vec<RecordView<'a>>,
}

impl<'a> EventView<'a> {
    /// Reads Lambda's payload, borrowing from it.
    pub fn parse(json: &'a str) -> Result<Self, EventError> {
        serde_json::from_str(json).map_err(EventError::Malformed)
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// No records.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordView<'a> {
    #[serde(borrow, default)]
    message_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    receipt_handle: Option<Text<'a>>,
    #[serde(borrow, default)]
    body: Option<Text<'a>>,
    #[serde(borrow, default)]
    attributes: Option<AttributesView<'a>>,
    #[serde(rename = "eventSourceARN", borrow, default)]
    event_source_arn: Option<Text<'a>>,
    /// Kept raw: read only if a handler asks (see [`MessageAttributes`]).
    #[serde(borrow, default)]
    message_attributes: Option<&'a RawValue>,
}

#[derive(Debug, serde::Deserialize)]
struct AttributesView<'a> {
    #[serde(rename = "ApproximateReceiveCount", borrow, default)]
    receive_count: Option<Text<'a>>,
    #[serde(rename = "MessageGroupId", borrow, default)]
    group_id: Option<Text<'a>>,
    #[serde(rename = "ApproximateFirstReceiveTimestamp", borrow, default)]
    first_receive_ms: Option<Text<'a>>,
    #[serde(rename = "AWSTraceHeader", borrow, default)]
    trace_header: Option<Text<'a>>,
    #[serde(rename = "DeadLetterQueueSourceArn", borrow, default)]
    dead_letter_source: Option<Text<'a>>,
}

/// A JSON string, borrowed from the input when it has no escapes.
#[derive(Debug)]
struct Text<'a>(Cow<'a, str>);

fn text<'b>(value: &'b Option<Text<'_>>) -> Option<&'b str> {
    value.as_ref().map(|t| t.0.as_ref())
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// A response Lambda would reject or misread.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResponseError {
    /// An empty identifier.
    #[error("an itemIdentifier is empty")]
    EmptyIdentifier,
    /// The same identifier twice.
    #[error("itemIdentifier {0:?} is listed twice")]
    DuplicateIdentifier(String),
    /// An identifier that is no message of the batch.
    #[error("itemIdentifier {0:?} is not a messageId of this batch")]
    UnknownIdentifier(String),
}

/// Builds the response from the ids to retry, reporting each id once, in the order given.
pub fn response<'a>(failed: impl IntoIterator<Item = &'a str>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    let mut seen = HashSet::new();
    for id in failed {
        // A batch with a repeated messageId is one message to SQS: report it once.
        if seen.insert(id) {
            response.add_failure(id);
        }
    }
    response
}

/// Checks a response before it goes back to Lambda: every identifier non-empty, unique and a
/// messageId of this batch. Lambda treats a bad identifier as a failure of the whole batch.
pub fn check_response(
    response: &SqsBatchResponse,
    batch: &[Message<'_>],
) -> Result<(), ResponseError> {
    if response.batch_item_failures.is_empty() {
        return Ok(());
    }
    let known: HashSet<&str> = batch.iter().map(|m| m.message_id).collect();
    let mut seen = HashSet::with_capacity(response.batch_item_failures.len());
    for failure in &response.batch_item_failures {
        let id = failure.item_identifier.as_str();
        if id.is_empty() {
            return Err(ResponseError::EmptyIdentifier);
        }
        if !known.contains(id) {
            return Err(ResponseError::UnknownIdentifier(id.to_owned()));
        }
        if !seen.insert(id) {
            return Err(ResponseError::DuplicateIdentifier(id.to_owned()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builders users build records with (the fields are not theirs to write): each sets
    /// what it names and nothing else; `with_body` keeps every other field.
    #[test]
    fn messages_are_built_as_named() {
        let raw = RawValue::from_string("{}".to_owned()).expect("raw JSON");
        let message = Message::new("m1", "body")
            .with_receive_count(Some(3))
            .with_group_id(Some("g"))
            .with_first_receive_ms(Some(9))
            .with_receipt_handle(Some("r"))
            .with_trace_header(Some("Root=1"))
            .with_attributes(MessageAttributes::Raw(&raw));
        assert_eq!(
            (message.message_id, message.body, message.receive_count),
            ("m1", "body", Some(3))
        );
        assert_eq!(
            (
                message.group_id,
                message.first_receive_ms,
                message.receipt_handle
            ),
            (Some("g"), Some(9), Some("r"))
        );
        assert_eq!(message.trace_header, Some("Root=1"));
        assert!(matches!(message.attributes, MessageAttributes::Raw(_)));
        let loaded = message.with_body("payload");
        assert_eq!(loaded.body, "payload");
        assert_eq!(
            Message {
                body: "body",
                ..loaded
            },
            message
        );
    }

    fn event(records: serde_json::Value) -> SqsEvent {
        serde_json::from_value(serde_json::json!({ "Records": records })).expect("test event")
    }

    #[test]
    fn typed_accessors_read_the_system_attributes() {
        let ev = event(serde_json::json!([{
            "messageId": "m1", "body": "{}",
            "attributes": {
                "ApproximateReceiveCount": "3", "MessageGroupId": "g1",
                "SequenceNumber": "18849496460467696128", "ApproximateFirstReceiveTimestamp": "1545082649185"
            },
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders.fifo"
        }]));
        let r = &ev.records[0];
        assert_eq!(r.receive_count(), Some(3));
        assert_eq!(r.message_group_id(), Some("g1"));
        assert_eq!(r.sequence_number(), Some("18849496460467696128"));
        assert_eq!(r.first_receive_ms(), Some(1_545_082_649_185));
        assert_eq!(
            r.queue_arn(),
            Some("arn:aws:sqs:us-east-1:123456789012:orders.fifo")
        );
        assert_eq!(Batch::from_event(&ev).expect("batch").kind, QueueKind::Fifo);
    }

    /// SQS's mark on a message it moved to a DLQ itself is read by both readers.
    #[test]
    fn a_dead_letter_source_is_read_from_either_form_of_the_event() {
        let records = serde_json::json!([{
            "messageId": "m1", "body": "{}",
            "attributes": { "DeadLetterQueueSourceArn": "arn:aws:sqs:us-east-1:1:orders" }
        }, { "messageId": "m2", "body": "{}", "attributes": {} }]);
        let owned = event(records.clone());
        let json = serde_json::json!({ "Records": records }).to_string();
        let view = EventView::parse(&json).expect("view");
        for batch in [
            Batch::from_event(&owned).expect("batch"),
            Batch::from_view(&view).expect("batch"),
        ] {
            let sources: Vec<_> = batch
                .messages
                .iter()
                .map(|m| m.dead_letter_source)
                .collect();
            assert_eq!(sources, [Some("arn:aws:sqs:us-east-1:1:orders"), None]);
        }
    }

    #[test]
    fn a_receive_count_that_is_not_a_number_reads_as_unknown() {
        let ev = event(serde_json::json!([{
            "messageId": "m1", "body": "{}", "attributes": { "ApproximateReceiveCount": "many" }
        }]));
        assert_eq!(ev.records[0].receive_count(), None);
    }

    #[test]
    fn queue_kind_comes_from_the_arn_and_a_group_id_is_only_a_group_id() {
        let standard = event(serde_json::json!([{
            "messageId": "m1", "eventSourceARN": "arn:aws:sqs:us-east-1:1:orders"
        }]));
        assert_eq!(
            Batch::from_event(&standard).expect("batch").kind,
            QueueKind::Standard
        );
        // SQS fair queues: a standard queue whose records carry the tenant as MessageGroupId.
        let fair = event(serde_json::json!([{
            "messageId": "m1", "eventSourceARN": "arn:aws:sqs:us-east-1:1:orders",
            "attributes": { "MessageGroupId": "tenant-a" }
        }]));
        let batch = Batch::from_event(&fair).expect("batch");
        assert_eq!(batch.kind, QueueKind::Standard);
        assert_eq!(batch.messages[0].group_id, Some("tenant-a"));
        let fifo = event(serde_json::json!([{
            "messageId": "m1", "eventSourceARN": "arn:aws:sqs:us-east-1:1:orders.fifo",
            "attributes": { "MessageGroupId": "g" }
        }]));
        assert_eq!(
            Batch::from_event(&fifo).expect("batch").kind,
            QueueKind::Fifo
        );
        // Lambda always names the queue; an event without any ARN (hand-written) falls back to
        // the group id, the order-preserving reading.
        let grouped = event(serde_json::json!([{
            "messageId": "m1", "attributes": { "MessageGroupId": "g" }
        }]));
        assert_eq!(
            Batch::from_event(&grouped).expect("batch").kind,
            QueueKind::Fifo
        );
    }

    #[test]
    fn a_record_without_a_usable_message_id_fails_the_event() {
        for bad in [
            serde_json::json!(null),
            serde_json::json!(""),
            serde_json::json!("  "),
        ] {
            let ev = event(
                serde_json::json!([{ "messageId": "ok", "body": "{}" }, { "messageId": bad, "body": "{}" }]),
            );
            assert!(matches!(
                Batch::from_event(&ev),
                Err(EventError::MissingMessageId { index: 1 })
            ));
        }
        let missing = event(serde_json::json!([{ "body": "{}" }]));
        assert!(matches!(
            Batch::from_event(&missing),
            Err(EventError::MissingMessageId { index: 0 })
        ));
    }

    #[test]
    fn a_missing_body_reads_as_empty() {
        let ev = event(serde_json::json!([{ "messageId": "m1" }]));
        assert_eq!(Batch::from_event(&ev).expect("batch").messages[0].body, "");
    }

    #[test]
    fn response_reports_each_id_once_in_order() {
        let r = response(["b", "a", "b"]);
        let ids: Vec<_> = r
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(ids, ["b", "a"]);
    }

    #[test]
    fn check_response_rejects_empty_unknown_and_repeated_ids() {
        let batch = [Message::new("a", ""), Message::new("b", "")];
        assert_eq!(check_response(&response(["a", "b"]), &batch), Ok(()));
        assert_eq!(
            check_response(&response([""]), &batch),
            Err(ResponseError::EmptyIdentifier)
        );
        assert_eq!(
            check_response(&response(["c"]), &batch),
            Err(ResponseError::UnknownIdentifier("c".into()))
        );
        let mut twice = response(["a"]);
        twice
            .batch_item_failures
            .push(twice.batch_item_failures[0].clone());
        assert_eq!(
            check_response(&twice, &batch),
            Err(ResponseError::DuplicateIdentifier("a".into()))
        );
    }

    #[test]
    fn the_view_borrows_plain_strings_and_copies_only_escaped_ones() {
        let json = r#"{"Records":[{"messageId":"m1","body":"{\"order_id\":\"o-1\"}",
            "receiptHandle":"AQEB+/x=","attributes":{"MessageGroupId":"g1","SentTimestamp":"1"},
            "messageAttributes":{"a":{"stringValue":"v","dataType":"String"}},
            "eventSourceARN":"arn:aws:sqs:us-east-1:1:q.fifo"}]}"#;
        let view = EventView::parse(json).expect("view");
        let r = &view.records[0];
        let borrowed = |t: &Option<Text<'_>>| matches!(t, Some(Text(Cow::Borrowed(_))));
        assert!(borrowed(&r.message_id));
        assert!(borrowed(&r.receipt_handle));
        assert!(borrowed(&r.event_source_arn));
        assert!(
            !borrowed(&r.body),
            "an escaped body must be unescaped into a copy"
        );
        let batch = Batch::from_view(&view).expect("batch");
        assert_eq!(batch.messages[0].body, r#"{"order_id":"o-1"}"#);
        assert_eq!(batch.kind, QueueKind::Fifo);
    }

    #[test]
    fn the_view_refuses_what_is_not_an_sqs_event() {
        for bad in [
            r#"{}"#,
            r#"{"Records":{}}"#,
            r#"{"Records":[{"messageId":5}]}"#,
            "[]",
        ] {
            assert!(
                matches!(EventView::parse(bad), Err(EventError::Malformed(_))),
                "{bad}"
            );
        }
    }
}
