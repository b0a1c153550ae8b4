//! Configuration: one typed struct, read from the environment once at start-up, composed of each
//! component's own settings (the batch processor's, the idempotency store's, the claim check's)
//! and the function's (payments, metrics, the AWS SDK's bounds).
//!
//! A bad value stops start-up with a message naming the variable; nothing fails later mid-batch.

use std::time::Duration;

use claim_check::ClaimCheckSettings;
use idempotency::{LeasePolicy, StoreSettings};
use lambda_kit::{Env, EnvError};
use sqs_batch::{
    BatchOptions, backoff::BackoffPolicy, backoff::RedriveCheck, recovery::RecoveryPolicy,
};

use crate::aws::SdkSettings;
use crate::metrics::MetricsSettings;
use crate::money::Currency;
use crate::payment::KeySetting;
use crate::payment::http::HttpSettings;

/// The variables the function itself reads (the components' own come from their crates).
const FUNCTION_VARIABLES: &[(&str, Option<&str>)] = &[
    ("PROCESS_ORDERS_LOCAL", None),
    ("AWS_SAM_LOCAL", None),
    ("DYNAMODB_MAX_ATTEMPTS", Some("3")),
    ("DYNAMODB_ATTEMPT_TIMEOUT_MS", Some("1000")),
    ("DYNAMODB_OPERATION_TIMEOUT_MS", Some("3000")),
    ("PAYMENT_API_URL", None),
    ("PAYMENT_API_KEY", None),
    ("PAYMENT_API_KEY_SECRET", None),
    ("PAYMENT_CONNECT_TIMEOUT_MS", Some("1000")),
    ("PAYMENT_TIMEOUT_MS", Some("5000")),
    ("PAYMENT_KEY_WINDOW_SECONDS", Some("86400")),
    ("PAYMENT_LOOKUP_DURABLE", Some("false")),
    ("PAYMENT_RETRYABLE_FAILURES", None),
    ("PAYMENT_CLOCK_SKEW_MS", Some("60000")),
    ("DEFAULT_CURRENCY", Some("EUR")),
    ("SQS_BATCH_MOVE_POISON_TO_DLQ", Some("false")),
    ("METRICS_ENABLED", Some("true")),
    ("POWERTOOLS_METRICS_NAMESPACE", Some("ProcessOrders")),
    ("POWERTOOLS_SERVICE_NAME", Some("process-orders")),
    // Read by the trace layer (src/telemetry.rs), before the configuration.
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None),
];

/// The default `IDEMPOTENCY_KEY_PREFIX`: orders' keys apart from other users of a shared table.
pub const ORDER_KEY_PREFIX: &str = "orders#";

/// How far apart the clocks of the containers and the provider may be, by default
/// (`PAYMENT_CLOCK_SKEW_MS`). Lambda's clocks are NTP-synchronised to milliseconds; a minute is a
/// wide allowance, and it only shortens the part of the key window in which a charge is resent
/// without proof.
pub const CLOCK_SKEW_ALLOWANCE: Duration = Duration::from_secs(60);

/// Every variable the function reads, with its default (None: no default, optional): the
/// components' and its own. The README's configuration table, the docs test and the template
/// tests use it.
pub fn variables() -> Vec<(&'static str, Option<&'static str>)> {
    [
        sqs_batch::VARIABLES,
        idempotency::VARIABLES,
        claim_check::VARIABLES,
        FUNCTION_VARIABLES,
    ]
    .concat()
}

