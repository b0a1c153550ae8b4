//! The local event source mapping is as strict as Lambda's SQS poller, on moto's SQS: a function
//! past its timeout and a response naming a message that is not in the batch both fail the
//! whole invocation (nothing deleted), an empty receive does not close the batching window, and
//! no event exceeds Lambda's 6 MB payload limit. Each test waits on facts (the messages that
//! come back, the events the function saw), never on approximate queue counts.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;
use local_esm::esm::{self, Counters, EsmSettings, Invoke, PAYLOAD_LIMIT};
use local_esm::sdk_config;
use local_esm::setup::{self, QueuePair, QueueSettings};
use process_orders::testkit::dynamo::moto_endpoint;

/// What the function does with every event; it keeps what it was given.
enum Behaviour {
    /// Acknowledges everything.
    Ack,
    /// Sleeps this long, then acknowledges everything.
    Sleep(Duration),
    /// Reports this id, whatever the batch.
    Report(&'static str),
}

struct Function {
    behaviour: Behaviour,
    /// Each event's message ids and its size as JSON.
    seen: Mutex<Vec<(Vec<String>, usize)>>,
    /// Invocations that ran to their answer.
    answered: std::sync::atomic::AtomicUsize,
}

impl Function {
    fn new(behaviour: Behaviour) -> Self {
        Self {
            behaviour,
            seen: Mutex::new(Vec::new()),
            answered: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn seen(&self) -> Vec<(Vec<String>, usize)> {
        self.seen.lock().unwrap().clone()
    }
}

impl Invoke for Function {
    async fn invoke(
        &self,
        event: &SqsEvent,
        _deadline_ms: u64,
    ) -> Result<SqsBatchResponse, String> {
        let ids = event
            .records
            .iter()
            .filter_map(|r| r.message_id.clone())
            .collect();
        let size = serde_json::to_vec(event).map_err(|e| e.to_string())?.len();
        self.seen.lock().unwrap().push((ids, size));
        let mut response = SqsBatchResponse::default();
        match self.behaviour {
            Behaviour::Ack => {}
            Behaviour::Sleep(pause) => tokio::time::sleep(pause).await,
            Behaviour::Report(id) => {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id.to_owned();
                response.batch_item_failures.push(failure);
            }
        }
        self.answered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(response)
    }
}

fn settings(batch_size: usize, window: Duration, timeout: Duration) -> EsmSettings {
    EsmSettings {
        batch_size,
        batching_window: window,
        concurrency: 1,
        function_timeout: timeout,
        drained_after: Duration::from_secs(2),
        max_run: Duration::from_secs(60),
    }
}

/// A standard queue (with its DLQ) whose messages come back one second after a receive.
async fn queue(name: &str) -> (Client, QueuePair) {
    let sqs = Client::new(&sdk_config(&moto_endpoint()));
    let name = format!("{name}-{}-{}", std::process::id(), fastrand::u32(..));
    let queue = setup::queue_pair(
        &sqs,
        &name,
        false,
        QueueSettings {
            visibility_timeout_s: 1,
            max_receive_count: 100,
        },
    )
    .await
    .expect("queues");
    (sqs, queue)
}

async fn send(sqs: &Client, queue: &QueuePair, body: &str) -> String {
    sqs.send_message()
        .queue_url(&queue.url)
        .message_body(body)
        .send()
        .await
        .expect("send")
        .message_id()
        .expect("an id")
        .to_owned()
}

/// The ids of the messages that can be received again once their visibility timeout is over:
/// every message still in the queue.
async fn come_back(sqs: &Client, queue: &QueuePair) -> BTreeSet<String> {
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut ids = BTreeSet::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&queue.url)
            .max_number_of_messages(10)
            .visibility_timeout(30)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            return ids;
        }
        ids.extend(messages.iter().filter_map(|m| m.message_id.clone()));
    }
}

