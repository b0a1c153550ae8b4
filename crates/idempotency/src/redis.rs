//! The Redis store (feature `redis`; Valkey speaks the same protocol): a hash per key, and every
//! write one compare-and-set script run atomically by the server.
//!
//! The script ([`COMPARE_AND_SET`]) decides nothing: it writes only if the item is still at the
//! version the caller saw (its lease token and status, or no item), and hands the item back
//! when it is not. Everything else is the crate's shared state machine, run here in Rust on the
//! item that came back: [`claimable`], [`decide`], [`claimed_state`] and [`prior_attempt`] for a
//! claim, the lease token and `IN_PROGRESS` for a holder's write. So the conditions are the
//! memory store's by construction, every time read is the request's (never the server's clock),
//! and no path reads before it writes.
//!
//! - claim: one script expecting no item (the common case). Refused, the item comes back: not
//!   claimable, [`decide`] answers from it (DONE with the kept output, BUSY, CONFLICT,
//!   REJECTED); claimable (a takeover, or a finished item past its retention), the claim is sent
//!   again expecting that very item, with the state [`claimed_state`] makes of it.
//! - complete, mark attempted, reject: one script expecting the holder's token and
//!   `IN_PROGRESS`. The token stays on the finished item, so a refused write that finds the
//!   state it writes under its own token is its own earlier write, a success.
//! - release: the same script, deleting the item.
//!
//! The client never sends a command twice by itself: a write whose answer was lost is an outage
//! to the caller (its record is retried), and the next delivery meets the item as it was left.
//!
//! Each write sets the key's expiry (`PEXPIREAT`) to the item's retention end, so Redis drops it
//! lazily as DynamoDB's TTL does; until it does, a finished item past that time reads as absent
//! by the claim condition, whatever the server's clock says.
//!
//! # Example
//!
//! ```no_run
//! # async fn example() -> Result<(), idempotency::StoreError> {
//! use std::time::Duration;
//! use idempotency::RedisStore;
//!
//! // One multiplexed connection per process, shared by every clone of the store.
//! let store = RedisStore::connect("redis://127.0.0.1:6379/0", Duration::from_secs(86_400))
//!     .await?
//!     .with_key_prefix("email-once#");
//! assert_eq!(store.redis_key("u-1"), "email-once#u-1");
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use ::redis::aio::ConnectionManager;
use ::redis::{Script, Value};

use super::{
    Fingerprint, IdempotencyStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
    store::LeaseToken,
};
use crate::store::{ClaimState, Status, claimable, claimed_state, decide, prior_attempt};

/// The item layout: the fields of the hash kept per key, named as the DynamoDB item's
/// attributes are. Numbers are decimal text.
pub mod field {
    /// `IN_PROGRESS`, `ATTEMPTED`, `COMPLETED` or `REJECTED`.
    pub const STATUS: &str = "status";
    /// The lease token of the latest claim; kept when its holder finishes, spent with it.
    pub const LEASE_TOKEN: &str = "lease_token";
    /// Lease end, epoch ms; removed when the lease ends.
    pub const LEASE_UNTIL: &str = "lease_until";
    /// Payload fingerprint, 16 hex digits.
    pub const FINGERPRINT: &str = "fingerprint";
    /// The retention end, epoch seconds; the key's Redis expiry is set to it.
    pub const EXPIRES_AT: &str = "expires_at";
    /// The message id of the latest claim, for forensics.
    pub const MESSAGE_ID: &str = "message_id";
    /// When the item was last claimed, epoch ms.
    pub const CLAIMED_AT: &str = "claimed_at";
    /// When the first attempt under the key began, epoch ms; kept across takeovers, removed on
    /// completion.
    pub const FIRST_ATTEMPT_AT: &str = "first_attempt_at";
    /// Claims of the key so far; removed on completion.
    pub const ATTEMPTS: &str = "attempts";
    /// When the latest attempt ended without proof either way, epoch ms.
    pub const ATTEMPTED_AT: &str = "attempted_at";
    /// When the work completed, epoch ms.
    pub const COMPLETED_AT: &str = "completed_at";
    /// When the work was refused for good, epoch ms.
    pub const REJECTED_AT: &str = "rejected_at";
    /// Why it was refused, for the person who may clear it.
    pub const REJECTED_REASON: &str = "rejected_reason";
    /// The work's output kept by the completion, returned to duplicates; removed by a claim.
    pub const OUTPUT: &str = "output";
    /// The item format's version, [`SCHEMA_VERSION`](super::SCHEMA_VERSION), written by every
    /// claim.
    pub const SCHEMA: &str = "schema";
}

