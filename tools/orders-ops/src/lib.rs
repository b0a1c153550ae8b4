//! On-call operations on the queues, for the `orders-ops` binary: how deep each queue and its
//! DLQ are, a non-destructive look at what sits in a DLQ, and moving DLQ messages back to their
//! source queue. The redrive receives, sends and deletes by hand ([`redrive_manual`]) so that it
//! can choose by reason ([`Selection`]) and stamp the messages SQS's redrive moved ([`stamp`]);
//! SQS's own move task, which can do neither, is the binary's `--move-task`.
//!
//! Every write here is ordered so that a crash can duplicate a message but never lose one: a
//! message leaves the DLQ only after its copy was accepted by the source queue. The function's
//! idempotency absorbs the duplicate.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
// Tokio's instant: the holds follow a paused clock in tests.
use tokio::time::Instant;

use lambda_kit::{Clock, SystemClock};
use process_orders::order::order_id_hint;
use sqs_admin::ToolError;
pub use sqs_admin::queues::{Depth, Queue, dead_letter_queue, depth, resolve};
use sqs_batch::dead_letter::sqs::{ASSUMED_MAX_MESSAGE_BYTES, copy_attributes};
use sqs_batch::dead_letter::{FAILURE_ATTRIBUTE, Failure, Move, UNREADABLE_REASON, attribute_key};
use sqs_batch::worker::sqs::lambda_record;
use sqs_batch::{Message, edge::Batch, edge::SqsEvent};

/// One DLQ message, looked at without being consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    pub message_id: String,
    pub receive_count: Option<u64>,
    pub first_receive_ms: Option<u64>,
    pub sent_ms: Option<u64>,
    pub body_len: usize,
    /// The order id when the body names one (even if the order itself is invalid).
    pub order_id: Option<String>,
    pub group_id: Option<String>,
    /// Why the function moved it, when it did (its `dead-letter-failure` attribute); `None`
    /// for a message SQS's redrive moved after `maxReceiveCount`.
    pub failure: Option<Failure>,
}

/// Reads up to `max` messages of `url` and makes them visible again at once. Each look counts
/// as a receive (`ApproximateReceiveCount` rises), which a DLQ without its own redrive policy
/// ignores.
pub async fn inspect(sqs: &Client, url: &str, max: usize) -> Result<Vec<Peeked>, ToolError> {
    let mut peeked = Vec::new();
    let mut handles = Vec::new();
    // Held invisible while we look, so one pass sees each message once.
    while peeked.len() < max {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages((max - peeked.len()).min(10) as i32)
            .visibility_timeout(30)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names(FAILURE_ATTRIBUTE)
            .send()
            .await
            .map_err(|e| ToolError::aws("receive from the DLQ", e))?;
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let attribute = |name: MessageSystemAttributeName| {
                m.attributes().and_then(|a| a.get(&name)).cloned()
            };
            let number = |name| attribute(name).and_then(|v| v.parse().ok());
            let body = m.body().unwrap_or_default();
            peeked.push(Peeked {
                message_id: m.message_id().unwrap_or_default().to_owned(),
                receive_count: number(MessageSystemAttributeName::ApproximateReceiveCount),
                first_receive_ms: number(
                    MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
                ),
                sent_ms: number(MessageSystemAttributeName::SentTimestamp),
                body_len: body.len(),
                order_id: order_id_hint(body),
                group_id: attribute(MessageSystemAttributeName::MessageGroupId),
                failure: m
                    .message_attributes()
                    .and_then(|a| a.get(FAILURE_ATTRIBUTE))
                    .and_then(|v| v.string_value())
                    .and_then(|json| serde_json::from_str(json).ok()),
            });
            if let Some(handle) = m.receipt_handle() {
                handles.push(handle.to_owned());
            }
        }
    }
    change_visibility(sqs, url, &handles, Duration::ZERO).await?;
    Ok(peeked)
}

