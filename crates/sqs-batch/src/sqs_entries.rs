//! What the SQS adapters share: a batch call's failed entries read back as (message id, reason).

use aws_sdk_sqs::types::BatchResultErrorEntry;

/// The failed entries of a batch call whose entry ids are the indexes of the records sent, as
/// (message id, what SQS said); `message_id` names the record at an index.
pub(crate) fn failed_entries<'m>(
    failed: &[BatchResultErrorEntry],
    message_id: impl Fn(usize) -> Option<&'m str>,
) -> Vec<(String, String)> {
    failed
        .iter()
        .map(|entry| {
            let id = entry
                .id()
                .parse::<usize>()
                .ok()
                .and_then(&message_id)
                .unwrap_or(entry.id());
            (
                id.to_owned(),
                format!("{}: {}", entry.code(), entry.message().unwrap_or("")),
            )
        })
        .collect()
}
