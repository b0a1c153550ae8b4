//! What everything in a run shares: the seeded random source, the event log and its digest, the
//! faults injected, each order's story, and simulated time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lambda_kit::Clock;

/// Simulated time starts here (epoch ms): 2026-01-01.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// A clock on the runtime's paused time, with an offset (a container's skew).
#[derive(Debug, Clone)]
pub struct SimClock {
    /// The run's start.
    pub start: tokio::time::Instant,
    /// How far this clock is off, ms.
    pub offset_ms: i64,
}

impl SimClock {
    /// Simulated ms since the run started, by the true clock.
    pub fn sim_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        (EPOCH_MS + self.sim_ms()).saturating_add_signed(self.offset_ms)
    }
}

/// The faults a run injected, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Invocations dropped mid-flight (their container replaced).
    pub crashes: usize,
    /// Store calls that failed unapplied.
    pub store_errors: usize,
    /// Store calls applied whose answer was lost.
    pub store_answers_lost: usize,
    /// Of those, finishing writes the client retried (the in-memory table's every second one):
    /// each retry meets the write it repeats.
    pub store_answers_lost_retried: usize,
    /// Store calls slowed by throttling (the SDK's retries).
    pub store_throttled: usize,
    /// Requests the DynamoDB store's clients sent (`STORE=dynamodb`): each attempt of each
    /// call, retries included.
    pub store_requests: usize,
    /// Writes of a holder whose lease was taken over, refused by the lease token's fence.
    pub fenced_writes: usize,
    /// Charges made whose answer was lost.
    pub charge_answers_lost: usize,
    /// First charge requests lost on the way, before the provider saw them.
    pub charges_lost_on_the_way: usize,
    /// Charges answered "pending".
    pub pending_charges: usize,
    /// Charges slower than the payment timeout.
    pub slow_charges: usize,
    /// Look-ups that failed: a 503, or the client's timeout in a brownout.
    pub lookup_errors: usize,
    /// Provider calls refused during the outage.
    pub outage_refusals: usize,
    /// Charges refused with a rotated key (401).
    pub rotation_refusals: usize,
    /// Deliveries SQS made twice.
    pub duplicate_deliveries: usize,
    /// Visibility changes and DLQ moves SQS failed.
    pub sqs_errors: usize,
    /// Workers stopped by a deploy or a scale-in (`worker` profile).
    pub worker_stops: usize,
    /// Workers stopped while a batch held a record at the give-up's receive.
    pub stops_at_give_up: usize,
    /// Messages workers released at their stop (received, not finished or not started).
    pub released_at_stops: usize,
    /// Leases granted to a Lambda container's invocation, each checked against it.
    pub leases_checked: usize,
    /// DLQ moves SQS failed for a record that gave up (`retries_exhausted`): the schedule's
    /// last receive meeting a failed move.
    pub dlq_failures_at_give_up: usize,
    /// Claims that took over a claim not finished (a lease its holder never ended, or an attempt
    /// marked unfinished), whose answer was lost.
    pub answers_lost_at_takeover: usize,
    /// Records at their last receive whose container crashed after their charge and before
    /// its completion: SQS's redrive moves them without the function's reason.
    pub crashes_between_charge_and_completion_at_last_receive: usize,
    /// Store calls for a record at the give-up's receive that outlasted the invocation.
    pub store_hangs_at_give_up: usize,
    /// Leases granted that end at or before their holder's deadline (a lease shorter than the
    /// invocation: the holder may still be at work when another takes the claim over).
    pub leases_ending_by_the_deadline: usize,
    /// Claims of another payload on a key whose latest claim was unfinished (`IN_PROGRESS` or
    /// `ATTEMPTED`): each must be refused.
    pub other_payloads_on_unfinished_claims: usize,
    /// Items the DynamoDB table held right after an applied write, whose expiry the world
    /// judged ([`crate::dynamodb::ExpiryRule`]).
    pub expiries_checked: usize,
    /// Claims a Lambda invocation took over from an unfinished claim, each owing a look-up
    /// before any charge.
    pub takeovers_owing_lookups: usize,
    /// Records a container brought back at the probe interval while a dependency was down,
    /// each judged paid for and within its container's rate.
    pub probes: usize,
    /// Backed-off records a later visibility change brought back sooner (a wake), each judged
    /// against the schedule's floors.
    pub early_returns: usize,
    /// The most records woken at once: judged at the end of each invocation, so the wakes of
    /// invocations that end together count together (an upper bound on one wake). A maximum,
    /// not a sum, across seeds.
    pub largest_wake: usize,
}

