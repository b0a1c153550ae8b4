//! What a record's handler is given and what it answers: the [`Invocation`] it runs in, the
//! [`RecordHandler`] trait, and its [`Verdict`] with the [`Decision`] in it.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use crate::edge::Message;

/// The old name of [`Decision`], kept for one release.
#[deprecated(
    since = "0.2.0",
    note = "renamed `Decision`: `idempotency::Outcome` is another thing"
)]
pub type Outcome = Decision;

/// What should become of a record: a [`Verdict`]'s decision.
///
/// A match on it outside this crate needs a wildcard arm; treat a decision you do not know as
/// [`Decision::Retry`] (never delete what you cannot name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Decision {
    /// Done, or a duplicate of finished work: delete the message.
    Ack,
    /// May succeed later: report it, SQS redelivers it.
    Retry,
    /// Will never succeed: report it, it reaches the DLQ after `maxReceiveCount`.
    Poison,
}

impl Decision {
    /// `ack`, `retry` or `poison`, for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Retry => "retry",
            Self::Poison => "poison",
        }
    }
}

/// A handler's answer for one record: the outcome, and what the log needs to explain it.
///
/// Built with [`Verdict::ack`], [`Verdict::retry`] or [`Verdict::poison`] and the `with_`
/// methods; fields may be added.
///
/// # Example
///
/// ```
/// use sqs_batch::{Verdict, processor::Decision};
///
/// let verdict = Verdict::retry("busy").with_retry_after_ms(1_767_225_600_000);
/// assert_eq!((verdict.outcome, verdict.reason), (Decision::Retry, "busy"));
/// assert_eq!(Verdict::poison("invalid_body").outcome, Decision::Poison);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Verdict {
    /// What becomes of the record.
    pub outcome: Decision,
    /// A short, stable code (`charged`, `duplicate`, `busy`, `invalid_body`, ...).
    pub reason: &'static str,
    /// Human detail for the log. Never a body or a secret.
    pub detail: Option<Cow<'static, str>>,
    /// The business key the record is about (an order id, a user id), when the handler got
    /// that far. Logged as `key`.
    pub key: Option<String>,
    /// When retrying makes sense again, in epoch ms (for example a busy lease's end).
    pub retry_after_ms: Option<u64>,
    /// An id joining the log line to the handler's own records (an idempotency claim's lease
    /// token, for example). Logged as `correlation_id`.
    pub correlation_id: Option<String>,
    /// What the handler learned of a dependency every record needs: down for all (the record
    /// waits for its return, [`crate::recovery`]), or up again (records parked for it may come
    /// back now).
    pub health: Option<Health>,
}

/// The state of a dependency every record needs (a payment provider, a table), as one record's
/// handling found it. A failure about one record (a decline, a busy key) is neither.
///
/// ```
/// use sqs_batch::{Verdict, processor::Health};
///
/// let verdict = Verdict::retry("payment_not_sent").with_health(Health::Down("payment"));
/// assert_eq!(verdict.health, Some(Health::Down("payment")));
/// assert!(Health::Up("payment").is_up());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Health {
    /// It failed in a way every record would meet (unreachable, 5xx, a timeout), named.
    Down(&'static str),
    /// It answered, named: records that wait for it may come back.
    Up(&'static str),
}

impl Health {
    /// Whether it answered.
    pub fn is_up(&self) -> bool {
        matches!(self, Self::Up(_))
    }

    /// The dependency's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Down(name) | Self::Up(name) => name,
        }
    }
}

impl Verdict {
    /// Done: delete the message.
    pub fn ack(reason: &'static str) -> Self {
        Self::new(Decision::Ack, reason)
    }

    /// May succeed later: report it.
    pub fn retry(reason: &'static str) -> Self {
        Self::new(Decision::Retry, reason)
    }

    /// Will never succeed: report it, for the DLQ.
    pub fn poison(reason: &'static str) -> Self {
        Self::new(Decision::Poison, reason)
    }

    fn new(outcome: Decision, reason: &'static str) -> Self {
        Self {
            outcome,
            reason,
            detail: None,
            key: None,
            retry_after_ms: None,
            correlation_id: None,
            health: None,
        }
    }

