//! Orders: decoding a body, and the order handler.
//!
//! [`handle_order`] is the business decision, a function of the order and the ports (store,
//! gateway, clock) that returns an [`OrderDecision`]; it never sees Lambda, SQS or DynamoDB
//! types. [`OrderHandler`] adapts it to the batch processor.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};

use serde::Deserialize;
use serde_json::value::RawValue;
use tracing::Instrument;

use idempotency::guard::{
    self, Claim, Failed, Found, GuardPolicy, Guarded, GuardedWork, Unsettled,
};
use idempotency::{
    Begin, ClaimRequest, Fingerprint, IdempotencyStore, Lease, LeaseToken, StoreError,
};
use lambda_kit::{Clock, error_chain};
use sqs_batch::{Message, Outcome, RecordContext, RecordHandler, Verdict};

use crate::metrics::{CallLatency, Latency};
use crate::money::{AmountError, Currency, Money};
use crate::payment::{ChargeRequest, ChargeStatus, PaymentError, PaymentGateway};

/// A valid order's body for generated events (`sqs_batch::testkit::generate`): order `o-{i}`,
/// an amount between 1 and 500.
pub fn generated_body(i: usize, rng: &mut fastrand::Rng) -> String {
    let cents = rng.u64(100..=50_000);
    format!(
        r#"{{"order_id": "o-{i}", "amount": {}.{:02}}}"#,
        cents / 100,
        cents % 100
    )
}

/// Longest accepted `order_id`, in bytes. It is the idempotency key downstream too, and
/// providers cap those (Stripe: 255); DynamoDB caps a partition key at 2048 bytes.
pub const MAX_ORDER_ID_LEN: usize = 255;

/// A valid order: an `order_id` that can be carried exactly as the provider's idempotency key,
/// and an exact amount above zero in its currency.
#[derive(Debug, Clone, PartialEq)]
pub struct Order<'a> {
    pub order_id: Cow<'a, str>,
    pub amount: Money,
    /// The amount as a float's bits, as versions before exact amounts fingerprinted it.
    legacy_amount_bits: u64,
}

impl Order<'_> {
    /// What a duplicate must match to be the same order: the id, the currency and the amount in
    /// minor units, however the body spelled them (`10.5`, `10.50`, `1.05e1`).
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&[
            self.order_id.as_bytes(),
            self.amount.currency.as_str().as_bytes(),
            &self.amount.minor.to_le_bytes(),
        ])
    }

    /// The fingerprint versions before exact amounts wrote (the id and the amount's float
    /// bits): an item they claimed is still this order's, for as long as such items are kept
    /// (`IDEMPOTENCY_RETENTION_DAYS` after the upgrade).
    pub fn legacy_fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&[
            self.order_id.as_bytes(),
            &self.legacy_amount_bits.to_le_bytes(),
        ])
    }

    fn into_owned(self) -> Order<'static> {
        Order {
            order_id: Cow::Owned(self.order_id.into_owned()),
            amount: self.amount,
            legacy_amount_bits: self.legacy_amount_bits,
        }
    }
}

/// Why a body is not an order. The messages never quote the body: it may hold personal data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the body is empty")]
    Empty,
    #[error("the body is not valid JSON (line {line}, column {column})")]
    NotJson { line: usize, column: usize },
    #[error("the body is not a JSON object of order fields (line {line}, column {column})")]
    NotAnOrder { line: usize, column: usize },
    #[error("order_id is missing")]
    MissingOrderId,
    #[error("order_id is not a string")]
    OrderIdNotString,
    #[error("order_id is empty")]
    EmptyOrderId,
    #[error("order_id is longer than {MAX_ORDER_ID_LEN} bytes")]
    OrderIdTooLong,
    #[error("order_id contains control characters")]
    OrderIdControl,
    #[error(
        "order_id has leading or trailing white space, which an HTTP header drops: the charge \
         and its look-up would name different keys"
    )]
    OrderIdWhiteSpace,
    #[error(
        "order_id must be printable ASCII (it is sent as an HTTP header and a URL path segment)"
    )]
    OrderIdNotAscii,
    #[error("order_id cannot be \".\" or \"..\"")]
    OrderIdDotSegment,
    #[error("amount is missing")]
    MissingAmount,
    #[error(transparent)]
    Amount(#[from] AmountError),
    #[error("currency is not a three-letter ISO 4217 code")]
    CurrencyInvalid,
    #[error("the SNS envelope's Message is not a string")]
    EnvelopeMessageNotString,
    #[error("inside the SNS envelope: {0}")]
    InEnvelope(Box<DecodeError>),
}

