//! The worker over an in-memory queue that keeps SQS's rules that matter here (a received
//! message is invisible until its visibility ends, a receipt is needed to delete or change it),
//! on Tokio's paused clock.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize};

use super::*;
use crate::dead_letter::NoDeadLetters;
use crate::processor::{Invocation, Verdict};
use crate::visibility::ChangeFailure;
use crate::{BatchOptions, lambda_kit::Env, lambda_kit::ManualClock};

const ARN: &str = "arn:aws:sqs:us-east-1:123456789012:work";

/// A queue: messages by id, each visible from a time on; receipts count receives.
struct FakeQueue {
    /// Its clock's zero: Tokio's clock, which the tests pause and advance.
    start: tokio::time::Instant,
    state: Mutex<QueueState>,
    /// Delete entries to fail, by message id, each once.
    fail_deletes: Mutex<Vec<String>>,
    receive_errors: AtomicUsize,
    /// How long a visibility change takes to answer, ms, after SQS applied it (0: at once).
    change_latency_ms: AtomicU64,
}

#[derive(Default)]
struct QueueState {
    /// message id -> (body, visible from (ms since start), receives)
    messages: HashMap<String, (String, u64, u32)>,
    order: VecDeque<String>,
    deleted: Vec<String>,
    /// (message id, seconds, at ms)
    changes: Vec<(String, u64, u64)>,
    /// (message id, the receive's `VisibilityTimeout`)
    receives: Vec<(String, u32)>,
}

impl FakeQueue {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn with(bodies: &[(&str, &str)]) -> Self {
        let queue = Self {
            start: tokio::time::Instant::now(),
            state: Mutex::default(),
            fail_deletes: Mutex::default(),
            receive_errors: AtomicUsize::new(0),
            change_latency_ms: AtomicU64::new(0),
        };
        {
            let mut state = queue.state.lock().unwrap();
            for (id, body) in bodies {
                state
                    .messages
                    .insert((*id).to_owned(), ((*body).to_owned(), 0, 0));
                state.order.push_back((*id).to_owned());
            }
        }
        queue
    }

    /// Each message as if already received `n` times (its next receive is `n + 1`).
    fn received_before(self, n: u32) -> Self {
        for entry in self.state.lock().unwrap().messages.values_mut() {
            entry.2 = n;
        }
        self
    }

    fn deleted(&self) -> Vec<String> {
        self.state.lock().unwrap().deleted.clone()
    }

    fn changes(&self) -> Vec<(String, u64, u64)> {
        self.state.lock().unwrap().changes.clone()
    }

    fn receives(&self) -> Vec<(String, u32)> {
        self.state.lock().unwrap().receives.clone()
    }

    /// When the message is visible again, ms since start (`None`: deleted).
    fn visible_from(&self, id: &str) -> Option<u64> {
        self.state.lock().unwrap().messages.get(id).map(|m| m.1)
    }
}

impl QueuePort for FakeQueue {
    fn arn(&self) -> &str {
        ARN
    }

    async fn receive(
        &self,
        max: u8,
        wait_s: u8,
        visibility_s: u32,
    ) -> Result<Vec<SqsMessage>, QueueError> {
        if self.receive_errors.load(Ordering::SeqCst) > 0 {
            self.receive_errors.fetch_sub(1, Ordering::SeqCst);
            return Err(QueueError {
                action: "ReceiveMessage",
                source: "throttled".into(),
            });
        }
        let got: Vec<SqsMessage> = {
            let mut state = self.state.lock().unwrap();
            let now = self.now_ms();
            let ids: Vec<String> = state
                .order
                .iter()
                .filter(|id| state.messages.get(*id).is_some_and(|m| m.1 <= now))
                .take(usize::from(max))
                .cloned()
                .collect();
            let receives = ids.iter().map(|id| (id.clone(), visibility_s));
            state.receives.extend(receives);
            ids.iter()
                .map(|id| {
                    let entry = state.messages.get_mut(id).unwrap();
                    entry.2 += 1;
                    // ReceiveMessage's VisibilityTimeout: SQS applies it over the queue's own.
                    entry.1 = now + u64::from(visibility_s) * 1_000;
                    let mut record = SqsMessage::default();
                    record.message_id = Some(id.clone());
                    record.receipt_handle = Some(format!("{id}#{}", entry.2));
                    record.body = Some(entry.0.clone());
                    record.attributes =
                        [("ApproximateReceiveCount".to_owned(), entry.2.to_string())].into();
                    record
                })
                .collect()
        };
        if got.is_empty() {
            tokio::time::sleep(Duration::from_secs(u64::from(wait_s))).await;
        }
        Ok(got)
    }

