//! The order handler: what happens to one record, from the event to its decision.
//!
//! Read top to bottom, this module is one record's whole story. The steps before and after the
//! handler live in the libraries; they are told here so that nothing needs looking up elsewhere.
//!
//! 1. **Started, or not.** `sqs_batch`'s processor starts the record unless the invocation's
//!    remaining time is below `SQS_BATCH_DEADLINE_MARGIN_MS` (then RETRY `deadline`, not started). Standard
//!    queues run records concurrently (`SQS_BATCH_MAX_CONCURRENCY`); FIFO records run in order, and a record
//!    behind a failure in its group (or batch) is RETRY `after_failure`, not started. A started
//!    record that panics is RETRY `panic`; one still running when half the margin is left is
//!    dropped and RETRY `abandoned` (its claim stays STARTED until the lease ends, and a charge
//!    that did go out carries the key the redelivery sends again).
//! 2. **The claim check** (`claim_check::ClaimCheck`, which wraps this handler): a body that is
//!    a pointer to S3 is replaced by the object it names. A pointer that can never load is
//!    POISON, a store outage RETRY; every other decision is this handler's.
//! 3. **Decoding** ([`crate::order::decode_order`]): an SNS envelope is unwrapped once; a body
//!    that is not an order is POISON `invalid_body`, keyed by the id it names if it names one.
//!    From here on every log line carries the order id.
//! 4. **The breaker** ([`ConfigBreaker`]): after the provider refused our configuration three
//!    times in a row this invocation, the rest are RETRY `payment_circuit_open`, not claimed.
//! 5. **The guard** (`idempotency::guard::run`, with `ChargeWork`): the order id is claimed in
//!    the store with a fenced lease (a duplicate of finished work is ACK `duplicate`, a live
//!    lease elsewhere RETRY `busy`, another payload under the id POISON `conflict`, a recorded
//!    decline POISON `payment_rejected`). When an earlier attempt may have charged, the
//!    provider's look-up decides before any second charge (`reconciled`, `payment_pending`,
//!    `needs_reconciliation`). Then the charge, with the order id as the provider's
//!    idempotency key, and the outcome recorded: ACK `charged`; a failure per what it proves
//!    ([`PaymentError`]).
//! 6. **The verdict** (`OrderDecision::outcome`, `OrderDecision::reason`, `verdict`): ACK,
//!    RETRY or POISON with a stable reason, the order id as the key, the lease token as the
//!    correlation id, a detail for people, and when to retry (a configuration error waits
//!    [`CONFIGURATION_RETRY_AFTER_MS`], a busy key until its lease ends, an in-flight charge as
//!    the provider asked).
//! 7. **After the batch** (`sqs_batch::process_batch`): a RETRY at the receive before the
//!    queue's redrive becomes POISON `retries_exhausted`; POISON records are moved to the DLQ
//!    with their reason when `SQS_BATCH_MOVE_POISON_TO_DLQ` is on; reported records get the visibility
//!    backoff; the response lists exactly the records to retry (FIFO: from the first failure on)
//!    and is checked before it is returned.

use std::sync::atomic::{AtomicU32, Ordering};

use tracing::Instrument;

use idempotency::guard::{
    self, Claim, Failed, Found, GuardPolicy, Guarded, GuardedWork, Unsettled,
};
use idempotency::{StoreError, guard::EffectStore, store::LeaseToken};
use lambda_kit::{Clock, error_chain};
use sqs_batch::processor::{Decision, Health, Invocation};
use sqs_batch::{Message, RecordHandler, Verdict};

use crate::metrics::{CallLatency, Latency};
use crate::money::Currency;
use crate::order::{Order, decode_order, order_id_hint};
use crate::payment::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway};
use crate::store::Timed;

/// The order handler as the batch processor drives it (steps 3 to 6).
#[derive(Debug)]
pub struct OrderHandler<S, P, C> {
    ports: Ports<S, P, C>,
    /// The currency of an order that names none (`DEFAULT_CURRENCY`).
    default_currency: Currency,
}

