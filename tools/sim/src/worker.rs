//! The function as a long-polling worker (`process-orders worker`, [`sqs_batch::worker`])
//! instead of Lambda's event source mapping: each container runs the real `Worker` that
//! `App::into_worker` builds, over the real `SqsQueue` adapter (`ReceiveMessage`,
//! `DeleteMessageBatch`, served by [`crate::sqs`]), with its heartbeats, its deletes and its
//! graceful stop. Workers are stopped as a fleet's are: a deploy or a scale-in at a random time,
//! a crash now and then (the process killed, nothing drained), and a stop that lands while a
//! batch holds a record at the receive before the queue's redrive (the give-up's receive), the
//! moment issue 49's finding 2 needed: a record the stop kept from starting must be released,
//! never moved as `retries_exhausted`.
//!
//! Which records were started is the world's to say, not the processor's: the handler the worker
//! runs is wrapped by [`Observed`], which records each message it is given (and the outcome it
//! answers) before the order handler sees it.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use lambda_kit::Clock;
use sqs_batch::worker::WorkerOptions;
use sqs_batch::{Message, RecordHandler, Verdict, processor::Invocation};

use crate::world::{Shared, SimClock};
use crate::{Deployment, LONG_POLL_MS};

/// The record handler as the world watches it: every message it is given is recorded as tried
/// at its receive, then its outcome, then the real handler's verdict is passed on unchanged.
pub struct Observed<H> {
    inner: H,
    world: Shared,
    /// The container the worker runs in.
    container: usize,
    /// The `maxReceiveCount`s the queue told the container's function.
    learned: crate::world::Told,
}

impl<H: RecordHandler> RecordHandler for Observed<H> {
    async fn handle(&self, message: &Message<'_>, context: Invocation) -> Verdict {
        let tried = (
            message.message_id.to_owned(),
            message.receive_count.unwrap_or(0),
        );
        self.world.lock().tried.insert(tried.clone(), None);
        let verdict = self.inner.handle(message, context).await;
        let mut world = self.world.lock();
        // A RETRY at the receive the function may know as the give-up's (one before the highest
        // count its container was told recently enough to still go by, `Told::known`) must
        // leave as `retries_exhausted`: the queue model holds the record to that at its next
        // receive.
        let count = self.learned.known(world.sim_ms());
        if verdict.outcome == sqs_batch::processor::Decision::Retry
            && count >= 2
            && tried.1 >= count - 1
        {
            world
                .retried_at_give_up
                .insert(tried.clone(), (self.container, verdict.reason));
        }
        world.tried.insert(tried, Some(verdict.outcome));
        drop(world);
        verdict
    }

    fn record_span(&self, message: &Message<'_>) -> tracing::Span {
        self.inner.record_span(message)
    }

    fn record_key(&self, message: &Message<'_>) -> Option<String> {
        self.inner.record_key(message)
    }
}

/// A worker's stop, as the world schedules it: set by the simulated SQS when it hands the
/// worker a record at the give-up's receive (and the seed says a deploy lands then).
#[derive(Default)]
pub struct WorkerStop {
    /// When the stop comes, simulated ms (`u64::MAX`: not scheduled).
    at_ms: std::sync::atomic::AtomicU64,
    changed: tokio::sync::Notify,
    /// The share of such receives followed by the stop.
    rate: f64,
}

impl WorkerStop {
    fn new(rate: f64) -> Self {
        Self {
            at_ms: std::sync::atomic::AtomicU64::new(u64::MAX),
            changed: tokio::sync::Notify::new(),
            rate,
        }
    }

    /// The worker has just been handed a record at the give-up's receive: with the run's
    /// chance, its stop comes within the next two seconds, while the batch runs. Whether it did.
    pub(crate) fn maybe_at_give_up(&self, world: &Shared, now_ms: u64) -> bool {
        let current = self.at_ms.load(std::sync::atomic::Ordering::SeqCst);
        if current != u64::MAX || !world.chance(self.rate) {
            return false;
        }
        let at = now_ms + world.between(0..=2_000);
        self.at_ms.store(at, std::sync::atomic::Ordering::SeqCst);
        self.changed.notify_waiters();
        true
    }