    async fn delete(&self, entries: &[Delete<'_>]) -> Result<Vec<String>, QueueError> {
        let mut failed = Vec::new();
        let mut fail = self.fail_deletes.lock().unwrap();
        let mut state = self.state.lock().unwrap();
        for entry in entries {
            if let Some(i) = fail.iter().position(|id| id == entry.message_id) {
                fail.remove(i);
                failed.push(entry.message_id.to_owned());
                continue;
            }
            state.messages.remove(entry.message_id);
            state.order.retain(|id| id != entry.message_id);
            state.deleted.push(entry.message_id.to_owned());
        }
        Ok(failed)
    }

    async fn visible_messages(&self) -> Result<u64, QueueError> {
        let state = self.state.lock().unwrap();
        let now = self.now_ms();
        Ok(state.messages.values().filter(|m| m.1 <= now).count() as u64)
    }
}

impl VisibilityPort for &FakeQueue {
    async fn change(&self, queue_url: &str, changes: &[Change<'_>]) -> Vec<ChangeFailure> {
        assert_eq!(
            queue_url,
            "https://sqs.us-east-1.amazonaws.com/123456789012/work"
        );
        {
            let mut state = self.state.lock().unwrap();
            let now = self.now_ms();
            for change in changes {
                state
                    .changes
                    .push((change.message_id.to_owned(), change.seconds, now));
                if let Some(m) = state.messages.get_mut(change.message_id) {
                    m.1 = now + change.seconds * 1_000;
                }
            }
        }
        let latency = self.change_latency_ms.load(Ordering::SeqCst);
        if latency > 0 {
            tokio::time::sleep(Duration::from_millis(latency)).await;
        }
        Vec::new()
    }
}

/// Sleeps the time its body names (ms), counting what it started and finished; ACK, or the
/// verdict the body names after the time (`9500 retry`, `0 poison`).
#[derive(Default)]
struct Sleeper {
    started: Mutex<Vec<String>>,
    finished: Mutex<Vec<String>>,
}

impl RecordHandler for Sleeper {
    async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
        self.started
            .lock()
            .unwrap()
            .push(message.message_id.to_owned());
        let mut words = message.body.split_whitespace();
        let ms: u64 = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.finished
            .lock()
            .unwrap()
            .push(message.message_id.to_owned());
        match words.next() {
            Some("retry") => Verdict::retry("tried"),
            Some("down") => {
                Verdict::retry("unreachable").with_health(crate::processor::Health::Down("dep"))
            }
            Some("poison") => Verdict::poison("unreadable"),
            _ => Verdict::ack("slept"),
        }
    }
}

/// Hooks that keep the documents written.
#[derive(Clone, Default)]
struct Written(std::sync::Arc<Mutex<Vec<String>>>);

impl<H> WorkerHooks<H> for Written {
    fn write_metrics(&self, document: &str) {
        self.0.lock().unwrap().push(document.to_owned());
    }
}

type TestWorker<'q> = Worker<Sleeper, ManualClock, &'q FakeQueue, &'q FakeQueue, NoDeadLetters>;

fn worker(queue: &FakeQueue, options: WorkerOptions, one_at_a_time: bool) -> TestWorker<'_> {
    let batch = if one_at_a_time {
        BatchOptions::default().with_max_concurrency(std::num::NonZeroUsize::MIN)
    } else {
        BatchOptions::default()
    };
    Worker::new(
        Sleeper::default(),
        ManualClock::at(1_767_225_600_000),
        batch,
        queue,
        queue,
        options.with_metrics_interval_ms(0),
    )
}

