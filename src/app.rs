//! The function: ports built once per container, and one event in, one response out.

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent};

use std::time::{Duration, Instant};

use crate::aws::{self, SdkSettings};
use crate::backoff::BackoffPolicy;
use crate::batch::{BatchProcessor, BatchReport};
use crate::claim_check::AnyPayloads;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, ConfigError};
use crate::idempotency::guard::GuardPolicy;
use crate::idempotency::{AnyStore, DynamoDbStore, IdempotencyStore, MemoryStore};
use crate::metrics::{self, CallLatency, MetricsSettings, MetricsSink};
use crate::order::{ConfigBreaker, OrderHandler, Ports};
use crate::payment::http::HttpSetupError;
use crate::payment::{AnyGateway, HttpGateway, PaymentGateway, SimulatedGateway};
use crate::sqs::{self, Batch, EventError, EventView};
use crate::visibility::{self, SqsVisibility};

/// Start-up failed: the function must not serve.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Payment(#[from] HttpSetupError),
}

/// Any epoch-ms deadline before this (2001-09-09) cannot be real.
const EPOCH_MS_FLOOR: u64 = 1_000_000_000_000;

/// The invocation deadline in epoch ms, from the Runtime API's `Lambda-Runtime-Deadline-Ms`.
///
/// Lambda sends an epoch timestamp. Some local emulators (cargo-lambda 1.9's `watch`) send the
/// timeout as a plain duration instead (`600000`); taken literally, every record would look
/// late. A value that cannot be an epoch timestamp is read as a duration from now.
pub fn invocation_deadline(header_ms: u64, now_ms: u64) -> u64 {
    if header_ms < EPOCH_MS_FLOOR {
        now_ms.saturating_add(header_ms)
    } else {
        header_ms
    }
}

/// The order processor with its ports, built once per container.
#[derive(Debug)]
pub struct App<S = AnyStore, P = AnyGateway, C = SystemClock> {
    processor: BatchProcessor<OrderHandler<S, P, C>, C>,
    /// Visibility backoff for reported records, when on.
    backoff: Option<(SqsVisibility, BackoffPolicy)>,
    /// EMF metrics, when on, and where they are written.
    metrics: Option<(MetricsSettings, MetricsSink)>,
    /// Time kept free before the deadline for the response itself: the visibility calls get
    /// what is left before it.
    response_reserve_ms: u64,
}

/// Bounds for the visibility calls: they run after the batch, so they must be quick; a failure
/// only leaves the queue's own visibility timeout in place.
pub const SQS_SDK: SdkSettings = SdkSettings {
    max_attempts: 2,
    attempt_timeout: Duration::from_millis(1_000),
    operation_timeout: Duration::from_millis(2_000),
};

impl App {
    /// Builds the ports the configuration names, each client once. No network call happens
    /// here: the first request of the first invocation opens the first connection.
    pub async fn build(config: &Config) -> Result<Self, StartupError> {
        // One SDK configuration (and HTTP client) for every AWS client, loaded only if needed.
        let sdk = if config.idempotency_table.is_some()
            || config.backoff.is_some()
            || config.claim_check.is_some()
        {
            Some(aws::load().await)
        } else {
            None
        };
        let store = match (&config.idempotency_table, &sdk) {
            (Some(table), Some(sdk)) => AnyStore::DynamoDb(DynamoDbStore::new(
                aws::dynamodb(sdk, &config.dynamodb),
                table,
                config.retention,
            )),
            _ => AnyStore::Memory(MemoryStore::new(config.retention)),
        };
        // The SQS client exists only when the backoff is on.
        let backoff = match (config.backoff, &sdk) {
            (Some(policy), Some(sdk)) => {
                Some((SqsVisibility::on_first_use(sdk.clone(), SQS_SDK), policy))
            }
            _ => None,
        };
        let gateway = match &config.payment {
            None => AnyGateway::Simulated(SimulatedGateway::with_clock(
                std::sync::Arc::new(SystemClock),
                config.payment_key_window,
            )),
            Some(settings) => AnyGateway::Http(HttpGateway::new(settings)?),
        };
        let payloads = match (&config.claim_check, &sdk) {
            #[cfg(feature = "s3-claim-check")]
            (Some(settings), Some(sdk)) => {
                AnyPayloads::S3(crate::claim_check::s3::S3Payloads::new(
                    aws_sdk_s3::Client::new(sdk),
                    &settings.bucket,
                    settings.max_bytes,
                ))
            }
            _ => AnyPayloads::Disabled,
        };
        Ok(Self::with_ports(config, store, gateway, SystemClock)
            .with_backoff(backoff)
            .with_payloads(payloads))
    }
}