impl Faults {
    /// Adds another run's faults.
    pub fn add(&mut self, other: &Faults) {
        self.crashes += other.crashes;
        self.store_errors += other.store_errors;
        self.store_answers_lost += other.store_answers_lost;
        self.store_answers_lost_retried += other.store_answers_lost_retried;
        self.store_throttled += other.store_throttled;
        self.store_requests += other.store_requests;
        self.fenced_writes += other.fenced_writes;
        self.charge_answers_lost += other.charge_answers_lost;
        self.charges_lost_on_the_way += other.charges_lost_on_the_way;
        self.pending_charges += other.pending_charges;
        self.slow_charges += other.slow_charges;
        self.lookup_errors += other.lookup_errors;
        self.outage_refusals += other.outage_refusals;
        self.rotation_refusals += other.rotation_refusals;
        self.duplicate_deliveries += other.duplicate_deliveries;
        self.sqs_errors += other.sqs_errors;
        self.worker_stops += other.worker_stops;
        self.stops_at_give_up += other.stops_at_give_up;
        self.released_at_stops += other.released_at_stops;
        self.leases_checked += other.leases_checked;
        self.dlq_failures_at_give_up += other.dlq_failures_at_give_up;
        self.answers_lost_at_takeover += other.answers_lost_at_takeover;
        self.crashes_between_charge_and_completion_at_last_receive +=
            other.crashes_between_charge_and_completion_at_last_receive;
        self.store_hangs_at_give_up += other.store_hangs_at_give_up;
        self.leases_ending_by_the_deadline += other.leases_ending_by_the_deadline;
        self.other_payloads_on_unfinished_claims += other.other_payloads_on_unfinished_claims;
        self.expiries_checked += other.expiries_checked;
        self.takeovers_owing_lookups += other.takeovers_owing_lookups;
        self.probes += other.probes;
        self.early_returns += other.early_returns;
        self.largest_wake = self.largest_wake.max(other.largest_wake);
    }