/// The fields we read, each kept raw so a wrong type gets our own message, not serde's (which
/// would quote the value).
#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow, default)]
    order_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    amount: Option<&'a RawValue>,
    #[serde(borrow, default)]
    currency: Option<&'a RawValue>,
    #[serde(rename = "Type", borrow, default)]
    kind: Option<&'a RawValue>,
    #[serde(rename = "Message", borrow, default)]
    message: Option<&'a RawValue>,
}

/// Decodes a record body into an order, in `default_currency` unless it names one. An SNS
/// notification envelope (`"Type": "Notification"` with the order as a JSON string in
/// `Message`) is unwrapped once; raw delivery works as is.
pub fn decode_order(body: &str, default_currency: Currency) -> Result<Order<'_>, DecodeError> {
    let raw = parse_raw(body)?;
    if raw.kind.is_some_and(|k| k.get() == r#""Notification""#)
        && let Some(message) = raw.message
    {
        let inner = json_string(message).ok_or(DecodeError::EnvelopeMessageNotString)?;
        let order = parse_raw(&inner)
            .and_then(|inner_raw| order_from(&inner_raw, default_currency))
            .map_err(|e| DecodeError::InEnvelope(Box::new(e)))?;
        return Ok(order.into_owned());
    }
    order_from(&raw, default_currency)
}

/// The order id a body names, even when it is not a valid order (a conflicting amount, a bad
/// field), so an operator can still look it up in the table. Same envelope rule as
/// [`decode_order`].
pub fn order_id_hint(body: &str) -> Option<String> {
    let raw = parse_raw(body).ok()?;
    if raw.kind.is_some_and(|k| k.get() == r#""Notification""#)
        && let Some(message) = raw.message
    {
        let inner = json_string(message)?;
        let inner_raw = parse_raw(&inner).ok()?;
        return json_string(inner_raw.order_id?).map(Cow::into_owned);
    }
    json_string(raw.order_id?).map(Cow::into_owned)
}

fn parse_raw(body: &str) -> Result<RawBody<'_>, DecodeError> {
    let trimmed = body.trim_start();
    if trimmed.is_empty() {
        return Err(DecodeError::Empty);
    }
    // serde's derived structs also accept a JSON array (fields by position): refuse it here.
    if trimmed.starts_with('[') {
        return Err(DecodeError::NotAnOrder { line: 1, column: 1 });
    }
    serde_json::from_str(body).map_err(|e| {
        let (line, column) = (e.line(), e.column());
        match e.classify() {
            serde_json::error::Category::Data => DecodeError::NotAnOrder { line, column },
            _ => DecodeError::NotJson { line, column },
        }
    })
}

/// A JSON string value, borrowed from the input unless it has escapes to undo.
fn json_string(raw: &RawValue) -> Option<Cow<'_, str>> {
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(text) => Some(Cow::Borrowed(text)),
        Err(_) => serde_json::from_str::<String>(raw.get())
            .ok()
            .map(Cow::Owned),
    }
}

