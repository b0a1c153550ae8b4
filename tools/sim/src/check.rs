//! The invariants, checked at the end of every run against the provider's ledger and the
//! queues, and the report that carries what broke with the story of each order that broke it.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::Payload;
use crate::provider::{Provider, declines};
use crate::queue::SharedQueue;
use crate::settings::{QueueShape, SimSettings};
use crate::world::{Faults, Shared};

/// Reasons that need a person (the handler's codes): the DLQ is the right place for them, when
/// the world says so (`unjustified`, below).
pub const PERSON_REASONS: [&str; 6] = [
    "needs_reconciliation",
    // A decline, now or recorded before.
    "payment_rejected",
    // Another payload under the id: in the store, or at the provider (422).
    "conflict",
    "payment_conflict",
    // Not an order; a claim-check pointer while the claim check is off.
    "invalid_body",
    "payload_invalid",
];

/// The reason codes docs/operations.md gives a record's decision ("The reason codes"), written
/// here again as the world's own list (a test holds it to the document's table, not to the
/// function's code): dashboards and alarms are built on them, so a decision under any other
/// name is a violation.
pub const DESIGN_REASONS: [&str; 24] = [
    "charged",
    "reconciled",
    "duplicate",
    "busy",
    "conflict",
    "payment_conflict",
    "payment_rejected",
    "payment_not_sent",
    "payment_ambiguous",
    "payment_in_flight",
    "payment_pending",
    "payment_failed",
    "payment_config",
    "payment_refused",
    "payment_circuit_open",
    "dependency_down",
    "needs_reconciliation",
    "store_error",
    "lease_lost",
    "invalid_body",
    "payload_invalid",
    "retries_exhausted",
    "abandoned",
    "panic",
];

/// Why a message in the DLQ should not be there, judged by what happened in the world rather
/// than by the label the function gave it: a person-settled reason must be true of the world
/// (the provider declined, another payload exists, the look-up left the question open, the body
/// is not an order), and a transient one never is (every outage is shorter than the schedule).
fn unjustified(
    run: &Run<'_>,
    ledger: &crate::provider::Ledger,
    rejected_ms: &HashMap<&str, u64>,
    dead: &crate::queue::Dead,
) -> Option<String> {
    let payload = &run.payloads[dead.payload];
    let order = payload.order_id.as_str();
    let reason = dead.reason.as_str();
    let lowered = run.lowered.is_some_and(|(at_ms, _)| dead.at_ms >= at_ms);
    // Once an operator cut the count, SQS's own redrive may take even a body that is not an
    // order before the function decides it: a crash, a worker's stop, a move that failed at its
    // last receive (seen in `worker` seed 16: two crashes, a failed move and a stop in four
    // receives).
    if payload.poison && reason == "maxReceiveCount" && lowered {
        return None;
    }
    if payload.poison {
        return (!matches!(reason, "invalid_body" | "payload_invalid"))
            .then(|| format!("{reason}: the body is not an order; it should say so"));
    }
    match reason {
        "invalid_body" | "payload_invalid" => Some(format!("{reason}: the body is a valid order")),
        "payment_rejected" => (!ledger.declined.contains_key(order)
            && !ledger.first_declined_ms.contains_key(order))
        .then(|| format!("{reason}: the provider never declined {order}")),
        "conflict" | "payment_conflict" => (!run
            .payloads
            .iter()
            .any(|p| p.order_id == order && p.price != payload.price && !p.poison))
        .then(|| format!("{reason}: no other payload was ever sent under {order}")),
        // A decline the function moved is final, and its item remembers it for the table's
        // retention (docs/design.md's `REJECTED`): a later copy is refused again, never sent
        // to a person as an open question. (Unless the table failed the decline's record: the
        // copy was still moved as declined, and a later one may find the question open.)
        "needs_reconciliation"
            if rejected_ms
                .get(order)
                .is_some_and(|at| *at <= dead.at_ms && dead.at_ms - *at < remembered_ms(run)) =>
        {
            Some(format!(
                "{reason}: the function had moved {order} as payment_rejected (its table \
                 refused none of its decline's writes), and the item still remembered it"
            ))
        }
        "needs_reconciliation" => {
            let moved_ms = crate::world::EPOCH_MS + dead.at_ms;
            let open = ledger
                .unsettled_lookups
                .get(order)
                .map_or(&[][..], Vec::as_slice);
            let before: Vec<_> = open.iter().filter(|l| l.at_ms <= moved_ms).collect();
            if before.is_empty() {
                return Some(format!(
                    "{reason}: no look-up of {order} had left the question open (it was failing, \
                     or it answered)"
                ));
            }
            // "Not found" leaves the question open only once the provider may have forgotten
            // the key; inside its window the same key is safe to send again, and from a look-up
            // declared durable (one that outlasts the run) it is the truth (docs/design.md).
            (!before.iter().any(|l| {
                l.unclear
                    || !(run.settings.lookup_durable
                        || surely_inside_key_window(run, order, l.at_ms))
            }))
            .then(|| {
                format!(
                    "{reason}: every look-up of {order} that found nothing could be trusted (well \
                     inside the provider's key window, or declared durable): charge again, same key"
                )
            })
        }
        // Once an operator cut the schedule below the outage, giving up is right: by the
        // function (its history kept) or by SQS's own redrive (a record the function last saw
        // before it learned the new count, or whose move failed).
        "retries_exhausted" | "maxReceiveCount" if lowered => None,
        transient => Some(format!(
            "{transient}: every outage was shorter than the retry schedule's guarantee"
        )),
    }
}