/// Sets the visibility of received messages (by receipt handle) to `hold` from now: 0 makes
/// them visible again at once. A handle that has expired meanwhile fails alone, and its message
/// is visible already.
async fn change_visibility(
    sqs: &Client,
    url: &str,
    handles: &[String],
    hold: Duration,
) -> Result<(), ToolError> {
    for chunk in handles.chunks(10) {
        let entries = chunk.iter().enumerate().map(|(i, handle)| {
            ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(handle)
                .visibility_timeout(hold.as_secs() as i32)
                .build()
        });
        let entries = entries
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ToolError::aws("build visibility entries", e))?;
        sqs.change_message_visibility_batch()
            .queue_url(url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| ToolError::aws("change the visibility of DLQ messages", e))?;
    }
    Ok(())
}

/// The `index`-th `:`-separated part of an ARN (3: region, 4: account).
pub fn arn_part(arn: &str, index: usize) -> Option<&str> {
    arn.split(':').nth(index).filter(|part| !part.is_empty())
}

/// How long a manual redrive holds a received batch invisible: far more than a send and a
/// delete take, and short enough that a killed run's batch is soon back in the DLQ.
pub const REDRIVE_HOLD: Duration = Duration::from_secs(10);

/// How long a redrive keeps hidden a message it leaves in the DLQ (a reason not selected, a copy
/// the source refused, everything in a dry run), renewed at half of it while the run goes on:
/// so that its receives reach the other messages and it ends, and so that a killed run's
/// messages are visible again within a minute. A run that ends makes them visible at once.
pub const SKIP_HOLD: Duration = Duration::from_secs(60);

/// The reason of a message SQS's redrive policy moved (it has no [`FAILURE_ATTRIBUTE`]): what
/// `--reason` names it by, and the reason its stamp gives it.
pub const SQS_MOVE_REASON: &str = "redrive_policy";

/// The mover a stamp names for a message SQS's redrive policy moved.
pub const SQS_MOVER: &str = "sqs";

/// Reasons a redrive leaves in the DLQ unless `--reason` names them. A `conflict` (another
/// payload sent under an order id already charged) can never succeed: it goes to the producer's
/// team, not back to the queue.
pub const KEPT_BY_DEFAULT: &[&str] = &["conflict"];

/// Said before a move task, which cannot filter or stamp.
pub const MOVE_TASK_WARNING: &str = "Warning: SQS's move task moves every message and cannot \
filter or stamp them. `conflict` copies go back to the queue too, and a copy SQS's redrive moved \
(no dead-letter-failure attribute) arrives with a new MessageId and SentTimestamp: nothing then \
tells the function it was tried before, and once its idempotency item has expired it may be \
charged again. Redrive without --move-task unless every message must go back as it is.";

/// Which DLQ messages a redrive sends back, by reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every reason but [`KEPT_BY_DEFAULT`].
    Default,
    /// Only the reasons named (`--reason`).
    Only(BTreeSet<String>),
    /// Every message, whatever its reason: what a move task moves.
    Everything,
}

impl Selection {
    /// The selection `--reason` names: none is [`Selection::Default`].
    pub fn named(reasons: &[String]) -> Self {
        if reasons.is_empty() {
            Self::Default
        } else {
            Self::Only(reasons.iter().cloned().collect())
        }
    }

    /// Whether a message with `reason` goes back.
    pub fn takes(&self, reason: &str) -> bool {
        match self {
            Self::Default => !KEPT_BY_DEFAULT.contains(&reason),
            Self::Only(named) => named.contains(reason),
            Self::Everything => true,
        }
    }

    /// The reasons named that no message read had: a typo, or nothing of that kind left.
    pub fn unmatched<'s>(&'s self, read: &BTreeMap<String, usize>) -> Vec<&'s str> {
        match self {
            Self::Only(named) => named
                .iter()
                .filter(|reason| !read.contains_key(*reason))
                .map(String::as_str)
                .collect(),
            Self::Default | Self::Everything => Vec::new(),
        }
    }
}

/// How a manual redrive runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Which reasons go back.
    pub selection: Selection,
    /// Messages a second.
    pub rate: u32,
    /// Read and count every message, send and delete nothing.
    pub dry_run: bool,
}

