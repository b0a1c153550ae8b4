//! A producer for local runs: N orders, with chosen rates of duplicate sends and poison bodies.

use std::collections::BTreeSet;

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;

use crate::ToolError;
use crate::setup::QueuePair;

/// What to send.
#[derive(Debug, Clone)]
pub struct SendPlan {
    pub orders: usize,
    /// Share of orders sent twice (a producer retry: two messages, two message ids).
    pub duplicate_rate: f64,
    /// Share of messages that are poison bodies instead of orders.
    pub poison_rate: f64,
    /// FIFO message groups (ignored for standard queues).
    pub groups: usize,
    pub seed: u64,
    /// Order ids are `{prefix}-{n}`.
    pub prefix: String,
}

/// One message to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub body: String,
    /// The order id when the body is a valid order.
    pub order_id: Option<String>,
    pub group: String,
}

/// The messages of a plan, in send order, and what they contain.
#[derive(Debug, Clone, Default)]
pub struct Generated {
    pub messages: Vec<Outgoing>,
    pub valid_orders: BTreeSet<String>,
    pub duplicates: usize,
    pub poison: usize,
}

/// Generates the messages of `plan`, deterministically from its seed.
pub fn generate(plan: &SendPlan) -> Generated {
    let mut rng = fastrand::Rng::with_seed(plan.seed);
    let mut out = Generated::default();
    let groups = plan.groups.max(1);
    let mut copies = Vec::new();
    for n in 0..plan.orders {
        let group = format!("{}-g{}", plan.prefix, n % groups);
        if rng.f64() < plan.poison_rate {
            // Alternate the kinds of poison: not JSON, and a non-positive amount.
            let body = if n % 2 == 0 {
                format!("not an order #{n}")
            } else {
                serde_json::json!({ "order_id": format!("{}-poison-{n}", plan.prefix), "amount": -1 }).to_string()
            };
            out.poison += 1;
            out.messages.push(Outgoing {
                body,
                order_id: None,
                group,
            });
            continue;
        }
        let order_id = format!("{}-{n}", plan.prefix);
        let amount = (rng.u32(100..100_000) as f64) / 100.0;
        let body = serde_json::json!({ "order_id": order_id, "amount": amount }).to_string();
        let message = Outgoing {
            body,
            order_id: Some(order_id.clone()),
            group,
        };
        if rng.f64() < plan.duplicate_rate {
            copies.push(message.clone());
            out.duplicates += 1;
        }
        out.valid_orders.insert(order_id);
        out.messages.push(message);
    }
    // The second copies go out later, interleaved with the rest, as a producer retry would.
    for copy in copies {
        let at = rng.usize(out.messages.len().min(out.messages.len() / 2)..=out.messages.len());
        out.messages.insert(at, copy);
    }
    out
}

/// Sends the messages, 10 per `SendMessageBatch`. FIFO messages carry their group and a
/// deduplication id of their own, so a duplicate send really is a second message.
pub async fn send(
    sqs: &aws_sdk_sqs::Client,
    queue: &QueuePair,
    messages: &[Outgoing],
) -> Result<(), ToolError> {
    for chunk in messages.chunks(10) {
        let mut entries = Vec::with_capacity(chunk.len());
        for (i, message) in chunk.iter().enumerate() {
            let mut entry = SendMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .message_body(&message.body);
            if queue.fifo {
                entry = entry
                    .message_group_id(&message.group)
                    .message_deduplication_id(uuid::Uuid::new_v4().to_string());
            }
            entries.push(entry.build().map_err(|e| ToolError::Other(e.to_string()))?);
        }
        let output = sqs
            .send_message_batch()
            .queue_url(&queue.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| ToolError::aws("send messages", e))?;
        if let Some(failed) = output.failed().first() {
            return Err(ToolError::Other(format!(
                "send failed: {} {}",
                failed.code(),
                failed.message().unwrap_or("")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_generates_its_rates_deterministically() {
        let plan = SendPlan {
            orders: 1_000,
            duplicate_rate: 0.1,
            poison_rate: 0.05,
            groups: 8,
            seed: 1,
            prefix: "t".into(),
        };
        let a = generate(&plan);
        let b = generate(&plan);
        assert_eq!(a.messages, b.messages);
        assert_eq!(a.messages.len(), 1_000 + a.duplicates);
        assert_eq!(a.valid_orders.len() + a.poison, 1_000);
        assert!((60..=140).contains(&a.duplicates), "{}", a.duplicates);
        assert!((20..=80).contains(&a.poison), "{}", a.poison);
        let valid_messages = a.messages.iter().filter(|m| m.order_id.is_some()).count();
        assert_eq!(valid_messages, a.valid_orders.len() + a.duplicates);
    }
}