impl QueuePort for &FakeQueue {
    fn arn(&self) -> &str {
        ARN
    }

    fn receive(
        &self,
        max: u8,
        wait_s: u8,
        visibility_s: u32,
    ) -> impl Future<Output = Result<Vec<SqsMessage>, QueueError>> + Send {
        (**self).receive(max, wait_s, visibility_s)
    }

    fn delete(
        &self,
        entries: &[Delete<'_>],
    ) -> impl Future<Output = Result<Vec<String>, QueueError>> + Send {
        (**self).delete(entries)
    }

    fn visible_messages(&self) -> impl Future<Output = Result<u64, QueueError>> + Send {
        (**self).visible_messages()
    }
}

/// SIGTERM in the middle of a batch run one record at a time: the record running finishes and
/// is deleted, the ones not started are released at once (visibility 0) and never deleted, and
/// the worker returns inside the drain timeout.
#[tokio::test(start_paused = true)]
async fn a_stop_finishes_what_started_and_releases_the_rest() {
    let queue = FakeQueue::with(&[("a", "5000"), ("b", "5000"), ("c", "5000")]);
    let worker = worker(
        &queue,
        WorkerOptions::default()
            .with_receives_in_flight(1)
            .with_drain_timeout_ms(20_000),
        true,
    );
    let started = tokio::time::Instant::now();
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    assert!(started.elapsed() < Duration::from_millis(20_000));
    assert_eq!(*worker.handler().started.lock().unwrap(), ["a"]);
    assert_eq!(*worker.handler().finished.lock().unwrap(), ["a"]);
    assert_eq!(queue.deleted(), ["a"]);
    let released: Vec<(String, u64)> = queue
        .changes()
        .into_iter()
        .filter(|c| c.1 == 0)
        .map(|c| (c.0, c.1))
        .collect();
    assert_eq!(released, [("b".to_owned(), 0), ("c".to_owned(), 0)]);
    assert_eq!(queue.visible_messages().await.unwrap(), 2);
    assert_eq!((report.deleted, report.released), (1, 2));
}

/// A DLQ that records what it is sent, under a redrive policy of `max_receive_count`.
struct RecordingDeadLetters {
    max_receive_count: u32,
    moved: Mutex<Vec<(String, String)>>,
}

impl DeadLetterPort for &RecordingDeadLetters {
    async fn send(
        &self,
        _source_arn: &str,
        moves: &[crate::dead_letter::Move<'_>],
    ) -> Vec<crate::dead_letter::MoveFailure> {
        let mut moved = self.moved.lock().unwrap();
        for m in moves {
            moved.push((m.message.message_id.to_owned(), m.failure.reason.clone()));
        }
        Vec::new()
    }

    async fn max_receive_count(&self, _source_arn: &str) -> Option<u32> {
        Some(self.max_receive_count)
    }
}

/// Issue 49, finding 2. SIGTERM mid-batch at the receive before the queue's redrive
/// (`maxReceiveCount` 3, so receive 2 is the give-up's): the record running finishes, and the
/// ones not started are released like at any other receive, never moved to the DLQ as
/// `retries_exhausted`. Only a record that was tried can give up; a deploy or a scale-in never
/// costs an order its place.
#[tokio::test(start_paused = true)]
async fn a_stop_at_the_give_up_receive_releases_what_did_not_start() {
    let queue = FakeQueue::with(&[("a", "5000"), ("b", "5000"), ("c", "5000")]).received_before(1);
    let dead_letters = RecordingDeadLetters {
        max_receive_count: 3,
        moved: Mutex::default(),
    };
    let worker = Worker::new(
        Sleeper::default(),
        ManualClock::at(1_767_225_600_000),
        BatchOptions::default().with_max_concurrency(std::num::NonZeroUsize::MIN),
        &queue,
        &queue,
        WorkerOptions::default()
            .with_receives_in_flight(1)
            .with_drain_timeout_ms(20_000)
            .with_metrics_interval_ms(0),
    )
    .with_dead_letters(DeadLetters {
        port: &dead_letters,
        moved_by: "worker".into(),
    });
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    assert_eq!(*worker.handler().finished.lock().unwrap(), ["a"]);
    assert!(
        dead_letters.moved.lock().unwrap().is_empty(),
        "moved: {:?}",
        dead_letters.moved.lock().unwrap()
    );
    assert_eq!(queue.deleted(), ["a"]);
    let released: Vec<String> = queue
        .changes()
        .into_iter()
        .filter(|c| c.1 == 0)
        .map(|c| c.0)
        .collect();
    assert_eq!(released, ["b", "c"]);
    assert_eq!(queue.visible_messages().await.unwrap(), 2);
    assert_eq!((report.deleted, report.released), (1, 2));
}

/// A record longer than the drain timeout: cut at the drain's end, nothing of its batch
/// deleted, everything released.
#[tokio::test(start_paused = true)]
async fn past_the_drain_timeout_the_unfinished_batch_is_released() {
    let queue = FakeQueue::with(&[("long", "60000")]);
    let worker = worker(
        &queue,
        WorkerOptions::default()
            .with_receives_in_flight(1)
            .with_drain_timeout_ms(5_000),
        false,
    );
    let started = tokio::time::Instant::now();
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    assert_eq!(started.elapsed(), Duration::from_millis(6_000));
    assert!(worker.handler().finished.lock().unwrap().is_empty());
    assert!(queue.deleted().is_empty());
    assert_eq!((report.deleted, report.released), (0, 1));
    assert_eq!(queue.visible_messages().await.unwrap(), 1);
}

/// Issue 49, worker item 2. At the drain's end only what did not finish is released: a batch
/// of a quick record, a POISON one and one longer than the drain. The quick one is deleted, the
/// POISON one moved and deleted, neither released (a release would redeliver the first and
/// copy the second to the DLQ again); the long one is abandoned and released.
#[tokio::test(start_paused = true)]
async fn at_the_drains_end_only_the_unfinished_records_are_released() {
    let queue = FakeQueue::with(&[("quick", "1000"), ("bad", "0 poison"), ("long", "60000")]);
    let dead_letters = RecordingDeadLetters {
        max_receive_count: 3,
        moved: Mutex::default(),
    };
    let worker = Worker::new(
        Sleeper::default(),
        ManualClock::at(1_767_225_600_000),
        BatchOptions::default(),
        &queue,
        &queue,
        WorkerOptions::default()
            .with_receives_in_flight(1)
            .with_drain_timeout_ms(5_000)
            .with_metrics_interval_ms(0),
    )
    .with_dead_letters(DeadLetters {
        port: &dead_letters,
        moved_by: "worker".into(),
    });
    let started = tokio::time::Instant::now();
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(500)))
        .await;
    assert_eq!(started.elapsed(), Duration::from_millis(5_500));
    assert_eq!(
        *dead_letters.moved.lock().unwrap(),
        [("bad".to_owned(), "unreadable".to_owned())]
    );
    assert_eq!(queue.deleted(), ["quick", "bad"]);
    let released: Vec<String> = queue
        .changes()
        .into_iter()
        .filter(|c| c.1 == 0)
        .map(|c| c.0)
        .collect();
    assert_eq!(released, ["long"]);
    assert_eq!((report.deleted, report.released), (2, 1));
    assert_eq!(queue.visible_messages().await.unwrap(), 1);
}

