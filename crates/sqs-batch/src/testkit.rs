//! Generated SQS events shaped as Lambda delivers them, built with `aws_lambda_events`' own
//! types (feature `testkit`): input for benchmarks, tests and local tools.
//!
//! # Example
//!
//! ```
//! use sqs_batch::testkit::{EventShape, generate, small_body};
//!
//! let shape = EventShape { records: 10, fifo_groups: 2, seed: 1 };
//! let event = generate(shape, small_body);
//! assert_eq!(event.records.len(), 10);
//! // A FIFO queue's records carry their group; the same seed gives the same event.
//! assert!(event.records[0].attributes.contains_key("MessageGroupId"));
//! assert_eq!(event.records[3].body, generate(shape, small_body).records[3].body);
//! ```

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct EventShape {
    /// How many records.
    pub records: usize,
    /// `0`: a standard queue; otherwise a FIFO queue with this many message groups.
    pub fifo_groups: usize,
    /// The same seed gives the same event.
    pub seed: u64,
}

/// An event of `shape.records` records whose bodies `body(index, rng)` writes. Each record
/// carries every field and attribute Lambda sends (about 550 bytes besides the body), so 10,000
/// small records make about 6 MB, just inside Lambda's 6 MiB invocation payload limit.
pub fn generate(
    shape: EventShape,
    mut body: impl FnMut(usize, &mut fastrand::Rng) -> String,
) -> SqsEvent {
    let mut rng = fastrand::Rng::with_seed(shape.seed);
    let fifo = shape.fifo_groups > 0;
    let arn = format!(
        "arn:aws:sqs:us-east-1:123456789012:orders{}",
        if fifo { ".fifo" } else { "" }
    );
    // Real receipt handles run to a few hundred characters; 100 keeps 10,000 records inside
    // Lambda's 6 MiB payload limit, as a real full batch must be.
    let receipt = format!("AQEB{}", "x".repeat(96));
    let mut event = SqsEvent::default();
    event.records = (0..shape.records)
        .map(|i| {
            let mut r = SqsMessage::default();
            r.message_id = Some(format!("00000000-0000-4000-8000-{i:012}"));
            r.receipt_handle = Some(receipt.clone());
            r.body = Some(body(i, &mut rng));
            let mut attributes = vec![
                ("ApproximateReceiveCount", "1".to_owned()),
                ("SentTimestamp", "1767225600000".to_owned()),
                ("SenderId", "AIDAIENQZJOLO23YVJ4VO".to_owned()),
                (
                    "ApproximateFirstReceiveTimestamp",
                    "1767225600012".to_owned(),
                ),
            ];
            if fifo {
                attributes.extend([
                    (
                        "SequenceNumber",
                        (18_849_496_460_467_696_128_u128 + i as u128).to_string(),
                    ),
                    ("MessageGroupId", format!("g-{}", i % shape.fifo_groups)),
                    ("MessageDeduplicationId", format!("d-{i}")),
                ]);
            }
            r.attributes = attributes
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
            r.md5_of_body = Some("e4e68fb7bd0e697a0ae8f1bb342846b3".to_owned());
            r.event_source = Some("aws:sqs".to_owned());
            r.event_source_arn = Some(arn.clone());
            r.aws_region = Some("us-east-1".to_owned());
            r
        })
        .collect();
    event
}

/// A 40-byte JSON body, numbered.
pub fn small_body(i: usize, _rng: &mut fastrand::Rng) -> String {
    format!(r#"{{"id": "r-{i}", "value": {}}}"#, i % 1_000)
}

/// The largest generated event with `body`'s bodies whose JSON fits `limit` bytes: its record
/// count and its JSON. Bodies should be of about one size.
pub fn largest_within(
    limit: usize,
    fifo_groups: usize,
    body: impl Fn(usize, &mut fastrand::Rng) -> String + Copy,
) -> (usize, String) {
    let json = |records| {
        let shape = EventShape {
            records,
            fifo_groups,
            seed: 7,
        };
        serde_json::to_string(&generate(shape, body)).unwrap_or_default()
    };
    // Records are nearly the same size: estimate from one, then step down to fit.
    let one = json(1).len().max(1);
    let mut records = limit / one + 1;
    loop {
        let text = json(records);
        if text.len() <= limit || records == 0 {
            return (records, text);
        }
        records -= (text.len() - limit).div_ceil(one).max(1).min(records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{edge::Batch, edge::EventView, edge::QueueKind};

    #[test]
    fn generated_events_parse_as_lambda_events_of_the_asked_shape() {
        for (fifo_groups, kind) in [(0, QueueKind::Standard), (4, QueueKind::Fifo)] {
            let shape = EventShape {
                records: 20,
                fifo_groups,
                seed: 1,
            };
            let json = serde_json::to_string(&generate(shape, small_body)).expect("json");
            let view = EventView::parse(&json).expect("parses");
            let batch = Batch::from_view(&view).expect("batch");
            assert_eq!(batch.messages.len(), 20);
            assert_eq!(batch.kind, kind);
            let ids: std::collections::HashSet<_> =
                batch.messages.iter().map(|m| m.message_id).collect();
            assert_eq!(ids.len(), 20, "message ids are distinct");
            assert!(
                batch
                    .messages
                    .iter()
                    .all(|m| serde_json::from_str::<serde_json::Value>(m.body).is_ok())
            );
        }
    }

    #[test]
    fn the_largest_event_within_a_limit_fits_and_one_more_record_would_not() {
        let limit = 20_000;
        let (records, json) = largest_within(limit, 0, small_body);
        assert!(json.len() <= limit);
        let shape = EventShape {
            records: records + 1,
            fifo_groups: 0,
            seed: 7,
        };
        assert!(
            serde_json::to_string(&generate(shape, small_body))
                .expect("json")
                .len()
                > limit
        );
    }
}