    /// Each kind with its count, for tables.
    pub fn rows(&self) -> [(&'static str, usize); 31] {
        [
            ("crashes", self.crashes),
            ("store errors", self.store_errors),
            ("store answers lost", self.store_answers_lost),
            (
                "finishing writes retried after a lost answer",
                self.store_answers_lost_retried,
            ),
            ("store calls throttled", self.store_throttled),
            ("store requests sent", self.store_requests),
            (
                "stale holders' writes refused by the fence",
                self.fenced_writes,
            ),
            ("charge answers lost", self.charge_answers_lost),
            (
                "first charge requests lost on the way",
                self.charges_lost_on_the_way,
            ),
            ("pending charges", self.pending_charges),
            ("charges slower than the payment timeout", self.slow_charges),
            ("look-up errors", self.lookup_errors),
            ("outage refusals", self.outage_refusals),
            ("rotated-key refusals", self.rotation_refusals),
            ("duplicate deliveries", self.duplicate_deliveries),
            ("SQS call failures", self.sqs_errors),
            ("workers stopped", self.worker_stops),
            (
                "workers stopped at a give-up receive",
                self.stops_at_give_up,
            ),
            (
                "messages released at a worker's stop",
                self.released_at_stops,
            ),
            (
                "leases checked against their holder's invocation",
                self.leases_checked,
            ),
            (
                "DLQ moves failed at the give-up",
                self.dlq_failures_at_give_up,
            ),
            (
                "claims taking over an unfinished claim, answer lost",
                self.answers_lost_at_takeover,
            ),
            (
                "crashes between a charge and its completion at the last receive",
                self.crashes_between_charge_and_completion_at_last_receive,
            ),
            (
                "store calls outlasting the invocation at the last receive",
                self.store_hangs_at_give_up,
            ),
            (
                "leases ending by their holder's deadline",
                self.leases_ending_by_the_deadline,
            ),
            (
                "claims of another payload on an unfinished claim",
                self.other_payloads_on_unfinished_claims,
            ),
            ("item expiries checked", self.expiries_checked),
            (
                "takeovers of an unfinished claim owing a look-up",
                self.takeovers_owing_lookups,
            ),
            ("probes while a dependency was down", self.probes),
            ("parked records woken early", self.early_returns),
            ("most records woken at once", self.largest_wake),
        ]
    }
}

/// The fence audit: who holds each key as the table's own answers say, and every fenced write
/// the table applied for anyone else. A store must refuse a holder whose lease was taken over
/// (or ended); the audit sees from outside the store whether it did, whichever store runs.
/// Holders are named by the world's own record (which container, in which of its invocations,
/// [`HolderId`]), so a store that hands the same token to two holders is seen too; the token
/// decides only where the world keeps no such record (a worker's batches).
#[derive(Default)]
pub struct FenceAudit {
    /// The latest claim the table granted, per key, until a fenced write ends it: its token, and
    /// who it was granted to when the world knows.
    holders: HashMap<String, (idempotency::store::LeaseToken, Option<HolderId>)>,
    /// Writes applied for a caller that did not hold the key: (key, what).
    pub stale_writes: Vec<(String, String)>,
    /// Leases granted that do not cover their holder's invocation as the design's rule has it,
    /// or outlive the configured lease: (key, what).
    pub uncovering_leases: Vec<(String, String)>,
    /// Retries of a finishing write the table had applied for their own caller, refused as a
    /// lost lease: (key, what).
    pub refused_retries: Vec<(String, String)>,
    /// Claims of one payload granted on a key whose item held another payload's unfinished
    /// claim (`IN_PROGRESS` or `ATTEMPTED`, whose effect may exist): (key, what).
    pub payload_takeovers: Vec<(String, String)>,
    /// Items the DynamoDB table held right after a write, whose expiry breaks the design's
    /// rule: (key, what).
    pub wrong_expiries: Vec<(String, String)>,
    /// Finishing writes the store answered `Ok` that the table's item does not show: (key,
    /// what).
    pub unapplied_writes: Vec<(String, String)>,
    /// Per key, the Lambda invocation that took over an unfinished claim (nothing sent to end
    /// it) and so owes the provider a look-up before any charge (Transitions: a takeover looks
    /// up first).
    owed_lookups: HashMap<String, HolderId>,
    /// Charges a takeover's holder sent before its look-up: (key, what).
    pub unlooked_charges: Vec<(String, String)>,
    /// Per key, the payload of the latest claim granted (its fingerprint: only compared for
    /// equality), and whether a write that ends it (complete, reject, release) has been sent
    /// since. Set when sent, not when answered: a write applied whose caller crashed, or whose
    /// answer was lost, has ended it for all the world can tell, and the check must not blame
    /// a later claim for what the table may rightly have done.
    payloads: HashMap<String, (idempotency::Fingerprint, bool, u64)>,
    /// Keys whose latest claim's holder recorded its completion.
    completed: HashSet<String>,
    /// Every claim granted on each key, kept after fenced writes: who it went to, and the latest
    /// its lease may end by the design's rule (granted at + the configured lease), in the
    /// granting container's clock, which is the clock a BUSY answer's time is read in (with
    /// skewed clocks a later grant may name an earlier time, so none is dropped).
    granted: HashMap<String, Vec<(Option<HolderId>, u64)>>,
}

tokio::task_local! {
    /// The Lambda container and invocation whose work runs on this task, as the world started
    /// it: what the provider names as the caller of each request it answers.
    pub static CALLER: HolderId;
}

/// Who holds a claim, by the world's record: a container and the invocation it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HolderId {
    /// The container, numbered by the world as it starts them.
    pub container: usize,
    /// Its invocation, counted from 1.
    pub invocation: u64,
}

