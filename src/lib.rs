//! # process-orders
//!
//! An AWS Lambda function that consumes Amazon SQS (standard and FIFO) through an event source
//! mapping with `ReportBatchItemFailures`, charges every order exactly once, and tells Lambda
//! exactly which records to retry.
//!
//! The one rule: a message is deleted (left out of `batchItemFailures`) only after its work
//! succeeded. Everything else follows from what happens to the records that are reported.
//!
//! ## Layout
//!
//! - [`sqs`]: the edge. Lambda's event in, a borrowed [`sqs::Message`] view per record, the
//!   checked `batchItemFailures` response out.
//! - [`batch`]: the batch processor. Drives any [`batch::RecordHandler`] with the standard and
//!   FIFO contracts, bounded concurrency, the deadline margin and panic isolation. Knows nothing
//!   of orders.
//! - [`idempotency`]: the store port (claim / complete / release with fenced leases), its
//!   decision logic written once, and one adapter per backend (`memory`, `dynamodb`).
//! - [`payment`]: the payment port and its adapters (`simulated`, ...).
//! - [`order`]: decoding a body into an order, and the order handler: a function of (order,
//!   ports) that returns a decision.
//! - [`backoff`] and [`visibility`]: retry timing for reported records, applied with
//!   `ChangeMessageVisibilityBatch` (the port and its `sqs` adapter).
//! - [`config`]: the typed configuration, read once.
//! - [`app`]: the ports assembled once per container; [`cli`]: Lambda or one-shot mode.
//! - [`aws`]: the AWS SDK configuration and its HTTP client (reqwest), loaded once; [`tls`]: the
//!   compiled-in roots every HTTP client trusts.
//! - [`clock`]: injected time.
//! - [`claim_check`]: payloads above SQS's limit loaded from S3 through a pointer (the S3
//!   adapter behind the `s3-claim-check` feature).
//! - [`metrics`]: one CloudWatch EMF document per invocation, and call latencies.
//! - [`ops`]: depth, inspect and redrive for the `orders-ops` on-call tool.
//! - [`local`]: local tools (event source mapping, set-up, load), not used by the function.

// The AWS SDK's nested futures exceed the default query depth when their layout is computed.
#![recursion_limit = "256"]

pub mod app;
pub mod aws;
pub mod backoff;
pub mod batch;
pub mod claim_check;
pub mod cli;
pub mod clock;
pub mod config;
pub mod idempotency;
pub mod local;
pub mod metrics;
pub mod ops;
pub mod order;
pub mod payment;
pub mod sqs;
pub mod tls;
pub mod visibility;
