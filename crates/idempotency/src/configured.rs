//! The store a deployment's settings name (feature `dynamodb`): DynamoDB when
//! `IDEMPOTENCY_TABLE` is set, memory when it is not and the process is not in Lambda, and no
//! store at all when `IDEMPOTENCY_DISABLED=true` on a developer's machine (refused in Lambda and
//! on ECS).

use lambda_kit::{Env, EnvError};

use crate::{
    DynamoDbStore, IdempotencyStore, LeasePolicy, MemoryStore, StoreError, StoreSettings,
    store::Begin, store::ClaimRequest, store::Lease,
};

/// Variables that say the process is one of many consuming the same queue: Lambda, ECS (both
/// metadata versions' variables), and Kubernetes (EKS), which sets its API's address in every
/// pod. Where one is set, a store in one process's memory lets a duplicate delivered to another
/// run again.
const SHARED_RUNTIMES: [&str; 4] = [
    "AWS_LAMBDA_FUNCTION_NAME",
    "ECS_CONTAINER_METADATA_URI_V4",
    "ECS_CONTAINER_METADATA_URI",
    "KUBERNETES_SERVICE_HOST",
];

/// DynamoDB or memory, as [`ConfiguredStore::from_env`] finds them set, with the lease settings
/// (`IDEMPOTENCY_LEASE_SECONDS`, `IDEMPOTENCY_LEASE_MARGIN_MS`) that [`crate::once()`](fn@crate::once) leases its
/// claims by.
///
/// # Example
///
/// ```no_run
/// use idempotency::{ConfiguredStore, Outcome, once};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// // DynamoDB when IDEMPOTENCY_TABLE is set, memory otherwise (refused inside Lambda).
/// let store = ConfiguredStore::from_env().await.unwrap();
/// let sent = once(&store, "u-1", &"welcome", || async { Ok::<_, String>(()) }).await;
/// assert!(matches!(sent, Outcome::Performed(()) | Outcome::Duplicate));
/// # });
/// ```
#[derive(Debug)]
pub struct ConfiguredStore {
    backend: Backend,
    lease: LeasePolicy,
}

#[derive(Debug)]
enum Backend {
    /// `IDEMPOTENCY_TABLE` is unset: one process's memory (local runs, tests).
    Memory(MemoryStore),
    /// `IDEMPOTENCY_TABLE` names the table.
    DynamoDb(DynamoDbStore),
    /// `IDEMPOTENCY_DISABLED=true`: every claim starts, nothing is kept (a local test of the
    /// work alone, as Powertools' `POWERTOOLS_IDEMPOTENCY_DISABLED`).
    Disabled,
}

impl ConfiguredStore {
    /// Reads [`StoreSettings::from_env`] and [`LeasePolicy::from_env`], and builds the store; a
    /// DynamoDB client is built from the SDK's own settings (`AWS_REGION`, `AWS_ENDPOINT_URL`,
    /// ...), once.
    ///
    /// Where many processes consume one queue (Lambda: `AWS_LAMBDA_FUNCTION_NAME`; ECS:
    /// `ECS_CONTAINER_METADATA_URI_V4`; Kubernetes and EKS: `KUBERNETES_SERVICE_HOST`) a missing
    /// table is an error, since each process would keep keys of its own and a duplicate
    /// delivered to another would run again, unless `IDEMPOTENCY_IN_MEMORY=true` says so on
    /// purpose (a local emulator such as `cargo lambda watch`).
    ///
    /// `IDEMPOTENCY_DISABLED=true` (or Powertools' `POWERTOOLS_IDEMPOTENCY_DISABLED`) turns the
    /// store off: every claim starts and nothing is kept, so a duplicate runs again. For a test
    /// of the work alone on a developer's machine; it is refused wherever a missing table is.
    ///
    /// A table with no HTTP client to reach it (the crate built with `dynamodb` but without
    /// `default-https-client`, and no client of the caller's own) is refused here, naming the
    /// feature, not at the first claim.
    pub async fn from_env() -> Result<Self, EnvError> {
        Self::from_env_with(&Env::process()).await
    }

