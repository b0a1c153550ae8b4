//! The DynamoDB store: one conditional write per state change, fenced by the lease token.
//!
//! - claim: one `UpdateItem`, conditional on the item being absent, completed and past its TTL,
//!   or (same fingerprint only) `ATTEMPTED` or in progress with a lease that has run out. The old
//!   item comes back either way: on success (`ReturnValues = ALL_OLD`) it tells whether an
//!   earlier attempt's effect may exist, and on `ConditionalCheckFailed`
//!   (`ReturnValuesOnConditionCheckFailure = ALL_OLD`) it decides DONE / BUSY / CONFLICT. No path
//!   ever reads. `UpdateItem`, not `PutItem`: the first attempt's time and the attempt count must
//!   survive a takeover (`if_not_exists`, `ADD`).
//! - complete: one `UpdateItem`, conditional on the holder's lease token.
//! - mark attempted: one `UpdateItem`, conditional on the holder's lease token.
//! - release: one `DeleteItem`, conditional on the holder's lease token.
//!
//! Every attribute is referenced through `#names` so no DynamoDB reserved word can bite, and
//! every `#name` / `:value` a request defines is used (real DynamoDB rejects unused ones).
//!
//! # Example
//!
//! A table for local runs and tests (in AWS the deployment makes it), and the store over it.
//! IAM grants the function [`ACTIONS`] on the table, nothing else: no path reads.
//!
//! ```no_run
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use idempotency::dynamodb::{ACTIONS, create_table};
//! use idempotency::DynamoDbStore;
//!
//! create_table(&client, "idempotency").await?;
//! let store = DynamoDbStore::new(client, "idempotency", Duration::from_secs(86_400));
//! assert_eq!(ACTIONS, ["dynamodb:UpdateItem", "dynamodb:DeleteItem"]);
//! # let _ = store; Ok(()) }
//! ```

use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

mod direct;
mod item;
mod sdk;
mod table;
pub use direct::{
    Answer, DirectClient, DirectClientError, DirectError, Header, Outgoing, Sending, Transport,
};
use direct::{Key, Val, Write, Written};

use super::{
    IdempotencyStore, StoreError, store::Begin, store::ClaimRequest, store::Lease,
    store::LeaseToken,
};
use crate::store::{ClaimState, Status, decide, first_attempt_of_fresh, prior_attempt};

use item::{claim_state, kept_output, own_claim_prior, written_by};
use sdk::sdk_write;
pub use table::{
    ACTIONS, CreateTableError, KEY_ATTRIBUTE, SCHEMA_VERSION, TTL_ATTRIBUTE, attr, create_table,
    create_table_with_keys,
};

// The requests' placeholders are one or two letters: each is sent once in the expression and
// once in its map, and the claim alone has 16 names and 14 values, so spelled-out ones
// (`#lease_token`, `:in_progress`) made a claim and its completion 2,576 bytes an order, 1,848
// now.
//
// Names: #k pk, #s status, #t lease_token, #u lease_until, #f fingerprint, #e expires_at,
// #m message_id, #c claimed_at, #fa first_attempt_at, #n attempts, #aa attempted_at,
// #ca completed_at, #ra rejected_at, #rr rejected_reason, #o output, #oa output_at, #v schema.
// Values: :p :a :c :r the statuses IN_PROGRESS, ATTEMPTED, COMPLETED and REJECTED, :t the lease
// token, :u the lease's end, :f the fingerprint, :e the expiry (epoch seconds), :m the message
// id, :ms and :sec now in milliseconds and in seconds, :v the schema version, :fa a fresh
// claim's first attempt, :x an unknown first attempt (0), :o the output, :rr the rejection's
// reason, :one 1.
const CLAIM_UPDATE: &str = "SET #s = :p, #t = :t, #u = :u, #f = :f, #e = :e, #m = :m, \
    #c = :ms, #v = :v, #fa = if_not_exists(#fa, :fa) REMOVE #ca, #ra, #rr, #o, #oa ADD #n :one";