fn order_from<'a>(raw: &RawBody<'a>, default_currency: Currency) -> Result<Order<'a>, DecodeError> {
    let order_id = raw.order_id.ok_or(DecodeError::MissingOrderId)?;
    let order_id = json_string(order_id).ok_or(DecodeError::OrderIdNotString)?;
    if order_id.is_empty() {
        return Err(DecodeError::EmptyOrderId);
    }
    if order_id.len() > MAX_ORDER_ID_LEN {
        return Err(DecodeError::OrderIdTooLong);
    }
    // It is the one key of the store, the charge's `Idempotency-Key` header and the look-up's
    // path segment, so it must read the same in all three. Headers cannot carry control
    // characters, and servers trim white space around a value; non-ASCII has no one encoding
    // in both a header and a path. Printable ASCII with no space at either end reads the same.
    if order_id.chars().any(char::is_control) {
        return Err(DecodeError::OrderIdControl);
    }
    if order_id.starts_with(char::is_whitespace) || order_id.ends_with(char::is_whitespace) {
        return Err(DecodeError::OrderIdWhiteSpace);
    }
    if !order_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(DecodeError::OrderIdNotAscii);
    }
    // It is also a path segment of the provider's lookup (`/charges/{order_id}`), where these
    // two would name another resource.
    if order_id == "." || order_id == ".." {
        return Err(DecodeError::OrderIdDotSegment);
    }
    let amount = raw.amount.ok_or(DecodeError::MissingAmount)?;
    let currency = match raw.currency {
        None => default_currency,
        Some(code) => json_string(code)
            .and_then(|code| Currency::parse(&code))
            .ok_or(DecodeError::CurrencyInvalid)?,
    };
    // The number's own text: exact, never through a float.
    let amount_text = amount.get();
    let amount = Money::parse(amount_text, currency)?;
    // Valid JSON number text that is exact in minor units always parses as a finite float.
    let legacy_amount_bits = serde_json::from_str::<f64>(amount_text)
        .map(f64::to_bits)
        .unwrap_or_default();
    Ok(Order {
        order_id,
        amount,
        legacy_amount_bits,
    })
}

/// The business decision for one order.
#[derive(Debug)]
pub enum OrderDecision {
    /// Charged now and recorded as done.
    Charged,
    /// An earlier attempt's charge was found by the lookup and recorded as done; not charged again.
    Reconciled,
    /// Finished before with the same payload.
    Duplicate,
    /// Another consumer holds a live lease until this epoch ms.
    Busy { until_ms: u64 },
    /// The order id belongs to a different payload.
    Conflict,
    /// Declined before, and recorded so: not sent to the provider again.
    DeclinedBefore,
    /// The charge attempt failed; what it proves decides the outcome (see [`PaymentError`]).
    Payment(PaymentError),
    /// An earlier attempt is still being processed by the provider.
    Pending,
    /// An earlier attempt may have charged, the provider has forgotten the key by now, and the
    /// lookup failed or no longer knows the key: charging again could charge twice, so nothing
    /// was sent.
    NeedsReconciliation {
        why: Unsettled<PaymentError>,
        first_attempt_ms: u64,
    },
    /// The provider refused our configuration several times in a row this invocation: not
    /// called, not claimed.
    CircuitOpen,
    /// The store failed; nothing is known for sure.
    StoreUnavailable(StoreError),
    /// Charged, but the lease was taken over before completion; the new holder completes it.
    LeaseLost,
}

