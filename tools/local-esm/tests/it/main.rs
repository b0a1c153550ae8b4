//! The local system against moto's server, one test binary (moto starts once for all): the local
//! event source mapping with the function under chaos, FIFO poison, SNS fan-out, visibility
//! backoff on a real SQS API, and the DynamoDB store's cross-check on moto.

// The function's futures nest deeply (claim check, batch processor, guard, HTTP client).
#![recursion_limit = "256"]

mod chaos;
mod cli;
mod dead_letter_sqs;
mod esm_fidelity;
mod fifo_poison;
mod lambda_runner;
mod outage;
mod sns_fanout;
mod store_moto;
mod visibility_sqs;