#[tokio::test]
async fn a_function_past_its_timeout_deletes_nothing() {
    let (sqs, queue) = queue("esm-timeout").await;
    let mut sent = BTreeSet::new();
    for i in 0..3 {
        sent.insert(send(&sqs, &queue, &format!("m{i}")).await);
    }
    let function = Function::new(Behaviour::Sleep(Duration::from_secs(2)));
    let counters = Counters::default();
    let settings = settings(10, Duration::ZERO, Duration::from_millis(300));
    let received = esm::poll_once(&sqs, &queue, &function, &settings, &counters).await;
    assert_eq!(received, 3);
    // The invocation was cut off at the timeout: it never reached its answer.
    assert_eq!(function.seen().len(), 1);
    assert_eq!(
        function.answered.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the late answer was waited for"
    );
    assert_eq!(counters.stats().deleted, 0);
    assert_eq!(
        come_back(&sqs, &queue).await,
        sent,
        "every message comes back"
    );
}

#[tokio::test]
async fn a_response_naming_an_unknown_or_empty_id_deletes_nothing() {
    for bogus in ["not-a-message-of-this-batch", ""] {
        let (sqs, queue) = queue("esm-bogus").await;
        let mut sent = BTreeSet::new();
        for i in 0..3 {
            sent.insert(send(&sqs, &queue, &format!("m{i}")).await);
        }
        let function = Function::new(Behaviour::Report(bogus));
        let counters = Counters::default();
        let settings = settings(10, Duration::ZERO, Duration::from_secs(5));
        esm::poll_once(&sqs, &queue, &function, &settings, &counters).await;
        assert_eq!(function.seen().len(), 1);
        assert_eq!(counters.stats().deleted, 0, "{bogus:?}");
        assert_eq!(come_back(&sqs, &queue).await, sent, "{bogus:?}");
    }
}

/// A message sent after an empty receive, but inside the batching window, rides in the same
/// invocation.
#[tokio::test]
async fn the_batching_window_outlives_an_empty_receive() {
    let (sqs, queue) = queue("esm-window").await;
    let first = send(&sqs, &queue, "first").await;
    let late = {
        let (sqs, queue) = (sqs.clone(), queue.clone());
        tokio::spawn(async move {
            // After the poller's first long poll of 1 s has come back empty.
            tokio::time::sleep(Duration::from_millis(1_600)).await;
            send(&sqs, &queue, "late").await
        })
    };
    let function = Function::new(Behaviour::Ack);
    let counters = Counters::default();
    let settings = settings(10, Duration::from_secs(3), Duration::from_secs(5));
    esm::poll_once(&sqs, &queue, &function, &settings, &counters).await;
    let late = late.await.expect("sent");
    let seen = function.seen();
    assert_eq!(seen.len(), 1, "one invocation: {seen:?}");
    let ids: BTreeSet<String> = seen[0].0.iter().cloned().collect();
    assert_eq!(ids, BTreeSet::from([first, late]));
}

/// 40 messages of 200 KB (8 MB) received as one batch go to the function in events of at most
/// 6 MB, all of them, in receive order.
#[tokio::test]
async fn no_event_exceeds_the_payload_limit() {
    let (sqs, queue) = queue("esm-payload").await;
    sqs.set_queue_attributes()
        .queue_url(&queue.url)
        .attributes(QueueAttributeName::MaximumMessageSize, "262144")
        .send()
        .await
        .expect("size limit");
    let body = "x".repeat(200_000);
    let mut sent = BTreeSet::new();
    for _ in 0..40 {
        sent.insert(send(&sqs, &queue, &body).await);
    }
    let function = Function::new(Behaviour::Ack);
    let counters = Counters::default();
    let settings = settings(40, Duration::from_secs(5), Duration::from_secs(30));
    let mut delivered = BTreeSet::new();
    while delivered.len() < sent.len() {
        let received = esm::poll_once(&sqs, &queue, &function, &settings, &counters).await;
        assert!(
            received > 0,
            "the queue emptied before every message was seen"
        );
        delivered = function
            .seen()
            .into_iter()
            .flat_map(|(ids, _)| ids)
            .collect();
    }
    assert_eq!(delivered, sent);
    let seen = function.seen();
    for (ids, size) in &seen {
        assert!(
            *size <= PAYLOAD_LIMIT,
            "an event of {size} bytes ({} records)",
            ids.len()
        );
    }
    assert!(
        seen.len() >= 2,
        "8 MB cannot fit one event: {} events",
        seen.len()
    );
}