impl OrderDecision {
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Charged | Self::Reconciled | Self::Duplicate => Outcome::Ack,
            // Past the key window a provider that no longer knows the key leaves only a person
            // to settle it: to the DLQ with its reason, at once (a FIFO group goes on).
            Self::Conflict
            | Self::DeclinedBefore
            | Self::Payment(PaymentError::Declined { .. } | PaymentError::KeyReused { .. })
            | Self::NeedsReconciliation {
                why: Unsettled::NotFound,
                ..
            } => Outcome::Poison,
            Self::Busy { .. }
            | Self::Payment(_)
            | Self::Pending
            | Self::NeedsReconciliation { .. }
            | Self::CircuitOpen
            | Self::StoreUnavailable(_)
            | Self::LeaseLost => Outcome::Retry,
        }
    }

    /// A short, stable code for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Charged => "charged",
            Self::Reconciled => "reconciled",
            Self::Duplicate => "duplicate",
            Self::Busy { .. } => "busy",
            Self::Conflict => "conflict",
            Self::DeclinedBefore => "payment_rejected",
            Self::Payment(e) => match e {
                PaymentError::NotSent { .. } => "payment_not_sent",
                PaymentError::Ambiguous { .. } => "payment_ambiguous",
                PaymentError::InFlight { .. } => "payment_in_flight",
                PaymentError::Declined { .. } => "payment_rejected",
                PaymentError::KeyReused { .. } => "payment_conflict",
                PaymentError::Misconfigured { .. } => "payment_config",
                PaymentError::Refused { .. } => "payment_refused",
            },
            Self::Pending => "payment_pending",
            Self::NeedsReconciliation { .. } => "needs_reconciliation",
            Self::CircuitOpen => "payment_circuit_open",
            Self::StoreUnavailable(_) => "store_error",
            Self::LeaseLost => "lease_lost",
        }
    }

    /// Whether the provider refused our configuration or our request (or we stopped asking
    /// because it did): retried slowly, since a deployment fixes it, not the message.
    pub fn is_configuration_error(&self) -> bool {
        match self {
            Self::Payment(e)
            | Self::NeedsReconciliation {
                why: Unsettled::LookUpFailed(e),
                ..
            } => e.is_configuration(),
            Self::CircuitOpen => true,
            _ => false,
        }
    }

    /// Whether the provider's answer would be the same for every order (a refused key, a
    /// missing route): what the invocation's breaker counts. A 400 about one order's request
    /// is not: one malformed order must not stop the others.
    fn is_endpoint_wide(&self) -> bool {
        match self {
            Self::Payment(e)
            | Self::NeedsReconciliation {
                why: Unsettled::LookUpFailed(e),
                ..
            } => e.is_endpoint_wide(),
            _ => false,
        }
    }
}

/// How long a record refused for our configuration (or not sent because of it) stays away: a key
/// rotation or a URL fix takes a person minutes to hours, and every receive counts towards
/// `maxReceiveCount`; at this pace even a queue of five receives lasts over an hour.
pub const CONFIGURATION_RETRY_AFTER_MS: u64 = 15 * 60 * 1_000;

/// Stops calling the provider for the rest of an invocation once it has refused our
/// configuration (401, 403, 404, ...) [`ConfigBreaker::TRIP_AFTER`] times in a row: the other
/// records would only get the same answer. Reset at the start of every invocation, so a fixed
/// key is tried again at the next one.
#[derive(Debug, Default)]
pub struct ConfigBreaker {
    consecutive: AtomicU32,
}

impl ConfigBreaker {
    pub const TRIP_AFTER: u32 = 3;

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

    pub fn reset(&self) {
        self.consecutive.store(0, Ordering::Relaxed);
    }
}

/// What an order needs from the outside world.
#[derive(Debug)]
pub struct Ports<S, P, C> {
    pub store: S,
    pub gateway: P,
    pub clock: C,
    /// Leases, and how long the provider remembers a key.
    pub guard: GuardPolicy,
    /// Latency of the store and payment calls, for the metrics.
    pub calls: CallLatency,
    pub breaker: ConfigBreaker,
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
        Ok(
            match self.latency.time(self.gateway.lookup(&request)).await? {
                ChargeStatus::Succeeded => Found::Happened,
                // A definite failure: the same key may be charged again at any age.
                ChargeStatus::Failed => Found::NotHappened,
                // Never seen, or forgotten: the guard weighs it against the key window.
                ChargeStatus::Unknown => Found::Unknown,
                ChargeStatus::Pending => Found::Pending,
            },
        )
    }

    /// A decline is final: recorded in the item, so no redelivery or redrive of the order is
    /// sent to the provider again (card networks penalise retried declines) until a person
    /// clears it (`orders-ops clear-decline`).
    fn refusal(&self, error: &PaymentError) -> Option<String> {
        matches!(error, PaymentError::Declined { .. }).then(|| error.to_string())
    }

    async fn perform(&self) -> Result<(), Failed<PaymentError>> {
        let request = self.request();
        self.latency
            .time(self.gateway.charge(&request))
            .await
            .map_err(|error| Failed {
                effect: error.effect(),
                error,
            })
    }
}

