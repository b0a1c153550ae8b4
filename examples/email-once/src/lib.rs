//! # email-once
//!
//! An example of the workspace's libraries used by another function: an SQS Lambda that sends
//! one welcome email per user id, however often the message is delivered, with
//! [`sqs_batch`] (the batch, the partial-failure response) and [`idempotency`] (the claim and
//! the record of what happened). Nothing here knows of orders. It comes at two levels:
//!
//! - **The one screen** (`src/main.rs`): `sqs_batch::lambda::run`, a typed handler
//!   (`sqs_batch::json`), `idempotency::once` and `Outcome::into_verdict`; [`send_once`] is its
//!   work, for the tests. A failed send
//!   is retried; the provider's idempotency key keeps a resend from mailing twice while it
//!   remembers the key. This is what most functions need.
//! - **Full control** ([`WelcomeEmails`]): `idempotency::guard::run` with a
//!   [`GuardedWork`] that can ask the provider what became of a
//!   send that timed out, a key window, and the refused address as POISON. For work whose effect
//!   must never be doubled, at any age of the key.
//!
//! A message body is `{"user_id": "u-1", "email": "ada@example.com"}`. For each record, with
//! [`WelcomeEmails`] ([`send_once`] has the same rows but the look-up's and the refusal's, which
//! it retries as `failed`):
//!
//! | what happens | verdict | reason |
//! |---|---|---|
//! | first delivery, sent | ACK | `done` |
//! | the same user again (same address) | ACK | `duplicate` |
//! | the same user with another address | POISON | `key_conflict` |
//! | body not of that shape | POISON | `invalid_body` |
//! | the provider rejects the address | POISON | `rejected` |
//! | another delivery holds the claim | RETRY (when its lease ends) | `busy` |
//! | the provider is unreachable, or gives no answer | RETRY | `failed` |
//! | an earlier send went out, as the provider's look-up says | ACK | `done_before` |
//! | an earlier send may have gone out, the provider cannot say, and its key window is over | RETRY | `needs_reconciliation` |
//! | the store fails | RETRY | `store_unavailable` |
//!
//! The user id is the provider's idempotency key too: within the provider's key window (the
//! `MAIL_KEY_WINDOW_SECONDS` setting) resending after a timeout returns the first send's result
//! instead of a second email. The [`Mailer`] port is where a real provider goes; [`LogMailer`]
//! writes each email as a JSON line, which is enough to run the function.
//!
//! ## Layout
//!
//! | item | what |
//! |---|---|
//! | [`Welcome`] | the message body, checked as serde decodes it |
//! | [`Mailer`], [`MailError`], [`LogMailer`] | the provider port and a stand-in |
//! | [`send_once`] | the one screen's work per record, as `src/main.rs` writes it inline |
//! | [`WelcomeEmails`] | the full-control record handler: decode, guard, send, look up, verdict |
//! | [`Settings`] | the full-control configuration, each component's own `from_env` composed |
//!
//! ## Example
//!
//! ```
//! use email_once::{LogMailer, Welcome, send_once};
//! use idempotency::MemoryStore;
//! use sqs_batch::{BatchOptions, BatchProcessor, lambda_kit::SystemClock};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = &MemoryStore::default();
//! let handler = sqs_batch::json(|welcome: Welcome| send_once(store, &LogMailer, welcome));
//! let processor = BatchProcessor::new(handler, SystemClock, BatchOptions::default());
//! let event = r#"{"Records": [
//!     {"messageId": "m1", "body": "{\"user_id\": \"u-1\", \"email\": \"ada@example.com\"}"},
//!     {"messageId": "m2", "body": "not a welcome"}
//! ]}"#;
//! let deadline_ms = sqs_batch::lambda_kit::Clock::now_ms(&SystemClock) + 60_000;
//! for reasons in [[("done", 1), ("invalid_body", 1)], [("duplicate", 1), ("invalid_body", 1)]] {
//!     let processed = sqs_batch::process_event(&processor, event, deadline_ms)
//!         .await
//!         .unwrap();
//!     // Delivered twice, sent once; only the malformed record is reported.
//!     assert_eq!(processed.report.reasons(), reasons);
//!     assert_eq!(processed.response.batch_item_failures[0].item_identifier, "m2");
//! }
//! # });
//! ```

#![warn(missing_docs)]

use std::future::Future;

use idempotency::guard::{self, Claim, Effect, Failed, Found, GuardPolicy, Guarded, GuardedWork};
use idempotency::{Fingerprint, IdempotencyStore, LeasePolicy, StoreSettings, once};
use lambda_kit::{Clock, Env, EnvError};
use sqs_batch::{BatchOptions, Message, RecordHandler, Verdict, processor::Invocation};

/// One message's body, checked as it is decoded (serde's `try_from`): a body that is not a
/// welcome never reaches the handler.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, try_from = "Unchecked")]
pub struct Welcome {
    /// Whom to welcome: the idempotency key.
    pub user_id: String,
    /// Where to.
    pub email: String,
}

