//! `process-orders worker` against moto's SQS (started by the tests), dynoxide's DynamoDB
//! (embedded) and the IETF-draft payment stub (real HTTP): the real binary stopped by SIGTERM
//! and killed by SIGKILL, and the worker in-process behind a queue whose deletes fail.

use std::process::Stdio;
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use idempotency::testkit::dynoxide::{Dynoxide, unique_table};
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::testkit::dynamo::{create_table, moto_endpoint};
use process_orders::testkit::payment_stub::{Behaviour, PaymentStub};
use sqs_batch::worker::sqs::SqsQueue;
use sqs_batch::worker::{Delete, QueueError, QueuePort, WorkerOptions};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_process-orders");

/// A queue on moto with its own visibility timeout, a table on dynoxide, a stub provider.
struct World {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    stub: PaymentStub,
    dynamodb: Dynoxide,
    table: String,
}

async fn world(visibility_timeout_s: u32) -> World {
    let sqs = aws_sdk_sqs::Client::new(&process_orders::aws::local_config(&moto_endpoint()));
    let name = format!("worker-{}", fastrand::u64(..));
    let queue_url = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(
            QueueAttributeName::VisibilityTimeout,
            visibility_timeout_s.to_string(),
        )
        .send()
        .await
        .expect("queue")
        .queue_url
        .expect("url");
    let dynamodb = Dynoxide::start().await;
    let table = unique_table();
    create_table(&dynamodb.client(), &table).await;
    World {
        sqs,
        queue_url,
        stub: PaymentStub::start().await,
        dynamodb,
        table,
    }
}

impl World {
    async fn send(&self, order_id: &str) {
        self.sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(serde_json::json!({ "order_id": order_id, "amount": 10 }).to_string())
            .send()
            .await
            .expect("send");
    }