impl std::fmt::Display for HolderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "container {}'s invocation {}",
            self.container, self.invocation
        )
    }
}

impl FenceAudit {
    /// The table granted `key` to `token`, asked by `holder` when the world knows it; whether
    /// it took over a lease its holder never finished (no fenced write ended it).
    pub fn claimed(
        &mut self,
        key: &str,
        token: idempotency::store::LeaseToken,
        holder: Option<HolderId>,
    ) -> bool {
        self.completed.remove(key);
        self.holders
            .insert(key.to_owned(), (token, holder))
            .is_some()
    }

    /// The table granted `key` to a claim of the payload `fingerprint` at `at_ms` (the granting
    /// container's clock): a violation when the latest claim granted on it was another
    /// payload's, less than `retention_ms` before, and nothing was sent to end it since (the
    /// design's claim condition: another payload never takes over a key whose effect may exist;
    /// past the retention the table may have deleted the item, as DynamoDB's TTL does).
    pub fn granted_payload(
        &mut self,
        key: &str,
        fingerprint: idempotency::Fingerprint,
        at_ms: u64,
        retention_ms: u64,
    ) {
        if let Some(held) = self.unfinished_other(key, fingerprint, at_ms, retention_ms) {
            self.payload_takeovers.push((
                key.to_owned(),
                format!(
                    "a claim of payload {fingerprint} granted while payload {held}'s claim was \
                     unfinished (no complete, reject or release sent for it)"
                ),
            ));
        }
        self.payloads
            .insert(key.to_owned(), (fingerprint, false, at_ms));
    }

    /// The payload of `key`'s latest claim when it is not `fingerprint`, was granted less than
    /// `retention_ms` before `at_ms`, and nothing was sent to end it: a claim of `fingerprint`
    /// now must be refused.
    pub fn unfinished_other(
        &self,
        key: &str,
        fingerprint: idempotency::Fingerprint,
        at_ms: u64,
        retention_ms: u64,
    ) -> Option<idempotency::Fingerprint> {
        match self.payloads.get(key) {
            Some(&(held, false, since_ms))
                if held != fingerprint && at_ms < since_ms.saturating_add(retention_ms) =>
            {
                Some(held)
            }
            _ => None,
        }
    }

    /// The table granted `key` to `holder` at `at_ms`: when its latest claim was unfinished
    /// (granted less than `retention_ms` before, nothing sent to end it), this is a takeover,
    /// and a Lambda holder owes a look-up before it charges. Whether it owes one.
    pub fn took_over(
        &mut self,
        key: &str,
        holder: Option<HolderId>,
        at_ms: u64,
        retention_ms: u64,
    ) -> bool {
        let unfinished = matches!(
            self.payloads.get(key),
            Some(&(_, false, since_ms)) if at_ms < since_ms.saturating_add(retention_ms)
        );
        match holder {
            Some(holder) if unfinished => {
                self.owed_lookups.insert(key.to_owned(), holder);
                true
            }
            _ => {
                self.owed_lookups.remove(key);
                false
            }
        }
    }

    /// `caller` asked the provider about `key`'s charge (whatever the answer).
    pub fn looked_up(&mut self, key: &str, caller: HolderId) {
        if self.owed_lookups.get(key) == Some(&caller) {
            self.owed_lookups.remove(key);
        }
    }

    /// `caller` sends a charge under `key`: a violation if it took the key over and has not
    /// looked it up since. Only the taker is judged: a stale holder's late charge is not its.
    pub fn charging(&mut self, key: &str, caller: HolderId) {
        if self.owed_lookups.get(key) == Some(&caller) {
            self.owed_lookups.remove(key);
            self.unlooked_charges.push((
                key.to_owned(),
                format!(
                    "{caller} took over an unfinished claim and charged without a look-up first"
                ),
            ));
        }
    }

