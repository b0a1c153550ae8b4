//! Support shared by the workspace's integration tests and benchmarks: real local servers and
//! ports that fail on demand. Not a library for users (the crates' own `testkit` features are).

pub mod dynamo;
pub mod fuzz;
pub mod logs;
pub mod payment_stub;
pub mod ports;
pub mod runtime_api;

use std::path::PathBuf;

/// The container's own HTTP/1.1 client stack (hyper's pooled client on the function's TLS
/// configuration, `src/pooled.rs`), for a benchmark's bare round trips on the same stack.
pub fn pooled_client() -> crate::pooled::PooledClient {
    let tls = crate::tls::client_config().expect("the compiled-in TLS configuration");
    crate::pooled::client(tls, None)
}

/// A valid order's body for generated events (`sqs_batch::testkit::generate`): order `o-{i}`,
/// an amount between 1 and 500.
pub fn generated_body(i: usize, rng: &mut fastrand::Rng) -> String {
    let cents = rng.u64(100..=50_000);
    format!(
        r#"{{"order_id": "o-{i}", "amount": {}.{:02}}}"#,
        cents / 100,
        cents % 100
    )
}

/// The function's environment as `template.yaml` sets it: every variable, with each
/// parameter's default, the table on `table`, the provider at `payment_url`, DynamoDB at
/// `dynamodb` (the SDK's own endpoint variable), and Lambda's log format from its
/// `LoggingConfig`. [`runtime_api::RuntimeApi`] adds the variables Lambda sets itself
/// (credentials, region, function name).
///
/// A provider on plain `http://` (the local stub) is refused inside Lambda, so for one the
/// function is told it runs under a local emulator (`PROCESS_ORDERS_LOCAL=1`): with the table
/// and the provider set, that changes nothing else on its path.
pub fn template_environment(
    table: &str,
    payment_url: &str,
    dynamodb: &str,
) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml"))
        .expect("template.yaml");
    let template: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("template");
    let properties = &template["Resources"]["OrdersFunction"]["Properties"];
    let function = properties["Environment"]["Variables"]
        .as_mapping()
        .expect("the function's variables");
    let mut env = Vec::new();
    if let Some(format) = properties["LoggingConfig"]["LogFormat"].as_str() {
        env.push(("AWS_LAMBDA_LOG_FORMAT".to_owned(), format.to_owned()));
    }
    for (name, value) in function {
        let name = name.as_str().expect("a name").to_owned();
        let value = match value {
            serde_yaml_ng::Value::Tagged(tagged) if tagged.tag == "!Ref" => {
                let parameter = tagged.value.as_str().expect("a parameter");
                match &template["Parameters"][parameter]["Default"] {
                    serde_yaml_ng::Value::String(s) => s.clone(),
                    serde_yaml_ng::Value::Number(n) => n.to_string(),
                    _ => continue,
                }
            }
            // !If (the claim check, off by default) and other conditionals: not set.
            serde_yaml_ng::Value::Tagged(_) => continue,
            other => other.as_str().map(str::to_owned).expect("a string"),
        };
        env.push((name, value));
    }
    for (name, value) in [
        ("IDEMPOTENCY_TABLE", table),
        ("PAYMENT_API_URL", payment_url),
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb),
    ] {
        env.retain(|(n, _)| n != name);
        env.push((name.to_owned(), value.to_owned()));
    }
    if payment_url.starts_with("http://") {
        env.push(("PROCESS_ORDERS_LOCAL".to_owned(), "1".to_owned()));
    }
    env
}

/// The repository's `events/` folder.
pub fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("events")
}

/// One sample event's JSON.
pub fn sample_event(name: &str) -> String {
    std::fs::read_to_string(events_dir().join(name)).expect("a sample event")
}

/// The sample events shipped in `events/`, by file name.
pub fn sample_events() -> Vec<(String, String)> {
    let dir = events_dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("events/ exists")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                std::fs::read_to_string(&path).expect("readable event"),
            )
        })
        .collect();
    files.sort();
    files
}

/// A TLS acceptor serving `certs` with `key` (a test's own certificate), on the same crypto
/// provider and protocol versions as the clients.
pub fn tls_acceptor(
    certs: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> tokio_rustls::TlsAcceptor {
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config))
}

/// The failed message ids of a response, in order.
pub fn failed_ids(response: &sqs_batch::edge::SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// Every metric name the function writes: those of one EMF document, and every count (counts
/// are written when they are not zero).
pub fn emitted_metrics() -> std::collections::BTreeSet<String> {
    let settings = crate::metrics::MetricsSettings {
        function_version: "7".to_owned(),
        level: None,
        namespace: "ProcessOrders".into(),
        service: "process-orders".into(),
        function_name: "f".into(),
    };
    let report =
        sqs_batch::processor::BatchReport::new(sqs_batch::edge::QueueKind::Standard, Vec::new());
    // One call of each kind, so the latency metrics are written.
    let one = crate::metrics::LatencySnapshot {
        values_ms: vec![1.0],
    };
    let invocation = crate::metrics::Invocation {
        report: &report,
        queue_arn: Some("arn:aws:sqs:us-east-1:123456789012:orders"),
        kind: sqs_batch::edge::QueueKind::Standard,
        timestamp_ms: 0,
        duration_ms: 0.0,
        store: one.clone(),
        payment: one,
        key_refreshes: 0,
        redrive_mismatch: false,
    };
    let cold: serde_json::Value =
        serde_json::from_str(&crate::metrics::cold_start_document(&settings, 0)).expect("EMF JSON");
    let doc: serde_json::Value =
        serde_json::from_str(&crate::metrics::document(&settings, &invocation)).expect("EMF JSON");
    let mut names: std::collections::BTreeSet<String> =
        doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .map(|m| m["Name"].as_str().expect("a name").to_owned())
            .collect();
    names.extend(
        cold["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .expect("metrics")
            .iter()
            .map(|m| m["Name"].as_str().expect("a name").to_owned()),
    );
    names.extend(
        crate::metrics::COUNT_METRICS
            .iter()
            .map(|m| (*m).to_owned()),
    );
    names
}