/// What a manual redrive did (in a dry run: would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moved {
    /// Sent back and deleted from the DLQ.
    pub moved: usize,
    /// Sends the source queue refused and copies that cannot fit it (those messages stay in the
    /// DLQ), and messages sent but not deleted from the DLQ (a later redrive sends them again).
    pub failed: usize,
    /// Of `moved`, messages SQS's redrive had moved, sent back with a stamp.
    pub stamped: usize,
    /// Of `stamped`, copies that left something out to fit SQS's limits (named in the stamp's
    /// `trimmed`): one of ten attributes of their own, or the detail.
    pub trimmed: usize,
    /// `moved` by reason.
    pub moved_by_reason: BTreeMap<String, usize>,
    /// Left in the DLQ because the selection does not take their reason, by reason.
    pub skipped: BTreeMap<String, usize>,
    /// Every message read, by reason.
    pub read: BTreeMap<String, usize>,
}

/// The checklist the seeds give for a redrive, printed before any message moves.
pub const REDRIVE_CHECKLIST: &str = "Before a redrive:
  1. The fix for whatever sent these messages to the DLQ is deployed (inspect first).
  2. The handler is idempotent: a redriven message that was half done must not charge twice.
  3. The rate is low enough for the store and the payment provider (--rate, default 10/s).";

/// Why `message` is in the DLQ: its failure's reason, [`UNREADABLE_REASON`] when its failure
/// attribute cannot be read (as the function reads it), or [`SQS_MOVE_REASON`] when it has none.
pub fn reason(message: &Message<'_>) -> String {
    match Failure::of(message) {
        // Read leniently: an attribute of `{}` names no reason.
        Some(failure) if failure.reason.is_empty() => UNREADABLE_REASON.to_owned(),
        Some(failure) => failure.reason,
        None => SQS_MOVE_REASON.to_owned(),
    }
}

/// The failure a message SQS's redrive moved (no [`FAILURE_ATTRIBUTE`]) is sent back with, so
/// that the function reads it as tried before and looks its order up before any charge, at any
/// age. Its first failure is `sent_ms`, the DLQ message's `SentTimestamp`: SQS keeps the
/// original on its own moves, so it is when the order was sent, at or before its first attempt.
/// The move's own time is not known; `last_failure_ms` is `now_ms`, when the redrive stamped it.
pub fn stamp(
    message: &Message<'_>,
    sent_ms: Option<u64>,
    source_arn: &str,
    now_ms: u64,
) -> Failure {
    let receives = message
        .receive_count
        .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
    Failure {
        reason: SQS_MOVE_REASON.to_owned(),
        detail: Some(format!(
            "SQS's redrive policy moved it to the DLQ after maxReceiveCount receives (receive \
             count {receives}, the DLQ's receives included); the move's time is unknown: \
             last_failure_ms is when orders-ops redrove it"
        )),
        key: order_id_hint(message.body).map(|id| attribute_key(&id)),
        source_queue_arn: source_arn.to_owned(),
        receive_count: message.receive_count,
        first_failure_ms: sent_ms,
        last_failure_ms: now_ms,
        moved_by: SQS_MOVER.to_owned(),
        ..Failure::default()
    }
}

/// The source queue's `MaximumMessageSize`: what a stamped copy must fit.
async fn max_message_bytes(sqs: &Client, url: &str) -> Result<usize, ToolError> {
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::MaximumMessageSize)
        .send()
        .await
        .map_err(|e| ToolError::aws("read the source queue's MaximumMessageSize", e))?;
    Ok(attributes
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::MaximumMessageSize))
        .and_then(|size| size.parse().ok())
        .unwrap_or(ASSUMED_MAX_MESSAGE_BYTES))
}

/// Messages a redrive leaves in the DLQ, hidden until it ends ([`SKIP_HOLD`]): by message id,
/// their latest receipt handle and when they were last hidden.
#[derive(Debug, Default)]
struct Held(HashMap<String, (String, Instant)>);

impl Held {
    /// Hides these messages for [`SKIP_HOLD`] from now.
    async fn hide(
        &mut self,
        sqs: &Client,
        url: &str,
        messages: Vec<(String, String)>,
    ) -> Result<(), ToolError> {
        let handles: Vec<String> = messages.iter().map(|(_, h)| h.clone()).collect();
        change_visibility(sqs, url, &handles, SKIP_HOLD).await?;
        let now = Instant::now();
        self.0
            .extend(messages.into_iter().map(|(id, h)| (id, (h, now))));
        Ok(())
    }