/// How long after the function moved a decline its item surely still remembers it: the
/// retention, less an hour for the item's own clock (its retention starts at the decline's
/// write, in a container's clock, a little before the move).
fn remembered_ms(run: &Run<'_>) -> u64 {
    run.retention_ms.saturating_sub(3_600_000)
}

/// Whether a look-up of `order` at `at_ms` (provider ms) came so soon after the order was
/// first sent that the function was inside the provider's key window by any clock: its first
/// attempt cannot precede the first send, and the function's own margin (the charge's reach and
/// the allowed skew, docs/design.md) and the containers' clocks (up to `skew_ms` off either
/// way, on both readings) are given in full. A look-up the world cannot place is never sure.
fn surely_inside_key_window(run: &Run<'_>, order: &str, at_ms: u64) -> bool {
    let provider = run.provider.settings();
    let copies = || run.payloads.iter().filter(|p| p.order_id == order);
    // A producer's copy that carries a moved copy's failure note says it was tried before the
    // run, at any time: the world cannot place that first attempt.
    if copies().any(|p| {
        p.attributes
            .contains_key(sqs_batch::dead_letter::FAILURE_ATTRIBUTE)
    }) {
        return false;
    }
    let Some(first_sent_ms) = copies().map(|p| crate::world::EPOCH_MS + p.sent_ms).min() else {
        return false;
    };
    // Two payment calls (a key read and the charge) and a second for the answer to travel.
    let reach_ms = 2 * provider.client_timeout_ms + 1_000;
    let margin_ms = provider.skew_allowance_ms + reach_ms + 2 * run.settings.skew_ms;
    at_ms.saturating_add(margin_ms) < first_sent_ms.saturating_add(provider.key_window_ms)
}

/// The shortest run of the payment key that must not leave the function: eight characters in a
/// row narrow a key down (the function scrubs every such run, `redact::MIN_KEY_RUN`).
const KEY_RUN: usize = 8;

/// A broken invariant.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which invariant.
    pub rule: &'static str,
    /// The order it broke on.
    pub order_id: String,
    /// What was seen.
    pub detail: String,
}

