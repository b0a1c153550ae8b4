//! `worker.yaml`, the worker's ECS service: its task role grants what the worker's adapters call
//! and nothing more, its stop timeout covers a receive and the drain, and its alarms watch the
//! metrics its tasks write.

use std::collections::BTreeSet;

use serde_yaml_ng::Value;

fn template() -> Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/worker.yaml")).unwrap();
    serde_yaml_ng::from_str(&text).expect("worker.yaml parses")
}

/// The statements of the task role's policies (the conditional one's too), by Sid.
fn statements(t: &Value) -> Vec<(String, BTreeSet<String>, String)> {
    let mut out = Vec::new();
    let policies = t["Resources"]["TaskRole"]["Properties"]["Policies"]
        .as_sequence()
        .expect("policies");
    for policy in policies {
        // `!If [condition, policy, AWS::NoValue]` is a tagged sequence.
        let policy = match policy {
            Value::Tagged(tagged) => &tagged.value.as_sequence().expect("!If")[1],
            plain => plain,
        };
        for s in policy["PolicyDocument"]["Statement"]
            .as_sequence()
            .expect("statements")
        {
            let actions = s["Action"]
                .as_sequence()
                .expect("actions")
                .iter()
                .map(|a| a.as_str().expect("action").to_owned())
                .collect();
            let resource = match &s["Resource"] {
                Value::Tagged(tagged) => tagged.value.as_str().unwrap_or_default().to_owned(),
                other => panic!("resource {other:?} is not a parameter of ours"),
            };
            out.push((
                s["Sid"].as_str().unwrap_or_default().to_owned(),
                actions,
                resource,
            ));
        }
    }
    out
}

fn set(actions: &[&str]) -> BTreeSet<String> {
    actions.iter().map(|a| (*a).to_owned()).collect()
}

/// Each resource gets exactly the actions of the adapters that call it: the table the store's,
/// the source queue the worker's and the visibility port's, the DLQ the moves'.
#[test]
fn the_task_role_grants_what_the_adapters_call_and_nothing_more() {
    let t = template();
    let by_resource = |name: &str| -> BTreeSet<String> {
        statements(&t)
            .into_iter()
            .filter(|(_, _, resource)| resource == name)
            .flat_map(|(_, actions, _)| actions)
            .collect()
    };
    assert_eq!(
        by_resource("IdempotencyTableArn"),
        set(idempotency::dynamodb::ACTIONS)
    );
    let mut source = set(sqs_batch::worker::sqs::ACTIONS);
    source.extend(set(sqs_batch::visibility::sqs::ACTIONS));
    assert_eq!(by_resource("QueueArn"), source);
    assert_eq!(
        by_resource("DeadLetterQueueArn"),
        set(sqs_batch::dead_letter::sqs::ACTIONS)
    );
    assert_eq!(
        by_resource("PaymentApiKeySecretArn"),
        set(&["secretsmanager:GetSecretValue"])
    );
    for (sid, actions, _) in statements(&t) {
        assert!(actions.iter().all(|a| !a.contains('*')), "{sid}");
    }
}

/// The default stop timeout covers the default receive and drain
/// (`sqs_batch::worker::stop_timeout_s`), and the task runs the worker on its queue.
#[test]
fn the_stop_timeout_covers_a_receive_and_the_drain() {
    let t = template();
    let parameter = |name: &str| t["Parameters"][name]["Default"].as_u64().expect(name);
    let options = sqs_batch::worker::WorkerOptions::default()
        .with_drain_timeout_ms(parameter("WorkerDrainTimeoutSeconds") * 1_000);
    assert!(parameter("StopTimeoutSeconds") >= sqs_batch::worker::stop_timeout_s(&options));
    assert!(parameter("StopTimeoutSeconds") <= 120, "Fargate's most");
    assert_eq!(
        t["Parameters"]["StopTimeoutSeconds"]["MinValue"].as_u64(),
        Some(sqs_batch::worker::stop_timeout_s(
            &sqs_batch::worker::WorkerOptions::default().with_drain_timeout_ms(1_000)
        ))
    );
    let container = &t["Resources"]["TaskDefinition"]["Properties"]["ContainerDefinitions"][0];
    let command: Vec<&str> = container["Command"]
        .as_sequence()
        .expect("command")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // The last is `!Ref QueueUrl`, read as the parameter's name.
    assert_eq!(command, ["worker", "--queue-url", "QueueUrl"]);
    let env: BTreeSet<&str> = container["Environment"]
        .as_sequence()
        .expect("environment")
        .iter()
        .filter_map(|e| e["Name"].as_str())
        .collect();
    assert!(
        env.contains("IDEMPOTENCY_TABLE"),
        "a worker fleet needs the table"
    );
}

