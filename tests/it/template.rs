//! `template.yaml` holds the settings that, wrong, lose data or loop forever. Each test is one
//! such rule; the values the code depends on come from the code's own constants.

use std::collections::BTreeSet;

use idempotency::dynamodb::{ACTIONS, KEY_ATTRIBUTE, TTL_ATTRIBUTE};
use serde_yaml_ng::Value;
use sqs_batch::visibility::sqs::ACTIONS as VISIBILITY_ACTIONS;

fn template() -> Value {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml")).unwrap();
    // serde_yaml_ng keeps CloudFormation short tags (!Ref, !GetAtt, !Sub, ...) as tagged values.
    serde_yaml_ng::from_str(&text).expect("template.yaml parses")
}

fn resources_of_type<'a>(t: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some(kind))
        .map(|(name, r)| (name.as_str().unwrap(), &r["Properties"]))
        .collect()
}

fn resource<'a>(t: &'a Value, name: &str) -> &'a Value {
    let r = &t["Resources"][name];
    assert!(!r.is_null(), "resource {name} missing");
    &r["Properties"]
}

/// `(tag, value)` of a short-tag form such as `!Ref X`.
fn tagged(v: &Value) -> Option<(String, &Value)> {
    match v {
        Value::Tagged(t) => Some((t.tag.to_string(), &t.value)),
        _ => None,
    }
}

/// A number, following `!Ref Parameter` to the parameter's default.
fn number(t: &Value, v: &Value) -> f64 {
    match tagged(v) {
        Some((tag, inner)) if tag == "!Ref" => {
            let param = &t["Parameters"][inner.as_str().unwrap()];
            assert!(!param.is_null(), "!Ref {inner:?} is not a parameter");
            number(t, &param["Default"])
        }
        Some((tag, _)) => panic!("cannot evaluate {tag}"),
        None => match v {
            Value::Number(n) => n.as_f64().unwrap(),
            Value::String(s) => s
                .parse()
                .unwrap_or_else(|_| panic!("{s:?} is not a number")),
            other => panic!("not a number: {other:?}"),
        },
    }
}

/// The parameter a value refers to, if it is `!Ref Parameter`.
fn parameter<'a>(t: &'a Value, v: &Value) -> Option<&'a Value> {
    match tagged(v) {
        Some((tag, inner)) if tag == "!Ref" => t["Parameters"].get(inner.as_str()?),
        _ => None,
    }
}

/// The logical id a `!GetAtt X.Arn` or `!Ref X` points at.
fn target(v: &Value) -> String {
    let (_, inner) = tagged(v).expect("a short-tag reference");
    inner
        .as_str()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .to_owned()
}

fn function(t: &Value) -> &Value {
    let functions = resources_of_type(t, "AWS::Serverless::Function");
    assert_eq!(functions.len(), 1);
    functions[0].1
}