/// What a run did, and what it broke.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Orders sent.
    pub orders: usize,
    /// Messages sent (duplicates and reused keys included).
    pub messages: usize,
    /// Orders the provider charged exactly once.
    pub charged_once: usize,
    /// Orders declined, never charged, each in the DLQ.
    pub declined: usize,
    /// Messages left in the DLQ at the end, by reason.
    pub dlq_reasons: BTreeMap<String, usize>,
    /// Every message that reached the DLQ (the redriven ones included), by reason.
    pub moved_reasons: BTreeMap<String, usize>,
    /// Messages the operator redrove (a week later, or 20 days in `archived`).
    pub redriven: usize,
    /// Invocations.
    pub invocations: usize,
    /// Simulated time until everything drained, ms.
    pub sim_ms: u64,
    /// The faults injected.
    pub faults: Faults,
    /// A hash of the event log: the same seed, the same digest.
    pub digest: u64,
    /// Every broken invariant.
    pub violations: Vec<Violation>,
    /// What happened to the order of the first violation, one event per line.
    pub story: String,
    /// Decisions the function made, by reason.
    pub decisions: BTreeMap<&'static str, usize>,
    /// The most receives any message had.
    pub max_receives: u32,
    /// The provider's outage, brownout and key rotation, simulated ms (from, to).
    pub windows: [(u64, u64); 3],
    /// How often the run's mutation was reached (0 without one).
    pub mutation_hits: u64,
    /// The provider's ledger by currency: charges that moved money in each.
    pub charged_by_currency: BTreeMap<String, usize>,
    /// Orders sent again under their id with the same number in another currency (a conflict
    /// only the currency tells apart).
    pub currency_only_conflicts: usize,
    /// For each order sent before the provider's outage ended and first charged after it (refused
    /// by the outage or held back by the function): how long after the outage's end its charge
    /// came, simulated ms.
    pub recovery_delays_ms: Vec<u64>,
}

impl Report {
    /// Whether every invariant held.
    pub fn holds(&self) -> bool {
        self.violations.is_empty()
    }
}

/// What the check reads from a finished run.
pub(crate) struct Run<'a> {
    pub settings: &'a SimSettings,
    /// When an operator lowered `maxReceiveCount`, and to what.
    pub lowered: Option<(u64, u32)>,
    pub payloads: &'a [Payload],
    pub queue: &'a SharedQueue,
    pub provider: &'a Provider,
    pub world: &'a Shared,
    pub invocations: usize,
    pub violations: Vec<Violation>,
    pub windows: [(u64, u64); 3],
    /// How long the table keeps an item (`IDEMPOTENCY_RETENTION_DAYS`), ms.
    pub retention_ms: u64,
    pub decisions: BTreeMap<&'static str, usize>,
}

