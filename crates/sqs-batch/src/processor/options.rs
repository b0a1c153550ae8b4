//! How a processor runs a batch: [`BatchOptions`], read once from the environment, and the
//! [`FifoScope`] a FIFO failure holds back.

use std::num::NonZeroUsize;

use lambda_kit::{Env, EnvError};

/// Which records a FIFO failure holds back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FifoScope {
    /// Stop the whole batch at the first failure (Lambda's contract).
    #[default]
    Batch,
    /// Stop only the failed message group.
    Group,
}

/// How the processor runs a batch.
///
/// [`BatchOptions::default`] or [`BatchOptions::from_env`], then the `with_` methods; fields may
/// be added.
///
/// # Example
///
/// ```
/// use sqs_batch::{BatchOptions, lambda_kit::Env};
///
/// let env = Env::new(|name| (name == "SQS_BATCH_MAX_CONCURRENCY").then(|| "4".to_owned()));
/// let options = BatchOptions::from_env(&env).unwrap();
/// assert_eq!(options.max_concurrency.get(), 4);
/// assert_eq!(BatchOptions::default().max_concurrency.get(), 16);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchOptions {
    /// Records (or FIFO groups in group scope) in flight at once.
    pub max_concurrency: NonZeroUsize,
    /// Which records a FIFO failure holds back.
    pub fifo_scope: FifoScope,
    /// A record is not started with less than this much time left.
    pub deadline_margin_ms: u64,
    /// How long past the deadline a record abandoned mid-work may still hold what it took (an
    /// idempotency lease margin): its retry is not due before then.
    pub abandoned_hold_ms: u64,
    /// The receive from which a RETRY gives up and becomes POISON `retries_exhausted` (with its
    /// reason in the detail): one before the queue's `maxReceiveCount`, so the record leaves
    /// alone, with its reason, instead of SQS's redrive moving it at the next receive together
    /// with the FIFO records behind it, which ride the same receive counts. `None`: never.
    pub give_up_at_receive: Option<u32>,
    /// Whether an invocation in which every record failed returns an error instead of reporting
    /// them all in `batchItemFailures` (`lambda::run` and the order function). The batch
    /// comes back either way; an error also counts in the function's `Errors` metric and makes
    /// the event source mapping scale its polling down, as Powertools does by default. Off by
    /// default: our own visibility backoff already spaces the retries, and `Errors` stays the
    /// signal for the function's own faults.
    pub fail_on_entire_batch_failure: bool,
}

/// The least `SQS_BATCH_DEADLINE_MARGIN_MS` may be: below it a record can run into the deadline.
pub const MIN_DEADLINE_MARGIN_MS: u64 = 1_000;

impl BatchOptions {
    /// `SQS_BATCH_MAX_CONCURRENCY` (16, 1-1000), `SQS_BATCH_FIFO_SCOPE` (`batch` or `group`; `batch`),
    /// `SQS_BATCH_DEADLINE_MARGIN_MS` (5000, at least [`MIN_DEADLINE_MARGIN_MS`]), `SQS_BATCH_MAX_RECEIVE_COUNT`
    /// (0, unknown) and `SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE` (false). `abandoned_hold_ms`
    /// starts at the deadline margin; a caller that holds leases sets its own.
    pub fn from_env(env: &Env<'_>) -> Result<Self, EnvError> {
        let env = &crate::with_old_names(env);
        let max_concurrency: usize = env.ranged("SQS_BATCH_MAX_CONCURRENCY", 16, 1, 1_000)?;
        let fifo_scope = match env.text("SQS_BATCH_FIFO_SCOPE").as_deref() {
            None => FifoScope::Batch,
            Some(v) if v.eq_ignore_ascii_case("batch") => FifoScope::Batch,
            Some(v) if v.eq_ignore_ascii_case("group") => FifoScope::Group,
            Some(v) => {
                return Err(EnvError::invalid(
                    "SQS_BATCH_FIFO_SCOPE",
                    v,
                    "batch or group",
                ));
            }
        };
        let deadline_margin_ms: u64 = env.ranged(
            "SQS_BATCH_DEADLINE_MARGIN_MS",
            5_000,
            MIN_DEADLINE_MARGIN_MS,
            900_000,
        )?;
        // The queue's maxReceiveCount, when the deployment states it (0: unknown).
        let max_receive_count: u32 = env.ranged("SQS_BATCH_MAX_RECEIVE_COUNT", 0, 0, 1_000)?;
        let fail_on_entire_batch_failure =
            env.flag("SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE", false)?;
        Ok(Self {
            fail_on_entire_batch_failure,
            max_concurrency: NonZeroUsize::new(max_concurrency).unwrap_or(NonZeroUsize::MIN),
            fifo_scope,
            deadline_margin_ms,
            abandoned_hold_ms: deadline_margin_ms,
            give_up_at_receive: (max_receive_count >= 2).then(|| max_receive_count - 1),
        })
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            max_concurrency: NonZeroUsize::new(16).unwrap_or(NonZeroUsize::MIN),
            fifo_scope: FifoScope::Batch,
            deadline_margin_ms: 5_000,
            abandoned_hold_ms: 5_000,
            give_up_at_receive: None,
            fail_on_entire_batch_failure: false,
        }
    }
}

impl BatchOptions {
    /// With at most `max_concurrency` records (or FIFO groups in group scope) in flight.
    pub fn with_max_concurrency(self, max_concurrency: NonZeroUsize) -> Self {
        Self {
            max_concurrency,
            ..self
        }
    }

    /// With this FIFO scope.
    pub fn with_fifo_scope(self, fifo_scope: FifoScope) -> Self {
        Self { fifo_scope, ..self }
    }

    /// With this deadline margin, ms.
    pub fn with_deadline_margin_ms(self, deadline_margin_ms: u64) -> Self {
        Self {
            deadline_margin_ms,
            ..self
        }
    }

    /// With this hold past the deadline for an abandoned record, ms.
    pub fn with_abandoned_hold_ms(self, abandoned_hold_ms: u64) -> Self {
        Self {
            abandoned_hold_ms,
            ..self
        }
    }

    /// Giving up a RETRY at this receive (`None`: never).
    pub fn with_give_up_at_receive(self, give_up_at_receive: Option<u32>) -> Self {
        Self {
            give_up_at_receive,
            ..self
        }
    }

    /// Failing the invocation when every record failed
    /// ([`BatchOptions::fail_on_entire_batch_failure`]).
    pub fn with_fail_on_entire_batch_failure(self, fail: bool) -> Self {
        Self {
            fail_on_entire_batch_failure: fail,
            ..self
        }
    }
}