/// A record that runs nearly three times the extension is kept invisible by the heartbeat: a change
/// every third of the extension, each of the whole extension, and the message never visible
/// while it runs.
#[tokio::test(start_paused = true)]
async fn the_heartbeat_keeps_a_long_record_invisible() {
    let queue = FakeQueue::with(&[("long", "85000")]);
    let worker = worker(
        &queue,
        WorkerOptions::default()
            .with_receives_in_flight(1)
            .with_visibility_extension_s(30),
        false,
    );
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(95_000)))
        .await;
    assert_eq!(queue.deleted(), ["long"]);
    assert_eq!(report.deleted, 1);
    let changes = queue.changes();
    // Every 10 s from the receive (Tokio's timer rounds each to its next millisecond): eight
    // before the record ended at 85 s.
    let times: Vec<u64> = changes.iter().map(|c| c.2).collect();
    assert_eq!(times.len(), 8, "{times:?}");
    for (i, at) in times.iter().enumerate() {
        let due = (i as u64 + 1) * 10_000;
        assert!((due..due + 10).contains(at), "{times:?}");
    }
    assert!(changes.iter().all(|c| c.0 == "long" && c.1 == 30));
    // Received once: never visible while it ran.
    assert_eq!(worker.handler().started.lock().unwrap().len(), 1);
}

