//! The email example end to end, every scenario twice: on the in-memory store and on the
//! DynamoDB store against dynoxide embedded in this test process. The provider double behaves
//! like an email API that takes idempotency keys at its worst: it can send and then not answer,
//! fail to say what became of a key, and forget keys after its window.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use email_once::{MailError, Mailer, Settings, Welcome, WelcomeEmails, send_once};
use idempotency::dynamodb::create_table;
use idempotency::guard::EffectStore;
use idempotency::testkit::dynoxide::{Dynoxide, unique_table};
use idempotency::{DynamoDbStore, IdempotencyStore, MemoryStore};
use lambda_kit::{Clock, Env, ManualClock, SystemClock};
use serde_json::value::RawValue;
use sqs_batch::{BatchOptions, BatchProcessor, lambda};

const T0: u64 = 1_767_225_600_000;
const KEY_WINDOW_MS: u64 = 86_400_000;

/// What the provider does with the next send.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Sends the email, then the answer is lost.
    SendThenNoAnswer,
    /// Never reached.
    Unreachable,
    /// Refuses the address.
    Reject,
}

/// An email API with idempotency keys: one email per key inside its window (a repeated key
/// replays the first answer), forgetting keys after it.
struct Provider {
    clock: ManualClock,
    /// Emails delivered, per address.
    delivered: Mutex<HashMap<String, usize>>,
    /// When each key was first used.
    keys: Mutex<HashMap<String, u64>>,
    faults: Mutex<VecDeque<Fault>>,
    /// Whether it answers "was this key sent?".
    can_tell: bool,
    sends: Mutex<usize>,
}

impl Provider {
    fn new(clock: &ManualClock, can_tell: bool) -> Self {
        Self {
            clock: clock.clone(),
            delivered: Mutex::default(),
            keys: Mutex::default(),
            faults: Mutex::default(),
            can_tell,
            sends: Mutex::new(0),
        }
    }

    fn fail_next(&self, fault: Fault) {
        self.faults.lock().unwrap().push_back(fault);
    }

    fn delivered(&self, address: &str) -> usize {
        self.delivered
            .lock()
            .unwrap()
            .get(address)
            .copied()
            .unwrap_or(0)
    }

    fn sends(&self) -> usize {
        *self.sends.lock().unwrap()
    }

    /// Whether `key` is still remembered.
    fn knows(&self, key: &str) -> bool {
        let now = self.clock.now_ms();
        self.keys
            .lock()
            .unwrap()
            .get(key)
            .is_some_and(|first| now - first < KEY_WINDOW_MS)
    }
}

impl Mailer for Provider {
    async fn send(&self, key: &str, welcome: &Welcome) -> Result<(), MailError> {
        *self.sends.lock().unwrap() += 1;
        let fault = self.faults.lock().unwrap().pop_front();
        match fault {
            Some(Fault::Unreachable) => return Err(MailError::Unreachable("refused".into())),
            Some(Fault::Reject) => return Err(MailError::Rejected("suppressed".into())),
            _ => {}
        }
        if !self.knows(key) {
            self.keys
                .lock()
                .unwrap()
                .insert(key.to_owned(), self.clock.now_ms());
            *self
                .delivered
                .lock()
                .unwrap()
                .entry(welcome.email.clone())
                .or_default() += 1;
        }
        match fault {
            Some(Fault::SendThenNoAnswer) => Err(MailError::NoAnswer("timed out".into())),
            _ => Ok(()),
        }
    }

    async fn was_sent(&self, key: &str) -> Result<bool, MailError> {
        if self.can_tell {
            Ok(self.knows(key))
        } else {
            Err(MailError::CannotTell("no look-up API".into()))
        }
    }
}

type Function<S> = BatchProcessor<WelcomeEmails<S, Provider, ManualClock>, ManualClock>;

/// The function over `store`. Records run one at a time unless `concurrent`, so a duplicate
/// later in a batch meets a finished claim.
fn function<S: EffectStore>(
    store: S,
    clock: &ManualClock,
    can_tell: bool,
    concurrent: bool,
) -> Function<S> {
    let env = Env::new(|name| {
        (name == "SQS_BATCH_MAX_CONCURRENCY" && !concurrent).then(|| "1".to_owned())
    });
    let settings = Settings::from_env(&env).expect("defaults");
    let provider = Provider::new(clock, can_tell);
    let handler = WelcomeEmails::new(store, provider, clock.clone(), settings.guard());
    BatchProcessor::new(handler, clock.clone(), settings.batch)
}

