//! Creates the queues (each with its DLQ and redrive policy) and the idempotency table, as
//! `template.yaml` does, on local servers.

use aws_sdk_sqs::types::QueueAttributeName;

use crate::ToolError;

/// A source queue and its DLQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePair {
    pub name: String,
    pub url: String,
    pub arn: String,
    pub dlq_url: String,
    pub dlq_arn: String,
    pub fifo: bool,
}

/// How the local queues are made.
#[derive(Debug, Clone, Copy)]
pub struct QueueSettings {
    pub visibility_timeout_s: u32,
    pub max_receive_count: u32,
}

async fn create(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> Result<(String, String), ToolError> {
    let mut request = sqs.create_queue().queue_name(name);
    for (key, value) in attributes {
        request = request.attributes(key.clone(), value);
    }
    let url = request
        .send()
        .await
        .map_err(|e| ToolError::aws(format!("create queue {name}"), e))?
        .queue_url
        .ok_or_else(|| ToolError::Other(format!("no URL for queue {name}")))?;
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| ToolError::aws(format!("queue ARN of {name}"), e))?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| ToolError::Other(format!("no ARN for queue {name}")))?;
    Ok((url, arn))
}

/// Creates `name` (`.fifo` for FIFO) and `name-dlq` with a redrive policy between them.
pub async fn queue_pair(
    sqs: &aws_sdk_sqs::Client,
    base: &str,
    fifo: bool,
    settings: QueueSettings,
) -> Result<QueuePair, ToolError> {
    let suffix = if fifo { ".fifo" } else { "" };
    let name = format!("{base}{suffix}");
    let dlq_name = format!("{base}-dlq{suffix}");
    let mut common = vec![(
        QueueAttributeName::MessageRetentionPeriod,
        "1209600".to_owned(),
    )];
    if fifo {
        common.push((QueueAttributeName::FifoQueue, "true".to_owned()));
    }
    let (dlq_url, dlq_arn) = create(sqs, &dlq_name, &common).await?;
    let mut source = vec![
        (QueueAttributeName::VisibilityTimeout, settings.visibility_timeout_s.to_string()),
        (
            QueueAttributeName::RedrivePolicy,
            serde_json::json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": settings.max_receive_count.to_string() })
                .to_string(),
        ),
    ];
    if fifo {
        source.push((QueueAttributeName::FifoQueue, "true".to_owned()));
    }
    let (url, arn) = create(sqs, &name, &source).await?;
    Ok(QueuePair {
        name,
        url,
        arn,
        dlq_url,
        dlq_arn,
        fifo,
    })
}

/// Creates the idempotency table with the key schema and TTL attribute the store writes.
pub async fn table(dynamodb: &aws_sdk_dynamodb::Client, name: &str) -> Result<(), ToolError> {
    idempotency::dynamodb::create_table(dynamodb, name)
        .await
        .map_err(|e| ToolError::aws(format!("create table {name}"), e))
}

pub use crate::queues::{Depth, depth};