/// A welcome as the JSON has it, before its checks.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Unchecked {
    user_id: String,
    email: String,
}

/// Longest accepted user id, in bytes (it is a DynamoDB key and a provider's idempotency key).
const MAX_USER_ID_LEN: usize = 255;

impl TryFrom<Unchecked> for Welcome {
    type Error = &'static str;

    fn try_from(unchecked: Unchecked) -> Result<Self, Self::Error> {
        let Unchecked { user_id, email } = unchecked;
        if user_id.is_empty()
            || user_id.len() > MAX_USER_ID_LEN
            || user_id.chars().any(char::is_control)
        {
            return Err("user_id is not usable as a key");
        }
        let email_ok = email
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.'));
        if !email_ok {
            return Err("email is not an address");
        }
        Ok(Self { user_id, email })
    }
}

impl Welcome {
    /// Decodes and checks a body; `None` for anything that is not a welcome.
    pub fn decode(body: &str) -> Option<Self> {
        serde_json::from_str(body).ok()
    }

    /// The claim's fingerprint: the same user with another address is a conflict, not a
    /// duplicate.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&[self.user_id.as_bytes(), self.email.as_bytes()])
    }
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    /// The provider refused the email for good (a malformed or suppressed address).
    #[error("the provider rejected the email: {0}")]
    Rejected(String),
    /// The request never reached the provider: nothing was sent.
    #[error("the provider could not be reached: {0}")]
    Unreachable(String),
    /// The request went out and no answer came back: the email may have been sent.
    #[error("no answer from the provider: {0}")]
    NoAnswer(String),
    /// The provider cannot say what became of a key.
    #[error("the provider cannot say what became of the key: {0}")]
    CannotTell(String),
}

/// An email provider that takes an idempotency key.
pub trait Mailer: Send + Sync {
    /// Sends `welcome` under `key`: the provider sends one email per key within its key window,
    /// however often it is asked.
    fn send(
        &self,
        key: &str,
        welcome: &Welcome,
    ) -> impl Future<Output = Result<(), MailError>> + Send;

    /// Whether an email went out under `key`. An error means the provider cannot tell now.
    fn was_sent(&self, key: &str) -> impl Future<Output = Result<bool, MailError>> + Send;
}

/// A stand-in provider: writes each email as one JSON line on stdout (in Lambda, the log). It
/// keeps no record, so it cannot answer [`Mailer::was_sent`].
#[derive(Debug, Clone, Copy, Default)]
pub struct LogMailer;

impl Mailer for LogMailer {
    async fn send(&self, key: &str, welcome: &Welcome) -> Result<(), MailError> {
        let line = serde_json::json!({
            "email": { "to": welcome.email, "subject": "Welcome!", "idempotency_key": key }
        });
        println!("{line}");
        Ok(())
    }

    async fn was_sent(&self, _key: &str) -> Result<bool, MailError> {
        Err(MailError::CannotTell(
            "the log mailer keeps no record".to_owned(),
        ))
    }
}

/// The one screen's work for one record (`src/main.rs` writes the same inline): send `welcome`
/// once per user id and payload, with the user id as the provider's idempotency key too. A send
/// that fails gives the key back and the record is retried; within the provider's key window
/// the resend cannot mail twice. Inside the processor, the record's deadline bounds the claim
/// without being passed.
pub async fn send_once<S: IdempotencyStore, M: Mailer>(
    store: &S,
    mailer: &M,
    welcome: Welcome,
) -> Verdict {
    once(store, &welcome.user_id, &welcome, || {
        mailer.send(&welcome.user_id, &welcome)
    })
    .await
    .into_verdict()
    .with_key(&welcome.user_id)
}

/// The work one key guards: one send, and the look-up after an ambiguous one.
struct SendWelcome<'a, M> {
    mailer: &'a M,
    welcome: &'a Welcome,
}

impl<M: Mailer> GuardedWork for SendWelcome<'_, M> {
    type Output = ();
    type Error = MailError;

    async fn look_up(&self) -> Result<Found, MailError> {
        match self.mailer.was_sent(&self.welcome.user_id).await? {
            true => Ok(Found::Happened),
            // No record of it: inside the key window nothing went out; past it, the provider
            // may have forgotten (the guard decides).
            false => Ok(Found::Unknown),
        }
    }

    async fn perform(&self) -> Result<(), Failed<MailError>> {
        self.mailer
            .send(&self.welcome.user_id, self.welcome)
            .await
            .map_err(|error| {
                let effect = match error {
                    MailError::NoAnswer(_) => Effect::Maybe,
                    _ => Effect::None,
                };
                Failed { error, effect }
            })
    }
}

/// The record handler: decode, claim the user id, send once, and say what to do with the
/// message.
#[derive(Debug)]
pub struct WelcomeEmails<S, M, C> {
    store: S,
    mailer: M,
    clock: C,
    policy: GuardPolicy,
}