/// The version of the item format this store writes ([`field::SCHEMA`]). As the DynamoDB
/// store's: a claim never takes over an item of a later version; it reads as malformed, so the
/// record is retried rather than misread.
pub const SCHEMA_VERSION: u64 = 1;

/// The one script every write runs. `KEYS[1]` is the item. It writes only if the item is at the
/// version the caller saw: `ARGV[1]`, `ARGV[2]` its lease token and status (a status of `''`:
/// no item). Every write gives the item a new token (a claim) or moves it out of `IN_PROGRESS`
/// once (its holder's finish), and the token is random, so the pair names one version: a key
/// deleted and claimed again in between is never mistaken for the item the caller saw.
///
/// `ARGV[3]` is `delete`, or the new retention end (epoch ms, for `PEXPIREAT`); then `ARGV[4]`
/// counts the field and value pairs that follow it, and the fields after those are removed.
///
/// Replies `{1}` when written, `{0, fields and values}` with the item as it is when not, and
/// `{-1, type}` when the key holds something else than a hash (nothing written).
pub const COMPARE_AND_SET: &str = r"
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'hash' and kind ~= 'none' then
  return {-1, kind}
end
local item = redis.call('HGETALL', KEYS[1])
local token, status = '', ''
for i = 1, #item, 2 do
  if item[i] == 'lease_token' then token = item[i + 1] end
  if item[i] == 'status' then status = item[i + 1] end
end
local seen
if ARGV[2] == '' then
  seen = #item == 0
else
  seen = token == ARGV[1] and status == ARGV[2]
end
if not seen then
  return {0, item}
end
if ARGV[3] == 'delete' then
  redis.call('DEL', KEYS[1])
  return {1}
end
local pairs_end = 4 + 2 * tonumber(ARGV[4])
redis.call('HSET', KEYS[1], unpack(ARGV, 5, pairs_end))
if #ARGV > pairs_end then
  redis.call('HDEL', KEYS[1], unpack(ARGV, pairs_end + 1))
end
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return {1}
";

// Loaded once per process; the helper sends EVALSHA, and EVAL's text once on NOSCRIPT (a server
// restarted or failed over without its script cache).
static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(COMPARE_AND_SET));

/// How many times a claim is sent: each refusal after the first means another writer changed
/// the item between two of ours. After the last, the key is busy for now, never done.
const CLAIM_SENDS: usize = 4;

/// Fields a claim removes: what a finish of an earlier claim kept.
const CLAIM_REMOVES: &[&str] = &[
    field::COMPLETED_AT,
    field::REJECTED_AT,
    field::REJECTED_REASON,
    field::OUTPUT,
];

/// The store on a Redis (or Valkey) server: one hash per key, with its retention as the key's
/// expiry.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use idempotency::{Outcome, RedisStore, once};
///
/// # async fn welcome() -> Result<(), idempotency::StoreError> {
/// let store = RedisStore::connect("redis://127.0.0.1:6379/", Duration::from_secs(18 * 86_400))
///     .await?
///     .with_key_prefix("welcome#");
/// let sent = once(&store, "u-1", &"welcome", || async { Ok::<_, String>(()) }).await;
/// assert!(matches!(sent, Outcome::Performed(()) | Outcome::Duplicate));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    retention_s: u64,
    key_prefix: String,
}

impl RedisStore {
    /// A store over `connection`, built once per process and shared: a [`ConnectionManager`] is
    /// one multiplexed connection that reconnects by itself, and a clone of it (or of this
    /// store) shares it.
    pub fn new(connection: ConnectionManager, retention: Duration) -> Self {
        Self {
            connection,
            retention_s: retention.as_secs(),
            key_prefix: String::new(),
        }
    }

    /// Connects to `url` (`redis://host:port/db`) with the client's defaults (a connection
    /// timeout of 1 s, a response timeout of 500 ms, reconnection with backoff).
    pub async fn connect(url: &str, retention: Duration) -> Result<Self, StoreError> {
        let client = ::redis::Client::open(url).map_err(unavailable)?;
        let connection = ConnectionManager::new(client).await.map_err(unavailable)?;
        Ok(Self::new(connection, retention))
    }

    /// Puts `prefix` before every key, so users of a shared server never see each other's keys
    /// (`email-once#u-1` and `u-1` are two items).
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The Redis key of `key`'s item.
    pub fn redis_key(&self, key: &str) -> String {
        format!("{}{key}", self.key_prefix)
    }

