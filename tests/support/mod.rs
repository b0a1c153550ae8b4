//! Shared test support. Each integration test uses part of it.
#![allow(dead_code)]

pub mod ports;
pub mod store_contract;

use std::path::PathBuf;

/// The sample events shipped in `events/`, by file name.
pub fn sample_events() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("events");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("events/ exists")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (
                name,
                std::fs::read_to_string(&path).expect("readable event"),
            )
        })
        .collect();
    files.sort();
    files
}

/// The failed message ids of a response, in order.
pub fn failed_ids(response: &aws_lambda_events::sqs::SqsBatchResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}
pub mod dynamo;
pub mod payment_stub;