const CLAIM_CONDITION: &str = "attribute_not_exists(#k) \
    OR ((attribute_not_exists(#v) OR #v <= :v) \
        AND (((#s = :c OR #s = :r) AND #e <= :sec) \
        OR (#f = :f AND (#s = :a OR (#s = :p AND #u <= :ms)))))";
// A finishing write keeps the holder's token on the item: with the state it wrote, it is how a
// retry of the same write (its first answer lost, the SDK trying again) knows the item as its
// own work (`holder_update`). The holder condition's status check spends the token: after its finish,
// the holder can write nothing else, and the next claim writes a token of its own.
const COMPLETE_UPDATE: &str = "SET #s = :c, #e = :e, #ca = :ms REMOVE #u, #fa, #n, #o, #oa";
const COMPLETE_WITH_OUTPUT_UPDATE: &str =
    "SET #s = :c, #e = :e, #ca = :ms, #o = :o, #oa = :ms REMOVE #u, #fa, #n";
const REJECT_UPDATE: &str = "SET #s = :r, #e = :e, #ra = :ms, #rr = :rr REMOVE #u, #fa, #n";
const MARK_ATTEMPTED_UPDATE: &str = "SET #s = :a, #aa = :ms, #e = :e REMOVE #u";
/// An unfinished item without its first attempt's time (not one this store wrote): unknown,
/// so the oldest possible (see `claimed_state`).
const UNKNOWN_FIRST_ATTEMPT_UPDATE: &str = "SET #fa = :x";
const HOLDER_CONDITION: &str = "#t = :t AND #s = :p";

/// The store on a DynamoDB table keyed by `pk` (string), with TTL on `expires_at`.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use aws_sdk_dynamodb::config::{BehaviorVersion, Region};
/// use idempotency::DynamoDbStore;
///
/// let config = aws_sdk_dynamodb::Config::builder()
///     .behavior_version(BehaviorVersion::latest())
///     .region(Region::new("eu-west-1"))
///     .build();
/// // Built once per container; no request until the first claim.
/// let store = DynamoDbStore::new(
///     aws_sdk_dynamodb::Client::from_conf(config),
///     "orders-idempotency",
///     Duration::from_secs(18 * 86_400),
/// )
/// .with_key_prefix("process-orders#");
/// # drop(store);
/// ```
#[derive(Clone)]
pub struct DynamoDbStore {
    api: Api,
    table: String,
    retention_s: u64,
    key_prefix: String,
    /// The table's partition key attribute ([`attr::KEY`] unless set).
    partition_attribute: String,
    /// A single-table design's sort key attribute, and the partition every item of this store
    /// is written under.
    sort: Option<(String, String)>,
}

/// The table, the keys and the client's kind: a line a log can hold (the SDK client's own
/// `Debug` is its whole configuration, about 15 KB).
impl std::fmt::Debug for DynamoDbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoDbStore")
            .field("table", &self.table)
            .field("key_prefix", &self.key_prefix)
            .field("retention_s", &self.retention_s)
            .field(
                "client",
                &match self.api {
                    Api::Sdk(_) => "sdk",
                    Api::Direct(_) => "direct",
                },
            )
            .finish_non_exhaustive()
    }
}

/// Why key attributes cannot be used ([`DynamoDbStore::with_key_attributes`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyAttributeError {
    /// The name is one the item itself uses (its state, lease, expiry...), or empty.
    #[error("{0:?} cannot be a key attribute: the item stores its own state under that name")]
    Taken(String),
    /// The partition and sort keys are the same attribute.
    #[error("the partition and sort keys are both {0:?}")]
    Same(String),
}

impl DynamoDbStore {
    /// A store on `table`; the client is built once per container and shared.
    pub fn new(client: Client, table: impl Into<String>, retention: Duration) -> Self {
        Self::on(Api::Sdk(client), table.into(), retention)
    }

