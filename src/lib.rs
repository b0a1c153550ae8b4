//! # process-orders
//!
//! An AWS Lambda function that consumes Amazon SQS (standard and FIFO) through an event source
//! mapping with `ReportBatchItemFailures`, charges every order exactly once, and tells Lambda
//! exactly which records to retry.
//!
//! The one rule: a message is deleted (left out of `batchItemFailures`) only after its work
//! succeeded. Everything else follows from what happens to the records that are reported.
//!
//! The generic half lives in the workspace's library crates: `sqs-batch` (the edge, the batch
//! processor, the backoff), `idempotency` (claims and the claim / look-up / work / settle
//! sequence), `claim-check` (payloads through S3) and `lambda-kit` (time, settings, error
//! chains). This crate is the order function on top of them.
//!
//! ## Layout
//!
//! - [`order`]: decoding a body into an order, and the order handler: a function of (order,
//!   ports) that returns a decision, the charge run through `idempotency::guard`.
//! - [`payment`]: the payment port and its adapters (`simulated`, `http`), and the API key
//!   (`key`: fixed, or read from Secrets Manager on first use and again after a refusal).
//! - [`config`]: the typed configuration, read once, composed of each component's own.
//! - [`app`]: the ports assembled once per container; [`cli`]: Lambda or one-shot mode.
//! - [`aws`]: the AWS SDK configuration and its HTTP client (reqwest), loaded once; `tls`: the
//!   compiled-in roots every HTTP client trusts; `pooled`: hyper's pooled client, for the
//!   store's writes and the charge.
//! - [`metrics`]: one CloudWatch EMF document per invocation, and call latencies.
//! - [`count_allocations`]: allocation counts for the benchmarks (a counting global allocator
//!   with the feature `count-allocations`, never in the shipped bootstrap).

#![warn(missing_docs)]
// The AWS SDK's nested futures exceed the default query depth when their layout is computed.
#![recursion_limit = "256"]

pub mod app;
pub mod aws;
pub mod cli;
pub mod config;
pub mod count_allocations;
pub mod handler;
pub mod logs;
pub mod metrics;
pub mod money;
pub mod order;
pub mod payment;
pub(crate) mod pooled;
pub mod store;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
pub(crate) mod tls;