/// Issue 49, worker item 1. A RETRY's backoff is the last visibility its message gets: the
/// heartbeat stops when the records are processed, before the backoff, so no tick overwrites it.
/// The backoff's call answers a second after SQS applied it, and the record ends half a second
/// before a tick: with the heartbeat still running through the backoff, that tick lands after it
/// and the message would come back after the extension (30 s) instead of its backoff.
#[tokio::test(start_paused = true)]
async fn no_heartbeat_overwrites_a_retrys_backoff() {
    let queue = FakeQueue::with(&[("retry", "9500 retry")]);
    queue.change_latency_ms.store(1_000, Ordering::SeqCst);
    let worker = worker(
        &queue,
        WorkerOptions::default()
            .with_receives_in_flight(1)
            .with_visibility_extension_s(30),
        false,
    )
    .with_backoff(BackoffPolicy::new(200, 200));
    worker
        .run(tokio::time::sleep(Duration::from_millis(15_000)))
        .await;
    let changes = queue.changes();
    // Receive 1: a delay in [100, 200] s, set when the record ended.
    let (id, seconds, at) = changes.last().cloned().expect("a backoff");
    assert_eq!(id, "retry");
    assert!((100..=200).contains(&seconds), "{changes:?}");
    assert!((9_500..9_510).contains(&at), "{changes:?}");
    assert!(changes.iter().all(|c| c.1 != 30), "{changes:?}");
    assert_eq!(queue.visible_from("retry"), Some(at + seconds * 1_000));
}

/// Issue 49, worker item 5. The receive itself hides its messages for the extension (SQS
/// applies `ReceiveMessage`'s `VisibilityTimeout` over the queue's own, which may end before the
/// first heartbeat, a third of the extension later): the other lane, polling every second, never
/// receives the record while it runs, and the first heartbeat renews the receive's visibility.
#[tokio::test(start_paused = true)]
async fn the_receive_hides_its_messages_for_the_extension() {
    let queue = FakeQueue::with(&[("long", "25000")]);
    let worker = worker(
        &queue,
        WorkerOptions::default()
            .with_receives_in_flight(2)
            .with_wait_time_seconds(1)
            .with_visibility_extension_s(60),
        false,
    );
    worker
        .run(tokio::time::sleep(Duration::from_millis(26_000)))
        .await;
    assert_eq!(queue.receives(), [("long".to_owned(), 60)]);
    assert_eq!(*worker.handler().started.lock().unwrap(), ["long"]);
    assert_eq!(queue.deleted(), ["long"]);
    let changes: Vec<(String, u64)> = queue.changes().into_iter().map(|c| (c.0, c.1)).collect();
    assert_eq!(changes, [("long".to_owned(), 60)]);
}