fn mappings(t: &Value) -> Vec<&Value> {
    resources_of_type(t, "AWS::Lambda::EventSourceMapping")
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

fn source_queues(t: &Value) -> Vec<(&str, &Value)> {
    resources_of_type(t, "AWS::SQS::Queue")
        .into_iter()
        .filter(|(_, q)| !q["RedrivePolicy"].is_null())
        .collect()
}

#[test]
fn the_function_is_arm64_al2023_built_by_cargo_lambda() {
    let t = template();
    let f = &t["Resources"]["OrdersFunction"];
    assert_eq!(f["Properties"]["Runtime"].as_str(), Some("provided.al2023"));
    assert_eq!(f["Properties"]["Architectures"][0].as_str(), Some("arm64"));
    assert_eq!(f["Properties"]["Handler"].as_str(), Some("bootstrap"));
    assert_eq!(
        f["Metadata"]["BuildMethod"].as_str(),
        Some("rust-cargolambda")
    );
    assert_eq!(
        f["Metadata"]["BuildProperties"]["Binary"].as_str(),
        Some("process-orders")
    );
}

/// Visibility timeout >= 6 x function timeout + batching window, for every allowed timeout.
#[test]
fn queue_visibility_covers_six_function_timeouts_plus_the_window() {
    let t = template();
    let window_max = number(&t, &t["Parameters"]["BatchingWindow"]["MaxValue"]);
    let allowed = t["Parameters"]["FunctionTimeout"]["AllowedValues"]
        .as_sequence()
        .expect("enumerated timeouts");
    let table = &t["Mappings"]["VisibilityTimeout"];
    for timeout in allowed {
        let timeout = number(&t, timeout);
        let visibility = number(&t, &table[timeout.to_string().as_str()]["Seconds"]);
        assert!(
            visibility >= 6.0 * timeout + window_max,
            "timeout {timeout}: visibility {visibility}"
        );
    }
    for (name, queue) in source_queues(&t) {
        let (tag, args) =
            tagged(&queue["VisibilityTimeout"]).unwrap_or_else(|| panic!("{name}: not derived"));
        assert_eq!(tag, "!FindInMap", "{name}");
        assert_eq!(args[0].as_str(), Some("VisibilityTimeout"), "{name}");
        assert_eq!(
            tagged(&args[1]).map(|(tag, v)| (tag, v.as_str().map(str::to_owned))),
            Some(("!Ref".into(), Some("FunctionTimeout".into())))
        );
    }
    assert_eq!(
        number(&t, &function(&t)["Timeout"]),
        number(&t, &t["Parameters"]["FunctionTimeout"]["Default"])
    );
}

#[test]
fn max_receive_count_is_at_least_five() {
    let t = template();
    let queues = source_queues(&t);
    assert_eq!(queues.len(), 2, "a standard and a FIFO source queue");
    for (name, queue) in queues {
        let count = &queue["RedrivePolicy"]["maxReceiveCount"];
        assert!(number(&t, count) >= 5.0, "{name}");
        if let Some(param) = parameter(&t, count) {
            assert!(
                number(&t, &param["MinValue"]) >= 5.0,
                "{name}: the parameter allows less than 5"
            );
        }
    }
}

/// The shipped retry schedule: at the template's defaults, every visibility the function asks
/// for lies in [bound/2, bound] with no delay over 15 minutes (an order is charged at most 15
/// minutes after its dependency is back), and a record failing at every receive stays in its
/// queue for at least `RetrySurvivalHours` (24 h) before it gives up (at receive
/// `MaxReceiveCount - 1`, after `MaxReceiveCount - 2` delays), which the function checks at
/// start-up too. `--nocapture` prints the schedule docs/operations.md quotes.
#[test]
fn the_retry_schedule_survives_a_day_of_outage_with_no_delay_over_15_minutes() {
    let t = template();
    let default = |name: &str| number(&t, &t["Parameters"][name]["Default"]) as u64;
    let max_receive_count = default("MaxReceiveCount") as u32;
    let hours = default("RetrySurvivalHours");
    let policy = sqs_batch::backoff::BackoffPolicy::new(
        default("BackoffBaseSeconds"),
        default("BackoffCapSeconds"),
    );
    let retry =
        sqs_batch::processor::RecordStatus::Handled(sqs_batch::Verdict::retry("store_error"));
    let mut rng = fastrand::Rng::with_seed(25);
    let (mut least_total, mut most_total) = (0u64, 0u64);
    eprintln!("| receive n | smallest delay (s) | largest delay (s) | survived so far, at least |");
    eprintln!("|---|---|---|---|");
    let delays = max_receive_count - 2;
    for n in 1..=delays {
        let draws: Vec<u64> = [0, u64::MAX]
            .into_iter()
            .chain((0..200).map(|_| rng.u64(..)))
            .map(|random| policy.visibility(&retry, n, 0, random).expect("a delay"))
            .collect();
        let (least, most) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
        assert_eq!(*least, policy.least_delay(n), "receive {n}");
        assert!(*most <= 900, "receive {n}: a delay of {most} s");
        least_total += least;
        most_total += most;
        if n <= 10 || n % 50 == 0 || n == delays {
            eprintln!(
                "| {n} | {least} | {most} | {least_total} s ({:.1} h) |",
                least_total as f64 / 3_600.0
            );
        }
    }
    assert_eq!(least_total, policy.guaranteed_survival_s(delays));
    assert!(
        least_total >= hours * 3_600,
        "{max_receive_count} receives survive only {least_total} s"
    );
    eprintln!(
        "at most {most_total} s ({:.1} h) in all",
        most_total as f64 / 3_600.0
    );
    // The function starts with these settings, and refuses one receive fewer than a day needs.
    let env = |count: u32| {
        move |name: &str| match name {
            "SQS_BATCH_VISIBILITY_BACKOFF" => Some("true".to_owned()),
            "AWS_REGION" => Some("us-east-1".to_owned()),
            "SQS_BATCH_MAX_RECEIVE_COUNT" => Some(count.to_string()),
            _ => None,
        }
    };
    process_orders::config::Config::from_lookup(env(max_receive_count)).expect("starts");
    let short = (2..max_receive_count)
        .rev()
        .find(|m| policy.guaranteed_survival_s(m - 2) < hours * 3_600)
        .expect("a count too short");
    assert!(process_orders::config::Config::from_lookup(env(short)).is_err());
}

/// POISON is sent to the DLQs by the function: `sqs:SendMessage` on exactly the two DLQs, and
/// `sqs:GetQueueAttributes` to read their `MaximumMessageSize`; nothing else on them.
#[test]
fn the_function_may_only_send_to_the_dlqs_and_read_their_size() {
    let t = template();
    let dlqs: BTreeSet<String> = ["OrdersDlq", "OrdersFifoDlq"]
        .iter()
        .map(|n| (*n).to_owned())
        .collect();
    let on_dlqs: BTreeSet<String> = statements(&t)
        .into_iter()
        .filter(|s| {
            s["Resource"]
                .as_sequence()
                .is_some_and(|r| r.iter().any(|r| dlqs.contains(&target(r))))
        })
        .flat_map(actions)
        .collect();
    assert_eq!(
        on_dlqs,
        BTreeSet::from([
            "sqs:GetQueueAttributes".to_owned(),
            "sqs:SendMessage".to_owned()
        ])
    );
    let env = &function(&t)["Environment"]["Variables"];
    assert_eq!(env["SQS_BATCH_MOVE_POISON_TO_DLQ"].as_str(), Some("true"));
    // And what the adapter calls is granted: GetQueueAttributes on the sources and the DLQs,
    // SendMessage here.
    let granted: BTreeSet<String> = statements(&t).into_iter().flat_map(actions).collect();
    for action in sqs_batch::dead_letter::sqs::ACTIONS {
        assert!(granted.contains(*action), "{action}");
    }
}

#[test]
fn each_queue_has_its_own_dlq_of_the_same_kind_kept_14_days_and_longer_than_the_source() {
    let t = template();
    let mut dlqs = BTreeSet::new();
    for (name, queue) in source_queues(&t) {
        let dlq_name = target(&queue["RedrivePolicy"]["deadLetterTargetArn"]);
        let dlq = resource(&t, &dlq_name);
        assert!(dlqs.insert(dlq_name.clone()), "{dlq_name} shared");
        assert_eq!(
            number(&t, &dlq["MessageRetentionPeriod"]),
            1_209_600.0,
            "{dlq_name}"
        );
        assert!(
            number(&t, &dlq["MessageRetentionPeriod"])
                > number(&t, &queue["MessageRetentionPeriod"]),
            "{name}"
        );
        assert_eq!(
            queue["FifoQueue"].as_bool().unwrap_or(false),
            dlq["FifoQueue"].as_bool().unwrap_or(false),
            "{name} / {dlq_name}"
        );
        // Encrypted at rest either way: SSE-SQS, or SSE-KMS with DataKmsKeyArn (see
        // a_customer_managed_key_covers_every_queue_topic_and_the_table).
        for (name, q) in [(name, queue), (dlq_name.as_str(), dlq)] {
            let (tag, inner) = tagged(&q["SqsManagedSseEnabled"]).expect("!If");
            assert_eq!(tag, "!If", "{name}");
            assert_eq!(
                inner[2].as_bool(),
                Some(true),
                "{name}: SSE-SQS without a key"
            );
            assert!(!q["KmsMasterKeyId"].is_null(), "{name}: SSE-KMS with one");
        }
    }
}

#[test]
fn batch_sizes_fit_their_queue_kind() {
    let t = template();
    let maps = mappings(&t);
    assert_eq!(maps.len(), 2);
    for m in maps {
        let queue = resource(&t, &target(&m["EventSourceArn"]));
        let fifo = queue["FifoQueue"].as_bool().unwrap_or(false);
        let size = &m["BatchSize"];
        let window = &m["MaximumBatchingWindowInSeconds"];
        if fifo {
            assert!(number(&t, size) <= 10.0);
            if let Some(param) = parameter(&t, size) {
                assert!(
                    number(&t, &param["MaxValue"]) <= 10.0,
                    "FIFO batch parameter allows > 10"
                );
            }
            assert!(window.is_null(), "FIFO mappings take no batching window");
        } else if number(&t, size) > 10.0 {
            assert!(
                number(&t, window) >= 1.0,
                "batch size > 10 needs a batching window >= 1 s"
            );
        }
        assert!(
            !t["Rules"]["BatchSizeAboveTenNeedsWindow"].is_null(),
            "the rule guarding other parameter values"
        );
    }
}

#[test]
fn every_mapping_reports_batch_item_failures_and_caps_concurrency() {
    let t = template();
    for m in mappings(&t) {
        let types: Vec<_> = m["FunctionResponseTypes"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(types, ["ReportBatchItemFailures"]);
        assert!(number(&t, &m["ScalingConfig"]["MaximumConcurrency"]) >= 2.0);
    }
}

#[test]
fn the_table_matches_what_the_store_writes() {
    let t = template();
    let tables = resources_of_type(&t, "AWS::DynamoDB::Table");
    assert_eq!(tables.len(), 1);
    let table = tables[0].1;
    let keys = table["KeySchema"].as_sequence().unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0]["AttributeName"].as_str(), Some(KEY_ATTRIBUTE));
    assert_eq!(keys[0]["KeyType"].as_str(), Some("HASH"));
    let defs = table["AttributeDefinitions"].as_sequence().unwrap();
    assert_eq!(defs.len(), 1);
    assert_eq!(
        (
            defs[0]["AttributeName"].as_str(),
            defs[0]["AttributeType"].as_str()
        ),
        (Some(KEY_ATTRIBUTE), Some("S"))
    );
    assert_eq!(
        table["TimeToLiveSpecification"]["AttributeName"].as_str(),
        Some(TTL_ATTRIBUTE)
    );
    assert_eq!(
        table["TimeToLiveSpecification"]["Enabled"].as_bool(),
        Some(true)
    );
    assert_eq!(table["BillingMode"].as_str(), Some("PAY_PER_REQUEST"));
    assert_eq!(
        table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"].as_bool(),
        Some(true)
    );
    assert_eq!(
        table["SSESpecification"]["SSEEnabled"].as_bool(),
        Some(true)
    );
}