/// What an order needs from the outside world.
#[derive(Debug)]
pub struct Ports<S, P, C> {
    /// The idempotency store.
    pub store: S,
    /// The payment provider.
    pub gateway: P,
    /// Now, for leases and the key window.
    pub clock: C,
    /// Leases, and how long the provider remembers a key.
    pub guard: GuardPolicy,
    /// Latency of the store and payment calls, for the metrics.
    pub calls: CallLatency,
    /// Stops calling a provider that refuses our configuration, per invocation.
    pub breaker: ConfigBreaker,
}

impl<S, P, C> OrderHandler<S, P, C> {
    /// The handler over its ports; orders without a currency are in `default_currency`.
    pub fn new(ports: Ports<S, P, C>, default_currency: Currency) -> Self {
        Self {
            ports,
            default_currency,
        }
    }

    /// Its ports.
    pub fn ports(&self) -> &Ports<S, P, C> {
        &self.ports
    }
}

impl<S, P, C> RecordHandler for OrderHandler<S, P, C>
where
    S: EffectStore,
    P: PaymentGateway,
    C: Clock,
{
    fn handle(
        &self,
        message: &Message<'_>,
        context: Invocation,
    ) -> impl Future<Output = Verdict> + Send {
        // Only the deadline goes into the record's future: the invocation's ids the context
        // also carries are not read here, and every byte of that future is moved around.
        self.handle_order_record(message, context.deadline_ms)
    }

    fn record_span(&self, message: &Message<'_>) -> tracing::Span {
        match order_id_hint(message.body) {
            Some(order_id) => order_span(&order_id),
            None => tracing::Span::none(),
        }
    }

    /// The order id the body names, for a record the processor decides itself (a panic, an
    /// abandoned record): its DLQ copy names the order as the handler's own verdicts do.
    fn record_key(&self, message: &Message<'_>) -> Option<String> {
        order_id_hint(message.body)
    }
}

impl<S, P, C> OrderHandler<S, P, C>
where
    S: EffectStore,
    P: PaymentGateway,
    C: Clock,
{
    /// Steps 3 to 6 for one record.
    async fn handle_order_record(&self, message: &Message<'_>, deadline_ms: u64) -> Verdict {
        // Step 3: decoding.
        let body = message.body;
        let order = match decode_order(body, self.default_currency) {
            Ok(order) => order,
            Err(e) => {
                let verdict = Verdict::poison("invalid_body")
                    .with_detail(format!("{e} (body length {})", body.len()));
                // An invalid order that names its id can still be found by it.
                return match order_id_hint(body) {
                    Some(order_id) => verdict.with_key(order_id),
                    None => verdict,
                };
            }
        };
        // The record's trace span (when traces are on) names the order, on every outcome.
        tracing::Span::current().record("key", &*order.order_id);
        // Every line written while the order is handled (the store's, the gateway's) carries
        // its id and the message's.
        let span = tracing::info_span!(
            "order",
            order_id = &*order.order_id,
            message_id = message.message_id
        );
        // Steps 4 and 5: the breaker, then the guard.
        let (decision, lease) = handle_order(&order, &self.ports, message, deadline_ms)
            .instrument(span)
            .await;
        // Step 6: the verdict.
        verdict(decision, order, lease, self.ports.clock.now_ms())
    }
}

/// The span of the processor's lines about one record (which name its `message_id`
/// themselves): `order_id` on each of them.
fn order_span(order_id: &str) -> tracing::Span {
    tracing::info_span!("order", order_id)
}