/// The heartbeat never extends past SQS's 12 hours from the receive: it stops (an error in the
/// log), and the message becomes visible while it still runs.
#[tokio::test(start_paused = true)]
async fn the_heartbeat_stops_at_the_twelve_hour_cap() {
    let thirteen_hours = 13 * 3_600_000u64;
    let queue = FakeQueue::with(&[("endless", &thirteen_hours.to_string())]);
    let options = WorkerOptions::default()
        .with_receives_in_flight(1)
        .with_visibility_extension_s(600)
        .with_batch_timeout_ms(14 * 3_600_000)
        .with_drain_timeout_ms(1_000);
    let worker = worker(&queue, options, false);
    let shutdown = tokio::time::sleep(Duration::from_millis(12 * 3_600_000 + 60_000));
    worker.run(shutdown).await;
    let last = queue
        .changes()
        .iter()
        .filter(|c| c.1 > 0)
        .map(|c| c.2)
        .max();
    let last = last.expect("extended");
    assert!(last + 600_000 <= VISIBILITY_CAP_MS, "{last}");
    assert!(last + 600_000 + 200_000 > VISIBILITY_CAP_MS, "{last}");
    assert_eq!(*worker.handler().started.lock().unwrap(), ["endless"]);
}

/// A delete entry that fails is retried; the message is deleted once, and counted once.
#[tokio::test(start_paused = true)]
async fn a_failed_delete_entry_is_retried() {
    let queue = FakeQueue::with(&[("a", "0"), ("b", "0")]);
    queue.fail_deletes.lock().unwrap().push("b".to_owned());
    let worker = worker(&queue, WorkerOptions::default(), false);
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    let mut deleted = queue.deleted();
    deleted.sort();
    assert_eq!(deleted, ["a", "b"]);
    assert_eq!((report.deleted, report.delete_failures), (2, 0));
}

/// A delete that fails every attempt is logged and counted; the message stays in the queue
/// (it comes back, and the handler's idempotency answers it).
#[tokio::test(start_paused = true)]
async fn a_delete_that_fails_every_attempt_is_left_for_the_next_receive() {
    let queue = FakeQueue::with(&[("a", "0")]);
    queue
        .fail_deletes
        .lock()
        .unwrap()
        .extend(["a".to_owned(), "a".to_owned(), "a".to_owned()]);
    let worker = worker(
        &queue,
        WorkerOptions::default().with_receives_in_flight(1),
        false,
    );
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    assert!(queue.deleted().is_empty());
    assert_eq!((report.deleted, report.delete_failures), (0, 1));
}

/// Failed receives are retried with backoff until the queue answers; the worker goes on.
#[tokio::test(start_paused = true)]
async fn failed_receives_are_retried_with_backoff() {
    let queue = FakeQueue::with(&[("a", "0")]);
    queue.receive_errors.store(3, Ordering::SeqCst);
    let worker = worker(
        &queue,
        WorkerOptions::default().with_receives_in_flight(1),
        false,
    );
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(30_000)))
        .await;
    assert_eq!(report.receive_failures, 3);
    assert_eq!(queue.deleted(), ["a"]);
}

#[test]
fn receive_backoff_doubles_from_one_second_to_a_minute_with_equal_jitter() {
    for (failures, bound) in [
        (1, 1_000),
        (2, 2_000),
        (3, 4_000),
        (7, 60_000),
        (40, 60_000),
    ] {
        assert_eq!(
            receive_backoff(failures, 0),
            Duration::from_millis(bound / 2)
        );
        assert_eq!(
            receive_backoff(failures, bound / 2),
            Duration::from_millis(bound)
        );
    }
}

