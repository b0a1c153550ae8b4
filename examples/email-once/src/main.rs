//! The one screen: an SQS Lambda that sends one welcome email per user id, with partial batch
//! failures, however often a message is delivered. The store is DynamoDB when
//! `IDEMPOTENCY_TABLE` is set (memory outside Lambda when not); every setting is read once here.

use email_once::{LogMailer, Welcome, send_once};
use idempotency::ConfiguredStore;
use sqs_batch::{Record, lambda};

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let store = &ConfiguredStore::from_env().await?;
    lambda::run(sqs_batch::json(|welcome: Welcome, record: Record| {
        send_once(store, &LogMailer, welcome, record)
    }))
    .await
}
