//! Lambda's loop around a [`RecordHandler`] (feature `lambda`): the payload read borrowed, the
//! deadline taken from the invocation's context, the response checked, an event that is not an
//! SQS batch an error (Lambda retries the whole batch).
//!
//! The shortest function: [`run`] reads [`BatchOptions::from_env`] and the ports the
//! environment turns on ([`Ports::from_env`]: the visibility backoff with `SQS_BATCH_VISIBILITY_BACKOFF`,
//! POISON moved to its queue's DLQ at once with `SQS_BATCH_MOVE_POISON_TO_DLQ`), and serves until Lambda
//! stops it.
//!
//! ```no_run
//! use sqs_batch::{Verdict, lambda};
//!
//! #[derive(serde::Deserialize)]
//! struct Welcome { user_id: String }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), lambda::Error> {
//!     lambda::run(sqs_batch::json(|welcome: Welcome| async move {
//!         Verdict::ack("sent").with_key(welcome.user_id)
//!     }))
//!     .await
//! }
//! ```
//!
//! [`run_processor`] serves a processor built by hand (another clock, options from elsewhere),
//! and [`handle`] is one invocation, for tests and for functions that build their own ports.

use serde_json::value::RawValue;

use lambda_kit::{Clock, Env, EnvError, SystemClock};
pub use lambda_runtime::{Context, Error, LambdaEvent};

use crate::backoff::BackoffPolicy;
use crate::dead_letter::{DeadLetters, SqsDeadLetters};
use crate::processor::{BatchOptions, BatchProcessor, Invocation, RecordHandler};
use crate::visibility::SqsVisibility;
use crate::{
    batch::Backoff, batch::process_batch, edge::Batch, edge::EventView, edge::SqsBatchResponse,
};

/// The ports a batch gets after processing, as the environment turns them on: the visibility
/// backoff (`SQS_BATCH_VISIBILITY_BACKOFF`, with [`BackoffPolicy::from_env`]'s settings) and POISON moved
/// to its queue's DLQ with its reason (`SQS_BATCH_MOVE_POISON_TO_DLQ`, the copies naming the function and
/// its version as their mover). Each SQS client is built at its first use, not at start-up.
#[derive(Debug, Clone, Default)]
pub struct Ports {
    backoff: Option<Backoff<SqsVisibility>>,
    dead_letters: Option<DeadLetters<SqsDeadLetters>>,
}

impl Ports {
    /// The ports `env` turns on, with SQS clients that `sqs` builds (at their first use).
    pub fn from_env(
        env: &Env<'_>,
        sqs: impl Fn() -> aws_sdk_sqs::Client + Clone + Send + Sync + 'static,
    ) -> Result<Self, EnvError> {
        let env = &crate::with_old_names(env);
        let recovery = crate::recovery::RecoveryPolicy::from_env(env)?;
        let backoff = BackoffPolicy::from_env(env)?.map(|policy| {
            Backoff::new(SqsVisibility::on_first_use(sqs.clone()), policy).with_recovery(recovery)
        });
        let dead_letters = env
            .flag("SQS_BATCH_MOVE_POISON_TO_DLQ", false)?
            .then(|| DeadLetters {
                port: SqsDeadLetters::on_first_use(sqs),
                moved_by: mover(env),
            });
        Ok(Self {
            backoff,
            dead_letters,
        })
    }

    /// The ports `env` turns on, with SQS clients from the SDK's own settings (`AWS_REGION` and
    /// the rest, from the process environment and profile), as [`run`] builds them. A port
    /// turned on with no HTTP client for SQS (this crate built without `default-https-client`)
    /// is refused here, naming the feature, not at the first record that needs it.
    pub async fn load(env: &Env<'_>) -> Result<Self, EnvError> {
        let env = &crate::with_old_names(env);
        let mut asked = None;
        for var in [
            "SQS_BATCH_VISIBILITY_BACKOFF",
            "SQS_BATCH_MOVE_POISON_TO_DLQ",
        ] {
            if env.flag(var, false)? {
                asked = Some(var);
                break;
            }
        }
        let Some(asked) = asked else {
            return Ok(Self::default());
        };
        // Without an HTTP client even loading the settings can panic (the region's look-up on
        // EC2's metadata service is a request): probed first with a region given and no
        // credentials, which sends nothing.
        let probe = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::from_static("us-east-1"))
            .no_credentials()
            .load()
            .await;
        if probe.http_client().is_none() {
            return Err(EnvError::unsupported(
                asked,
                "true",
                "an HTTP client for SQS: enable the `default-https-client` feature of \
                 `sqs-batch`, or build the ports with `Ports::from_env` on clients of your own",
            ));
        }
        // Reads the environment and the profile: no network call until a client is used.
        let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        Self::from_env(env, move || aws_sdk_sqs::Client::new(&sdk))
    }

    /// Whether the visibility backoff is on.
    pub fn backoff(&self) -> bool {
        self.backoff.is_some()
    }

    /// Whether POISON records are moved to the DLQ.
    pub fn moves(&self) -> bool {
        self.dead_letters.is_some()
    }
}