/// The store with every call timed, for the metrics.
struct Timed<'a, S> {
    store: &'a S,
    latency: &'a Latency,
}

impl<S: IdempotencyStore> IdempotencyStore for Timed<'_, S> {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        self.latency.time(self.store.begin(request)).await
    }

    async fn complete(&self, key: &str, lease: &Lease, now_ms: u64) -> Result<(), StoreError> {
        self.latency
            .time(self.store.complete(key, lease, now_ms))
            .await
    }

    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        self.latency
            .time(self.store.mark_attempted(key, lease, at_ms))
            .await
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        self.latency.time(self.store.release(key, lease)).await
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.latency
            .time(self.store.reject(key, lease, now_ms, reason))
            .await
    }
}

/// Claims the order, reconciles an earlier attempt if one may have charged, charges with the
/// order id as the idempotency key, and records the outcome (see `idempotency::guard`).
pub async fn handle_order<S, P, C>(
    order: &Order<'_>,
    ports: &Ports<S, P, C>,
    deadline_ms: u64,
    message_id: &str,
) -> (OrderDecision, Option<LeaseToken>)
where
    S: IdempotencyStore,
    P: PaymentGateway,
    C: Clock,
{
    if ports.breaker.is_open() {
        return (OrderDecision::CircuitOpen, None);
    }
    let key: &str = &order.order_id;
    let store = Timed {
        store: &ports.store,
        latency: &ports.calls.store,
    };
    let work = ChargeWork {
        gateway: &ports.gateway,
        order,
        latency: &ports.calls.payment,
    };
    let claim = Claim {
        key,
        fingerprint: order.fingerprint(),
        message_id,
        deadline_ms,
    };
    let first = guard::run(&store, &ports.clock, &ports.guard, &claim, &work).await;
    let run = if matches!(first.outcome, Guarded::Conflict) {
        // An item written before amounts were exact carries the old fingerprint: the same
        // order, not a conflict. Only a refused claim pays for this second try, boxed (and the
        // first run dropped) so that every record's future, moved around the batch's queue,
        // does not grow for a path only conflicts take.
        drop(first);
        Box::pin(async {
            let legacy = Claim {
                fingerprint: order.legacy_fingerprint(),
                ..claim
            };
            guard::run(&store, &ports.clock, &ports.guard, &legacy, &work).await
        })
        .await
    } else {
        first
    };
    let decision = match run.outcome {
        Guarded::Performed(()) => OrderDecision::Charged,
        Guarded::Reconciled => OrderDecision::Reconciled,
        Guarded::Duplicate => OrderDecision::Duplicate,
        Guarded::Busy { until_ms } => OrderDecision::Busy { until_ms },
        Guarded::Conflict => OrderDecision::Conflict,
        Guarded::Rejected => OrderDecision::DeclinedBefore,
        Guarded::Pending => OrderDecision::Pending,
        Guarded::Failed { error, .. } => OrderDecision::Payment(error),
        Guarded::NeedsReconciliation {
            why,
            first_attempt_ms,
        } => OrderDecision::NeedsReconciliation {
            why,
            first_attempt_ms,
        },
        Guarded::Store(e) => OrderDecision::StoreUnavailable(e),
        Guarded::LeaseLost => OrderDecision::LeaseLost,
    };
    // Only answers from the provider move the breaker; store-only outcomes say nothing of it.
    let provider_answered = matches!(
        decision,
        OrderDecision::Charged
            | OrderDecision::Reconciled
            | OrderDecision::Pending
            | OrderDecision::Payment(_)
            | OrderDecision::NeedsReconciliation { .. }
    );
    if provider_answered {
        ports.breaker.record(decision.is_endpoint_wide());
    }
    (decision, run.lease)
}

