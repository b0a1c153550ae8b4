//! The payment API key: none, a fixed value (`PAYMENT_API_KEY`, local use), or read from a
//! secret store (`PAYMENT_API_KEY_SECRET`).
//!
//! A stored key is read on first use, not at start-up, so a cold start pays no network call; it
//! is then kept for the container. When the provider refuses it (401 or 403) it is read again, at
//! most once per invocation, and the refused call is retried once with what was read: a rotation
//! heals within one invocation, without a redeploy and without DLQ traffic.
//!
//! The value never reaches a log, an error message or a metric: [`Secret`] prints as `***`, the
//! header is marked sensitive, and the errors below say what is wrong without quoting it.

pub mod secrets_manager;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use reqwest::header::HeaderValue;

use super::PaymentError;

/// A secret that never shows in `Debug` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key; it is never printed.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The key itself, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Where the key comes from, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySetting {
    /// No `Authorization` header.
    None,
    /// `PAYMENT_API_KEY`: fixed for the container's life.
    Value(Secret),
    /// `PAYMENT_API_KEY_SECRET`: an AWS Secrets Manager secret's ARN or name.
    SecretsManager {
        /// The secret's ARN or name.
        secret_id: String,
    },
}

impl KeySetting {
    /// `PAYMENT_API_KEY` or `PAYMENT_API_KEY_SECRET`; both at once is refused, since which one
    /// is meant cannot be guessed.
    pub fn from_env(env: &lambda_kit::Env<'_>) -> Result<Self, super::SettingsError> {
        Ok(
            match (
                env.text("PAYMENT_API_KEY"),
                env.text("PAYMENT_API_KEY_SECRET"),
            ) {
                (Some(_), Some(_)) => return Err(super::SettingsError::TwoKeys),
                (Some(value), None) => Self::Value(Secret::new(value)),
                (None, Some(secret_id)) => Self::SecretsManager {
                    secret_id: secret_id.trim().to_owned(),
                },
                (None, None) => Self::None,
            },
        )
    }
}

/// A key as read from its store.
#[derive(Debug)]
pub struct Fetched {
    /// The key.
    pub value: Secret,
    /// The store's version of the value, for the log (it tells a rotation from a re-read).
    pub version: Option<String>,
}

/// Why the key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The store did not answer in time, throttled us, or failed on its side: try again later.
    #[error("the payment API key could not be read now: {reason}")]
    Unavailable {
        /// What happened, for people.
        reason: String,
        /// The store's error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The store refused: access denied, no such secret, a key it cannot decrypt with. Only a
    /// change of the deployment or of the secret fixes it.
    #[error("the payment API key's secret cannot be read: {reason}")]
    Refused {
        /// What happened, for people.
        reason: String,
        /// The store's error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The value is neither a plain key nor JSON with a string `api_key`.
    #[error(
        "the payment API key's secret holds neither a plain key nor a JSON object with a non-empty \
         string \"api_key\" ({0})"
    )]
    Malformed(&'static str),
}

impl KeyError {
    /// What the record's decision makes of it: nothing was sent either way. A refusal or a bad
    /// value is our configuration (RETRY later, the `PaymentConfigErrors` metric and its alarm);
    /// an unavailable store is a plain RETRY.
    fn failure(&self) -> Failure {
        Failure {
            configuration: !matches!(self, Self::Unavailable { .. }),
            reason: lambda_kit::error_chain(self),
        }
    }
}

/// A failed read, remembered for the rest of the invocation so the other records do not ask
/// again.
#[derive(Debug, Clone)]
struct Failure {
    configuration: bool,
    reason: String,
}

impl Failure {
    fn to_payment_error(&self) -> PaymentError {
        if self.configuration {
            PaymentError::Misconfigured {
                status: None,
                reason: self.reason.clone(),
            }
        } else {
            PaymentError::NotSent {
                reason: self.reason.clone(),
                source: None,
            }
        }
    }
}