    /// Hides again the messages hidden half a [`SKIP_HOLD`] ago or more. One whose hold has
    /// lapsed anyway comes back in a receive and is hidden again, never handled twice.
    async fn renew(&mut self, sqs: &Client, url: &str) -> Result<(), ToolError> {
        let due: Vec<(String, String)> = self
            .0
            .iter()
            .filter(|(_, (_, at))| at.elapsed() >= SKIP_HOLD / 2)
            .map(|(id, (handle, _))| (id.clone(), handle.clone()))
            .collect();
        self.hide(sqs, url, due).await
    }

    /// Makes every held message visible again now.
    async fn release(&mut self, sqs: &Client, url: &str) -> Result<(), ToolError> {
        let handles: Vec<String> = self.0.drain().map(|(_, (handle, _))| handle).collect();
        change_visibility(sqs, url, &handles, Duration::ZERO).await
    }
}

/// What a redrive does with one DLQ message.
enum Decision {
    /// Left in the DLQ: the selection does not take its reason.
    Skip,
    /// Sent back with these attributes: as it has them, or with a stamp (SQS's own moves).
    Send {
        attributes: Option<HashMap<String, MessageAttributeValue>>,
        stamped: bool,
        trimmed: bool,
    },
    /// Left in the DLQ: its stamped copy cannot fit the source queue (its body alone is too
    /// large).
    Unfit,
}

/// Moves the DLQ messages whose reason `plan` selects back to `source` by hand, at most
/// `plan.rate` per second: receive, send a copy (FIFO: same group, fresh deduplication id), and
/// delete from the DLQ only the messages whose copy the source accepted. A message SQS's redrive
/// moved goes back stamped ([`stamp`]); one the function moved goes back as it is. Each message
/// is handled once a run; what the run leaves in the DLQ is hidden while it goes on, so that its
/// receives reach the others, and visible again when it ends. A pass ends after two receives
/// that bring nothing new. `progress` hears the running totals after every batch (a progress
/// bar).
///
/// On a FIFO DLQ a held message holds back the rest of its group: what follows it there is
/// reached by the next pass, which makes the held messages visible again and receives ten at a
/// time, so that a group's messages come together (SQS gives a receive as many of one group as
/// it can). The run ends with a pass that brings nothing new. A message behind ten or more left
/// in its group cannot be reached: SQS gives a group only in order.
pub async fn redrive_manual(
    sqs: &Client,
    dlq: &Queue,
    source: &Queue,
    plan: &Plan,
    mut progress: impl FnMut(&Moved),
) -> Result<Moved, ToolError> {
    let mut run = Run {
        sqs,
        dlq,
        source,
        plan,
        max_bytes: max_message_bytes(sqs, &source.url).await?,
        held: Held::default(),
        handled: HashSet::new(),
        total: Moved::default(),
    };
    let outcome = run.passes(&mut progress).await;
    // However the run ended, what it left in the DLQ is visible again now. If that fails, the
    // messages come back when their hold ends.
    if let Err(error) = run.held.release(sqs, &dlq.url).await {
        tracing::warn!(
            error = lambda_kit::error_chain(&error),
            "messages left in the DLQ could not be made visible again now; they are within {} s",
            SKIP_HOLD.as_secs()
        );
    }
    outcome.map(|()| run.total)
}

/// One manual redrive under way.
struct Run<'a> {
    sqs: &'a Client,
    dlq: &'a Queue,
    source: &'a Queue,
    plan: &'a Plan,
    /// The source queue's `MaximumMessageSize`: what a stamped copy must fit.
    max_bytes: usize,
    /// What the run leaves in the DLQ, hidden until it ends.
    held: Held,
    /// Every message id handled in this run: never handled twice.
    handled: HashSet<String>,
    total: Moved,
}

