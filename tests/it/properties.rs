//! Properties of the batch processor and the response check, over generated batches.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::Mutex;

use lambda_kit::clock::ManualClock;
use proptest::prelude::*;
use sqs_batch::backoff::{BackoffPolicy, MAX_VISIBILITY_S};
use sqs_batch::edge::{self as sqs, Message, QueueKind, ResponseError};
use sqs_batch::processor::{
    BatchOptions, BatchProcessor, FifoScope, Invocation, RecordHandler, Verdict,
};

/// Answers by body ("ack", "retry", "poison") and records which records it started.
#[derive(Default)]
struct Scripted {
    started: Mutex<Vec<String>>,
}

impl RecordHandler for Scripted {
    async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
        self.started
            .lock()
            .unwrap()
            .push(message.message_id.to_owned());
        // Yield once so concurrent records really interleave.
        tokio::task::yield_now().await;
        match message.body {
            "ack" => Verdict::ack("ok"),
            "retry" => Verdict::retry("transient"),
            _ => Verdict::poison("bad"),
        }
    }
}

#[derive(Debug, Clone)]
struct Spec {
    group: u8,
    outcome: &'static str,
}

fn specs() -> impl Strategy<Value = Vec<Spec>> {
    let outcome = prop_oneof![6 => Just("ack"), 1 => Just("retry"), 1 => Just("poison")];
    prop::collection::vec(
        (0u8..4, outcome).prop_map(|(group, outcome)| Spec { group, outcome }),
        0..40,
    )
}

struct Run {
    failed: Vec<String>,
    started: HashSet<String>,
}

fn run(specs: &[Spec], kind: QueueKind, scope: FifoScope, concurrency: usize) -> Run {
    let ids: Vec<String> = (0..specs.len()).map(|i| format!("m{i}")).collect();
    let groups: Vec<String> = specs.iter().map(|s| format!("g{}", s.group)).collect();
    let batch: Vec<Message<'_>> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| Message::new(&ids[i], s.outcome).with_group_id(Some(groups[i].as_str())))
        .collect();
    let options = BatchOptions::default()
        .with_max_concurrency(NonZeroUsize::new(concurrency).unwrap())
        .with_fifo_scope(scope)
        .with_deadline_margin_ms(0)
        .with_abandoned_hold_ms(0);
    let processor = BatchProcessor::new(Scripted::default(), ManualClock::at(0), options);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let report = runtime.block_on(processor.process(&batch, kind, 60_000));
    let response = sqs::response(report.failed_ids(&batch));
    sqs::check_response(&response, &batch).expect("a valid response");
    Run {
        failed: response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect(),
        started: processor
            .handler()
            .started
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect(),
    }
}

