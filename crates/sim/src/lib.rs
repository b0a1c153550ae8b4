//! # sim
//!
//! A deterministic simulation of the order function. The real code runs (the batch processor,
//! the claim check, the order handler, the idempotency guard, the in-memory store's conditional
//! rules, the simulated provider's Idempotency-Key semantics); only the outside world is
//! simulated, behind the existing ports:
//!
//! - **SQS and the event source mapping**: a standard queue with visibility timeouts, receive
//!   counts, the redrive to a DLQ after `max_receive` receives, and duplicate deliveries;
//!   several containers polling it at once, each deleting the records its response does not
//!   report.
//! - **Lambda containers**: each with its own clock offset, and crashes at any point (the
//!   invocation's future dropped mid-flight: nothing deleted, the records come back).
//! - **The store**: latency, errors, and writes applied whose answer is lost.
//! - **The provider**: latency, an outage window, and charges made whose answer is lost.
//!
//! One seed drives every choice, on a single-threaded Tokio runtime with a paused clock, so a
//! seed replays byte for byte: [`Report::digest`] hashes the event log. The invariants: no
//! order is charged twice by the provider's ledger, and no order is lost (charged, or its
//! message in the DLQ).
//!
//! This is the first slice of issue 30: no FIFO, no mutations of the real code yet.

#![warn(missing_docs)]

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idempotency::{Begin, ClaimRequest, IdempotencyStore, Lease, MemoryStore, StoreError};
use lambda_kit::Clock;
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::simulated::{
    AMBIGUOUS_AMOUNT, IN_FLIGHT_AMOUNT, MISCONFIGURED_AMOUNT,
};
use process_orders::payment::{
    ChargeRequest, ChargeStatus, PaymentError, PaymentGateway, SimulatedGateway,
};
use sqs_batch::{Batch, Message, Outcome, QueueKind, RecordStatus};

const QUEUE_ARN: &str = "arn:aws:sqs:us-east-1:123456789012:orders";
/// Simulated time starts here (epoch ms): 2026-01-01.
const EPOCH_MS: u64 = 1_767_225_600_000;

/// What one run simulates.
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// Drives every random choice.
    pub seed: u64,
    /// Orders sent (each once, some twice by their producer).
    pub orders: usize,
    /// Containers polling at once.
    pub containers: usize,
    /// Records per batch.
    pub batch_size: usize,
    /// The queue's visibility timeout.
    pub visibility_ms: u64,
    /// Receives before SQS moves a message to the DLQ.
    pub max_receive: u32,
    /// The function's timeout.
    pub timeout_ms: u64,
    /// Share of invocations that crash at a random point.
    pub crash_rate: f64,
    /// Share of deliveries SQS makes twice.
    pub duplicate_rate: f64,
    /// Share of store calls that fail without being applied.
    pub store_error_rate: f64,
    /// Share of store calls applied whose answer is lost.
    pub store_lost_rate: f64,
    /// Share of charges made whose answer is lost.
    pub charge_lost_rate: f64,
    /// The provider refuses connections between these simulated ms (from the start).
    pub provider_outage_ms: (u64, u64),
    /// Containers' clocks differ from the provider's by up to this much, either way.
    pub skew_ms: u64,
    /// How long the provider remembers an idempotency key (and the function is told so).
    pub key_window_s: u64,
    /// One table for every container, as deployed. `false` gives each container a table of its
    /// own: a broken deployment, for checking that the checks catch double charges.
    pub shared_store: bool,
}

impl SimSettings {
    /// A run of `orders` orders from `seed` with faults everywhere, at rates a bad day has.
    pub fn faulty(seed: u64, orders: usize) -> Self {
        Self {
            seed,
            orders,
            containers: 3,
            batch_size: 10,
            visibility_ms: 60_000,
            max_receive: 20,
            timeout_ms: 30_000,
            crash_rate: 0.05,
            duplicate_rate: 0.05,
            store_error_rate: 0.02,
            store_lost_rate: 0.02,
            charge_lost_rate: 0.03,
            provider_outage_ms: (10_000, 130_000),
            skew_ms: 2_000,
            // Shorter than a retry: redeliveries after a lost answer meet a forgotten key, so
            // only the guard's look-up stands between them and a second charge.
            key_window_s: 90,
            shared_store: true,
        }
    }
}