/// The seeds' worked example: 1,500 visible messages, 0.1 s a message, 10 s acceptable: 15
/// consumers; at 10 consumers the backlog per consumer is 150, above the target of 100 (10 s /
/// 0.1 s), so target tracking scales out to 15, where it is 100.
#[test]
fn the_seeds_scaling_example() {
    assert_eq!(desired_consumers(1_500, 0.1, 10.0), 15);
    let target = 10.0 / 0.1;
    assert_eq!(backlog_per_consumer(1_500, 10), 150.0);
    assert!(backlog_per_consumer(1_500, 10) > target);
    assert_eq!(backlog_per_consumer(1_500, 15), target);
    assert_eq!(desired_consumers(0, 0.1, 10.0), 0);
    assert_eq!(desired_consumers(1, 0.1, 10.0), 1);
    assert_eq!(backlog_per_consumer(1_500, 0), 1_500.0);
}

/// The document CloudWatch reads the backlog from: the queue's visible messages and one
/// consumer, per queue name.
#[test]
fn the_backlog_document_is_emf() {
    let doc: serde_json::Value =
        serde_json::from_str(&backlog_document("Orders", "work", 1_500, 1.0, 7)).unwrap();
    assert_eq!(doc["VisibleMessages"], 1_500);
    assert_eq!(doc["Consumers"], 1);
    assert_eq!(doc["QueueName"], "work");
    assert_eq!(doc["_aws"]["Timestamp"], 7);
    let metrics = &doc["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(metrics["Namespace"], "Orders");
    assert_eq!(metrics["Dimensions"], serde_json::json!([["QueueName"]]));
    assert_eq!(metrics["Metrics"][0]["Name"], "VisibleMessages");
    assert_eq!(metrics["Metrics"][1]["Name"], "Consumers");
}

/// Issue 49, worker item 4. Every interval writes the backlog and this worker's share of a
/// minute: two documents of 0.5 a minute at 30 s, so target tracking's per-minute sum of
/// `Consumers` is still one per worker.
#[tokio::test(start_paused = true)]
async fn the_backlog_is_written_every_interval_with_its_share_of_a_consumer() {
    let queue = FakeQueue::with(&[]);
    let written = Written::default();
    let worker: TestWorker<'_> = Worker::new(
        Sleeper::default(),
        ManualClock::at(1_767_225_600_000),
        BatchOptions::default(),
        &queue,
        &queue,
        WorkerOptions::default().with_metrics_interval_ms(30_000),
    )
    .with_hooks(written.clone());
    worker
        .run(tokio::time::sleep(Duration::from_millis(61_000)))
        .await;
    let documents: Vec<serde_json::Value> = written
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(documents.len(), 2);
    for document in &documents {
        assert_eq!(document["Consumers"], 0.5);
        assert_eq!(document["VisibleMessages"], 0);
    }
    let half: serde_json::Value =
        serde_json::from_str(&backlog_document("Orders", "work", 3, 0.5, 7)).unwrap();
    assert_eq!(half["Consumers"], 0.5);
}

#[test]
fn the_stop_timeout_covers_a_receive_and_the_drain() {
    assert_eq!(stop_timeout_s(&WorkerOptions::default()), 50);
    let options = WorkerOptions::default()
        .with_wait_time_seconds(10)
        .with_drain_timeout_ms(1_500);
    assert_eq!(stop_timeout_s(&options), 17);
}

#[test]
fn options_from_the_environment_name_a_bad_variable() {
    let env = Env::new(|name| match name {
        "SQS_BATCH_WORKER_VISIBILITY_EXTENSION_SECONDS" => Some("90".to_owned()),
        "SQS_BATCH_WORKER_DRAIN_TIMEOUT_SECONDS" => Some("40".to_owned()),
        _ => None,
    });
    let options = WorkerOptions::from_env(&env).unwrap();
    assert_eq!(options.visibility_extension_s, 90);
    assert_eq!(options.drain_timeout_ms, 40_000);
    assert_eq!(options.wait_time_seconds, 20);
    assert_eq!(options.metrics_interval_ms, 60_000);
    let bad =
        Env::new(|name| (name == "SQS_BATCH_WORKER_WAIT_TIME_SECONDS").then(|| "21".to_owned()));
    let error = WorkerOptions::from_env(&bad).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("SQS_BATCH_WORKER_WAIT_TIME_SECONDS="),
        "{error}"
    );
}