fn statements(t: &Value) -> Vec<&Value> {
    function(t)["Policies"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|p| {
            p["Statement"]
                .as_sequence()
                .map(|s| s.iter().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect()
}

/// A statement's actions, whether one string or a list.
fn actions(statement: &Value) -> BTreeSet<String> {
    match &statement["Action"] {
        Value::String(one) => BTreeSet::from([one.clone()]),
        list => list
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect(),
    }
}

#[test]
fn the_table_actions_are_exactly_the_ones_the_store_calls() {
    let t = template();
    let on_table: BTreeSet<String> = statements(&t)
        .into_iter()
        .filter(|s| {
            s["Resource"]
                .as_sequence()
                .map_or_else(|| vec![&s["Resource"]], |r| r.iter().collect())
                .iter()
                .any(|r| tagged(r).is_some() && target(r) == "IdempotencyTable")
        })
        .flat_map(actions)
        .collect();
    let expected: BTreeSet<String> = ACTIONS.iter().map(|a| (*a).to_owned()).collect();
    assert_eq!(on_table, expected);
}

/// The source queues get what the mappings need plus what the backoff calls, nothing more.
#[test]
fn the_queue_actions_are_the_mapping_ones_plus_the_backoff() {
    let t = template();
    let sources: BTreeSet<String> = source_queues(&t)
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    let on_queues: BTreeSet<String> = statements(&t)
        .into_iter()
        .filter(|s| {
            let resources: BTreeSet<String> = s["Resource"]
                .as_sequence()
                .map(|r| r.iter().map(target).collect())
                .unwrap_or_default();
            resources == sources
        })
        .flat_map(actions)
        .collect();
    let mut expected: BTreeSet<String> = [
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    expected.extend(VISIBILITY_ACTIONS.iter().map(|a| (*a).to_owned()));
    assert_eq!(on_queues, expected);
}

#[test]
fn no_wildcards_in_the_function_policy() {
    let t = template();
    for statement in statements(&t) {
        for action in actions(statement) {
            assert!(!action.contains('*'), "{action}");
        }
        let resources = statement["Resource"]
            .as_sequence()
            .map_or_else(|| vec![&statement["Resource"]], |r| r.iter().collect());
        for r in resources {
            assert!(
                r.as_str() != Some("*") && tagged(r).is_some(),
                "resource {r:?} is not one of ours"
            );
        }
    }
}

/// Every variable the code reads is set on the function, and nothing else is; the local-only
/// switch is never set in AWS.
#[test]
fn the_function_environment_matches_the_code() {
    let t = template();
    let set: BTreeSet<&str> = function(&t)["Environment"]["Variables"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    // Set by local emulators only: ours, and SAM's own for `sam local invoke`.
    let local_only = ["PROCESS_ORDERS_LOCAL", "AWS_SAM_LOCAL"];
    // Read in place of IDEMPOTENCY_RETENTION_DAYS, which the template sets: setting both is an
    // error, so the template leaves the seconds unset.
    let instead_of_a_set_one = ["IDEMPOTENCY_RETENTION_SECONDS"];
    let variables = process_orders::config::variables();
    let read: BTreeSet<&str> = variables
        .iter()
        .map(|(name, _)| *name)
        .filter(|n| !local_only.contains(n) && !instead_of_a_set_one.contains(n))
        .collect();
    assert_eq!(set, read);
    for name in local_only {
        assert!(!set.contains(name), "{name} must never be set in AWS");
    }
}

/// A key must be remembered as long as any message can come back for it: the source queue's
/// retention plus the DLQ's (a redrive). Shorter, and a "charge may exist" record could vanish
/// before a redriven message meets it. The parameter cannot be set below that.
#[test]
fn keys_are_remembered_as_long_as_a_message_can_come_back() {
    let t = template();
    for (_, queue) in source_queues(&t) {
        let dlq = resource(&t, &target(&queue["RedrivePolicy"]["deadLetterTargetArn"]));
        let days = (number(&t, &queue["MessageRetentionPeriod"])
            + number(&t, &dlq["MessageRetentionPeriod"]))
            / 86_400.0;
        let retention = &t["Parameters"]["IdempotencyRetentionDays"];
        assert!(number(&t, &retention["MinValue"]) >= days);
        assert!(number(&t, &retention["Default"]) >= days);
    }
}

/// The margins that keep records out of the deadline cannot be set below the code's minimum.
#[test]
fn the_margins_have_the_codes_minimum() {
    let t = template();
    for (name, minimum) in [
        (
            "DeadlineMarginMs",
            sqs_batch::processor::MIN_DEADLINE_MARGIN_MS,
        ),
        (
            "IdempotencyLeaseMarginMs",
            idempotency::LeasePolicy::MIN_MARGIN_MS,
        ),
    ] {
        assert_eq!(
            number(&t, &t["Parameters"][name]["MinValue"]),
            minimum as f64,
            "{name}"
        );
    }
}

#[test]
fn alarms_watch_the_dlqs_the_queue_age_errors_and_throttles() {
    let t = template();
    let alarms = resources_of_type(&t, "AWS::CloudWatch::Alarm");
    let watched = |metric: &str| -> Vec<&Value> {
        alarms
            .iter()
            .filter(|(_, a)| a["MetricName"].as_str() == Some(metric))
            .map(|(_, a)| *a)
            .collect()
    };
    let dlq_alarms = watched("ApproximateNumberOfMessagesVisible");
    let dlqs: BTreeSet<String> = source_queues(&t)
        .iter()
        .map(|(_, q)| target(&q["RedrivePolicy"]["deadLetterTargetArn"]))
        .collect();
    let alarmed: BTreeSet<String> = dlq_alarms
        .iter()
        .map(|a| target(&a["Dimensions"][0]["Value"]))
        .collect();
    assert_eq!(alarmed, dlqs);
    for a in dlq_alarms {
        assert_eq!(number(&t, &a["Threshold"]), 0.0);
        assert_eq!(
            a["ComparisonOperator"].as_str(),
            Some("GreaterThanThreshold")
        );
    }
    assert_eq!(watched("ApproximateAgeOfOldestMessage").len(), 2);
    // The function's errors, the live alias's, and the newest version's (the canary's
    // rollback trigger).
    let errors = watched("Errors");
    assert_eq!(errors.len(), 3);
    assert_eq!(
        errors
            .iter()
            .filter(|a| a["Dimensions"][1]["Name"].as_str() == Some("Resource"))
            .count(),
        2
    );
    assert_eq!(watched("Throttles").len(), 1);
}

/// A payment configuration error (a rotated key, a wrong URL) retries every record with backoff
/// and would otherwise only show in the DLQ days later: one alarm per source queue, on the
/// metric, namespace and dimensions the function writes.
#[test]
fn payment_configuration_errors_alarm_for_each_queue() {
    an_alarm_for_each_queue("PaymentConfigErrors");
}

/// A charge that may exist past the key window waits for a person: the runbook's entry pages.
#[test]
fn needs_reconciliation_alarms_for_each_queue() {
    an_alarm_for_each_queue("NeedsReconciliation");
}

/// The function's name and log group are generated by CloudFormation: the Outputs give them, so
/// the runbook's commands can find them.
#[test]
fn the_outputs_name_the_function_and_its_log_group() {
    let t = template();
    let outputs = &t["Outputs"];
    assert_eq!(
        target(&outputs["OrdersFunctionName"]["Value"]),
        "OrdersFunction"
    );
    assert_eq!(
        target(&outputs["OrdersFunctionLogGroupName"]["Value"]),
        "OrdersFunctionLogGroup"
    );
    // The log group the function writes to (its name follows the function's).
    resource(&t, "OrdersFunctionLogGroup");
}

/// Every source queue has an alarm on `metric` above zero, with the dimensions the function
/// writes.
fn an_alarm_for_each_queue(metric: &str) {
    let t = template();
    assert!(process_orders::metrics::COUNT_METRICS.contains(&metric));
    let namespace = function(&t)["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
        .as_str()
        .unwrap()
        .to_owned();
    // Per queue, not per version (the canary's rollback alarms name `ExecutedVersion`).
    let per_version = |a: &Value| {
        a["Dimensions"].as_sequence().is_some_and(|dims| {
            dims.iter()
                .any(|d| d["Name"].as_str() == Some("ExecutedVersion"))
        })
    };
    let alarms: Vec<&Value> = resources_of_type(&t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .filter(|(_, a)| a["MetricName"].as_str() == Some(metric) && !per_version(a))
        .map(|(_, a)| a)
        .collect();
    let mut queues = BTreeSet::new();
    for a in &alarms {
        assert_eq!(a["Namespace"].as_str(), Some(namespace.as_str()));
        assert_eq!(number(&t, &a["Threshold"]), 0.0);
        let dims = a["Dimensions"].as_sequence().unwrap();
        let names: Vec<&str> = dims.iter().map(|d| d["Name"].as_str().unwrap()).collect();
        assert_eq!(names, process_orders::metrics::DIMENSIONS);
        // The service the function writes is the one the alarm watches.
        assert_eq!(target(&dims[0]["Value"]), "ServiceName");
        let service = &function(&t)["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"];
        assert_eq!(target(service), "ServiceName");
        assert_eq!(target(&dims[1]["Value"]), "OrdersFunction");
        let queue = target(&dims[2]["Value"]);
        let fifo = resource(&t, &queue)["FifoQueue"].as_bool() == Some(true);
        assert_eq!(
            dims[3]["Value"].as_str(),
            Some(if fifo { "fifo" } else { "standard" })
        );
        queues.insert(queue);
    }
    let sources: BTreeSet<String> = source_queues(&t)
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    assert_eq!(queues, sources);
}

/// cargo-lambda builds release with panic=abort; a panic must unwind to become RETRY.
#[test]
fn the_release_profile_unwinds_on_panic() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let release = manifest
        .split("[profile.release]")
        .nth(1)
        .expect("a release profile");
    let release = release.split("\n[").next().unwrap();
    assert!(
        release
            .lines()
            .any(|l| l.trim().replace(' ', "") == "panic=\"unwind\""),
        "{release}"
    );
}

/// The topic a `!If [CreateTopics, !Ref Created, !Ref ExistingParameter]` picks in each branch.
fn topic_choices(v: &Value) -> (String, String) {
    let (tag, inner) = tagged(v).expect("an !If between the created and the existing topic");
    assert_eq!(tag, "!If");
    let branches = inner.as_sequence().expect("!If [condition, then, else]");
    assert_eq!(branches[0].as_str(), Some("CreateTopics"));
    (target(&branches[1]), target(&branches[2]))
}

#[test]
fn each_queue_subscribes_to_its_own_kind_of_topic_with_the_chosen_raw_delivery() {
    let t = template();
    let subscriptions = resources_of_type(&t, "AWS::SNS::Subscription");
    assert_eq!(subscriptions.len(), 2, "one subscription per source queue");
    let raw = &t["Parameters"]["RawMessageDelivery"];
    assert_eq!(
        raw["AllowedValues"].as_sequence().map(Vec::len),
        Some(2),
        "raw delivery is an explicit true/false choice"
    );
    for (name, s) in subscriptions {
        assert_eq!(s["Protocol"].as_str(), Some("sqs"), "{name}");
        let queue = target(&s["Endpoint"]);
        let fifo_queue = resource(&t, &queue)["FifoQueue"].as_bool() == Some(true);
        let (created, existing) = topic_choices(&s["TopicArn"]);
        let fifo_topic = resource(&t, &created)["FifoTopic"].as_bool() == Some(true);
        assert_eq!(
            fifo_queue, fifo_topic,
            "{name}: queue and topic are of the same kind"
        );
        let pattern = t["Parameters"][existing.as_str()]["AllowedPattern"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            pattern.contains("fifo"),
            fifo_queue,
            "{name}: the existing topic's ARN pattern matches the queue kind"
        );
        assert_eq!(
            tagged(&s["RawMessageDelivery"]).map(|(tag, v)| (tag, v.as_str().map(str::to_owned))),
            Some(("!Ref".to_owned(), Some("RawMessageDelivery".to_owned()))),
            "{name}: raw delivery follows the parameter"
        );
    }
}

#[test]
fn sns_may_send_to_a_queue_only_from_its_own_topic() {
    let t = template();
    let subscriptions = resources_of_type(&t, "AWS::SNS::Subscription");
    // The policies of the queues SNS feeds (every queue has one: see the TLS rule).
    let policies: Vec<(&str, &Value)> = resources_of_type(&t, "AWS::SQS::QueuePolicy")
        .into_iter()
        .filter(|(_, p)| {
            let queues = p["Queues"].as_sequence().expect("Queues");
            queues.iter().any(|q| {
                subscriptions
                    .iter()
                    .any(|(_, s)| target(&s["Endpoint"]) == target(q))
            })
        })
        .collect();
    assert_eq!(policies.len(), 2, "one policy per subscribed queue");
    for (name, p) in policies {
        let queues = p["Queues"].as_sequence().expect("Queues");
        assert_eq!(queues.len(), 1, "{name}: one queue per policy");
        let queue = target(&queues[0]);
        // The topic subscribed to this queue.
        let (_, subscription) = subscriptions
            .iter()
            .find(|(_, s)| target(&s["Endpoint"]) == queue)
            .unwrap_or_else(|| panic!("{name}: no subscription feeds {queue}"));
        let topic = topic_choices(&subscription["TopicArn"]);
        let mut allows = 0;
        for statement in p["PolicyDocument"]["Statement"]
            .as_sequence()
            .expect("statements")
        {
            // Only with fan-out; every other statement denies.
            let statement = match tagged(statement) {
                Some((tag, inner)) if tag == "!If" => {
                    let branches = inner.as_sequence().expect("!If branches");
                    assert_eq!(branches[0].as_str(), Some("HasFanOut"), "{name}");
                    &branches[1]
                }
                _ => {
                    assert_eq!(statement["Effect"].as_str(), Some("Deny"), "{name}");
                    continue;
                }
            };
            allows += 1;
            let principal = &statement["Principal"];
            assert!(
                principal.as_str() != Some("*") && principal["AWS"].as_str() != Some("*"),
                "{name}: no statement for any principal"
            );
            assert_eq!(
                principal["Service"].as_str(),
                Some("sns.amazonaws.com"),
                "{name}"
            );
            assert_eq!(statement["Effect"].as_str(), Some("Allow"));
            assert_eq!(
                actions(statement),
                BTreeSet::from(["sqs:SendMessage".to_owned()]),
                "{name}"
            );
            assert_eq!(
                target(&statement["Resource"]),
                queue,
                "{name}: scoped to its queue"
            );
            let source = &statement["Condition"]["ArnEquals"]["aws:SourceArn"];
            assert!(
                !source.is_null(),
                "{name}: an aws:SourceArn condition is required"
            );
            assert_eq!(
                topic_choices(source),
                topic,
                "{name}: the condition names the subscribed topic"
            );
        }
        assert_eq!(allows, 1, "{name}: SNS's one statement");
    }
}

/// Every queue, topic and bucket the stack creates refuses requests without TLS, whoever sends
/// them: a Deny for any principal on `aws:SecureTransport` false, in its resource policy.
#[test]
fn every_queue_topic_and_bucket_refuses_requests_without_tls() {
    let t = template();
    let denies_without_tls = |statement: &Value, action: &str| {
        statement["Effect"].as_str() == Some("Deny")
            && statement["Principal"].as_str() == Some("*")
            && statement["Action"].as_str() == Some(action)
            && statement["Condition"]["Bool"]["aws:SecureTransport"].as_str() == Some("false")
    };
    let resources = |statement: &Value| -> BTreeSet<String> {
        match statement["Resource"].as_sequence() {
            Some(list) => list.iter().map(target).collect(),
            None => BTreeSet::from([target(&statement["Resource"])]),
        }
    };
    // What the policies of `kind` cover (their `list` of resources), each checked to deny
    // `action` without TLS on exactly those resources.
    let covered = |kind: &str, list: &str, action: &str| -> BTreeSet<String> {
        let mut covered = BTreeSet::new();
        for (name, policy) in resources_of_type(&t, kind) {
            let own: BTreeSet<String> = policy[list]
                .as_sequence()
                .expect("the policy's resources")
                .iter()
                .map(target)
                .collect();
            let deny = policy["PolicyDocument"]["Statement"]
                .as_sequence()
                .expect("statements")
                .iter()
                .find(|s| denies_without_tls(s, action))
                .unwrap_or_else(|| panic!("{name}: no TLS rule"));
            assert_eq!(resources(deny), own, "{name}: the rule covers its own");
            covered.extend(own);
        }
        covered
    };
    let all = |kind: &str| -> BTreeSet<String> {
        resources_of_type(&t, kind)
            .into_iter()
            .map(|(name, _)| name.to_owned())
            .collect()
    };
    assert_eq!(
        covered("AWS::SQS::QueuePolicy", "Queues", "sqs:*"),
        all("AWS::SQS::Queue"),
        "every queue"
    );
    assert_eq!(
        covered("AWS::SNS::TopicPolicy", "Topics", "sns:Publish"),
        all("AWS::SNS::Topic"),
        "every topic"
    );
    let bucket = resource(&t, "PayloadBucketPolicy");
    assert!(
        bucket["PolicyDocument"]["Statement"]
            .as_sequence()
            .expect("statements")
            .iter()
            .any(|s| denies_without_tls(s, "s3:*")),
        "the payload bucket"
    );
}

/// `DataKmsKeyArn` puts every queue, topic and the table under one customer managed key, and
/// lets the function use it only through SQS and DynamoDB; empty, the AWS keys stay.
#[test]
fn a_customer_managed_key_covers_every_queue_topic_and_the_table() {
    let t = template();
    assert_eq!(
        t["Parameters"]["DataKmsKeyArn"]["Default"].as_str(),
        Some("")
    );
    // `!If [HasDataKey, then, else]` as (then, else).
    let choice = |v: &Value| -> (String, String) {
        let (tag, inner) = tagged(v).expect("!If");
        assert_eq!(tag, "!If");
        let branches = inner.as_sequence().expect("branches");
        assert_eq!(branches[0].as_str(), Some("HasDataKey"));
        let show = |b: &Value| match tagged(b) {
            Some((_, inner)) => inner.as_str().unwrap_or_default().to_owned(),
            None => match b {
                Value::Bool(b) => b.to_string(),
                other => other.as_str().unwrap_or_default().to_owned(),
            },
        };
        (show(&branches[1]), show(&branches[2]))
    };
    for (name, queue) in resources_of_type(&t, "AWS::SQS::Queue") {
        assert_eq!(
            choice(&queue["KmsMasterKeyId"]),
            ("DataKmsKeyArn".into(), "AWS::NoValue".into()),
            "{name}"
        );
        assert_eq!(
            choice(&queue["SqsManagedSseEnabled"]),
            ("false".into(), "true".into()),
            "{name}"
        );
    }
    for (name, topic) in resources_of_type(&t, "AWS::SNS::Topic") {
        assert_eq!(
            choice(&topic["KmsMasterKeyId"]),
            ("DataKmsKeyArn".into(), "alias/aws/sns".into()),
            "{name}"
        );
    }
    let sse = &resource(&t, "IdempotencyTable")["SSESpecification"];
    assert_eq!(sse["SSEEnabled"].as_bool(), Some(true));
    assert_eq!(
        choice(&sse["SSEType"]),
        ("KMS".into(), "AWS::NoValue".into())
    );
    assert_eq!(
        choice(&sse["KMSMasterKeyId"]),
        ("DataKmsKeyArn".into(), "AWS::NoValue".into())
    );
    let statements = conditional_statements(&t, "HasDataKey");
    assert_eq!(statements.len(), 1);
    assert_eq!(
        actions(&statements[0]),
        BTreeSet::from(["kms:Decrypt".to_owned(), "kms:GenerateDataKey".to_owned()])
    );
    assert_eq!(target(&statements[0]["Resource"]), "DataKmsKeyArn");
    let via = statements[0]["Condition"]["StringEquals"]["kms:ViaService"]
        .as_sequence()
        .expect("the services");
    assert_eq!(via.len(), 2, "SQS and DynamoDB only");
}

/// Code signing is an option: with a configuration, Lambda refuses unsigned code.
#[test]
fn code_signing_is_an_option() {
    let t = template();
    assert_eq!(
        t["Parameters"]["CodeSigningConfigArn"]["Default"].as_str(),
        Some("")
    );
    let (tag, inner) = tagged(&function(&t)["CodeSigningConfigArn"]).expect("!If");
    assert_eq!(tag, "!If");
    let branches = inner.as_sequence().expect("branches");
    assert_eq!(branches[0].as_str(), Some("HasCodeSigning"));
    assert_eq!(target(&branches[1]), "CodeSigningConfigArn");
}

/// The statements of the function's policy `!If [condition, {Statement: ...}, NoValue]`.
fn conditional_statements<'a>(t: &'a Value, condition: &str) -> &'a Vec<Value> {
    let branches: Vec<&Vec<Value>> = function(t)["Policies"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|p| match tagged(p) {
            Some((tag, inner)) if tag == "!If" => inner.as_sequence(),
            _ => None,
        })
        .filter(|branches| branches[0].as_str() == Some(condition))
        .collect();
    assert_eq!(branches.len(), 1, "one policy under {condition}");
    let (tag, _) = tagged(&branches[0][2]).expect("!Ref AWS::NoValue");
    assert_eq!(tag, "!Ref", "nothing granted without {condition}");
    branches[0][1]["Statement"].as_sequence().unwrap()
}

/// The payment API key's secret: `GetSecretValue` on that one ARN, only when it is set; a
/// customer managed KMS key only through Secrets Manager and for that secret; and the two key
/// parameters are one or the other, never both, in the function's environment and in a rule
/// CloudFormation checks before it deploys.
#[test]
fn the_payment_key_secret_is_read_with_least_privilege() {
    let t = template();
    let reads = conditional_statements(&t, "HasPaymentKeySecret");
    assert_eq!(reads.len(), 1);
    assert_eq!(
        actions(&reads[0]),
        BTreeSet::from(["secretsmanager:GetSecretValue".to_owned()])
    );
    assert_eq!(reads[0]["Effect"].as_str(), Some("Allow"));
    assert_eq!(target(&reads[0]["Resource"]), "PaymentApiKeySecretArn");
    assert!(reads[0]["Condition"].is_null());

    let decrypt = conditional_statements(&t, "HasPaymentKeySecretKmsKey");
    assert_eq!(decrypt.len(), 1);
    assert_eq!(
        actions(&decrypt[0]),
        BTreeSet::from(["kms:Decrypt".to_owned()])
    );
    assert_eq!(
        target(&decrypt[0]["Resource"]),
        "PaymentApiKeySecretKmsKeyArn"
    );
    let equals = &decrypt[0]["Condition"]["StringEquals"];
    let (tag, via) = tagged(&equals["kms:ViaService"]).expect("!Sub");
    assert_eq!(tag, "!Sub");
    assert_eq!(
        via.as_str(),
        Some("secretsmanager.${AWS::Region}.amazonaws.com")
    );
    assert_eq!(
        target(&equals["kms:EncryptionContext:SecretARN"]),
        "PaymentApiKeySecretArn"
    );
    // No other statement names Secrets Manager or KMS.
    for statement in statements(&t) {
        for action in actions(statement) {
            assert!(
                !action.starts_with("secretsmanager:") && !action.starts_with("kms:"),
                "{action} outside the conditional statements"
            );
        }
    }

    // The function gets one of the two variables, chosen by the same condition.
    let env = &function(&t)["Environment"]["Variables"];
    for (name, set_when_secret) in [("PAYMENT_API_KEY_SECRET", true), ("PAYMENT_API_KEY", false)] {
        let (tag, inner) = tagged(&env[name]).expect("!If");
        assert_eq!(tag, "!If", "{name}");
        let branches = inner.as_sequence().unwrap();
        assert_eq!(branches[0].as_str(), Some("HasPaymentKeySecret"), "{name}");
        let (chosen, other) = if set_when_secret { (1, 2) } else { (2, 1) };
        assert_eq!(
            tagged(&branches[other]).map(|(_, v)| v.as_str()),
            Some(Some("AWS::NoValue")),
            "{name}"
        );
        let parameter = target(&branches[chosen]);
        assert!(!t["Parameters"][parameter.as_str()].is_null(), "{name}");
    }
    // Never both: a rule CloudFormation evaluates before it changes anything.
    let rule = &t["Rules"]["OnePaymentKeySource"];
    assert!(rule["RuleCondition"].is_null(), "the rule always applies");
    let assertion = serde_yaml_ng::to_string(&rule["Assertions"][0]["Assert"]).unwrap();
    for needle in ["!Or", "PaymentApiKey", "PaymentApiKeySecretArn"] {
        assert!(assertion.contains(needle), "{needle} in {assertion}");
    }
    let secret = &t["Parameters"]["PaymentApiKeySecretArn"];
    assert_eq!(secret["Default"].as_str(), Some(""));
    assert!(
        secret["AllowedPattern"]
            .as_str()
            .unwrap()
            .contains(":secretsmanager:")
    );
    assert_eq!(
        t["Parameters"]["PaymentApiKey"]["NoEcho"].as_bool(),
        Some(true)
    );
}

#[test]
fn the_claim_check_reads_only_its_prefix_and_payloads_expire_with_the_messages() {
    let t = template();
    let prefix = claim_check::PAYLOAD_PREFIX;
    // The function's S3 statement, inside `!If [ClaimCheckEnabled, {Statement: ...}, NoValue]`.
    let statements = conditional_statements(&t, "ClaimCheckEnabled");
    assert_eq!(statements.len(), 1);
    assert_eq!(
        actions(&statements[0]),
        BTreeSet::from(["s3:GetObject".to_owned()])
    );
    let (tag, arn) = tagged(&statements[0]["Resource"]).expect("!Sub");
    assert_eq!(tag, "!Sub");
    assert_eq!(
        arn.as_str(),
        Some(format!("${{PayloadBucket.Arn}}/{prefix}*").as_str())
    );

    let bucket = resource(&t, "PayloadBucket");
    assert_eq!(
        t["Resources"]["PayloadBucket"]["Condition"].as_str(),
        Some("ClaimCheckEnabled")
    );
    let rules = bucket["LifecycleConfiguration"]["Rules"]
        .as_sequence()
        .unwrap();
    let expiry = rules
        .iter()
        .find(|r| r["Prefix"].as_str() == Some(prefix))
        .expect("a lifecycle rule on the payload prefix");
    assert_eq!(expiry["Status"].as_str(), Some("Enabled"));
    assert_eq!(
        tagged(&expiry["ExpirationInDays"]).map(|(tag, v)| (tag, v.as_str().map(str::to_owned))),
        Some((
            "!Ref".to_owned(),
            Some("IdempotencyRetentionDays".to_owned())
        )),
        "payloads live as long as a message can point at them (source retention + DLQ window)"
    );
    let block = &bucket["PublicAccessBlockConfiguration"];
    for setting in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(block[setting].as_bool(), Some(true), "{setting}");
    }
    let env = &function(&t)["Environment"]["Variables"];
    let (tag, inner) = tagged(&env["CLAIM_CHECK_BUCKET"]).expect("!If");
    assert_eq!(tag, "!If");
    assert_eq!(target(&inner.as_sequence().unwrap()[1]), "PayloadBucket");
}

/// `sam local invoke` needs Docker, which a development machine may lack; what it would run can
/// still be checked. `sam-local-env.json` (its `--env-vars` file) must override every variable
/// SAM cannot resolve locally (resources, conditions, parameters without a default) and turn
/// off what needs AWS, and may name only the template's variables (SAM ignores others); the
/// binary started with the template's environment so overridden, plus the `AWS_SAM_LOCAL=true`
/// SAM sets, must start inside an emulated Lambda and answer a sample event.
#[test]
fn the_sam_local_env_vars_file_runs_the_function_without_aws() {
    let t = template();
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/sam-local-env.json"))
            .unwrap(),
    )
    .expect("sam-local-env.json is JSON");
    let overrides = file["OrdersFunction"]
        .as_object()
        .expect("keyed by the function");
    let mut env: Vec<(String, String)> = Vec::new();
    for (name, value) in function(&t)["Environment"]["Variables"]
        .as_mapping()
        .unwrap()
    {
        let name = name.as_str().unwrap();
        let local = match (overrides.get(name), tagged(value)) {
            (Some(v), _) => v.as_str().expect("a string").to_owned(),
            (None, Some((tag, inner))) if tag == "!Ref" => {
                let parameter = &t["Parameters"][inner.as_str().unwrap()];
                assert!(
                    !parameter.is_null(),
                    "{name}: !Ref {inner:?} needs an override"
                );
                match &parameter["Default"] {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => panic!("{name}: {inner:?} has no default: it needs an override"),
                }
            }
            (None, Some((tag, _))) => panic!("{name} ({tag}) needs an override"),
            (None, None) => value.as_str().expect("a string").to_owned(),
        };
        env.push((name.to_owned(), local));
    }
    for name in overrides.keys() {
        assert!(
            env.iter().any(|(n, _)| n == name),
            "{name} is not a template variable"
        );
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
        .args([
            "--event",
            concat!(env!("CARGO_MANIFEST_DIR"), "/events/standard.json"),
        ])
        .env_clear()
        .envs(env)
        .env("AWS_LAMBDA_FUNCTION_NAME", "OrdersFunction")
        // What `sam local invoke` sets in its container.
        .env("AWS_SAM_LOCAL", "true")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let response: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        response["batchItemFailures"].as_array().map(Vec::len),
        Some(3),
        "{response}"
    );
}

/// Every deployment publishes a version behind the `live` alias, which CodeDeploy shifts by a
/// canary by default and moves back when any rollback alarm fires; the queues invoke the alias,
/// so their traffic follows it. Each rollback alarm watches the new version alone
/// (`ExecutedVersion` is the version being deployed), never the alias or the function as a whole,
/// whose numbers carry the old version's trouble too.
#[test]
fn deployments_shift_the_alias_by_canary_and_roll_back_on_the_new_versions_signals() {
    let t = template();
    let f = function(&t);
    assert_eq!(f["AutoPublishAlias"].as_str(), Some("live"));
    let preference = &f["DeploymentPreference"];
    let strategy = parameter(&t, &preference["Type"]).expect("!Ref DeploymentStrategy");
    assert_eq!(
        strategy["Default"].as_str(),
        Some("Canary10Percent5Minutes")
    );
    let alarms: BTreeSet<String> = preference["Alarms"]
        .as_sequence()
        .expect("rollback alarms")
        .iter()
        .map(target)
        .collect();
    for alarm in &alarms {
        assert_eq!(
            t["Resources"][alarm.as_str()]["Type"].as_str(),
            Some("AWS::CloudWatch::Alarm"),
            "{alarm}"
        );
    }
    assert_eq!(
        alarms,
        BTreeSet::from([
            "NewVersionPaymentConfigErrorsAlarm".to_owned(),
            "NewVersionPoisonRateAlarm".to_owned(),
            "OrdersFunctionNewVersionErrorsAlarm".to_owned(),
        ])
    );
    for alarm in &alarms {
        let properties = resource(&t, alarm);
        let mut dimension_sets: Vec<&serde_yaml_ng::Value> = Vec::new();
        if let Some(dimensions) = properties["Dimensions"].as_sequence() {
            dimension_sets.push(&properties["Dimensions"]);
            assert!(!dimensions.is_empty());
        }
        for query in properties["Metrics"].as_sequence().into_iter().flatten() {
            if !query["MetricStat"].is_null() {
                dimension_sets.push(&query["MetricStat"]["Metric"]["Dimensions"]);
            }
        }
        assert!(!dimension_sets.is_empty(), "{alarm}: no metric");
        for dimensions in dimension_sets {
            let version = dimensions
                .as_sequence()
                .expect("dimensions")
                .iter()
                .find(|d| d["Name"].as_str() == Some("ExecutedVersion"))
                .unwrap_or_else(|| panic!("{alarm}: no ExecutedVersion dimension"));
            let (tag, value) = tagged(&version["Value"]).expect("!GetAtt");
            assert_eq!(
                (tag.as_str(), value.as_str()),
                ("!GetAtt", Some("OrdersFunction.Version.Version")),
                "{alarm}"
            );
        }
    }
    // The alias's own errors: the new version's, during the canary.
    let alias_errors = resource(&t, "OrdersFunctionAliasErrorsAlarm");
    let resource_dim = alias_errors["Dimensions"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|d| d["Name"].as_str() == Some("Resource"))
        .expect("a Resource dimension");
    let (_, value) = tagged(&resource_dim["Value"]).expect("!Sub");
    assert_eq!(value.as_str(), Some("${OrdersFunction}:live"));
    for mapping in mappings(&t) {
        let (tag, name) = tagged(&mapping["FunctionName"]).expect("a reference");
        assert_eq!(
            (tag.as_str(), name.as_str()),
            ("!Ref", Some("OrdersFunction.Alias"))
        );
    }
    for output in ["OrdersFunctionAliasArn", "OrdersDashboardUrl"] {
        assert!(!t["Outputs"][output].is_null(), "output {output}");
    }
}

/// The dashboard's JSON parses once `!Sub` has filled it in, shows the outcomes, latency,
/// DLQs, age and concurrency, and names only metrics the function writes.
#[test]
fn the_dashboard_shows_only_metrics_the_function_writes() {
    let t = template();
    let (_, body) = tagged(&resource(&t, "OrdersDashboard")["DashboardBody"]).expect("!Sub");
    // What !Sub fills in: any `${...}` becomes a plain word.
    let mut text = String::new();
    let mut rest = body.as_str().expect("a string");
    while let Some(start) = rest.find("${") {
        text.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("a closed ${") + start;
        text.push('x');
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let emitted = process_orders::testkit::emitted_metrics();
    let mut shown = BTreeSet::new();
    let mut namespaces = BTreeSet::new();
    for widget in dashboard["widgets"].as_array().expect("widgets") {
        let Some(metrics) = widget["properties"]["metrics"].as_array() else {
            continue;
        };
        let mut namespace = String::new();
        for line in metrics {
            let line = line.as_array().expect("a metric line");
            if let Some(ns) = line[0].as_str().filter(|ns| *ns != "." && *ns != "...") {
                namespace = ns.to_owned();
            }
            namespaces.insert(namespace.clone());
            if namespace == "ProcessOrders" {
                let name = line[1].as_str().expect("a metric name");
                assert!(emitted.contains(name), "{name} is never written");
                shown.insert(name.to_owned());
            }
        }
    }
    for name in [
        "Charged",
        "Retried",
        "Poisoned",
        "Reconciled",
        "NeedsReconciliation",
        "StoreLatency",
        "PaymentLatency",
    ] {
        assert!(shown.contains(name), "{name} is not on the dashboard");
    }
    for namespace in ["AWS/SQS", "AWS/Lambda"] {
        assert!(namespaces.contains(namespace), "nothing from {namespace}");
    }
    assert!(
        text.contains("stats count(*) by reason"),
        "retries by reason"
    );
}

/// An empty `IdempotencyKeyPrefix` would reach the function as an empty variable, which reads as
/// unset and silently means `orders#`: the parameter refuses it.
#[test]
fn the_key_prefix_cannot_be_empty() {
    let t = template();
    let prefix = &t["Parameters"]["IdempotencyKeyPrefix"];
    let pattern = prefix["AllowedPattern"].as_str().expect("a pattern");
    assert!(
        pattern.starts_with('^') && pattern.ends_with("{1,64}$"),
        "at least one character: {pattern}"
    );
    assert_eq!(
        prefix["Default"].as_str(),
        Some(process_orders::config::ORDER_KEY_PREFIX)
    );
}