/// What the logs show for a key: that one is set, never which (its version tells them apart).
const REDACTED: &str = "***";

/// A boxed future: a read happens once per container or rotation, so its allocation is nothing.
pub type FetchFuture<'a> = Pin<Box<dyn Future<Output = Result<Fetched, KeyError>> + Send + 'a>>;

/// A place the key is read from.
pub trait KeySource: Send + Sync + fmt::Debug {
    /// The key's current value.
    fn fetch(&self) -> FetchFuture<'_>;

    /// What to call the source in logs (a secret's ARN or name, never its value).
    fn name(&self) -> &str;
}

/// Reads a secret's value: a plain key, or a JSON object with a string `api_key` (the usual
/// shape of a Secrets Manager secret with several fields). Surrounding whitespace is dropped; a
/// value still containing whitespace or control characters cannot be a header and is refused.
pub fn parse_secret_value(value: &str) -> Result<Secret, KeyError> {
    let value = value.trim();
    // A value that opens like JSON is read as JSON: a key never starts with these.
    let key = if value.starts_with(['{', '[', '"']) {
        let json: serde_json::Map<String, serde_json::Value> = serde_json::from_str(value)
            .map_err(|_| KeyError::Malformed("JSON that is not an object"))?;
        match json.get("api_key") {
            Some(serde_json::Value::String(key)) => key.trim().to_owned(),
            Some(_) => return Err(KeyError::Malformed("\"api_key\" is not a string")),
            None => return Err(KeyError::Malformed("JSON without \"api_key\"")),
        }
    } else {
        value.to_owned()
    };
    if key.is_empty() {
        return Err(KeyError::Malformed("empty"));
    }
    if key.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(KeyError::Malformed("whitespace or control characters"));
    }
    Ok(Secret(key))
}

/// The `Authorization` header for a key, marked sensitive so no debug output shows it.
fn bearer(key: &Secret) -> Result<HeaderValue, KeyError> {
    let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
        .map_err(|_| KeyError::Malformed("not a valid HTTP header value"))?;
    value.set_sensitive(true);
    Ok(value)
}

/// The header a call is sent with. Compared by identity to tell which value a refusal was for.
#[derive(Debug)]
pub struct Authorization {
    /// The `Authorization` header built from it.
    pub header: HeaderValue,
    version: Option<String>,
}

/// The key as the gateway uses it. Built once per container.
#[derive(Debug)]
pub struct ApiKey(Kind);

#[derive(Debug)]
enum Kind {
    None,
    Fixed(Arc<Authorization>),
    Stored(Box<Stored>),
}

#[derive(Debug)]
struct Stored {
    source: Box<dyn KeySource>,
    /// The key in use; read without waiting on every call.
    current: RwLock<Option<Arc<Authorization>>>,
    /// One read at a time: the records that need the key wait for the one read in progress
    /// instead of each asking the store.
    reads: tokio::sync::Mutex<ReadState>,
    /// Counts invocations, so "once per invocation" needs no reset of the state itself.
    invocation: AtomicU64,
    /// Reads after a refusal, taken by the metrics.
    refreshes: AtomicU64,
    /// A bad value is logged once per container, not once per invocation.
    malformed_logged: AtomicBool,
}

#[derive(Debug, Default)]
struct ReadState {
    /// The invocation that read the key again after a refusal.
    refreshed_in: Option<u64>,
    /// The invocation whose read failed, and how.
    failed_in: Option<(u64, Failure)>,
}

/// Why the key's setting cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeySetupError {
    /// The key cannot be an HTTP header value.
    #[error("PAYMENT_API_KEY is not a valid header value")]
    InvalidValue,
    /// The key is in Secrets Manager and no AWS configuration was loaded.
    #[error("PAYMENT_API_KEY_SECRET needs the AWS SDK configuration")]
    NoSdk,
}