/// Checks the invariants and writes the report.
pub(crate) fn report(run: &Run<'_>, sim_ms: u64) -> Report {
    let queue = run.queue.lock();
    let ledger = run.provider.ledger();
    let mut violations = run.violations.clone();
    let mut report = Report {
        messages: run.payloads.len(),
        redriven: queue.redriven.iter().map(Vec::len).sum(),
        invocations: run.invocations,
        max_receives: queue.max_receives,
        windows: run.windows,
        decisions: run.decisions.clone(),
        sim_ms,
        ..Report::default()
    };
    // In send order, so that the first violation (and the story printed) is the same every run.
    let mut seen: HashSet<&str> = HashSet::new();
    let orders: Vec<&str> = run
        .payloads
        .iter()
        .map(|p| p.order_id.as_str())
        .filter(|o| seen.insert(o))
        .collect();
    report.orders = orders.len();
    let outage_end_ms = crate::world::EPOCH_MS + run.windows[0].1;
    // The orders waiting at the provider's return: sent before it, first charged after it
    // (whether the outage refused them, or the function held them back unsent).
    let mut first_sent: HashMap<&str, u64> = HashMap::new();
    for payload in run.payloads {
        let sent = first_sent
            .entry(payload.order_id.as_str())
            .or_insert(payload.sent_ms);
        *sent = (*sent).min(payload.sent_ms);
    }
    for order in &orders {
        let first_charge = ledger
            .charges
            .get(*order)
            .and_then(|charges| charges.iter().map(|(_, at)| *at).min());
        let waiting = first_sent
            .get(order)
            .is_some_and(|sent| *sent < run.windows[0].1);
        if let (true, Some(at)) = (waiting, first_charge)
            && at >= outage_end_ms
        {
            report.recovery_delays_ms.push(at - outage_end_ms);
        }
    }
    for (sent, _) in ledger.charges.values().flatten() {
        *report
            .charged_by_currency
            .entry(sent.currency.as_str().to_owned())
            .or_default() += 1;
    }
    let mut first: HashMap<&str, &Payload> = HashMap::new();
    for payload in run.payloads.iter().filter(|p| !p.poison) {
        match first.get(payload.order_id.as_str()) {
            Some(earlier)
                if earlier
                    .price
                    .zip(payload.price)
                    .is_some_and(|(a, b)| a.minor == b.minor && a.currency != b.currency) =>
            {
                report.currency_only_conflicts += 1;
            }
            Some(_) => {}
            None => {
                first.insert(&payload.order_id, payload);
            }
        }
    }
    for order in &orders {
        if let Some(declined_ms) = ledger.first_declined_ms.get(*order) {
            let charged_after = ledger
                .charges
                .get(*order)
                .and_then(|charges| charges.iter().find(|(_, at)| at > declined_ms))
                .map(|(_, at)| *at);
            let sent_after = ledger
                .sent_after_decline
                .get(*order)
                .and_then(|sent| sent.first().copied());
            let text =
                |ms: u64| crate::world::clock_text(ms.saturating_sub(crate::world::EPOCH_MS));
            if let Some(at) = charged_after {
                violations.push(Violation {
                    rule: "charged after a decline",
                    order_id: (*order).to_owned(),
                    detail: format!(
                        "declined at {}, then charged again at {} (a decline is final)",
                        text(*declined_ms),
                        text(at),
                    ),
                });
            } else if let Some(at) = sent_after {
                violations.push(Violation {
                    rule: "a declined card sent again",
                    order_id: (*order).to_owned(),
                    detail: format!(
                        "declined at {}, then sent to the provider again at {} (a decline is \
                         final: never sent again)",
                        text(*declined_ms),
                        text(at),
                    ),
                });
            }
        }
        let charges = ledger.charges.get(*order).map_or(0, Vec::len);
        match charges {
            0 if ledger.declined.contains_key(*order) => report.declined += 1,
            1 => report.charged_once += 1,
            n if n > 1 => violations.push(Violation {
                rule: "charged twice",
                order_id: (*order).to_owned(),
                detail: format!("the provider's ledger holds {n} charges"),
            }),
            _ => {}
        }
    }
    // Every payload: charged with its own amount, or in the DLQ for a reason a person settles.
    let in_dlq: HashSet<usize> = queue.dlq.iter().map(|d| d.payload).collect();
    for dead in &queue.dlq {
        *report.dlq_reasons.entry(dead.reason.clone()).or_default() += 1;
    }
    // When each order was first moved as declined by the function, unless the table failed to
    // record one of its declines.
    let unwritten = run.world.lock().unwritten_rejects.clone();
    let mut rejected_ms: HashMap<&str, u64> = HashMap::new();
    for dead in queue.redriven.iter().flatten().chain(&queue.dlq) {
        let order = run.payloads[dead.payload].order_id.as_str();
        if dead.reason == "payment_rejected" && !unwritten.contains(order) {
            let at = rejected_ms.entry(order).or_insert(dead.at_ms);
            *at = (*at).min(dead.at_ms);
        }
    }
    // Every message that ever reached the DLQ, the ones redriven since included.
    for dead in queue.redriven.iter().flatten().chain(&queue.dlq) {
        *report.moved_reasons.entry(dead.reason.clone()).or_default() += 1;
        if let Some(detail) = unjustified(run, &ledger, &rejected_ms, dead) {
            violations.push(Violation {
                rule: if PERSON_REASONS.contains(&dead.reason.as_str()) {
                    "in the DLQ for a reason the world does not bear out"
                } else {
                    "in the DLQ for a transient reason"
                },
                order_id: run.payloads[dead.payload].order_id.clone(),
                detail,
            });
        }
    }
    // Every copy the function moved names the order it is about, as the world reads the body
    // (an id SQS would take as it is; a longer or odd one is cut and hashed, not checked here).
    for dead in queue.redriven.iter().flatten().chain(&queue.dlq) {
        if dead.reason == "maxReceiveCount" {
            continue;
        }
        let named = crate::worldmoney::named_id(&run.payloads[dead.payload].body);
        let plain = named.as_deref().is_none_or(|id| {
            id.len() <= sqs_batch::dead_letter::MAX_KEY_BYTES
                && id.chars().all(sqs_batch::dead_letter::sqs_allows)
        });
        let key = failure_key(&dead.attributes);
        if plain && key != named {
            violations.push(Violation {
                rule: "a DLQ copy names another order",
                order_id: run.payloads[dead.payload].order_id.clone(),
                detail: format!(
                    "moved as {} with the key {key:?}; its body names {named:?}",
                    dead.reason
                ),
            });
        }
    }
    // The function's SQS calls: the adapters promise to fit SQS's limits whatever the input.
    for (code, refusals) in &queue.refused {
        violations.push(Violation {
            rule: "refused by SQS's limits",
            order_id: String::new(),
            detail: format!(
                "{code} x{}: {}",
                refusals.len(),
                refusals.first().map_or("", String::as_str)
            ),
        });
    }
    // A worker gives up only on a record it tried: one its stop kept from starting is
    // released, whatever its receive count. The world's own record of what the handler was
    // given says which were tried (the processor's statuses are what is judged).
    if run.settings.workers.is_some() {
        let world = run.world.lock();
        for dead in queue.redriven.iter().flatten().chain(&queue.dlq) {
            if let (Some(source), "retries_exhausted") = (&dead.source, dead.reason.as_str())
                && !world.tried.contains_key(source)
            {
                violations.push(Violation {
                    rule: "moved as retries_exhausted without being tried",
                    order_id: run.payloads[dead.payload].order_id.clone(),
                    detail: format!(
                        "{} was moved at receive {}, where its handler was never given it",
                        source.0, source.1
                    ),
                });
            }
        }
    }
    // The function gives up at the receive before the queue's redrive (docs/design.md: one
    // before `maxReceiveCount`), never earlier. Judged against the lowest count the queue had
    // (an operator only lowers it), so before a lowering the rule is looser than the design's.
    let give_up_receive = queue.give_up_receive();
    for dead in queue.redriven.iter().flatten().chain(&queue.dlq) {
        if let (Some((id, receive)), "retries_exhausted") = (&dead.source, dead.reason.as_str())
            && *receive < give_up_receive
        {
            violations.push(Violation {
                rule: "gave up before the last receive",
                order_id: run.payloads[dead.payload].order_id.clone(),
                detail: format!(
                    "{id} was moved as retries_exhausted at receive {receive}; the give-up \
                     receive is {give_up_receive} (maxReceiveCount {})",
                    queue.max_receive
                ),
            });
        }
    }
    // A record that gave up says why it kept failing: its copy's note names the reason its
    // handler last answered RETRY with, at the receive it gave up (docs/operations.md: the
    // `detail` says what to fix before a redrive). Judged where the world saw the handler's
    // answer (workers), unless the copy had to leave the detail out to fit SQS's limits.
    {
        let world = run.world.lock();
        for dead in queue.redriven.iter().flatten().chain(&queue.dlq) {
            let (Some(source), "retries_exhausted") = (&dead.source, dead.reason.as_str()) else {
                continue;
            };
            let Some((_, retried)) = world.retried_at_give_up.get(source) else {
                continue;
            };
            let Some(failure) = failure_note(&dead.attributes) else {
                continue;
            };
            if failure.trimmed.iter().any(|t| t == "detail") {
                continue;
            }
            let detail = failure.detail.unwrap_or_default();
            if !detail.starts_with(&format!("{retried} at receive {}", source.1)) {
                violations.push(Violation {
                    rule: "gave up without saying why",
                    order_id: run.payloads[dead.payload].order_id.clone(),
                    detail: format!(
                        "{} gave up at receive {} after its handler answered RETRY {retried}; \
                         the copy's detail is {detail:?}",
                        source.0, source.1
                    ),
                });
            }
        }
    }
    for (payload, detail) in &queue.kept_past_give_up {
        violations.push(Violation {
            rule: "kept past its give-up",
            order_id: run.payloads[*payload].order_id.clone(),
            detail: detail.clone(),
        });
    }
    for (payload, detail) in &queue.deleted_undecided {
        violations.push(Violation {
            rule: "deleted without its decision",
            order_id: run.payloads[*payload].order_id.clone(),
            detail: detail.clone(),
        });
    }
    for reason in &queue.untraceable {
        violations.push(Violation {
            rule: "a DLQ copy lost its producer's attributes",
            order_id: String::new(),
            detail: format!("a copy moved for {reason} no longer names its payload"),
        });
    }
    // The payment key never leaves the function: no run of it long enough to narrow it down
    // in any copy the DLQ received (checked here, not with the function's own scrub).
    let key_runs: HashSet<&[u8]> = run.provider.secret().as_bytes().windows(KEY_RUN).collect();
    for dead in queue.redriven.iter().flatten().chain(&queue.dlq) {
        let texts = std::iter::once(&dead.body).chain(
            dead.attributes
                .values()
                .filter_map(|attr| attr.string_value.as_ref()),
        );
        for text in texts {
            if let Some(piece) = text
                .as_bytes()
                .windows(KEY_RUN)
                .find(|window| key_runs.contains(window))
            {
                violations.push(Violation {
                    rule: "the payment key reached the DLQ",
                    order_id: run.payloads[dead.payload].order_id.clone(),
                    detail: format!(
                        "a copy moved for {} carries {}, a run of the key",
                        dead.reason,
                        String::from_utf8_lossy(piece)
                    ),
                });
                break;
            }
        }
    }
    for (index, payload) in run.payloads.iter().enumerate() {
        if payload.poison {
            if ledger.charges.contains_key(&payload.order_id) {
                violations.push(Violation {
                    rule: "charged a message that is not an order",
                    order_id: payload.order_id.clone(),
                    detail: "its body is not a valid order".into(),
                });
            }
            if !in_dlq.contains(&index) {
                violations.push(Violation {
                    rule: "lost",
                    order_id: payload.order_id.clone(),
                    detail: format!(
                        "a message that is not an order was {} instead of kept in the DLQ",
                        queue
                            .deleted
                            .get(&index)
                            .map_or("neither deleted nor moved".to_owned(), |r| format!(
                                "deleted after {r}"
                            ))
                    ),
                });
            }
            continue;
        }
        // Held against the world's reading of the body, not the function's.
        let charged_with_it = ledger
            .charges
            .get(&payload.order_id)
            .is_some_and(|c| c.iter().any(|(sent, _)| Some(*sent) == payload.price));
        if charged_with_it || in_dlq.contains(&index) {
            continue;
        }
        let fate = match queue.deleted.get(&index) {
            Some(reason) => format!("deleted after {reason}"),
            None => "neither deleted nor in the DLQ".into(),
        };
        let declined = if payload.price.is_some_and(|p| declines(p.minor))
            || ledger.declined.contains_key(&payload.order_id)
        {
            "declined, "
        } else {
            ""
        };
        violations.push(Violation {
            rule: "lost",
            order_id: payload.order_id.clone(),
            detail: format!(
                "the message for {} ({declined}not charged with it) was {fate}",
                payload
                    .price
                    .map_or("an unreadable amount".into(), |p| p.to_string()),
            ),
        });
    }
    if let QueueShape::Fifo { .. } = run.settings.queue {
        fifo_order(run, &queue, &ledger.charges, &mut violations);
    }
    drop(ledger);
    drop(queue);
    let world = run.world.lock();
    // The fence audit's findings, each list under its rule.
    let fence = &world.fence;
    for (rule, found) in [
        ("a write applied for a stale lease", &fence.stale_writes),
        (
            "a retried write refused as a lost lease",
            &fence.refused_retries,
        ),
        (
            "another payload took over an unfinished claim",
            &fence.payload_takeovers,
        ),
        (
            "a takeover charged before its look-up",
            &fence.unlooked_charges,
        ),
        (
            "a finishing write answered Ok that the table never applied",
            &fence.unapplied_writes,
        ),
        (
            "an item's expiry is not its write's time plus the retention",
            &fence.wrong_expiries,
        ),
        (
            "a lease that does not cover its holder's invocation",
            &fence.uncovering_leases,
        ),
    ] {
        violations.extend(found.iter().map(|(key, what)| Violation {
            rule,
            order_id: key.clone(),
            detail: what.clone(),
        }));
    }
    report.digest = world.digest();
    report.faults = world.faults;
    if let Some(first) = violations.first() {
        report.story = world.story(&first.order_id);
    }
    report.violations = violations;
    report
}

