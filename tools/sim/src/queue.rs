//! SQS as the event source mapping sees it: a standard or FIFO queue with visibility timeouts,
//! receive counts, duplicate deliveries (standard), group locking (FIFO), the redrive policy to
//! a DLQ (whose `maxReceiveCount` an operator may edit mid-run), message attributes that ride
//! along every move and redrive, and what the function's own calls do to it
//! ([`crate::sqs`] serves them over the SDK, with SQS's limits).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::value::RawValue;

use crate::world::{EPOCH_MS, Shared};

/// The producer's attribute naming which payload a message carries, so that a copy in the DLQ
/// (which keeps its message's attributes) can be traced back to it. Short, so that an adapter
/// trimming the largest attributes first keeps it to the last.
pub const PAYLOAD_ATTRIBUTE: &str = "sim-payload";
/// SQS's limit on a visibility timeout, counted from the receive: 12 hours.
pub const MAX_VISIBILITY_MS: u64 = 12 * 3_600_000;

/// One message attribute, as SQS keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// `String`, `Number`, `Binary`, or one of those with a custom suffix.
    pub data_type: String,
    /// The string value (String and Number types).
    pub string_value: Option<String>,
    /// The binary value, base64 (Binary types).
    pub binary_value: Option<String>,
}

impl Attr {
    /// A `String` attribute.
    pub fn text(value: impl Into<String>) -> Self {
        Self {
            data_type: "String".into(),
            string_value: Some(value.into()),
            binary_value: None,
        }
    }

    /// What it counts towards a message's size, with its name (as SQS counts: name, type and
    /// value bytes).
    pub fn bytes(&self, name: &str) -> usize {
        name.len()
            + self.data_type.len()
            + self.string_value.as_ref().map_or(0, String::len)
            + self.binary_value.as_ref().map_or(0, |b| b.len() * 3 / 4)
    }
}

/// A message's attributes, by name.
pub type Attrs = BTreeMap<String, Attr>;

/// The attributes as Lambda's event carries them (`messageAttributes`, camelCase).
fn event_attributes(attributes: &Attrs) -> Box<RawValue> {
    let object: serde_json::Map<String, serde_json::Value> = attributes
        .iter()
        .map(|(name, a)| {
            (
                name.clone(),
                serde_json::json!({
                    "stringValue": a.string_value,
                    "binaryValue": a.binary_value,
                    "stringListValues": [],
                    "binaryListValues": [],
                    "dataType": a.data_type,
                }),
            )
        })
        .collect();
    serde_json::value::to_raw_value(&object)
        .unwrap_or_else(|_| RawValue::from_string("{}".into()).expect("an empty object"))
}

/// One message in the queue.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The SQS message id.
    pub id: String,
    /// Which payload the producer sent (an index into the run's payloads).
    pub payload: usize,
    /// The order it carries.
    pub order_id: String,
    /// The FIFO message group.
    pub group: Option<String>,
    /// The body.
    pub body: String,
    /// Its message attributes.
    pub attributes: Attrs,
    /// The same, as Lambda's event carries them.
    pub event_attributes: Box<RawValue>,
    /// When it is visible again, simulated ms.
    pub visible_at_ms: u64,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `ApproximateFirstReceiveTimestamp`, epoch ms.
    pub first_receive_ms: Option<u64>,
    /// The receipt handle of the latest receive.
    pub receipt: String,
    /// When the latest receive happened, simulated ms.
    pub received_ms: u64,
    /// The visibility timeout the function set for the latest receive, seconds (`None`: none
    /// set, or the change failed).
    pub visibility_set_s: Option<u64>,
    /// Whether the latest receive ended RETRY with its visibility set (the world's mark, made
    /// after the invocation): a later change that brings it back sooner is an early return.
    pub backed_off: bool,
}

/// A record backed off RETRY and brought back sooner by a later visibility change (a wake):
/// what the world judges against the schedule.
#[derive(Debug, Clone)]
pub struct EarlyReturn {
    /// The order.
    pub order_id: String,
    /// The message.
    pub id: String,
    /// Its receive, the latest.
    pub receive_count: u32,
    /// `ApproximateFirstReceiveTimestamp`, epoch ms.
    pub first_receive_ms: Option<u64>,
    /// When it is visible again after the change, simulated ms.
    pub back_ms: u64,
}

/// A message in the DLQ, and why.
#[derive(Debug, Clone)]
pub struct Dead {
    /// The payload.
    pub payload: usize,
    /// The function's reason (a verdict's), or `maxReceiveCount` when SQS's redrive moved it.
    pub reason: String,
    /// The body as it arrived in the DLQ.
    pub body: String,
    /// Its attributes as they arrived (the function's failure attribute among them).
    pub attributes: Attrs,
    /// When it arrived, simulated ms.
    pub at_ms: u64,
    /// The message it was moved from and that message's receive when it was moved, if the
    /// message was still in the queue (the function's moves; SQS's own redrive has none).
    pub source: Option<(String, u32)>,
}

