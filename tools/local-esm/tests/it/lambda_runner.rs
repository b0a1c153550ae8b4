//! The one-screen runner (`sqs_batch::lambda`) against moto's SQS, through its public API: what
//! its docs promise. With `SQS_BATCH_MOVE_POISON_TO_DLQ` a POISON record leaves at once for its queue's
//! DLQ with its reason; with `SQS_BATCH_VISIBILITY_BACKOFF` a RETRY stays away for its delay; without
//! either, neither happens. And `idempotency::once` inside it takes the record's deadline and
//! the store's lease settings without being told.

use idempotency::{ConfiguredStore, IdempotencyStore, LeasePolicy, MemoryStore, once};
use lambda_kit::{Clock, Env, SystemClock};
use local_esm::setup::{QueueSettings, queue_pair};
use process_orders::app::SQS_SDK;
use process_orders::testkit::dynamo::moto_endpoint;
use sqs_batch::{BatchOptions, BatchProcessor, Verdict, lambda};

use super::dead_letter_sqs::{dlq_copies, failure_of, receive_event};

/// A queue that hands a message back at once unless told otherwise, so a backoff shows.
const SETTINGS: QueueSettings = QueueSettings {
    visibility_timeout_s: 0,
    max_receive_count: 200,
};

#[derive(serde::Deserialize)]
struct Job {
    id: String,
    fail: Option<String>,
}

/// POISON for `"fail": "poison"`, RETRY for `"fail": "retry"`.
fn handler() -> impl sqs_batch::RecordHandler {
    sqs_batch::json(|job: Job| async move {
        match job.fail.as_deref() {
            Some("poison") => Verdict::poison("bad_job").with_key(job.id),
            Some("retry") => Verdict::retry("not_yet").with_key(job.id),
            _ => Verdict::ack("done").with_key(job.id),
        }
    })
}

/// The event of what the queue holds now, as Lambda would deliver it with `deadline_ms`.
async fn event(
    client: &aws_sdk_sqs::Client,
    url: &str,
    arn: &str,
    deadline_ms: u64,
) -> lambda::LambdaEvent<Box<serde_json::value::RawValue>> {
    let json = receive_event(client, url, arn).await;
    let mut context = lambda::Context::default();
    context.deadline = deadline_ms;
    lambda::LambdaEvent::new(
        serde_json::value::RawValue::from_string(json).expect("raw"),
        context,
    )
}

/// The bodies visible now (left visible). The acknowledged ones are still there: only Lambda's
/// poller deletes them.
async fn visible(client: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let mut bodies: Vec<String> = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .expect("receive")
        .messages()
        .iter()
        .map(|m| m.body().unwrap_or_default().to_owned())
        .collect();
    bodies.sort();
    bodies
}

async fn send(client: &aws_sdk_sqs::Client, url: &str, body: &str) {
    client
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .expect("send");
}

