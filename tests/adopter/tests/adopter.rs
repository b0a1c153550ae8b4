//! What a team meets adopting the crates with `features = ["sqs-batch", "dynamodb"]` and no
//! `default-https-client`: each mistake stops start-up naming its fix, and the handler does what
//! the READMEs say, in memory and on an embedded DynamoDB-compatible server.

use std::sync::Mutex;

use adopter::{Event, Webhook, handler};
use idempotency::lambda_kit::{Clock, Env, SystemClock};
use idempotency::{ConfiguredStore, MemoryStore};
use sqs_batch::{BatchOptions, BatchProcessor, RecordHandler};

/// Counts what it posts.
#[derive(Default)]
struct Posted(Mutex<Vec<String>>);

impl Webhook for Posted {
    async fn post(&self, event: &Event) -> Result<(), String> {
        self.0.lock().unwrap().push(event.event_id.clone());
        Ok(())
    }
}

fn env(pairs: &'static [(&'static str, &'static str)]) -> Env<'static> {
    Env::new(|name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    })
}

/// Runs `bodies` as one batch; the reasons, and the ids reported for retry.
async fn batch(
    handler: impl RecordHandler,
    bodies: &[&str],
) -> (Vec<(&'static str, usize)>, usize) {
    let records: Vec<String> = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let body = serde_json_escape(body);
            format!(r#"{{"messageId": "m-{i}", "body": {body}}}"#)
        })
        .collect();
    let event = format!(r#"{{"Records": [{}]}}"#, records.join(","));
    let processor = BatchProcessor::new(handler, SystemClock, BatchOptions::default());
    let processed = sqs_batch::process_event(&processor, &event, SystemClock.now_ms() + 60_000)
        .await
        .expect("an SQS event");
    (
        processed.report.reasons(),
        processed.response.batch_item_failures.len(),
    )
}

/// A JSON string of `text` (the body of an SQS record is a string).
fn serde_json_escape(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A table named with no HTTP client to reach it stops start-up naming the feature (it
/// panicked at the first claim, and every record went to the DLQ as RETRY).
#[tokio::test]
async fn a_table_without_an_http_client_is_refused_at_start_up_naming_the_feature() {
    let refused = ConfiguredStore::from_env_with(&env(&[("IDEMPOTENCY_TABLE", "events")]))
        .await
        .expect_err("no HTTP client in this build")
        .to_string();
    assert!(
        refused.starts_with("IDEMPOTENCY_TABLE=") && refused.contains("`default-https-client`"),
        "{refused}"
    );
}

/// The same for the runner's SQS ports (visibility backoff, DLQ moves).
#[tokio::test]
async fn the_runners_sqs_ports_without_an_http_client_are_refused_naming_the_feature() {
    let refused = sqs_batch::lambda::Ports::load(&env(&[("SQS_BATCH_MOVE_POISON_TO_DLQ", "true")]))
        .await
        .expect_err("no HTTP client in this build")
        .to_string();
    assert!(
        refused.starts_with("SQS_BATCH_MOVE_POISON_TO_DLQ=")
            && refused.contains("`default-https-client`"),
        "{refused}"
    );
    let none = sqs_batch::lambda::Ports::load(&env(&[]))
        .await
        .expect("no port asked for");
    assert!(!none.backoff() && !none.moves());
}

/// On ECS with no table the store is not one task's memory.
#[tokio::test]
async fn ecs_without_a_table_is_refused() {
    let refused = ConfiguredStore::from_env_with(&env(&[(
        "ECS_CONTAINER_METADATA_URI_V4",
        "http://169.254.170.2/v4/x",
    )]))
    .await
    .expect_err("one task's memory")
    .to_string();
    assert!(refused.contains("IDEMPOTENCY_IN_MEMORY"), "{refused}");
}

/// An event without its key is POISON with its reason, at once; the others are posted.
#[tokio::test]
async fn an_empty_key_is_poison_with_its_reason() {
    let (store, posted) = (MemoryStore::default(), Posted::default());
    let (reasons, reported) = batch(
        handler(&store, &posted),
        &[
            r#"{"event_id": "", "text": "no key"}"#,
            r#"{"event_id": "e-1", "text": "hello"}"#,
        ],
    )
    .await;
    assert_eq!(reasons, [("invalid_key", 1), ("done", 1)]);
    assert_eq!(reported, 1, "the POISON record, for the DLQ");
    assert_eq!(*posted.0.lock().unwrap(), ["e-1"]);
}

/// A producer's send retried, both copies in one batch: posted once, both acknowledged.
#[tokio::test]
async fn a_duplicate_in_one_batch_is_acknowledged_in_the_same_invocation() {
    let (store, posted) = (MemoryStore::default(), Posted::default());
    let copy = r#"{"event_id": "e-1", "text": "hello"}"#;
    let (reasons, reported) = batch(handler(&store, &posted), &[copy, copy]).await;
    assert_eq!(reasons, [("done", 1), ("duplicate", 1)]);
    assert_eq!(reported, 0);
    assert_eq!(posted.0.lock().unwrap().len(), 1);
}

/// The README's "Testing your handler" on DynamoDB: the store `from_env_with_client` names,
/// on dynoxide in the test process. A redelivery a batch later is a duplicate.
#[tokio::test]
async fn the_handler_on_an_embedded_dynamodb() {
    let server = idempotency::testkit::dynoxide::Dynoxide::start().await;
    let client = server.client();
    idempotency::dynamodb::create_table(&client, "events")
        .await
        .expect("a table");
    let store =
        ConfiguredStore::from_env_with_client(&env(&[("IDEMPOTENCY_TABLE", "events")]), client)
            .await
            .expect("a table with a client");
    assert!(store.is_dynamodb());
    let posted = Posted::default();
    let event = r#"{"event_id": "e-1", "text": "hello"}"#;
    assert_eq!(
        batch(handler(&store, &posted), &[event]).await.0,
        [("done", 1)]
    );
    assert_eq!(
        batch(handler(&store, &posted), &[event]).await.0,
        [("duplicate", 1)]
    );
    assert_eq!(posted.0.lock().unwrap().len(), 1);
}

/// The runner's variables carry the crate's prefix, so they never meet the team's own
/// `MAX_CONCURRENCY`; the name from before 0.2 is still read where the new one is unset.
#[test]
fn the_runners_variables_carry_the_crates_prefix() {
    let new = sqs_batch::BatchOptions::from_env(&env(&[("SQS_BATCH_MAX_CONCURRENCY", "4")]))
        .expect("a value in range");
    assert_eq!(new.max_concurrency.get(), 4);
    let old = sqs_batch::BatchOptions::from_env(&env(&[("MAX_CONCURRENCY", "3")]))
        .expect("the old name, with a warning");
    assert_eq!(old.max_concurrency.get(), 3);
}

/// The store's `Debug` is one short line, and Powertools' switch turns it off on a developer's
/// machine.
#[tokio::test]
async fn the_stores_debug_is_short_and_the_powertools_switch_works() {
    let server = idempotency::testkit::dynoxide::Dynoxide::start().await;
    let store = ConfiguredStore::from_env_with_client(
        &env(&[("IDEMPOTENCY_TABLE", "events")]),
        server.client(),
    )
    .await
    .expect("a table with a client");
    let line = format!("{store:?}");
    assert!(line.len() < 400 && line.contains("events"), "{line}");
    let off = ConfiguredStore::from_env_with(&env(&[("POWERTOOLS_IDEMPOTENCY_DISABLED", "true")]))
        .await
        .expect("off on a developer's machine");
    assert!(off.is_disabled());
}