/// The source queue, its DLQ, and what was deleted.
#[derive(Debug)]
pub struct Queue {
    fifo: bool,
    /// The redrive policy's `maxReceiveCount` (an operator may lower it mid-run).
    pub max_receive: u32,
    visibility_ms: u64,
    duplicate_rate: f64,
    pub(crate) sqs_error_rate: f64,
    /// FIFO DLQ: deduplication ids seen, with when (SQS's five-minute window).
    pub(crate) deduplication: HashMap<String, u64>,
    /// By send order (FIFO order within a group).
    messages: BTreeMap<u64, Stored>,
    /// Message id to its place in `messages`.
    ids: HashMap<String, u64>,
    next: u64,
    /// The DLQ.
    pub dlq: Vec<Dead>,
    /// Payloads whose message was deleted, with the deleting decision's reason.
    pub deleted: HashMap<usize, &'static str>,
    /// Every redrive round's DLQ, oldest first.
    pub redriven: Vec<Vec<Dead>>,
    /// The most receives any message had.
    pub max_receives: u32,
    /// What SQS refused of the function's calls, by error code (SQS's limits: every one is a
    /// bug in the adapter that made the call).
    pub refused: BTreeMap<String, Vec<String>>,
    /// Copies that reached the DLQ without the producer's payload attribute.
    pub untraceable: Vec<String>,
    /// Messages a worker deleted though the handler had not acknowledged them at that receive
    /// and no copy of them had reached the DLQ: (payload, what was seen).
    pub deleted_undecided: Vec<(usize, String)>,
    /// The function's moves to the DLQ that failed, by (payload, the receive its failure note
    /// names): the reason the note gave, and the message moved when the queue still held it.
    /// A week-later redrive sends the same payload again under a new message id, whose receive
    /// counts start over: the id tells a copy's failed move from its original's.
    pub failed_moves: HashMap<(usize, u32), (String, Option<String>)>,
    /// Every move to the DLQ the function tried, by (payload, the receive its failure note
    /// names), whether SQS took it, dropped it as a FIFO duplicate, or failed it.
    pub moves_tried: HashSet<(usize, u32)>,
    /// Records received again though their handler had answered RETRY at the give-up's receive
    /// (as the container knew it) and no move of theirs had failed: (payload, what was seen).
    pub kept_past_give_up: Vec<(usize, String)>,
    /// Backed-off records brought back sooner, not yet judged (taken after each invocation).
    pub early_returns: Vec<EarlyReturn>,
}

/// The queue shared by the pollers and the function's SQS ports, and the signal that wakes a
/// long poll when a message is sent.
#[derive(Clone)]
pub struct SharedQueue(Arc<Mutex<Queue>>, Arc<tokio::sync::Notify>);

impl SharedQueue {
    /// An empty queue.
    pub fn new(
        fifo: bool,
        max_receive: u32,
        visibility_ms: u64,
        duplicate_rate: f64,
        sqs_error_rate: f64,
    ) -> Self {
        Self(
            Arc::new(Mutex::new(Queue {
                fifo,
                max_receive,
                visibility_ms,
                duplicate_rate,
                sqs_error_rate,
                deduplication: HashMap::new(),
                messages: BTreeMap::new(),
                ids: HashMap::new(),
                next: 0,
                dlq: Vec::new(),
                deleted: HashMap::new(),
                redriven: Vec::new(),
                max_receives: 0,
                refused: BTreeMap::new(),
                untraceable: Vec::new(),
                deleted_undecided: Vec::new(),
                failed_moves: HashMap::new(),
                moves_tried: HashSet::new(),
                kept_past_give_up: Vec::new(),
                early_returns: Vec::new(),
            })),
            Arc::default(),
        )
    }

    /// The queue, locked (never across an await).
    pub fn lock(&self) -> MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notified when the producer sends: a long poll waiting for a message returns.
    pub fn sent(&self) -> &tokio::sync::Notify {
        &self.1
    }
}

impl Queue {
    /// The receive at which the design has the function give up: one before the queue's
    /// `maxReceiveCount` (as the queue stands now: an operator only lowers it), at least 1.
    pub fn give_up_receive(&self) -> u32 {
        self.max_receive.saturating_sub(1).max(1)
    }

