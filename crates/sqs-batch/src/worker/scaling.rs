//! Scaling a fleet of workers on its backlog: the consumers a backlog needs, the backlog per
//! consumer, and the EMF document each worker writes for a target-tracking policy.

/// How many consumers keep the backlog within `acceptable_latency_s`, each taking
/// `seconds_per_message`: the seeds' `desired_consumers` (1,500 visible, 0.1 s a message, 10 s
/// acceptable: 15). At least 1 while anything is visible.
pub fn desired_consumers(visible: u64, seconds_per_message: f64, acceptable_latency_s: f64) -> u64 {
    if visible == 0 {
        return 0;
    }
    let needed = (visible as f64 * seconds_per_message / acceptable_latency_s).ceil();
    (needed as u64).max(1)
}

/// The backlog per consumer: what a target-tracking policy holds at `acceptable latency /
/// seconds per message` (100 for the seeds' example). All of it on one consumer when none runs.
pub fn backlog_per_consumer(visible: u64, consumers: u64) -> f64 {
    visible as f64 / consumers.max(1) as f64
}

/// The queue's name, the last part of its ARN.
pub(super) fn queue_name(arn: &str) -> &str {
    arn.rsplit(':').next().unwrap_or(arn)
}

/// One EMF document: the queue's visible messages and this consumer's share of the minute
/// (`consumers`: 1 for a document a minute, 0.5 for one every 30 s), per queue. CloudWatch
/// divides the average of the first by the sum of the second over a minute: the backlog per
/// consumer, the figure to scale the workers on.
pub fn backlog_document(
    namespace: &str,
    queue: &str,
    visible: u64,
    consumers: f64,
    now_ms: u64,
) -> String {
    // A whole share is written as an integer, as the document always had it.
    let consumers = if consumers.fract() == 0.0 && consumers <= u32::MAX as f64 {
        serde_json::json!(consumers as u32)
    } else {
        serde_json::json!(consumers)
    };
    serde_json::json!({
        "_aws": {
            "Timestamp": now_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [["QueueName"]],
                "Metrics": [
                    { "Name": "VisibleMessages", "Unit": "Count" },
                    { "Name": "Consumers", "Unit": "Count" }
                ]
            }]
        },
        "QueueName": queue,
        "VisibleMessages": visible,
        "Consumers": consumers
    })
    .to_string()
}
