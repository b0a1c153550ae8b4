//! The simulator's generic part, for any [`RecordHandler`]: the seeded world, the simulated
//! standard queue and its event source mapping (duplicate deliveries, visibility timeouts,
//! receive counts, SQS's own redrive), containers that crash mid-invocation and are killed at
//! their deadline, and a fault-injected idempotency table shared by all of them. The handler is
//! wrapped in `sqs-batch`'s real processor, as `sqs_batch::lambda::run` wraps it.
//!
//! It knows nothing of orders or payments: the caller brings the bodies, a handler per container
//! (built over the run's [`Ports`]), and its own outside world (a mail provider, say) with the
//! invariants only it can judge. The harness judges the delivery ones: no message deleted
//! without an ACK (or a POISON moved by the handler's own port), and every message either
//! deleted or in the DLQ at the end.
//!
//! ```no_run
//! use sim::harness::{HarnessSettings, run_handler};
//! use sqs_batch::Verdict;
//!
//! let bodies = vec![("u-1".to_owned(), r#"{"user_id":"u-1"}"#.to_owned())];
//! let report = run_handler(&HarnessSettings::new(7, bodies), |_ports| {
//!     sqs_batch::json(|_body: serde_json::Value, _record| async { Verdict::ack("done") })
//! });
//! assert!(report.violations.is_empty());
//! ```

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use idempotency::MemoryStore;
use lambda_kit::Clock;
use sqs_batch::{
    BatchOptions, BatchProcessor, Message, RecordHandler, edge::MessageAttributes, edge::QueueKind,
};

use crate::check::Violation;
use crate::queue::{Attrs, SharedQueue};
use crate::store::{SimStore, Table};
use crate::world::{Shared, SimClock};
use crate::{LONG_POLL_MS, Payload};

/// What a generic run is made of.
#[derive(Debug, Clone)]
pub struct HarnessSettings {
    /// Drives every choice: the same seed, the same run.
    pub seed: u64,
    /// The messages, in send order: (the key stories are kept under, the body).
    pub bodies: Vec<(String, String)>,
    /// Containers polling at once.
    pub containers: usize,
    /// Share of invocations that crash at a random point.
    pub crash_rate: f64,
    /// Share of receives that leave the message visible (SQS's at-least-once delivery).
    pub duplicate_rate: f64,
    /// Share of store calls that fail unapplied, and that are applied with their answer lost.
    pub store_error_rate: f64,
    /// See [`HarnessSettings::store_error_rate`].
    pub store_lost_rate: f64,
    /// The function's timeout, ms.
    pub timeout_ms: u64,
    /// The queue's visibility timeout, ms.
    pub visibility_ms: u64,
    /// The redrive policy's `maxReceiveCount`.
    pub max_receive: u32,
    /// Records per batch.
    pub batch_size: usize,
    /// How far apart containers' clocks may be, ms.
    pub skew_ms: u64,
}

impl HarnessSettings {
    /// `bodies` under a seed, with faults at every layer: 20% of invocations crash at a random
    /// point of their first two seconds (those that end sooner do not), 5% of receives are
    /// delivered twice, 5% of store calls fail and 5% lose their answer.
    pub fn new(seed: u64, bodies: Vec<(String, String)>) -> Self {
        Self {
            seed,
            bodies,
            containers: 4,
            crash_rate: 0.2,
            duplicate_rate: 0.05,
            store_error_rate: 0.05,
            store_lost_rate: 0.05,
            timeout_ms: 30_000,
            visibility_ms: 60_000,
            max_receive: 50,
            batch_size: 10,
            skew_ms: 2_000,
        }
    }
}

/// What a container's handler is built over.
pub struct Ports {
    /// The shared idempotency table as this container's client sees it (faults injected).
    pub store: SimStore,
    /// This container's clock (its own skew).
    pub clock: SimClock,
    /// The run's world: its seeded randomness and stories, for the caller's simulated services.
    pub world: Shared,
}