    /// The producer sends a payload, visible at once, with its attributes and the one that
    /// traces it ([`PAYLOAD_ATTRIBUTE`]).
    pub fn send(&mut self, payload: usize, sent: &crate::Payload, at_ms: u64) {
        let mut attributes = sent.attributes.clone();
        attributes.insert(PAYLOAD_ATTRIBUTE.into(), Attr::text(payload.to_string()));
        self.enqueue(
            payload,
            &sent.order_id,
            sent.group.clone(),
            sent.body.clone(),
            attributes,
            at_ms,
        );
    }

    fn enqueue(
        &mut self,
        payload: usize,
        order_id: &str,
        group: Option<String>,
        body: String,
        attributes: Attrs,
        at_ms: u64,
    ) {
        let seq = self.next;
        self.next += 1;
        let id = format!("m-{seq}");
        self.ids.insert(id.clone(), seq);
        self.messages.insert(
            seq,
            Stored {
                id,
                payload,
                order_id: order_id.to_owned(),
                group,
                body,
                event_attributes: event_attributes(&attributes),
                attributes,
                visible_at_ms: at_ms,
                receive_count: 0,
                first_receive_ms: None,
                receipt: String::new(),
                received_ms: 0,
                visibility_set_s: None,
                backed_off: false,
            },
        );
    }

    /// When the next message that is invisible now becomes visible, simulated ms.
    pub fn next_visible_ms(&self, now_ms: u64) -> Option<u64> {
        self.messages
            .values()
            .map(|m| m.visible_at_ms)
            .filter(|at| *at > now_ms)
            .min()
    }

    /// Whether the source queue is empty.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Up to `n` messages, each made invisible for the visibility timeout. Standard: any
    /// visible messages, some delivered twice (left visible for another poller). FIFO: in
    /// order, only from groups with nothing in flight. A message past `maxReceiveCount`
    /// receives moves to the DLQ instead, as SQS's redrive does.
    pub fn receive(&mut self, n: usize, now_ms: u64, world: &Shared) -> Vec<Stored> {
        let candidates: Vec<u64> = if self.fifo {
            let in_flight: HashSet<&str> = self
                .messages
                .values()
                .filter(|m| m.visible_at_ms > now_ms)
                .filter_map(|m| m.group.as_deref())
                .collect();
            self.messages
                .iter()
                .filter(|(_, m)| !m.group.as_deref().is_some_and(|g| in_flight.contains(g)))
                .map(|(seq, _)| *seq)
                .collect()
        } else {
            let mut visible: Vec<u64> = self
                .messages
                .iter()
                .filter(|(_, m)| m.visible_at_ms <= now_ms)
                .map(|(seq, _)| *seq)
                .collect();
            // Any `n` of them, at random (a partial shuffle: only the first `n` places).
            world.choose_first(&mut visible, n);
            visible
        };
        let mut out = Vec::new();
        for seq in candidates {
            if out.len() == n {
                break;
            }
            let Some(message) = self.messages.get_mut(&seq) else {
                continue;
            };
            message.receive_count += 1;
            self.max_receives = self.max_receives.max(message.receive_count);
            // Its handler answered RETRY at its give-up's receive, where the design moves it
            // as `retries_exhausted`: it may come back only if that move failed, or its
            // container crashed before settling it.
            let last = message.receive_count - 1;
            let retried = world
                .lock()
                .retried_at_give_up
                .get(&(message.id.clone(), last))
                .copied();
            if let Some((container, reason)) = retried
                && !world.lock().crashed.contains(&container)
                && failed_move(&self.failed_moves, message.payload, last, &message.id).is_none()
            {
                self.kept_past_give_up.push((
                    message.payload,
                    format!(
                        "{} is received again (receive {}) though its handler answered RETRY \
                         {reason} at receive {last}, the give-up's receive as its container \
                         knew it, and no move of it failed",
                        message.id, message.receive_count
                    ),
                ));
            }
            if message.receive_count > self.max_receive {
                let payload = message.payload;
                let id = message.id.clone();
                if let Some(gone) = self.remove(seq) {
                    world.tell(&gone.order_id, || {
                        format!("{id}: SQS's redrive policy moves it to the DLQ")
                    });
                    // SQS's own move keeps the message as it is, an earlier failure included.
                    self.dlq.push(Dead {
                        payload,
                        reason: "maxReceiveCount".into(),
                        body: gone.body,
                        attributes: gone.attributes,
                        at_ms: now_ms,
                        source: None,
                    });
                }
                continue;
            }
            message.first_receive_ms.get_or_insert(EPOCH_MS + now_ms);
            message.receipt = format!("{}/{}", message.id, message.receive_count);
            message.received_ms = now_ms;
            message.visibility_set_s = None;
            message.backed_off = false;
            if !self.fifo && world.chance(self.duplicate_rate) {
                world.count(|f| f.duplicate_deliveries += 1);
            } else {
                message.visible_at_ms = now_ms + self.visibility_ms;
            }
            out.push(message.clone());
        }
        out
    }

