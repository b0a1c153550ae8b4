//! The SQS edge: Lambda's event in, `batchItemFailures` out.
//!
//! The event is parsed with `aws_lambda_events` exactly as Lambda delivers it. The rest of the
//! crate sees each record through [`Message`], a borrowed view of the few fields it uses, so the
//! processor never depends on how the event was parsed.

use std::collections::HashSet;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};

/// A whole event that cannot be processed. Lambda retries the batch.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("the event is not an SQS event: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error(
        "record {index} has no usable messageId, so it could not be reported as failed; \
         failing the invocation so Lambda retries the batch"
    )]
    MissingMessageId { index: usize },
    #[error(
        "the response failed its check ({0}); failing the invocation so Lambda retries the batch"
    )]
    InvalidResponse(#[from] ResponseError),
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message<'a> {
    pub message_id: &'a str,
    /// The body; an absent body reads as empty, which no handler accepts.
    pub body: &'a str,
    pub receive_count: Option<u32>,
    pub group_id: Option<&'a str>,
    pub first_receive_ms: Option<u64>,
    /// Needed only to change the record's visibility.
    pub receipt_handle: Option<&'a str>,
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
        }
    }
}

/// How a batch must be processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    Standard,
    Fifo,
}

impl QueueKind {
    /// FIFO when the source ARN ends in `.fifo` or any record carries a message group.
    pub fn detect(event: &SqsEvent) -> Self {
        let fifo = event.records.iter().any(|r| {
            r.queue_arn().is_some_and(|arn| arn.ends_with(".fifo"))
                || r.message_group_id().is_some()
        });
        if fifo { Self::Fifo } else { Self::Standard }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Fifo => "fifo",
        }
    }
}

/// The source queue's ARN: all records of one event come from one queue.
pub fn queue_arn(event: &SqsEvent) -> Option<&str> {
    event.records.iter().find_map(|r| r.queue_arn())
}

/// Parses an event from JSON text.
pub fn parse_event(json: &str) -> Result<SqsEvent, EventError> {
    serde_json::from_str(json).map_err(EventError::Malformed)
}

/// Borrows a [`Message`] view of every record, refusing records whose id cannot be reported.
pub fn messages(event: &SqsEvent) -> Result<Vec<Message<'_>>, EventError> {
    event
        .records
        .iter()
        .enumerate()
        .map(|(index, record)| {
            let message_id = record
                .message_id
                .as_deref()
                .filter(|id| !id.trim().is_empty())
                .ok_or(EventError::MissingMessageId { index })?;
            Ok(Message {
                message_id,
                body: record.body.as_deref().unwrap_or(""),
                receive_count: record.receive_count(),
                group_id: record.message_group_id(),
                first_receive_ms: record.first_receive_ms(),
                receipt_handle: record.receipt_handle.as_deref(),
            })
        })
        .collect()
}

/// A response Lambda would reject or misread.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponseError {
    #[error("an itemIdentifier is empty")]
    EmptyIdentifier,
    #[error("itemIdentifier {0:?} is listed twice")]
    DuplicateIdentifier(String),
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
        assert_eq!(QueueKind::detect(&ev), QueueKind::Fifo);
    }

    #[test]
    fn a_receive_count_that_is_not_a_number_reads_as_unknown() {
        let ev = event(serde_json::json!([{
            "messageId": "m1", "body": "{}", "attributes": { "ApproximateReceiveCount": "many" }
        }]));
        assert_eq!(ev.records[0].receive_count(), None);
    }

    #[test]
    fn queue_kind_comes_from_the_arn_or_the_group() {
        let standard = event(serde_json::json!([{
            "messageId": "m1", "eventSourceARN": "arn:aws:sqs:us-east-1:1:orders"
        }]));
        assert_eq!(QueueKind::detect(&standard), QueueKind::Standard);
        let grouped = event(serde_json::json!([{
            "messageId": "m1", "attributes": { "MessageGroupId": "g" }
        }]));
        assert_eq!(QueueKind::detect(&grouped), QueueKind::Fifo);
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
                messages(&ev),
                Err(EventError::MissingMessageId { index: 1 })
            ));
        }
        let missing = event(serde_json::json!([{ "body": "{}" }]));
        assert!(matches!(
            messages(&missing),
            Err(EventError::MissingMessageId { index: 0 })
        ));
    }

    #[test]
    fn a_missing_body_reads_as_empty() {
        let ev = event(serde_json::json!([{ "messageId": "m1" }]));
        assert_eq!(messages(&ev).expect("messages")[0].body, "");
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
}
