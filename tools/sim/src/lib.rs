//! # sim
//!
//! A deterministic simulation of the order function. The real code runs: `sqs-batch`'s
//! processor with its deadline, FIFO holds, visibility backoff and DLQ moves, the claim check,
//! the order handler, the idempotency guard, the in-memory store's conditional rules, all
//! configured as `template.yaml` ships them ([`Shipped`]). Only the outside world is simulated,
//! behind the existing ports:
//!
//! - **SQS and the event source mapping** ([`queue`]): a standard queue (duplicate deliveries)
//!   or a FIFO queue (group locking), visibility timeouts, receive counts, the redrive policy,
//!   several pollers, partial batch responses, and an operator's redrive of the DLQ a week later.
//! - **Lambda containers**: each with its own clock offset and cold start, killed at its
//!   deadline, and crashing at a random point (the invocation's future dropped wherever it is;
//!   the container replaced).
//! - **Or long-polling workers** ([`worker`], `PROFILE=worker`): the real `process-orders
//!   worker` runtime over the real `SqsQueue` adapter, stopped by deploys and scale-ins (some
//!   while a batch holds a record at the receive before the redrive), crashing now and then.
//! - **DynamoDB** ([`store`]): latency, failures, and writes applied whose answer is lost.
//! - **The payment provider** ([`provider`]): the IETF Idempotency-Key draft at its worst, in
//!   a dialect ([`dialect`]) whose look-ups may word amounts otherwise ([`Amounts`]).
//! - **Producers**: bursts, duplicates, another amount under an id, bodies that are not orders,
//!   and (`archived`) orders sent again days later ([`LateResends`]).
//!
//! One seed drives every choice, on a single-threaded Tokio runtime with a paused clock, so a
//! seed replays byte for byte: [`Report::digest`] hashes the event log. The invariants
//! ([`check`]): no order charged twice; every payload charged, or in the DLQ for a reason that
//! needs a person; a declined card never sent again; nothing in the DLQ for a transient reason
//! (every outage is shorter than the retry schedule's guarantee), and (workers) nothing moved as
//! `retries_exhausted` that its handler was never given; FIFO charges in send order within a
//! group; every response before its deadline; no message deleted without a decision that allows
//! it. What an order
//! costs, and whether two bodies are the same order, is the world's own reading of the body
//! ([`worldmoney`]: its own ISO 4217 table and exact decimals), never the function's `money` or
//! `order` code, which is what it judges.
//!
//! The simulator's teeth: [`MUTATIONS`] are bugs planted in the real code; each must be caught
//! within a bounded number of seeds. The crates that ship hold none: the bugs are
//! `tools/sim/planted.patch`, applied to a copy of the repository (the planted tree,
//! `scripts/planted_tree.py`), whose lambda-kit switches them per thread ([`planted`]) and
//! compiles them in under `PROCESS_ORDERS_SIM_MUTATIONS=1` (`make planted-bugs`, part of
//! `make test`, and `make sim MUTATION=...` run there). In this tree the simulator builds and
//! runs, the planted-bug tests are ignored, and [`run`] refuses a mutation ([`NO_PLANTED_BUGS`]).

#![warn(missing_docs)]

pub mod check;
pub mod dialect;
pub mod dynamodb;
pub mod harness;
pub mod http;
pub mod planted;
pub mod provider;
pub mod queue;
pub mod settings;
pub mod sqs;
pub mod store;
pub mod worker;
pub mod world;
pub mod worldmoney;

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use idempotency::MemoryStore;
use lambda_kit::Clock;
use process_orders::app::App;
use process_orders::config::Config;
use process_orders::payment::answers::RetryableFailures;
use sqs_batch::dead_letter::SqsDeadLetters;
use sqs_batch::visibility::SqsVisibility;
use sqs_batch::{
    Backoff, Message, edge::Batch, edge::MessageAttributes, edge::QueueKind,
    processor::RecordStatus,
};

pub use check::{Report, Violation};
pub use dialect::{Amounts, DIALECTS, Dialect};
pub use settings::{Edges, LateResends, QueueShape, Shipped, SimSettings, StoreKind, Workers};
pub use world::Faults;

use provider::{Provider, ProviderSettings};
use queue::{Attrs, SharedQueue};
use store::{SimStore, Table};
use world::{EPOCH_MS, Shared, SimClock};
use worldmoney::{Code, Price};

/// The producer sends an order every this many ms on average...
const SEND_GAP_MS: u64 = 100;
/// ...in bursts of this many at once.
const BURST: u64 = 250;
/// SQS's longest receive wait.
pub(crate) const LONG_POLL_MS: u64 = 20_000;

/// Why a run that asks for a planted bug cannot go on in this build.
pub const NO_PLANTED_BUGS: &str = "this build has no planted bugs: run it in the planted tree \
    (`make sim MUTATION=...` and `make planted-bugs` do; scripts/planted_tree.py makes it)";

/// The planted bugs, by the name their check site asks for, with what each does wrong. They are
/// compiled in only in the planted tree (`planted::ENABLED`).
pub const MUTATIONS: [(&str, &str); 28] = [
    (
        "guard.releases_after_ambiguous",
        "releases the claim after a charge whose outcome is unknown, instead of marking it attempted",
    ),
    (
        "guard.not_found_is_proof",
        "trusts the look-up's \"not found\" past the key window and charges again",
    ),
    (
        "guard.skips_look_up",
        "charges again after an earlier attempt without asking the provider what became of it",
    ),
    (
        "handler.acks_in_flight",
        "acknowledges a charge the provider says is still in flight (409 or pending)",
    ),
    (
        "handler.acks_store_errors",
        "acknowledges a record whose store call failed",
    ),
    (
        "store.ignores_fingerprint",
        "takes a key as the same order whatever its payload (no conflict)",
    ),
    (
        "store.forgets_completed",
        "lets a completed key be claimed again (as if its retention had run out)",
    ),
    (
        "backoff.retries_at_once",
        "a retry schedule without its floor: a RETRY is visible again at once",
    ),
    (
        "processor.fifo_goes_on_after_failure",
        "FIFO: processes a group's later records after one failed",
    ),
    (
        "lookup.bare_failed_is_retryable",
        "reads a look-up's bare `failed` (no code, no decline named) as not charged, and charges again",
    ),
    (
        "handler.look_up_failure_to_a_person",
        "sends an order to a person (POISON needs_reconciliation) when the look-up failed past the key window, instead of retrying until it answers",
    ),
    (
        "dead_letter.ignores_batch_bytes",
        "packs DLQ copies ten to a SendMessageBatch whatever their size, past SQS's 1 MiB a call",
    ),
    (
        "processor.never_abandons",
        "lets a record run past the deadline instead of abandoning it",
    ),
    (
        "store.ignores_lease_token",
        "applies a holder's write (complete, mark attempted, release, reject) whatever lease it holds: an unfenced store",
    ),
    (
        "order.fingerprint_ignores_currency",
        "leaves the currency out of an order's fingerprint: the same number in another currency is taken as a duplicate",
    ),
    (
        "backoff.ignores_retry_after",
        "gives a RETRY whose verdict names a retry time (a lease held elsewhere) only the schedule's delay",
    ),
    (
        "handler.ignores_carried_history",
        "ignores the failure history a copy replayed from the DLQ carries: once its item has expired, the order is charged as new without asking the provider",
    ),
    (
        "lookup.conflict_is_an_error",
        "reads a look-up that found another amount under the key as a failed look-up, instead of a conflict settled by a person",
    ),
    (
        "redact.cut_before_scrub",
        "cuts the provider's text to its 200 characters before scrubbing the payment key from it, and scrubs only the whole key",
    ),
    (
        "lookup.unreadable_amount_is_a_match",
        "counts an amount a look-up words otherwise than an integer of minor units (\"5000\", 5000.0) as the order's: another payload's charge completes the order as paid",
    ),
    (
        "store.trusts_absence_of_young_copies",
        "trusts a missing item for a copy whose first failure is younger than the 18-day retention: a refused copy (a conflict, a decline) redriven after the order's own item expired is charged without a look-up",
    ),
    (
        "processor.stopping_gives_up",
        "a worker's stop answers the records it kept from starting RETRY shutting_down, which the give-up turns into POISON retries_exhausted at the receive before the queue's redrive: moved to the DLQ, never tried",
    ),
    (
        "money.wrong_minor_digits",
        "takes the Kuwaiti dinar for a currency of two minor digits (ISO 4217 gives it three)",
    ),
    (
        "store.reuses_lease_token",
        "a takeover keeps the old holder's lease token: the cut-off holder's writes pass the fence, and an audit by token sees nothing",
    ),
    (
        "store.lease_ends_at_deadline",
        "a lease arithmetic that forgets the margin: a claim's lease ends with its invocation, not the margin after it (docs/design.md's rule: min(lease, deadline + margin))",
    ),
    (
        "processor.give_up_keeps_retry",
        "the give-up renames a RETRY at the receive before the queue's redrive retries_exhausted but keeps it a RETRY: nothing moves it, and SQS's redrive takes it without the function's reason",
    ),
    (
        "processor.holds_after_success",
        "FIFO: every record holds the rest of its group, an acknowledged one too: one record a group a receive, the others reported without being started",
    ),
    (
        "order.amount_through_float",
        "reads an order's amount through a float and truncates it to minor units (12.34 EUR charged as 1233 cents)",
    ),
];