/// The order handler as the batch processor drives it.
#[derive(Debug)]
pub struct OrderHandler<S, P, C> {
    ports: Ports<S, P, C>,
    /// The currency of an order that names none (`DEFAULT_CURRENCY`).
    default_currency: Currency,
}

impl<S, P, C> OrderHandler<S, P, C> {
    pub fn new(ports: Ports<S, P, C>, default_currency: Currency) -> Self {
        Self {
            ports,
            default_currency,
        }
    }

    pub fn ports(&self) -> &Ports<S, P, C> {
        &self.ports
    }

    pub fn ports_mut(&mut self) -> &mut Ports<S, P, C> {
        &mut self.ports
    }
}

impl<S, P, C> RecordHandler for OrderHandler<S, P, C>
where
    S: IdempotencyStore,
    P: PaymentGateway,
    C: Clock,
{
    async fn handle(&self, message: &Message<'_>, context: RecordContext) -> Verdict {
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
        // Every line written while the order is handled (the store's, the gateway's) carries
        // its id.
        let span = order_span(&order.order_id);
        let (decision, lease) =
            handle_order(&order, &self.ports, context.deadline_ms, message.message_id)
                .instrument(span)
                .await;
        verdict(decision, order, lease, self.ports.clock.now_ms())
    }

    fn record_span(&self, message: &Message<'_>) -> tracing::Span {
        match order_id_hint(message.body) {
            Some(order_id) => order_span(&order_id),
            None => tracing::Span::none(),
        }
    }
}

/// The span of one order's lines: `order_id` on each of them (in JSON logs under `span`).
fn order_span(order_id: &str) -> tracing::Span {
    tracing::info_span!("order", order_id)
}

