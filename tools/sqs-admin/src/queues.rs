//! Queues as the tools see them: by name or URL, with their DLQ, and their depth.

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;

use crate::ToolError;

/// A queue by URL and ARN, and its DLQ's ARN from the redrive policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// The queue's URL.
    pub url: String,
    /// The queue's ARN.
    pub arn: String,
    /// A FIFO queue.
    pub fifo: bool,
    /// Its DLQ's ARN, from the redrive policy.
    pub dlq_arn: Option<String>,
}

impl Queue {
    /// The queue's name (the ARN's last part).
    pub fn name(&self) -> &str {
        self.arn.rsplit(':').next().unwrap_or(&self.arn)
    }
}

/// Finds a queue by name or URL and reads what the tools need about it.
pub async fn resolve(sqs: &Client, name_or_url: &str) -> Result<Queue, ToolError> {
    let url = if name_or_url.starts_with("http://") || name_or_url.starts_with("https://") {
        name_or_url.to_owned()
    } else {
        sqs.get_queue_url()
            .queue_name(name_or_url)
            .send()
            .await
            .map_err(|e| ToolError::aws(format!("find queue {name_or_url}"), e))?
            .queue_url
            .ok_or_else(|| ToolError::Other(format!("no URL for queue {name_or_url}")))?
    };
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .map_err(|e| ToolError::aws(format!("read attributes of {url}"), e))?
        .attributes
        .unwrap_or_default();
    let arn = attributes
        .get(&QueueAttributeName::QueueArn)
        .cloned()
        .ok_or_else(|| ToolError::Other(format!("queue {url} has no ARN")))?;
    let dlq_arn = attributes
        .get(&QueueAttributeName::RedrivePolicy)
        .and_then(|policy| serde_json::from_str::<serde_json::Value>(policy).ok())
        .and_then(|policy| {
            policy
                .get("deadLetterTargetArn")?
                .as_str()
                .map(str::to_owned)
        });
    Ok(Queue {
        fifo: arn.ends_with(".fifo"),
        url,
        arn,
        dlq_arn,
    })
}

/// The DLQ of `queue`, resolved (same account and region, as SQS requires).
pub async fn dead_letter_queue(sqs: &Client, queue: &Queue) -> Result<Queue, ToolError> {
    let arn = queue.dlq_arn.as_deref().ok_or_else(|| {
        ToolError::Other(format!(
            "queue {} has no redrive policy, so it has no DLQ",
            queue.name()
        ))
    })?;
    resolve(sqs, arn.rsplit(':').next().unwrap_or(arn)).await
}

/// Message counts of one queue, as SQS approximates them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// Ready to be received.
    pub visible: u64,
    /// Received, not deleted, not yet visible again.
    pub in_flight: u64,
    /// Sent with a delay not yet over.
    pub delayed: u64,
}

impl Depth {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// The queue's message counts, as SQS approximates them.
pub async fn depth(sqs: &Client, url: &str) -> Result<Depth, ToolError> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .map_err(|e| ToolError::aws("queue depth", e))?
        .attributes
        .unwrap_or_default();
    let read = |name: QueueAttributeName| {
        attributes
            .get(&name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Depth {
        visible: read(QueueAttributeName::ApproximateNumberOfMessages),
        in_flight: read(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        delayed: read(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
    })
}