/// A CloudFormation value of the alarms' dimensions, with `QueueName` = `queue_name`: a plain
/// string, `!Ref QueueName`, `!Sub`, `!Split` and `!Select`, as a list (one item but a split's).
fn evaluate(value: &Value, queue_name: &str) -> Vec<String> {
    let Value::Tagged(tagged) = value else {
        return vec![value.as_str().expect("a string").to_owned()];
    };
    let arguments = tagged.value.as_sequence();
    match tagged.tag.to_string().as_str() {
        "!Ref" => {
            assert_eq!(tagged.value.as_str(), Some("QueueName"));
            vec![queue_name.to_owned()]
        }
        "!Sub" => {
            let text = tagged.value.as_str().expect("a !Sub string");
            vec![text.replace("${QueueName}", queue_name)]
        }
        "!Split" => {
            let arguments = arguments.expect("!Split [delimiter, value]");
            let delimiter = arguments[0].as_str().expect("a delimiter");
            let text = evaluate(&arguments[1], queue_name).remove(0);
            text.split(delimiter).map(str::to_owned).collect()
        }
        "!Select" => {
            let arguments = arguments.expect("!Select [index, list]");
            let index = arguments[0].as_u64().expect("an index") as usize;
            vec![evaluate(&arguments[1], queue_name).remove(index)]
        }
        other => panic!("{other} is not evaluated here"),
    }
}

/// Issue 49, worker item 3. Each alarm watches a metric the workers write, as their task writes
/// it: the namespace and the four dimensions of the function's document, `Service` and
/// `FunctionName` as the task's environment makes them (`MetricsSettings::from_env`), and the
/// queue's own `QueueKind` (`fifo` for a `.fifo` name). A dimension off by one letter would
/// leave an alarm on no data, silent. The alarms are template.yaml's on the function's own
/// metrics: refused configuration, reconciliation, the poison rate.
#[test]
fn the_alarms_watch_the_metrics_the_task_writes() {
    let t = template();
    let container = &t["Resources"]["TaskDefinition"]["Properties"]["ContainerDefinitions"][0];
    let environment: std::collections::BTreeMap<String, String> = container["Environment"]
        .as_sequence()
        .expect("environment")
        .iter()
        .filter_map(|e| {
            Some((
                e["Name"].as_str()?.to_owned(),
                e["Value"].as_str()?.to_owned(),
            ))
        })
        .collect();
    let settings =
        process_orders::metrics::MetricsSettings::from_env(&lambda_kit::Env::new(|name| {
            environment.get(name).cloned()
        }))
        .expect("the task's metrics settings")
        .expect("metrics on");
    let mut watched = BTreeSet::new();
    let resources = t["Resources"].as_mapping().expect("resources");
    for (name, resource) in resources {
        if resource["Type"].as_str() != Some("AWS::CloudWatch::Alarm") {
            continue;
        }
        let name = name.as_str().expect("a name");
        let properties = &resource["Properties"];
        let metrics: Vec<&Value> = match properties["Metrics"].as_sequence() {
            Some(queries) => queries
                .iter()
                .filter_map(|q| q.get("MetricStat").map(|stat| &stat["Metric"]))
                .collect(),
            None => vec![properties],
        };
        for metric in metrics {
            let metric_name = metric["MetricName"].as_str().expect("a metric");
            assert!(
                process_orders::metrics::COUNT_METRICS.contains(&metric_name),
                "{name}: {metric_name}"
            );
            watched.insert(metric_name.to_owned());
            assert_eq!(
                metric["Namespace"].as_str(),
                Some(settings.namespace.as_str()),
                "{name}"
            );
            let dimensions = metric["Dimensions"].as_sequence().expect("dimensions");
            let names: Vec<&str> = dimensions
                .iter()
                .filter_map(|d| d["Name"].as_str())
                .collect();
            assert_eq!(names, process_orders::metrics::DIMENSIONS, "{name}");
            for queue in ["orders", "orders.fifo"] {
                let kind = if queue.ends_with(".fifo") {
                    sqs_batch::edge::QueueKind::Fifo
                } else {
                    sqs_batch::edge::QueueKind::Standard
                };
                let values: Vec<String> = dimensions
                    .iter()
                    .map(|d| evaluate(&d["Value"], queue).remove(0))
                    .collect();
                assert_eq!(
                    values,
                    [
                        settings.service.as_str(),
                        settings.function_name.as_str(),
                        queue,
                        kind.as_str()
                    ],
                    "{name}"
                );
            }
        }
    }
    assert_eq!(
        watched,
        [
            "NeedsReconciliation",
            "PaymentConfigErrors",
            "Poisoned",
            "Records"
        ]
        .map(str::to_owned)
        .into()
    );
}
