//! Configuration: one typed struct, read from the environment once at start-up.
//!
//! A bad value stops start-up with a message naming the variable; nothing fails later mid-batch.

use std::num::NonZeroUsize;
use std::str::FromStr;
use std::time::Duration;

use crate::aws::SdkSettings;
use crate::backoff::{BackoffPolicy, MAX_VISIBILITY_S};
use crate::batch::{BatchOptions, FifoScope};
use crate::idempotency::LeasePolicy;
use crate::metrics::MetricsSettings;
use crate::payment::http::{HttpSettings, Secret};

/// Every variable the function reads, with its default (None: no default, optional).
/// The README's configuration table and the template tests use this list.
pub const VARIABLES: &[(&str, Option<&str>)] = &[
    ("IDEMPOTENCY_TABLE", None),
    ("IDEMPOTENCY_LEASE_SECONDS", Some("300")),
    ("IDEMPOTENCY_LEASE_MARGIN_MS", Some("5000")),
    ("IDEMPOTENCY_RETENTION_DAYS", Some("18")),
    ("MAX_CONCURRENCY", Some("16")),
    ("FIFO_SCOPE", Some("batch")),
    ("DEADLINE_MARGIN_MS", Some("5000")),
    ("PROCESS_ORDERS_LOCAL", None),
    ("DYNAMODB_MAX_ATTEMPTS", Some("3")),
    ("DYNAMODB_ATTEMPT_TIMEOUT_MS", Some("1000")),
    ("DYNAMODB_OPERATION_TIMEOUT_MS", Some("3000")),
    ("PAYMENT_API_URL", None),
    ("PAYMENT_API_KEY", None),
    ("PAYMENT_CONNECT_TIMEOUT_MS", Some("1000")),
    ("PAYMENT_TIMEOUT_MS", Some("5000")),
    ("PAYMENT_KEY_WINDOW_SECONDS", Some("86400")),
    ("VISIBILITY_BACKOFF", Some("false")),
    ("BACKOFF_BASE_SECONDS", Some("5")),
    ("BACKOFF_CAP_SECONDS", Some("900")),
    ("METRICS_ENABLED", Some("true")),
    ("CLAIM_CHECK_BUCKET", None),
    ("CLAIM_CHECK_MAX_BYTES", Some("10485760")),
    ("METRICS_NAMESPACE", Some("ProcessOrders")),
];

/// The least `DEADLINE_MARGIN_MS` and `IDEMPOTENCY_LEASE_MARGIN_MS` may be: below it a record can
/// run into the deadline, or a lease end before its holder's last write.
pub const MIN_MARGIN_MS: u64 = 1_000;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{var}={value:?} is invalid: {expected}")]
    Invalid {
        var: &'static str,
        value: String,
        expected: String,
    },
    #[error(
        "PAYMENT_API_URL must be set inside Lambda (AWS_LAMBDA_FUNCTION_NAME is set): the \
         simulated gateway charges nobody (PROCESS_ORDERS_LOCAL=1 allows it under a local emulator)"
    )]
    PaymentUrlRequiredInLambda,
    #[error("BACKOFF_BASE_SECONDS ({base}) must not exceed BACKOFF_CAP_SECONDS ({cap})")]
    BackoffBaseAboveCap { base: u64, cap: u64 },
    #[error(
        "AWS_REGION (or AWS_DEFAULT_REGION) must be set when IDEMPOTENCY_TABLE or CLAIM_CHECK_BUCKET is set or VISIBILITY_BACKOFF is on"
    )]
    RegionRequired,
    #[error(
        "IDEMPOTENCY_TABLE must be set inside Lambda (AWS_LAMBDA_FUNCTION_NAME is set): \
         the in-memory store protects one container only (PROCESS_ORDERS_LOCAL=1 allows it \
         under a local emulator)"
    )]
    TableRequiredInLambda,
    #[error(
        "CLAIM_CHECK_BUCKET is set, but this build has no claim check: build with --features s3-claim-check"
    )]
    ClaimCheckNotBuilt,
    #[error(
        "IDEMPOTENCY_LEASE_SECONDS ({lease_ms} ms) must exceed the longest a record can hold its \
         claim, {longest_record_ms} ms (2 x DYNAMODB_OPERATION_TIMEOUT_MS + 2 x PAYMENT_TIMEOUT_MS): \
         a shorter lease lets another consumer take the order over while its charge is running"
    )]
    LeaseTooShort {
        lease_ms: u64,
        longest_record_ms: u64,
    },
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// DynamoDB table for idempotency; `None` selects the in-memory store (local only).
    pub idempotency_table: Option<String>,
    pub lease: LeasePolicy,
    /// How long a key is remembered after its work: queue retention plus the DLQ redrive window.
    pub retention: Duration,
    pub batch: BatchOptions,
    /// Retry and timeout bounds for DynamoDB calls.
    pub dynamodb: SdkSettings,
    /// The HTTP payment gateway; `None` selects the simulated one (local only).
    pub payment: Option<HttpSettings>,
    /// How long the payment provider remembers an idempotency key after its first use.
    pub payment_key_window: Duration,
    /// Visibility backoff for reported records; `None` when off.
    pub backoff: Option<BackoffPolicy>,
    /// Running inside Lambda (`AWS_LAMBDA_FUNCTION_NAME` set).
    pub in_lambda: bool,
    /// CloudWatch EMF metrics, one document per invocation; `None` when off.
    pub metrics: Option<MetricsSettings>,
    /// Claim check through S3; `None` when off.
    pub claim_check: Option<ClaimCheckSettings>,
}