impl<S, M, C> WelcomeEmails<S, M, C> {
    /// A handler over its ports.
    pub fn new(store: S, mailer: M, clock: C, policy: GuardPolicy) -> Self {
        Self {
            store,
            mailer,
            clock,
            policy,
        }
    }

    /// The mailer (tests count its sends).
    pub fn mailer(&self) -> &M {
        &self.mailer
    }
}

impl<S: idempotency::guard::EffectStore, M: Mailer, C: Clock> RecordHandler
    for WelcomeEmails<S, M, C>
{
    async fn handle(&self, message: &Message<'_>, context: Invocation) -> Verdict {
        let Some(welcome) = Welcome::decode(message.body) else {
            return Verdict::poison("invalid_body");
        };
        let claim = Claim::new(
            &welcome.user_id,
            welcome.fingerprint(),
            message.message_id,
            context.deadline_ms,
        )
        .with_earlier_attempt_ms(sqs_batch::dead_letter::earlier_attempt_ms(message));
        let work = SendWelcome {
            mailer: &self.mailer,
            welcome: &welcome,
        };
        let run = guard::run(&self.store, &self.clock, &self.policy, &claim, &work).await;
        let mut verdict = match run.outcome {
            // The provider refused the address: no later delivery can do better. (Its refusals
            // are not recorded as final: [`GuardedWork::refusal`] is left as it is.)
            Guarded::Failed {
                error: error @ MailError::Rejected(_),
                ..
            } => Verdict::poison("rejected").with_detail(error.to_string()),
            outcome => outcome.into_verdict(),
        };
        verdict.correlation_id = run.lease.map(|token| token.to_string());
        verdict.with_key(welcome.user_id)
    }
}

/// The function's configuration: each library component reads its own variables, and this
/// function adds one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `SQS_BATCH_MAX_CONCURRENCY`, `SQS_BATCH_FIFO_SCOPE`, `SQS_BATCH_DEADLINE_MARGIN_MS`.
    pub batch: BatchOptions,
    /// `IDEMPOTENCY_LEASE_SECONDS`, `IDEMPOTENCY_LEASE_MARGIN_MS`.
    pub lease: LeasePolicy,
    /// `IDEMPOTENCY_TABLE`, `IDEMPOTENCY_RETENTION_DAYS`, `IDEMPOTENCY_KEY_PREFIX` (default: the
    /// function's name and `#`, so it can share a table with other functions).
    pub store: StoreSettings,
    /// `MAIL_KEY_WINDOW_SECONDS` (86400): how long the provider remembers a key.
    pub key_window_ms: u64,
}

impl Settings {
    /// Reads every variable once; an invalid value names its variable.
    pub fn from_env(env: &Env<'_>) -> Result<Self, EnvError> {
        let key_window_s: u64 = env.ranged("MAIL_KEY_WINDOW_SECONDS", 86_400, 1, 2_592_000)?;
        Ok(Self {
            batch: BatchOptions::from_env(env)?,
            lease: LeasePolicy::from_env(env)?,
            store: StoreSettings::from_env(env)?,
            key_window_ms: key_window_s * 1_000,
        })
    }

    /// The guard's policy.
    pub fn guard(&self) -> GuardPolicy {
        // The margin: a send's time to reach the provider, and clocks that disagree.
        GuardPolicy::new(self.lease).with_key_window(self.key_window_ms, 60_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_welcome_decodes() {
        assert_eq!(
            Welcome::decode(r#"{"user_id": "u-1", "email": "ada@example.com"}"#),
            Some(Welcome {
                user_id: "u-1".to_owned(),
                email: "ada@example.com".to_owned()
            })
        );
        for body in [
            "",
            "not json",
            r#"{"user_id": "u-1"}"#,
            r#"{"user_id": "", "email": "ada@example.com"}"#,
            r#"{"user_id": "u\n1", "email": "ada@example.com"}"#,
            r#"{"user_id": "u-1", "email": "ada"}"#,
            r#"{"user_id": "u-1", "email": "@example.com"}"#,
            r#"{"user_id": "u-1", "email": "ada@example.com", "extra": 1}"#,
            r#"{"user_id": 1, "email": "ada@example.com"}"#,
        ] {
            assert_eq!(Welcome::decode(body), None, "{body}");
        }
        let long = format!(r#"{{"user_id": "{}", "email": "a@b.c"}}"#, "u".repeat(256));
        assert_eq!(Welcome::decode(&long), None);
    }

    #[test]
    fn the_key_prefix_defaults_to_the_function_name() {
        let env = Env::new(|name| (name == "AWS_LAMBDA_FUNCTION_NAME").then(|| "welcome".into()));
        assert_eq!(
            Settings::from_env(&env).unwrap().store.key_prefix,
            "welcome#"
        );
        let env = Env::new(|name| (name == "MAIL_KEY_WINDOW_SECONDS").then(|| "0".into()));
        assert!(Settings::from_env(&env).is_err());
    }
}