impl Run<'_> {
    async fn passes(&mut self, progress: &mut impl FnMut(&Moved)) -> Result<(), ToolError> {
        let rate = self.plan.rate.max(1);
        let started = Instant::now();
        loop {
            let before = self.handled.len();
            let mut idle_polls = 0;
            while idle_polls < 2 {
                self.held.renew(self.sqs, &self.dlq.url).await?;
                if !self.receive_once().await? {
                    idle_polls += 1;
                    continue;
                }
                idle_polls = 0;
                progress(&self.total);
                // Pace: `moved` messages should have taken at least moved / rate seconds (a dry
                // run's count moved nothing).
                let due = Duration::from_secs_f64(self.total.moved as f64 / f64::from(rate));
                if let Some(wait) = due.checked_sub(started.elapsed())
                    && !self.plan.dry_run
                {
                    tokio::time::sleep(wait).await;
                }
            }
            if !self.dlq.fifo || self.handled.len() == before {
                return Ok(());
            }
            self.held.release(self.sqs, &self.dlq.url).await?;
        }
    }

    /// One receive, and what it brought handled; whether it brought a message not handled before.
    async fn receive_once(&mut self) -> Result<bool, ToolError> {
        let (sqs, dlq, plan) = (self.sqs, self.dlq, self.plan);
        // Fewer than ten a receive keeps a low rate smooth; a FIFO DLQ always gets ten, so that
        // the messages behind one left in its group come in the same receive (the pause after
        // each batch still keeps the rate). A dry run sends nothing and needs no pace.
        let per_receive = if dlq.fifo || plan.dry_run {
            10
        } else {
            plan.rate.clamp(1, 10) as i32
        };
        let out = sqs
            .receive_message()
            .queue_url(&dlq.url)
            .max_number_of_messages(per_receive)
            .visibility_timeout(REDRIVE_HOLD.as_secs() as i32)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| ToolError::aws("receive from the DLQ", e))?;
        // Messages to leave in the DLQ, by id and receipt handle.
        let mut keep: Vec<(String, String)> = Vec::new();
        let mut fresh = Vec::new();
        for m in out.messages.unwrap_or_default() {
            let (Some(id), Some(handle)) = (m.message_id(), m.receipt_handle()) else {
                // SQS gives every message both; one without cannot be deleted, so is not sent.
                tracing::warn!("a DLQ message without an id or a receipt handle is left alone");
                continue;
            };
            if self.handled.insert(id.to_owned()) {
                fresh.push(m);
            } else {
                // Handled before in this run (left behind, or sent and not deleted): held again.
                keep.push((id.to_owned(), handle.to_owned()));
            }
        }
        if fresh.is_empty() {
            self.held.hide(sqs, &dlq.url, keep).await?;
            return Ok(false);
        }
        let handled = self.handle(&fresh, &mut keep).await;
        let hidden = self.held.hide(sqs, &dlq.url, keep).await;
        handled?;
        hidden?;
        Ok(true)
    }

    /// Sends back what the plan selects of `fresh`, deletes what the source accepted, and adds
    /// to `keep` what stays in the DLQ.
    async fn handle(
        &mut self,
        fresh: &[aws_sdk_sqs::types::Message],
        keep: &mut Vec<(String, String)>,
    ) -> Result<(), ToolError> {
        let (sqs, dlq, source, plan) = (self.sqs, self.dlq, self.source, self.plan);
        let total = &mut self.total;
        let mut event = SqsEvent::default();
        let region = arn_part(&dlq.arn, 3).unwrap_or("unknown");
        event.records = fresh
            .iter()
            .map(|m| lambda_record(m, &dlq.arn, region))
            .collect();
        let batch = Batch::from_event(&event)
            .map_err(|e| ToolError::Other(format!("read the DLQ's messages: {e}")))?;
        let now_ms = SystemClock.now_ms();
        // What goes back: indexes into `fresh`, with whether it was stamped and trimmed.
        let mut sending = Vec::new();
        let mut entries = Vec::new();
        let mut reasons = Vec::with_capacity(fresh.len());
        for (i, (m, message)) in fresh.iter().zip(&batch.messages).enumerate() {
            let reason = reason(message);
            *total.read.entry(reason.clone()).or_default() += 1;
            let decision = if plan.selection.takes(&reason) {
                decide(message, m, &source.arn, self.max_bytes, now_ms)
            } else {
                *total.skipped.entry(reason.clone()).or_default() += 1;
                Decision::Skip
            };
            reasons.push(reason);
            let Decision::Send {
                attributes,
                stamped,
                trimmed,
            } = decision
            else {
                total.failed += usize::from(matches!(decision, Decision::Unfit));
                keep.push(id_and_handle(m));
                continue;
            };
            if plan.dry_run {
                count_moved(total, &reasons[i], stamped, trimmed);
                keep.push(id_and_handle(m));
                continue;
            }
            let mut entry = SendMessageBatchRequestEntry::builder()
                .id(sending.len().to_string())
                .message_body(m.body().unwrap_or_default())
                .set_message_attributes(attributes);
            if source.fifo {
                let group = m
                    .attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                    .cloned()
                    .unwrap_or_else(|| "redrive".to_owned());
                entry = entry
                    .message_group_id(group)
                    .message_deduplication_id(uuid::Uuid::new_v4().to_string());
            }
            entries.push(
                entry
                    .build()
                    .map_err(|e| ToolError::aws("build send entries", e))?,
            );
            sending.push((i, stamped, trimmed));
        }
        if entries.is_empty() {
            return Ok(());
        }
        // The entry `id` of a batch result, as its place in `sending`.
        let sent_as = |id: &str| {
            id.parse::<usize>()
                .ok()
                .and_then(|entry| sending.get(entry).copied())
        };
        let sent = sqs
            .send_message_batch()
            .queue_url(&source.url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| ToolError::aws("send to the source queue", e))?;
        for failure in sent.failed() {
            tracing::warn!(
                id = failure.id(),
                code = failure.code(),
                "the source queue refused a redriven message; it stays in the DLQ"
            );
            if let Some((i, _, _)) = sent_as(failure.id()) {
                keep.push(id_and_handle(&fresh[i]));
            }
        }
        total.failed += sent.failed().len();
        if sent.successful().is_empty() {
            // Nothing this round was accepted: stop rather than go on against a source that
            // refuses everything.
            return Err(ToolError::Other(format!(
                "the source queue refused every message of a batch ({} moved before); see the \
                 warnings",
                total.moved
            )));
        }
        let deletes = sent
            .successful()
            .iter()
            .filter_map(|ok| {
                let (i, _, _) = sent_as(ok.id())?;
                DeleteMessageBatchRequestEntry::builder()
                    .id(ok.id())
                    .receipt_handle(fresh[i].receipt_handle()?)
                    .build()
                    .ok()
            })
            .collect::<Vec<_>>();
        if deletes.is_empty() {
            return Ok(());
        }
        let deleted = sqs
            .delete_message_batch()
            .queue_url(&dlq.url)
            .set_entries(Some(deletes))
            .send()
            .await
            .map_err(|e| ToolError::aws("delete from the DLQ", e))?;
        for failure in deleted.failed() {
            tracing::warn!(
                id = failure.id(),
                code = failure.code(),
                "a redriven message could not be deleted from the DLQ: it is in the source queue \
                 and still in the DLQ, and a later redrive sends it again (a duplicate the \
                 function absorbs)"
            );
        }
        for ok in deleted.successful() {
            if let Some((i, stamped, trimmed)) = sent_as(ok.id()) {
                count_moved(total, &reasons[i], stamped, trimmed);
            }
        }
        total.failed += deleted.failed().len();
        // A fact an observer can wait on (the tests do): this batch is in the source queue and
        // gone from the DLQ.
        tracing::info!(
            moved = total.moved,
            failed = total.failed,
            "redrive batch moved"
        );
        Ok(())
    }
}

