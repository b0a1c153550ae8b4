//! `worker.yaml`, the worker's ECS service: its task role grants what the worker's adapters call
//! and nothing more, and its stop timeout covers a receive and the drain.

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
