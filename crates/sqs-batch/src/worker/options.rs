//! How a worker polls and stops: [`WorkerOptions`], read once from the environment, and the
//! stop timeout a platform must give it.

use lambda_kit::{Env, EnvError};

/// How the worker polls and stops. Built with [`WorkerOptions::default`] or
/// [`WorkerOptions::from_env`]; fields may be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerOptions {
    /// `ReceiveMessage`'s `WaitTimeSeconds` (20: the longest long poll).
    pub wait_time_seconds: u8,
    /// Messages per receive, 1-10 (10).
    pub max_messages: u8,
    /// Receives (and so batches) in flight at once (2).
    pub receives_in_flight: usize,
    /// The visibility each heartbeat sets, seconds; it is renewed every third of it (60).
    pub visibility_extension_s: u64,
    /// The longest a batch may run before its unfinished records are abandoned and reported,
    /// ms (15 minutes, as Lambda's longest invocation).
    pub batch_timeout_ms: u64,
    /// After shutdown, how long started records may still run, ms (25 s: below ECS's default
    /// stop timeout of 30 s, less the receive in flight).
    pub drain_timeout_ms: u64,
    /// Attempts at a `DeleteMessageBatch` entry before it is logged and left (3).
    pub delete_attempts: u32,
    /// How often the backlog document is written, ms (60 s; 0: never). Each document's
    /// `Consumers` is this over a minute, so a minute's sum stays one per worker.
    pub metrics_interval_ms: u64,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            wait_time_seconds: 20,
            max_messages: 10,
            receives_in_flight: 2,
            visibility_extension_s: 60,
            batch_timeout_ms: 900_000,
            drain_timeout_ms: 25_000,
            delete_attempts: 3,
            metrics_interval_ms: 60_000,
        }
    }
}

/// The variables [`WorkerOptions::from_env`] reads, with their defaults.
pub const VARIABLES: &[(&str, Option<&str>)] = &[
    ("SQS_BATCH_WORKER_WAIT_TIME_SECONDS", Some("20")),
    ("SQS_BATCH_WORKER_MAX_MESSAGES", Some("10")),
    ("SQS_BATCH_WORKER_RECEIVES_IN_FLIGHT", Some("2")),
    ("SQS_BATCH_WORKER_VISIBILITY_EXTENSION_SECONDS", Some("60")),
    ("SQS_BATCH_WORKER_BATCH_TIMEOUT_SECONDS", Some("900")),
    ("SQS_BATCH_WORKER_DRAIN_TIMEOUT_SECONDS", Some("25")),
    ("SQS_BATCH_WORKER_METRICS_INTERVAL_SECONDS", Some("60")),
];

impl WorkerOptions {
    /// The options from the environment ([`VARIABLES`]); a value out of range names its variable.
    pub fn from_env(env: &Env<'_>) -> Result<Self, EnvError> {
        let env = &crate::with_old_names(env);
        let extension_s: u64 = env.ranged(
            "SQS_BATCH_WORKER_VISIBILITY_EXTENSION_SECONDS",
            60,
            3,
            43_200,
        )?;
        // A divisor of a minute: target tracking sums `Consumers` per minute, so each minute must
        // hold the same number of documents from a worker.
        let metrics_interval_s: u64 =
            env.ranged("SQS_BATCH_WORKER_METRICS_INTERVAL_SECONDS", 60, 1, 60)?;
        if 60 % metrics_interval_s != 0 {
            return Err(EnvError::invalid(
                "SQS_BATCH_WORKER_METRICS_INTERVAL_SECONDS",
                &metrics_interval_s.to_string(),
                "a divisor of 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60), so every minute \
                 holds whole backlog documents",
            ));
        }
        Ok(Self {
            wait_time_seconds: env.ranged("SQS_BATCH_WORKER_WAIT_TIME_SECONDS", 20, 0, 20)?,
            max_messages: env.ranged("SQS_BATCH_WORKER_MAX_MESSAGES", 10, 1, 10)?,
            receives_in_flight: env.ranged("SQS_BATCH_WORKER_RECEIVES_IN_FLIGHT", 2, 1, 64)?,
            visibility_extension_s: extension_s,
            batch_timeout_ms: env.ranged(
                "SQS_BATCH_WORKER_BATCH_TIMEOUT_SECONDS",
                900,
                1,
                43_200,
            )? * 1_000,
            drain_timeout_ms: env.ranged("SQS_BATCH_WORKER_DRAIN_TIMEOUT_SECONDS", 25, 1, 3_600)?
                * 1_000,
            metrics_interval_ms: metrics_interval_s * 1_000,
            ..Self::default()
        })
    }

    /// These options with `WaitTimeSeconds` = `seconds` (0-20).
    pub fn with_wait_time_seconds(mut self, seconds: u8) -> Self {
        self.wait_time_seconds = seconds.min(20);
        self
    }

    /// These options with the heartbeat's extension.
    pub fn with_visibility_extension_s(mut self, seconds: u64) -> Self {
        self.visibility_extension_s = seconds.max(3);
        self
    }

    /// These options with the longest a batch may run.
    pub fn with_batch_timeout_ms(mut self, ms: u64) -> Self {
        self.batch_timeout_ms = ms;
        self
    }

    /// These options with the drain timeout.
    pub fn with_drain_timeout_ms(mut self, ms: u64) -> Self {
        self.drain_timeout_ms = ms;
        self
    }

    /// These options with the backlog document's interval (0: never).
    pub fn with_metrics_interval_ms(mut self, ms: u64) -> Self {
        self.metrics_interval_ms = ms;
        self
    }

    /// These options with `n` receives in flight.
    pub fn with_receives_in_flight(mut self, n: usize) -> Self {
        self.receives_in_flight = n.max(1);
        self
    }
}

/// The least stop timeout, seconds, for a platform that stops the worker (ECS `stopTimeout`,
/// Kubernetes `terminationGracePeriodSeconds`): a receive in flight, the drain, and a margin
/// for the last deletes.
pub fn stop_timeout_s(options: &WorkerOptions) -> u64 {
    u64::from(options.wait_time_seconds) + options.drain_timeout_ms.div_ceil(1_000) + 5
}