/// Within each group, the payloads that never left it are charged in send order.
fn fifo_order(
    run: &Run<'_>,
    queue: &crate::queue::Queue,
    charges: &HashMap<String, Vec<(crate::worldmoney::Price, u64)>>,
    violations: &mut Vec<Violation>,
) {
    let moved_out: HashSet<usize> = queue
        .dlq
        .iter()
        .chain(queue.redriven.iter().flatten())
        .map(|d| d.payload)
        .collect();
    let mut last_in_group: HashMap<&str, (u64, &str)> = HashMap::new();
    for (index, payload) in run.payloads.iter().enumerate() {
        let Some(group) = payload.group.as_deref() else {
            continue;
        };
        if moved_out.contains(&index) {
            continue;
        }
        let Some(at) = charges.get(&payload.order_id).and_then(|c| {
            c.iter()
                .find(|(sent, _)| Some(*sent) == payload.price)
                .map(|(_, at)| *at)
        }) else {
            continue;
        };
        if let Some((before, earlier)) = last_in_group.get(group)
            && at < *before
        {
            violations.push(Violation {
                rule: "charged out of order in its group",
                order_id: payload.order_id.clone(),
                detail: format!(
                    "{} in {group} was charged before {earlier}, which was sent before it",
                    payload.order_id
                ),
            });
        }
        last_in_group.insert(group, (at, &payload.order_id));
    }
}

