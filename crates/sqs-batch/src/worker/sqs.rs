//! The SQS adapter of the worker's queue port: `ReceiveMessage`, `DeleteMessageBatch` and
//! `GetQueueAttributes`, over one client built once.

use std::collections::HashMap;

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageSystemAttributeName, QueueAttributeName,
};

use super::{Delete, QueueError, QueuePort};

/// The SQS actions this adapter calls on the source queue (with the visibility port's
/// `sqs:ChangeMessageVisibility` for heartbeats and releases).
pub const ACTIONS: &[&str] = &[
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
];

/// One queue, by URL and ARN.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
    arn: String,
    region: String,
}

impl SqsQueue {
    /// The queue at `url`: its ARN is read once (`GetQueueAttributes`), which also proves the
    /// queue is there and the role may read it before the first receive.
    pub async fn connect(client: Client, url: impl Into<String>) -> Result<Self, QueueError> {
        let url = url.into();
        let attributes = client
            .get_queue_attributes()
            .queue_url(&url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| error("GetQueueAttributes", e))?;
        let arn = attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .cloned()
            .ok_or_else(|| error("GetQueueAttributes", "no QueueArn in the answer"))?;
        let region = arn.split(':').nth(3).unwrap_or_default().to_owned();
        Ok(Self {
            client,
            url,
            arn,
            region,
        })
    }

    /// The queue's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

fn error(
    action: &'static str,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> QueueError {
    QueueError {
        action,
        source: source.into(),
    }
}

impl QueuePort for SqsQueue {
    fn arn(&self) -> &str {
        &self.arn
    }

    async fn receive(
        &self,
        max: u8,
        wait_s: u8,
        visibility_s: u32,
    ) -> Result<Vec<SqsMessage>, QueueError> {
        let output = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(i32::from(max.clamp(1, 10)))
            .wait_time_seconds(i32::from(wait_s.min(20)))
            // SQS takes 0 to 43,200 s.
            .visibility_timeout(i32::try_from(visibility_s.min(43_200)).unwrap_or(43_200))
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| error("ReceiveMessage", e))?;
        Ok(output
            .messages()
            .iter()
            .map(|m| lambda_record(m, &self.arn, &self.region))
            .collect())
    }

    async fn delete(&self, entries: &[Delete<'_>]) -> Result<Vec<String>, QueueError> {
        let request: Vec<DeleteMessageBatchRequestEntry> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(d.receipt_handle)
                    .build()
                    .ok()
            })
            .collect();
        let output = self
            .client
            .delete_message_batch()
            .queue_url(&self.url)
            .set_entries(Some(request))
            .send()
            .await
            .map_err(|e| error("DeleteMessageBatch", e))?;
        Ok(output
            .failed()
            .iter()
            .filter_map(|f| {
                let entry = entries.get(f.id().parse::<usize>().ok()?)?;
                tracing::warn!(
                    message_id = entry.message_id,
                    code = f.code(),
                    sender_fault = f.sender_fault(),
                    "DeleteMessageBatch entry failed"
                );
                Some(entry.message_id.to_owned())
            })
            .collect())
    }

    async fn visible_messages(&self) -> Result<u64, QueueError> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| error("GetQueueAttributes", e))?;
        output
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| error("GetQueueAttributes", "no ApproximateNumberOfMessages"))
    }
}

/// A received message as Lambda's event source mapping would deliver it: camelCase record, every
/// attribute, the queue's ARN and region.
pub fn lambda_record(message: &Message, queue_arn: &str, region: &str) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id().map(str::to_owned);
    record.receipt_handle = message.receipt_handle().map(str::to_owned);
    record.body = message.body().map(str::to_owned);
    record.md5_of_body = message.md5_of_body().map(str::to_owned);
    record.md5_of_message_attributes = message.md5_of_message_attributes().map(str::to_owned);
    record.attributes = message
        .attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    record.message_attributes = message
        .message_attributes()
        .map(|attributes| {
            attributes
                .iter()
                .map(|(name, value)| {
                    let mut attribute = SqsMessageAttribute::default();
                    attribute.string_value = value.string_value().map(str::to_owned);
                    attribute.binary_value = value.binary_value().map(|b| {
                        // non_exhaustive: built through Default and DerefMut.
                        let mut data = Base64Data::default();
                        data.extend_from_slice(b.as_ref());
                        data
                    });
                    attribute.data_type = Some(value.data_type().to_owned());
                    (name.clone(), attribute)
                })
                .collect::<HashMap<_, _>>()
        })
        .unwrap_or_default();
    record.event_source = Some("aws:sqs".to_owned());
    record.event_source_arn = Some(queue_arn.to_owned());
    record.aws_region = Some(region.to_owned());
    record
}