/// Steps 4 and 5: unless the breaker is open, claims the order, reconciles an earlier attempt if
/// one may have charged, charges with the order id as the idempotency key, and records the
/// outcome (see `idempotency::guard`).
pub(crate) async fn handle_order<S, P, C>(
    order: &Order<'_>,
    ports: &Ports<S, P, C>,
    message: &Message<'_>,
    deadline_ms: u64,
) -> (OrderDecision, Option<LeaseToken>)
where
    S: EffectStore,
    P: PaymentGateway,
    C: Clock,
{
    if ports.breaker.is_open() {
        return (OrderDecision::CircuitOpen, None);
    }
    let key: &str = &order.order_id;
    let store = Timed::new(&ports.store, &ports.calls.store);
    let work = ChargeWork {
        gateway: &ports.gateway,
        order,
        latency: &ports.calls.payment,
    };
    // A copy redriven from the DLQ carries its history: if its item may have expired since,
    // the provider is asked before any charge (shared/DESIGN.md section 6).
    let earlier_attempt_ms = sqs_batch::dead_letter::earlier_attempt_ms(message);
    let claim = Claim::new(key, order.fingerprint(), message.message_id, deadline_ms)
        .with_earlier_attempt_ms(earlier_attempt_ms);
    let run = guard::run(&store, &ports.clock, &ports.guard, &claim, &work).await;
    // Only answers from the provider move the breaker; store-only outcomes say nothing of it.
    let provider_answered = matches!(
        run.outcome,
        Guarded::Performed(())
            | Guarded::Reconciled
            | Guarded::Pending
            | Guarded::Failed { .. }
            | Guarded::NeedsReconciliation { .. }
    );
    let decision = OrderDecision::Guarded(run.outcome);
    if provider_answered {
        ports.breaker.record(decision.is_endpoint_wide());
    }
    (decision, run.lease)
}

/// The charge, as the idempotency guard drives it: the order id is the provider's
/// idempotency key, and its lookup tells whether an earlier attempt charged.
struct ChargeWork<'a, P> {
    gateway: &'a P,
    order: &'a Order<'a>,
    latency: &'a Latency,
}

impl<P> ChargeWork<'_, P> {
    fn request(&self) -> ChargeRequest<'_> {
        let key: &str = &self.order.order_id;
        ChargeRequest {
            order_id: key,
            amount: self.order.amount,
            idempotency_key: key,
        }
    }
}

impl<P: PaymentGateway> GuardedWork for ChargeWork<'_, P> {
    type Output = ();
    type Error = PaymentError;

    async fn look_up(&self) -> Result<Found, PaymentError> {
        let request = self.request();
        let look_up = self.latency.time(self.gateway.lookup(&request));
        let span = tracing::debug_span!("payment.look_up", error = tracing::field::Empty);
        Ok(match crate::telemetry::traced(span, look_up).await? {
            ChargeStatus::Succeeded => Found::Happened,
            // A definite failure: the same key may be charged again at any age.
            ChargeStatus::Failed => Found::NotHappened,
            // A decline: final, recorded, never sent again.
            ChargeStatus::Declined => Found::Refused,
            // Never seen, or forgotten: the guard weighs it against the key window.
            ChargeStatus::Unknown => Found::Unknown,
            ChargeStatus::Pending => Found::Pending,
            // Another amount or currency under the order's key: not this order's charge.
            ChargeStatus::Conflict => Found::Conflict,
            // An answer not understood settles nothing and charges nothing.
            ChargeStatus::Unclear => Found::Unclear,
        })
    }

    /// A decline is final: recorded in the item, so no redelivery or redrive of the order is
    /// sent to the provider again (card networks penalise retried declines) until a person
    /// clears it (`orders-ops clear-decline`).
    fn refusal(&self, error: &PaymentError) -> Option<String> {
        matches!(error, PaymentError::Declined { .. }).then(|| error.to_string())
    }

    async fn perform(&self) -> Result<(), Failed<PaymentError>> {
        let request = self.request();
        let span = tracing::debug_span!("payment.charge", error = tracing::field::Empty);
        crate::telemetry::traced(span, self.latency.time(self.gateway.charge(&request)))
            .await
            .map_err(|error| Failed {
                effect: error.effect(),
                error,
            })
    }
}

/// The business decision for one order: the guard's outcome, or not asked at all.
#[derive(Debug)]
pub(crate) enum OrderDecision {
    /// The provider refused our configuration several times in a row this invocation: not
    /// called, not claimed.
    CircuitOpen,
    /// What the idempotency guard decided (claim, look-up, charge, settle).
    Guarded(Guarded<(), PaymentError>),
}