    /// As [`ConfiguredStore::from_env`], with this crate's settings read from `env` (tests:
    /// no process variable to set). The SDK's own settings still come from the process
    /// environment and profile, as `aws-config` loads them; to choose the client too, use
    /// [`ConfiguredStore::from_env_with_client`].
    pub async fn from_env_with(env: &Env<'_>) -> Result<Self, EnvError> {
        Self::build(env, async || {
            // Without an HTTP client even loading the settings can panic (the region's look-up
            // on EC2's metadata service is a request): probed first with a region given and no
            // credentials, which sends nothing.
            let probe = aws_config::defaults(aws_config::BehaviorVersion::latest())
                .region(aws_config::Region::from_static("us-east-1"))
                .no_credentials()
                .load()
                .await;
            probe.http_client()?;
            let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
            Some(aws_sdk_dynamodb::Client::new(&sdk))
        })
        .await
    }

    /// As [`ConfiguredStore::from_env_with`], with the DynamoDB client given (used only when
    /// `env` names a table): a test's client for an embedded server
    /// (`testkit::dynoxide::Dynoxide::client`), or a client configured by hand.
    pub async fn from_env_with_client(
        env: &Env<'_>,
        client: aws_sdk_dynamodb::Client,
    ) -> Result<Self, EnvError> {
        Self::build(env, async || Some(client)).await
    }

    /// The store `env` names, its DynamoDB client (if a table is named) made by `client`, which
    /// answers `None` when it has no HTTP client to make one with.
    async fn build(
        env: &Env<'_>,
        client: impl AsyncFnOnce() -> Option<aws_sdk_dynamodb::Client>,
    ) -> Result<Self, EnvError> {
        let lease = LeasePolicy::from_env(env)?;
        if Self::disabled(env)? {
            return Ok(Self {
                backend: Backend::Disabled,
                lease,
            });
        }
        let mut settings = Self::settings(env)?;
        let backend = match settings.table.take() {
            Some(table) => {
                let client = client()
                    .await
                    .filter(|client| client.config().http_client().is_some());
                let Some(client) = client else {
                    return Err(EnvError::unsupported(
                        "IDEMPOTENCY_TABLE",
                        &table,
                        "an HTTP client for DynamoDB: enable the `default-https-client` feature \
                         of `idempotency`, or give a client of your own \
                         (`ConfiguredStore::from_env_with_client`)",
                    ));
                };
                Backend::DynamoDb(
                    DynamoDbStore::new(client, table, settings.retention)
                        .with_key_prefix(settings.key_prefix),
                )
            }
            None => Backend::Memory(MemoryStore::new(settings.retention)),
        };
        Ok(Self { backend, lease })
    }

    /// Claims in `store`, leased by `lease`: for a function that builds its store by rules of its
    /// own.
    pub fn dynamodb(store: DynamoDbStore, lease: LeasePolicy) -> Self {
        Self {
            backend: Backend::DynamoDb(store),
            lease,
        }
    }

    /// Claims in this process's memory, leased by `lease` (local runs and tests).
    pub fn memory(store: MemoryStore, lease: LeasePolicy) -> Self {
        Self {
            backend: Backend::Memory(store),
            lease,
        }
    }

    /// Whether the claims are kept in DynamoDB (else in this process's memory, or nowhere).
    pub fn is_dynamodb(&self) -> bool {
        matches!(self.backend, Backend::DynamoDb(_))
    }

    /// Whether idempotency is off (`IDEMPOTENCY_DISABLED=true`): every claim starts.
    pub fn is_disabled(&self) -> bool {
        matches!(self.backend, Backend::Disabled)
    }

    /// `IDEMPOTENCY_DISABLED`, refused where a duplicate is real: a switch copied from a test
    /// setup into a deployment must stop it at start-up, not charge twice.
    fn disabled(env: &Env<'_>) -> Result<bool, EnvError> {
        // Powertools' name is honoured too, so a team moving from it keeps its test setup.
        let mut switch = None;
        for var in ["IDEMPOTENCY_DISABLED", "POWERTOOLS_IDEMPOTENCY_DISABLED"] {
            if env.flag(var, false)? {
                switch = Some(var);
                break;
            }
        }
        let Some(switch) = switch else {
            return Ok(false);
        };
        if let Some(deployed) = SHARED_RUNTIMES.iter().find(|var| env.text(var).is_some()) {
            return Err(EnvError::invalid(
                switch,
                "true",
                format!(
                    "unset where {deployed} is set: idempotency is off only on a developer's machine"
                ),
            ));
        }
        Ok(true)
    }