    /// A write that ends `key`'s claim (complete, reject, release) is about to be sent.
    pub fn ending(&mut self, key: &str) {
        if let Some((_, ended, _)) = self.payloads.get_mut(key) {
            *ended = true;
        }
    }

    /// The table may grant `key` to `holder` with a lease that may last until `may_end_ms` (the
    /// granting container's clock).
    pub fn leased(&mut self, key: &str, holder: Option<HolderId>, may_end_ms: u64) {
        self.granted
            .entry(key.to_owned())
            .or_default()
            .push((holder, may_end_ms));
    }

    /// The claim recorded by [`Self::leased`] was not granted after all (the table answered
    /// with what already holds the key).
    pub fn not_leased(&mut self, key: &str, holder: Option<HolderId>, may_end_ms: u64) {
        if let Some(grants) = self.granted.get_mut(key)
            && let Some(at) = grants.iter().rposition(|g| *g == (holder, may_end_ms))
        {
            grants.remove(at);
        }
    }

    /// `key`'s grants: each one's holder, and the latest its lease may end.
    pub fn grants(&self, key: &str) -> &[(Option<HolderId>, u64)] {
        self.granted.get(key).map_or(&[], Vec::as_slice)
    }

    /// Whether `key`'s latest claim was completed by its holder.
    pub fn is_completed(&self, key: &str) -> bool {
        self.completed.contains(key)
    }

    /// The table applied `call` on `key` for `token`, asked by `writer`: a violation unless the
    /// writer is the one the latest grant went to (by the world's record when it has one for
    /// both, else by the token). Every fenced write ends the holder's lease.
    pub fn applied(
        &mut self,
        key: &str,
        call: &str,
        token: idempotency::store::LeaseToken,
        writer: Option<HolderId>,
    ) {
        let stale = match (self.holders.remove(key), writer) {
            (Some((_, Some(granted))), Some(writer)) => (granted != writer).then(|| {
                format!(
                    "{call} applied for {writer}, while the table last granted the key to {granted}"
                )
            }),
            (Some((held, _)), _) if held == token => None,
            (holder, _) => Some(format!(
                "{call} applied for lease {token}, while the key was {}",
                holder.map_or("held by no live claim".to_owned(), |(h, _)| format!(
                    "held by {h}"
                ))
            )),
        };
        if let Some(what) = stale {
            self.stale_writes.push((key.to_owned(), what));
        } else if call == "complete" {
            self.completed.insert(key.to_owned());
        }
    }
}

/// The invocation a Lambda container is running, in that container's clock: the world's record
/// of who holds what, against which each lease the table grants it is judged.
#[derive(Debug, Clone, Copy)]
pub struct Invocation {
    /// Which one of its container's invocations, from 1.
    pub seq: u64,
    /// The container's clock when the invocation began.
    pub started_ms: u64,
    /// Its deadline.
    pub deadline_ms: u64,
}

/// The latest a claim made at `now_ms` may be leased until by the design's rule: min(now +
/// lease, deadline + margin) for a Lambda invocation, now + lease for a worker's (no deadline
/// the world records).
pub fn lease_may_end(
    invocation: Option<Invocation>,
    now_ms: u64,
    lease_ms: u64,
    margin_ms: u64,
) -> u64 {
    let leased = now_ms.saturating_add(lease_ms);
    invocation.map_or(leased, |invocation| {
        leased.min(invocation.deadline_ms.saturating_add(margin_ms))
    })
}