    /// Resolves when the scheduled stop comes.
    async fn requested(&self, truth: &SimClock) {
        loop {
            let changed = self.changed.notified();
            let at = self.at_ms.load(std::sync::atomic::Ordering::SeqCst);
            if at != u64::MAX {
                tokio::time::sleep(Duration::from_millis(at.saturating_sub(truth.sim_ms()))).await;
                return;
            }
            changed.await;
        }
    }
}

/// Resolves once the run is over for the workers: the producer done and the queue empty.
async fn run_over(d: &Deployment) {
    loop {
        if d.queue.lock().is_empty() && *d.producer_done.borrow() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(LONG_POLL_MS)).await;
    }
}

/// One container slot of the fleet: a worker after another until the run is over, each stopped
/// (a deploy, a scale-in, a stop at the give-up's receive) or crashed, and replaced by a cold one.
pub(crate) async fn work(index: usize, d: Rc<Deployment>) {
    let truth = SimClock {
        start: d.start,
        offset_ms: 0,
    };
    let Some(fleet) = d.settings.workers else {
        return;
    };
    loop {
        if d.queue.lock().is_empty() && *d.producer_done.borrow() {
            return;
        }
        // A worker runs batches side by side, each with its own deadline: its leases are not
        // judged against one invocation (its holder stays empty).
        let (app, clock, holder) = d.cold_start().await;
        let stop = Arc::new(WorkerStop::new(fleet.stop_at_give_up_rate));
        let sdk = crate::sqs::worker_sdk_config(&d.queue, &d.world, &truth, stop.clone());
        let client = process_orders::aws::sqs(&sdk, &process_orders::app::WORKER_SQS_SDK);
        let fifo = d.queue.lock().is_fifo();
        let url = crate::sqs::url_of(crate::sqs::arns(fifo).0);
        let queue = sqs_batch::worker::sqs::SqsQueue::connect(client, url)
            .await
            .expect("the simulated queue answers GetQueueAttributes");
        let visibility = sqs_batch::visibility::SqsVisibility::new(process_orders::aws::sqs(
            &sdk,
            &process_orders::app::SQS_SDK,
        ));
        let options = WorkerOptions::default().with_metrics_interval_ms(0);
        let world = d.world.clone();
        let (container, learned) = (holder.container, holder.learned.clone());
        let worker = app.into_worker(queue, visibility, options).map_handler(
            |inner| Observed {
                inner,
                world,
                container,
                learned,
            },
            |observed| &observed.inner,
        );
        // A deploy or a scale-in at a random time; a crash instead, now and then.
        let life_ms = d.world.between(0..=2 * fleet.mean_life_ms);
        let crashes = d.world.chance(fleet.crash_rate);
        d.world.log(&format!(
            "w{index} starts at {} for {life_ms} ms",
            clock.now_ms()
        ));
        let shutdown = async {
            tokio::select! {
                biased;
                () = tokio::time::sleep(Duration::from_millis(life_ms)) => {
                    d.world.count(|f| f.worker_stops += 1);
                }
                () = stop.requested(&truth) => {
                    d.world.count(|f| f.stops_at_give_up += 1);
                    d.world.log(&format!("w{index} is stopped at a give-up receive"));
                }
                () = run_over(&d) => {}
            }
        };
        if crashes {
            tokio::select! {
                biased;
                _ = worker.run(std::future::pending::<()>()) => {}
                () = tokio::time::sleep(Duration::from_millis(life_ms)) => {
                    d.world.lock().crashed.insert(holder.container);
                    d.world.count(|f| f.crashes += 1);
                    d.world.log(&format!("w{index} crashes"));
                }
                () = run_over(&d) => {}
            }
            continue;
        }
        let report = worker.run(shutdown).await;
        *d.invocations.borrow_mut() += report.batches as usize;
        d.world
            .count(|f| f.released_at_stops += report.released as usize);
        d.world.log(&format!("w{index} stopped: {report:?}"));
    }
}
