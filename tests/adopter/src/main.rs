//! The function: the README's one screen with the team's own handler.

use idempotency::ConfiguredStore;
use sqs_batch::lambda;

/// Logs instead of posting: the team's HTTP client goes here.
struct Log;

impl adopter::Webhook for Log {
    async fn post(&self, event: &adopter::Event) -> Result<(), String> {
        println!("posted {}", event.event_id);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda::Error> {
    let store = &ConfiguredStore::from_env().await?;
    lambda::run(adopter::handler(store, &Log)).await
}