    /// A store on `table` whose writes go through [`DirectClient`]: the same requests and
    /// answers as [`new`](Self::new)'s, without the SDK's per-request machinery (about a
    /// quarter of an order's CPU in the order function).
    pub fn direct(client: DirectClient, table: impl Into<String>, retention: Duration) -> Self {
        Self::on(Api::Direct(client), table.into(), retention)
    }

    fn on(api: Api, table: String, retention: Duration) -> Self {
        Self {
            api,
            table,
            retention_s: retention.as_secs(),
            key_prefix: String::new(),
            partition_attribute: attr::KEY.to_owned(),
            sort: None,
        }
    }

    /// The table's own key attributes, for a table keyed otherwise than by `pk` (Powertools'
    /// `key_attr`, `sort_key_attr` and `static_pk_value`): the partition key `partition`, and
    /// for a single-table design a sort key: `Some((sort, partition_value))` writes every item
    /// under the partition `partition_value` with its (prefixed) key in `sort`. The item's other
    /// attributes keep their names ([`attr`]), which the key attributes may not take.
    ///
    /// ```
    /// # async fn example(client: aws_sdk_dynamodb::Client) {
    /// use idempotency::DynamoDbStore;
    /// let store = DynamoDbStore::new(client, "app", std::time::Duration::from_secs(3_600))
    ///     .with_key_attributes("PK", Some(("SK", "idempotency#send-welcome")))
    ///     .expect("names the item does not use");
    /// # }
    /// ```
    pub fn with_key_attributes(
        mut self,
        partition: &str,
        sort: Option<(&str, &str)>,
    ) -> Result<Self, KeyAttributeError> {
        for name in std::iter::once(partition).chain(sort.map(|(sort, _)| sort)) {
            if name.is_empty() || (attr::ITEM.contains(&name) && name != attr::KEY) {
                return Err(KeyAttributeError::Taken(name.to_owned()));
            }
        }
        if let Some((sort, _)) = sort
            && sort == partition
        {
            return Err(KeyAttributeError::Same(sort.to_owned()));
        }
        self.partition_attribute = partition.to_owned();
        self.sort = sort.map(|(sort, value)| (sort.to_owned(), value.to_owned()));
        Ok(self)
    }

    /// Puts `prefix` before every key in the table, so users of a shared table never see each
    /// other's keys (`email-once#u-1` and `u-1` are two items).
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The item's key for `key`: the prefixed key in the partition key, or in a single-table
    /// design in the sort key under the store's partition.
    fn item_key<'a>(&'a self, key: &'a str) -> Key<'a> {
        let (attribute, partition) = match &self.sort {
            None => (self.partition_attribute.as_str(), None),
            Some((sort, partition)) => (
                sort.as_str(),
                Some((self.partition_attribute.as_str(), partition.as_str())),
            ),
        };
        Key {
            attribute,
            prefix: &self.key_prefix,
            key,
            partition,
        }
    }

    fn expires_at(&self, now_ms: u64) -> u64 {
        (now_ms / 1_000).saturating_add(self.retention_s)
    }

    /// Clears a refusal ([`Status::Rejected`]) on `key`, so the next delivery does the work
    /// again: for a person who knows the refusal no longer holds (a card that was updated).
    /// Returns the recorded reason, or `None` when the key is not rejected (nothing changed).
    pub async fn clear_rejected(&self, key: &str) -> Result<Option<String>, StoreError> {
        let written = self
            .send(Write {
                table: &self.table,
                key: self.item_key(key),
                update: None,
                condition: "#s = :r",
                names: vec![("#s", attr::STATUS)],
                values: vec![(":r", Val::S(Status::Rejected.as_str()))],
                old_on_success: true,
                old_on_failure: false,
            })
            .await?;
        Ok(match written {
            Written::Applied(old) => Some(
                match old.as_ref().and_then(|a| a.get(attr::REJECTED_REASON)) {
                    Some(AttributeValue::S(reason)) => reason.clone(),
                    _ => String::new(),
                },
            ),
            Written::Refused(_) => None,
        })
    }
}