/// The runner's ports as the environment turns them on: a POISON record moved (acknowledged,
/// its copy naming its reason and the function as mover), a RETRY given its backoff; off, the
/// POISON stays reported and the RETRY is visible again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_moves_poison_and_backs_off_retries_as_the_environment_says() {
    let endpoint = moto_endpoint();
    let client = process_orders::aws::sqs(&local_esm::sdk_config(&endpoint), &SQS_SDK);
    let processor = BatchProcessor::new(handler(), SystemClock, BatchOptions::default());
    for on in [false, true] {
        let queues = queue_pair(&client, &format!("runner-{on}"), false, SETTINGS)
            .await
            .expect("queues");
        send(&client, &queues.url, r#"{"id":"j-1","fail":"poison"}"#).await;
        send(&client, &queues.url, r#"{"id":"j-2","fail":"retry"}"#).await;
        let vars = [
            ("SQS_BATCH_VISIBILITY_BACKOFF", on.to_string()),
            ("SQS_BATCH_MOVE_POISON_TO_DLQ", on.to_string()),
            ("AWS_LAMBDA_FUNCTION_NAME", "welcome".to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "3".to_owned()),
        ];
        let env = Env::new(move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        });
        let sqs = client.clone();
        let ports = lambda::Ports::from_env(&env, move || sqs.clone()).expect("ports");
        assert_eq!((ports.backoff(), ports.moves()), (on, on));
        let deadline_ms = SystemClock.now_ms() + 30_000;
        let response = lambda::handle(
            &processor,
            &ports,
            event(&client, &queues.url, &queues.arn, deadline_ms).await,
        )
        .await
        .expect("handled");
        let reported = response.batch_item_failures.len();
        let moved = dlq_copies(&client, &queues.dlq_url).await;
        if on {
            assert_eq!(reported, 1, "only the RETRY is reported");
            assert_eq!(moved.len(), 1, "the POISON's copy");
            let failure = failure_of(&moved[0].1);
            assert_eq!(
                (failure.reason.as_str(), failure.moved_by.as_str()),
                ("bad_job", "welcome:3")
            );
            assert_eq!(
                visible(&client, &queues.url).await,
                [r#"{"id":"j-1","fail":"poison"}"#],
                "the RETRY is backing off (the POISON's message waits for Lambda's delete)"
            );
        } else {
            assert_eq!(reported, 2, "both reported");
            assert!(moved.is_empty());
            assert_eq!(
                visible(&client, &queues.url).await.len(),
                2,
                "both back at once"
            );
        }
    }
}

/// `once` inside a handler the processor runs leases its claim by the record's deadline (the
/// lease ends the margin after it) and by the store's lease settings, with no call naming
/// either: the work itself reads its claim's lease end, as a second claimant would meet it.
#[tokio::test]
async fn once_takes_the_records_deadline_and_the_stores_lease_without_being_told() {
    let lease = LeasePolicy::new(600_000, 2_000);
    assert_eq!(MemoryStore::default().lease_policy(), None);
    let store = &ConfiguredStore::memory(MemoryStore::default(), lease);
    assert_eq!(store.lease_policy(), Some(lease));
    let seen = &std::sync::Mutex::new(Vec::new());
    let handler = sqs_batch::json(|job: Job| async move {
        let key = job.id.clone();
        once(store, &job.id, &job.id, || {
            let key = key.clone();
            async move {
                let other = {
                    let mut request = idempotency::testkit::claim(&key, SystemClock.now_ms());
                    request.fingerprint =
                        idempotency::Fingerprint::of_json(&key).expect("fingerprint");
                    request
                };
                if let Ok(idempotency::store::Begin::Busy { until_ms }) = store.begin(&other).await
                {
                    seen.lock().expect("lock").push(until_ms);
                }
                Ok::<_, std::io::Error>(())
            }
        })
        .await
        .into_verdict()
    });
    let processor = BatchProcessor::new(handler, SystemClock, BatchOptions::default());
    // A deadline inside the lease: the claim ends the margin after it. One past it: the
    // store's lease (600 s, not the default's 300 s) bounds it.
    for (id, deadline_in_ms) in [("k-1", 60_000), ("k-2", 3_600_000)] {
        let before = SystemClock.now_ms();
        let deadline_ms = before + deadline_in_ms;
        let body = serde_json::json!({ "id": id }).to_string();
        let event = serde_json::json!({ "Records": [{ "messageId": id, "body": body }] });
        let processed = sqs_batch::process_event(&processor, &event.to_string(), deadline_ms)
            .await
            .expect("processed");
        let after = SystemClock.now_ms();
        assert!(
            processed.report.statuses[0].is_ack(),
            "{:?}",
            processed.report
        );
        let until_ms = seen
            .lock()
            .expect("lock")
            .pop()
            .expect("the work saw its lease");
        if deadline_in_ms < lease.lease_ms {
            assert_eq!(until_ms, deadline_ms + lease.margin_ms, "{id}");
        } else {
            assert!(
                (before + lease.lease_ms..=after + lease.lease_ms).contains(&until_ms),
                "{id}: {until_ms} is not the store's lease from now ({before}..{after})"
            );
        }
    }
}