/// How a message whose reason is selected goes back: as it is when the function moved it (its
/// attribute already tells the function its history), stamped when SQS's redrive moved it.
fn decide(
    message: &Message<'_>,
    received: &aws_sdk_sqs::types::Message,
    source_arn: &str,
    max_bytes: usize,
    now_ms: u64,
) -> Decision {
    if Failure::of(message).is_some() {
        return Decision::Send {
            attributes: received.message_attributes.clone(),
            stamped: false,
            trimmed: false,
        };
    }
    let sent_ms = received
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
        .and_then(|t| t.parse().ok());
    let one = Move {
        message,
        failure: stamp(message, sent_ms, source_arn, now_ms),
    };
    match copy_attributes(&one, max_bytes) {
        Ok(attributes) => {
            let trimmed = trimmed_of(&attributes);
            if !trimmed.is_empty() {
                tracing::warn!(
                    message_id = message.message_id,
                    ?trimmed,
                    "a stamped copy left this out to fit SQS's limits"
                );
            }
            Decision::Send {
                attributes: Some(attributes),
                stamped: true,
                trimmed: !trimmed.is_empty(),
            }
        }
        Err(why) => {
            tracing::warn!(
                message_id = message.message_id,
                why,
                "the stamped copy cannot fit the source queue; it stays in the DLQ"
            );
            Decision::Unfit
        }
    }
}