fn verdict(
    decision: OrderDecision,
    order: Order<'_>,
    lease: Option<LeaseToken>,
    now_ms: u64,
) -> Verdict {
    let verdict = match decision.outcome() {
        Outcome::Ack => return Verdict::ack(decision.reason()),
        Outcome::Retry => Verdict::retry(decision.reason()),
        Outcome::Poison => Verdict::poison(decision.reason()),
    };
    let mut verdict = verdict.with_key(order.order_id.into_owned());
    // The claim's lease token joins the log line to the table's item (`lease_token`).
    verdict.correlation_id = lease.map(|token| token.to_string());
    if decision.is_configuration_error() {
        verdict = verdict.with_retry_after_ms(now_ms.saturating_add(CONFIGURATION_RETRY_AFTER_MS));
    }
    match decision {
        OrderDecision::Busy { until_ms } => verdict
            .with_retry_after_ms(until_ms)
            .with_detail(format!("another consumer holds the lease until {until_ms}")),
        OrderDecision::Payment(e) => {
            let verdict = match e {
                PaymentError::InFlight {
                    retry_after: Some(wait),
                } => verdict.with_retry_after_ms(
                    now_ms.saturating_add(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
                ),
                _ => verdict,
            };
            verdict.with_detail(error_chain(&e))
        }
        OrderDecision::Pending => verdict.with_detail(
            "an earlier charge under this key is still being processed by the provider",
        ),
        OrderDecision::NeedsReconciliation {
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
        }),
        OrderDecision::CircuitOpen => verdict.with_detail(
            "the provider refused our configuration repeatedly this invocation: not called",
        ),
        OrderDecision::StoreUnavailable(e) => verdict.with_detail(error_chain(&e)),
        OrderDecision::Conflict => {
            verdict.with_detail("order_id belongs to a different payload (another amount)")
        }
        OrderDecision::DeclinedBefore => verdict.with_detail(
            "declined before (recorded in the idempotency item): not sent to the provider again; \
             orders-ops clear-decline lets it be charged",
        ),
        OrderDecision::LeaseLost => verdict.with_detail(
            "charged, but the lease was taken over before completion; the new holder completes it",
        ),
        OrderDecision::Charged | OrderDecision::Reconciled | OrderDecision::Duplicate => verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(body: &str) -> Result<Order<'_>, DecodeError> {
        decode_order(body, Currency::EUR)
    }

    #[test]
    fn decodes_a_plain_order_borrowing_the_id() {
        let order = decode(r#"{"order_id": "o-1", "amount": 10, "note": "x"}"#).expect("order");
        assert_eq!(order.order_id, "o-1");
        assert!(matches!(order.order_id, Cow::Borrowed(_)));
        assert_eq!(order.amount.to_string(), "10.00 EUR");
        let yen = decode(r#"{"order_id": "o-1", "amount": 10, "currency": "jpy"}"#).expect("yen");
        assert_eq!(yen.amount.to_string(), "10 JPY");
    }

    #[test]
    fn an_order_id_is_read_even_from_an_invalid_order() {
        assert_eq!(
            order_id_hint(r#"{"order_id":"o-1","amount":-5}"#).as_deref(),
            Some("o-1")
        );
        let envelope = r#"{"Type":"Notification","Message":"{\"order_id\":\"o-2\"}"}"#;
        assert_eq!(order_id_hint(envelope).as_deref(), Some("o-2"));
        assert_eq!(order_id_hint(r#"{"order_id":7}"#), None);
        assert_eq!(order_id_hint("not json"), None);
    }

    #[test]
    fn unwraps_an_sns_envelope() {
        let body = r#"{"Type":"Notification","MessageId":"x","Message":"{\"order_id\":\"o-9\",\"amount\":2.5}"}"#;
        let order = decode(body).expect("order");
        assert_eq!(order.order_id.as_ref(), "o-9");
        assert_eq!(order.amount.minor, 250);
    }

    #[test]
    fn an_envelope_whose_message_is_not_an_order_is_refused() {
        let body = r#"{"Type":"Notification","Message":"not json"}"#;
        assert!(matches!(decode(body), Err(DecodeError::InEnvelope(_))));
        let body = r#"{"Type":"Notification","Message":42}"#;
        assert_eq!(decode(body), Err(DecodeError::EnvelopeMessageNotString));
    }

    #[test]
    fn every_invalid_body_has_its_own_reason() {
        let long = format!(
            r#"{{"order_id":"{}","amount":1}}"#,
            "x".repeat(MAX_ORDER_ID_LEN + 1)
        );
        let cases: &[(&str, DecodeError)] = &[
            ("", DecodeError::Empty),
            ("   ", DecodeError::Empty),
            ("{", DecodeError::NotJson { line: 1, column: 1 }),
            ("[1,2]", DecodeError::NotAnOrder { line: 1, column: 0 }),
            (r#"{"amount":1}"#, DecodeError::MissingOrderId),
            (
                r#"{"order_id":null,"amount":1}"#,
                DecodeError::MissingOrderId,
            ),
            (
                r#"{"order_id":7,"amount":1}"#,
                DecodeError::OrderIdNotString,
            ),
            (r#"{"order_id":"","amount":1}"#, DecodeError::EmptyOrderId),
            (&long, DecodeError::OrderIdTooLong),
            (
                r#"{"order_id":"a\nb","amount":1}"#,
                DecodeError::OrderIdControl,
            ),
            (
                r#"{"order_id":"..","amount":1}"#,
                DecodeError::OrderIdDotSegment,
            ),
            (
                r#"{"order_id":" o-1","amount":1}"#,
                DecodeError::OrderIdWhiteSpace,
            ),
            (
                r#"{"order_id":"o-1\t","amount":1}"#,
                DecodeError::OrderIdControl,
            ),
            (
                r#"{"order_id":"o-1\u00a0","amount":1}"#,
                DecodeError::OrderIdWhiteSpace,
            ),
            (
                r#"{"order_id":"o\u00e9-1","amount":1}"#,
                DecodeError::OrderIdNotAscii,
            ),
            (
                r#"{"order_id":".","amount":1}"#,
                DecodeError::OrderIdDotSegment,
            ),
            (r#"{"order_id":"o"}"#, DecodeError::MissingAmount),
            (
                r#"{"order_id":"o","amount":"10"}"#,
                DecodeError::Amount(AmountError::NotNumber),
            ),
            (
                r#"{"order_id":"o","amount":"NaN"}"#,
                DecodeError::Amount(AmountError::NotNumber),
            ),
            (
                r#"{"order_id":"o","amount":1e400}"#,
                DecodeError::Amount(AmountError::TooLarge),
            ),
            (
                r#"{"order_id":"o","amount":0}"#,
                DecodeError::Amount(AmountError::NotPositive),
            ),
            (
                r#"{"order_id":"o","amount":-0.0}"#,
                DecodeError::Amount(AmountError::NotPositive),
            ),
            (
                r#"{"order_id":"o","amount":-5}"#,
                DecodeError::Amount(AmountError::NotPositive),
            ),
            (
                r#"{"order_id":"o","amount":1.005}"#,
                DecodeError::Amount(AmountError::TooPrecise { allowed: 2 }),
            ),
            (
                r#"{"order_id":"o","amount":1.5,"currency":"JPY"}"#,
                DecodeError::Amount(AmountError::TooPrecise { allowed: 0 }),
            ),
            (
                r#"{"order_id":"o","amount":1,"currency":"EURO"}"#,
                DecodeError::CurrencyInvalid,
            ),
            (
                r#"{"order_id":"o","amount":1,"currency":978}"#,
                DecodeError::CurrencyInvalid,
            ),
        ];
        for (body, expected) in cases {
            let got = decode(body);
            match (expected, &got) {
                // serde's column for a type error is not worth pinning.
                (DecodeError::NotAnOrder { .. }, Err(DecodeError::NotAnOrder { .. })) => {}
                _ => assert_eq!(got.as_ref().err(), Some(expected), "body {body:?}"),
            }
        }
    }

    #[test]
    fn duplicated_keys_are_not_an_order() {
        let got = decode(r#"{"order_id":"a","order_id":"b","amount":1}"#);
        assert!(
            matches!(got, Err(DecodeError::NotAnOrder { .. })),
            "{got:?}"
        );
    }

    #[test]
    fn decode_errors_never_quote_the_body() {
        for body in [
            r#""SECRET-MARKER""#,
            r#"{"order_id":"SECRET-MARKER"}"#,
            r#"{"order_id":1,"amount":"SECRET-MARKER"}"#,
        ] {
            let err = decode(body).expect_err("invalid");
            assert!(!err.to_string().contains("SECRET"), "{err}");
        }
    }

    #[test]
    fn the_fingerprint_changes_with_the_amount_not_the_spelling() {
        let a = decode(r#"{"order_id":"o","amount":10}"#).expect("a");
        let b =
            decode(r#"{"amount":1.000e1,"order_id":"o","extra":1,"currency":"eur"}"#).expect("b");
        let c = decode(r#"{"order_id":"o","amount":11}"#).expect("c");
        let d = decode(r#"{"order_id":"o","amount":10,"currency":"USD"}"#).expect("d");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
        assert_ne!(a.fingerprint(), d.fingerprint());
    }

    /// Items claimed before amounts were exact hold the id and the amount's float bits.
    #[test]
    fn the_legacy_fingerprint_is_what_earlier_versions_wrote() {
        let order = decode(r#"{"order_id":"o-1","amount":10.1}"#).expect("order");
        let earlier = Fingerprint::of(&[b"o-1", &10.1f64.to_bits().to_le_bytes()]);
        assert_eq!(order.legacy_fingerprint(), earlier);
        assert_ne!(order.fingerprint(), earlier);
    }
}
