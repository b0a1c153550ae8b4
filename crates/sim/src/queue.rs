//! SQS as the event source mapping sees it: a standard or FIFO queue with visibility timeouts,
//! receive counts, duplicate deliveries (standard), group locking (FIFO), the redrive policy to
//! a DLQ, and the two calls the function makes itself (visibility changes, DLQ moves), each of
//! which sometimes fails.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lambda_kit::Clock;
use sqs_batch::dead_letter::{DeadLetterPort, Move, MoveFailure};
use sqs_batch::visibility::{Change, ChangeFailure, VisibilityPort};

use crate::world::{EPOCH_MS, Shared, SimClock};

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
    /// When it is visible again, simulated ms.
    pub visible_at_ms: u64,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// `ApproximateFirstReceiveTimestamp`, epoch ms.
    pub first_receive_ms: Option<u64>,
    /// The receipt handle of the latest receive.
    pub receipt: String,
}

/// A message in the DLQ, and why.
#[derive(Debug, Clone)]
pub struct Dead {
    /// The payload.
    pub payload: usize,
    /// The function's reason (a verdict's), or `maxReceiveCount` when SQS's redrive moved it.
    pub reason: String,
}

/// The source queue, its DLQ, and what was deleted.
#[derive(Debug)]
pub struct Queue {
    fifo: bool,
    max_receive: u32,
    visibility_ms: u64,
    duplicate_rate: f64,
    sqs_error_rate: f64,
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
}

/// The queue shared by the pollers and the function's SQS ports.
#[derive(Clone)]
pub struct SharedQueue(Arc<Mutex<Queue>>);

impl SharedQueue {
    /// An empty queue.
    pub fn new(
        fifo: bool,
        max_receive: u32,
        visibility_ms: u64,
        duplicate_rate: f64,
        sqs_error_rate: f64,
    ) -> Self {
        Self(Arc::new(Mutex::new(Queue {
            fifo,
            max_receive,
            visibility_ms,
            duplicate_rate,
            sqs_error_rate,
            messages: BTreeMap::new(),
            ids: HashMap::new(),
            next: 0,
            dlq: Vec::new(),
            deleted: HashMap::new(),
            redriven: Vec::new(),
            max_receives: 0,
        })))
    }

    /// The queue, locked (never across an await).
    pub fn lock(&self) -> MutexGuard<'_, Queue> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Queue {
    /// Sends a message, visible at once.
    pub fn send(&mut self, payload: usize, sent: &crate::Payload, at_ms: u64) {
        let seq = self.next;
        self.next += 1;
        let id = format!("m-{seq}");
        self.ids.insert(id.clone(), seq);
        self.messages.insert(
            seq,
            Stored {
                id,
                payload,
                order_id: sent.order_id.clone(),
                group: sent.group.clone(),
                body: sent.body.clone(),
                visible_at_ms: at_ms,
                receive_count: 0,
                first_receive_ms: None,
                receipt: String::new(),
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
            if message.receive_count > self.max_receive {
                let payload = message.payload;
                let id = message.id.clone();
                if let Some(gone) = self.remove(seq) {
                    world.tell(&gone.order_id, || {
                        format!("{id}: SQS's redrive policy moves it to the DLQ")
                    });
                }
                self.dlq.push(Dead {
                    payload,
                    reason: "maxReceiveCount".into(),
                });
                continue;
            }
            message.first_receive_ms.get_or_insert(EPOCH_MS + now_ms);
            message.receipt = format!("{}/{}", message.id, message.receive_count);
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
    fn current(&mut self, receipt: &str) -> Option<&mut Stored> {
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
    /// SQS's redrive makes them), visible at `at_ms`.
    pub fn redrive(&mut self, payloads: &[crate::Payload], at_ms: u64) -> usize {
        let dead = std::mem::take(&mut self.dlq);
        let count = dead.len();
        for d in &dead {
            self.send(d.payload, &payloads[d.payload], at_ms);
        }
        self.redriven.push(dead);
        count
    }
}

/// The function's visibility calls, on the simulated queue.
pub struct SimVisibility {
    /// The queue.
    pub queue: SharedQueue,
    /// The run.
    pub world: Shared,
    /// The true clock.
    pub clock: SimClock,
}

impl VisibilityPort for SimVisibility {
    async fn change(&self, _queue_url: &str, changes: &[Change<'_>]) -> Vec<ChangeFailure> {
        self.world.latency(30).await;
        let now_ms = self.clock.now_ms().saturating_sub(EPOCH_MS);
        let mut queue = self.queue.lock();
        let error_rate = queue.sqs_error_rate;
        let mut failures = Vec::new();
        for change in changes {
            let failed = if self.world.chance(error_rate) {
                self.world.count(|f| f.sqs_errors += 1);
                Some("simulated: ChangeMessageVisibility failed")
            } else if let Some(message) = queue.current(change.receipt_handle) {
                message.visible_at_ms = now_ms + change.seconds * 1_000;
                self.world.tell(&message.order_id, || {
                    format!("{}: visible again in {} s", message.id, change.seconds)
                });
                None
            } else {
                Some("simulated: the receipt handle has expired")
            };
            if let Some(reason) = failed {
                failures.push(ChangeFailure {
                    message_id: change.message_id.to_owned(),
                    reason: reason.into(),
                });
            }
        }
        failures
    }
}

/// The function's DLQ moves (`MOVE_POISON_TO_DLQ`), on the simulated queue.
pub struct SimDeadLetters {
    /// The queue.
    pub queue: SharedQueue,
    /// The run.
    pub world: Shared,
}

impl DeadLetterPort for SimDeadLetters {
    async fn send(&self, _source_arn: &str, moves: &[Move<'_>]) -> Vec<MoveFailure> {
        self.world.latency(30).await;
        let mut queue = self.queue.lock();
        let error_rate = queue.sqs_error_rate;
        let mut failures = Vec::new();
        for m in moves {
            let stored = queue
                .ids
                .get(m.message.message_id)
                .and_then(|seq| queue.messages.get(seq))
                .map(|s| (s.payload, s.order_id.clone()));
            match stored {
                Some((payload, order_id)) if !self.world.chance(error_rate) => {
                    self.world.tell(&order_id, || {
                        format!(
                            "{}: moved to the DLQ: {}",
                            m.message.message_id, m.failure.reason
                        )
                    });
                    queue.dlq.push(Dead {
                        payload,
                        reason: m.failure.reason.clone(),
                    });
                }
                _ => {
                    self.world.count(|f| f.sqs_errors += 1);
                    failures.push(MoveFailure {
                        message_id: m.message.message_id.to_owned(),
                        reason: "simulated: SendMessageBatch failed".into(),
                    });
                }
            }
        }
        failures
    }
}