/// A DLQ copy's failure note, if it carries one that reads.
fn failure_note(attributes: &crate::queue::Attrs) -> Option<sqs_batch::dead_letter::Failure> {
    let text = attributes
        .get(sqs_batch::dead_letter::FAILURE_ATTRIBUTE)?
        .string_value
        .as_deref()?;
    serde_json::from_str(text).ok()
}

/// The key a DLQ copy's failure attribute names, if it names one.
fn failure_key(attributes: &crate::queue::Attrs) -> Option<String> {
    failure_note(attributes)?.key
}

/// The retry schedule as docs/operations.md states it, read from the deployment's settings by
/// the world (not the function's `BackoffPolicy`): with b(n) = min(cap, base x 2^(n-1)) seconds
/// at receive n, a RETRY stays away between b(n)/2 and b(n), or until a later time it was given
/// plus up to `base` of jitter, never under b(n)/2; always under SQS's 12 hours.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// `SQS_BATCH_BACKOFF_BASE_SECONDS`.
    pub base_s: u64,
    /// `SQS_BATCH_BACKOFF_CAP_SECONDS`.
    pub cap_s: u64,
    /// `SQS_BATCH_DEADLINE_MARGIN_MS`: a record still running this close to the deadline may be abandoned.
    pub deadline_margin_ms: u64,
    /// `SQS_BATCH_PROBE_SECONDS`: how often a container may probe a dependency that is down
    /// (0: never).
    pub probe_s: u64,
}