/// Where claim-check payloads live and how large one may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimCheckSettings {
    pub bucket: String,
    pub max_bytes: u64,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads configuration through `lookup`, so tests need not touch the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = Env(&lookup);
        let idempotency_table = env.text("IDEMPOTENCY_TABLE");
        let in_lambda = env.text("AWS_LAMBDA_FUNCTION_NAME").is_some();
        // A local Runtime API emulator (cargo lambda watch) sets AWS_LAMBDA_FUNCTION_NAME too;
        // this explicit flag is the only way to run the in-memory store there.
        let local = match env.text("PROCESS_ORDERS_LOCAL").as_deref() {
            None | Some("0" | "false") => false,
            Some("1" | "true") => true,
            Some(v) => return Err(invalid("PROCESS_ORDERS_LOCAL", v, "1/true or 0/false")),
        };
        if in_lambda && !local && idempotency_table.is_none() {
            return Err(ConfigError::TableRequiredInLambda);
        }
        let backoff = match env.text("VISIBILITY_BACKOFF").as_deref() {
            None | Some("0" | "false") => None,
            Some("1" | "true") => {
                let base = env.ranged("BACKOFF_BASE_SECONDS", 5, 0, MAX_VISIBILITY_S)?;
                let cap = env.ranged("BACKOFF_CAP_SECONDS", 900, 0, MAX_VISIBILITY_S)?;
                if base > cap {
                    return Err(ConfigError::BackoffBaseAboveCap { base, cap });
                }
                Some(BackoffPolicy {
                    base_s: base,
                    cap_s: cap,
                })
            }
            Some(v) => return Err(invalid("VISIBILITY_BACKOFF", v, "true/1 or false/0")),
        };
        let region = env
            .text("AWS_REGION")
            .or_else(|| env.text("AWS_DEFAULT_REGION"));
        if (idempotency_table.is_some() || backoff.is_some()) && region.is_none() {
            return Err(ConfigError::RegionRequired);
        }
        let dynamodb = SdkSettings {
            max_attempts: env.ranged("DYNAMODB_MAX_ATTEMPTS", 3, 1, 10)?,
            attempt_timeout: Duration::from_millis(env.ranged(
                "DYNAMODB_ATTEMPT_TIMEOUT_MS",
                1_000,
                50,
                60_000,
            )?),
            operation_timeout: Duration::from_millis(env.ranged(
                "DYNAMODB_OPERATION_TIMEOUT_MS",
                3_000,
                50,
                300_000,
            )?),
        };
        let payment = match env.text("PAYMENT_API_URL") {
            None if in_lambda && !local => return Err(ConfigError::PaymentUrlRequiredInLambda),
            None => None,
            Some(raw) => Some(HttpSettings {
                base_url: parse_http_url(&raw)?,
                api_key: env.text("PAYMENT_API_KEY").map(Secret::new),
                connect_timeout: Duration::from_millis(env.ranged(
                    "PAYMENT_CONNECT_TIMEOUT_MS",
                    1_000,
                    10,
                    60_000,
                )?),
                timeout: Duration::from_millis(env.ranged(
                    "PAYMENT_TIMEOUT_MS",
                    5_000,
                    10,
                    300_000,
                )?),
            }),
        };
        // A provider's key window, in seconds, 30 days at most. Shorter than the provider's is
        // only more careful (the tests use seconds); longer would resend a charge blindly.
        let key_window_s: u64 = env.ranged("PAYMENT_KEY_WINDOW_SECONDS", 86_400, 1, 2_592_000)?;
        let lease_s: u64 = env.ranged("IDEMPOTENCY_LEASE_SECONDS", 300, 1, 43_200)?;
        let lease_margin_ms: u64 =
            env.ranged("IDEMPOTENCY_LEASE_MARGIN_MS", 5_000, MIN_MARGIN_MS, 900_000)?;
        let retention_days: u64 = env.ranged("IDEMPOTENCY_RETENTION_DAYS", 18, 1, 3_650)?;
        let max_concurrency: usize = env.ranged("MAX_CONCURRENCY", 16, 1, 1_000)?;
        let deadline_margin_ms: u64 =
            env.ranged("DEADLINE_MARGIN_MS", 5_000, MIN_MARGIN_MS, 900_000)?;
        let metrics = match env.text("METRICS_ENABLED").as_deref() {
            None | Some("1" | "true") => Some(MetricsSettings {
                namespace: env
                    .text("METRICS_NAMESPACE")
                    .unwrap_or_else(|| "ProcessOrders".to_owned()),
                function_name: env
                    .text("AWS_LAMBDA_FUNCTION_NAME")
                    .unwrap_or_else(|| "process-orders".to_owned()),
            }),
            Some("0" | "false") => None,
            Some(v) => return Err(invalid("METRICS_ENABLED", v, "true/1 or false/0")),
        };
        if let Some(m) = &metrics
            && (m.namespace.len() > 255 || m.namespace.contains(':'))
        {
            return Err(invalid(
                "METRICS_NAMESPACE",
                &m.namespace,
                "at most 255 characters, without ':'",
            ));
        }
        let claim_check = match env.text("CLAIM_CHECK_BUCKET") {
            None => None,
            Some(_) if !cfg!(feature = "s3-claim-check") => {
                return Err(ConfigError::ClaimCheckNotBuilt);
            }
            Some(bucket) => {
                if region.is_none() {
                    return Err(ConfigError::RegionRequired);
                }
                Some(ClaimCheckSettings {
                    bucket,
                    max_bytes: env.ranged(
                        "CLAIM_CHECK_MAX_BYTES",
                        10 * 1024 * 1024,
                        1,
                        1024 * 1024 * 1024,
                    )?,
                })
            }
        };
        let fifo_scope = match env.text("FIFO_SCOPE").as_deref() {
            None => FifoScope::Batch,
            Some(v) if v.eq_ignore_ascii_case("batch") => FifoScope::Batch,
            Some(v) if v.eq_ignore_ascii_case("group") => FifoScope::Group,
            Some(v) => return Err(invalid("FIFO_SCOPE", v, "batch or group")),
        };
        // A claim must outlive the longest a record can hold it: two store calls (claim, then
        // complete / mark / release) and two provider calls (lookup, charge), each at its bound.
        let longest_record_ms = 2 * dynamodb.operation_timeout.as_millis() as u64
            + payment
                .as_ref()
                .map_or(0, |p| 2 * p.timeout.as_millis() as u64);
        if lease_s * 1_000 <= longest_record_ms {
            return Err(ConfigError::LeaseTooShort {
                lease_ms: lease_s * 1_000,
                longest_record_ms,
            });
        }
        Ok(Self {
            idempotency_table,
            lease: LeasePolicy {
                lease_ms: lease_s * 1_000,
                margin_ms: lease_margin_ms,
            },
            retention: Duration::from_secs(retention_days * 86_400),
            batch: BatchOptions {
                max_concurrency: NonZeroUsize::new(max_concurrency).unwrap_or(NonZeroUsize::MIN),
                fifo_scope,
                deadline_margin_ms,
                abandoned_hold_ms: lease_margin_ms,
            },
            dynamodb,
            payment,
            payment_key_window: Duration::from_secs(key_window_s),
            backoff,
            in_lambda,
            metrics,
            claim_check,
        })
    }
}