/// One message the producer sent.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The order id.
    pub order_id: String,
    /// What the body charges, as the world reads it ([`worldmoney::read`], the deployment's
    /// default currency when it names none): `None` for a body that is not an order.
    pub price: Option<Price>,
    /// The body.
    pub body: String,
    /// The FIFO message group.
    pub group: Option<String>,
    /// The producer's message attributes.
    pub attributes: Attrs,
    /// Whether the body is not a valid order (it must reach the DLQ, never be charged). The
    /// generator's word for it, held against the world's reading when the payload is made.
    pub poison: bool,
    /// When it was sent, simulated ms.
    pub sent_ms: u64,
}

/// The currencies producers send, with the share of orders in each: most name none (the
/// deployment's default, EUR), and the rest span every minor unit there is in practice (the yen's
/// none, the dollar's two, the Kuwaiti dinar's three), one of them in lower case.
const CURRENCIES: [(Option<&str>, f64); 4] = [
    (None, 0.6),
    (Some("JPY"), 0.15),
    (Some("KWD"), 0.15),
    (Some("usd"), 0.1),
];

/// A currency drawn from [`CURRENCIES`]: the code the body names (if any) and the currency, by
/// the world's reading of the code (`default` when it names none).
fn draw_currency(world: &Shared, default: Code) -> (Option<&'static str>, Code) {
    let mut roll = world.roll();
    for (code, share) in CURRENCIES {
        if roll < share {
            return (code, code.and_then(Code::parse).unwrap_or(default));
        }
        roll -= share;
    }
    (None, default)
}

/// Runs `future` to its end on a paused single-threaded runtime, its tasks local: the simulated
/// clock moves only when every task waits, so a seed replays.
pub(crate) fn block_on_seeded<T>(seed: u64, future: impl Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // The real code draws lease tokens and backoff jitter from fastrand's thread-local source:
    // seeded too, so the run replays.
    fastrand::seed(seed ^ 0x9e37_79b9_7f4a_7c15);
    let local = tokio::task::LocalSet::new();
    runtime.block_on(local.run_until(future))
}

/// Runs one simulation to the end (the queue and any redrive drained) and reports it.
///
/// # Panics
///
/// With a mutation asked for in a build without the planted bugs (anywhere but the planted
/// tree): the run would find nothing and prove nothing.
pub fn run(settings: &SimSettings) -> Report {
    if let Some(mutation) = settings.mutation
        && !planted::ENABLED
    {
        panic!("{mutation}: {NO_PLANTED_BUGS}");
    }
    let (report, hits) = planted::with(settings.mutation, || {
        block_on_seeded(settings.seed, simulate(settings.clone()))
    });
    Report {
        mutation_hits: hits,
        ..report
    }
}

/// The function's environment: the template's defaults, with the simulation's key window.
fn environment(shipped: &Shipped, settings: &SimSettings) -> Config {
    let mut env = shipped.env.clone();
    // The table and the provider are simulated; metrics are not read.
    for name in [
        "IDEMPOTENCY_TABLE",
        "PAYMENT_API_URL",
        "PAYMENT_API_KEY",
        "PAYMENT_API_KEY_SECRET",
        "CLAIM_CHECK_BUCKET",
    ] {
        env.remove(name);
    }
    env.insert("METRICS_ENABLED".into(), "false".into());
    env.insert(
        "PAYMENT_KEY_WINDOW_SECONDS".into(),
        settings.key_window_s.to_string(),
    );
    env.insert("AWS_REGION".into(), "us-east-1".into());
    // The recovery after an outage may be turned off for a run, to measure what it saves.
    if let Ok(probe_s) = std::env::var("SQS_BATCH_PROBE_SECONDS") {
        env.insert("SQS_BATCH_PROBE_SECONDS".into(), probe_s);
    }
    if !settings.recovery {
        env.insert("SQS_BATCH_PROBE_SECONDS".into(), "0".into());
    }
    Config::from_lookup(|name| env.get(name).cloned()).expect("the template's configuration")
}

/// Text of about `bytes` bytes, some of it outside ASCII, all of it in SQS's character set.
fn filler(bytes: usize) -> String {
    const PATTERN: &str = "gift wrap, leave at the door \u{e9}\u{fc}\u{2713} ";
    PATTERN.repeat(bytes / PATTERN.len() + 1)
}

/// What a producer attaches at SQS's edges: nine attributes of its own (ten with the payload's
/// tag, so a moved copy's failure attribute must displace one), one of them large, some text
/// outside ASCII, a number.
fn edge_attributes(world: &Shared) -> Attrs {
    let mut attributes = Attrs::new();
    for n in 0..8 {
        attributes.insert(
            format!("producer.attr-{n}"),
            queue::Attr::text(format!("v\u{e9}rsion {n} \u{2713}")),
        );
    }
    let large = usize::try_from(world.between(1_000..=60_000)).unwrap_or(1_000);
    attributes.insert("producer.context".into(), queue::Attr::text(filler(large)));
    attributes
}

/// A moved copy's failure attribute, as another tool redriving an old DLQ sends it: its first
/// failure long past every window.
fn carried_failure(at_ms: u64) -> Attrs {
    let failure = serde_json::json!({
        "reason": "payment_ambiguous",
        "source_queue_arn": sqs::arns(false).0,
        "receive_count": 3,
        "first_failure_ms": at_ms,
        "last_failure_ms": at_ms + 60_000,
        "moved_by": "process-orders:1",
    });
    Attrs::from([(
        sqs_batch::dead_letter::FAILURE_ATTRIBUTE.to_owned(),
        queue::Attr::text(failure.to_string()),
    )])
}

/// Order `i`'s id: `o-{i}`, but every 97th has a space inside and every 89th is exactly as long
/// as the design allows (255 bytes): ids the function must take as they are.
fn order_id_of(i: usize) -> String {
    let id = format!("o-{i}");
    if i % 97 == 5 {
        format!("{id} x")
    } else if i % 89 == 7 {
        format!("{id}-{}", "x".repeat(255 - id.len() - 1))
    } else {
        id
    }
}

/// The amounts [`settings::Edges::money`] sends, one after another: a currency code, the
/// amount's JSON text and the minor units it names, as the world's own table and reader see them
/// (`None`: not an order, POISON `invalid_body`). Every exponent ISO 4217 has (0, 2, 3 and 4),
/// the largest amount a JSON reader holds exactly (2^53 - 1 minor units) and one unit past it,
/// exponents of either sign (past 3, where no currency's places reach, and past what an `i64`
/// holds), spellings of one number, fractions of the minor unit, an amount as a string.
pub const MONEY_EDGES: [(&str, &str, Option<u64>); 27] = [
    ("CLF", "1.2345", Some(12_345)),
    ("UYW", "0.0001", Some(1)),
    ("CLF", "12.5", Some(125_000)),
    ("UYW", "3e0", Some(30_000)),
    ("KWD", "0.001", Some(1)),
    ("BHD", "1.5e1", Some(15_000)),
    ("OMR", "2.500", Some(2_500)),
    ("JPY", "9007199254740991", Some((1 << 53) - 1)),
    ("JPY", "9007199254740992", None),
    ("EUR", "90071992547409.91", Some((1 << 53) - 1)),
    ("EUR", "90071992547409.92", None),
    ("CLF", "900719925474.0991", Some((1 << 53) - 1)),
    ("KRW", "1.5E+3", Some(1_500)),
    ("ISK", "0.5e1", Some(5)),
    ("USD", "100.000", Some(10_000)),
    ("EUR", "1E-2", Some(1)),
    ("EUR", "0.001", None),
    ("JPY", "1.5", None),
    ("CLF", "0.00001", None),
    ("TND", "1.0005", None),
    ("EUR", "\"12\"", None),
    ("EUR", "0", None),
    ("JPY", "12345678901234567", None),
    ("GBP", "0.10e1", Some(100)),
    ("JPY", "1e4", Some(10_000)),
    ("EUR", "25E+6", Some(2_500_000_000)),
    ("JPY", "1e99999999999999999999", None),
];

