//! Reading back an item the store wrote: its state for the claim's decision, its kept output,
//! what a claim of its own took over, and whether a refused write was its own earlier one.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::table::{SCHEMA_VERSION, attr};
use crate::store::{ClaimRequest, ClaimState, LeaseToken, PriorAttempt, Status, earlier_attempt};
use crate::{Fingerprint, StoreError};

/// Reads the decision-relevant part of an item this store wrote.
pub(super) fn claim_state(
    item: &HashMap<String, AttributeValue>,
) -> Result<ClaimState, StoreError> {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Ok(v.as_str()),
        _ => Err(StoreError::Malformed(format!(
            "{name} is missing or not a string"
        ))),
    };
    let number = |name: &str| match item.get(name) {
        None => Ok(0),
        Some(AttributeValue::N(v)) => v
            .parse::<u64>()
            .map_err(|_| StoreError::Malformed(format!("{name} is not an unsigned integer"))),
        Some(_) => Err(StoreError::Malformed(format!("{name} is not a number"))),
    };
    // Absent on items from before the version was written, which read as version 1.
    let schema = number(attr::SCHEMA)?;
    if schema > SCHEMA_VERSION {
        return Err(StoreError::Malformed(format!(
            "the item is of format version {schema}, later than this build's {SCHEMA_VERSION}"
        )));
    }
    let status = text(attr::STATUS)?;
    let status = Status::parse(status)
        .ok_or_else(|| StoreError::Malformed(format!("unknown status {status:?}")))?;
    let fingerprint = text(attr::FINGERPRINT)?;
    let first_attempt_ms = match item.get(attr::FIRST_ATTEMPT_AT) {
        // Absent on completed items, and on items claimed before attempts were recorded.
        None => None,
        Some(_) => Some(number(attr::FIRST_ATTEMPT_AT)?),
    };
    Ok(ClaimState {
        status,
        fingerprint: Fingerprint::parse(fingerprint)
            .ok_or_else(|| StoreError::Malformed("fingerprint is not hex".into()))?,
        lease_until_ms: number(attr::LEASE_UNTIL)?,
        expires_at_s: number(attr::EXPIRES_AT)?,
        first_attempt_ms,
        attempts: u32::try_from(number(attr::ATTEMPTS)?).unwrap_or(u32::MAX),
    })
}

/// The output a completed item kept for duplicates: only when it was kept by the item's own
/// completion ([`attr::OUTPUT_AT`]).
pub(super) fn kept_output(item: &HashMap<String, AttributeValue>) -> Option<String> {
    match (
        item.get(attr::OUTPUT),
        item.get(attr::OUTPUT_AT),
        item.get(attr::COMPLETED_AT),
    ) {
        (
            Some(AttributeValue::S(output)),
            Some(AttributeValue::N(at)),
            Some(AttributeValue::N(completed)),
        ) if at == completed => Some(output.clone()),
        _ => None,
    }
}

/// What our own claim took over, read back from the item it wrote (its first answer, which
/// said so, was lost): a claim count above one means an earlier attempt, whose first time the
/// item kept. A first time equal to this claim's own `now` with earlier attempts can only come
/// from an item that had none recorded: unknown, so the oldest possible. A first claim of the
/// key is fresh, unless the request knows of an earlier attempt that counts ([`earlier_attempt`]).
pub(super) fn own_claim_prior(
    state: &ClaimState,
    request: &ClaimRequest<'_>,
) -> Option<PriorAttempt> {
    if state.attempts <= 1 {
        return earlier_attempt(request);
    }
    Some(PriorAttempt {
        first_attempt_ms: state
            .first_attempt_ms
            .filter(|first| *first != request.now_ms)
            .unwrap_or(0),
        attempts: state.attempts - 1,
    })
}

/// Whether `item` (the old item a refused holder write got back) is the work of the holder of
/// `token` that wrote `status`: its own earlier, applied attempt at the same write.
pub(super) fn written_by(
    item: Option<&HashMap<String, AttributeValue>>,
    token: &LeaseToken,
    status: Status,
) -> bool {
    item.is_some_and(|item| {
        matches!(item.get(attr::LEASE_TOKEN), Some(AttributeValue::S(t)) if *t == token.to_string())
            && matches!(item.get(attr::STATUS), Some(AttributeValue::S(s)) if s == status.as_str())
    })
}