/// The lease rule docs/design.md states, as the world reads the deployment's settings: a claim
/// made during `invocation` is leased until min(claimed at + lease, deadline + margin). So a
/// grant must end no later than that (the configured lease after the claim, and the margin
/// after the deadline: a lease never outlives its invocation by much), and no earlier than the
/// least the rule allows a claim made at any point of the invocation. `None` when it holds.
pub fn lease_rule_broken(
    invocation: Invocation,
    granted_at_ms: u64,
    until_ms: u64,
    lease_ms: u64,
    margin_ms: u64,
) -> Option<String> {
    let covers = invocation
        .started_ms
        .saturating_add(lease_ms)
        .min(invocation.deadline_ms.saturating_add(margin_ms));
    let at_most = lease_may_end(Some(invocation), granted_at_ms, lease_ms, margin_ms);
    if until_ms < covers {
        Some(format!(
            "a lease until {until_ms} for an invocation with its deadline at {} ends {} ms before \
             the least the rule gives it (min(start + {lease_ms}, deadline + {margin_ms}) = {covers})",
            invocation.deadline_ms,
            covers - until_ms
        ))
    } else if until_ms > at_most {
        Some(format!(
            "a lease until {until_ms} granted at {granted_at_ms} outlives min(the configured \
             {lease_ms} ms, its deadline {} + {margin_ms}) by {} ms",
            invocation.deadline_ms,
            until_ms - at_most
        ))
    } else {
        None
    }
}

/// The `maxReceiveCount`s the queue's redrive policy told one container's function, and when
/// (simulated ms): the world's record of what the function may know of the give-up's receive.
#[derive(Clone, Default)]
pub struct Told(Arc<Mutex<Vec<(u64, u32)>>>);

/// How long a count the function was told may still be the one a batch goes by: the function
/// keeps the queue's redrive policy five minutes (docs/design.md), and a batch learns it once,
/// before its records run, which may be up to Lambda's longest timeout (15 minutes) before it
/// settles them.
const TOLD_FOR_MS: u64 = (5 + 15) * 60_000;

impl Told {
    /// The policy told the function `count` at `at_ms`.
    pub fn record(&self, at_ms: u64, count: u32) {
        let mut told = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        told.retain(|(at, _)| at.saturating_add(TOLD_FOR_MS) >= at_ms);
        told.push((at_ms, count));
    }

    /// The highest count the function may be going by at `now_ms`: the highest it was told
    /// recently enough to still keep (an operator only lowers the count, so judging by the
    /// highest never holds a batch to a count it had not yet learned); 0 when nothing was told
    /// that recently (the function then asks again, or goes by its own setting).
    pub fn known(&self, now_ms: u64) -> u32 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(at, _)| at.saturating_add(TOLD_FOR_MS) >= now_ms)
            .map(|(_, count)| *count)
            .max()
            .unwrap_or(0)
    }
}

/// The run's shared state.
pub struct World {
    rng: fastrand::Rng,
    digest: u64,
    /// The faults injected so far.
    pub faults: Faults,
    /// Fenced writes against the table's own grants.
    pub fence: FenceAudit,
    /// What a worker's handler did with each message it was given, by (message id, receive
    /// count): started (`None`), then the outcome it answered. Recorded at the handler's door
    /// ([`crate::worker::Observed`]), so that the world, not the processor, says which records
    /// were tried.
    pub tried: HashMap<(String, u32), Option<sqs_batch::processor::Decision>>,
    /// Records a worker's handler answered RETRY at or past the give-up's receive as the
    /// container had learned it (its last `maxReceiveCount` from the queue's redrive policy),
    /// by (message id, receive count): the container, and the handler's reason. The design has
    /// each of them moved as `retries_exhausted` at that receive, its reason kept.
    pub retried_at_give_up: HashMap<(String, u32), (usize, &'static str)>,
    /// Containers that crashed: what they had decided and not yet settled was lost with them.
    pub crashed: HashSet<usize>,
    /// The keys each invocation's calls asked the table to claim (`begin`), by the world's
    /// record of the caller: which of its records the function started. Taken by the poller
    /// once the invocation is over.
    pub begun: HashMap<HolderId, HashSet<String>>,
    /// Keys whose decline's record (`reject`) the table did not apply at least once (a store
    /// error, a fenced writer): the world's own record of what its table answered.
    pub unwritten_rejects: HashSet<String>,
    /// What happened to each order, in order: (simulated ms, what).
    stories: HashMap<String, Vec<(u64, String)>>,
    /// Containers started so far (each one's number in [`HolderId`]).
    pub containers: usize,
    clock: SimClock,
}

/// The world, shared by the simulated services (which must be `Send + Sync`: they sit behind
/// the real code's ports).
#[derive(Clone)]
pub struct Shared(Arc<Mutex<World>>);

impl Shared {
    /// A world seeded with `seed`.
    pub fn new(seed: u64, clock: SimClock) -> Self {
        Self(Arc::new(Mutex::new(World {
            rng: fastrand::Rng::with_seed(seed),
            digest: 0xcbf2_9ce4_8422_2325,
            faults: Faults::default(),
            fence: FenceAudit::default(),
            tried: HashMap::new(),
            retried_at_give_up: HashMap::new(),
            crashed: HashSet::new(),
            begun: HashMap::new(),
            unwritten_rejects: HashSet::new(),
            stories: HashMap::new(),
            containers: 0,
            clock,
        })))
    }