/// `order` as SNS delivers a notification to a queue without raw message delivery.
fn sns_notification(order: &str) -> String {
    serde_json::json!({
        "Type": "Notification",
        "MessageId": "5b2b8c7e-0000-4000-8000-000000000000",
        "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
        "Message": order,
        "Timestamp": "2026-01-01T00:00:00.000Z",
    })
    .to_string()
}

/// Bodies that are not orders, as producers get them wrong; some large (near SQS's limit, so
/// that ten of them do not fit one `SendMessageBatch`).
fn poison_body(order_id: &str, world: &Shared) -> String {
    match world.between(0..=4) {
        0 => format!("order {order_id}: not JSON"),
        1 => format!(r#"{{"order_id": "{order_id}", "amount": -5}}"#),
        // Picked by the id, so that no draw is added to the fixed seeds.
        2 => malformed(order_id, order_id.bytes().map(usize::from).sum::<usize>()),
        _ => {
            let pad = usize::try_from(world.between(100_000..=200_000)).unwrap_or(100_000);
            format!(
                r#"{{"order_id": "{order_id}", "amount": "ten", "note": "{}"}}"#,
                filler(pad)
            )
        }
    }
}

/// How many kinds [`malformed`] makes.
const MALFORMED_KINDS: usize = 12;

/// A body that is not an order for one field's sake, kind `k` (modulo [`MALFORMED_KINDS`]): no
/// id; an id no store key, header and path segment all read alike (the world's rule,
/// `worldmoney::read`: one byte too long, white space at an end, a dot segment, a control
/// character, non-ASCII); an SNS notification whose `Message` is the order as an object, or a
/// string holding an order with a bad amount; an amount as a string, or one minor unit past
/// 2^53 - 1 (every JSON reader's exact integers).
fn malformed(order_id: &str, k: usize) -> String {
    let with_id = |id: &str| format!(r#"{{"order_id": "{id}", "amount": 10}}"#);
    match k % MALFORMED_KINDS {
        0 => r#"{"amount": 12.5}"#.to_owned(),
        1 => with_id(&format!("{order_id}-{}", "x".repeat(255 - order_id.len()))),
        2 => with_id(&format!(" {order_id}")),
        3 => with_id(&format!("{order_id} ")),
        4 => with_id("."),
        5 => with_id(".."),
        6 => with_id(&format!("{order_id}\\u0007")),
        7 => with_id(&format!("{order_id}-\u{e9}")),
        8 => format!(
            r#"{{"Type": "Notification", "Message": {{"order_id": "{order_id}", "amount": 10}}}}"#
        ),
        9 => sns_notification(&format!(r#"{{"order_id": "{order_id}", "amount": -5}}"#)),
        10 => format!(r#"{{"order_id": "{order_id}", "amount": "12"}}"#),
        _ => format!(r#"{{"order_id": "{order_id}", "amount": 90071992547409.92}}"#),
    }
}

impl Payload {
    /// A message with `body`, priced by the world's reading of it; `poison` is the generator's
    /// word that the body is not an order, and the reading must agree (a world that cannot read
    /// its own orders would judge nothing).
    fn new(order_id: String, body: String, poison: bool, default: Code) -> Self {
        let price = worldmoney::read(&body, default).map(|(id, price)| {
            assert_eq!(
                id, order_id,
                "the world reads another id in {order_id}'s body"
            );
            price
        });
        assert_eq!(
            price.is_none(),
            poison,
            "the world reads {order_id}'s body otherwise than it wrote it"
        );
        Self {
            order_id,
            price,
            body,
            group: None,
            attributes: Attrs::new(),
            poison,
            sent_ms: 0,
        }
    }
}

/// The run's messages in send order. `default` is the deployment's `DEFAULT_CURRENCY`, as the
/// template sets it: the currency of a body that names none.
fn payloads(settings: &SimSettings, world: &Shared, default: Code) -> Vec<Payload> {
    let mut out = Vec::with_capacity(settings.orders + settings.orders / 10);
    for i in 0..settings.orders {
        let order_id = order_id_of(i);
        // Every 13th order comes through an SNS topic without raw delivery: wrapped once.
        let wrapped = i % 13 == 4;
        let amount = world.between(100..=50_000);
        let group = match settings.queue {
            QueueShape::Fifo { groups } => {
                Some(format!("g-{}", world.between(0..=groups as u64 - 1)))
            }
            QueueShape::Standard => None,
        };
        // Some bodies carry a large note (an order's text fields), up to 200 KB of a message
        // SQS limits to 256 KiB.
        let note = world
            .chance(settings.edges.large_body_rate)
            .then(|| filler(usize::try_from(world.between(10_000..=200_000)).unwrap_or(0)));
        let (code, currency) = draw_currency(world, default);
        // The amount written as the world's table says the currency's minor unit is.
        let body = |minor: u64, code: Option<&str>, currency: Code| {
            let currency_field = code.map_or(String::new(), |c| format!(r#", "currency": "{c}""#));
            // Every 11th order writes its amount with an exponent (`1050E-2`, `12.5e0`), as some
            // JSON writers do: the same number.
            let amount = match (i % 22, currency.minor_digits()) {
                (3, Some(digits)) => format!("{minor}E-{digits}"),
                (14, Some(_)) => format!(
                    "{}e0",
                    Price { minor, currency }
                        .decimal()
                        .expect("the world sends only currencies it knows")
                ),
                _ => Price { minor, currency }
                    .decimal()
                    .expect("the world sends only currencies it knows"),
            };
            let order = match &note {
                None => {
                    format!(r#"{{"order_id": "{order_id}", "amount": {amount}{currency_field}}}"#)
                }
                Some(note) => format!(
                    r#"{{"order_id": "{order_id}", "amount": {amount}{currency_field}, "note": "{note}"}}"#
                ),
            };
            if wrapped {
                sns_notification(&order)
            } else {
                order
            }
        };
        // Orders arrive in bursts (a sale, a batch job upstream): full batches, long queues.
        let sent_ms = (i as u64 / BURST) * BURST * SEND_GAP_MS;
        let mut attributes = if world.chance(settings.edges.attribute_rate) {
            edge_attributes(world)
        } else {
            Attrs::new()
        };
        if world.chance(settings.edges.carried_failure_rate) {
            attributes.extend(carried_failure(
                EPOCH_MS.saturating_sub(20 * 86_400_000) + sent_ms,
            ));
        }
        // The producer's own send must fit SQS: a large attribute goes when the body is large.
        if note.is_some() {
            attributes.remove("producer.context");
        }
        // A producer bug after a burst: a run of large bodies that are not orders.
        if (i as u64).is_multiple_of(BURST) && world.chance(settings.edges.poison_burst_rate) {
            for n in 0..world.between(10..=20) {
                let pad = usize::try_from(world.between(100_000..=200_000)).unwrap_or(100_000);
                let order_id = format!("bad-{i}-{n}");
                let body = format!(
                    r#"{{"order_id": "{order_id}", "amount": "ten", "note": "{}"}}"#,
                    filler(pad)
                );
                out.push(Payload {
                    group: group.clone(),
                    sent_ms: sent_ms + BURST * SEND_GAP_MS / 2,
                    ..Payload::new(order_id, body, true, default)
                });
            }
        }
        // At money's edges: the order as it was drawn, with another amount and currency.
        if settings.edges.money && i % 4 == 1 {
            let (code, amount, minor) = MONEY_EDGES[(i / 4) % MONEY_EDGES.len()];
            let order = format!(
                r#"{{"order_id": "{order_id}", "amount": {amount}, "currency": "{code}"}}"#
            );
            let body = if wrapped {
                sns_notification(&order)
            } else {
                order
            };
            let payload = Payload {
                group,
                attributes,
                sent_ms,
                ..Payload::new(order_id, body, minor.is_none(), default)
            };
            assert_eq!(
                payload.price.map(|p| p.minor),
                minor,
                "the world reads {amount} {code} otherwise than its list says"
            );
            out.push(payload);
            continue;
        }
        let edge = world.roll();
        let (poison_rate, pointer_rate) = (settings.edges.poison_rate, settings.edges.pointer_rate);
        if edge < poison_rate + pointer_rate {
            let (body, attributes) = if edge < poison_rate {
                let body = poison_body(&order_id, world);
                if body.len() > 50_000 {
                    attributes.remove("producer.context");
                }
                (body, attributes)
            } else {
                // A claim-check pointer, while the deployment has no claim check: POISON
                // until an operator turns it on and redrives.
                attributes.insert(
                    claim_check::POINTER_ATTRIBUTE.into(),
                    queue::Attr::text(claim_check::POINTER_S3),
                );
                let body = format!(
                    r#"{{"bucket": "orders-payloads", "key": "payloads/{order_id}", "size": 3000000}}"#
                );
                (body, attributes)
            };
            out.push(Payload {
                group,
                attributes,
                sent_ms,
                ..Payload::new(order_id, body, true, default)
            });
            continue;
        }
        let payload = |minor: u64, (code, currency): (Option<&str>, Code), sent_ms: u64| Payload {
            group: group.clone(),
            attributes: attributes.clone(),
            sent_ms,
            ..Payload::new(
                order_id.clone(),
                body(minor, code, currency),
                false,
                default,
            )
        };
        out.push(payload(amount, (code, currency), sent_ms));
        // A producer that retries sends the same order again, a little later.
        if world.chance(settings.producer_duplicate_rate) {
            out.push(payload(
                amount,
                (code, currency),
                sent_ms + world.between(0..=600_000),
            ));
        }
        // A producer bug: the same order id with another amount, or (half the time) the same
        // number in another currency, which only the currency tells apart.
        let other = || {
            if world.chance(0.5) {
                (amount + 1, (code, currency))
            } else if currency == Code::EUR {
                (amount, (Some("JPY"), Code::parse("JPY").unwrap_or(default)))
            } else {
                (amount, (Some("EUR"), Code::EUR))
            }
        };
        if world.chance(settings.conflict_rate) {
            let (minor, currency) = other();
            out.push(payload(
                minor,
                currency,
                sent_ms + world.between(0..=600_000),
            ));
        }
        // Days later, the same order again (a declined one more often: a customer retrying the
        // card), or another amount under its id: each refused, so its claim writes no item.
        if let Some(late) = settings.late {
            let share = if provider::declines(amount) {
                late.declined_rate
            } else {
                late.again_rate
            };
            if world.chance(share) {
                let at_ms = late.at_ms + world.between(0..=3_600_000);
                out.push(payload(amount, (code, currency), at_ms));
            }
            if world.chance(late.conflict_rate) {
                let (minor, currency) = other();
                let at_ms = late.at_ms + world.between(0..=3_600_000);
                out.push(payload(minor, currency, at_ms));
            }
        }
    }
    out.sort_by_key(|p| p.sent_ms);
    out
}

type SimApp = App<SimStore, Arc<Provider>, SimClock, SqsVisibility, SqsDeadLetters>;

/// What every container of the run is built from.
struct Deployment {
    config: Config,
    settings: SimSettings,
    shipped: Shipped,
    world: Shared,
    queue: SharedQueue,
    table: Arc<MemoryStore>,
    /// The DynamoDB engine every container's client reaches, with `STORE=dynamodb`.
    engine: Option<dynoxide::Database>,
    provider: Arc<Provider>,
    start: tokio::time::Instant,
    payloads: Vec<Payload>,
    /// Invocations.
    invocations: RefCell<usize>,
    windows: [(u64, u64); 3],
    /// The DynamoDB table's brownout, simulated ms (from, to); (0, 0) for none.
    store_brownout: (u64, u64),
    decisions: RefCell<std::collections::BTreeMap<&'static str, usize>>,
    violations: RefCell<Vec<Violation>>,
    producer_done: RefCell<bool>,
}

impl Deployment {
    /// Whether a FIFO queue's batch is one group for the function (`SQS_BATCH_FIFO_SCOPE`, `batch` by
    /// default): Lambda's own FIFO contract, which the world then holds each response to.
    fn batch_scope(&self) -> bool {
        self.shipped
            .env
            .get("SQS_BATCH_FIFO_SCOPE")
            .is_none_or(|scope| scope.eq_ignore_ascii_case("batch"))
    }

    /// A millisecond setting of the function's environment.
    fn setting_ms(&self, name: &str, default: u64) -> u64 {
        self.shipped
            .env
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// A cold container: its own clock offset, its own clients, the shared table and provider,
    /// after its init (tens to hundreds of ms).
    async fn cold_start(&self) -> (SimApp, SimClock, store::Holder) {
        self.world.latency(400).await;
        self.container()
    }

    /// A new container: its own clock offset, its own clients, the shared table and provider.
    fn container(&self) -> (SimApp, SimClock, store::Holder) {
        let skew = self.settings.skew_ms as i64;
        let offset_ms = self.world.between_signed(-skew..=skew);
        let clock = SimClock {
            start: self.start,
            offset_ms,
        };
        let lost_below = dynamodb::LostAnswers::new(&self.config.store.key_prefix);
        let inner = match (&self.engine, self.settings.shared_store) {
            (None, true) => Table::Memory(self.table.clone()),
            (None, false) => Table::Memory(Arc::new(MemoryStore::new(self.config.store.retention))),
            (Some(engine), shared) => {
                // A broken deployment's table of its own, or the shared one.
                let own;
                let engine = if shared {
                    engine
                } else {
                    own = dynamodb::engine(clock.clone());
                    &own
                };
                let faults = dynamodb::HttpFaults {
                    error_rate: self.settings.store_error_rate,
                    lost_rate: self.settings.store_lost_rate,
                    throttle_rate: self.settings.store_slow_rate,
                    lost_at_takeover_rate: self.settings.store_lost_at_takeover_rate,
                    brownout: self.store_brownout,
                    brownout_throttle_rate: self.settings.store_brownout_throttle_rate,
                };
                let expiry = dynamodb::ExpiryRule {
                    clock: clock.clone(),
                    retention_s: self.setting_ms("IDEMPOTENCY_RETENTION_DAYS", 18) * 86_400,
                    slack_s: self.settings.skew_ms.div_ceil(1_000) + 1,
                    prefix: self.config.store.key_prefix.clone(),
                };
                let client = dynamodb::client(
                    engine,
                    &self.world,
                    faults,
                    &self.config.dynamodb,
                    lost_below.clone(),
                    expiry,
                );
                let client = if self.settings.retry_quota {
                    client
                } else {
                    client.without_retry_quota()
                };
                Table::DynamoDb(
                    idempotency::DynamoDbStore::direct(
                        client,
                        dynamodb::TABLE,
                        self.config.store.retention,
                    )
                    .with_key_prefix(&self.config.store.key_prefix),
                    dynamodb::ItemReader::new(engine, &self.config.store.key_prefix),
                )
            }
        };
        // The lease rule's settings as the template sets them (the world's reading, not the
        // function's parsed configuration); defaults as docs/design.md states them.
        let container = {
            let mut world = self.world.lock();
            world.containers += 1;
            world.containers
        };
        let holder = store::Holder::new(
            container,
            clock.clone(),
            self.setting_ms("IDEMPOTENCY_LEASE_SECONDS", 300) * 1_000,
            self.setting_ms("IDEMPOTENCY_LEASE_MARGIN_MS", 5_000),
            self.setting_ms("IDEMPOTENCY_RETENTION_DAYS", 18) * 86_400_000,
        );
        let store = SimStore {
            inner,
            world: self.world.clone(),
            error_rate: self.settings.store_error_rate,
            lost_rate: self.settings.store_lost_rate,
            slow_rate: self.settings.store_slow_rate,
            hang_at_give_up_rate: self.settings.store_hang_at_give_up_rate,
            operation_timeout_ms: self.setting_ms("DYNAMODB_OPERATION_TIMEOUT_MS", 3_000),
            holder: holder.clone(),
            lost_below,
        };
        // The function's own SQS adapters, wired as it wires them, over the simulated queue.
        let sqs = sqs::sdk_config(
            &self.queue,
            &self.world,
            &SimClock {
                start: self.start,
                offset_ms: 0,
            },
            holder.learned.clone(),
        );
        let backoff = self.config.backoff.map(|policy| {
            Backoff::new(process_orders::app::sqs_visibility(sqs.clone()), policy)
                .with_recovery(self.config.recovery)
        });
        let dead_letters = self
            .config
            .move_poison
            .then(|| process_orders::app::sqs_dead_letters(sqs, "process-orders:sim".into()));
        let app = App::with_ports(&self.config, store, self.provider.clone(), clock.clone())
            .with_queue_ports(backoff, dead_letters);
        (app, clock, holder)
    }
}

async fn simulate(settings: SimSettings) -> Report {
    let start = tokio::time::Instant::now();
    let truth = SimClock {
        start,
        offset_ms: 0,
    };
    let world = Shared::new(settings.seed, truth.clone());
    let mut shipped = Shipped::read().expect("template.yaml");
    // An operator's lease, as the deployment (and so the world's reading of it) has it.
    if let Some((lease_s, margin_ms)) = settings.lease {
        shipped
            .env
            .insert("IDEMPOTENCY_LEASE_SECONDS".into(), lease_s.to_string());
        shipped
            .env
            .insert("IDEMPOTENCY_LEASE_MARGIN_MS".into(), margin_ms.to_string());
    }
    if settings.fifo_batch_scope {
        shipped
            .env
            .insert("SQS_BATCH_FIFO_SCOPE".into(), "batch".into());
    }
    if settings.lookup_durable {
        shipped
            .env
            .insert("PAYMENT_LOOKUP_DURABLE".into(), "true".into());
    }
    let config = environment(&shipped, &settings);
    // The deployment's default currency, as the world reads the template's setting.
    let default_currency = shipped
        .env
        .get("DEFAULT_CURRENCY")
        .and_then(|code| Code::parse(code))
        .unwrap_or(Code::EUR);
    let payloads = payloads(&settings, &world, default_currency);
    // Faults start while the orders are still arriving.
    let span_ms = settings.orders as u64 * SEND_GAP_MS;
    // A brownout in the first half of the traffic, an outage in the second, a rotation
    // anywhere: each meets full queues rather than hiding behind another.
    let window = |length_ms: u64, from: std::ops::RangeInclusive<u64>| {
        if length_ms == 0 {
            return (0, 0);
        }
        let from = world.between(from);
        (from, from + length_ms)
    };
    let provider_settings = ProviderSettings {
        dialect: settings.provider,
        lookup_amounts: settings.lookup_amounts,
        retryable: shipped
            .env
            .get("PAYMENT_RETRYABLE_FAILURES")
            .map(|codes| {
                RetryableFailures::of(&codes.split(',').map(str::trim).collect::<Vec<_>>())
            })
            .unwrap_or_default(),
        key_window_ms: settings.key_window_s * 1_000,
        skew_allowance_ms: shipped
            .env
            .get("PAYMENT_CLOCK_SKEW_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(60_000),
        lookup_retention_ms: settings.lookup_retention_s * 1_000,
        client_timeout_ms: shipped
            .env
            .get("PAYMENT_TIMEOUT_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(5_000),
        brownout: window(settings.brownout_ms, 0..=span_ms / 2),
        outage: window(settings.outage_ms, span_ms / 2..=span_ms),
        rotation: window(settings.rotation_ms, 0..=span_ms),
        lost_rate: settings.charge_lost_rate,
        first_lost_on_the_way_every: if settings.store == StoreKind::DynamoDb {
            settings.first_charge_lost_on_the_way_every
        } else {
            0
        },
        pending_rate: settings.pending_rate,
        slow_rate: settings.slow_rate,
        lookup_error_rate: settings.lookup_error_rate,
        // Letters only, so that no rule for tokens (letters and digits) hides a piece of it:
        // only the scrub of the key itself does.
        secret: {
            let mut rng = fastrand::Rng::with_seed(settings.seed ^ 0x5ec2e7);
            std::iter::repeat_with(|| rng.alphabetic())
                .take(64)
                .collect()
        },
    };
    world.log(&format!("{provider_settings:?}"));
    // After the provider's windows, and drawn only when there is one: the other profiles'
    // random streams stay as they were.
    let store_brownout = window(settings.store_brownout_ms, 0..=span_ms / 2);
    let fifo = matches!(settings.queue, QueueShape::Fifo { .. });
    let deployment = Rc::new(Deployment {
        table: Arc::new(MemoryStore::new(config.store.retention)),
        engine: (settings.store == StoreKind::DynamoDb).then(|| dynamodb::engine(truth.clone())),
        provider: Arc::new(Provider::new(
            truth.clone(),
            world.clone(),
            provider_settings.clone(),
        )),
        queue: SharedQueue::new(
            fifo,
            shipped.max_receive,
            shipped.visibility_ms,
            settings.duplicate_rate,
            settings.sqs_error_rate,
        ),
        config,
        settings: settings.clone(),
        shipped,
        world: world.clone(),
        start,
        payloads,
        invocations: RefCell::new(0),
        windows: [
            provider_settings.outage,
            provider_settings.brownout,
            provider_settings.rotation,
        ],
        store_brownout,
        decisions: RefCell::default(),
        violations: RefCell::new(Vec::new()),
        producer_done: RefCell::new(false),
    });
    // An operator edits the redrive policy in the console while the function runs.
    let lowered = settings
        .lowered_receive_count
        .map(|count| (world.between(0..=span_ms / 2), count));
    if let Some((at_ms, count)) = lowered {
        let (queue, world) = (deployment.queue.clone(), world.clone());
        drop(tokio::task::spawn_local(async move {
            tokio::time::sleep(Duration::from_millis(at_ms)).await;
            queue.lock().max_receive = count;
            world.log(&format!("an operator lowers maxReceiveCount to {count}"));
        }));
    }
    // The producer, then the pollers until the queue drains.
    let late_from = settings.late.map_or(deployment.payloads.len(), |late| {
        deployment
            .payloads
            .partition_point(|p| p.sent_ms < late.at_ms)
    });
    let producer = tokio::task::spawn_local(produce(deployment.clone(), 0..late_from));
    drain(&deployment).await;
    drop(producer.await);
    let drained_ms = truth.sim_ms();
    // Days later (`archived`), the producers' late resends, and the pollers until they drain.
    if let Some(first) = deployment.payloads.get(late_from) {
        tokio::time::sleep(Duration::from_millis(
            first.sent_ms.saturating_sub(truth.sim_ms()),
        ))
        .await;
        *deployment.producer_done.borrow_mut() = false;
        let range = late_from..deployment.payloads.len();
        let producer = tokio::task::spawn_local(produce(deployment.clone(), range));
        drain(&deployment).await;
        drop(producer.await);
    }
    // A week (20 days in `archived`) after the traffic drained, an operator redrives the DLQ.
    if let Some(after_ms) = settings.redrive_after_ms {
        tokio::time::sleep(Duration::from_millis(
            (drained_ms + after_ms).saturating_sub(truth.sim_ms()),
        ))
        .await;
        let now_ms = truth.sim_ms();
        let count = deployment
            .queue
            .lock()
            .redrive(&deployment.payloads, now_ms);
        world.log(&format!("operator redrives {count}"));
        if count > 0 {
            drain(&deployment).await;
        }
    }
    check::report(&deployment_view(&deployment, lowered), truth.sim_ms())
}

fn deployment_view(d: &Deployment, lowered: Option<(u64, u32)>) -> check::Run<'_> {
    check::Run {
        lowered,
        settings: &d.settings,
        payloads: &d.payloads,
        queue: &d.queue,
        provider: &d.provider,
        world: &d.world,
        invocations: *d.invocations.borrow(),
        windows: d.windows,
        // The template's retention, as the world reads the deployment's setting.
        retention_ms: d.setting_ms("IDEMPOTENCY_RETENTION_DAYS", 18) * 86_400_000,
        decisions: d.decisions.borrow().clone(),
        violations: d.violations.borrow().clone(),
    }
}

/// Sends the payloads of `range` at their times, then says the producer is done.
async fn produce(d: Rc<Deployment>, range: std::ops::Range<usize>) {
    let truth = SimClock {
        start: d.start,
        offset_ms: 0,
    };
    for (index, payload) in d
        .payloads
        .iter()
        .enumerate()
        .take(range.end)
        .skip(range.start)
    {
        let wait = payload.sent_ms.saturating_sub(truth.sim_ms());
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        d.world.tell(&payload.order_id, || match &payload.price {
            Some(price) => format!("sent, {price}"),
            None => "sent, not an order".into(),
        });
        d.queue.lock().send(index, payload, truth.sim_ms());
        d.queue.sent().notify_waiters();
    }
    *d.producer_done.borrow_mut() = true;
    d.queue.sent().notify_waiters();
}

/// What the world saw of an invocation that answered: its batch, the records its response
/// reported, and the orders it asked the table to claim.
#[derive(Clone, Copy)]
struct Answered<'m, 'a> {
    received: &'m [queue::Stored],
    failed: &'a HashSet<&'a str>,
    begun: &'a HashSet<String>,
    /// The provider refused this invocation's configuration (a 401): after three, the
    /// function's breaker answers the rest RETRY without claiming them.
    refused: bool,
}

/// Where a FIFO batch's response breaks the order the function promises, by the world's own
/// record: which messages the response reports, which the function moved to the DLQ in this
/// invocation or failed to (and with what reason), and which it started (`begun`: the table was
/// asked to claim their order; a body that is not an order is decided without it).
///
/// In batch scope (Lambda's FIFO contract) the batch is one group and any failure holds the
/// rest; in group scope (`SQS_BATCH_FIFO_SCOPE=group`, shipped) a failure holds only its message group,
/// and only a RETRY or a give-up holds it (a POISON does not, docs/design.md: a failed move of
/// one is reported and its group goes on). Behind a record that holds, nothing may be
/// acknowledged (it would run before it); a record reported without being started, with
/// nothing holding before it, was held for nothing. The second is not judged when the
/// invocation answered inside its deadline margin (the rest may have been skipped for time),
/// nor when the provider refused its configuration (the breaker then answers records RETRY
/// without claiming them).
fn fifo_breaches<'m>(
    d: &Deployment,
    answered: &Answered<'m, '_>,
    answered_in_margin: bool,
) -> Vec<(&'m queue::Stored, &'static str)> {
    let Answered {
        received,
        failed,
        begun,
        refused,
    } = *answered;
    let batch_scope = d.batch_scope();
    let queue = d.queue.lock();
    let moved_as = |m: &queue::Stored| {
        queue
            .dlq
            .iter()
            .find(|dead| dead.source.as_ref() == Some(&(m.id.clone(), m.receive_count)))
            .map(|dead| dead.reason.as_str())
    };
    let mut breaches = Vec::new();
    // The groups with a record that holds the rest, so far in the batch.
    let mut held: HashSet<Option<&str>> = HashSet::new();
    for m in received {
        let group = if batch_scope {
            None
        } else {
            m.group.as_deref()
        };
        let reported = failed.contains(m.id.as_str());
        let holding = held.contains(&group);
        if holding && !reported {
            breaches.push((m, "acknowledged behind a held FIFO record"));
        }
        let started = begun.contains(&m.order_id) || d.payloads[m.payload].poison;
        if reported && !started && !holding && !answered_in_margin && !refused {
            breaches.push((m, "held behind FIFO records that did not hold it"));
        }
        let holds = if batch_scope {
            reported || moved_as(m).is_some()
        } else {
            let failed_move = queue.failed_move(m.payload, m.receive_count, &m.id);
            moved_as(m) == Some(GIVEN_UP)
                || (reported && failed_move.is_none_or(|reason| reason == GIVEN_UP))
        };
        if holds {
            held.insert(group);
        }
    }
    breaches
}

/// The records of a Lambda batch that the function started at the give-up's receive, as its
/// container may have known it (`learned`: the highest `maxReceiveCount` the queue told it
/// recently enough to still go by, [`world::Told::known`]), and reported
/// for another receive without trying to move them. Whatever its handler answered, such a
/// record should have left: an ACK is deleted, a POISON moved, and a RETRY (a panic, an
/// abandoned record) given up and moved as `retries_exhausted`; only a move the world's SQS
/// failed brings it back (invariant 10, which workers judge at the handler's door). Not judged:
/// a body that is not an order (its move is the only evidence, and a failed one is allowed), an
/// order twice in the batch (the claim asked for may be the other message's), a deployment
/// that does not move POISON itself.
fn kept_at_give_up<'m>(
    d: &Deployment,
    answered: &Answered<'m, '_>,
    learned: u32,
) -> Vec<&'m queue::Stored> {
    let Answered {
        received,
        failed,
        begun,
        ..
    } = *answered;
    if learned < 2 || !d.config.move_poison {
        return Vec::new();
    }
    let queue = d.queue.lock();
    received
        .iter()
        .filter(|m| {
            m.receive_count >= learned - 1
                && failed.contains(m.id.as_str())
                && begun.contains(&m.order_id)
                && !d.payloads[m.payload].poison
                && received.iter().filter(|r| r.order_id == m.order_id).count() == 1
                && !queue.moves_tried.contains(&(m.payload, m.receive_count))
        })
        .collect()
}

/// The reason of a record that gave up at the receive before the queue's redrive (the
/// design's word, docs/operations.md).
const GIVEN_UP: &str = "retries_exhausted";

/// How many of a crashed invocation's records were at their last receive, charged, and not
/// completed: the edge where SQS's redrive, not the function, moves a charged order to the DLQ,
/// and a redrive of it must look the charge up.
fn charged_not_completed_at_last_receive(d: &Deployment, received: &[queue::Stored]) -> usize {
    let last = d.queue.lock().max_receive;
    let ledger = d.provider.ledger();
    let world = d.world.lock();
    received
        .iter()
        .filter(|m| {
            m.receive_count >= last
                && ledger.charges.contains_key(&m.order_id)
                && !world.fence.is_completed(&m.order_id)
        })
        .count()
}

/// Runs the pollers until the producer is done and the queue is empty.
async fn drain(d: &Rc<Deployment>) {
    let tasks: Vec<_> = (0..d.settings.containers)
        .map(|index| match d.settings.workers {
            None => tokio::task::spawn_local(poll(index, d.clone())),
            Some(_) => tokio::task::spawn_local(worker::work(index, d.clone())),
        })
        .collect();
    for task in tasks {
        drop(task.await);
    }
}

/// One poller of the event source mapping and the container it invokes: receives a batch,
/// invokes the real function, deletes what the response does not report. A crash drops the
/// invocation wherever it is and a new container takes over; so does Lambda's kill at the
/// deadline, which also breaks the rule that every response leaves before it.
async fn poll(index: usize, d: Rc<Deployment>) {
    let truth = SimClock {
        start: d.start,
        offset_ms: 0,
    };
    let (mut app, mut clock, mut holder) = d.cold_start().await;
    // When SQS took this container's latest probe, simulated ms (a new container starts over).
    let mut last_probe_ms: Option<u64> = None;
    // The invocations of the current container, counted for the world's record of holders.
    let mut invocation_seq = 0;
    let kind = match d.settings.queue {
        QueueShape::Standard => QueueKind::Standard,
        QueueShape::Fifo { .. } => QueueKind::Fifo,
    };
    let batch_size = match kind {
        QueueKind::Fifo => d.shipped.fifo_batch_size,
        _ => d.shipped.batch_size,
    };
    let timeout_ms = d.shipped.timeout_ms;
    let schedule = schedule(&d);
    loop {
        let mut received = {
            let mut queue = d.queue.lock();
            if queue.is_empty() && *d.producer_done.borrow() {
                return;
            }
            queue.receive(batch_size, truth.sim_ms(), &d.world)
        };
        if received.is_empty() {
            // Long polling: the receive returns when a message is sent or becomes visible (a
            // FIFO group may stay locked past that: then it polls again).
            let now_ms = truth.sim_ms();
            let next_ms = d.queue.lock().next_visible_ms(now_ms);
            let wait_ms = next_ms.map_or(LONG_POLL_MS, |at| (at - now_ms).clamp(1, LONG_POLL_MS));
            tokio::select! {
                biased;
                () = d.queue.sent().notified() => {}
                () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            }
            continue;
        }
        // A standard mapping's batching window: it keeps receiving until the batch is full or
        // the window has passed since the first record (which waits, invisible, meanwhile).
        if kind == QueueKind::Standard {
            let window_ends = truth.sim_ms() + d.shipped.batching_window_ms;
            while received.len() < batch_size && truth.sim_ms() < window_ends {
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                let more =
                    d.queue
                        .lock()
                        .receive(batch_size - received.len(), truth.sim_ms(), &d.world);
                received.extend(more);
            }
        }
        d.world.log(&format!(
            "c{index} receives {}",
            received
                .iter()
                .map(|m| m.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ));
        for m in &received {
            d.world.tell(&m.order_id, || {
                format!(
                    "{}: received by c{index} (receive {})",
                    m.id, m.receive_count
                )
            });
        }
        let messages: Vec<Message<'_>> = received
            .iter()
            .map(|m| {
                Message::new(&m.id, &m.body)
                    .with_receive_count(Some(m.receive_count))
                    .with_first_receive_ms(m.first_receive_ms)
                    .with_group_id(m.group.as_deref())
                    .with_receipt_handle(Some(&m.receipt))
                    .with_attributes(MessageAttributes::Raw(&m.event_attributes))
            })
            .collect();
        let batch = Batch {
            messages,
            kind,
            queue_arn: Some(sqs::arns(kind == QueueKind::Fifo).0),
        };
        let deadline_ms = clock.now_ms() + timeout_ms;
        // A crash at a random point of the invocation (most take a second or two): the future
        // is dropped wherever it is. Lambda itself stops it at the deadline.
        let crash_after = d
            .world
            .chance(d.settings.crash_rate)
            .then(|| d.world.between(0..=2_000));
        let limit = crash_after.unwrap_or(timeout_ms).min(timeout_ms);
        *d.invocations.borrow_mut() += 1;
        invocation_seq += 1;
        // The world's own give-up receive (one before the queue's `maxReceiveCount`).
        let give_up = d.queue.lock().give_up_receive();
        let at_give_up = received
            .iter()
            .filter(|m| m.receive_count >= give_up)
            .map(|m| m.order_id.clone())
            .collect();
        let started_ms = clock.now_ms();
        let started_truth_ms = truth.sim_ms();
        holder.set(
            Some(world::Invocation {
                seq: invocation_seq,
                started_ms,
                deadline_ms,
            }),
            at_give_up,
        );
        let caller = world::HolderId {
            container: holder.container,
            invocation: invocation_seq,
        };
        let answered = world::CALLER
            .scope(
                caller,
                tokio::time::timeout(
                    Duration::from_millis(limit),
                    app.handle_batch(&batch, deadline_ms),
                ),
            )
            .await;
        holder.set(None, std::collections::HashSet::new());
        // Which records the invocation started, by the world's record (taken whatever its end).
        let begun = d.world.lock().begun.remove(&caller).unwrap_or_default();
        let answered_ms = clock.now_ms();
        let (response, report) = match answered {
            Err(_) => {
                if crash_after.is_some_and(|ms| ms < timeout_ms) {
                    let cut = charged_not_completed_at_last_receive(&d, &received);
                    d.world.count(|f| {
                        f.crashes += 1;
                        f.crashes_between_charge_and_completion_at_last_receive += cut;
                    });
                    d.world.log(&format!("c{index} crashes"));
                } else {
                    for m in &received {
                        d.violations.borrow_mut().push(Violation {
                            rule: "answered after its deadline",
                            order_id: m.order_id.clone(),
                            detail: format!(
                                "c{index}'s invocation with {} ran past its {timeout_ms} ms \
                                 timeout: Lambda killed it and the whole batch comes back",
                                m.id
                            ),
                        });
                    }
                }
                drop(batch);
                (app, clock, holder) = d.cold_start().await;
                last_probe_ms = None;
                invocation_seq = 0;
                continue;
            }
            // The function refused its own batch (a malformed event, or a response that failed
            // its check): the simulator only sends well-formed batches, so this is a bug.
            Ok(Err(error)) => {
                for m in &received {
                    d.violations.borrow_mut().push(Violation {
                        rule: "the batch was refused",
                        order_id: m.order_id.clone(),
                        detail: format!("c{index}: {error}"),
                    });
                }
                continue;
            }
            Ok(Ok(answer)) => answer,
        };
        let failed: HashSet<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        let answered_in_margin =
            answered_ms.saturating_add(schedule.deadline_margin_ms) >= deadline_ms;
        let answered = Answered {
            received: &received,
            failed: &failed,
            begun: &begun,
            refused: d.provider.ledger().refused_callers.contains(&caller),
        };
        if !answered_in_margin {
            let learned = holder.learned.known(truth.sim_ms());
            for m in kept_at_give_up(&d, &answered, learned) {
                d.violations.borrow_mut().push(Violation {
                    rule: "kept past its give-up",
                    order_id: m.order_id.clone(),
                    detail: format!(
                        "{} was started at receive {}, at or past the give-up's ({}) as \
                         c{index} knew it (maxReceiveCount {learned}), and reported for another \
                         receive with no move of it tried",
                        m.id,
                        m.receive_count,
                        learned - 1
                    ),
                });
            }
        }
        if kind == QueueKind::Fifo {
            for (m, rule) in fifo_breaches(&d, &answered, answered_in_margin) {
                d.violations.borrow_mut().push(Violation {
                    rule,
                    order_id: m.order_id.clone(),
                    detail: format!("{} in c{index}'s batch of {}", m.id, received.len()),
                });
            }
        }
        let mut queue = d.queue.lock();
        for (m, status) in received.iter().zip(&report.statuses) {
            let reason = match status {
                RecordStatus::Handled(v) | RecordStatus::Moved(v) => v.reason,
                RecordStatus::SkippedDeadline => "deadline",
                RecordStatus::SkippedStopping => "shutting_down",
                RecordStatus::SkippedAfter { .. } => "after_failure",
                _ => "unknown_status",
            };
            *d.decisions.borrow_mut().entry(reason).or_default() += 1;
            if let RecordStatus::Handled(v) | RecordStatus::Moved(v) = status
                && !check::DESIGN_REASONS.contains(&v.reason)
            {
                d.violations.borrow_mut().push(Violation {
                    rule: "a decision under a name the design does not give",
                    order_id: m.order_id.clone(),
                    detail: format!("{} was decided {:?} {:?}", m.id, v.outcome, v.reason),
                });
            }
            d.world.tell(&m.order_id, || {
                format!("{}: c{index} decides {reason}", m.id)
            });
            if failed.contains(m.id.as_str()) {
                continue;
            }
            // The mapping deletes every record the response does not report: only an ACK, or
            // a POISON the function moved to the DLQ, may be.
            let allowed = status.is_ack() || matches!(status, RecordStatus::Moved(_));
            if !allowed {
                d.violations.borrow_mut().push(Violation {
                    rule: "deleted without its decision",
                    order_id: m.order_id.clone(),
                    detail: format!("{} was deleted after {reason}, {status:?}", m.id),
                });
            }
            if queue.delete(&m.receipt, reason) {
                d.world.tell(&m.order_id, || format!("{}: deleted", m.id));
            }
        }
        if d.config.backoff.is_some() {
            // What the world knows of later times the function may honour, for this invocation:
            // the provider refused our configuration (any record may stay away 15 minutes), and
            // the invocation answered in its last margin (a record may have been abandoned, and
            // its own claim held until the lease margin after the deadline).
            let refused = d.provider.ledger().refused_callers.contains(&caller);
            let may_have_abandoned =
                answered_ms.saturating_add(schedule.deadline_margin_ms) >= deadline_ms;
            for (m, status) in received.iter().zip(&report.statuses) {
                let current = queue
                    .current(&m.receipt)
                    .and_then(|s| Some((s.visibility_set_s?, s.visible_at_ms)));
                let (RecordStatus::Handled(verdict), Some((set_s, visible_at_ms))) =
                    (status, current)
                else {
                    continue;
                };
                if verdict.outcome == sqs_batch::processor::Decision::Retry
                    && let Some(stored) = queue.current(&m.receipt)
                {
                    stored.backed_off = true;
                }
                if let Some(short) = short_visibility(&schedule, verdict, m, set_s, &clock, &truth)
                {
                    // A probe: shorter than the schedule, at the probe interval, paid for by
                    // the record's time away (judged in the world's clock), and at most one per
                    // container per interval (judged by when SQS took the change).
                    let set_at_ms = visible_at_ms.saturating_sub(set_s * 1_000);
                    let unpaid =
                        schedule.early_return(m.receive_count, m.first_receive_ms, visible_at_ms);
                    let too_soon = last_probe_ms
                        .filter(|last| set_at_ms < last + schedule.probe_s * 1_000)
                        .map(|last| {
                            format!("{} ms after this container's last probe", set_at_ms - last)
                        });
                    let (rule, why) = match (set_s == schedule.probe_s, unpaid, too_soon) {
                        (true, None, None) => {
                            last_probe_ms = Some(set_at_ms);
                            d.world.count(|f| f.probes += 1);
                            continue;
                        }
                        (true, Some(unpaid), _) => ("a probe the record had not paid for", unpaid),
                        (true, None, Some(soon)) => ("probed more often than its interval", soon),
                        (false, ..) => ("a visibility shorter than its schedule", short),
                    };
                    d.violations.borrow_mut().push(Violation {
                        rule,
                        order_id: m.order_id.clone(),
                        detail: format!("{}: {why}", m.id),
                    });
                }
                // The latest time, in ms after the invocation began, that the world knows the
                // function may have been told to wait for: the provider's `Retry-After` to this
                // invocation, another holder's lease (as it may last by the design's rule, in
                // the holder's clock, which is how the function reads it), its own claim's
                // margin when it may have abandoned the record or met itself, the 15 minutes of
                // a refusal.
                let latest_answer =
                    d.provider
                        .ledger()
                        .come_back
                        .get(&m.order_id)
                        .and_then(|answers| {
                            answers
                                .iter()
                                .filter(|answer| answer.caller == Some(caller))
                                .max_by_key(|answer| answer.not_before_ms)
                                .copied()
                        });
                let mut later_ms = latest_answer.map_or(0, |answer| {
                    answer.not_before_ms.saturating_sub(started_truth_ms)
                });
                if refused {
                    later_ms = later_ms.max(provider::CONFIGURATION_RETRY_MS);
                }
                // A record abandoned at the deadline is kept until its own claim can have ended,
                // claimed or not; a record that met its own batch's claim on the order, until
                // that claim ends.
                let own_end_ms = deadline_ms.saturating_add(holder.margin_ms);
                if may_have_abandoned {
                    later_ms = later_ms.max(own_end_ms.saturating_sub(started_ms));
                }
                let met_itself = received.iter().filter(|r| r.order_id == m.order_id).count() > 1;
                for &(granted_to, may_end_ms) in d.world.lock().fence.grants(&m.order_id) {
                    let end_ms = if granted_to != Some(caller) {
                        may_end_ms
                    } else if met_itself {
                        own_end_ms
                    } else {
                        continue;
                    };
                    later_ms = later_ms.max(end_ms.saturating_sub(started_ms));
                }
                if let Some(long) = long_visibility(&schedule, verdict, m, set_s, later_ms) {
                    d.violations.borrow_mut().push(Violation {
                        rule: "a visibility longer than its schedule",
                        order_id: m.order_id.clone(),
                        detail: format!("{}: {long}", m.id),
                    });
                }
                // The provider told this container's invocation when the record's charge may
                // come again (the world's own record of who called; the batch's only record of
                // the order): a refusal of our configuration, which a person fixes (15 minutes,
                // docs/design.md), or a 409's `Retry-After`. The record stays away that long, as
                // far as SQS's 12 hours from the receive allow.
                // Two records of one order in the batch (a duplicate delivery): the answer may be
                // the other's.
                let come_back = latest_answer.filter(|_| !met_itself);
                let visible_at_ms = queue
                    .current(&m.receipt)
                    .filter(|s| s.visibility_set_s.is_some())
                    .map(|s| s.visible_at_ms);
                if let (RecordStatus::Handled(verdict), Some(visible_at_ms), Some(come_back)) =
                    (status, visible_at_ms, come_back)
                    && verdict.outcome == sqs_batch::processor::Decision::Retry
                    // A record the processor abandoned at the deadline: its handler never
                    // finished with the answer, and the abandoned record's own rule (back once
                    // its claim can have ended) is the one that holds (seen in the million-order
                    // run: a 409, then the deadline).
                    && verdict.reason != sqs_batch::processor::ABANDONED
                {
                    // Less a second: SQS takes whole seconds.
                    let required_ms = come_back
                        .not_before_ms
                        .saturating_sub(1_000)
                        .min(m.received_ms + queue::MAX_VISIBILITY_MS);
                    if visible_at_ms < required_ms {
                        d.violations.borrow_mut().push(Violation {
                            rule: "back before the provider said it may",
                            order_id: m.order_id.clone(),
                            detail: format!(
                                "{}: RETRY {} after a {}, visible again {} s before the time it \
                                 named",
                                m.id,
                                verdict.reason,
                                come_back.status,
                                (required_ms - visible_at_ms).div_ceil(1_000)
                            ),
                        });
                    }
                }
            }
            // Records backed off earlier that this invocation brought back sooner (a wake):
            // each must have been away long enough that it reaches the DLQ no sooner than on
            // the schedule.
            let woken = std::mem::take(&mut queue.early_returns);
            d.world
                .count(|f| f.largest_wake = f.largest_wake.max(woken.len()));
            for early in woken {
                d.world.count(|f| f.early_returns += 1);
                if let Some(why) = schedule.early_return(
                    early.receive_count,
                    early.first_receive_ms,
                    early.back_ms,
                ) {
                    d.violations.borrow_mut().push(Violation {
                        rule: "woken before the record had paid for it",
                        order_id: early.order_id,
                        detail: format!("{}: {why}", early.id),
                    });
                }
            }
        }
    }
}

/// The retry schedule as the world reads the deployment's settings, with the design's defaults.
fn schedule(d: &Deployment) -> check::Schedule {
    check::Schedule {
        base_s: d.setting_ms("SQS_BATCH_BACKOFF_BASE_SECONDS", 5),
        cap_s: d.setting_ms("SQS_BATCH_BACKOFF_CAP_SECONDS", 900),
        deadline_margin_ms: d.setting_ms("SQS_BATCH_DEADLINE_MARGIN_MS", 5_000),
        probe_s: d.setting_ms("SQS_BATCH_PROBE_SECONDS", 30),
    }
}

/// Why the visibility `set_s` the function gave a RETRY is too long, if it is: at most its
/// receive's bound in the schedule, or the latest later time the world knows it may honour
/// (`later_ms` after its invocation began) plus the jitter.
fn long_visibility(
    schedule: &check::Schedule,
    verdict: &sqs_batch::Verdict,
    m: &queue::Stored,
    set_s: u64,
    later_ms: u64,
) -> Option<String> {
    if verdict.outcome != sqs_batch::processor::Decision::Retry {
        return None;
    }
    let bound_s = schedule.bound_s(m.receive_count);
    let later_s = later_ms.div_ceil(1_000).saturating_add(schedule.base_s);
    (set_s > bound_s.max(later_s)).then(|| {
        format!(
            "RETRY {} at receive {} visible again in {set_s} s; the schedule's bound is {bound_s} \
             s and the latest time the world knows it was given, with its jitter, {later_s} s",
            verdict.reason, m.receive_count
        )
    })
}

/// Why the visibility `set_s` the function gave a RETRY is too short, if it is: every retry
/// stays away at least its receive's floor in the schedule, and at least until the verdict's own
/// retry time (a lease that ends later), as far as SQS's 12 hours from the receive allow.
fn short_visibility(
    schedule: &check::Schedule,
    verdict: &sqs_batch::Verdict,
    m: &queue::Stored,
    set_s: u64,
    clock: &SimClock,
    truth: &SimClock,
) -> Option<String> {
    if verdict.outcome != sqs_batch::processor::Decision::Retry {
        return None;
    }
    let floor_s = schedule.bound_s(m.receive_count) / 2;
    // In the container's own clock, as the function reckoned it (floored: the call came
    // earlier than this check).
    let retry_s = verdict
        .retry_after_ms
        .map_or(0, |at| at.saturating_sub(clock.now_ms()) / 1_000);
    let left_s = (m.received_ms + queue::MAX_VISIBILITY_MS).saturating_sub(truth.sim_ms()) / 1_000;
    let required_s = floor_s.max(retry_s).min(left_s);
    (set_s < required_s).then(|| {
        format!(
            "RETRY {} at receive {} visible again in {set_s} s; the schedule's floor is {floor_s} s \
             and the verdict's retry {retry_s} s",
            verdict.reason, m.receive_count
        )
    })
}