    fn remove(&mut self, seq: u64) -> Option<Stored> {
        let message = self.messages.remove(&seq)?;
        self.ids.remove(&message.id);
        Some(message)
    }

    /// The current message behind a receipt handle, if the receipt is still current.
    pub(crate) fn current(&mut self, receipt: &str) -> Option<&mut Stored> {
        let id = receipt.split('/').next()?;
        let seq = *self.ids.get(id)?;
        self.messages.get_mut(&seq).filter(|m| m.receipt == receipt)
    }

    /// The event source mapping deletes a record its response did not report: only with the
    /// latest receipt (an older receive's delete is refused; the message comes back).
    pub fn delete(&mut self, receipt: &str, reason: &'static str) -> bool {
        let Some(seq) = self
            .current(receipt)
            .map(|m| m.id.clone())
            .and_then(|id| self.ids.get(&id).copied())
        else {
            return false;
        };
        let Some(message) = self.remove(seq) else {
            return false;
        };
        self.deleted.insert(message.payload, reason);
        true
    }

    /// An operator redrives every message in the DLQ back to the queue (new messages, as
    /// SQS's redrive makes them: the copy's body and attributes, the function's failure
    /// attribute among them), visible at `at_ms`.
    pub fn redrive(&mut self, payloads: &[crate::Payload], at_ms: u64) -> usize {
        let dead = std::mem::take(&mut self.dlq);
        let count = dead.len();
        for d in &dead {
            let sent = &payloads[d.payload];
            self.enqueue(
                d.payload,
                &sent.order_id,
                sent.group.clone(),
                d.body.clone(),
                d.attributes.clone(),
                at_ms,
            );
        }
        self.redriven.push(dead);
        count
    }

    /// The reason of `message`'s (of `payload`) failed move at `receive`, if one failed: a
    /// failed move of another message with the same payload (a redriven copy's original) is
    /// not its.
    pub(crate) fn failed_move(&self, payload: usize, receive: u32, message: &str) -> Option<&str> {
        failed_move(&self.failed_moves, payload, receive, message)
    }

    /// The message a copy in the DLQ came from, by its payload attribute.
    pub(crate) fn payload_of(&self, attributes: &Attrs) -> Option<usize> {
        attributes
            .get(PAYLOAD_ATTRIBUTE)?
            .string_value
            .as_deref()?
            .parse()
            .ok()
    }

    /// The message of a payload still in the queue (a copy is sent to the DLQ before its
    /// message is deleted); of several, the one at `receive` when it is known.
    pub(crate) fn message_of(&self, payload: usize, receive: Option<u32>) -> Option<&Stored> {
        let mut carrying = self.messages.values().filter(|m| m.payload == payload);
        // A move that names its receive is of the message at that receive, or of one already
        // gone (deleted by another receive meanwhile): never of another copy of the payload.
        match receive {
            Some(n) => carrying.find(|m| m.receive_count == n),
            None => carrying.next(),
        }
    }

    /// Messages waiting to be received: visible now.
    pub fn visible(&self, now_ms: u64) -> usize {
        self.messages
            .values()
            .filter(|m| m.visible_at_ms <= now_ms)
            .count()
    }

    /// Whether the queue is FIFO.
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }
}

/// `Queue::failed_move` over the map alone, for a caller that holds a message mutably.
fn failed_move<'a>(
    moves: &'a HashMap<(usize, u32), (String, Option<String>)>,
    payload: usize,
    receive: u32,
    message: &str,
) -> Option<&'a str> {
    moves
        .get(&(payload, receive))
        .filter(|(_, moved)| moved.as_deref().is_none_or(|id| id == message))
        .map(|(reason, _)| reason.as_str())
}

#[cfg(test)]
mod failed_move_tests {
    use super::*;

    /// A redriven copy carries its original's payload and starts its receives over: the
    /// original's failed move at the same receive is not the copy's (seed 32 of the
    /// million-order run on the DynamoDB store judged a RETRY as a failed POISON move so).
    #[test]
    fn a_failed_move_is_the_moved_message_s_alone() {
        let mut moves = HashMap::new();
        moves.insert(
            (1, 3),
            ("needs_reconciliation".to_owned(), Some("m-1".to_owned())),
        );
        moves.insert((2, 3), ("payment_rejected".to_owned(), None));
        assert_eq!(
            failed_move(&moves, 1, 3, "m-1"),
            Some("needs_reconciliation")
        );
        assert_eq!(failed_move(&moves, 1, 3, "m-9"), None);
        assert_eq!(failed_move(&moves, 1, 4, "m-1"), None);
        // A move whose message the queue no longer held is anyone's with that payload.
        assert_eq!(failed_move(&moves, 2, 3, "m-9"), Some("payment_rejected"));
    }
}