/// What a generic run did.
#[derive(Debug, Default)]
pub struct HarnessReport {
    /// Each message's fate, by send order: the reason of the decision that deleted it, or
    /// `None` when it was not deleted (the DLQ holds it, or it was lost: a violation).
    pub deleted: Vec<Option<&'static str>>,
    /// Messages SQS's redrive moved to the DLQ, by send order.
    pub dead_lettered: Vec<usize>,
    /// Invocations, and those that crashed.
    pub invocations: usize,
    /// See [`HarnessReport::invocations`].
    pub crashes: usize,
    /// Broken delivery invariants.
    pub violations: Vec<Violation>,
    /// The faults the harness injected (store errors and lost answers, duplicate deliveries).
    pub faults: crate::Faults,
    /// A hash of the event log: the same seed, the same digest.
    pub digest: u64,
}

/// Runs `bodies` through a handler per container (`handler`, built over the run's [`Ports`])
/// until every message is deleted or dead-lettered, on a paused single-threaded runtime.
pub fn run_handler<H, F>(settings: &HarnessSettings, handler: F) -> HarnessReport
where
    H: RecordHandler + 'static,
    F: Fn(Ports) -> H + 'static,
{
    crate::block_on_seeded(settings.seed, simulate(settings.clone(), Arc::new(handler)))
}

struct Run<F> {
    settings: HarnessSettings,
    start: tokio::time::Instant,
    world: Shared,
    queue: SharedQueue,
    table: Arc<MemoryStore>,
    handler: Arc<F>,
    violations: std::cell::RefCell<Vec<Violation>>,
    counts: std::cell::RefCell<(usize, usize)>,
}

async fn simulate<H, F>(settings: HarnessSettings, handler: Arc<F>) -> HarnessReport
where
    H: RecordHandler + 'static,
    F: Fn(Ports) -> H + 'static,
{
    let start = tokio::time::Instant::now();
    let truth = SimClock {
        start,
        offset_ms: 0,
    };
    let world = Shared::new(settings.seed, truth.clone());
    let queue = SharedQueue::new(
        false,
        settings.max_receive,
        settings.visibility_ms,
        settings.duplicate_rate,
        0.0,
    );
    for (index, (key, body)) in settings.bodies.iter().enumerate() {
        let payload = Payload {
            order_id: key.clone(),
            price: None,
            body: body.clone(),
            group: None,
            attributes: Attrs::new(),
            poison: false,
            sent_ms: 0,
        };
        queue.lock().send(index, &payload, 0);
    }
    let run = std::rc::Rc::new(Run {
        table: Arc::new(MemoryStore::default()),
        settings,
        start,
        world,
        queue,
        handler,
        violations: std::cell::RefCell::default(),
        counts: std::cell::RefCell::default(),
    });
    let pollers: Vec<_> = (0..run.settings.containers)
        .map(|index| tokio::task::spawn_local(poll(index, run.clone())))
        .collect();
    for poller in pollers {
        drop(poller.await);
    }
    let queue = run.queue.lock();
    let (faults, digest) = {
        let world = run.world.lock();
        (world.faults, world.digest())
    };
    let mut report = HarnessReport {
        deleted: (0..run.settings.bodies.len())
            .map(|i| queue.deleted.get(&i).copied())
            .collect(),
        dead_lettered: queue.dlq.iter().map(|d| d.payload).collect(),
        invocations: run.counts.borrow().0,
        crashes: run.counts.borrow().1,
        violations: run.violations.borrow().clone(),
        faults,
        digest,
    };
    for (index, (key, _)) in run.settings.bodies.iter().enumerate() {
        if report.deleted[index].is_none() && !report.dead_lettered.contains(&index) {
            report.violations.push(Violation {
                rule: "lost",
                order_id: key.clone(),
                detail: "neither deleted nor in the DLQ".into(),
            });
        }
    }
    report
}