    /// The store's settings, a table or none (memory), checked as [`ConfiguredStore::from_env`]
    /// says.
    fn settings(env: &Env<'_>) -> Result<StoreSettings, EnvError> {
        let settings = StoreSettings::from_env(env)?;
        if settings.table.is_some() {
            return Ok(settings);
        }
        let Some(shared) = SHARED_RUNTIMES.iter().find(|var| env.text(var).is_some()) else {
            return Ok(settings);
        };
        if env.flag("IDEMPOTENCY_IN_MEMORY", false)? {
            return Ok(settings);
        }
        Err(EnvError::invalid(
            "IDEMPOTENCY_TABLE",
            "",
            format!(
                "a table name where {shared} is set (many processes consume one queue there, and \
                 each would keep keys of its own), or IDEMPOTENCY_IN_MEMORY=true to keep them in \
                 this process on purpose (a local emulator)"
            ),
        ))
    }
}

// The DynamoDB arms are boxed: the SDK's futures are kilobytes, and an enum's future is as large
// as its largest arm, so every record's future (moved into the batch's queue) would be too. One
// allocation per network call is nothing next to the call.
impl IdempotencyStore for ConfiguredStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        match &self.backend {
            Backend::Memory(s) => s.begin(request).await,
            Backend::DynamoDb(s) => Box::pin(s.begin(request)).await,
            Backend::Disabled => Ok(Begin::Started {
                lease: Lease {
                    token: crate::store::LeaseToken::new(),
                    until_ms: request.lease_until_ms,
                },
                prior: None,
            }),
        }
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(s) => s.complete(key, lease, now_ms, output).await,
            Backend::DynamoDb(s) => Box::pin(s.complete(key, lease, now_ms, output)).await,
            Backend::Disabled => Ok(()),
        }
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(s) => s.release(key, lease).await,
            Backend::DynamoDb(s) => Box::pin(s.release(key, lease)).await,
            Backend::Disabled => Ok(()),
        }
    }

    fn lease_policy(&self) -> Option<LeasePolicy> {
        Some(self.lease)
    }
}

