//! Lambda's loop around a [`RecordHandler`] (feature `lambda`): the payload read borrowed, the
//! deadline taken from the invocation's context, the response checked, an event that is not an
//! SQS batch an error (Lambda retries the whole batch).
//!
//! The shortest function: [`run`] reads [`BatchOptions::from_env`] and serves until Lambda
//! stops it.
//!
//! ```no_run
//! use sqs_batch::{Record, Verdict, lambda};
//!
//! #[derive(serde::Deserialize)]
//! struct Welcome { user_id: String }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), lambda::Error> {
//!     lambda::run(sqs_batch::json(|welcome: Welcome, _record: Record| async move {
//!         Verdict::ack("sent").with_key(welcome.user_id)
//!     }))
//!     .await
//! }
//! ```
//!
//! [`run_processor`] serves a processor built by hand (another clock, options from elsewhere),
//! and [`handle`] is one invocation, for tests and for functions that add ports (visibility
//! backoff, DLQ moves: [`crate::process_batch`]).

use serde_json::value::RawValue;

use lambda_kit::{Clock, Env, SystemClock};
pub use lambda_runtime::{Context, Error, LambdaEvent};

use crate::processor::{BatchOptions, BatchProcessor, Invocation, RecordHandler};
use crate::{SqsBatchResponse, process_event};

/// Serves `handler` in Lambda's loop, with [`BatchOptions::from_env`] and the system clock. A bad
/// setting stops start-up with the variable's name; Lambda then reports an init error.
///
/// When the function set no tracing subscriber, the runtime's default one is installed (the log
/// format and level follow the function's logging configuration, `AWS_LAMBDA_LOG_FORMAT` and
/// `AWS_LAMBDA_LOG_LEVEL`), so the processor's line for each record not acknowledged is written.
pub async fn run<H: RecordHandler>(handler: H) -> Result<(), Error> {
    if !tracing::dispatcher::has_been_set() {
        lambda_runtime::tracing::init_default_subscriber();
    }
    let options = BatchOptions::from_env(&Env::process())?;
    run_processor(&BatchProcessor::new(handler, SystemClock, options)).await
}

/// Serves `processor` in Lambda's loop.
pub async fn run_processor<H: RecordHandler, C: Clock>(
    processor: &BatchProcessor<H, C>,
) -> Result<(), Error> {
    lambda_runtime::run(lambda_runtime::service_fn(
        |event: LambdaEvent<Box<RawValue>>| handle(processor, event),
    ))
    .await
}