impl OrderDecision {
    /// ACK, RETRY or POISON.
    pub(crate) fn outcome(&self) -> Decision {
        let Self::Guarded(outcome) = self else {
            return Decision::Retry;
        };
        match outcome {
            Guarded::Performed(())
            | Guarded::Reconciled
            | Guarded::Duplicate
            | Guarded::Replayed(()) => Decision::Ack,
            // Past the key window a provider that no longer knows the key leaves only a person
            // to settle it: to the DLQ with its reason, at once (a FIFO group goes on).
            Guarded::Conflict
            | Guarded::Rejected
            | Guarded::Failed {
                error: PaymentError::Declined { .. } | PaymentError::KeyReused { .. },
                ..
            }
            | Guarded::NeedsReconciliation {
                why: Unsettled::NotFound | Unsettled::Unclear,
                ..
            } => Decision::Poison,
            // `Busy`, `Pending`, `Store`, `LeaseLost`, every other `Failed` and a look-up that
            // failed past the key window: another receive may settle them. So does an outcome a
            // later idempotency release adds: kept until someone names it, never acknowledged.
            // (One arm for all: a named RETRY arm beside the wildcard could be deleted unseen.)
            _ => Decision::Retry,
        }
    }

    /// A short, stable code for logs and metrics.
    pub(crate) fn reason(&self) -> &'static str {
        let Self::Guarded(outcome) = self else {
            return "payment_circuit_open";
        };
        match outcome {
            Guarded::Performed(()) => "charged",
            Guarded::Reconciled => "reconciled",
            Guarded::Duplicate | Guarded::Replayed(()) => "duplicate",
            Guarded::Busy { .. } => "busy",
            Guarded::Conflict => "conflict",
            Guarded::Rejected => "payment_rejected",
            Guarded::Failed { error, .. } => match error {
                PaymentError::NotSent { .. } => "payment_not_sent",
                PaymentError::Ambiguous { .. } => "payment_ambiguous",
                PaymentError::InFlight { .. } => "payment_in_flight",
                PaymentError::Declined { .. } => "payment_rejected",
                PaymentError::KeyReused { .. } => "payment_conflict",
                PaymentError::Misconfigured { .. } => "payment_config",
                PaymentError::Failed { .. } => "payment_failed",
                PaymentError::Refused { .. } => "payment_refused",
            },
            Guarded::Pending => "payment_pending",
            Guarded::NeedsReconciliation { .. } => "needs_reconciliation",
            Guarded::Store(_) => "store_error",
            Guarded::LeaseLost => "lease_lost",
            _ => "unknown_outcome",
        }
    }

    /// The provider's error behind this decision, if any (a failed charge, or a look-up that
    /// failed past the key window).
    fn payment_error(&self) -> Option<&PaymentError> {
        match self {
            Self::Guarded(
                Guarded::Failed { error, .. }
                | Guarded::NeedsReconciliation {
                    why: Unsettled::LookUpFailed(error),
                    ..
                },
            ) => Some(error),
            _ => None,
        }
    }

    /// Whether the provider refused our configuration or our request (or we stopped asking
    /// because it did): retried slowly, since a deployment fixes it, not the message.
    pub(crate) fn is_configuration_error(&self) -> bool {
        matches!(self, Self::CircuitOpen)
            || self
                .payment_error()
                .is_some_and(PaymentError::is_configuration)
    }

    /// What this order found of the dependencies every order needs, for the recovery after an
    /// outage (`sqs_batch::recovery`): the table unreachable, or the provider not answering
    /// (nothing sent, no definite answer: a timeout, a reset, 429, 5xx), is down for every
    /// order; a definite answer from the provider means both are up (the order was claimed
    /// first). A duplicate, a busy key or a decline recorded earlier never reached the provider
    /// and says nothing of it.
    pub(crate) fn health(&self) -> Option<Health> {
        let Self::Guarded(outcome) = self else {
            return None;
        };
        match outcome {
            Guarded::Store(StoreError::Unavailable(_)) => Some(Health::Down(STORE)),
            Guarded::Failed {
                error: PaymentError::NotSent { .. } | PaymentError::Ambiguous { .. },
                ..
            }
            | Guarded::NeedsReconciliation {
                why:
                    Unsettled::LookUpFailed(
                        PaymentError::NotSent { .. } | PaymentError::Ambiguous { .. },
                    ),
                ..
            } => Some(Health::Down(PAYMENT)),
            Guarded::Performed(())
            | Guarded::Reconciled
            | Guarded::Pending
            | Guarded::Failed { .. }
            | Guarded::NeedsReconciliation { .. } => Some(Health::Up(PAYMENT)),
            _ => None,
        }
    }

    /// Whether the provider's answer would be the same for every order (a refused key, a
    /// missing route): what the invocation's breaker counts. A 400 about one order's request
    /// is not: one malformed order must not stop the others.
    fn is_endpoint_wide(&self) -> bool {
        self.payment_error()
            .is_some_and(PaymentError::is_endpoint_wide)
    }
}