impl crate::store::EffectStore for ConfiguredStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(s) => s.mark_attempted(key, lease, at_ms).await,
            Backend::DynamoDb(s) => Box::pin(s.mark_attempted(key, lease, at_ms)).await,
            Backend::Disabled => Ok(()),
        }
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(s) => s.reject(key, lease, now_ms, reason).await,
            Backend::DynamoDb(s) => Box::pin(s.reject(key, lease, now_ms, reason)).await,
            Backend::Disabled => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<StoreSettings, EnvError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ConfiguredStore::settings(&Env::new(move |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        }))
    }

    #[test]
    fn a_table_names_dynamodb_and_lambda_without_one_is_refused_unless_memory_is_asked_for() {
        let of_table = settings(&[
            ("IDEMPOTENCY_TABLE", "t"),
            ("AWS_LAMBDA_FUNCTION_NAME", "f"),
        ])
        .unwrap();
        assert_eq!(of_table.table.as_deref(), Some("t"));
        assert_eq!(of_table.key_prefix, "f#");
        let memory = settings(&[("IDEMPOTENCY_RETENTION_DAYS", "2")]).unwrap();
        assert_eq!(memory.table, None);
        assert_eq!(memory.retention, std::time::Duration::from_secs(2 * 86_400));
        let refused = settings(&[("AWS_LAMBDA_FUNCTION_NAME", "f")]).unwrap_err();
        assert!(
            refused.to_string().starts_with("IDEMPOTENCY_TABLE="),
            "{refused}"
        );
        let asked = [
            ("AWS_LAMBDA_FUNCTION_NAME", "f"),
            ("IDEMPOTENCY_IN_MEMORY", "true"),
        ];
        assert_eq!(settings(&asked).unwrap().table, None);
        let bad = [
            ("AWS_LAMBDA_FUNCTION_NAME", "f"),
            ("IDEMPOTENCY_IN_MEMORY", "yes please"),
        ];
        assert!(settings(&bad).is_err());
    }

    /// On ECS or EKS, as in Lambda, many processes consume one queue: a store in one process's
    /// memory would let each run a duplicate again, so a missing table stops start-up there too,
    /// unless memory is asked for by name.
    #[test]
    fn ecs_and_eks_without_a_table_are_refused_unless_memory_is_asked_for() {
        for deployed in [
            "ECS_CONTAINER_METADATA_URI_V4",
            "ECS_CONTAINER_METADATA_URI",
            "KUBERNETES_SERVICE_HOST",
        ] {
            let refused = settings(&[(deployed, "x")])
                .expect_err(deployed)
                .to_string();
            assert!(
                refused.starts_with("IDEMPOTENCY_TABLE=")
                    && refused.contains(deployed)
                    && refused.contains("IDEMPOTENCY_IN_MEMORY"),
                "{refused}"
            );
            let asked = [(deployed, "x"), ("IDEMPOTENCY_IN_MEMORY", "true")];
            assert_eq!(settings(&asked).expect(deployed).table, None);
        }
        assert_eq!(settings(&[]).expect("a developer's machine").table, None);
    }

    fn disabled(vars: &'static [(&'static str, &'static str)]) -> Result<bool, EnvError> {
        ConfiguredStore::disabled(&Env::new(move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }))
    }

    /// The switch works on a developer's machine and is refused where duplicates are real.
    #[test]
    fn idempotency_is_disabled_only_outside_lambda_and_ecs() {
        assert!(!disabled(&[]).unwrap());
        assert!(disabled(&[("IDEMPOTENCY_DISABLED", "true")]).unwrap());
        for deployed in ["AWS_LAMBDA_FUNCTION_NAME", "ECS_CONTAINER_METADATA_URI_V4"] {
            let vars: &'static [(&str, &str)] = match deployed {
                "AWS_LAMBDA_FUNCTION_NAME" => &[
                    ("IDEMPOTENCY_DISABLED", "true"),
                    ("AWS_LAMBDA_FUNCTION_NAME", "f"),
                ],
                _ => &[
                    ("IDEMPOTENCY_DISABLED", "true"),
                    ("ECS_CONTAINER_METADATA_URI_V4", "http://169.254.170.2/v4/x"),
                ],
            };
            let refused = disabled(vars).unwrap_err().to_string();
            assert!(
                refused.starts_with("IDEMPOTENCY_DISABLED=") && refused.contains(deployed),
                "{refused}"
            );
        }
        assert!(disabled(&[("IDEMPOTENCY_DISABLED", "maybe")]).is_err());
    }

    /// Powertools' `POWERTOOLS_IDEMPOTENCY_DISABLED` works as `IDEMPOTENCY_DISABLED` does, and is
    /// refused where it is: on EKS too.
    #[test]
    fn the_powertools_switch_is_an_alias_refused_where_duplicates_are_real() {
        assert!(disabled(&[("POWERTOOLS_IDEMPOTENCY_DISABLED", "1")]).unwrap());
        assert!(!disabled(&[("POWERTOOLS_IDEMPOTENCY_DISABLED", "false")]).unwrap());
        let refused = disabled(&[
            ("POWERTOOLS_IDEMPOTENCY_DISABLED", "true"),
            ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            refused.starts_with("POWERTOOLS_IDEMPOTENCY_DISABLED=")
                && refused.contains("KUBERNETES_SERVICE_HOST"),
            "{refused}"
        );
    }

    /// Disabled, a duplicate runs again: every claim starts, fresh, and nothing is kept.
    #[tokio::test]
    async fn a_disabled_store_starts_every_claim() {
        let store = ConfiguredStore {
            backend: Backend::Disabled,
            lease: LeasePolicy::default(),
        };
        let request = ClaimRequest::new(
            "k",
            crate::Fingerprint::of(&[b"work"]),
            1_000,
            61_000,
            "m-1",
        );
        for _ in 0..2 {
            let Ok(Begin::Started { lease, prior }) = store.begin(&request).await else {
                panic!("a disabled store starts every claim");
            };
            assert_eq!((lease.until_ms, prior), (request.lease_until_ms, None));
            store
                .complete("k", &lease, 2_000, None)
                .await
                .expect("kept nowhere");
        }
        assert!(store.is_disabled() && !store.is_dynamodb());
    }
}
