//! `examples/email-once` (a handler that knows nothing of orders) under the simulator's generic
//! harness: the same queue, mapping, crashing containers and faulty table as the order function,
//! with a mail provider that is slow, unreachable, loses answers after sending and cannot always
//! say what it sent. Every user gets exactly one welcome, to the address of the first payload.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use email_once::{MailError, Mailer, Welcome, WelcomeEmails};
use idempotency::LeasePolicy;
use idempotency::guard::GuardPolicy;
use lambda_kit::Clock;
use sim::harness::{HarnessReport, HarnessSettings, run_handler};
use sim::world::{Shared, SimClock};

/// The provider's key window: it sends one email per key within it, however often asked.
const KEY_WINDOW_MS: u64 = 86_400_000;

/// Emails the provider sent, per key: (when the key was first used, addresses mailed).
type Book = Arc<Mutex<HashMap<String, (u64, Vec<String>)>>>;

/// A mail provider at its worst: 5% of sends never reach it, 5% are sent and their answer
/// lost, 5% of look-ups fail; it takes up to half a second; it deduplicates by key within its
/// window, as the `Mailer` contract says.
struct SimMailer {
    world: Shared,
    clock: SimClock,
    book: Book,
}

impl Mailer for SimMailer {
    async fn send(&self, key: &str, welcome: &Welcome) -> Result<(), MailError> {
        self.world.latency(500).await;
        if self.world.chance(0.05) {
            return Err(MailError::Unreachable("simulated: refused".into()));
        }
        let now_ms = self.clock.now_ms();
        {
            let mut book = self.book.lock().unwrap_or_else(|e| e.into_inner());
            let entry = book.entry(key.to_owned()).or_insert((now_ms, Vec::new()));
            if entry.1.is_empty() || now_ms.saturating_sub(entry.0) >= KEY_WINDOW_MS {
                entry.1.push(welcome.email.clone());
            }
        }
        self.world
            .tell(key, || format!("mailer: sent to {}", welcome.email));
        if self.world.chance(0.05) {
            return Err(MailError::NoAnswer("simulated: answer lost".into()));
        }
        Ok(())
    }

    async fn was_sent(&self, key: &str) -> Result<bool, MailError> {
        self.world.latency(200).await;
        if self.world.chance(0.05) {
            return Err(MailError::CannotTell("simulated: 503".into()));
        }
        let book = self.book.lock().unwrap_or_else(|e| e.into_inner());
        Ok(book.get(key).is_some_and(|(_, sent)| !sent.is_empty()))
    }
}

/// 300 users, a tenth sent twice by their producer, five sent again with another address (a
/// conflict), and three bodies that are not welcomes.
fn bodies() -> Vec<(String, String)> {
    let welcome =
        |user: &str, email: &str| format!(r#"{{"user_id": "{user}", "email": "{email}"}}"#);
    let mut out = Vec::new();
    for i in 0..300 {
        let user = format!("u-{i}");
        out.push((user.clone(), welcome(&user, &format!("{user}@example.com"))));
        if i % 10 == 0 {
            out.push((user.clone(), welcome(&user, &format!("{user}@example.com"))));
        }
        if i % 60 == 1 {
            out.push((
                user.clone(),
                welcome(&user, &format!("{user}@elsewhere.org")),
            ));
        }
    }
    for (n, bad) in [
        "not json",
        r#"{"user_id": "u-x"}"#,
        r#"{"user_id": "", "email": "a@b.c"}"#,
    ]
    .into_iter()
    .enumerate()
    {
        out.push((format!("bad-{n}"), bad.to_owned()));
    }
    out
}

fn run(seed: u64) -> (HarnessReport, Book) {
    let book = Book::default();
    let mailer_book = book.clone();
    let policy =
        GuardPolicy::new(LeasePolicy::new(60_000, 5_000)).with_key_window(KEY_WINDOW_MS, 60_000);
    let settings = HarnessSettings::new(seed, bodies());
    let truth = std::rc::Rc::new(std::cell::OnceCell::new());
    let report = run_handler(&settings, move |ports| {
        // The provider runs on the true clock, not the container's.
        let clock = truth
            .get_or_init(|| SimClock {
                start: ports.clock.start,
                offset_ms: 0,
            })
            .clone();
        let mailer = SimMailer {
            world: ports.world.clone(),
            clock,
            book: mailer_book.clone(),
        };
        WelcomeEmails::new(ports.store, mailer, ports.clock, policy)
    });
    (report, book)
}

#[test]
fn every_user_gets_one_welcome_through_crashes_store_faults_and_a_lossy_provider() {
    let mut crashes = 0;
    for seed in 1..=3 {
        let (report, book) = run(seed);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations.first()
        );
        let book = book.lock().unwrap_or_else(|e| e.into_inner());
        let bodies = bodies();
        // The conflicting payloads and the bodies that are not welcomes end in the DLQ (SQS's
        // redrive, after maxReceiveCount: the harness gives the handler no DLQ port).
        let dead: Vec<&str> = report
            .dead_lettered
            .iter()
            .map(|i| bodies[*i].1.as_str())
            .collect();
        assert_eq!(dead.len(), 5 + 3, "seed {seed}: {dead:?}");
        for i in 0..300 {
            let user = format!("u-{i}");
            let sent = book
                .get(&user)
                .map(|(_, sent)| sent.clone())
                .unwrap_or_default();
            assert_eq!(sent.len(), 1, "seed {seed}: {user} was mailed {sent:?}");
            if i % 60 == 1 {
                // Sent at once, either payload may claim the user first; the other is the
                // conflict, and its address is never mailed.
                let other = dead
                    .iter()
                    .find(|b| b.contains(&format!("\"{user}\"")))
                    .expect("the conflicting payload in the DLQ");
                assert!(!other.contains(&sent[0]), "seed {seed}: {user}: {other}");
            } else {
                assert_eq!(sent, [format!("{user}@example.com")], "seed {seed}");
            }
        }
        // The faults did happen (crashes over the three seeds: one seed may have none).
        crashes += report.crashes;
        assert!(report.faults.store_errors > 0 && report.faults.store_answers_lost > 0);
        assert!(report.faults.duplicate_deliveries > 0);
        eprintln!(
            "seed {seed}: {} messages, {} invocations, {} crashes, {:?}",
            bodies.len(),
            report.invocations,
            report.crashes,
            report.faults
        );
    }
    assert!(crashes > 0, "no crash in three seeds");
}

#[test]
fn a_seed_replays_exactly_with_another_handler_too() {
    let (a, _) = run(11);
    let (b, _) = run(11);
    let (c, _) = run(12);
    assert_eq!(a.digest, b.digest);
    assert_ne!(a.digest, c.digest);
}