/// Why the function refuses to start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// A variable's value cannot be used.
    #[error(transparent)]
    Invalid(#[from] EnvError),
    /// Inside Lambda the simulated gateway would acknowledge orders nobody charged.
    #[error(
        "PAYMENT_API_URL must be set inside Lambda (AWS_LAMBDA_FUNCTION_NAME is set): the \
         simulated gateway charges nobody (PROCESS_ORDERS_LOCAL=1 allows it under a local emulator)"
    )]
    PaymentUrlRequiredInLambda,
    /// An AWS client is needed and no region is set.
    #[error(
        "AWS_REGION (or AWS_DEFAULT_REGION) must be set when IDEMPOTENCY_TABLE, \
         PAYMENT_API_KEY_SECRET or CLAIM_CHECK_BUCKET is set or SQS_BATCH_VISIBILITY_BACKOFF or \
         SQS_BATCH_MOVE_POISON_TO_DLQ is on"
    )]
    RegionRequired,
    /// Inside Lambda a bearer key would cross the network in clear text.
    #[error(
        "PAYMENT_API_URL must be an https:// URL inside Lambda (AWS_LAMBDA_FUNCTION_NAME is set): \
         the API key is sent with every charge (PROCESS_ORDERS_LOCAL=1 allows http:// under a \
         local emulator)"
    )]
    PlainHttpInLambda,
    /// Two sources for one key: which one is meant cannot be guessed.
    #[error("{}", crate::payment::SettingsError::TwoKeys)]
    TwoPaymentKeys,
    /// Inside Lambda the in-memory store would protect one container only.
    #[error(
        "IDEMPOTENCY_TABLE must be set inside Lambda (AWS_LAMBDA_FUNCTION_NAME is set): \
         the in-memory store protects one container only (PROCESS_ORDERS_LOCAL=1 allows it \
         under a local emulator)"
    )]
    TableRequiredInLambda,
    /// A worker fleet with in-memory stores would charge a duplicate on every other task.
    #[error(
        "IDEMPOTENCY_TABLE must be set for `process-orders worker`: each worker's in-memory store \
         would protect that worker only (PROCESS_ORDERS_LOCAL=1 allows it for a local run)"
    )]
    TableRequiredForWorker,
    /// The claim check is configured in a build without it.
    #[error(
        "CLAIM_CHECK_BUCKET is set, but this build has no claim check: build with --features s3-claim-check"
    )]
    ClaimCheckNotBuilt,
    /// A lease that a record can outlive.
    #[error(
        "IDEMPOTENCY_LEASE_SECONDS ({lease_ms} ms) must exceed the longest a record can hold its \
         claim, {longest_record_ms} ms (2 x DYNAMODB_OPERATION_TIMEOUT_MS + 2 x PAYMENT_TIMEOUT_MS, \
         with PAYMENT_API_KEY_SECRET one more PAYMENT_TIMEOUT_MS and two secret reads of 2 s): a \
         shorter lease lets another consumer take the order over while its charge is running"
    )]
    LeaseTooShort {
        /// The configured lease.
        lease_ms: u64,
        /// Two store calls and two provider calls at their bounds, and with a stored key, two
        /// reads of it and the call retried after a refusal.
        longest_record_ms: u64,
    },
    /// An item that can expire while its message may still come back lets that receive charge
    /// again without a look-up (an order whose charge answer was lost, say).
    #[error(
        "{var}={value} keeps an order's item {retention_s} s, shorter than its message can come \
         back: at least {bound_s} s (SQS_BATCH_RETRY_SURVIVAL_HOURS, the retry schedule's \
         survival, plus PAYMENT_KEY_WINDOW_SECONDS, the provider's key window); an item gone \
         before the last receive lets that receive charge again without a look-up"
    )]
    RetentionTooShort {
        /// The variable that set it (`IDEMPOTENCY_RETENTION_SECONDS` or `_DAYS`).
        var: &'static str,
        /// Its value as given (the default's, when unset).
        value: String,
        /// The retention, seconds.
        retention_s: u64,
        /// The least that is safe, seconds.
        bound_s: u64,
    },
}

