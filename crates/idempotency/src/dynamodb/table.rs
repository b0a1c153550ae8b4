//! The table's shape: the item's attributes and schema version, creating a table for local runs
//! and tests, and the IAM actions the store needs on it.

use aws_sdk_dynamodb::Client;

/// The item schema. The table's key schema is [`KEY`](attr::KEY) as a string hash key, and its
/// TTL attribute is [`EXPIRES_AT`](attr::EXPIRES_AT) ([`create_table`] makes such a table).
pub mod attr {
    /// Partition key (S): the business key.
    pub const KEY: &str = "pk";
    /// `IN_PROGRESS`, `ATTEMPTED`, `COMPLETED` or `REJECTED` (S).
    pub const STATUS: &str = "status";
    /// The holder's lease token (S); removed when the lease ends.
    pub const LEASE_TOKEN: &str = "lease_token";
    /// Lease end, epoch ms (N); removed when the lease ends.
    pub const LEASE_UNTIL: &str = "lease_until";
    /// Payload fingerprint, 16 hex digits (S).
    pub const FINGERPRINT: &str = "fingerprint";
    /// TTL, epoch seconds (N): the table's TimeToLiveSpecification attribute.
    pub const EXPIRES_AT: &str = "expires_at";
    /// The SQS message id of the latest claim (S), for forensics.
    pub const MESSAGE_ID: &str = "message_id";
    /// When the item was last claimed, epoch ms (N).
    pub const CLAIMED_AT: &str = "claimed_at";
    /// When the first attempt under the key began, epoch ms (N); kept across takeovers, removed
    /// on completion.
    pub const FIRST_ATTEMPT_AT: &str = "first_attempt_at";
    /// Claims of the key so far (N); removed on completion.
    pub const ATTEMPTS: &str = "attempts";
    /// When the latest attempt ended without proof either way, epoch ms (N).
    pub const ATTEMPTED_AT: &str = "attempted_at";
    /// When the work completed, epoch ms (N).
    pub const COMPLETED_AT: &str = "completed_at";
    /// When the work was refused for good, epoch ms (N).
    pub const REJECTED_AT: &str = "rejected_at";
    /// The item format's version (N), [`SCHEMA_VERSION`](super::SCHEMA_VERSION), written by
    /// every claim.
    pub const SCHEMA: &str = "schema";
    /// Why it was refused (S), for the person who may clear it.
    pub const REJECTED_REASON: &str = "rejected_reason";
    /// The work's output kept by the completion (S), returned to duplicates; removed by a claim.
    pub const OUTPUT: &str = "output";
    /// The completion that kept [`OUTPUT`], its [`COMPLETED_AT`] (N): an output whose time is
    /// not the item's completion was left by a build that does not know outputs (a rollback
    /// completing the key again), and is not returned.
    pub const OUTPUT_AT: &str = "output_at";

    /// Every attribute above: the names a table's own key attributes may not take
    /// (`DynamoDbStore::with_key_attributes`).
    pub const ITEM: &[&str] = &[
        KEY,
        STATUS,
        LEASE_TOKEN,
        LEASE_UNTIL,
        FINGERPRINT,
        EXPIRES_AT,
        MESSAGE_ID,
        CLAIMED_AT,
        FIRST_ATTEMPT_AT,
        ATTEMPTS,
        ATTEMPTED_AT,
        COMPLETED_AT,
        REJECTED_AT,
        SCHEMA,
        REJECTED_REASON,
        OUTPUT,
        OUTPUT_AT,
    ];
}

pub use attr::{EXPIRES_AT as TTL_ATTRIBUTE, KEY as KEY_ATTRIBUTE};

/// The version of the item format this store writes ([`attr::SCHEMA`]). A claim never takes
/// over an item of a later version (a rollback meeting a newer build's items): it is refused and
/// read as malformed, so its record is retried rather than misread. A change of the format, the
/// key or the fingerprint raises it, and ships only with a simulation of both versions side by
/// side on one table.
pub const SCHEMA_VERSION: u64 = 1;

/// Why the table could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateTableError {
    /// A request could not be built (a bug, not an outage).
    #[error("the request could not be built")]
    Build(#[source] aws_sdk_dynamodb::error::BuildError),
    /// DynamoDB refused or could not be reached.
    #[error("DynamoDB refused to create the table or turn its TTL on")]
    Aws(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Creates a table with the key schema and TTL attribute this store writes: for local runs
/// and tests (in AWS, the deployment's template creates it, with the same key and TTL).
pub async fn create_table(client: &Client, name: &str) -> Result<(), CreateTableError> {
    create_table_with_keys(client, name, attr::KEY, None).await
}

/// As [`create_table`], keyed by `partition` (a string hash key) and, for a single-table design,
/// `sort` (a string range key): the table a store built with
/// [`DynamoDbStore::with_key_attributes`](super::DynamoDbStore::with_key_attributes) writes.
pub async fn create_table_with_keys(
    client: &Client,
    name: &str,
    partition: &str,
    sort: Option<&str>,
) -> Result<(), CreateTableError> {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        TimeToLiveSpecification,
    };
    let mut request = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest);
    for (attribute, key_type) in
        std::iter::once((partition, KeyType::Hash)).chain(sort.map(|sort| (sort, KeyType::Range)))
    {
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(attribute)
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .map_err(CreateTableError::Build)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(attribute)
                    .key_type(key_type)
                    .build()
                    .map_err(CreateTableError::Build)?,
            );
    }
    request
        .send()
        .await
        .map_err(|e| CreateTableError::Aws(Box::new(e)))?;
    client
        .update_time_to_live()
        .table_name(name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(attr::EXPIRES_AT)
                .enabled(true)
                .build()
                .map_err(CreateTableError::Build)?,
        )
        .send()
        .await
        .map_err(|e| CreateTableError::Aws(Box::new(e)))?;
    Ok(())
}

/// The DynamoDB actions this store calls; IAM grants exactly these on the table. No path reads.
pub const ACTIONS: &[&str] = &["dynamodb:UpdateItem", "dynamodb:DeleteItem"];