/// An absolute http(s) URL with a host, without credentials, query or fragment.
fn parse_http_url(raw: &str) -> Result<reqwest::Url, ConfigError> {
    // The message never repeats the value: a URL may carry a token.
    let bad = |expected: &str| ConfigError::Invalid {
        var: "PAYMENT_API_URL",
        value: "(not shown)".into(),
        expected: expected.to_owned(),
    };
    let url = reqwest::Url::parse(raw.trim())
        .map_err(|e| bad(&format!("an absolute http(s) URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("an http:// or https:// URL with a host"));
    }
    if !url.username().is_empty()
        || url.password().is_some()
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(bad(
            "a URL without credentials, query or fragment (use PAYMENT_API_KEY)",
        ));
    }
    Ok(url)
}

fn invalid(var: &'static str, value: &str, expected: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        var,
        value: value.to_owned(),
        expected: expected.into(),
    }
}

struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Env<'_> {
    /// A set, non-blank value.
    fn text(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// An integer in `[min, max]`, or `default` when unset.
    fn ranged<T>(&self, var: &'static str, default: T, min: T, max: T) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + Copy + std::fmt::Display,
    {
        let Some(raw) = self.text(var) else {
            return Ok(default);
        };
        match raw.trim().parse::<T>() {
            Ok(v) if v >= min && v <= max => Ok(v),
            _ => Err(invalid(
                var,
                &raw,
                format!("an integer from {min} to {max}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Config::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_match_the_documented_table() {
        let c = config(&[]).expect("defaults");
        assert_eq!(c.idempotency_table, None);
        assert_eq!(
            c.lease,
            LeasePolicy {
                lease_ms: 300_000,
                margin_ms: 5_000
            }
        );
        assert_eq!(c.retention, Duration::from_secs(18 * 86_400));
        assert_eq!(c.batch.max_concurrency.get(), 16);
        assert_eq!(c.batch.fifo_scope, FifoScope::Batch);
        assert_eq!(c.batch.deadline_margin_ms, 5_000);
        assert!(!c.in_lambda);
        // The documented defaults are the ones applied.
        for (var, default) in VARIABLES {
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
            ("MAX_CONCURRENCY", "32"),
            ("FIFO_SCOPE", "GROUP"),
            ("DEADLINE_MARGIN_MS", "2500"),
        ])
        .expect("config");
        assert_eq!(c.idempotency_table.as_deref(), Some("orders-idem"));
        assert_eq!(c.batch.max_concurrency.get(), 32);
        assert_eq!(c.batch.fifo_scope, FifoScope::Group);
        assert_eq!(c.batch.deadline_margin_ms, 2_500);
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (var, value) in [
            ("MAX_CONCURRENCY", "0"),
            ("MAX_CONCURRENCY", "many"),
            ("IDEMPOTENCY_LEASE_SECONDS", "-1"),
            ("IDEMPOTENCY_RETENTION_DAYS", "0"),
            ("DEADLINE_MARGIN_MS", "1.5"),
            ("DEADLINE_MARGIN_MS", "0"),
            ("DEADLINE_MARGIN_MS", "999"),
            ("IDEMPOTENCY_LEASE_MARGIN_MS", "0"),
            ("FIFO_SCOPE", "sometimes"),
            ("DYNAMODB_MAX_ATTEMPTS", "0"),
            ("DYNAMODB_OPERATION_TIMEOUT_MS", "10"),
            ("VISIBILITY_BACKOFF", "sometimes"),
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
        assert_eq!(payment.api_key, Some(Secret::new("sk_test")));
        assert_eq!(payment.connect_timeout, Duration::from_millis(1_000));
        assert_eq!(payment.timeout, Duration::from_millis(2_500));
        assert_eq!(config(&[]).expect("defaults").payment, None);
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
            ("VISIBILITY_BACKOFF", "true"),
            ("AWS_REGION", "us-east-1"),
            ("BACKOFF_CAP_SECONDS", "60"),
        ]);
        assert_eq!(
            on.expect("on").backoff,
            Some(BackoffPolicy {
                base_s: 5,
                cap_s: 60
            })
        );
        let err = config(&[
            ("VISIBILITY_BACKOFF", "1"),
            ("AWS_REGION", "r"),
            ("BACKOFF_BASE_SECONDS", "10"),
            ("BACKOFF_CAP_SECONDS", "5"),
        ]);
        assert_eq!(
            err.expect_err("base > cap"),
            ConfigError::BackoffBaseAboveCap { base: 10, cap: 5 }
        );
        assert_eq!(
            config(&[("VISIBILITY_BACKOFF", "1")]).expect_err("no region"),
            ConfigError::RegionRequired
        );
        let twelve_hours = config(&[
            ("VISIBILITY_BACKOFF", "1"),
            ("AWS_REGION", "r"),
            ("BACKOFF_CAP_SECONDS", "43200"),
        ]);
        assert!(
            twelve_hours
                .expect_err("12 h")
                .to_string()
                .starts_with("BACKOFF_CAP_SECONDS")
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