    fn expires_at(&self, now_ms: u64) -> u64 {
        (now_ms / 1_000).saturating_add(self.retention_s)
    }
}

/// An item as stored: its fields and their values.
type Item = HashMap<String, String>;

/// What [`COMPARE_AND_SET`] did.
enum Swapped {
    /// The item was at the version expected, and is now written.
    Written,
    /// It was not; nothing was written. The item as it is (`None`: no item).
    Refused(Option<Item>),
}

/// A write the script makes.
enum Write<'a> {
    /// Set these fields, remove those, and expire the key at the retention end (epoch s).
    Patch {
        expires_at_s: u64,
        set: Vec<(&'static str, String)>,
        remove: &'a [&'static str],
    },
    /// Delete the item.
    Delete,
}

impl RedisStore {
    /// Runs [`COMPARE_AND_SET`]: `write` on `key`'s item if it is at `seen` (its lease token and
    /// status; `None`: no item).
    async fn swap(
        &self,
        key: &str,
        seen: Option<(&str, &str)>,
        write: &Write<'_>,
    ) -> Result<Swapped, StoreError> {
        let mut invocation = SCRIPT.key(self.redis_key(key));
        let (token, status) = seen.unwrap_or(("", ""));
        invocation.arg(token).arg(status);
        match write {
            Write::Delete => {
                invocation.arg("delete");
            }
            Write::Patch {
                expires_at_s,
                set,
                remove,
            } => {
                invocation
                    .arg(expires_at_s.saturating_mul(1_000))
                    .arg(set.len());
                for (name, value) in set {
                    invocation.arg(*name).arg(value);
                }
                for name in *remove {
                    invocation.arg(*name);
                }
            }
        }
        // A clone shares the one connection; the helper needs it mutable.
        let mut connection = self.connection.clone();
        let reply: Value = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        read_reply(reply)
    }

    /// A holder's write: `write`, leaving the key `writes`, if `lease` holds the key (its token
    /// on the item, in progress), else `LeaseLost`. A refused write that finds the item in the
    /// state it writes under the same token is this holder's own earlier write (its answer
    /// lost on the way, and the write sent again): a success.
    async fn holder_write(
        &self,
        key: &str,
        lease: &Lease,
        writes: Status,
        write: Write<'_>,
    ) -> Result<(), StoreError> {
        let token = lease.token.to_string();
        let seen = Some((token.as_str(), Status::InProgress.as_str()));
        match self.swap(key, seen, &write).await? {
            Swapped::Written => Ok(()),
            Swapped::Refused(Some(item))
                if field_of(&item, field::LEASE_TOKEN) == Some(token.as_str())
                    && field_of(&item, field::STATUS) == Some(writes.as_str()) =>
            {
                Ok(())
            }
            Swapped::Refused(_) => Err(StoreError::LeaseLost),
        }
    }

    /// Ends the holder's work for good: `COMPLETED` or `REJECTED`, with `kept` (the output or
    /// the reason). The lease and the attempt record go, the token stays (spent), the retention
    /// starts over. No output is left to remove: the claim this holder made removed any.
    async fn finish(
        &self,
        key: &str,
        lease: &Lease,
        (status, at): (Status, &'static str),
        now_ms: u64,
        kept: Option<(&'static str, &str)>,
    ) -> Result<(), StoreError> {
        let mut set = vec![
            (field::STATUS, status.as_str().to_owned()),
            (field::EXPIRES_AT, self.expires_at(now_ms).to_string()),
            (at, now_ms.to_string()),
        ];
        set.extend(kept.map(|(name, value)| (name, value.to_owned())));
        let write = Write::Patch {
            expires_at_s: self.expires_at(now_ms),
            set,
            remove: &[field::LEASE_UNTIL, field::FIRST_ATTEMPT_AT, field::ATTEMPTS],
        };
        self.holder_write(key, lease, status, write).await
    }
}

fn field_of<'i>(item: &'i Item, name: &str) -> Option<&'i str> {
    item.get(name).map(String::as_str)
}

fn unavailable(error: ::redis::RedisError) -> StoreError {
    StoreError::Unavailable(Box::new(error))
}

