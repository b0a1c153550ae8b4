//! The idempotency crate's integration tests, one binary: the store contract on every store of
//! the crate, and the DynamoDB store's own cases on an embedded DynamoDB-compatible server.

mod dynamodb;
mod memory;