/// Issue 49, worker item 4. `SQS_BATCH_WORKER_METRICS_INTERVAL_SECONDS` sets the backlog's interval; a
/// value that is not a divisor of a minute, or out of 1-60, stops start-up naming it.
#[test]
fn the_metrics_interval_is_a_divisor_of_a_minute() {
    let with = |value: &'static str| {
        WorkerOptions::from_env(&Env::new(move |name| {
            (name == "SQS_BATCH_WORKER_METRICS_INTERVAL_SECONDS").then(|| value.to_owned())
        }))
    };
    assert_eq!(with("15").unwrap().metrics_interval_ms, 15_000);
    assert_eq!(with("60").unwrap().metrics_interval_ms, 60_000);
    for bad in ["7", "0", "61", "120", "ten"] {
        let error = with(bad).unwrap_err().to_string();
        assert!(
            error.starts_with(&format!(
                "SQS_BATCH_WORKER_METRICS_INTERVAL_SECONDS=\"{bad}\""
            )),
            "{error}"
        );
    }
}

/// A handler that answers for another one, counting what it was given.
struct Counting<H> {
    inner: H,
    given: AtomicUsize,
}

impl<H: RecordHandler> RecordHandler for Counting<H> {
    async fn handle(&self, message: &Message<'_>, context: Invocation) -> Verdict {
        self.given.fetch_add(1, Ordering::SeqCst);
        self.inner.handle(message, context).await
    }
}

/// `map_handler` wraps the worker's handler and keeps the rest: the wrapper is given every record
/// the worker starts, and the worker deletes what the wrapped handler acknowledged.
#[tokio::test(start_paused = true)]
async fn a_mapped_handler_is_given_every_record() {
    let queue = FakeQueue::with(&[("a", "10"), ("b", "10")]);
    let worker = worker(&queue, WorkerOptions::default(), false).map_handler(
        |inner| Counting {
            inner,
            given: AtomicUsize::new(0),
        },
        |counting| &counting.inner,
    );
    worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    assert_eq!(worker.handler().given.load(Ordering::SeqCst), 2);
    assert_eq!(*worker.handler().inner.finished.lock().unwrap(), ["a", "b"]);
    let mut deleted = queue.deleted();
    deleted.sort();
    assert_eq!(deleted, ["a", "b"]);
}

/// While a dependency is down for the worker it receives one record per probe interval, not a
/// batch: the others stay in the queue on their schedule. The same queue without recovery is
/// received again and again.
#[tokio::test(start_paused = true)]
async fn while_a_dependency_is_down_the_worker_receives_only_its_probe() {
    let bodies = [
        ("a", "0 down"),
        ("b", "0 down"),
        ("c", "0 down"),
        ("d", "0 down"),
    ];
    let run = |recovery: bool| async move {
        let queue = FakeQueue::with(&bodies);
        let mut worker = worker(
            &queue,
            WorkerOptions::default().with_receives_in_flight(1),
            false,
        )
        .with_backoff(BackoffPolicy::new(1, 1));
        if recovery {
            worker = worker.with_recovery(RecoveryPolicy::new(30));
        }
        worker
            .run(tokio::time::sleep(Duration::from_millis(20_000)))
            .await;
        queue.receives().len()
    };
    // The first batch finds it down (four in a row); the container's clock stands still, so
    // one probe's receive follows and no other within the 20 s.
    assert_eq!(run(true).await, 5);
    let without = run(false).await;
    assert!(without > 10, "received {without} times without recovery");
}