/// A received message's id and receipt handle (the loop received only messages with both).
fn id_and_handle(m: &aws_sdk_sqs::types::Message) -> (String, String) {
    (
        m.message_id().unwrap_or_default().to_owned(),
        m.receipt_handle().unwrap_or_default().to_owned(),
    )
}

/// Counts one message moved (or, in a dry run, that would be).
fn count_moved(total: &mut Moved, reason: &str, stamped: bool, trimmed: bool) {
    total.moved += 1;
    *total.moved_by_reason.entry(reason.to_owned()).or_default() += 1;
    total.stamped += usize::from(stamped);
    total.trimmed += usize::from(trimmed);
}

/// What a fitted copy's failure names as left out, if anything.
fn trimmed_of(attributes: &HashMap<String, MessageAttributeValue>) -> Vec<String> {
    attributes
        .get(FAILURE_ATTRIBUTE)
        .and_then(MessageAttributeValue::string_value)
        .and_then(|text| serde_json::from_str::<Failure>(text).ok())
        .map(|failure| failure.trimmed)
        .unwrap_or_default()
}

/// SQS's largest message body; a larger one must go through the claim check.
pub const INLINE_LIMIT: usize = 256 * 1024;

/// Where a large body goes instead of the queue.
#[derive(Debug, Clone, Copy)]
pub struct Offload<'a> {
    #[cfg(feature = "s3-claim-check")]
    pub s3: &'a aws_sdk_s3::Client,
    pub bucket: &'a str,
    /// Bodies longer than this many bytes are offloaded (at most [`INLINE_LIMIT`]).
    pub threshold: usize,
}

/// The message to send for `body`: the body itself, or a pointer and its attribute.
type Outgoing<'b> = (Cow<'b, str>, Option<MessageAttributeValue>);

/// Sends one order body to `queue` (FIFO: in `group`, with a fresh deduplication id). With
/// `offload`, a body above its threshold is written to S3 first and the message carries the
/// pointer, marked by the `payload-pointer` attribute. Returns whether it was offloaded.
pub async fn send_order(
    sqs: &Client,
    queue: &Queue,
    body: &str,
    group: Option<&str>,
    offload: Option<Offload<'_>>,
) -> Result<bool, ToolError> {
    let (text, pointer_attribute): Outgoing<'_> = match offload {
        Some(o) if body.len() > o.threshold.min(INLINE_LIMIT) => offload_body(o, body).await?,
        _ => (Cow::Borrowed(body), None),
    };
    if text.len() > INLINE_LIMIT {
        return Err(ToolError::Other(format!(
            "the body is {} bytes, above SQS's {INLINE_LIMIT}: it needs the claim check (--bucket)",
            text.len()
        )));
    }
    let offloaded = pointer_attribute.is_some();
    let mut send = sqs
        .send_message()
        .queue_url(&queue.url)
        .message_body(text.as_ref());
    if let Some(attribute) = pointer_attribute {
        send = send.message_attributes(claim_check::POINTER_ATTRIBUTE, attribute);
    }
    if queue.fifo {
        send = send
            .message_group_id(group.unwrap_or("orders"))
            .message_deduplication_id(uuid::Uuid::new_v4().to_string());
    }
    send.send()
        .await
        .map_err(|e| ToolError::aws("send the order", e))?;
    Ok(offloaded)
}

#[cfg(feature = "s3-claim-check")]
async fn offload_body<'b>(o: Offload<'_>, body: &'b str) -> Result<Outgoing<'b>, ToolError> {
    let pointer = claim_check::s3::offload(o.s3, o.bucket, PAYLOAD_PREFIX, body)
        .await
        .map_err(|e| ToolError::aws("write the payload to S3", e))?;
    let text = serde_json::to_string(&pointer).map_err(|e| ToolError::Other(e.to_string()))?;
    let attribute = MessageAttributeValue::builder()
        .data_type("String")
        .string_value(claim_check::POINTER_S3)
        .build()
        .map_err(|e| ToolError::aws("build the pointer attribute", e))?;
    Ok((Cow::Owned(text), Some(attribute)))
}