impl Schedule {
    /// b(n) at receive `receive`, seconds.
    pub fn bound_s(&self, receive: u32) -> u64 {
        let mut bound = self.base_s;
        for _ in 1..receive {
            if bound >= self.cap_s {
                break;
            }
            bound = bound.saturating_mul(2);
        }
        bound
            .min(self.cap_s)
            .min(crate::queue::MAX_VISIBILITY_MS / 1_000 - 1)
    }

    /// Why a record failing at `receive`, first received at `first_receive_ms` (epoch ms),
    /// back at `back_ms` (simulated ms), would reach the DLQ sooner than on the schedule, if it
    /// would (docs/operations.md, "After an outage"): the time from its first receive to its
    /// return must cover the floors of its delays so far, this receive's included.
    pub fn early_return(
        &self,
        receive: u32,
        first_receive_ms: Option<u64>,
        back_ms: u64,
    ) -> Option<String> {
        let floors_ms: u64 = (1..=receive.max(1))
            .map(|k| self.bound_s(k) / 2 * 1_000)
            .sum();
        let Some(first) = first_receive_ms else {
            return Some("without a first receive".into());
        };
        let away_ms = (crate::world::EPOCH_MS + back_ms).saturating_sub(first);
        (away_ms < floors_ms).then(|| {
            format!(
                "back {away_ms} ms after its first receive, at receive {receive}, whose floors                  sum to {floors_ms} ms"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The world's list is the document's table, code for code: a code the function gains goes
    /// into docs/operations.md first, and then here.
    #[test]
    fn the_worlds_reason_codes_are_the_documents() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
        let text = std::fs::read_to_string(path).expect("docs/operations.md");
        let table: Vec<&str> = text
            .lines()
            .skip_while(|line| !line.starts_with("| reason | outcome |"))
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .filter_map(|line| line.split('`').nth(1))
            .collect();
        assert_eq!(table, DESIGN_REASONS, "docs/operations.md's reason codes");
    }

    /// The schedule as docs/operations.md and backoff's own example state it: doubling from the
    /// base to the cap, the floors of five failing receives summing to 77 s, and never SQS's 12
    /// hours however many receives.
    #[test]
    fn the_schedule_doubles_to_its_cap_and_stays_under_twelve_hours() {
        let template = Schedule {
            probe_s: 30,
            base_s: 5,
            cap_s: 900,
            deadline_margin_ms: 5_000,
        };
        let bounds: Vec<u64> = (1..=10).map(|n| template.bound_s(n)).collect();
        assert_eq!(bounds, [5, 10, 20, 40, 80, 160, 320, 640, 900, 900]);
        let floors: u64 = (1..=5).map(|n| template.bound_s(n) / 2).sum();
        assert_eq!(floors, 77);
        let long = Schedule {
            probe_s: 30,
            base_s: 40_000,
            cap_s: 50_000,
            ..template
        };
        assert_eq!(long.bound_s(1), 40_000);
        assert_eq!(long.bound_s(2), 43_199);
        assert_eq!(long.bound_s(1_000), 43_199);
    }
}