proptest! {
    /// Standard: failures are exactly the non-ACK records, each once, in batch order; all ran.
    #[test]
    fn standard_reports_exactly_the_non_acks(specs in specs(), concurrency in 1usize..16) {
        let r = run(&specs, QueueKind::Standard, FifoScope::Batch, concurrency);
        let expected: Vec<String> = specs.iter().enumerate().filter(|(_, s)| s.outcome != "ack").map(|(i, _)| format!("m{i}")).collect();
        prop_assert_eq!(r.failed, expected);
        prop_assert_eq!(r.started.len(), specs.len());
    }

    /// FIFO batch scope: failures are the suffix from the first non-ACK, and nothing after it ran.
    #[test]
    fn fifo_batch_scope_reports_the_suffix_and_stops(specs in specs()) {
        let r = run(&specs, QueueKind::Fifo, FifoScope::Batch, 8);
        let first = specs.iter().position(|s| s.outcome != "ack").unwrap_or(specs.len());
        let expected: Vec<String> = (first..specs.len()).map(|i| format!("m{i}")).collect();
        prop_assert_eq!(r.failed, expected);
        let ran: HashSet<String> = (0..(first + 1).min(specs.len())).map(|i| format!("m{i}")).collect();
        prop_assert_eq!(r.started, ran);
    }

    /// FIFO group scope: nothing after a group's RETRY ran (a POISON record does not hold its
    /// group: it can never succeed); other groups are unaffected.
    #[test]
    fn fifo_group_scope_holds_back_only_the_failed_group(specs in specs(), concurrency in 1usize..8) {
        let r = run(&specs, QueueKind::Fifo, FifoScope::Group, concurrency);
        let mut expected_failed = Vec::new();
        let mut expected_started = HashSet::new();
        for (i, s) in specs.iter().enumerate() {
            let earlier_failure = specs[..i].iter().any(|e| e.group == s.group && e.outcome == "retry");
            if !earlier_failure {
                expected_started.insert(format!("m{i}"));
            }
            if earlier_failure || s.outcome != "ack" {
                expected_failed.push(format!("m{i}"));
            }
        }
        prop_assert_eq!(r.failed, expected_failed);
        prop_assert_eq!(r.started, expected_started);
    }

    /// Backoff: every delay is within [0, min(cap, base x 2^(n-1))] and under 12 hours.
    #[test]
    fn backoff_delays_stay_within_their_bound(
        base in 0u64..100_000,
        cap in 0u64..100_000,
        receive_count in any::<u32>(),
        random in any::<u64>(),
    ) {
        let policy = BackoffPolicy::new(base, cap);
        let delay = policy.delay(receive_count, random);
        let exponent = receive_count.max(1) - 1;
        let doubled = if exponent >= 64 { u128::MAX } else { u128::from(base) << exponent };
        let bound = doubled.min(u128::from(cap));
        prop_assert!(u128::from(delay) <= bound, "{delay} > {bound}");
        prop_assert!(delay <= MAX_VISIBILITY_S);
        prop_assert!(delay < 12 * 3600);
    }

    /// The response check rejects any response that one mutation makes invalid.
    #[test]
    fn the_response_check_rejects_every_invalid_mutation(
        n in 1usize..20,
        picks in prop::collection::vec(any::<bool>(), 20),
        mutation in 0u8..3,
        at in any::<prop::sample::Index>(),
    ) {
        let ids: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        let batch: Vec<Message<'_>> = ids.iter().map(|id| Message::new(id, "")).collect();
        let mut chosen: Vec<&str> = ids.iter().zip(&picks).filter(|(_, p)| **p).map(|(id, _)| id.as_str()).collect();
        if chosen.is_empty() {
            chosen.push(&ids[0]);
        }
        let valid = sqs::response(chosen.iter().copied());
        prop_assert_eq!(sqs::check_response(&valid, &batch), Ok(()));
        let mut bad = valid.clone();
        let i = at.index(bad.batch_item_failures.len());
        let expected = match mutation {
            0 => {
                bad.batch_item_failures[i].item_identifier.clear();
                ResponseError::EmptyIdentifier
            }
            1 => {
                let copy = bad.batch_item_failures[i].clone();
                bad.batch_item_failures.push(copy.clone());
                ResponseError::DuplicateIdentifier(copy.item_identifier)
            }
            _ => {
                bad.batch_item_failures[i].item_identifier = "not-in-batch".into();
                ResponseError::UnknownIdentifier("not-in-batch".into())
            }
        };
        prop_assert_eq!(sqs::check_response(&bad, &batch), Err(expected));
    }

    /// The borrowed view the function reads and `aws_lambda_events`' owned event give the same
    /// batch, whatever the strings hold (escapes, unicode) and whichever fields are present,
    /// message attributes included.
    #[test]
    fn the_borrowed_view_and_the_owned_event_agree(
        records in prop::collection::vec(
            (
                "[a-z0-9\\-\"\\\\/é]{1,12}",
                prop::option::of(".{0,40}"),
                prop::option::of(prop_oneof!["[0-9]{1,3}", "x"]),
                prop::option::of("g[0-9]"),
                prop::option::of("[0-9]{13}"),
                prop::option::of("[A-Za-z0-9+/=]{4,20}"),
                prop::bool::ANY,
                prop::option::of("[a-z0-9é\"]{0,8}"),
            ),
            0..12,
        ),
    ) {
        let records: Vec<serde_json::Value> = records
            .into_iter()
            .map(|(id, body, count, group, first, receipt, fifo, note)| {
                let mut attributes = serde_json::Map::new();
                let mut put = |k: &str, v: Option<String>| {
                    if let Some(v) = v {
                        attributes.insert(k.to_owned(), v.into());
                    }
                };
                put("ApproximateReceiveCount", count);
                put("MessageGroupId", group);
                put("ApproximateFirstReceiveTimestamp", first);
                put("SentTimestamp", Some("1545082649183".to_owned()));
                // As Lambda sends a producer's attribute; none is `{}`.
                let message_attributes = match note {
                    Some(note) => serde_json::json!({ "note": {
                        "stringValue": note, "stringListValues": [], "binaryListValues": [],
                        "dataType": "String",
                    }}),
                    None => serde_json::json!({}),
                };
                let arn = if fifo { "arn:aws:sqs:us-east-1:1:q.fifo" } else { "arn:aws:sqs:us-east-1:1:q" };
                serde_json::json!({
                    "messageId": id, "receiptHandle": receipt, "body": body,
                    "attributes": attributes, "messageAttributes": message_attributes,
                    "md5OfBody": "x", "eventSource": "aws:sqs", "eventSourceARN": arn,
                    "awsRegion": "us-east-1",
                })
            })
            .collect();
        let json = serde_json::json!({ "Records": records }).to_string();
        let owned = sqs::parse_event(&json).expect("owned parse");
        let view = sqs::EventView::parse(&json).expect("view parse");
        prop_assert_eq!(sqs::Batch::from_event(&owned).ok(), sqs::Batch::from_view(&view).ok());
    }
}