impl<F> Run<F> {
    /// A new container's processor: its own clock skew, the shared table, the caller's handler.
    fn container<H>(&self) -> (BatchProcessor<H, SimClock>, SimClock)
    where
        H: RecordHandler,
        F: Fn(Ports) -> H,
    {
        let skew = i64::try_from(self.settings.skew_ms).unwrap_or(0);
        let clock = SimClock {
            start: self.start,
            offset_ms: self.world.between_signed(-skew..=skew),
        };
        let store = SimStore {
            inner: Table::Memory(self.table.clone()),
            world: self.world.clone(),
            error_rate: self.settings.store_error_rate,
            lost_rate: self.settings.store_lost_rate,
            slow_rate: 0.0,
            hang_at_give_up_rate: 0.0,
            operation_timeout_ms: 3_000,
            // The generic harness's handlers need not follow the function's lease rule.
            holder: crate::store::Holder::new(0, clock.clone(), 300_000, 5_000, 18 * 86_400_000),
            lost_below: crate::dynamodb::LostAnswers::default(),
        };
        let handler = (self.handler)(Ports {
            store,
            clock: clock.clone(),
            world: self.world.clone(),
        });
        (
            BatchProcessor::new(handler, clock.clone(), BatchOptions::default()),
            clock,
        )
    }
}

/// One poller of the mapping and the container it invokes, until the queue is empty.
async fn poll<H, F>(index: usize, run: std::rc::Rc<Run<F>>)
where
    H: RecordHandler,
    F: Fn(Ports) -> H,
{
    let truth = SimClock {
        start: run.start,
        offset_ms: 0,
    };
    let (mut processor, mut clock) = run.container();
    loop {
        let received = {
            let mut queue = run.queue.lock();
            if queue.is_empty() {
                return;
            }
            queue.receive(run.settings.batch_size, truth.sim_ms(), &run.world)
        };
        if received.is_empty() {
            let now_ms = truth.sim_ms();
            let next_ms = run.queue.lock().next_visible_ms(now_ms);
            let wait_ms = next_ms.map_or(LONG_POLL_MS, |at| (at - now_ms).clamp(1, LONG_POLL_MS));
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            continue;
        }
        let messages: Vec<Message<'_>> = received
            .iter()
            .map(|m| {
                Message::new(&m.id, &m.body)
                    .with_receive_count(Some(m.receive_count))
                    .with_first_receive_ms(m.first_receive_ms)
                    .with_receipt_handle(Some(&m.receipt))
                    .with_attributes(MessageAttributes::Raw(&m.event_attributes))
            })
            .collect();
        let timeout_ms = run.settings.timeout_ms;
        let deadline_ms = clock.now_ms() + timeout_ms;
        let crash_after = run
            .world
            .chance(run.settings.crash_rate)
            .then(|| run.world.between(0..=2_000));
        run.counts.borrow_mut().0 += 1;
        let answered = tokio::time::timeout(
            Duration::from_millis(crash_after.unwrap_or(timeout_ms).min(timeout_ms)),
            processor.process(&messages, QueueKind::Standard, deadline_ms),
        )
        .await;
        let Ok(report) = answered else {
            if crash_after.is_some() {
                run.counts.borrow_mut().1 += 1;
                run.world.count(|f| f.crashes += 1);
                run.world.log(&format!("c{index} crashes"));
            } else {
                run.violations.borrow_mut().push(Violation {
                    rule: "answered after its deadline",
                    order_id: String::new(),
                    detail: format!("c{index} ran past its {timeout_ms} ms timeout"),
                });
            }
            drop(messages);
            (processor, clock) = run.container();
            continue;
        };
        let failed: HashSet<&str> = report.failed_ids(&messages).collect();
        let mut queue = run.queue.lock();
        for (m, status) in received.iter().zip(&report.statuses) {
            if failed.contains(m.id.as_str()) {
                continue;
            }
            let reason = match status {
                sqs_batch::processor::RecordStatus::Handled(v)
                | sqs_batch::processor::RecordStatus::Moved(v) => v.reason,
                _ => "skipped",
            };
            // `is_ack` counts a POISON the handler's own port moved.
            if !status.is_ack() {
                run.violations.borrow_mut().push(Violation {
                    rule: "deleted without its decision",
                    order_id: m.order_id.clone(),
                    detail: format!("{} was deleted after {reason}", m.id),
                });
            }
            if queue.delete(&m.receipt, reason) {
                run.world
                    .tell(&m.order_id, || format!("{}: deleted after {reason}", m.id));
            }
        }
    }
}
