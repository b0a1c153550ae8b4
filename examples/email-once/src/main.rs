//! Wiring only: the settings, the store (DynamoDB when `IDEMPOTENCY_TABLE` is set, else in
//! memory), the handler, then Lambda's loop, or one event from a file with `--event FILE`.

// The batch's futures (the processor's trace spans around each record and call) nest past the
// default query depth when their layout is computed.
#![recursion_limit = "256"]

use std::process::ExitCode;

use email_once::{LogMailer, Settings, WelcomeEmails};
use idempotency::{DynamoDbStore, IdempotencyStore, MemoryStore};
use lambda_kit::{Clock, Env, SystemClock};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::value::RawValue;
use sqs_batch::BatchProcessor;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let event_file = match args.as_slice() {
        [] => None,
        [flag, file] if flag == "--event" => Some(file.clone()),
        _ => return fail("usage: email-once [--event FILE]"),
    };
    // With --event the response goes to stdout, so the logs go to stderr.
    lambda_runtime::tracing::init_default_subscriber_with_writer(std::io::stderr);
    let settings = match Settings::from_env(&Env::process()) {
        Ok(settings) => settings,
        Err(e) => return fail(&e.to_string()),
    };
    match settings.store.table.clone() {
        Some(table) => {
            let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
            let store = DynamoDbStore::new(
                aws_sdk_dynamodb::Client::new(&sdk),
                table,
                settings.store.retention,
            )
            .with_key_prefix(&settings.store.key_prefix);
            serve(&settings, store, event_file).await
        }
        None => {
            let store = MemoryStore::new(settings.store.retention);
            serve(&settings, store, event_file).await
        }
    }
}

async fn serve<S: IdempotencyStore>(
    settings: &Settings,
    store: S,
    event_file: Option<String>,
) -> ExitCode {
    let handler = WelcomeEmails::new(store, LogMailer, SystemClock, settings.guard());
    let processor = &BatchProcessor::new(handler, SystemClock, settings.batch);
    if let Some(file) = event_file {
        let json = match tokio::fs::read_to_string(&file).await {
            Ok(json) => json,
            Err(e) => return fail(&format!("{file}: {e}")),
        };
        let deadline_ms = SystemClock.now_ms() + 60_000;
        return match sqs_batch::process_event(processor, &json, deadline_ms).await {
            Ok(processed) => match serde_json::to_string(&processed.response) {
                Ok(response) => {
                    println!("{response}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e.to_string()),
            },
            Err(e) => fail(&e.to_string()),
        };
    }
    let handler = service_fn(move |event: LambdaEvent<Box<RawValue>>| async move {
        let deadline_ms =
            lambda_kit::clock::invocation_deadline(event.context.deadline, SystemClock.now_ms());
        sqs_batch::process_event(processor, event.payload.get(), deadline_ms)
            .await
            .map(|processed| processed.response)
            .map_err(Error::from)
    });
    match lambda_runtime::run(handler).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("email-once: {message}");
    ExitCode::FAILURE
}