impl DynamoDbStore {
    /// An `UpdateItem` only the lease holder can make (`#t` and `:t` are added).
    async fn holder_update<const V: usize>(
        &self,
        key: &str,
        lease: &Lease,
        (update, writes): (&str, Status),
        names: &[(&str, &str)],
        values: [(&str, Val<'_>); V],
    ) -> Result<(), StoreError> {
        let mut write = Write {
            table: &self.table,
            key: self.item_key(key),
            update: Some(update),
            condition: HOLDER_CONDITION,
            names: Vec::with_capacity(2 + names.len()),
            values: Vec::with_capacity(2 + V),
            old_on_success: false,
            old_on_failure: true,
        };
        write
            .names
            .extend([("#t", attr::LEASE_TOKEN), ("#s", attr::STATUS)]);
        write.names.extend_from_slice(names);
        write.values.extend([
            (":t", Val::Shown(&lease.token)),
            (":p", Val::S(Status::InProgress.as_str())),
        ]);
        write.values.extend(values);
        match self.send(write).await? {
            Written::Applied(_) => Ok(()),
            Written::Refused(old) if written_by(old.as_ref(), &lease.token, writes) => {
                // The client retried a write DynamoDB had applied but whose answer was lost:
                // the item holds the state this very write sets, under our token.
                Ok(())
            }
            Written::Refused(_) => Err(StoreError::LeaseLost),
        }
    }

    /// Sends one conditional write through the store's client.
    async fn send(&self, write: Write<'_>) -> Result<Written, StoreError> {
        match &self.api {
            Api::Sdk(client) => sdk_write(client, write).await,
            Api::Direct(client) => client
                .write(&write)
                .await
                .map_err(|e| StoreError::Unavailable(Box::new(e))),
        }
    }
}

/// The client a store writes through.
#[derive(Clone)]
enum Api {
    /// The SDK's client (any configuration a caller gives it).
    Sdk(Client),
    /// The store's own client on the JSON API ([`DirectClient`]).
    Direct(DirectClient),
}

impl IdempotencyStore for DynamoDbStore {
    async fn begin(&self, request: &ClaimRequest<'_>) -> Result<Begin, StoreError> {
        let lease = Lease {
            token: LeaseToken::new(),
            until_ms: request.lease_until_ms,
        };
        let written = self
            .send(Write {
                table: &self.table,
                key: self.item_key(request.key),
                update: Some(CLAIM_UPDATE),
                condition: CLAIM_CONDITION,
                names: vec![
                    ("#k", &self.partition_attribute),
                    ("#s", attr::STATUS),
                    ("#t", attr::LEASE_TOKEN),
                    ("#u", attr::LEASE_UNTIL),
                    ("#f", attr::FINGERPRINT),
                    ("#e", attr::EXPIRES_AT),
                    ("#m", attr::MESSAGE_ID),
                    ("#c", attr::CLAIMED_AT),
                    ("#fa", attr::FIRST_ATTEMPT_AT),
                    ("#ca", attr::COMPLETED_AT),
                    ("#ra", attr::REJECTED_AT),
                    ("#rr", attr::REJECTED_REASON),
                    ("#o", attr::OUTPUT),
                    ("#oa", attr::OUTPUT_AT),
                    ("#n", attr::ATTEMPTS),
                    ("#v", attr::SCHEMA),
                ],
                values: vec![
                    (":p", Val::S(Status::InProgress.as_str())),
                    (":a", Val::S(Status::Attempted.as_str())),
                    (":c", Val::S(Status::Completed.as_str())),
                    (":r", Val::S(Status::Rejected.as_str())),
                    (":t", Val::Shown(&lease.token)),
                    (":u", Val::N(lease.until_ms)),
                    (":f", Val::Shown(&request.fingerprint)),
                    (":e", Val::N(self.expires_at(request.now_ms))),
                    (":m", Val::S(request.message_id)),
                    (":ms", Val::N(request.now_ms)),
                    (":sec", Val::N(request.now_ms / 1_000)),
                    (":one", Val::N(1)),
                    (":v", Val::N(SCHEMA_VERSION)),
                    (":fa", Val::N(first_attempt_of_fresh(request))),
                ],
                old_on_success: true,
                old_on_failure: true,
            })
            .await?;
        match written {
            Written::Applied(old) => {
                // DynamoDB returns no attributes for a new item; dynoxide returns its key alone.
                // Either way, an item without a status held no claim.
                let replaced = match old.as_ref() {
                    Some(old) if old.contains_key(attr::STATUS) => Some(claim_state(old).unwrap_or_else(|e| {
                        // Ours now, but we cannot tell what it held: assume the worst, that an
                        // attempt of unknown age may have taken effect.
                        tracing::warn!(key = request.key, error = %e, "claimed a malformed item");
                        ClaimState {
                            status: Status::Attempted,
                            fingerprint: request.fingerprint,
                            lease_until_ms: 0,
                            expires_at_s: 0,
                            first_attempt_ms: None,
                            attempts: 0,
                        }
                    })),
                    _ => None,
                };
                // A finished item past its TTL (completed or refused) is a fresh start, whose
                // first attempt is this one: only an unfinished item without its first time is
                // of unknown age.
                let unknown_first_attempt = replaced
                    .as_ref()
                    .is_some_and(|old| !old.status.is_final() && old.first_attempt_ms.is_none());
                if unknown_first_attempt {
                    // `if_not_exists` just wrote now; only this rare, fenced write can say
                    // "unknown" (an item without the time this store always writes).
                    self.holder_update(
                        request.key,
                        &lease,
                        (UNKNOWN_FIRST_ATTEMPT_UPDATE, Status::InProgress),
                        &[("#fa", attr::FIRST_ATTEMPT_AT)],
                        [(":x", Val::N(0))],
                    )
                    .await?;
                }
                Ok(Begin::Started {
                    lease,
                    prior: prior_attempt(replaced.as_ref(), request),
                })
            }
            Written::Refused(old) => {
                let old = old.as_ref().ok_or_else(|| {
                    StoreError::Malformed("the claim was refused without the old item".into())
                })?;
                if !old.contains_key(attr::STATUS) {
                    // An item without a status is being written right now (moto, threaded,
                    // shows an update's item before its attributes): come back shortly.
                    return Ok(Begin::Busy {
                        until_ms: request.now_ms,
                    });
                }
                let state = claim_state(old)?;
                let ours = matches!(old.get(attr::LEASE_TOKEN), Some(AttributeValue::S(token))
                    if *token == lease.token.to_string());
                if ours && state.status == Status::InProgress {
                    // The SDK retried a claim that DynamoDB had applied but whose answer was
                    // lost (a timeout, a reset): the item holds this very claim's token, so the
                    // key is ours, not BUSY until our own lease ends.
                    return Ok(Begin::Started {
                        lease,
                        prior: own_claim_prior(&state, request),
                    });
                }
                Ok(decide(&state, request.fingerprint, request.now_ms)
                    .with_output(kept_output(old)))
            }
        }
    }

    async fn complete(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        output: Option<&str>,
    ) -> Result<(), StoreError> {
        const NAMES: &[(&str, &str)] = &[
            ("#e", attr::EXPIRES_AT),
            ("#ca", attr::COMPLETED_AT),
            ("#u", attr::LEASE_UNTIL),
            ("#fa", attr::FIRST_ATTEMPT_AT),
            ("#n", attr::ATTEMPTS),
            ("#o", attr::OUTPUT),
            ("#oa", attr::OUTPUT_AT),
        ];
        let values = [
            (":c", Val::S(Status::Completed.as_str())),
            (":e", Val::N(self.expires_at(now_ms))),
            (":ms", Val::N(now_ms)),
        ];
        match crate::store::bounded_output(key, output) {
            None => {
                self.holder_update(
                    key,
                    lease,
                    (COMPLETE_UPDATE, Status::Completed),
                    NAMES,
                    values,
                )
                .await
            }
            Some(output) => {
                let [completed, exp, now] = values;
                self.holder_update(
                    key,
                    lease,
                    (COMPLETE_WITH_OUTPUT_UPDATE, Status::Completed),
                    NAMES,
                    [completed, exp, now, (":o", Val::S(output))],
                )
                .await
            }
        }
    }

    async fn release(&self, key: &str, lease: &Lease) -> Result<(), StoreError> {
        let written = self
            .send(Write {
                table: &self.table,
                key: self.item_key(key),
                update: None,
                condition: HOLDER_CONDITION,
                names: vec![("#t", attr::LEASE_TOKEN), ("#s", attr::STATUS)],
                values: vec![
                    (":t", Val::Shown(&lease.token)),
                    (":p", Val::S(Status::InProgress.as_str())),
                ],
                old_on_success: false,
                old_on_failure: false,
            })
            .await?;
        match written {
            Written::Applied(_) => Ok(()),
            // The lease was taken over (or the item is gone): never a store outage.
            Written::Refused(_) => Err(StoreError::LeaseLost),
        }
    }
}

impl crate::store::EffectStore for DynamoDbStore {
    async fn mark_attempted(&self, key: &str, lease: &Lease, at_ms: u64) -> Result<(), StoreError> {
        self.holder_update(
            key,
            lease,
            (MARK_ATTEMPTED_UPDATE, Status::Attempted),
            &[
                ("#aa", attr::ATTEMPTED_AT),
                ("#e", attr::EXPIRES_AT),
                ("#u", attr::LEASE_UNTIL),
            ],
            [
                (":a", Val::S(Status::Attempted.as_str())),
                (":ms", Val::N(at_ms)),
                (":e", Val::N(self.expires_at(at_ms))),
            ],
        )
        .await
    }

    async fn reject(
        &self,
        key: &str,
        lease: &Lease,
        now_ms: u64,
        reason: &str,
    ) -> Result<(), StoreError> {
        self.holder_update(
            key,
            lease,
            (REJECT_UPDATE, Status::Rejected),
            &[
                ("#e", attr::EXPIRES_AT),
                ("#ra", attr::REJECTED_AT),
                ("#rr", attr::REJECTED_REASON),
                ("#u", attr::LEASE_UNTIL),
                ("#fa", attr::FIRST_ATTEMPT_AT),
                ("#n", attr::ATTEMPTS),
            ],
            [
                (":r", Val::S(Status::Rejected.as_str())),
                (":e", Val::N(self.expires_at(now_ms))),
                (":ms", Val::N(now_ms)),
                (":rr", Val::S(reason)),
            ],
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Fingerprint;
    use std::collections::HashMap;

    fn n(value: u64) -> AttributeValue {
        AttributeValue::N(value.to_string())
    }

    fn s(value: impl Into<String>) -> AttributeValue {
        AttributeValue::S(value.into())
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn reads_back_what_it_writes() {
        let state = claim_state(&item(&[
            (attr::STATUS, s("ATTEMPTED")),
            (attr::FINGERPRINT, s(Fingerprint(0xabc).to_string())),
            (attr::EXPIRES_AT, n(7)),
            (attr::CLAIMED_AT, n(3)),
            (attr::FIRST_ATTEMPT_AT, n(2)),
            (attr::ATTEMPTS, n(4)),
        ]))
        .expect("state");
        assert_eq!(
            state,
            ClaimState {
                status: Status::Attempted,
                fingerprint: Fingerprint(0xabc),
                lease_until_ms: 0,
                expires_at_s: 7,
                first_attempt_ms: Some(2),
                attempts: 4,
            }
        );
    }

    #[test]
    fn an_item_from_before_attempts_were_recorded_has_no_known_first_attempt() {
        let legacy = claim_state(&item(&[
            (attr::STATUS, s("IN_PROGRESS")),
            (attr::FINGERPRINT, s("00")),
            (attr::LEASE_UNTIL, n(5)),
            (attr::EXPIRES_AT, n(7)),
            (attr::CLAIMED_AT, n(3)),
        ]))
        .expect("state");
        // Its claim is only the latest: the earlier version released keys after failures.
        assert_eq!((legacy.first_attempt_ms, legacy.attempts), (None, 0));
        let done = claim_state(&item(&[
            (attr::STATUS, s("COMPLETED")),
            (attr::FINGERPRINT, s("00")),
            (attr::CLAIMED_AT, n(3)),
        ]))
        .expect("state");
        assert_eq!(done.first_attempt_ms, None);
    }

    #[test]
    fn a_foreign_item_is_malformed_not_a_panic() {
        for bad in [
            item(&[]),
            item(&[(attr::STATUS, s("DONE")), (attr::FINGERPRINT, s("00"))]),
            item(&[
                (attr::STATUS, s("COMPLETED")),
                (attr::FINGERPRINT, s("xyz")),
            ]),
            item(&[
                (attr::STATUS, s("COMPLETED")),
                (attr::FINGERPRINT, s("00")),
                (attr::EXPIRES_AT, s("soon")),
            ]),
        ] {
            assert!(matches!(claim_state(&bad), Err(StoreError::Malformed(_))));
        }
    }

    #[test]
    fn every_placeholder_of_a_request_is_used_by_its_expressions() {
        // dynoxide and real DynamoDB reject unused names and values; moto does not. The
        // integration tests prove the requests against dynoxide; this pins the expressions.
        for (exprs, placeholders) in [
            (
                &[CLAIM_UPDATE, CLAIM_CONDITION][..],
                &[
                    "#k", "#s", "#t", "#u", "#f", "#e", "#m", "#c", "#fa", "#ca", "#n", "#o",
                    "#oa", ":p", ":a", ":c", ":t", ":u", ":f", ":e", ":m", ":ms", ":sec", ":one",
                    "#v", ":v", ":fa",
                ][..],
            ),
            (
                &[COMPLETE_UPDATE, HOLDER_CONDITION][..],
                &[
                    "#s", "#e", "#ca", "#t", "#u", "#fa", "#n", "#o", "#oa", ":c", ":e", ":ms",
                    ":t", ":p",
                ][..],
            ),
            (
                &[COMPLETE_WITH_OUTPUT_UPDATE, HOLDER_CONDITION][..],
                &[
                    "#s", "#e", "#ca", "#t", "#u", "#fa", "#n", "#o", "#oa", ":c", ":e", ":ms",
                    ":o", ":t", ":p",
                ][..],
            ),
            (
                &[MARK_ATTEMPTED_UPDATE, HOLDER_CONDITION][..],
                &["#s", "#aa", "#e", "#t", "#u", ":a", ":ms", ":e", ":t", ":p"][..],
            ),
            (
                &[UNKNOWN_FIRST_ATTEMPT_UPDATE, HOLDER_CONDITION][..],
                &["#fa", "#t", "#s", ":x", ":t", ":p"][..],
            ),
        ] {
            let text = exprs.join(" ");
            for placeholder in placeholders {
                let used = text
                    .split(|c: char| !(c.is_ascii_alphanumeric() || "_#:".contains(c)))
                    .any(|word| word == *placeholder);
                assert!(used, "{placeholder} is not used by {text}");
            }
        }
    }
}