/// One invocation: the reported message ids and the reasons.
async fn invoke<S: EffectStore>(
    function: &Function<S>,
    clock: &ManualClock,
    json: &str,
) -> (Vec<String>, Vec<(&'static str, usize)>) {
    let processed = sqs_batch::process_event(function, json, clock.now_ms() + 60_000)
        .await
        .expect("an SQS event");
    let failed = processed
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    (failed, processed.report.reasons())
}

fn event(records: &[(&str, &str, &str)]) -> String {
    let records: Vec<_> = records
        .iter()
        .map(|(id, user, email)| {
            serde_json::json!({
                "messageId": id,
                "body": serde_json::json!({ "user_id": user, "email": email }).to_string(),
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

fn provider<S: EffectStore>(function: &Function<S>) -> &Provider {
    function.handler().mailer()
}

/// The sample event: two users, one of them twice, and a malformed body. One email each, only
/// the malformed record reported; delivered again, nothing more is sent.
async fn the_sample_event_sends_one_email_per_user<S: EffectStore>(store: S) {
    let json = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/events/welcome.json"))
        .expect("sample event");
    let clock = ManualClock::at(T0);
    let function = function(store, &clock, true, false);
    let malformed = "7b1e6a52-0d3a-4c43-9f4e-000000000004";
    let (failed, reasons) = invoke(&function, &clock, &json).await;
    assert_eq!(failed, [malformed]);
    assert_eq!(
        reasons,
        [("done", 2), ("duplicate", 1), ("invalid_body", 1)]
    );
    clock.advance_ms(1_000);
    let (failed, reasons) = invoke(&function, &clock, &json).await;
    assert_eq!(failed, [malformed]);
    assert_eq!(reasons, [("duplicate", 3), ("invalid_body", 1)]);
    assert_eq!(provider(&function).delivered("ada@example.com"), 1);
    assert_eq!(provider(&function).delivered("grace@example.com"), 1);
}

/// Eight deliveries of one user in one batch, all at once: one email. A delivery that meets the
/// claim in flight is RETRY (`busy`), never acknowledged before the email is recorded; the
/// redelivery acknowledges them all.
async fn concurrent_deliveries_of_one_user_send_one_email<S: EffectStore>(store: S) {
    let clock = ManualClock::at(T0);
    let function = function(store, &clock, true, true);
    let ids: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    let records: Vec<_> = ids
        .iter()
        .map(|id| (id.as_str(), "u-1", "ada@example.com"))
        .collect();
    let json = event(&records);
    let (_, reasons) = invoke(&function, &clock, &json).await;
    let count = |reason| {
        reasons
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    };
    assert_eq!(count("done"), 1, "{reasons:?}");
    assert_eq!(
        count("done") + count("duplicate") + count("busy"),
        8,
        "{reasons:?}"
    );
    clock.advance_ms(60_000);
    let (failed, reasons) = invoke(&function, &clock, &json).await;
    assert!(failed.is_empty());
    assert_eq!(reasons, [("duplicate", 8)]);
    assert_eq!(provider(&function).delivered("ada@example.com"), 1);
}

/// The provider sends and the answer is lost: RETRY; the redelivery asks the provider, learns
/// the email went out, and records it without sending again.
async fn a_send_whose_answer_was_lost_is_looked_up_not_resent<S: EffectStore>(store: S) {
    let clock = ManualClock::at(T0);
    let function = function(store, &clock, true, false);
    provider(&function).fail_next(Fault::SendThenNoAnswer);
    let json = event(&[("m1", "u-1", "ada@example.com")]);
    let (failed, reasons) = invoke(&function, &clock, &json).await;
    assert_eq!(
        (failed.as_slice(), reasons),
        (["m1".to_owned()].as_slice(), vec![("failed", 1)])
    );
    clock.advance_ms(30_000);
    let (failed, reasons) = invoke(&function, &clock, &json).await;
    assert!(failed.is_empty());
    assert_eq!(reasons, [("done_before", 1)]);
    assert_eq!(provider(&function).sends(), 1);
    assert_eq!(provider(&function).delivered("ada@example.com"), 1);
}

/// The same, with a provider that cannot be asked: inside its key window the send is repeated
/// under the same key, and the provider's replay keeps it one email.
async fn inside_the_key_window_a_resend_is_deduplicated_by_the_provider<S: EffectStore>(store: S) {
    let clock = ManualClock::at(T0);
    let function = function(store, &clock, false, false);
    provider(&function).fail_next(Fault::SendThenNoAnswer);
    let json = event(&[("m1", "u-1", "ada@example.com")]);
    assert_eq!(invoke(&function, &clock, &json).await.0, ["m1"]);
    clock.advance_ms(30_000);
    let (failed, reasons) = invoke(&function, &clock, &json).await;
    assert!(failed.is_empty());
    assert_eq!(reasons, [("done", 1)]);
    assert_eq!(provider(&function).sends(), 2);
    assert_eq!(provider(&function).delivered("ada@example.com"), 1);
}

/// Past the provider's key window, with no way to ask, a send that may have gone out is never
/// repeated blindly: the record stays RETRY (and reaches the DLQ) with the key kept.
async fn past_the_key_window_an_unknown_send_is_not_repeated<S: EffectStore>(store: S) {
    let clock = ManualClock::at(T0);
    let function = function(store, &clock, false, false);
    provider(&function).fail_next(Fault::SendThenNoAnswer);
    let json = event(&[("m1", "u-1", "ada@example.com")]);
    assert_eq!(invoke(&function, &clock, &json).await.0, ["m1"]);
    clock.advance_ms(KEY_WINDOW_MS + 60_000);
    let (failed, reasons) = invoke(&function, &clock, &json).await;
    assert_eq!(failed, ["m1"]);
    assert_eq!(reasons, [("needs_reconciliation", 1)]);
    assert_eq!(provider(&function).sends(), 1);
}

/// Failures that prove nothing was sent: unreachable is RETRY and the next delivery sends;
/// a rejected address is POISON. Another address for a sent user is a conflict.
async fn failures_that_sent_nothing_and_conflicts<S: EffectStore>(store: S) {
    let clock = ManualClock::at(T0);
    let function = function(store, &clock, true, false);
    provider(&function).fail_next(Fault::Unreachable);
    let ada = event(&[("m1", "u-1", "ada@example.com")]);
    assert_eq!(invoke(&function, &clock, &ada).await.0, ["m1"]);
    let (failed, reasons) = invoke(&function, &clock, &ada).await;
    assert!(failed.is_empty(), "{reasons:?}");
    assert_eq!(reasons, [("done", 1)]);

    provider(&function).fail_next(Fault::Reject);
    let bounced = event(&[("m2", "u-2", "nobody@example.com")]);
    let (failed, reasons) = invoke(&function, &clock, &bounced).await;
    assert_eq!(
        (failed, reasons),
        (vec!["m2".to_owned()], vec![("rejected", 1)])
    );

    let other_address = event(&[("m3", "u-1", "ada@elsewhere.example")]);
    let (failed, reasons) = invoke(&function, &clock, &other_address).await;
    assert_eq!(
        (failed, reasons),
        (vec!["m3".to_owned()], vec![("key_conflict", 1)])
    );
    assert_eq!(provider(&function).delivered("ada@example.com"), 1);
    assert_eq!(provider(&function).delivered("ada@elsewhere.example"), 0);
}

/// The one screen's handler (`src/main.rs`) over `store` and `provider`, one record at a time so
/// a duplicate later in a batch meets a finished claim.
fn one_screen<'a, S: IdempotencyStore>(
    store: &'a S,
    provider: &'a Provider,
) -> BatchProcessor<impl sqs_batch::RecordHandler + 'a, SystemClock> {
    let env = Env::new(|name| (name == "SQS_BATCH_MAX_CONCURRENCY").then(|| "1".to_owned()));
    let options = BatchOptions::from_env(&env).expect("options");
    let handler = sqs_batch::json(move |welcome: Welcome| send_once(store, provider, welcome));
    BatchProcessor::new(handler, SystemClock, options)
}

/// The one screen as Lambda runs it: the sample event through `lambda::handle`, the deadline
/// from the invocation's context. One email per user, only the malformed record reported;
/// delivered again, nothing more is sent.
async fn the_one_screen_sends_one_email_per_user<S: IdempotencyStore>(store: S) {
    let json = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/events/welcome.json"))
        .expect("sample event");
    let clock = ManualClock::at(T0);
    let provider = Provider::new(&clock, false);
    let function = one_screen(&store, &provider);
    let malformed = "7b1e6a52-0d3a-4c43-9f4e-000000000004";
    for _ in 0..2 {
        let mut context = lambda::Context::default();
        context.deadline = SystemClock.now_ms() + 60_000;
        let payload = RawValue::from_string(json.clone()).expect("json");
        let response = lambda::handle(
            &function,
            &lambda::Ports::default(),
            lambda::LambdaEvent::new(payload, context),
        )
        .await
        .expect("an SQS event");
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, [malformed]);
    }
    assert_eq!(provider.delivered("ada@example.com"), 1);
    assert_eq!(provider.delivered("grace@example.com"), 1);
    assert_eq!(provider.sends(), 2);
}

/// The one screen under a failing provider: a send that reached nobody is retried and then
/// sent; a send whose answer was lost is retried with the same key, which the provider answers
/// (inside its window) without a second email; an address for a user already welcomed is a
/// conflict.
async fn the_one_screen_retries_failed_sends_and_the_key_absorbs_a_resend<S: IdempotencyStore>(
    store: S,
) {
    let clock = ManualClock::at(T0);
    let provider = Provider::new(&clock, false);
    let function = one_screen(&store, &provider);
    let run = |json: String| {
        let function = &function;
        async move {
            let deadline_ms = SystemClock.now_ms() + 60_000;
            let processed = sqs_batch::process_event(function, &json, deadline_ms)
                .await
                .expect("an SQS event");
            processed.report.reasons()
        }
    };
    provider.fail_next(Fault::Unreachable);
    let ada = event(&[("m1", "u-1", "ada@example.com")]);
    assert_eq!(run(ada.clone()).await, [("failed", 1)]);
    assert_eq!(provider.delivered("ada@example.com"), 0);
    assert_eq!(run(ada.clone()).await, [("done", 1)]);
    assert_eq!(run(ada).await, [("duplicate", 1)]);
    assert_eq!(provider.delivered("ada@example.com"), 1);

    provider.fail_next(Fault::SendThenNoAnswer);
    let grace = event(&[("m2", "u-2", "grace@example.com")]);
    assert_eq!(run(grace.clone()).await, [("failed", 1)]);
    assert_eq!(run(grace).await, [("done", 1)]);
    assert_eq!(provider.delivered("grace@example.com"), 1);
    assert_eq!(provider.sends(), 4);

    let other_address = event(&[("m3", "u-1", "ada@elsewhere.example")]);
    assert_eq!(run(other_address).await, [("key_conflict", 1)]);
    assert_eq!(provider.sends(), 4);
}

/// Each scenario on both stores.
macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::memory_store()).await;
                }
            )*
        }
        mod dynamodb {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $scenario() {
                    super::$scenario(super::dynamodb_store().await).await;
                }
            )*
        }
    };
}

on_every_store!(
    the_sample_event_sends_one_email_per_user,
    concurrent_deliveries_of_one_user_send_one_email,
    a_send_whose_answer_was_lost_is_looked_up_not_resent,
    inside_the_key_window_a_resend_is_deduplicated_by_the_provider,
    past_the_key_window_an_unknown_send_is_not_repeated,
    failures_that_sent_nothing_and_conflicts,
    the_one_screen_sends_one_email_per_user,
    the_one_screen_retries_failed_sends_and_the_key_absorbs_a_resend,
);

fn memory_store() -> MemoryStore {
    MemoryStore::new(idempotency::testkit::RETENTION)
}

/// A fresh table on a fresh embedded server, with the prefix the function would use; the server
/// lives as long as the test process.
async fn dynamodb_store() -> DynamoDbStore {
    let server = Dynoxide::start().await;
    let client = server.client();
    let table = unique_table();
    create_table(&client, &table).await.expect("table");
    std::mem::forget(server);
    DynamoDbStore::new(client, table, idempotency::testkit::RETENTION)
        .with_key_prefix("email-once#")
}
