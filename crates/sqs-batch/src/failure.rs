//! The failure a dead-letter copy carries ([`FAILURE_ATTRIBUTE`], a [`Failure`]): its format,
//! read leniently and written within SQS's sizes and character set, and when a redriven copy's
//! work may first have been attempted ([`earlier_attempt_ms`]). Below the processor, which reads
//! a record's earlier attempt from it, and the dead-letter moves, which write it;
//! [`crate::dead_letter`] re-exports every item.

use serde::Serialize;

use crate::edge::Message;

/// The message attribute a moved message gains: its [`Failure`], as JSON. One attribute, since
/// SQS allows a message ten.
pub const FAILURE_ATTRIBUTE: &str = "dead-letter-failure";

/// The reason a moved copy reads as when its [`FAILURE_ATTRIBUTE`] is there but cannot be read
/// ([`Failure::of`]).
pub const UNREADABLE_REASON: &str = "unreadable";

/// Why a record was moved, as its copy in the DLQ carries it ([`FAILURE_ATTRIBUTE`]). Read
/// leniently (every field may be missing): a copy moved by another build still tells its
/// history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Failure {
    /// The verdict's reason code (`invalid_body`, `payment_rejected`, ...).
    pub reason: String,
    /// The verdict's detail line, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The business key the record is about (an order id), when the handler named one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The queue the record came from.
    pub source_queue_arn: String,
    /// `ApproximateReceiveCount` of the receive that moved it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u32>,
    /// When it was first received (`ApproximateFirstReceiveTimestamp`), epoch ms: its first
    /// failure at the latest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failure_ms: Option<u64>,
    /// When it was moved, epoch ms.
    pub last_failure_ms: u64,
    /// What moved it (a function's name and version).
    pub moved_by: String,
    /// The earlier moves of this message (a redriven copy moved again), oldest first: the
    /// latest [`MAX_HISTORY`] of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<EarlierMove>,
    /// How many times the message was moved before this move, in all.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub earlier_moves: u32,
    /// What was left out of the copy to fit SQS's limits (an attribute's name, `detail`,
    /// `history`), if anything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trimmed: Vec<String>,
}

/// One earlier move of a message, as a later move's [`Failure::history`] keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EarlierMove {
    /// Its reason code.
    pub reason: String,
    /// Its receive count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_count: Option<u32>,
    /// When it was moved, epoch ms.
    pub last_failure_ms: u64,
    /// What moved it.
    #[serde(default)]
    pub moved_by: String,
}

impl Failure {
    /// The failure a moved copy carries, if `message` is one (a redrive of the DLQ delivers it
    /// with its [`FAILURE_ATTRIBUTE`]). An attribute that is there but cannot be read (another
    /// tool's, a damaged one) still says the message was moved: it reads as a move of unknown
    /// reason and time (0, the oldest possible), never as no move at all.
    pub fn of(message: &Message<'_>) -> Option<Self> {
        let text = message.attributes.string(FAILURE_ATTRIBUTE)?;
        Some(serde_json::from_str(&text).unwrap_or_else(|_| Failure {
            reason: UNREADABLE_REASON.to_owned(),
            first_failure_ms: Some(0),
            ..Failure::default()
        }))
    }

    /// The earliest time the history names, epoch ms: the first failure of the first move (0
    /// when it gives none, the oldest possible). The message's work may have been attempted
    /// since then.
    pub fn earliest_ms(&self) -> u64 {
        let first = self.first_failure_ms.unwrap_or(0);
        self.history
            .iter()
            .map(|earlier| earlier.last_failure_ms)
            .fold(first, u64::min)
    }
}

