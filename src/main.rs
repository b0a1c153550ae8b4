//! Wiring only: read the arguments and the configuration, build the ports once, serve.
#![recursion_limit = "256"]

use std::process::ExitCode;

use lambda_kit::{Clock, SystemClock};
use lambda_runtime::{Error, LambdaEvent, service_fn};
use process_orders::app::App;
use process_orders::cli::{self, Mode};
use process_orders::config::Config;
use process_orders::metrics::MetricsSink;
use process_orders::{logs, telemetry};
use serde_json::value::RawValue;
use tracing::Instrument;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mode = match cli::parse_args(std::env::args().skip(1)) {
        Ok(mode) => mode,
        Err(e) => return fail(&e, 2, false),
    };
    if mode == Mode::Help {
        println!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    // One-shot mode prints the response on stdout, so its logs go to stderr.
    match mode {
        Mode::OneShot { .. } => logs::init(std::io::stderr),
        _ => logs::init(std::io::stdout),
    }
    if cli::json_logs() {
        cli::log_panics_as_json();
    }
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(e) => return fail(&e, 2, true),
    };
    let app = match App::build(&config).await {
        // One-shot mode's stdout carries the response, so its metrics go to stderr.
        Ok(app) if matches!(mode, Mode::OneShot { .. }) => {
            app.with_metrics_sink(MetricsSink::Stderr)
        }
        Ok(app) => app,
        Err(e) => return fail(&e, 2, true),
    };
    match mode {
        Mode::Worker { queue_url } => {
            let worker = match app.into_sqs_worker(&config, &queue_url).await {
                Ok(worker) => worker,
                Err(e) => return fail(&e, 2, true),
            };
            worker.run(sqs_batch::worker::shutdown_signal()).await;
            telemetry::flush(u64::MAX).await;
            ExitCode::SUCCESS
        }
        Mode::OneShot { source } => {
            let result = cli::run_once(&app, &source).await;
            // One-shot mode has no invocation deadline.
            telemetry::flush(u64::MAX).await;
            match result {
                Ok(json) => {
                    println!("{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e, 1, true),
            }
        }
        _ => {
            let app = &app;
            // The payload is kept as raw JSON and read borrowed by the app (see sqs::EventView).
            let handler = service_fn(move |event: LambdaEvent<Box<RawValue>>| async move {
                // Every log line of the invocation names the function's ARN, as Powertools', and
                // the trace's root is the invocation.
                let span = telemetry::invocation_span(
                    &event.context.request_id,
                    &event.context.invoked_function_arn,
                );
                let deadline_ms = lambda_kit::clock::invocation_deadline(
                    event.context.deadline,
                    SystemClock.now_ms(),
                );
                let invocation = sqs_batch::processor::Invocation::new(deadline_ms).with_lambda(
                    &event.context.request_id,
                    &event.context.invoked_function_arn,
                );
                let response = app
                    .handle_json(event.payload.get(), invocation)
                    .instrument(span)
                    .await;
                // Before the response (Lambda may freeze the container right after it), and
                // within the invocation's time.
                telemetry::flush(deadline_ms).await;
                logs::mark_warm();
                #[cfg(feature = "count-allocations")]
                process_orders::count_allocations::report();
                response.map_err(Error::from)
            });
            match lambda_runtime::run(handler).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e.as_ref(), 1, true),
            }
        }
    }
}

/// `logging`: the subscriber is up, so the failure follows the log format.
fn fail(error: &dyn std::error::Error, code: u8, logging: bool) -> ExitCode {
    cli::report_failure(error, logging);
    ExitCode::from(code)
}