/// What a run did, and what it broke.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Orders sent.
    pub orders: usize,
    /// Orders the provider charged exactly once.
    pub charged_once: usize,
    /// Messages that reached the DLQ.
    pub in_dlq: usize,
    /// Invocations, and those that crashed.
    pub invocations: usize,
    /// Invocations dropped mid-flight.
    pub crashes: usize,
    /// Simulated time until the queue was empty, ms.
    pub sim_ms: u64,
    /// Orders charged more than once: each breaks exactly-once.
    pub double_charged: Vec<String>,
    /// Orders neither charged nor in the DLQ: each was lost.
    pub lost: Vec<String>,
    /// The last reason of each message in the DLQ, with how many: a transient reason there
    /// (a store error, an outage) means the retry schedule gave up too early.
    pub dlq_reasons: BTreeMap<&'static str, usize>,
    /// What happened to each message in the DLQ: its order and every decision (simulated ms,
    /// reason), for reading a failing seed.
    pub dlq_histories: Vec<(String, Vec<(u64, &'static str)>)>,
    /// A hash of the event log: the same seed, the same digest.
    pub digest: u64,
    /// The faults injected.
    pub faults: Faults,
}

/// A clock on the runtime's paused time, with an offset.
#[derive(Debug, Clone)]
struct SimClock {
    start: tokio::time::Instant,
    offset_ms: i64,
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        (EPOCH_MS + elapsed).saturating_add_signed(self.offset_ms)
    }
}

/// The run's random choices and its event log, shared by everything in it.
struct World {
    rng: fastrand::Rng,
    digest: u64,
    faults: Faults,
}

/// The faults a run injected, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Store calls that failed unapplied.
    pub store_errors: usize,
    /// Store calls applied whose answer was lost.
    pub store_answers_lost: usize,
    /// Charges made whose answer was lost.
    pub charge_answers_lost: usize,
    /// Provider calls refused during the outage.
    pub outage_refusals: usize,
    /// Deliveries SQS made twice.
    pub duplicate_deliveries: usize,
}

fn count(world: &Shared, fault: impl FnOnce(&mut Faults)) {
    if let Ok(mut w) = world.lock() {
        fault(&mut w.faults);
    }
}

impl World {
    fn log(&mut self, event: &str, at_ms: u64) {
        // FNV-1a over the event and its time.
        for byte in event.bytes().chain(at_ms.to_le_bytes()) {
            self.digest ^= u64::from(byte);
            self.digest = self.digest.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

type Shared = Arc<Mutex<World>>;

fn roll(world: &Shared) -> f64 {
    world.lock().map(|mut w| w.rng.f64()).unwrap_or(1.0)
}

async fn latency(world: &Shared, max_ms: u64) {
    let ms = world.lock().map(|mut w| w.rng.u64(0..=max_ms)).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The shared store, with latency, errors and lost answers.
struct SimStore {
    inner: Arc<MemoryStore>,
    world: Shared,
    error_rate: f64,
    lost_rate: f64,
}

impl SimStore {
    /// Before the call: `Err` when it fails unapplied; after: whether to lose the answer.
    async fn before(&self) -> Result<bool, StoreError> {
        latency(&self.world, 20).await;
        let r = roll(&self.world);
        if r < self.error_rate {
            count(&self.world, |f| f.store_errors += 1);
            return Err(StoreError::Unavailable("simulated store error".into()));
        }
        let lost = r < self.error_rate + self.lost_rate;
        if lost {
            count(&self.world, |f| f.store_answers_lost += 1);
        }
        Ok(lost)
    }

    fn answer<T>(lost: bool, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if lost {
            return Err(StoreError::Unavailable(
                "simulated: applied, answer lost".into(),
            ));
        }
        result
    }
}

impl IdempotencyStore for SimStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        let lost = self.before().await?;
        Self::answer(lost, self.inner.begin(request).await)
    }

    async fn complete(&self, key: &str, lease: &Lease, now_ms: u64) -> Result<(), StoreError> {
        let lost = self.before().await?;
        Self::answer(lost, self.inner.complete(key, lease, now_ms).await)
    }

    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        let lost = self.before().await?;
        Self::answer(lost, self.inner.mark_attempted(key, lease, at_ms).await)
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        let lost = self.before().await?;
        Self::answer(lost, self.inner.release(key, lease).await)
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        let lost = self.before().await?;
        Self::answer(lost, self.inner.reject(key, lease, now_ms, reason).await)
    }
}

/// The shared provider, with latency, an outage and charges whose answer is lost.
struct SimProvider {
    inner: Arc<SimulatedGateway>,
    world: Shared,
    clock: SimClock,
    outage: (u64, u64),
    lost_rate: f64,
}

impl SimProvider {
    fn down(&self) -> bool {
        let at = self.clock.now_ms().saturating_sub(EPOCH_MS);
        (self.outage.0..self.outage.1).contains(&at)
    }