/// When the work of `message` may first have been attempted, if it has been in a dead-letter
/// queue: for an idempotency claim's `earlier_attempt_ms`, so that a redriven copy is looked up
/// before its work is done again, whatever its age (its item may have expired, or never have
/// been written). A copy the function moved says when from its [`FAILURE_ATTRIBUTE`]; one that
/// SQS moved itself and that still carries SQS's `DeadLetterQueueSourceArn` is of unknown age
/// (0, the oldest possible). Only such records pay for reading their attributes.
pub fn earlier_attempt_ms(message: &Message<'_>) -> Option<u64> {
    match Failure::of(message) {
        Some(failure) => Some(failure.earliest_ms()),
        None => message.dead_letter_source.map(|_| 0),
    }
}

/// The most earlier moves a [`Failure`] keeps.
pub const MAX_HISTORY: usize = 5;
/// The longest key a failure carries, in bytes; a longer one is cut and hashed
/// ([`attribute_key`]).
pub const MAX_KEY_BYTES: usize = 256;
/// The longest detail a failure carries, in characters.
pub const MAX_DETAIL_CHARS: usize = 1_024;
/// The longest reason or mover an earlier move keeps, in characters.
pub(crate) const MAX_NAME_CHARS: usize = 128;

impl Failure {
    /// This failure as the next move of a message that was moved before with `earlier`: the
    /// earlier move joins the history (the latest [`MAX_HISTORY`]), the moves are counted, and
    /// the first failure is the earliest either knows. Every text taken from the old attribute
    /// is bounded and cleaned ([`attribute_text`]).
    pub fn after(mut self, earlier: Option<Failure>) -> Self {
        let Some(earlier) = earlier else {
            return self;
        };
        let name = |text: &str| bounded(text, MAX_NAME_CHARS);
        self.earlier_moves = earlier.earlier_moves.saturating_add(1);
        self.first_failure_ms = match (earlier.first_failure_ms, self.first_failure_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut history: Vec<EarlierMove> = earlier
            .history
            .iter()
            .map(|e| EarlierMove {
                reason: name(&e.reason),
                receive_count: e.receive_count,
                last_failure_ms: e.last_failure_ms,
                moved_by: name(&e.moved_by),
            })
            .collect();
        history.push(EarlierMove {
            reason: name(&earlier.reason),
            receive_count: earlier.receive_count,
            last_failure_ms: earlier.last_failure_ms,
            moved_by: name(&earlier.moved_by),
        });
        let skip = history.len().saturating_sub(MAX_HISTORY);
        self.history = history.split_off(skip);
        self
    }
}

/// Whether SQS takes `c` in a message attribute's value (and a body): `#x9 | #xA | #xD |
/// #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`.
pub fn sqs_allows(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{a}' | '\u{d}' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}')
        || c >= '\u{10000}'
}

/// `text` with every character SQS refuses in an attribute replaced by U+FFFD.
pub fn attribute_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().all(sqs_allows) {
        std::borrow::Cow::Borrowed(text)
    } else {
        text.chars()
            .map(|c| if sqs_allows(c) { c } else { '\u{fffd}' })
            .collect::<String>()
            .into()
    }
}

/// `text` cleaned ([`attribute_text`]) and cut to `max_chars` characters ("..." marks a cut).
pub(crate) fn bounded(text: &str, max_chars: usize) -> String {
    let text = attribute_text(text);
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}

/// A key as a failure carries it: as it is when it is at most [`MAX_KEY_BYTES`] and every
/// character is one SQS takes; else its first characters (cleaned) and `#` with the FNV-1a hash
/// of the whole key, so a person can still match it against the body and the logs.
pub fn attribute_key(key: &str) -> String {
    if key.len() <= MAX_KEY_BYTES && key.chars().all(sqs_allows) {
        return key.to_owned();
    }
    let mut hash = lambda_kit::Fnv1a::new();
    hash.write(key.as_bytes());
    // Cut after cleaning: a replacement character is three bytes, whatever it replaced.
    let clean = attribute_text(key);
    let mut cut = 200.min(clean.len());
    while !clean.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...#{:016x}", &clean[..cut], hash.finish())
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
