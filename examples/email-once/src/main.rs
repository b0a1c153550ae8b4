//! The one screen: an SQS Lambda that sends one welcome email per user id, with partial batch
//! failures, however often a message is delivered. The store is DynamoDB when
//! `IDEMPOTENCY_TABLE` is set (memory outside Lambda when not); the batch options, the lease,
//! the visibility backoff (`SQS_BATCH_VISIBILITY_BACKOFF`) and POISON's moves to the DLQ
//! (`SQS_BATCH_MOVE_POISON_TO_DLQ`) come from the environment, read once.

use email_once::{LogMailer, Mailer, Welcome};
use idempotency::{ConfiguredStore, once};
use sqs_batch::lambda;

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let store = &ConfiguredStore::from_env().await?;
    lambda::run(sqs_batch::json(|welcome: Welcome| async move {
        once(store, &welcome.user_id, &welcome, || {
            LogMailer.send(&welcome.user_id, &welcome)
        })
        .await
        .into_verdict()
    }))
    .await
}