/// Reads the script's reply (see [`COMPARE_AND_SET`]).
fn read_reply(reply: Value) -> Result<Swapped, StoreError> {
    let unexpected = || StoreError::Malformed("the script's reply is not one it sends".into());
    let Value::Array(mut parts) = reply else {
        return Err(unexpected());
    };
    let rest = parts.split_off(1.min(parts.len()));
    match (parts.first(), rest.into_iter().next()) {
        (Some(Value::Int(1)), None) => Ok(Swapped::Written),
        (Some(Value::Int(0)), Some(Value::Array(flat))) => {
            if flat.is_empty() {
                return Ok(Swapped::Refused(None));
            }
            if flat.len() % 2 != 0 {
                return Err(unexpected());
            }
            let mut item = Item::with_capacity(flat.len() / 2);
            let mut flat = flat.into_iter();
            while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
                item.insert(text(name)?, text(value)?);
            }
            Ok(Swapped::Refused(Some(item)))
        }
        (Some(Value::Int(-1)), Some(kind)) => Err(StoreError::Malformed(format!(
            "the key holds a {}, not a hash",
            text(kind)?
        ))),
        _ => Err(unexpected()),
    }
}

fn text(value: Value) -> Result<String, StoreError> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes)
            .map_err(|_| StoreError::Malformed("a field is not UTF-8 text".into())),
        Value::SimpleString(text) => Ok(text),
        _ => Err(StoreError::Malformed("a field is not text".into())),
    }
}

/// Reads the decision-relevant part of an item, by the DynamoDB store's rules: a missing
/// number is 0, a missing first attempt unknown, a later format malformed.
fn claim_state(item: &Item) -> Result<ClaimState, StoreError> {
    let text = |name: &str| {
        field_of(item, name).ok_or_else(|| StoreError::Malformed(format!("{name} is missing")))
    };
    let number = |name: &str| match field_of(item, name) {
        None => Ok(0),
        Some(value) => value
            .parse::<u64>()
            .map_err(|_| StoreError::Malformed(format!("{name} is not an unsigned integer"))),
    };
    let schema = number(field::SCHEMA)?;
    if schema > SCHEMA_VERSION {
        return Err(StoreError::Malformed(format!(
            "the item is of format version {schema}, later than this build's {SCHEMA_VERSION}"
        )));
    }
    let status = text(field::STATUS)?;
    let status = Status::parse(status)
        .ok_or_else(|| StoreError::Malformed(format!("unknown status {status:?}")))?;
    let fingerprint = Fingerprint::parse(text(field::FINGERPRINT)?)
        .ok_or_else(|| StoreError::Malformed("fingerprint is not hex".into()))?;
    let first_attempt_ms = match item.get(field::FIRST_ATTEMPT_AT) {
        None => None,
        Some(_) => Some(number(field::FIRST_ATTEMPT_AT)?),
    };
    Ok(ClaimState {
        status,
        fingerprint,
        lease_until_ms: number(field::LEASE_UNTIL)?,
        expires_at_s: number(field::EXPIRES_AT)?,
        first_attempt_ms,
        attempts: u32::try_from(number(field::ATTEMPTS)?).unwrap_or(u32::MAX),
    })
}

/// The claim's write: the state [`claimed_state`] made, under `token`.
fn claim_write(state: &ClaimState, token: &str, request: &ClaimRequest<'_>) -> Write<'static> {
    let mut set = vec![
        (field::STATUS, Status::InProgress.as_str().to_owned()),
        (field::LEASE_TOKEN, token.to_owned()),
        (field::LEASE_UNTIL, state.lease_until_ms.to_string()),
        (field::FINGERPRINT, state.fingerprint.to_string()),
        (field::EXPIRES_AT, state.expires_at_s.to_string()),
        (field::MESSAGE_ID, request.message_id.to_owned()),
        (field::CLAIMED_AT, request.now_ms.to_string()),
        (field::ATTEMPTS, state.attempts.to_string()),
        (field::SCHEMA, SCHEMA_VERSION.to_string()),
    ];
    set.extend(
        state
            .first_attempt_ms
            .map(|first| (field::FIRST_ATTEMPT_AT, first.to_string())),
    );
    Write::Patch {
        expires_at_s: state.expires_at_s,
        set,
        remove: CLAIM_REMOVES,
    }
}

impl IdempotencyStore for RedisStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        let lease = Lease {
            token: LeaseToken::new(),
            until_ms: request.lease_until_ms,
        };
        let token = lease.token.to_string();
        // The first send expects no item; a refusal brings back the item there is.
        let mut seen: Option<Item> = None;
        for _ in 0..CLAIM_SENDS {
            let replaced = seen.as_ref().map(claim_state).transpose()?;
            if let Some(old) = &replaced
                && !claimable(Some(old), request.fingerprint, request.now_ms)
            {
                let output = seen.as_mut().and_then(|item| item.remove(field::OUTPUT));
                return Ok(decide(old, request.fingerprint, request.now_ms).with_output(output));
            }
            let state = claimed_state(replaced.as_ref(), request, self.expires_at(request.now_ms));
            let version = seen.as_ref().map(|item| {
                (
                    field_of(item, field::LEASE_TOKEN).unwrap_or(""),
                    field_of(item, field::STATUS).unwrap_or(""),
                )
            });
            let write = claim_write(&state, &token, request);
            match self.swap(request.key, version, &write).await? {
                Swapped::Written => {
                    return Ok(Begin::Started {
                        lease,
                        prior: prior_attempt(replaced.as_ref(), request),
                    });
                }
                Swapped::Refused(item) => seen = item,
            }
        }
        // Others changed the item under every send: it is being claimed right now.
        Ok(Begin::Busy {
            until_ms: request.now_ms,
        })
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        let kept = crate::store::bounded_output(key, output).map(|output| (field::OUTPUT, output));
        let completed = (Status::Completed, field::COMPLETED_AT);
        self.finish(key, lease, completed, now_ms, kept).await
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        let token = lease.token.to_string();
        let seen = Some((token.as_str(), Status::InProgress.as_str()));
        match self.swap(key, seen, &Write::Delete).await? {
            Swapped::Written => Ok(()),
            Swapped::Refused(_) => Err(StoreError::LeaseLost),
        }
    }
}