    /// (visible, in flight), as SQS counts them.
    async fn depth(&self) -> (u64, u64) {
        let attributes = self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .expect("attributes");
        let read = |name: QueueAttributeName| {
            attributes
                .attributes()
                .and_then(|a| a.get(&name))
                .and_then(|n| n.parse().ok())
                .unwrap_or(u64::MAX)
        };
        (
            read(QueueAttributeName::ApproximateNumberOfMessages),
            read(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// A receive by somebody else, waiting up to `wait_s`: the message ids it got.
    async fn receive(&self, wait_s: i32) -> Vec<String> {
        self.sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait_s)
            .send()
            .await
            .expect("receive")
            .messages()
            .iter()
            .filter_map(|m| m.body().map(str::to_owned))
            .collect()
    }

    /// The worker binary on this world, with `vars` on top.
    fn spawn(&self, vars: &[(&str, &str)]) -> Child {
        worker_command()
            .args(["worker", "--queue-url", &self.queue_url])
            .env_clear()
            .envs([
                ("AWS_REGION", "us-east-1"),
                ("AWS_ACCESS_KEY_ID", "test"),
                ("AWS_SECRET_ACCESS_KEY", "test"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
                ("AWS_ENDPOINT_URL_SQS", &moto_endpoint()),
                ("AWS_ENDPOINT_URL_DYNAMODB", &self.dynamodb.endpoint()),
                ("IDEMPOTENCY_TABLE", &self.table),
                ("PAYMENT_API_URL", &self.stub.url()),
                ("METRICS_ENABLED", "false"),
                ("SQS_BATCH_WORKER_WAIT_TIME_SECONDS", "1"),
            ])
            .envs(vars.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the worker")
    }
}

/// The worker's program: this build's binary, or, with `WORKER_IMAGE_ROOTFS` set
/// (`scripts/check-worker-image.sh`), the image's entry point started inside its extracted root
/// file system as the image's user, so the image itself is what runs. Its arguments follow, as
/// ECS puts a task's command after the entry point.
fn worker_command() -> Command {
    let Ok(rootfs) = std::env::var("WORKER_IMAGE_ROOTFS") else {
        return Command::new(BIN);
    };
    let entrypoint = std::env::var("WORKER_IMAGE_ENTRYPOINT").expect("the image's entry point");
    let user = std::env::var("WORKER_IMAGE_USER").expect("the image's user");
    // chroot replaces itself with the entry point: its pid is the worker's, for the signals.
    let mut command = Command::new("/usr/sbin/chroot");
    command
        .arg(format!("--userspec={user}"))
        .arg(rootfs)
        .args(entrypoint.split_whitespace());
    command
}

/// Sends `signal` (`TERM`, `KILL`) to `child`.
async fn signal(child: &Child, signal: &str) {
    let pid = child.id().expect("running").to_string();
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid])
        .status()
        .await
        .expect("kill");
    assert!(status.success());
}

/// The key whose charge the stub holds in flight, once one is.
async fn in_flight(world: &World, keys: &[String]) -> String {
    for _ in 0..400 {
        if let Some(key) = keys.iter().find(|k| world.stub.requests(k) > 0) {
            world.stub.in_flight(key).await;
            return key.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no charge started in 20 s");
}

/// SIGTERM in the middle of a batch of long records, run one at a time: the record running
/// finishes, is charged once and deleted; the records not started are visible again at once
/// (the queue's own visibility timeout of 60 s would hide them); the worker exits 0 within its
/// stop timeout (a receive, the drain, a margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_batch_finishes_what_started_and_releases_the_rest() {
    let world = world(60).await;
    world
        .stub
        .set_default(Behaviour::Slow(Duration::from_secs(2)));
    let keys: Vec<String> = (0..5).map(|i| format!("term-{i}")).collect();
    for key in &keys {
        world.send(key).await;
    }
    let mut worker = world.spawn(&[
        ("SQS_BATCH_MAX_CONCURRENCY", "1"),
        ("SQS_BATCH_WORKER_RECEIVES_IN_FLIGHT", "1"),
        ("SQS_BATCH_WORKER_DRAIN_TIMEOUT_SECONDS", "10"),
    ]);
    let running = in_flight(&world, &keys).await;
    signal(&worker, "TERM").await;
    let stop_timeout = Duration::from_secs(1 + 10 + 5);
    let status = tokio::time::timeout(stop_timeout, worker.wait())
        .await
        .expect("stopped within its stop timeout")
        .expect("status");
    assert!(status.success(), "{status}");
    assert_eq!(world.stub.charged_keys(), std::slice::from_ref(&running));
    assert_eq!(world.stub.charges(&running), 1);
    // The finished one deleted, the others released: all visible now, none in flight.
    assert_eq!(world.depth().await, (keys.len() as u64 - 1, 0));
    let mut left = world.receive(0).await;
    left.sort();
    assert_eq!(left.len(), keys.len() - 1);
    assert!(
        !left
            .iter()
            .any(|body| body.contains(&format!("\"{running}\"")))
    );
}

/// A record that runs three times the queue's visibility timeout is not received by anyone else
/// while its worker lives (the heartbeat), and is deleted once charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_holds_a_record_three_visibility_timeouts_long() {
    let world = world(2).await;
    world
        .stub
        .set("long", Behaviour::Slow(Duration::from_secs(6)));
    world.send("long").await;
    // One receive at a time: the worker's own next receive cannot take the message back, only
    // the test's can.
    let _worker = world.spawn(&[
        ("SQS_BATCH_WORKER_VISIBILITY_EXTENSION_SECONDS", "3"),
        ("SQS_BATCH_WORKER_RECEIVES_IN_FLIGHT", "1"),
    ]);
    in_flight(&world, &["long".to_owned()]).await;
    // Six seconds of another consumer's receives, three visibility timeouts: nothing.
    for _ in 0..6 {
        assert_eq!(world.receive(1).await, Vec::<String>::new());
    }
    world.stub.settled("long").await;
    drained(&world).await;
    assert_eq!(world.stub.charges("long"), 1);
}

/// Waits (up to 60 s) until the queue holds nothing, visible or in flight.
async fn drained(world: &World) {
    for _ in 0..600 {
        if world.depth().await == (0, 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(world.depth().await, (0, 0), "not drained in 60 s");
}

/// SIGKILL in the middle of a charge: the heartbeat stops with the worker, so the message is
/// back within one extension; a second worker takes the key over once the dead one's lease ends,
/// looks the charge up, and the order is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_message_comes_back_and_is_charged_once() {
    let world = world(2).await;
    world
        .stub
        .set("dies", Behaviour::Slow(Duration::from_millis(1_500)));
    world.send("dies").await;
    // A lease of 8 s (above 2 x 1 s of store calls + 2 x 2 s of payment), so the takeover comes
    // soon after the kill.
    let short = [
        ("SQS_BATCH_WORKER_VISIBILITY_EXTENSION_SECONDS", "3"),
        ("SQS_BATCH_WORKER_RECEIVES_IN_FLIGHT", "1"),
        ("IDEMPOTENCY_LEASE_SECONDS", "8"),
        ("PAYMENT_TIMEOUT_MS", "2000"),
        ("DYNAMODB_ATTEMPT_TIMEOUT_MS", "500"),
        ("DYNAMODB_OPERATION_TIMEOUT_MS", "1000"),
    ];
    let mut first = world.spawn(&short);
    in_flight(&world, &["dies".to_owned()]).await;
    signal(&first, "KILL").await;
    let _ = first.wait().await;
    // Back within one extension (3 s), plus a second of the receive's own wait.
    let mut back = Vec::new();
    for _ in 0..4 {
        back = world.receive(1).await;
        if !back.is_empty() {
            break;
        }
    }
    assert_eq!(back.len(), 1, "the message did not come back");
    assert!(back[0].contains("\"dies\""));
    let _second = world.spawn(&short);
    drained(&world).await;
    assert_eq!(world.stub.charges("dies"), 1);
}

/// Issue 49, worker item 5. The adapter's `ReceiveMessage` carries the visibility it is given
/// (the worker's extension) as its `VisibilityTimeout`: on a queue whose own timeout is 0, a
/// message it received is hidden from every other receive at once, not from the first heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_receives_with_the_visibility_it_is_given() {
    let world = world(0).await;
    world.send("hidden").await;
    let queue = SqsQueue::connect(world.sqs.clone(), &world.queue_url)
        .await
        .expect("queue");
    let received = queue.receive(10, 0, 60).await.expect("receive");
    assert_eq!(received.len(), 1);
    assert_eq!(world.receive(0).await, Vec::<String>::new());
    assert_eq!(world.depth().await, (0, 1));
}

/// A queue whose first `failing` delete calls fail every entry.
struct FailingDeletes {
    queue: SqsQueue,
    failing: std::sync::atomic::AtomicUsize,
}

impl QueuePort for FailingDeletes {
    fn arn(&self) -> &str {
        self.queue.arn()
    }

    async fn receive(
        &self,
        max: u8,
        wait_s: u8,
        visibility_s: u32,
    ) -> Result<Vec<sqs_batch::edge::SqsMessage>, QueueError> {
        self.queue.receive(max, wait_s, visibility_s).await
    }

    async fn delete(&self, entries: &[Delete<'_>]) -> Result<Vec<String>, QueueError> {
        use std::sync::atomic::Ordering;
        if self.failing.load(Ordering::SeqCst) > 0 {
            self.failing.fetch_sub(1, Ordering::SeqCst);
            return Ok(entries.iter().map(|e| e.message_id.to_owned()).collect());
        }
        self.queue.delete(entries).await
    }

    async fn visible_messages(&self) -> Result<u64, QueueError> {
        self.queue.visible_messages().await
    }
}

/// `DeleteMessageBatch` fails an entry every attempt: the message comes back after the
/// receive's visibility (the extension, 3 s) and is acknowledged as a duplicate, with no second
/// charge request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_delete_failed_comes_back_as_a_duplicate() {
    let world = world(2).await;
    world.send("d-1").await;
    let config = Config::from_lookup(|name| match name {
        "PAYMENT_API_URL" => Some(world.stub.url()),
        _ => None,
    })
    .expect("config");
    let app = App::build(&config).await.expect("app");
    let queue = FailingDeletes {
        queue: SqsQueue::connect(world.sqs.clone(), &world.queue_url)
            .await
            .expect("queue"),
        failing: std::sync::atomic::AtomicUsize::new(3),
    };
    let visibility = sqs_batch::visibility::SqsVisibility::new(world.sqs.clone());
    let options = WorkerOptions::default()
        .with_wait_time_seconds(1)
        .with_visibility_extension_s(3)
        .with_metrics_interval_ms(0)
        .with_receives_in_flight(1);
    let worker = app.into_worker(queue, visibility, options);
    let report = worker.run(drained(&world)).await;
    assert_eq!(world.depth().await, (0, 0));
    assert_eq!(
        (report.batches, report.deleted, report.delete_failures),
        (2, 1, 1)
    );
    assert_eq!(world.stub.charges("d-1"), 1);
    assert_eq!(world.stub.requests("d-1"), 1);
}

/// A queue in memory, for the worker in-process on Tokio's paused clock: each receive takes up
/// to `max` of the next batch's messages (nothing comes back), deletes are kept.
struct ListQueue {
    batches: std::sync::Mutex<std::collections::VecDeque<Vec<sqs_batch::edge::SqsMessage>>>,
    deleted: std::sync::Mutex<Vec<String>>,
}

impl ListQueue {
    /// Messages `id` with `body`, each at its first receive, in one batch.
    fn with(bodies: &[(&str, &str)]) -> Self {
        Self::batches(&[bodies])
    }

    /// Each list a receive's batch.
    fn batches(batches: &[&[(&str, &str)]]) -> Self {
        let batches = batches
            .iter()
            .map(|bodies| bodies.iter().map(|(id, body)| message(id, body)).collect())
            .collect();
        Self {
            batches: std::sync::Mutex::new(batches),
            deleted: std::sync::Mutex::default(),
        }
    }
}

/// Message `id` with `body`, at its first receive.
fn message(id: &str, body: &str) -> sqs_batch::edge::SqsMessage {
    let mut message = sqs_batch::edge::SqsMessage::default();
    message.message_id = Some(id.to_owned());
    message.receipt_handle = Some(format!("{id}#1"));
    message.body = Some(body.to_owned());
    message.attributes = [("ApproximateReceiveCount".to_owned(), "1".to_owned())].into();
    message
}

impl QueuePort for &ListQueue {
    fn arn(&self) -> &str {
        "arn:aws:sqs:eu-west-1:123456789012:orders"
    }

    async fn receive(
        &self,
        max: u8,
        wait_s: u8,
        _visibility_s: u32,
    ) -> Result<Vec<sqs_batch::edge::SqsMessage>, QueueError> {
        let got: Vec<sqs_batch::edge::SqsMessage> = {
            let mut batches = self.batches.lock().expect("lock");
            match batches.front_mut() {
                Some(next) => {
                    let n = usize::from(max).min(next.len());
                    let got = next.drain(..n).collect();
                    if next.is_empty() {
                        batches.pop_front();
                    }
                    got
                }
                None => Vec::new(),
            }
        };
        if got.is_empty() {
            tokio::time::sleep(Duration::from_secs(u64::from(wait_s.max(1)))).await;
        }
        Ok(got)
    }

    async fn delete(&self, entries: &[Delete<'_>]) -> Result<Vec<String>, QueueError> {
        let mut deleted = self.deleted.lock().expect("lock");
        deleted.extend(entries.iter().map(|e| e.message_id.to_owned()));
        Ok(Vec::new())
    }

    async fn visible_messages(&self) -> Result<u64, QueueError> {
        let batches = self.batches.lock().expect("lock");
        Ok(batches.iter().map(Vec::len).sum::<usize>() as u64)
    }
}

/// A visibility port that accepts every change (nothing here reads visibility).
#[derive(Debug, Clone, Copy)]
struct NoChanges;

impl sqs_batch::visibility::VisibilityPort for NoChanges {
    async fn change(
        &self,
        _queue_url: &str,
        _changes: &[sqs_batch::visibility::Change<'_>],
    ) -> Vec<sqs_batch::visibility::ChangeFailure> {
        Vec::new()
    }
}

/// The function with its stores and provider in memory.
type InMemoryApp = App<
    idempotency::MemoryStore,
    process_orders::payment::SimulatedGateway,
    lambda_kit::ManualClock,
>;

/// The function with `vars`, its stores in memory, its metrics documents kept.
fn in_memory_app(
    vars: &'static [(&'static str, &'static str)],
) -> (InMemoryApp, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let config = Config::from_lookup(|k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_owned())
    })
    .expect("config");
    let documents = std::sync::Arc::default();
    let app = App::with_ports(
        &config,
        idempotency::MemoryStore::new(config.store.retention),
        process_orders::payment::SimulatedGateway::new(),
        lambda_kit::ManualClock::at(1_767_225_600_000),
    )
    .with_metrics_sink(process_orders::metrics::MetricsSink::Memory(
        std::sync::Arc::clone(&documents),
    ));
    (app, documents)
}

/// Issue 49, worker item 4. With metrics off (`METRICS_ENABLED=false`, or Powertools'
/// `POWERTOOLS_METRICS_DISABLED=true`) the worker writes no backlog document, whatever its
/// options ask; with metrics on, it writes one every interval to the function's metrics sink.
#[tokio::test(start_paused = true)]
async fn the_backlog_document_follows_the_functions_metrics_switch() {
    let every_second = WorkerOptions::default().with_metrics_interval_ms(1_000);
    for off in [
        &[("METRICS_ENABLED", "false")][..],
        &[("POWERTOOLS_METRICS_DISABLED", "true")][..],
    ] {
        let (app, documents) = in_memory_app(off);
        let queue = ListQueue::with(&[]);
        let worker = app.into_worker(&queue, NoChanges, every_second);
        assert_eq!(worker.options().metrics_interval_ms, 0, "{off:?}");
        worker
            .run(tokio::time::sleep(Duration::from_millis(2_500)))
            .await;
        assert!(documents.lock().expect("lock").is_empty(), "{off:?}");
    }
    let (app, documents) = in_memory_app(&[]);
    let queue = ListQueue::with(&[]);
    let worker = app.into_worker(&queue, NoChanges, every_second);
    worker
        .run(tokio::time::sleep(Duration::from_millis(2_500)))
        .await;
    let documents = documents.lock().expect("lock").clone();
    assert_eq!(documents.len(), 2, "{documents:?}");
    for document in documents {
        let document: serde_json::Value = serde_json::from_str(&document).expect("json");
        assert_eq!(document["QueueName"], "orders");
        assert_eq!(document["VisibleMessages"], 0);
        assert_eq!(document["Consumers"], 1.0 / 60.0);
    }
}

/// The metrics documents of `documents` that count records (not the backlog's), parsed.
fn batch_documents(documents: &std::sync::Mutex<Vec<String>>) -> Vec<serde_json::Value> {
    documents
        .lock()
        .expect("lock")
        .iter()
        .map(|d| serde_json::from_str::<serde_json::Value>(d).expect("json"))
        .filter(|d| d.get("Records").is_some())
        .collect()
}

/// Issue 49, worker item 3. A worker's batch writes the function's metrics document with the
/// counts Lambda's invocation would have: one order charged, one body that is no order
/// (POISON), one the provider refuses for our configuration (RETRY, `PaymentConfigErrors`).
/// No `ColdStart`: a task's start is no Lambda cold start.
#[tokio::test(start_paused = true)]
async fn a_worker_batch_writes_the_functions_metrics_document() {
    let (app, documents) = in_memory_app(&[("POWERTOOLS_METRICS_NAMESPACE", "Orders/Test")]);
    let queue = ListQueue::with(&[
        ("m1", r#"{"order_id": "ok-1", "amount": 10}"#),
        ("m2", "not an order"),
        ("m3", r#"{"order_id": "refused-1", "amount": 401.01}"#),
    ]);
    let options = WorkerOptions::default()
        .with_receives_in_flight(1)
        .with_metrics_interval_ms(0);
    let worker = app.into_worker(&queue, NoChanges, options);
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    assert_eq!(report.batches, 1);
    assert_eq!(*queue.deleted.lock().expect("lock"), ["m1"]);
    let all = documents.lock().expect("lock").clone();
    assert!(all.iter().all(|d| !d.contains("ColdStart")), "{all:?}");
    let batch = batch_documents(&documents);
    assert_eq!(batch.len(), 1, "{all:?}");
    let document = &batch[0];
    for (metric, count) in [
        ("Records", 3.0),
        ("Charged", 1.0),
        ("Poisoned", 1.0),
        ("PaymentConfigErrors", 1.0),
        ("Retried", 1.0),
        ("NeedsReconciliation", 0.0),
        ("Duplicates", 0.0),
    ] {
        assert_eq!(document[metric], count, "{metric}: {document}");
    }
    assert_eq!(document["QueueName"], "orders");
    assert_eq!(document["QueueKind"], "standard");
    assert_eq!(document["FunctionName"], "process-orders");
    assert_eq!(
        document["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "Orders/Test"
    );
}

/// The provider refuses the configuration three times in a row in one batch, which opens the
/// function's breaker (the rest of that batch is not sent). The next batch tries the provider
/// again, as Lambda's next invocation does: a key fixed meanwhile charges. A worker that kept the
/// breaker open would retry every order as `payment_circuit_open` until it was restarted.
#[tokio::test(start_paused = true)]
async fn each_worker_batch_tries_a_refusing_provider_again() {
    let (app, _) = in_memory_app(&[]);
    let refused = r#"{"order_id": "refused-N", "amount": 401.01}"#;
    let queue = ListQueue::batches(&[
        &[
            ("r1", &refused.replace('N', "1")),
            ("r2", &refused.replace('N', "2")),
            ("r3", &refused.replace('N', "3")),
        ],
        &[("ok", r#"{"order_id": "ok-1", "amount": 10}"#)],
    ]);
    let options = WorkerOptions::default()
        .with_receives_in_flight(1)
        .with_metrics_interval_ms(0);
    let worker = app.into_worker(&queue, NoChanges, options);
    let report = worker
        .run(tokio::time::sleep(Duration::from_millis(1_000)))
        .await;
    assert_eq!(report.batches, 2);
    assert_eq!(*queue.deleted.lock().expect("lock"), ["ok"]);
}