#[cfg(not(feature = "s3-claim-check"))]
async fn offload_body<'b>(o: Offload<'_>, body: &'b str) -> Result<Outgoing<'b>, ToolError> {
    Err(ToolError::Other(format!(
        "the body is {} bytes, above the {}-byte threshold for bucket {}, and this build has no \
         claim check: build with --features s3-claim-check",
        body.len(),
        o.threshold,
        o.bucket
    )))
}

pub use claim_check::PAYLOAD_PREFIX;

#[cfg(test)]
mod tests {
    use super::*;
    use sqs_batch::edge::MessageAttributes;

    /// A DLQ message whose failure attribute is `failure` (none: SQS's own move).
    fn with_failure<T>(failure: Option<&str>, read: impl FnOnce(&Message<'_>) -> T) -> T {
        let Some(failure) = failure else {
            return read(&Message::new("m-1", r#"{"order_id": "o-1", "amount": 5}"#));
        };
        let raw = serde_json::json!({ FAILURE_ATTRIBUTE: {
            "stringValue": failure, "dataType": "String" } })
        .to_string();
        let raw: Box<serde_json::value::RawValue> = serde_json::from_str(&raw).expect("raw");
        read(&Message::new("m-1", "{}").with_attributes(MessageAttributes::Raw(&raw)))
    }

    /// The function's reason when it moved the message; `redrive_policy` when SQS did; a
    /// damaged attribute, or one naming no reason, is `unreadable`, never SQS's move.
    #[test]
    fn a_messages_reason_is_its_failures_or_sqss_move() {
        assert_eq!(with_failure(None, reason), SQS_MOVE_REASON);
        assert_eq!(
            with_failure(Some(r#"{"reason":"conflict"}"#), reason),
            "conflict"
        );
        assert_eq!(with_failure(Some("not json"), reason), UNREADABLE_REASON);
        assert_eq!(with_failure(Some("{}"), reason), UNREADABLE_REASON);
    }

    /// Without `--reason` every reason but conflict goes back; named reasons go back alone, a
    /// conflict only when named; a move task takes everything.
    #[test]
    fn the_default_selection_leaves_conflicts_and_named_ones_take_only_theirs() {
        let default = Selection::named(&[]);
        assert_eq!(default, Selection::Default);
        for reason in [
            "payment_rejected",
            "retries_exhausted",
            "invalid_body",
            SQS_MOVE_REASON,
            UNREADABLE_REASON,
        ] {
            assert!(default.takes(reason), "{reason}");
        }
        assert!(!default.takes("conflict"));
        let named = Selection::named(&["conflict".to_owned(), "invalid_body".to_owned()]);
        assert!(named.takes("conflict") && named.takes("invalid_body"));
        assert!(!named.takes(SQS_MOVE_REASON));
        assert!(Selection::Everything.takes("conflict"));
        let read = BTreeMap::from([("invalid_body".to_owned(), 2)]);
        assert_eq!(named.unmatched(&read), ["conflict"]);
        assert!(default.unmatched(&read).is_empty());
    }

    /// A stamp dates SQS's move from the message's send time and names SQS as the mover.
    #[test]
    fn a_stamp_says_sqs_moved_it_and_since_when() {
        let message = Message::new("m-1", r#"{"order_id": "o-1", "amount": 5}"#)
            .with_receive_count(Some(201));
        let failure = stamp(
            &message,
            Some(1_000),
            "arn:aws:sqs:us-east-1:1:orders",
            9_000,
        );
        assert_eq!(failure.reason, SQS_MOVE_REASON);
        assert_eq!(failure.moved_by, SQS_MOVER);
        assert_eq!(
            (failure.first_failure_ms, failure.last_failure_ms),
            (Some(1_000), 9_000)
        );
        assert_eq!(failure.receive_count, Some(201));
        assert_eq!(failure.key.as_deref(), Some("o-1"));
        assert_eq!(failure.earliest_ms(), 1_000);
        assert!(
            failure
                .detail
                .is_some_and(|d| d.contains("maxReceiveCount") && d.contains("201"))
        );
    }
}
