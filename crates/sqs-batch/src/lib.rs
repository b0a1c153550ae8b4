//! # sqs-batch
//!
//! SQS batches for Rust Lambda functions, with `ReportBatchItemFailures`: the one rule is that a
//! message is deleted (left out of `batchItemFailures`) only after its work succeeded. This
//! crate knows nothing of what the work is: you write a [`RecordHandler`] that turns one
//! [`Message`] into a [`Verdict`] (ACK, RETRY or POISON), and [`process_event`] does the rest.
//!
//! - The **edge** reads Lambda's payload borrowed ([`EventView`](edge::EventView): only the fields the processor
//!   uses, strings borrowed unless escaped), builds the `batchItemFailures` response and checks
//!   it before Lambda sees it (an unknown or repeated id would fail the whole batch).
//! - The **processor** ([`BatchProcessor`]) runs standard batches concurrently (bounded, a free
//!   slot refilled at once) and FIFO batches in order, in batch scope (Lambda's contract) or
//!   group scope (only the failed group waits); it never starts a record inside the deadline
//!   margin, abandons one still running near the deadline, and turns a panic into RETRY for that
//!   record only.
//! - The **backoff** ([`BackoffPolicy`](backoff::BackoffPolicy), [`visibility`]) gives reported records their own
//!   visibility: exponential with full jitter, a known retry time when the verdict has one,
//!   POISON at once; the calls are concurrent and never outlast the invocation.
//!
//! ## Layout
//!
//! | module | what |
//! |---|---|
//! | [`edge`] | [`EventView`](edge::EventView), [`Batch`](edge::Batch), [`Message`], the response and its check |
//! | [`processor`] | [`BatchProcessor`], [`RecordHandler`], [`Verdict`], [`Decision`](processor::Decision), [`BatchReport`](processor::BatchReport) |
//! | [`backoff`] | [`BackoffPolicy`](backoff::BackoffPolicy) |
//! | [`visibility`] | the visibility port and [`visibility::apply`]; its SQS adapter with feature `visibility` |
//! | [`recovery`] | while a dependency is down: one record probes, the others are parked; woken when it is up |
//! | [`dead_letter`] | POISON moved to the dead-letter queue by the function; its SQS adapter with feature `dead-letter` |
//! | [`typed`] | [`json`]: a handler from a closure over typed (serde) bodies, with its [`Record`] |
//! | `lambda` | `lambda::run`: Lambda's loop around a handler, the deadline from the context (feature `lambda`) |
//! | [`worker`] | the same handler as a long-polling consumer (ECS, EKS, EC2): heartbeats, graceful shutdown, backlog; its SQS adapter with feature `worker` |
//! | `testkit` | generated events (feature `testkit`) |
//!
//! ## Example
//!
//! ```
//! use sqs_batch::{BatchOptions, BatchProcessor, Message, processor::Invocation, RecordHandler, Verdict};
//! use lambda_kit::SystemClock;
//!
//! /// Acknowledges a record whose body is a number, poisons anything else.
//! struct Numbers;
//!
//! impl RecordHandler for Numbers {
//!     async fn handle(&self, message: &Message<'_>, _context: Invocation) -> Verdict {
//!         match message.body.trim().parse::<i64>() {
//!             Ok(_) => Verdict::ack("number"),
//!             Err(_) => Verdict::poison("not_a_number"),
//!         }
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let processor = BatchProcessor::new(Numbers, SystemClock, BatchOptions::default());
//! let event = r#"{"Records": [
//!     {"messageId": "m1", "body": "42"},
//!     {"messageId": "m2", "body": "forty-two"}
//! ]}"#;
//! let deadline_ms = lambda_kit::Clock::now_ms(&SystemClock) + 60_000;
//! let processed = sqs_batch::process_event(&processor, event, deadline_ms)
//!     .await
//!     .unwrap();
//! let failed: Vec<&str> = processed
//!     .response
//!     .batch_item_failures
//!     .iter()
//!     .map(|f| f.item_identifier.as_str())
//!     .collect();
//! assert_eq!(failed, ["m2"]);
//! # });
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// The README's example is a doctest too, so the crate's front page cannot drift from its API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod backoff;
pub mod dead_letter;
pub mod edge;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod processor;
pub mod recovery;
#[cfg(any(feature = "visibility", feature = "dead-letter"))]
mod sqs_entries;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod typed;
pub mod visibility;
pub mod worker;

mod batch;
mod env_names;
mod failure;
mod turns;

// The root holds what a handler's author meets first; the rest is in its module (edge,
// processor, backoff, dead_letter, typed), imported here privately so that `crate::` paths
// inside the crate stay short.
pub use batch::{Backoff, Processed, check_entire_batch, process_batch, process_event};
pub use edge::{EntireBatchFailed, Message};
pub use env_names::with_old_names;
/// The clock and settings the API takes, so a user adds this crate alone.
pub use lambda_kit;
pub use processor::{BatchOptions, BatchProcessor, RecordHandler, Verdict};
pub use typed::{Record, json};

/// The variables this crate's components read, with their defaults, for a function's
/// configuration table: [`BatchOptions::from_env`] and [`BackoffPolicy::from_env`](backoff::BackoffPolicy::from_env).
///
/// # Example
///
/// ```
/// let names: Vec<&str> = sqs_batch::VARIABLES.iter().map(|(name, _)| *name).collect();
/// assert!(names.contains(&"SQS_BATCH_MAX_CONCURRENCY"));
/// ```
pub const VARIABLES: &[(&str, Option<&str>)] = &[
    ("SQS_BATCH_MAX_CONCURRENCY", Some("16")),
    ("SQS_BATCH_FIFO_SCOPE", Some("batch")),
    ("SQS_BATCH_DEADLINE_MARGIN_MS", Some("5000")),
    ("SQS_BATCH_VISIBILITY_BACKOFF", Some("false")),
    ("SQS_BATCH_BACKOFF_BASE_SECONDS", Some("5")),
    ("SQS_BATCH_BACKOFF_CAP_SECONDS", Some("900")),
    ("SQS_BATCH_MAX_RECEIVE_COUNT", Some("0")),
    ("SQS_BATCH_RETRY_SURVIVAL_HOURS", Some("24")),
    ("SQS_BATCH_PROBE_SECONDS", Some("30")),
];