    /// Adds human detail for the log line.
    pub fn with_detail(mut self, detail: impl Into<Cow<'static, str>>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Names the business key the record is about.
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// When a retry makes sense again, epoch ms (the backoff waits until then).
    pub fn with_retry_after_ms(mut self, at_ms: u64) -> Self {
        self.retry_after_ms = Some(at_ms);
        self
    }

    /// What the record's handling learned of a dependency every record needs.
    pub fn with_health(mut self, health: Health) -> Self {
        self.health = Some(health);
        self
    }
}

/// The old name of [`Invocation`], which a handler gets besides its record: the two held the
/// same fields. Kept for one release.
#[deprecated(
    since = "0.2.0",
    note = "renamed `Invocation`: a record's context was its invocation"
)]
pub type RecordContext = Invocation;

/// The invocation a batch is processed in, as each record's handler gets it: its deadline and,
/// under Lambda, its request id and the function's ARN (shared, not copied: a record's is a
/// clone). A bare deadline converts into one (`From<u64>`), so the processing calls take either.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Invocation {
    /// The deadline, epoch ms: records are not started too close to it, and are cut off at it.
    pub deadline_ms: u64,
    /// The Lambda request id.
    pub request_id: Option<Arc<str>>,
    /// The ARN the function was invoked by.
    pub function_arn: Option<Arc<str>>,
}

impl Invocation {
    /// An invocation ending at `deadline_ms` (epoch ms), outside Lambda.
    pub fn new(deadline_ms: u64) -> Self {
        Self {
            deadline_ms,
            request_id: None,
            function_arn: None,
        }
    }

    /// A copy of `invocation`: what `RecordContext::of` was.
    #[deprecated(since = "0.2.0", note = "`RecordContext` is `Invocation`: clone it")]
    pub fn of(invocation: &Invocation) -> Self {
        invocation.clone()
    }

    /// With Lambda's request id and the ARN the function was invoked by.
    pub fn with_lambda(self, request_id: &str, function_arn: &str) -> Self {
        Self {
            request_id: Some(Arc::from(request_id)),
            function_arn: Some(Arc::from(function_arn)),
            ..self
        }
    }
}

impl From<u64> for Invocation {
    fn from(deadline_ms: u64) -> Self {
        Self::new(deadline_ms)
    }
}

/// Anything that turns one record into a [`Verdict`].
///
/// # Example
///
/// ```
/// use sqs_batch::{Message, RecordHandler, Verdict, processor::Invocation};
///
/// /// Acknowledges a record whose body is a number, poisons anything else.
/// struct Numbers;
///
/// impl RecordHandler for Numbers {
///     async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
///         match message.body.trim().parse::<i64>() {
///             Ok(_) => Verdict::ack("number"),
///             Err(_) => Verdict::poison("not_a_number"),
///         }
///     }
/// }
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let verdict = Numbers.handle(&Message::new("m-1", "x"), Invocation::new(0)).await;
/// assert_eq!(verdict.reason, "not_a_number");
/// # });
/// ```
pub trait RecordHandler: Send + Sync {
    /// Decides one record. A panic here is RETRY for this record only.
    fn handle(
        &self,
        message: &Message<'_>,
        context: Invocation,
    ) -> impl Future<Output = Verdict> + Send;

    /// A span around the lines the processor writes about `message` (a record not acknowledged,
    /// or not started), so they carry the handler's own fields: an order handler adds its
    /// `order_id`, read from the body even when the body is not a valid order. Asked only for
    /// those lines, never on the ACK path. None by default.
    fn record_span(&self, message: &Message<'_>) -> tracing::Span {
        let _ = message;
        tracing::Span::none()
    }

    /// The record's business key (an order id), for the verdicts the processor makes itself (a
    /// panic, a record abandoned at the deadline or at a worker's stop), so that a DLQ copy of
    /// such a record still names what it is about, as the handler's own verdicts do
    /// ([`Verdict::with_key`]). Asked only for those. None by default.
    fn record_key(&self, message: &Message<'_>) -> Option<String> {
        let _ = message;
        None
    }
}