impl crate::store::EffectStore for RedisStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        let write = Write::Patch {
            expires_at_s: self.expires_at(at_ms),
            set: vec![
                (field::STATUS, Status::Attempted.as_str().to_owned()),
                (field::ATTEMPTED_AT, at_ms.to_string()),
                (field::EXPIRES_AT, self.expires_at(at_ms).to_string()),
            ],
            remove: &[field::LEASE_UNTIL],
        };
        self.holder_write(key, lease, Status::Attempted, write)
            .await
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        let kept = Some((field::REJECTED_REASON, reason));
        let rejected = (Status::Rejected, field::REJECTED_AT);
        self.finish(key, lease, rejected, now_ms, kept).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(pairs: &[(&str, &str)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn reads_back_what_it_writes() {
        let request = ClaimRequest {
            key: "k",
            fingerprint: Fingerprint(0xabc),
            now_ms: 9_000,
            lease_until_ms: 19_000,
            message_id: "m",
            earlier_attempt_ms: None,
        };
        let state = claimed_state(None, &request, 77);
        let Write::Patch { set, .. } = claim_write(&state, "t", &request) else {
            panic!("a claim writes fields");
        };
        let written: Item = set.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert_eq!(claim_state(&written).expect("state"), state);
    }

    #[test]
    fn a_foreign_item_is_malformed_not_a_panic() {
        for bad in [
            item(&[]),
            item(&[(field::STATUS, "DONE"), (field::FINGERPRINT, "00")]),
            item(&[(field::STATUS, "COMPLETED"), (field::FINGERPRINT, "xyz")]),
            item(&[
                (field::STATUS, "COMPLETED"),
                (field::FINGERPRINT, "00"),
                (field::EXPIRES_AT, "soon"),
            ]),
            item(&[
                (field::STATUS, "COMPLETED"),
                (field::FINGERPRINT, "00"),
                (field::SCHEMA, "2"),
            ]),
        ] {
            assert!(matches!(claim_state(&bad), Err(StoreError::Malformed(_))));
        }
    }

    #[test]
    fn replies_the_script_does_not_send_are_malformed() {
        use Value::{Array, BulkString, Int};
        assert!(matches!(
            read_reply(Array(vec![Int(1)])),
            Ok(Swapped::Written)
        ));
        assert!(matches!(
            read_reply(Array(vec![Int(0), Array(vec![])])),
            Ok(Swapped::Refused(None))
        ));
        for odd in [
            Int(1),
            Array(vec![]),
            Array(vec![Int(2)]),
            Array(vec![Int(0)]),
            Array(vec![Int(0), Array(vec![BulkString(b"status".to_vec())])]),
            Array(vec![
                Int(0),
                Array(vec![BulkString(vec![0xff]), BulkString(b"x".to_vec())]),
            ]),
        ] {
            assert!(matches!(read_reply(odd), Err(StoreError::Malformed(_))));
        }
        assert!(matches!(
            read_reply(Array(vec![Int(-1), BulkString(b"string".to_vec())])),
            Err(StoreError::Malformed(m)) if m.contains("string")
        ));
    }
}