impl<S, P, C> App<S, P, C>
where
    S: IdempotencyStore,
    P: PaymentGateway,
    C: Clock + Clone,
{
    /// Assembles the function from given ports (tests, benchmarks, tools).
    pub fn with_ports(config: &Config, store: S, gateway: P, clock: C) -> Self {
        let ports = Ports {
            store,
            gateway,
            clock: clock.clone(),
            guard: GuardPolicy {
                lease: config.lease,
                key_window_ms: u64::try_from(config.payment_key_window.as_millis())
                    .unwrap_or(u64::MAX),
            },
            calls: CallLatency::default(),
            payloads: AnyPayloads::Disabled,
            breaker: ConfigBreaker::default(),
        };
        let processor = BatchProcessor::new(OrderHandler::new(ports), clock, config.batch);
        Self {
            processor,
            backoff: None,
            metrics: config
                .metrics
                .clone()
                .map(|settings| (settings, MetricsSink::Stdout)),
            response_reserve_ms: config.batch.deadline_margin_ms / 4,
        }
    }

    /// Sends the metrics documents to `sink` instead of stdout (when metrics are on).
    pub fn with_metrics_sink(mut self, sink: MetricsSink) -> Self {
        if let Some((_, current)) = &mut self.metrics {
            *current = sink;
        }
        self
    }

    /// Loads claim-check payloads from `payloads`.
    pub fn with_payloads(mut self, payloads: AnyPayloads) -> Self {
        self.processor.handler_mut().ports_mut().payloads = payloads;
        self
    }

    /// Turns the visibility backoff on (`Some`) or off.
    pub fn with_backoff(mut self, backoff: Option<(SqsVisibility, BackoffPolicy)>) -> Self {
        self.backoff = backoff;
        self
    }

    pub fn ports(&self) -> &Ports<S, P, C> {
        self.processor.handler().ports()
    }

    /// Processes one event and returns the records Lambda must retry.
    pub async fn handle(
        &self,
        event: &SqsEvent,
        deadline_ms: u64,
    ) -> Result<SqsBatchResponse, EventError> {
        Ok(self.handle_with_report(event, deadline_ms).await?.0)
    }

    /// As [`App::handle`], also returning each record's status.
    pub async fn handle_with_report(
        &self,
        event: &SqsEvent,
        deadline_ms: u64,
    ) -> Result<(SqsBatchResponse, BatchReport), EventError> {
        self.handle_batch(&Batch::from_event(event)?, deadline_ms)
            .await
    }

    /// Parses Lambda's payload (borrowed, see [`sqs::EventView`]) and processes it. This is the
    /// function's own path, in Lambda and in one-shot mode.
    pub async fn handle_json(
        &self,
        json: &str,
        deadline_ms: u64,
    ) -> Result<SqsBatchResponse, EventError> {
        let event = EventView::parse(json)?;
        Ok(self
            .handle_batch(&Batch::from_view(&event)?, deadline_ms)
            .await?
            .0)
    }

    /// Processes one batch: the records, the response and its check, the backoff, then the
    /// metrics.
    pub async fn handle_batch(
        &self,
        batch: &Batch<'_>,
        deadline_ms: u64,
    ) -> Result<(SqsBatchResponse, BatchReport), EventError> {
        // A duration measurement only: the monotonic clock, not the injected one.
        let started = Instant::now();
        // The breaker's count is per invocation: a key fixed meanwhile is tried again now.
        self.ports().breaker.reset();
        let records = &batch.messages;
        let report = self
            .processor
            .process(records, batch.kind, deadline_ms)
            .await;
        let response = sqs::response(report.failed_ids(records));
        sqs::check_response(&response, records)?;
        if let Some((port, policy)) = &self.backoff {
            let now_ms = self.ports().clock.now_ms();
            let budget = deadline_ms
                .saturating_sub(now_ms)
                .saturating_sub(self.response_reserve_ms);
            let budget = Duration::from_millis(budget);
            visibility::apply(
                port,
                policy,
                batch.queue_arn,
                records,
                &report,
                now_ms,
                budget,
            )
            .await;
        }
        if let Some((settings, sink)) = &self.metrics {
            let calls = &self.ports().calls;
            let invocation = metrics::Invocation {
                report: &report,
                queue_arn: batch.queue_arn,
                kind: batch.kind,
                timestamp_ms: self.ports().clock.now_ms(),
                duration_ms: started.elapsed().as_secs_f64() * 1_000.0,
                store: calls.store.take(),
                payment: calls.payment.take(),
            };
            sink.write(&metrics::document(settings, &invocation));
        }
        Ok((response, report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record's future is moved into the batch's queue; with the network adapters'
    /// futures inline it was kilobytes and the copies were a fifth of the one-shot CPU time.
    #[test]
    fn a_record_future_stays_small_with_the_network_adapters_compiled_in() {
        use crate::batch::{RecordContext, RecordHandler};
        let config = Config::from_lookup(|_| None).expect("defaults");
        let app: App = App::with_ports(
            &config,
            AnyStore::Memory(MemoryStore::new(config.retention)),
            AnyGateway::Simulated(SimulatedGateway::new()),
            SystemClock,
        );
        let message = sqs::Message::new("m1", "{}");
        let future = app
            .processor
            .handler()
            .handle(&message, RecordContext { deadline_ms: 0 });
        let size = std::mem::size_of_val(&future);
        eprintln!("a record's future: {size} bytes");
        assert!(size <= 1_024, "a record's future is {size} bytes");
    }

    #[test]
    fn an_epoch_deadline_is_taken_as_is_and_a_duration_is_read_from_now() {
        let now = 1_767_225_600_000;
        assert_eq!(invocation_deadline(now + 30_000, now), now + 30_000);
        assert_eq!(invocation_deadline(600_000, now), now + 600_000);
    }
}
