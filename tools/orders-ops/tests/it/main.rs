//! The on-call tool against moto's SQS and S3, one test binary: `depth`, `inspect`, `redrive`,
//! and `send` through the claim check (built with `--features s3-claim-check`).

#![recursion_limit = "256"]

#[cfg(feature = "s3-claim-check")]
mod claim_check;
mod cli;
mod ops;