impl From<crate::payment::SettingsError> for ConfigError {
    fn from(error: crate::payment::SettingsError) -> Self {
        match error {
            crate::payment::SettingsError::Invalid(e) => Self::Invalid(e),
            crate::payment::SettingsError::TwoKeys => Self::TwoPaymentKeys,
        }
    }
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The idempotency table (`None`: the in-memory store, local only), retention and key prefix.
    pub store: StoreSettings,
    /// How claims are leased.
    pub lease: LeasePolicy,
    /// How batches run.
    pub batch: BatchOptions,
    /// Visibility backoff for reported records; `None` when off.
    pub backoff: Option<BackoffPolicy>,
    /// With the backoff: the probe and the wake while a dependency is down; `None` when off.
    pub recovery: Option<RecoveryPolicy>,
    /// What the deployment expects of its queues' redrive policy (`SQS_BATCH_MAX_RECEIVE_COUNT`,
    /// `SQS_BATCH_RETRY_SURVIVAL_HOURS`), held against each queue's own when it is learned.
    pub redrive: RedriveCheck,
    /// Claim check through S3; `None` when off.
    pub claim_check: Option<ClaimCheckSettings>,
    /// Retry and timeout bounds for DynamoDB calls.
    pub dynamodb: SdkSettings,
    /// The client the store writes through (`DYNAMODB_CLIENT`).
    pub dynamodb_client: crate::aws::DynamoDbClient,
    /// The HTTP payment gateway; `None` selects the simulated one (local only).
    pub payment: Option<HttpSettings>,
    /// How long the payment provider remembers an idempotency key after its first use.
    pub payment_key_window: Duration,
    /// How much of the key window's end is not trusted: the longest a charge takes to reach the
    /// provider after its look-up, plus the clock-skew allowance (`PAYMENT_CLOCK_SKEW_MS`,
    /// [`CLOCK_SKEW_ALLOWANCE`] by default).
    pub payment_key_window_margin: Duration,
    /// `PAYMENT_LOOKUP_DURABLE`: the provider's look-up keeps every charge for good, so its "no
    /// such charge" is proof at any age (docs/design.md, "The payment contract").
    pub payment_lookup_durable: bool,
    /// `DEFAULT_CURRENCY`: the currency of an order whose body names none.
    pub default_currency: Currency,
    /// `SQS_BATCH_MOVE_POISON_TO_DLQ`: a POISON record is sent to its queue's DLQ by the function at its
    /// first receive, with its reason, and acknowledged (docs/operations.md, "Poison and the DLQ").
    pub move_poison: bool,
    /// This function as a moved message names it:
    /// `AWS_LAMBDA_FUNCTION_NAME:AWS_LAMBDA_FUNCTION_VERSION`.
    pub function: String,
    /// CloudWatch EMF metrics, one document per invocation; `None` when off.
    pub metrics: Option<MetricsSettings>,
    /// Running inside Lambda (`AWS_LAMBDA_FUNCTION_NAME` set).
    pub in_lambda: bool,
    /// A local emulator declared itself (`PROCESS_ORDERS_LOCAL=1`, `AWS_SAM_LOCAL`): the
    /// in-memory store and the simulated gateway are allowed where they otherwise are not.
    pub local: bool,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Env::process())
    }

    /// Reads configuration through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        Self::read(&Env::new(lookup))
    }

    fn read(env: &Env<'_>) -> Result<Self, ConfigError> {
        // Each component reads its own settings; this only composes them and checks them
        // against each other. The batch crate's variables are read as it reads them (their
        // names before sqs-batch 0.2 too, with a warning), `SQS_BATCH_MOVE_POISON_TO_DLQ` here.
        let env = &sqs_batch::with_old_names(env);
        let in_lambda = env.text("AWS_LAMBDA_FUNCTION_NAME").is_some();
        // A local Runtime API emulator (cargo lambda watch) sets AWS_LAMBDA_FUNCTION_NAME too;
        // this explicit flag is the only way to run the in-memory store there.
        // `sam local invoke` declares itself: it sets AWS_SAM_LOCAL=true in the container, and an
        // --env-vars file can only override the template's own variables.
        let local = env.flag("PROCESS_ORDERS_LOCAL", false)? || env.flag("AWS_SAM_LOCAL", false)?;
        let deployed = in_lambda && !local;
        // Orders get a prefix of their own, so a table shared with other functions never mixes
        // their keys (an order id `email-once#u-1` is not the email example's user `u-1`).
        let store = StoreSettings::from_env_with_prefix(env, ORDER_KEY_PREFIX)?;
        if deployed && store.table.is_none() {
            return Err(ConfigError::TableRequiredInLambda);
        }
        let backoff = BackoffPolicy::from_env(env)?;
        let recovery = RecoveryPolicy::from_env(env)?;
        let redrive = RedriveCheck::from_env(env)?;
        let claim_check = ClaimCheckSettings::from_env(env)?;
        if claim_check.is_some() && !cfg!(feature = "s3-claim-check") {
            return Err(ConfigError::ClaimCheckNotBuilt);
        }
        let dynamodb = SdkSettings::dynamodb_from_env(env)?;
        let dynamodb_client = crate::aws::DynamoDbClient::from_env(env)?;
        let payment = HttpSettings::from_env(env)?;
        match &payment {
            None if deployed => return Err(ConfigError::PaymentUrlRequiredInLambda),
            Some(p) if deployed && p.base_url.scheme() != "https" => {
                return Err(ConfigError::PlainHttpInLambda);
            }
            _ => {}
        }
        let payment_lookup_durable = env.flag("PAYMENT_LOOKUP_DURABLE", false)?;
        let clock_skew_ms: u64 = env.ranged(
            "PAYMENT_CLOCK_SKEW_MS",
            CLOCK_SKEW_ALLOWANCE.as_millis() as u64,
            0,
            3_600_000,
        )?;
        let default_currency = Currency::from_env(env)?;
        // A provider's key window, in seconds, 30 days at most. Shorter than the provider's is
        // only more careful (the tests use seconds); longer would resend a charge blindly.
        let key_window_s: u64 = env.ranged("PAYMENT_KEY_WINDOW_SECONDS", 86_400, 1, 2_592_000)?;
        let lease = LeasePolicy::from_env(env)?;
        let mut batch = BatchOptions::from_env(env)?;
        // A record abandoned at the deadline may hold its claim until the lease margin is over.
        batch.abandoned_hold_ms = lease.margin_ms;
        let metrics = MetricsSettings::from_env(env)?;
        // A claim must outlive the longest a record can hold it: two store calls (claim, then
        // complete / mark / release) and the provider's calls, each at its bound.
        let longest_record_ms = 2 * dynamodb.operation_timeout.as_millis() as u64
            + payment.as_ref().map_or(0, HttpSettings::longest_calls_ms);
        let charge_reach_ms = payment.as_ref().map_or(0, HttpSettings::charge_reach_ms);
        if lease.lease_ms <= longest_record_ms {
            return Err(ConfigError::LeaseTooShort {
                lease_ms: lease.lease_ms,
                longest_record_ms,
            });
        }
        // A key's item must outlive every receive of its message: the retry schedule keeps a
        // failing record for its survival, and a look-up inside the provider's key window is
        // what an expired item would skip. A copy that went through the DLQ carries its history
        // and is looked up at any age (docs/design.md), so the DLQ's retention is not part of it.
        let bound_s = redrive.survival_hours * 3_600 + key_window_s;
        let retention_s = store.retention.as_secs();
        if retention_s < bound_s {
            let var = if env.text("IDEMPOTENCY_RETENTION_SECONDS").is_some() {
                "IDEMPOTENCY_RETENTION_SECONDS"
            } else {
                "IDEMPOTENCY_RETENTION_DAYS"
            };
            return Err(ConfigError::RetentionTooShort {
                var,
                value: env.text(var).unwrap_or_else(|| "18".to_owned()),
                retention_s,
                bound_s,
            });
        }
        let config = Self {
            store,
            lease,
            batch,
            backoff,
            recovery,
            redrive,
            claim_check,
            dynamodb,
            dynamodb_client,
            payment,
            payment_key_window: Duration::from_secs(key_window_s),
            payment_key_window_margin: Duration::from_millis(charge_reach_ms + clock_skew_ms),
            payment_lookup_durable,
            default_currency,
            move_poison: env.flag("SQS_BATCH_MOVE_POISON_TO_DLQ", false)?,
            function: format!(
                "{}:{}",
                env.text("AWS_LAMBDA_FUNCTION_NAME")
                    .unwrap_or_else(|| "process-orders".to_owned()),
                env.text("AWS_LAMBDA_FUNCTION_VERSION")
                    .unwrap_or_else(|| "$LATEST".to_owned())
            ),
            metrics,
            in_lambda,
            local,
        };
        let region = env
            .text("AWS_REGION")
            .or_else(|| env.text("AWS_DEFAULT_REGION"));
        if config.needs_aws() && region.is_none() {
            return Err(ConfigError::RegionRequired);
        }
        Ok(config)
    }

    /// Whether any AWS client is configured (the table, the visibility backoff, the DLQ moves,
    /// the claim check, a payment key in Secrets Manager): then the SDK's configuration is
    /// loaded at start-up, and a region is required.
    pub fn needs_aws(&self) -> bool {
        let key_in_aws = self
            .payment
            .as_ref()
            .is_some_and(|p| matches!(p.api_key, KeySetting::SecretsManager { .. }));
        self.store.table.is_some()
            || self.backoff.is_some()
            || self.move_poison
            || self.claim_check.is_some()
            || key_in_aws
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payment::Secret;
    use sqs_batch::processor::FifoScope;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    /// A retention shorter than a message's life lets the item of an order whose charge answer
    /// was lost expire between two receives: the next receive finds no item and charges again
    /// without a look-up. Refused at start-up, naming the setting and the bound: the retry
    /// schedule's survival plus the provider's key window.
    #[test]
    fn a_retention_shorter_than_a_messages_life_is_refused() {
        let seconds = config(&[("IDEMPOTENCY_RETENTION_SECONDS", "60")])
            .expect_err("a minute")
            .to_string();
        assert!(
            seconds.starts_with("IDEMPOTENCY_RETENTION_SECONDS=60")
                && seconds.contains("172800")
                && seconds.contains("SQS_BATCH_RETRY_SURVIVAL_HOURS")
                && seconds.contains("PAYMENT_KEY_WINDOW_SECONDS"),
            "{seconds}"
        );
        let days = config(&[("IDEMPOTENCY_RETENTION_DAYS", "1")])
            .expect_err("a day")
            .to_string();
        assert!(days.starts_with("IDEMPOTENCY_RETENTION_DAYS=1"), "{days}");
        assert!(config(&[("IDEMPOTENCY_RETENTION_SECONDS", "172799")]).is_err());
        assert!(config(&[("IDEMPOTENCY_RETENTION_SECONDS", "172800")]).is_ok());
        assert!(config(&[("IDEMPOTENCY_RETENTION_DAYS", "2")]).is_ok());
        let shorter = [
            ("SQS_BATCH_RETRY_SURVIVAL_HOURS", "1"),
            ("PAYMENT_KEY_WINDOW_SECONDS", "3600"),
        ];
        let mut at_bound = shorter.to_vec();
        at_bound.push(("IDEMPOTENCY_RETENTION_SECONDS", "7200"));
        assert!(config(&at_bound).is_ok(), "the bound follows the settings");
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let c = config(&[]).expect("defaults");
        assert_eq!(c.store.table, None);
        assert_eq!(
            c.store.key_prefix, "orders#",
            "orders' keys apart in a shared table"
        );
        assert_eq!(c.lease, LeasePolicy::new(300_000, 5_000));
        assert_eq!(c.store.retention, Duration::from_secs(18 * 86_400));
        assert_eq!(c.batch.max_concurrency.get(), 16);
        assert_eq!(c.batch.fifo_scope, FifoScope::Batch);
        assert_eq!(c.batch.deadline_margin_ms, 5_000);
        assert!(!c.in_lambda);
        // The documented defaults are the ones applied.
        for (var, default) in variables() {
            if let Some(default) = default {
                assert_eq!(config(&[(var, default)]).expect(var), c, "{var}");
            }
        }
    }

    #[test]
    fn values_are_read() {
        let c = config(&[
            ("IDEMPOTENCY_TABLE", "orders-idem"),
            ("AWS_REGION", "us-east-1"),
            ("SQS_BATCH_MAX_CONCURRENCY", "32"),
            ("SQS_BATCH_FIFO_SCOPE", "GROUP"),
            ("SQS_BATCH_DEADLINE_MARGIN_MS", "2500"),
        ])
        .expect("config");
        assert_eq!(c.store.table.as_deref(), Some("orders-idem"));
        assert_eq!(c.batch.max_concurrency.get(), 32);
        assert_eq!(c.batch.fifo_scope, FifoScope::Group);
        assert_eq!(c.batch.deadline_margin_ms, 2_500);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (var, value) in [
            ("SQS_BATCH_MAX_CONCURRENCY", "0"),
            ("SQS_BATCH_MAX_CONCURRENCY", "many"),
            ("IDEMPOTENCY_LEASE_SECONDS", "-1"),
            ("IDEMPOTENCY_RETENTION_DAYS", "0"),
            ("SQS_BATCH_DEADLINE_MARGIN_MS", "1.5"),
            ("SQS_BATCH_DEADLINE_MARGIN_MS", "0"),
            ("SQS_BATCH_DEADLINE_MARGIN_MS", "999"),
            ("IDEMPOTENCY_LEASE_MARGIN_MS", "0"),
            ("SQS_BATCH_FIFO_SCOPE", "sometimes"),
            ("DYNAMODB_MAX_ATTEMPTS", "0"),
            ("DYNAMODB_OPERATION_TIMEOUT_MS", "10"),
            ("SQS_BATCH_VISIBILITY_BACKOFF", "sometimes"),
        ] {
            let err = config(&[(var, value)]).expect_err(var);
            assert!(err.to_string().starts_with(var), "{err}");
        }
    }

    #[test]
    fn a_lease_shorter_than_the_longest_record_stops_start_up() {
        let err = config(&[
            ("IDEMPOTENCY_LEASE_SECONDS", "10"),
            ("PAYMENT_API_URL", "https://pay.example"),
        ])
        .expect_err("10 s < 2 x 3 s + 2 x 5 s");
        assert_eq!(
            err,
            ConfigError::LeaseTooShort {
                lease_ms: 10_000,
                longest_record_ms: 16_000
            }
        );
        assert!(err.to_string().starts_with("IDEMPOTENCY_LEASE_SECONDS"));
        // The simulated gateway takes no time of its own: the store's bound alone counts.
        assert!(config(&[("IDEMPOTENCY_LEASE_SECONDS", "10")]).is_ok());
        assert!(
            config(&[
                ("IDEMPOTENCY_LEASE_SECONDS", "17"),
                ("PAYMENT_API_URL", "https://pay.example"),
            ])
            .is_ok()
        );
    }

    #[test]
    fn a_payment_url_selects_the_http_gateway() {
        let c = config(&[
            ("PAYMENT_API_URL", "https://pay.example/v1"),
            ("PAYMENT_API_KEY", "sk_test"),
            ("PAYMENT_TIMEOUT_MS", "2500"),
        ])
        .expect("config");
        let payment = c.payment.expect("http gateway");
        assert_eq!(payment.base_url.as_str(), "https://pay.example/v1");
        assert_eq!(payment.api_key, KeySetting::Value(Secret::new("sk_test")));
        assert_eq!(payment.connect_timeout, Duration::from_millis(1_000));
        assert_eq!(payment.timeout, Duration::from_millis(2_500));
        assert_eq!(config(&[]).expect("defaults").payment, None);
    }

    #[test]
    fn the_payment_key_comes_from_one_place_only() {
        let url = ("PAYMENT_API_URL", "https://pay.example");
        let secret = (
            "PAYMENT_API_KEY_SECRET",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:pay-AbCdEf",
        );
        let region = ("AWS_REGION", "eu-west-1");
        let c = config(&[url, secret, region]).expect("secret");
        assert_eq!(
            c.payment.expect("http").api_key,
            KeySetting::SecretsManager {
                secret_id: secret.1.to_owned()
            }
        );
        let both = config(&[url, secret, region, ("PAYMENT_API_KEY", "sk_test_SECRET")]);
        let err = both.expect_err("both");
        assert_eq!(err, ConfigError::TwoPaymentKeys);
        assert!(!err.to_string().contains("sk_test"), "{err}");
        assert_eq!(
            config(&[url, secret]).expect_err("no region"),
            ConfigError::RegionRequired
        );
        assert_eq!(
            config(&[url]).expect("none").payment.expect("http").api_key,
            KeySetting::None
        );
        // The secret's reads and the retried call count towards the lease: 2 x 3 s + 3 x 5 s +
        // 2 x 2 s.
        assert_eq!(
            config(&[url, secret, region, ("IDEMPOTENCY_LEASE_SECONDS", "20")]).expect_err("short"),
            ConfigError::LeaseTooShort {
                lease_ms: 20_000,
                longest_record_ms: 25_000
            }
        );
    }

    #[test]
    fn an_invalid_payment_url_stops_start_up_without_echoing_it() {
        for bad in [
            "not a url",
            "ftp://pay.example",
            "https://user:secret@pay.example",
            "https://pay.example/?token=secret",
            "/charges",
        ] {
            let err = config(&[("PAYMENT_API_URL", bad)]).expect_err(bad);
            let text = err.to_string();
            assert!(text.starts_with("PAYMENT_API_URL"), "{text}");
            assert!(!text.contains("secret"), "{text}");
        }
    }

    #[test]
    fn inside_lambda_a_payment_url_is_required() {
        let vars = [
            ("AWS_LAMBDA_FUNCTION_NAME", "f"),
            ("IDEMPOTENCY_TABLE", "t"),
            ("AWS_REGION", "eu-west-1"),
        ];
        assert_eq!(
            config(&vars).expect_err("no url"),
            ConfigError::PaymentUrlRequiredInLambda
        );
    }

    #[test]
    fn visibility_backoff_is_off_unless_asked_for() {
        assert_eq!(config(&[]).expect("defaults").backoff, None);
        let on = config(&[
            ("SQS_BATCH_VISIBILITY_BACKOFF", "true"),
            ("AWS_REGION", "us-east-1"),
            ("SQS_BATCH_BACKOFF_CAP_SECONDS", "60"),
        ]);
        assert_eq!(on.expect("on").backoff, Some(BackoffPolicy::new(5, 60)));
        let err = config(&[
            ("SQS_BATCH_VISIBILITY_BACKOFF", "1"),
            ("AWS_REGION", "r"),
            ("SQS_BATCH_BACKOFF_BASE_SECONDS", "10"),
            ("SQS_BATCH_BACKOFF_CAP_SECONDS", "5"),
        ]);
        assert!(
            err.expect_err("base > cap")
                .to_string()
                .starts_with("SQS_BATCH_BACKOFF_BASE_SECONDS")
        );
        assert_eq!(
            config(&[("SQS_BATCH_VISIBILITY_BACKOFF", "1")]).expect_err("no region"),
            ConfigError::RegionRequired
        );
        let twelve_hours = config(&[
            ("SQS_BATCH_VISIBILITY_BACKOFF", "1"),
            ("AWS_REGION", "r"),
            ("SQS_BATCH_BACKOFF_CAP_SECONDS", "43200"),
        ]);
        assert!(
            twelve_hours
                .expect_err("12 h")
                .to_string()
                .starts_with("SQS_BATCH_BACKOFF_CAP_SECONDS")
        );
    }

    #[test]
    fn a_table_needs_a_region() {
        let err = config(&[("IDEMPOTENCY_TABLE", "t")]).expect_err("no region");
        assert_eq!(err, ConfigError::RegionRequired);
        assert!(err.to_string().contains("AWS_REGION"));
        let c = config(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
        ]);
        assert_eq!(c.expect("region").dynamodb.max_attempts, 3);
    }

    #[test]
    fn inside_lambda_a_table_is_required() {
        let err = config(&[("AWS_LAMBDA_FUNCTION_NAME", "process-orders")]).expect_err("no table");
        assert_eq!(err, ConfigError::TableRequiredInLambda);
        assert!(err.to_string().contains("IDEMPOTENCY_TABLE"));
        let ok = config(&[
            ("AWS_LAMBDA_FUNCTION_NAME", "f"),
            ("IDEMPOTENCY_TABLE", "t"),
            ("AWS_REGION", "eu-west-1"),
            ("PAYMENT_API_URL", "https://pay.example"),
        ])
        .expect("ok");
        assert!(ok.in_lambda);
    }
}