impl ApiKey {
    /// No key: requests go without `Authorization`.
    pub fn none() -> Self {
        Self(Kind::None)
    }

    /// The key a setting names. A secret is read through a client on `sdk`, built at the
    /// first read.
    pub fn from_setting(
        setting: &KeySetting,
        sdk: Option<&aws_config::SdkConfig>,
    ) -> Result<Self, KeySetupError> {
        match (setting, sdk) {
            (KeySetting::None, _) => Ok(Self::none()),
            (KeySetting::Value(key), _) => Self::fixed(key),
            (KeySetting::SecretsManager { secret_id }, Some(sdk)) => Ok(Self::stored(Box::new(
                secrets_manager::SecretsManagerKey::new(sdk.clone(), secret_id.as_str()),
            ))),
            (KeySetting::SecretsManager { .. }, None) => Err(KeySetupError::NoSdk),
        }
    }

    /// A fixed key (`PAYMENT_API_KEY`).
    pub fn fixed(key: &Secret) -> Result<Self, KeySetupError> {
        let header = bearer(key).map_err(|_| KeySetupError::InvalidValue)?;
        Ok(Self(Kind::Fixed(Arc::new(Authorization {
            header,
            version: None,
        }))))
    }

    /// A key read from `source` on first use, and again when the provider refuses it.
    pub fn stored(source: Box<dyn KeySource>) -> Self {
        Self(Kind::Stored(Box::new(Stored {
            source,
            current: RwLock::new(None),
            reads: tokio::sync::Mutex::new(ReadState::default()),
            invocation: AtomicU64::new(0),
            refreshes: AtomicU64::new(0),
            malformed_logged: AtomicBool::new(false),
        })))
    }

    /// Starts an invocation: a refused key may be read again once more.
    pub fn new_invocation(&self) {
        if let Kind::Stored(stored) = &self.0 {
            stored.invocation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reads after a refusal since the last call (for the metrics).
    pub fn take_refreshes(&self) -> u64 {
        match &self.0 {
            Kind::Stored(stored) => stored.refreshes.swap(0, Ordering::Relaxed),
            _ => 0,
        }
    }

    /// The key to send, read from its store on first use. A read that failed this invocation is
    /// not tried again before the next one.
    pub async fn current(&self) -> Result<Option<Arc<Authorization>>, PaymentError> {
        let stored = match &self.0 {
            Kind::None => return Ok(None),
            Kind::Fixed(authorization) => return Ok(Some(Arc::clone(authorization))),
            Kind::Stored(stored) => stored,
        };
        if let Some(current) = stored.current() {
            return Ok(Some(current));
        }
        let mut state = stored.reads.lock().await;
        // Read by the record this one waited for.
        if let Some(current) = stored.current() {
            return Ok(Some(current));
        }
        let invocation = stored.invocation.load(Ordering::Relaxed);
        if let Some((failed_in, failure)) = &state.failed_in
            && *failed_in == invocation
        {
            return Err(failure.to_payment_error());
        }
        match stored.read().await {
            Ok(authorization) => {
                tracing::info!(
                    secret = stored.source.name(),
                    version = authorization.version.as_deref(),
                    api_key = REDACTED,
                    "payment API key read"
                );
                Ok(Some(authorization))
            }
            Err(e) => Err(stored.failed(&mut state, invocation, &e)),
        }
    }

    /// The provider refused `refused`: the key to retry with, read again from its store at most
    /// once per invocation. `None`: nothing new to try (a fixed key, or already read again this
    /// invocation); the refusal stands.
    pub async fn refresh(
        &self,
        refused: &Arc<Authorization>,
        status: u16,
    ) -> Result<Option<Arc<Authorization>>, PaymentError> {
        let Kind::Stored(stored) = &self.0 else {
            return Ok(None);
        };
        let mut state = stored.reads.lock().await;
        // Another record read it again meanwhile: retry with that.
        if let Some(current) = stored.current()
            && !Arc::ptr_eq(&current, refused)
        {
            return Ok(Some(current));
        }
        let invocation = stored.invocation.load(Ordering::Relaxed);
        if state.refreshed_in == Some(invocation) {
            return Ok(None);
        }
        state.refreshed_in = Some(invocation);
        stored.refreshes.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            status,
            secret = stored.source.name(),
            refused_version = refused.version.as_deref(),
            "the provider refused the payment API key: reading the secret again"
        );
        match stored.read().await {
            Ok(fresh) => {
                let changed = fresh.header != refused.header;
                tracing::info!(
                    secret = stored.source.name(),
                    version = fresh.version.as_deref(),
                    api_key = REDACTED,
                    changed,
                    "payment API key read again"
                );
                Ok(Some(fresh))
            }
            Err(e) => Err(stored.failed(&mut state, invocation, &e)),
        }
    }
}

impl Stored {
    fn current(&self) -> Option<Arc<Authorization>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads the key and makes it the current one.
    async fn read(&self) -> Result<Arc<Authorization>, KeyError> {
        let fetched = self.source.fetch().await?;
        let authorization = Arc::new(Authorization {
            header: bearer(&fetched.value)?,
            version: fetched.version,
        });
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::clone(&authorization));
        Ok(authorization)
    }