/// The dependencies' names in a verdict's health.
const STORE: &str = "store";
const PAYMENT: &str = "payment";

/// How long a record refused for our configuration (or not sent because of it) stays away: a key
/// rotation or a URL fix takes a person minutes to hours, and every receive counts towards
/// `maxReceiveCount`; at this pace even a queue of five receives lasts over an hour.
pub const CONFIGURATION_RETRY_AFTER_MS: u64 = 15 * 60 * 1_000;

/// Step 6: the decision as the batch processor reports it, with its key, correlation id, detail
/// and retry time.
fn verdict(
    decision: OrderDecision,
    order: Order<'_>,
    lease: Option<LeaseToken>,
    now_ms: u64,
) -> Verdict {
    let verdict = match decision.outcome() {
        Decision::Ack => {
            let ack = Verdict::ack(decision.reason());
            return match decision.health() {
                Some(health) => ack.with_health(health),
                None => ack,
            };
        }
        Decision::Poison => Verdict::poison(decision.reason()),
        // RETRY, and an outcome a later sqs-batch adds: never deleted unnamed.
        _ => Verdict::retry(decision.reason()),
    };
    let mut verdict = verdict.with_key(order.order_id.into_owned());
    if let Some(health) = decision.health() {
        verdict = verdict.with_health(health);
    }
    // The claim's lease token joins the log line to the table's item (`lease_token`).
    verdict.correlation_id = lease.map(|token| token.to_string());
    if decision.is_configuration_error() {
        verdict = verdict.with_retry_after_ms(now_ms.saturating_add(CONFIGURATION_RETRY_AFTER_MS));
    }
    let outcome = match decision {
        OrderDecision::CircuitOpen => {
            return verdict.with_detail(
                "the provider refused our configuration repeatedly this invocation: not called",
            );
        }
        OrderDecision::Guarded(outcome) => outcome,
    };
    match outcome {
        Guarded::Busy { until_ms } => verdict
            .with_retry_after_ms(until_ms)
            .with_detail(format!("another consumer holds the lease until {until_ms}")),
        Guarded::Failed { error, .. } => {
            let verdict = match error {
                PaymentError::InFlight {
                    retry_after: Some(wait),
                } => verdict.with_retry_after_ms(
                    now_ms.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
                ),
                _ => verdict,
            };
            verdict.with_detail(error_chain(&error))
        }
        Guarded::Pending => verdict.with_detail(
            "an earlier charge under this key is still being processed by the provider",
        ),
        Guarded::NeedsReconciliation {
            why,
            first_attempt_ms,
        } => verdict.with_detail(match why {
            Unsettled::LookUpFailed(error) => format!(
                "an earlier charge may exist (first attempt at {first_attempt_ms}, past the \
                 provider's key window) and the lookup failed, so it was not charged again: {}",
                error_chain(&error)
            ),
            Unsettled::NotFound => format!(
                "an earlier charge may exist (first attempt at {first_attempt_ms}, past the \
                 provider's key window) and the provider's lookup has no charge under the key, \
                 which past the window may only mean it forgot: not charged again; settle it \
                 with the provider (PAYMENT_LOOKUP_DURABLE=true if its lookup keeps every charge)"
            ),
            Unsettled::Unclear => format!(
                "an earlier charge may exist (first attempt at {first_attempt_ms}) and the \
                 provider's lookup answered in a shape or status not understood, which settles \
                 nothing: not charged again; read the charge at the provider"
            ),
            // A reason a later idempotency adds: unsettled all the same.
            _ => format!(
                "an earlier charge may exist (first attempt at {first_attempt_ms}) and the \
                 lookup did not settle it: not charged again; read the charge at the provider"
            ),
        }),
        Guarded::Store(e) => verdict.with_detail(error_chain(&e)),
        Guarded::Conflict => verdict.with_detail(
            "order_id belongs to a different payload (another amount or currency), in the \
             idempotency table or at the provider (its lookup under the key)",
        ),
        Guarded::Rejected => verdict.with_detail(
            "declined before (recorded in the idempotency item): not sent to the provider again; \
             orders-ops clear-decline lets it be charged",
        ),
        Guarded::LeaseLost => verdict.with_detail(
            "charged, but the lease was taken over before completion; the new holder completes it",
        ),
        // The acknowledged outcomes returned above; one this build does not know has its reason
        // (`unknown_outcome`) and nothing more to say.
        _ => verdict,
    }
}

