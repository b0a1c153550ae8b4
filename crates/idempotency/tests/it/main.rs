//! The idempotency crate's integration tests, one binary: the store contract on every store of
//! the crate, the DynamoDB store's own cases on an embedded DynamoDB-compatible server, and the
//! Redis store's on a redis-server the tests start.

mod dynamodb;
mod memory;
#[cfg(feature = "testkit-redis")]
mod redis;