    fn refused() -> PaymentError {
        PaymentError::NotSent {
            reason: "simulated outage: connection refused".into(),
            source: None,
        }
    }
}

impl PaymentGateway for SimProvider {
    async fn charge(&self, request: &ChargeRequest<'_>) -> Result<(), PaymentError> {
        latency(&self.world, 300).await;
        if self.down() {
            count(&self.world, |f| f.outage_refusals += 1);
            return Err(Self::refused());
        }
        let result = self.inner.charge(request).await;
        if roll(&self.world) < self.lost_rate {
            count(&self.world, |f| f.charge_answers_lost += 1);
            return Err(PaymentError::Ambiguous {
                reason: "simulated: charged, answer lost".into(),
                source: None,
            });
        }
        result
    }

    async fn lookup(&self, request: &ChargeRequest<'_>) -> Result<ChargeStatus, PaymentError> {
        latency(&self.world, 100).await;
        if self.down() {
            count(&self.world, |f| f.outage_refusals += 1);
            return Err(Self::refused());
        }
        self.inner.lookup(request).await
    }
}

/// One message in the simulated queue.
#[derive(Debug, Clone)]
struct Stored {
    id: String,
    order_id: String,
    body: String,
    visible_at_ms: u64,
    receive_count: u32,
    first_receive_ms: Option<u64>,
    /// The reason of the last decision reported for it.
    last_reason: &'static str,
    /// Every decision reported for it, in order, with the simulated time.
    history: Vec<(u64, &'static str)>,
}

/// A standard queue as the event source mapping sees it.
#[derive(Default)]
struct Queue {
    messages: BTreeMap<String, Stored>,
    dlq: Vec<Stored>,
}

impl Queue {
    /// Up to `n` visible messages, each made invisible for `visibility_ms` (some stay visible:
    /// a duplicate delivery); past `max_receive` receives a message moves to the DLQ instead.
    fn receive(
        &mut self,
        n: usize,
        now_ms: u64,
        settings: &SimSettings,
        world: &Shared,
    ) -> Vec<Stored> {
        let mut visible: Vec<String> = self
            .messages
            .values()
            .filter(|m| m.visible_at_ms <= now_ms)
            .map(|m| m.id.clone())
            .collect();
        if let Ok(mut w) = world.lock() {
            w.rng.shuffle(&mut visible);
        }
        let mut out = Vec::new();
        for id in visible.into_iter().take(n) {
            let Some(message) = self.messages.get_mut(&id) else {
                continue;
            };
            message.receive_count += 1;
            if message.receive_count > settings.max_receive {
                if let Some(moved) = self.messages.remove(&id) {
                    self.dlq.push(moved);
                }
                continue;
            }
            message.first_receive_ms.get_or_insert(now_ms);
            if roll(world) >= settings.duplicate_rate {
                message.visible_at_ms = now_ms + settings.visibility_ms;
            } else {
                count(world, |f| f.duplicate_deliveries += 1);
            }
            out.push(message.clone());
        }
        out
    }
}

/// Runs one simulation to the end (the queue empty) and reports it.
pub fn run(settings: &SimSettings) -> Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, simulate(settings.clone()))
}

