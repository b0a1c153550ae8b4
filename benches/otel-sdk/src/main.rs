//! hello-world `lambda_runtime` (the function's init baseline, `examples/hello.rs`) with
//! OpenTelemetry's SDK exporting one span per invocation over OTLP/HTTP protobuf, set up as the
//! SDK documents it: `opentelemetry-otlp`'s span exporter (its endpoint from
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), the SDK's batch processor, `tracing-opentelemetry`'s
//! layer, and a flush at the end of each invocation (Lambda freezes the process after the
//! answer, so a span not sent by then waits for the next invocation or is lost).

use lambda_runtime::{Error, LambdaEvent, service_fn};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::Value;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer("hello-otel");
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracer))
        .init();
    lambda_runtime::run(service_fn(move |_: LambdaEvent<Value>| {
        let provider = provider.clone();
        async move {
            tracing::info_span!("invocation").in_scope(|| {});
            // Sent before the answer: the SDK's force_flush waits for the batch processor's
            // thread to export.
            provider.force_flush()?;
            Ok::<_, Error>(serde_json::json!({ "batchItemFailures": [] }))
        }
    }))
    .await
}