    /// Remembers a failed read for the invocation, logs it, and says what it means for the
    /// record.
    fn failed(&self, state: &mut ReadState, invocation: u64, error: &KeyError) -> PaymentError {
        let failure = error.failure();
        let first_bad_value = matches!(error, KeyError::Malformed(_))
            && !self.malformed_logged.swap(true, Ordering::Relaxed);
        if first_bad_value {
            tracing::error!(
                secret = self.source.name(),
                error = %failure.reason,
                "the payment API key's secret is unusable: fix its value"
            );
        } else if !matches!(error, KeyError::Malformed(_)) {
            tracing::warn!(
                secret = self.source.name(),
                configuration = failure.configuration,
                error = %failure.reason,
                "the payment API key could not be read"
            );
        }
        let payment_error = failure.to_payment_error();
        state.failed_in = Some((invocation, failure));
        payment_error
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    /// A store whose value the test sets; counts its reads.
    #[derive(Debug, Default)]
    struct Values {
        value: Mutex<Option<String>>,
        reads: AtomicUsize,
    }

    #[derive(Debug, Clone, Default)]
    struct Source(Arc<Values>);

    impl Source {
        fn set(&self, value: Option<&str>) {
            *self.0.value.lock().unwrap() = value.map(str::to_owned);
        }

        fn reads(&self) -> usize {
            self.0.reads.load(Ordering::SeqCst)
        }
    }

    impl KeySource for Source {
        fn fetch(&self) -> FetchFuture<'_> {
            Box::pin(async move {
                self.0.reads.fetch_add(1, Ordering::SeqCst);
                // Long enough for concurrent callers to pile up behind the read.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                match self.0.value.lock().unwrap().clone() {
                    Some(value) => Ok(Fetched {
                        value: parse_secret_value(&value)?,
                        version: Some(format!("v-{value}")),
                    }),
                    None => Err(KeyError::Unavailable {
                        reason: "throttled".into(),
                        source: None,
                    }),
                }
            })
        }