async fn simulate(settings: SimSettings) -> Report {
    let world: Shared = Arc::new(Mutex::new(World {
        rng: fastrand::Rng::with_seed(settings.seed),
        digest: 0xcbf2_9ce4_8422_2325,
        faults: Faults::default(),
    }));
    let start = tokio::time::Instant::now();
    let provider_clock = SimClock {
        start,
        offset_ms: 0,
    };
    let config = Config::from_lookup(|name| match name {
        "METRICS_ENABLED" => Some("false".into()),
        "PAYMENT_KEY_WINDOW_SECONDS" => Some(settings.key_window_s.to_string()),
        "PAYMENT_CLOCK_SKEW_MS" => Some((settings.skew_ms * 2).to_string()),
        _ => None,
    })
    .expect("the simulated configuration");
    let ledger = Arc::new(SimulatedGateway::with_clock(
        Arc::new(provider_clock.clone()),
        Duration::from_secs(settings.key_window_s),
    ));
    let table = Arc::new(MemoryStore::new(config.store.retention));
    let queue = Rc::new(RefCell::new(Queue::default()));
    let mut order_ids = Vec::new();
    {
        let mut q = queue.borrow_mut();
        let mut w = world.lock().expect("the world");
        for i in 0..settings.orders {
            let order_id = format!("o-{i}");
            // Amounts the simulated provider answers specially (a refused configuration, an
            // ambiguous answer, a long in-flight) are its test hooks, not faults of this run.
            let cents = loop {
                let cents = w.rng.u64(100..=50_000);
                if ![MISCONFIGURED_AMOUNT, AMBIGUOUS_AMOUNT, IN_FLIGHT_AMOUNT].contains(&cents) {
                    break cents;
                }
            };
            let body = format!(
                r#"{{"order_id": "{order_id}", "amount": {}.{:02}}}"#,
                cents / 100,
                cents % 100
            );
            // A producer that retries sends the same order twice.
            let copies = if w.rng.f64() < 0.05 { 2 } else { 1 };
            for copy in 0..copies {
                let id = format!("m-{i}-{copy}");
                q.messages.insert(
                    id.clone(),
                    Stored {
                        id,
                        order_id: order_id.clone(),
                        body: body.clone(),
                        visible_at_ms: EPOCH_MS,
                        receive_count: 0,
                        first_receive_ms: None,
                        last_reason: "never_decided",
                        history: Vec::new(),
                    },
                );
            }
            order_ids.push(order_id);
        }
    }
    let invocations = Rc::new(RefCell::new((0usize, 0usize)));
    let mut tasks = Vec::new();
    for c in 0..settings.containers {
        let skew = settings.skew_ms as i64;
        let offset_ms = world
            .lock()
            .map(|mut w| w.rng.i64(-skew..=skew))
            .unwrap_or(0);
        let clock = SimClock { start, offset_ms };
        let store = SimStore {
            inner: if settings.shared_store {
                table.clone()
            } else {
                Arc::new(MemoryStore::new(config.store.retention))
            },
            world: world.clone(),
            error_rate: settings.store_error_rate,
            lost_rate: settings.store_lost_rate,
        };
        let provider = SimProvider {
            inner: ledger.clone(),
            world: world.clone(),
            clock: provider_clock.clone(),
            outage: settings.provider_outage_ms,
            lost_rate: settings.charge_lost_rate,
        };
        let app = App::with_ports(&config, store, provider, clock.clone());
        tasks.push(tokio::task::spawn_local(container(
            c,
            app,
            clock,
            queue.clone(),
            world.clone(),
            settings.clone(),
            invocations.clone(),
        )));
    }
    for task in tasks {
        drop(task.await);
    }
    let sim_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let q = queue.borrow();
    let in_dlq: HashSet<&str> = q.dlq.iter().map(|m| m.order_id.as_str()).collect();
    let mut report = Report {
        orders: settings.orders,
        in_dlq: q.dlq.len(),
        invocations: invocations.borrow().0,
        crashes: invocations.borrow().1,
        sim_ms,
        ..Report::default()
    };
    for message in &q.dlq {
        *report.dlq_reasons.entry(message.last_reason).or_default() += 1;
        report
            .dlq_histories
            .push((message.order_id.clone(), message.history.clone()));
    }
    for order_id in &order_ids {
        match ledger.charges(order_id) {
            0 if !in_dlq.contains(order_id.as_str()) => report.lost.push(order_id.clone()),
            0 => {}
            1 => report.charged_once += 1,
            _ => report.double_charged.push(order_id.clone()),
        }
    }
    if let Ok(w) = world.lock() {
        report.digest = w.digest;
        report.faults = w.faults;
    }
    report
}