/// Step 4: stops calling the provider for the rest of an invocation once it has refused our
/// configuration (401, 403, 404, ...) [`ConfigBreaker::TRIP_AFTER`] times in a row: the other
/// records would only get the same answer. Reset at the start of every invocation, so a fixed
/// key is tried again at the next one.
#[derive(Debug, Default)]
pub struct ConfigBreaker {
    consecutive: AtomicU32,
}

impl ConfigBreaker {
    /// Refusals in a row that open the breaker.
    pub const TRIP_AFTER: u32 = 3;

    /// Whether the provider is no longer called this invocation.
    pub fn is_open(&self) -> bool {
        self.consecutive.load(Ordering::Relaxed) >= Self::TRIP_AFTER
    }

    /// Counts a provider answer: a configuration error adds one, any other answer starts over.
    fn record(&self, configuration_error: bool) {
        if configuration_error {
            self.consecutive.fetch_add(1, Ordering::Relaxed);
        } else {
            self.consecutive.store(0, Ordering::Relaxed);
        }
    }

    /// Closes it: at the start of every invocation.
    pub fn reset(&self) {
        self.consecutive.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use idempotency::StoreError;
    use idempotency::guard::Effect;

    use super::*;

    /// Every decision the guard can come to, as the batch processor gets it: its outcome, its
    /// reason, the words of its detail (what the log line and a DLQ copy carry) and its retry
    /// time. The end-to-end tests reach most of these through the provider stub; this table holds
    /// each arm to its words, so none can fall silently to the wildcard a later guard needs.
    /// What each decision tells the recovery after an outage: only a dependency that failed for
    /// every order is down, and only a definite answer from the provider says both are up.
    #[test]
    fn a_decision_says_a_dependency_is_down_only_when_every_order_would_meet_it() {
        let not_sent = || PaymentError::NotSent {
            reason: "connection refused".into(),
            source: None,
        };
        let ambiguous = || PaymentError::Ambiguous {
            reason: "503".into(),
            source: None,
        };
        let declined = || PaymentError::Declined {
            status: Some(402),
            reason: "card".into(),
        };
        let failed = |error| Guarded::Failed {
            error,
            effect: Effect::None,
        };
        let lookup = |error| Guarded::NeedsReconciliation {
            why: Unsettled::LookUpFailed(error),
            first_attempt_ms: 7,
        };
        let down = |name| Some(Health::Down(name));
        let up = Some(Health::Up("payment"));
        let cases: Vec<(Guarded<(), PaymentError>, Option<Health>)> = vec![
            (
                Guarded::Store(StoreError::Unavailable("throttled".into())),
                down("store"),
            ),
            (Guarded::Store(StoreError::Malformed("x".into())), None),
            (failed(not_sent()), down("payment")),
            (failed(ambiguous()), down("payment")),
            (lookup(not_sent()), down("payment")),
            (lookup(ambiguous()), down("payment")),
            (Guarded::Performed(()), up),
            (Guarded::Reconciled, up),
            (Guarded::Pending, up),
            (failed(declined()), up),
            (failed(PaymentError::InFlight { retry_after: None }), up),
            (lookup(declined()), up),
            (Guarded::Duplicate, None),
            (Guarded::Replayed(()), None),
            (Guarded::Busy { until_ms: 9 }, None),
            (Guarded::Rejected, None),
            (Guarded::Conflict, None),
            (Guarded::LeaseLost, None),
        ];
        for (outcome, health) in cases {
            let name = format!("{outcome:?}");
            let decision = OrderDecision::Guarded(outcome);
            assert_eq!(decision.health(), health, "{name}");
            let order = Order {
                order_id: "o-1".into(),
                amount: crate::money::Money::parse("10", Currency::EUR).expect("an amount"),
            };
            assert_eq!(
                verdict(decision, order, None, 0).health,
                health,
                "{name}: carried by the verdict"
            );
        }
        assert_eq!(OrderDecision::CircuitOpen.health(), None);
    }

    #[test]
    fn every_decision_has_its_outcome_reason_detail_and_retry_time() {
        const NOW: u64 = 1_767_225_600_000;
        let not_sent = || PaymentError::NotSent {
            reason: "connection refused".into(),
            source: None,
        };
        let failed = |error, effect| Guarded::Failed { error, effect };
        let reconcile = |why| Guarded::NeedsReconciliation {
            why,
            first_attempt_ms: 7,
        };
        let config_wait = Some(NOW + CONFIGURATION_RETRY_AFTER_MS);
        type Case = (
            Guarded<(), PaymentError>,
            (Decision, &'static str),
            Option<&'static str>,
            Option<u64>,
        );
        let cases: Vec<Case> = vec![
            (
                Guarded::Performed(()),
                (Decision::Ack, "charged"),
                None,
                None,
            ),
            (
                Guarded::Reconciled,
                (Decision::Ack, "reconciled"),
                None,
                None,
            ),
            (Guarded::Duplicate, (Decision::Ack, "duplicate"), None, None),
            (
                Guarded::Replayed(()),
                (Decision::Ack, "duplicate"),
                None,
                None,
            ),
            (
                Guarded::Busy { until_ms: NOW + 9 },
                (Decision::Retry, "busy"),
                Some("holds the lease until"),
                Some(NOW + 9),
            ),
            (
                Guarded::Conflict,
                (Decision::Poison, "conflict"),
                Some("different payload"),
                None,
            ),
            (
                Guarded::Rejected,
                (Decision::Poison, "payment_rejected"),
                Some("declined before"),
                None,
            ),
            (
                Guarded::Pending,
                (Decision::Retry, "payment_pending"),
                Some("still being processed"),
                None,
            ),
            (
                reconcile(Unsettled::LookUpFailed(not_sent())),
                (Decision::Retry, "needs_reconciliation"),
                Some("the lookup failed"),
                None,
            ),
            (
                reconcile(Unsettled::NotFound),
                (Decision::Poison, "needs_reconciliation"),
                Some("no charge under the key"),
                None,
            ),
            (
                reconcile(Unsettled::Unclear),
                (Decision::Poison, "needs_reconciliation"),
                Some("not understood"),
                None,
            ),
            (
                Guarded::Store(StoreError::Malformed("no status".into())),
                (Decision::Retry, "store_error"),
                Some("no status"),
                None,
            ),
            (
                Guarded::LeaseLost,
                (Decision::Retry, "lease_lost"),
                Some("lease was taken over"),
                None,
            ),
            (
                failed(not_sent(), Effect::None),
                (Decision::Retry, "payment_not_sent"),
                Some("connection refused"),
                None,
            ),
            (
                failed(
                    PaymentError::Ambiguous {
                        reason: "timed out".into(),
                        source: None,
                    },
                    Effect::Maybe,
                ),
                (Decision::Retry, "payment_ambiguous"),
                Some("timed out"),
                None,
            ),
            (
                failed(
                    PaymentError::InFlight {
                        retry_after: Some(std::time::Duration::from_secs(2)),
                    },
                    Effect::Maybe,
                ),
                (Decision::Retry, "payment_in_flight"),
                Some("still in flight"),
                Some(NOW + 2_000),
            ),
            (
                failed(PaymentError::InFlight { retry_after: None }, Effect::Maybe),
                (Decision::Retry, "payment_in_flight"),
                Some("still in flight"),
                None,
            ),
            (
                failed(
                    PaymentError::Declined {
                        status: Some(402),
                        reason: "card_declined".into(),
                    },
                    Effect::None,
                ),
                (Decision::Poison, "payment_rejected"),
                Some("card_declined"),
                None,
            ),
            (
                failed(
                    PaymentError::KeyReused {
                        status: Some(422),
                        reason: "another body".into(),
                    },
                    Effect::None,
                ),
                (Decision::Poison, "payment_conflict"),
                Some("another body"),
                None,
            ),
            (
                failed(
                    PaymentError::Misconfigured {
                        status: Some(401),
                        reason: "bad key".into(),
                    },
                    Effect::None,
                ),
                (Decision::Retry, "payment_config"),
                Some("bad key"),
                config_wait,
            ),
            (
                failed(
                    PaymentError::Failed {
                        status: Some(402),
                        code: "processing_error".into(),
                        reason: "try again".into(),
                    },
                    Effect::None,
                ),
                (Decision::Retry, "payment_failed"),
                Some("processing_error"),
                None,
            ),
            (
                failed(
                    PaymentError::Refused {
                        status: Some(400),
                        reason: "missing parameter".into(),
                    },
                    Effect::None,
                ),
                (Decision::Retry, "payment_refused"),
                Some("missing parameter"),
                config_wait,
            ),
        ];
        let body = r#"{"order_id": "o-1", "amount": 10}"#;
        for (guarded, expected, words, retry_after_ms) in cases {
            let label = format!("{guarded:?}");
            let order = decode_order(body, Currency::parse("USD").expect("USD")).expect("an order");
            let lease = (expected.0 != Decision::Ack).then(LeaseToken::new);
            let verdict = verdict(OrderDecision::Guarded(guarded), order, lease, NOW);
            assert_eq!((verdict.outcome, verdict.reason), expected, "{label}");
            match words {
                Some(words) => {
                    let detail = verdict.detail.as_deref().unwrap_or_default();
                    assert!(detail.contains(words), "{label}: {detail:?}");
                }
                None => assert_eq!(verdict.detail, None, "{label}"),
            }
            assert_eq!(verdict.retry_after_ms, retry_after_ms, "{label}");
            // What is not acknowledged names its order and its claim.
            if expected.0 != Decision::Ack {
                assert_eq!(verdict.key.as_deref(), Some("o-1"), "{label}");
                assert_eq!(
                    verdict.correlation_id,
                    lease.map(|token| token.to_string()),
                    "{label}"
                );
            }
        }

        let order = decode_order(body, Currency::parse("USD").expect("USD")).expect("an order");
        let open = verdict(OrderDecision::CircuitOpen, order, None, NOW);
        assert_eq!(
            (open.outcome, open.reason, open.retry_after_ms),
            (Decision::Retry, "payment_circuit_open", config_wait)
        );
        assert!(
            open.detail
                .as_deref()
                .is_some_and(|d| d.contains("refused our configuration"))
        );
    }
}
