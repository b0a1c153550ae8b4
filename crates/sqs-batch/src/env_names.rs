//! The crate's environment variables under their own prefix (`SQS_BATCH_`), so they never
//! collide with an application's (`MAX_CONCURRENCY` is a common name). Each name before 0.2 is
//! still read, with a warning, where its new one is unset; 0.3 reads only the new ones.

use lambda_kit::Env;

/// Each variable's name, and its name before 0.2.
pub(crate) const RENAMED: [(&str, &str); 17] = [
    ("SQS_BATCH_MAX_CONCURRENCY", "MAX_CONCURRENCY"),
    ("SQS_BATCH_FIFO_SCOPE", "FIFO_SCOPE"),
    ("SQS_BATCH_DEADLINE_MARGIN_MS", "DEADLINE_MARGIN_MS"),
    (
        "SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE",
        "FAIL_ON_ENTIRE_BATCH_FAILURE",
    ),
    ("SQS_BATCH_VISIBILITY_BACKOFF", "VISIBILITY_BACKOFF"),
    ("SQS_BATCH_BACKOFF_BASE_SECONDS", "BACKOFF_BASE_SECONDS"),
    ("SQS_BATCH_BACKOFF_CAP_SECONDS", "BACKOFF_CAP_SECONDS"),
    ("SQS_BATCH_MAX_RECEIVE_COUNT", "MAX_RECEIVE_COUNT"),
    ("SQS_BATCH_RETRY_SURVIVAL_HOURS", "RETRY_SURVIVAL_HOURS"),
    ("SQS_BATCH_MOVE_POISON_TO_DLQ", "MOVE_POISON_TO_DLQ"),
    (
        "SQS_BATCH_WORKER_VISIBILITY_EXTENSION_SECONDS",
        "WORKER_VISIBILITY_EXTENSION_SECONDS",
    ),
    (
        "SQS_BATCH_WORKER_METRICS_INTERVAL_SECONDS",
        "WORKER_METRICS_INTERVAL_SECONDS",
    ),
    (
        "SQS_BATCH_WORKER_WAIT_TIME_SECONDS",
        "WORKER_WAIT_TIME_SECONDS",
    ),
    ("SQS_BATCH_WORKER_MAX_MESSAGES", "WORKER_MAX_MESSAGES"),
    (
        "SQS_BATCH_WORKER_RECEIVES_IN_FLIGHT",
        "WORKER_RECEIVES_IN_FLIGHT",
    ),
    (
        "SQS_BATCH_WORKER_BATCH_TIMEOUT_SECONDS",
        "WORKER_BATCH_TIMEOUT_SECONDS",
    ),
    (
        "SQS_BATCH_WORKER_DRAIN_TIMEOUT_SECONDS",
        "WORKER_DRAIN_TIMEOUT_SECONDS",
    ),
];

/// `env`, where a variable of this crate's that is unset under its name is read under its name
/// before 0.2, with a warning naming both. For an application that reads one of the crate's
/// variables itself (the same value the crate's `from_env`s read).
///
/// ```
/// use sqs_batch::lambda_kit::Env;
///
/// let before = Env::new(|name| (name == "MAX_CONCURRENCY").then(|| "4".to_owned()));
/// let env = sqs_batch::with_old_names(&before);
/// assert_eq!(env.ranged("SQS_BATCH_MAX_CONCURRENCY", 16, 1, 1_000), Ok(4));
/// ```
pub fn with_old_names<'a>(env: &'a Env<'_>) -> Env<'a> {
    Env::new(move |name| {
        env.text(name).or_else(|| {
            let (_, old) = RENAMED.iter().find(|(new, _)| *new == name)?;
            let value = env.text(old)?;
            tracing::warn!(
                variable = *old,
                renamed = name,
                "a setting read under its name before sqs-batch 0.2, which 0.3 will not read: \
                 rename it"
            );
            Some(value)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The new name wins; the old one is read only where the new one is unset; a name of
    /// another's is never taken for one of ours.
    #[test]
    fn an_old_name_is_read_only_where_the_new_one_is_unset() {
        let set = |pairs: &'static [(&'static str, &'static str)]| {
            Env::new(move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            })
        };
        let both = set(&[("MAX_CONCURRENCY", "4"), ("SQS_BATCH_MAX_CONCURRENCY", "8")]);
        assert_eq!(
            with_old_names(&both)
                .text("SQS_BATCH_MAX_CONCURRENCY")
                .as_deref(),
            Some("8")
        );
        let old = set(&[("WORKER_MAX_MESSAGES", "5")]);
        assert_eq!(
            with_old_names(&old)
                .text("SQS_BATCH_WORKER_MAX_MESSAGES")
                .as_deref(),
            Some("5")
        );
        assert_eq!(with_old_names(&old).text("MAX_MESSAGES"), None);
        for (new, old) in RENAMED {
            assert_eq!(new.strip_prefix("SQS_BATCH_"), Some(old));
        }
    }
}