/// One invocation: the batch in `event`, processed until the context's deadline.
///
/// The future is boxed: the processor's spans around each record nest deep, and a user's crate
/// should not need a `recursion_limit` for the compiler to lay it out.
pub fn handle<'a, H: RecordHandler, C: Clock>(
    processor: &'a BatchProcessor<H, C>,
    event: LambdaEvent<Box<RawValue>>,
) -> std::pin::Pin<Box<dyn Future<Output = Result<SqsBatchResponse, Error>> + Send + 'a>> {
    Box::pin(async move {
        let deadline_ms = lambda_kit::clock::invocation_deadline(
            event.context.deadline,
            processor.clock().now_ms(),
        );
        let invocation = Invocation::new(deadline_ms).with_lambda(
            &event.context.request_id,
            &event.context.invoked_function_arn,
        );
        let processed = process_event(processor, event.payload.get(), invocation).await?;
        Ok(processed.into_response(processor.options().fail_on_entire_batch_failure)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Message, RecordContext, Verdict};

    /// Acknowledges a record only when its deadline is the one expected.
    struct Expects(u64);

    impl RecordHandler for Expects {
        async fn handle(&self, _message: &Message<'_>, context: RecordContext) -> Verdict {
            if context.deadline_ms == self.0 {
                Verdict::ack("expected_deadline")
            } else {
                Verdict::retry("other_deadline")
            }
        }
    }

    fn event(payload: &str, deadline: u64) -> LambdaEvent<Box<RawValue>> {
        let mut context = Context::default();
        context.deadline = deadline;
        LambdaEvent::new(RawValue::from_string(payload.to_owned()).unwrap(), context)
    }

    const BATCH: &str =
        r#"{"Records":[{"messageId":"m1","body":"x"},{"messageId":"m2","body":"y"}]}"#;
    const NOW: u64 = 1_767_225_600_000;

    /// The deadline comes from the context: as epoch ms (Lambda), or as the time left (some
    /// emulators), read against the processor's clock.
    #[tokio::test]
    async fn an_invocation_runs_until_its_contexts_deadline() {
        for (header, deadline_ms) in [(NOW + 30_000, NOW + 30_000), (60_000, NOW + 60_000)] {
            let processor = BatchProcessor::new(
                Expects(deadline_ms),
                ManualClock::at(NOW),
                BatchOptions::default(),
            );
            let response = handle(&processor, event(BATCH, header)).await.unwrap();
            assert!(response.batch_item_failures.is_empty(), "{header}");
        }
        let wrong = BatchProcessor::new(Expects(1), ManualClock::at(NOW), BatchOptions::default());
        let response = handle(&wrong, event(BATCH, NOW + 30_000)).await.unwrap();
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, ["m1", "m2"]);
    }

    /// Every record sees the invocation's request id and the ARN it was invoked by, as a typed
    /// handler's `Record` does.
    #[tokio::test]
    async fn records_carry_the_invocations_request_id_and_function_arn() {
        let handler = crate::json(|_: serde_json::Value, record: crate::Record| async move {
            let seen = format!("{:?} {:?}", record.request_id, record.function_arn);
            if seen == r#"Some("req-7") Some("arn:aws:lambda:eu-west-1:1:function:f:live")"# {
                Verdict::ack("seen")
            } else {
                Verdict::retry("unseen").with_detail(seen)
            }
        });
        let processor = BatchProcessor::new(handler, ManualClock::at(NOW), BatchOptions::default());
        let mut event = event(
            r#"{"Records":[{"messageId":"m1","body":"{}"},{"messageId":"m2","body":"1"}]}"#,
            NOW + 30_000,
        );
        event.context.request_id = "req-7".into();
        event.context.invoked_function_arn = "arn:aws:lambda:eu-west-1:1:function:f:live".into();
        let response = handle(&processor, event).await.unwrap();
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }

    /// With `FAIL_ON_ENTIRE_BATCH_FAILURE`, a batch whose every record failed is an error (the
    /// whole batch comes back, and the mapping backs off); one record done keeps the partial
    /// response. Off, every record is reported as usual.
    #[tokio::test]
    async fn an_entire_batch_failure_fails_the_invocation_only_when_asked() {
        let on = BatchOptions::from_env(&Env::new(|name| {
            (name == "FAIL_ON_ENTIRE_BATCH_FAILURE").then(|| "true".to_owned())
        }))
        .unwrap();
        assert!(on.fail_on_entire_batch_failure);
        let failing = BatchProcessor::new(Expects(1), ManualClock::at(NOW), on);
        let error = handle(&failing, event(BATCH, NOW + 30_000))
            .await
            .expect_err("every record failed");
        assert_eq!(
            error.to_string(),
            "all 2 records of the batch failed (other_deadline: 2)"
        );
        // A message id twice (the response names it once): still every record.
        let twice = r#"{"Records":[{"messageId":"m1","body":"x"},{"messageId":"m1","body":"x"}]}"#;
        let error = handle(&failing, event(twice, NOW + 30_000)).await;
        assert!(error.is_err(), "{error:?}");
        // One record done of two: the partial response, with the other reported.
        let by_body = crate::json(|body: String, _: crate::Record| async move {
            if body == "ok" {
                Verdict::ack("done")
            } else {
                Verdict::retry("later")
            }
        });
        let mixed = BatchProcessor::new(by_body, ManualClock::at(NOW), *failing.options());
        let half = r#"{"Records":[{"messageId":"m1","body":"\"ok\""},{"messageId":"m2","body":"\"no\""}]}"#;
        let response = handle(&mixed, event(half, NOW + 30_000)).await.unwrap();
        assert_eq!(response.batch_item_failures.len(), 1);
        let empty = handle(&mixed, event(r#"{"Records":[]}"#, NOW + 30_000)).await;
        assert!(empty.is_ok(), "an empty batch has no failure");

        let off = BatchProcessor::new(Expects(1), ManualClock::at(NOW), BatchOptions::default());
        let response = handle(&off, event(BATCH, NOW + 30_000)).await.unwrap();
        assert_eq!(response.batch_item_failures.len(), 2);
    }

    /// Lambda retries the whole batch on an error: only for an event the processor cannot
    /// answer record by record.
    #[tokio::test]
    async fn an_event_that_is_not_an_sqs_batch_fails_the_invocation() {
        let processor =
            BatchProcessor::new(Expects(0), ManualClock::at(NOW), BatchOptions::default());
        for payload in ["[1, 2]", r#"{"Records":[{"body":"no id"}]}"#] {
            assert!(
                handle(&processor, event(payload, NOW + 30_000))
                    .await
                    .is_err(),
                "{payload}"
            );
        }
    }
}
