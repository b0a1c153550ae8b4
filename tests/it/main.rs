//! The function's integration tests, one binary (one link, shared servers' start-up code): the
//! order flow end to end through `App` with real local servers for DynamoDB (dynoxide) and the
//! payment provider, the sample events, the binary in one-shot mode, and `template.yaml`.

// The order flow's futures nest deeply (claim check, batch processor, guard, HTTP client).
#![recursion_limit = "256"]
mod bad_input;
mod deploy;
mod docs;
mod events;
mod exactly_once;
mod fuzz_regressions;
mod layout;
mod log_leak;
mod log_levels;
mod metrics_emf;
mod oneshot;
mod order_handler;
mod panics;
mod payment_http;
mod properties;
mod provider_boundary;
mod schedule;
mod secret_key;
mod signed;
mod store;
mod template;
mod traces;
mod worker;
mod worker_template;