/// One container: polls, invokes the real function, deletes what its response does not report,
/// and sometimes crashes mid-invocation.
async fn container<S, P>(
    index: usize,
    app: App<S, P, SimClock>,
    clock: SimClock,
    queue: Rc<RefCell<Queue>>,
    world: Shared,
    settings: SimSettings,
    invocations: Rc<RefCell<(usize, usize)>>,
) where
    S: IdempotencyStore,
    P: PaymentGateway,
{
    loop {
        let now_ms = SimClock {
            start: clock.start,
            offset_ms: 0,
        }
        .now_ms();
        let received = {
            let mut q = queue.borrow_mut();
            if q.messages.is_empty() {
                return;
            }
            q.receive(settings.batch_size, now_ms, &settings, &world)
        };
        if received.is_empty() {
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            continue;
        }
        if let Ok(mut w) = world.lock() {
            let ids: Vec<&str> = received.iter().map(|m| m.id.as_str()).collect();
            w.log(&format!("c{index} receives {}", ids.join(",")), now_ms);
        }
        let messages: Vec<Message<'_>> = received
            .iter()
            .map(|m| Message {
                receive_count: Some(m.receive_count),
                first_receive_ms: m.first_receive_ms,
                ..Message::new(&m.id, &m.body)
            })
            .collect();
        let batch = Batch {
            messages,
            kind: QueueKind::Standard,
            queue_arn: Some(QUEUE_ARN),
        };
        let deadline_ms = clock.now_ms() + settings.timeout_ms;
        // A crash at a random point of the invocation's work (its calls take up to a few
        // hundred simulated ms each): the future is dropped wherever it is.
        let crash_after = (roll(&world) < settings.crash_rate)
            .then(|| world.lock().map(|mut w| w.rng.u64(0..2_000)).unwrap_or(0));
        invocations.borrow_mut().0 += 1;
        let run = app.handle_batch(&batch, deadline_ms);
        let answered = match crash_after {
            Some(ms) => tokio::time::timeout(Duration::from_millis(ms), run)
                .await
                .ok(),
            None => Some(run.await),
        };
        let now_ms = clock.now_ms();
        match answered {
            None => {
                invocations.borrow_mut().1 += 1;
                if let Ok(mut w) = world.lock() {
                    w.log(&format!("c{index} crashes"), now_ms);
                }
            }
            Some(Err(_)) => {}
            Some(Ok((response, report))) => {
                let failed: HashSet<&str> = response
                    .batch_item_failures
                    .iter()
                    .map(|f| f.item_identifier.as_str())
                    .collect();
                let mut q = queue.borrow_mut();
                for (m, status) in received.iter().zip(&report.statuses) {
                    let reason = match status {
                        RecordStatus::Handled(v) | RecordStatus::Moved(v) => v.reason,
                        RecordStatus::SkippedDeadline => "deadline",
                        RecordStatus::SkippedAfter { .. } => "after_failure",
                    };
                    let poison = status.outcome() == Outcome::Poison;
                    if let Some(stored) = q.messages.get_mut(&m.id) {
                        stored.last_reason = reason;
                        stored
                            .history
                            .push((now_ms.saturating_sub(EPOCH_MS), reason));
                    }
                    // MOVE_POISON_TO_DLQ, as the template deploys it: POISON goes to the DLQ
                    // with its reason at once, and is acknowledged.
                    if poison && let Some(moved) = q.messages.remove(&m.id) {
                        q.dlq.push(moved);
                        if let Ok(mut w) = world.lock() {
                            w.log(&format!("c{index} moves {} ({reason})", m.id), now_ms);
                        }
                    }
                }
                for m in &received {
                    if !failed.contains(m.id.as_str()) {
                        q.messages.remove(&m.id);
                        if let Ok(mut w) = world.lock() {
                            w.log(&format!("c{index} deletes {}", m.id), now_ms);
                        }
                    }
                }
            }
        }
    }
}