/// The function's name and version, as a moved copy names its mover.
fn mover(env: &Env<'_>) -> String {
    match (
        env.text("AWS_LAMBDA_FUNCTION_NAME"),
        env.text("AWS_LAMBDA_FUNCTION_VERSION"),
    ) {
        (Some(name), Some(version)) => format!("{name}:{version}"),
        (Some(name), None) => name,
        _ => "sqs-batch".to_owned(),
    }
}

/// Serves `handler` in Lambda's loop, with [`BatchOptions::from_env`], the ports
/// [`Ports::from_env`] turns on (their SQS client from the SDK's own settings, `AWS_REGION`
/// and the rest) and the system clock. A bad setting stops start-up with the variable's name;
/// Lambda then reports an init error.
///
/// When the function set no tracing subscriber, the runtime's default one is installed (the log
/// format and level follow the function's logging configuration, `AWS_LAMBDA_LOG_FORMAT` and
/// `AWS_LAMBDA_LOG_LEVEL`), so the processor's line for each record not acknowledged is written.
pub async fn run<H: RecordHandler>(handler: H) -> Result<(), Error> {
    if !tracing::dispatcher::has_been_set() {
        lambda_runtime::tracing::init_default_subscriber();
    }
    let env = Env::process();
    let options = BatchOptions::from_env(&env)?;
    let ports = Ports::load(&env).await?;
    run_processor(&BatchProcessor::new(handler, SystemClock, options), &ports).await
}

/// Serves `processor` in Lambda's loop, with `ports`.
pub async fn run_processor<H: RecordHandler, C: Clock>(
    processor: &BatchProcessor<H, C>,
    ports: &Ports,
) -> Result<(), Error> {
    lambda_runtime::run(lambda_runtime::service_fn(
        |event: LambdaEvent<Box<RawValue>>| handle(processor, ports, event),
    ))
    .await
}

/// One invocation: the batch in `event`, processed until the context's deadline, then its
/// POISON moved and its reported records given their visibility, as `ports` has them.
///
/// The future is boxed: the processor's spans around each record nest deep, and a user's crate
/// should not need a `recursion_limit` for the compiler to lay it out.
pub fn handle<'a, H: RecordHandler, C: Clock>(
    processor: &'a BatchProcessor<H, C>,
    ports: &'a Ports,
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
        let view = EventView::parse(event.payload.get())?;
        let processed = process_batch(
            processor,
            &Batch::from_view(&view)?,
            invocation,
            ports.backoff.as_ref(),
            ports.dead_letters.as_ref(),
        )
        .await?;
        Ok(processed.into_response(processor.options().fail_on_entire_batch_failure)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Message, Verdict, lambda_kit::ManualClock, processor::Invocation};

    /// Acknowledges a record only when its deadline is the one expected.
    struct Expects(u64);

    impl RecordHandler for Expects {
        async fn handle(&self, _message: &Message<'_>, context: Invocation) -> Verdict {
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
            let response = handle(&processor, &Ports::default(), event(BATCH, header))
                .await
                .unwrap();
            assert!(response.batch_item_failures.is_empty(), "{header}");
        }
        let wrong = BatchProcessor::new(Expects(1), ManualClock::at(NOW), BatchOptions::default());
        let response = handle(&wrong, &Ports::default(), event(BATCH, NOW + 30_000))
            .await
            .unwrap();
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
        let response = handle(&processor, &Ports::default(), event).await.unwrap();
        assert!(response.batch_item_failures.is_empty(), "{response:?}");
    }

    /// With `SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE`, a batch whose every record failed is an error (the
    /// whole batch comes back, and the mapping backs off); one record done keeps the partial
    /// response. Off, every record is reported as usual.
    #[tokio::test]
    async fn an_entire_batch_failure_fails_the_invocation_only_when_asked() {
        let on = BatchOptions::from_env(&Env::new(|name| {
            (name == "SQS_BATCH_FAIL_ON_ENTIRE_BATCH_FAILURE").then(|| "true".to_owned())
        }))
        .unwrap();
        assert!(on.fail_on_entire_batch_failure);
        let failing = BatchProcessor::new(Expects(1), ManualClock::at(NOW), on);
        let error = handle(&failing, &Ports::default(), event(BATCH, NOW + 30_000))
            .await
            .expect_err("every record failed");
        assert_eq!(
            error.to_string(),
            "all 2 records of the batch failed (other_deadline: 2)"
        );
        // A message id twice (the response names it once): still every record.
        let twice = r#"{"Records":[{"messageId":"m1","body":"x"},{"messageId":"m1","body":"x"}]}"#;
        let error = handle(&failing, &Ports::default(), event(twice, NOW + 30_000)).await;
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
        let response = handle(&mixed, &Ports::default(), event(half, NOW + 30_000))
            .await
            .unwrap();
        assert_eq!(response.batch_item_failures.len(), 1);
        let empty = handle(
            &mixed,
            &Ports::default(),
            event(r#"{"Records":[]}"#, NOW + 30_000),
        )
        .await;
        assert!(empty.is_ok(), "an empty batch has no failure");

        let off = BatchProcessor::new(Expects(1), ManualClock::at(NOW), BatchOptions::default());
        let response = handle(&off, &Ports::default(), event(BATCH, NOW + 30_000))
            .await
            .unwrap();
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
                handle(&processor, &Ports::default(), event(payload, NOW + 30_000))
                    .await
                    .is_err(),
                "{payload}"
            );
        }
    }
}