    /// The world, locked (never across an await: everything runs on one thread).
    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A uniform number in [0, 1).
    pub fn roll(&self) -> f64 {
        self.lock().rng.f64()
    }

    /// Whether an event of probability `p` happens.
    pub fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.roll() < p
    }

    /// A uniform number in `range`.
    pub fn between(&self, range: std::ops::RangeInclusive<u64>) -> u64 {
        self.lock().rng.u64(range)
    }

    /// A uniform signed number in `range`.
    pub fn between_signed(&self, range: std::ops::RangeInclusive<i64>) -> i64 {
        self.lock().rng.i64(range)
    }

    /// Waits a random time up to `max_ms`.
    pub async fn latency(&self, max_ms: u64) {
        let ms = self.between(0..=max_ms);
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// Counts a fault.
    pub fn count(&self, fault: impl FnOnce(&mut Faults)) {
        fault(&mut self.lock().faults);
    }

    /// Logs an event (into the digest) and adds it to `order`'s story.
    pub fn tell(&self, order: &str, what: impl FnOnce() -> String) {
        let mut w = self.lock();
        let at = w.clock.sim_ms();
        let what = what();
        w.log(order, &what, at);
        w.stories
            .entry(order.to_owned())
            .or_default()
            .push((at, what));
    }

    /// Logs an event that belongs to no one order.
    pub fn log(&self, what: &str) {
        let mut w = self.lock();
        let at = w.clock.sim_ms();
        w.log("", what, at);
    }

    /// Moves `n` items chosen at random to the front of `items` (a partial Fisher-Yates
    /// shuffle): as random as a whole shuffle for the first `n`, at the cost of `n` draws.
    pub fn choose_first<T>(&self, items: &mut [T], n: usize) {
        let mut w = self.lock();
        for i in 0..n.min(items.len()) {
            let j = w.rng.usize(i..items.len());
            items.swap(i, j);
        }
    }
}

impl World {
    /// Simulated ms since the run started, by the true clock.
    pub fn sim_ms(&self) -> u64 {
        self.clock.sim_ms()
    }

    fn log(&mut self, order: &str, event: &str, at_ms: u64) {
        // FNV-1a over the order, the event and its time.
        for byte in order
            .bytes()
            .chain(event.bytes())
            .chain(at_ms.to_le_bytes())
        {
            self.digest ^= u64::from(byte);
            self.digest = self.digest.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The digest of the event log so far.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// `order`'s story, one line per event.
    pub fn story(&self, order: &str) -> String {
        let mut text = String::new();
        for (at, what) in self.stories.get(order).into_iter().flatten() {
            text.push_str(&format!("  {:>12} {what}\n", clock_text(*at)));
        }
        text
    }
}

/// Simulated ms as `d+hh:mm:ss.mmm`.
pub fn clock_text(ms: u64) -> String {
    let (s, ms) = (ms / 1_000, ms % 1_000);
    let (m, s) = (s / 60, s % 60);
    let (h, m) = (m / 60, m % 60);
    let (d, h) = (h / 24, h % 24);
    format!("{d}+{h:02}:{m:02}:{s:02}.{ms:03}")
}