        fn name(&self) -> &str {
            "test-secret"
        }
    }

    fn header(a: &Option<Arc<Authorization>>) -> &str {
        a.as_ref().unwrap().header.to_str().unwrap()
    }

    #[test]
    fn a_secret_is_a_plain_key_or_json_with_api_key() {
        let ok = |v: &str| parse_secret_value(v).map(|s| s.expose().to_owned()).ok();
        assert_eq!(ok("sk_live_1").as_deref(), Some("sk_live_1"));
        assert_eq!(ok("  sk_live_1\n").as_deref(), Some("sk_live_1"));
        assert_eq!(
            ok(r#"{"api_key": "sk_live_2", "url": "x"}"#).as_deref(),
            Some("sk_live_2")
        );
        for bad in [
            "",
            "  ",
            "two words",
            "{not json",
            r#"{"apiKey": "sk"}"#,
            r#"{"api_key": 42}"#,
            r#"{"api_key": ""}"#,
            r#"["sk"]"#,
        ] {
            let Err(e) = parse_secret_value(bad) else {
                panic!("{bad:?} accepted")
            };
            assert!(matches!(e, KeyError::Malformed(_)), "{bad:?}: {e}");
            // The message says what is wrong, never the value.
            assert!(!e.to_string().contains("sk"), "{e}");
        }
    }

    #[tokio::test]
    async fn the_key_is_read_once_for_concurrent_first_calls_and_kept() {
        let source = Source::default();
        source.set(Some("sk_1"));
        let key = ApiKey::stored(Box::new(source.clone()));
        assert_eq!(source.reads(), 0, "nothing is read before the first call");
        let (a, b, c) = tokio::join!(key.current(), key.current(), key.current());
        for got in [a, b, c] {
            assert_eq!(header(&got.unwrap()), "Bearer sk_1");
        }
        key.new_invocation();
        key.current().await.unwrap();
        assert_eq!(source.reads(), 1);
    }

    #[tokio::test]
    async fn a_refused_key_is_read_again_once_per_invocation() {
        let source = Source::default();
        source.set(Some("sk_old"));
        let key = ApiKey::stored(Box::new(source.clone()));
        let old = key.current().await.unwrap().unwrap();
        source.set(Some("sk_new"));
        // Three records refused at once: one read, and all retry with the new key.
        let (a, b, c) = tokio::join!(
            key.refresh(&old, 401),
            key.refresh(&old, 401),
            key.refresh(&old, 403)
        );
        for got in [a, b, c] {
            assert_eq!(header(&got.unwrap()), "Bearer sk_new");
        }
        assert_eq!(source.reads(), 2);
        assert_eq!(key.take_refreshes(), 1);
        // Refused again in the same invocation: no more reads, the refusal stands.
        let new = key.current().await.unwrap().unwrap();
        assert!(key.refresh(&new, 401).await.unwrap().is_none());
        assert_eq!(source.reads(), 2);
        // The next invocation may read again.
        key.new_invocation();
        source.set(Some("sk_newer"));
        let again = key.refresh(&new, 401).await.unwrap();
        assert_eq!(header(&again), "Bearer sk_newer");
        assert_eq!(source.reads(), 3);
    }

    #[tokio::test]
    async fn a_failed_read_is_not_repeated_within_the_invocation() {
        let source = Source::default();
        let key = ApiKey::stored(Box::new(source.clone()));
        for _ in 0..3 {
            match key.current().await {
                Err(PaymentError::NotSent { reason, .. }) => {
                    assert!(reason.contains("throttled"), "{reason}")
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(source.reads(), 1);
        key.new_invocation();
        source.set(Some("{\"api_key\": 7}"));
        match key.current().await {
            Err(PaymentError::Misconfigured { status: None, .. }) => {}
            other => panic!("{other:?}"),
        }
        key.new_invocation();
        source.set(Some("sk_fixed"));
        assert_eq!(header(&key.current().await.unwrap()), "Bearer sk_fixed");
        assert_eq!(source.reads(), 3);
    }

    #[tokio::test]
    async fn a_fixed_key_is_never_refreshed() {
        let key = ApiKey::fixed(&Secret::new("sk_fixed")).unwrap();
        let current = key.current().await.unwrap().unwrap();
        assert!(current.header.is_sensitive());
        assert!(key.refresh(&current, 401).await.unwrap().is_none());
        assert!(ApiKey::none().current().await.unwrap().is_none());
        assert!(ApiKey::fixed(&Secret::new("bad\nkey")).is_err());
    }
}
