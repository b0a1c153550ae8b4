//! The real `DynamoDbStore` under the simulator: the AWS SDK's DynamoDB client, its retries and
//! timeouts included, talking through an in-process HTTP connector to dynoxide's engine, with no
//! socket (a socket under a paused clock is not deterministic).
//!
//! dynoxide's public surface is its typed operations (`Database::update_item` and the others,
//! whose request types deserialize from DynamoDB's wire JSON and whose responses serialize to
//! it); its raw-JSON dispatch is private to its server and its wasm build. So the connector
//! reads the operation from `X-Amz-Target`, deserializes the body into that operation's request,
//! runs it on the shared `Database`, and answers as DynamoDB does: 200 with the response's JSON,
//! or the error's status and `__type` JSON. The engine's clock is the simulation's, so TTL follows
//! simulated time.
//!
//! The table's faults live at this HTTP layer, where the SDK meets them as it meets DynamoDB's:
//! latency, throttling (400 `ProvisionedThroughputExceededException`, which the SDK retries with
//! backoff), 500s, and writes applied whose answer is lost (an I/O error after the write: the
//! SDK sends the same request again, which then meets its own write).

use std::sync::Arc;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};
use aws_smithy_runtime_api::client::http::HttpConnectorFuture;
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use dynoxide::Database;

use crate::http::{Serve, answer};
use crate::world::{Shared, SimClock};

/// The table every container's client reaches.
pub const TABLE: &str = "orders-idempotency";

/// dynoxide's clock, on simulated time.
struct EngineClock(SimClock);

impl dynoxide::storage_backend::Clock for EngineClock {
    fn now_unix_secs(&self) -> u64 {
        lambda_kit::Clock::now_ms(&self.0) / 1_000
    }

    fn now_unix_secs_f64(&self) -> f64 {
        lambda_kit::Clock::now_ms(&self.0) as f64 / 1_000.0
    }
}

/// A dynoxide engine in memory, on simulated time, holding the table as `template.yaml` makes
/// it (key `pk`, TTL on `expires_at`), created through the same wire requests the SDK sends.
pub fn engine(clock: SimClock) -> Database {
    use idempotency::dynamodb::{KEY_ATTRIBUTE, TTL_ATTRIBUTE};
    let engine =
        Database::memory_with_clock(Arc::new(EngineClock(clock))).expect("an in-memory engine");
    let created = run(
        &engine,
        "CreateTable",
        &serde_json::json!({
            "TableName": TABLE,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [{ "AttributeName": KEY_ATTRIBUTE, "AttributeType": "S" }],
            "KeySchema": [{ "AttributeName": KEY_ATTRIBUTE, "KeyType": "HASH" }],
        })
        .to_string(),
    );
    assert_eq!(created.0, 200, "{}", created.1);
    let ttl = run(
        &engine,
        "UpdateTimeToLive",
        &serde_json::json!({
            "TableName": TABLE,
            "TimeToLiveSpecification": { "AttributeName": TTL_ATTRIBUTE, "Enabled": true },
        })
        .to_string(),
    );
    assert_eq!(ttl.0, 200, "{}", ttl.1);
    engine
}

/// What the HTTP layer does to a call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HttpFaults {
    /// Share of calls answered 500, not applied.
    pub error_rate: f64,
    /// Share of calls applied whose answer is lost.
    pub lost_rate: f64,
    /// Share of calls throttled (400, not applied).
    pub throttle_rate: f64,
    /// Share of claims taking over an unfinished claim (the item was `IN_PROGRESS` or
    /// `ATTEMPTED` under another token, and is `IN_PROGRESS` under a new one after the write)
    /// whose answer is lost, besides `lost_rate`. Judged on the same draw as the other faults,
    /// so the random stream is the same as without it.
    pub lost_at_takeover_rate: f64,
    /// The table's brownout, simulated ms (from, to): inside it, `brownout_throttle_rate` of
    /// the requests are throttled instead of `throttle_rate`.
    pub brownout: (u64, u64),
    /// Share of requests throttled during the brownout.
    pub brownout_throttle_rate: f64,
}

/// The items whose write one container's client sent and whose answer this layer lost, by their
/// partition key: how the container's [`crate::store::SimStore`] learns that a call it made
/// had an answer lost below it (the client sends the write again and meets its own, so the
/// call itself may still succeed).
#[derive(Clone, Default)]
pub struct LostAnswers {
    keys: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// The store's key prefix: an item's partition key is the prefix and the record's key.
    prefix: String,
}

impl LostAnswers {
    /// For a store whose keys carry `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            keys: Arc::default(),
            prefix: prefix.to_owned(),
        }
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether an answer about `key`'s item was lost since the last time this was asked.
    pub fn take(&self, key: &str) -> bool {
        self.keys().remove(&format!("{}{key}", self.prefix))
    }

    /// The answer to the write in `body` (DynamoDB's JSON) was lost.
    fn lost(&self, body: &str) {
        let item = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|request| {
                request["Key"][idempotency::dynamodb::KEY_ATTRIBUTE]["S"]
                    .as_str()
                    .map(str::to_owned)
            });
        if let Some(item) = item {
            self.keys().insert(item);
        }
    }
}

/// The table's items read straight from the engine (no latency, no fault, no client): the
/// truth the world judges a store's answers against.
#[derive(Clone)]
pub struct ItemReader {
    engine: Database,
    /// The store's key prefix: an item's partition key is the prefix and the record's key.
    prefix: String,
}

impl ItemReader {
    /// A reader of `engine`'s table, for a store whose keys carry `prefix`.
    pub fn new(engine: &Database, prefix: &str) -> Self {
        Self {
            engine: engine.clone(),
            prefix: prefix.to_owned(),
        }
    }

    /// `key`'s item's lease token and status, as stored; `None` when there is no item.
    pub fn token_and_status(&self, key: &str) -> Option<(String, String)> {
        use idempotency::dynamodb::KEY_ATTRIBUTE;
        let key = serde_json::json!({ KEY_ATTRIBUTE: { "S": format!("{}{key}", self.prefix) } });
        token_and_status(&read_item(&self.engine, &TABLE.into(), &key).1)
    }
}

/// The item under `key` in `table` (both as a request names them), read consistently: the
/// engine's status and its answer (`Item` absent when there is none).
fn read_item(
    engine: &Database,
    table: &serde_json::Value,
    key: &serde_json::Value,
) -> (u16, serde_json::Value) {
    let read = run(
        engine,
        "GetItem",
        &serde_json::json!({ "TableName": table, "Key": key, "ConsistentRead": true }).to_string(),
    );
    (read.0, serde_json::from_str(&read.1).unwrap_or_default())
}

/// An answer's item's lease token and status; `None` when it holds no item.
fn token_and_status(answer: &serde_json::Value) -> Option<(String, String)> {
    use idempotency::dynamodb::attr;
    let item = answer.get("Item")?;
    let text = |name: &str| item[name]["S"].as_str().unwrap_or_default().to_owned();
    Some((text(attr::LEASE_TOKEN), text(attr::STATUS)))
}

/// The world's reading of an item's status (docs/design.md's States): a claim not finished.
fn unfinished(status: &str) -> bool {
    matches!(status, "IN_PROGRESS" | "ATTEMPTED")
}

/// The design's rule for an item's expiry, as the world reads the template: every write that
/// sets the TTL sets it to the writer's now plus the retention, and no write leaves an item
/// that TTL may delete at once. Judged on the item the engine holds right after each applied
/// `UpdateItem`, by the true clock, with the writers' clocks' skew as slack.
#[derive(Debug, Clone)]
pub struct ExpiryRule {
    /// The container's clock (its true time is the world's).
    pub clock: SimClock,
    /// `IDEMPOTENCY_RETENTION_DAYS` as the template sets it, in seconds.
    pub retention_s: u64,
    /// How far a writer's clock may be off, rounded up to whole seconds.
    pub slack_s: u64,
    /// The store's key prefix, taken off an item's key to name its order.
    pub prefix: String,
}

impl ExpiryRule {
    /// Judges the item `request`'s `UpdateItem` (applied) left behind, `read` as the engine
    /// answered a read of it.
    fn judge(&self, world: &Shared, request: &serde_json::Value, read: &(u16, serde_json::Value)) {
        let item = &read.1;
        let key = request["Key"][idempotency::dynamodb::KEY_ATTRIBUTE]["S"]
            .as_str()
            .unwrap_or_default();
        let order = key.strip_prefix(self.prefix.as_str()).unwrap_or(key);
        let now_s = (crate::world::EPOCH_MS + self.clock.sim_ms()) / 1_000;
        let expires = item["Item"][idempotency::dynamodb::TTL_ATTRIBUTE]["N"]
            .as_str()
            .and_then(|n| n.parse::<u64>().ok());
        let latest = now_s + self.retention_s + self.slack_s;
        let problem = match expires {
            // Fail closed: a check that cannot read the table has judged nothing.
            _ if read.0 != 200 => Some(format!("the world could not read the item: {item}")),
            None if item["Item"].is_object() => Some("an item without an expiry".to_owned()),
            // The write's condition held, then the item was gone: nothing to judge.
            None => None,
            Some(at) if at <= now_s => Some(format!(
                "an item that expires at {at} s, by {now_s} s: deleted by TTL at once"
            )),
            Some(at) if at > latest => Some(format!(
                "an item that expires at {at} s, past now ({now_s} s) plus the retention \
                 ({} s) and the clocks' skew",
                self.retention_s
            )),
            Some(_) => None,
        };
        let mut world = world.lock();
        world.faults.expiries_checked += 1;
        if let Some(problem) = problem {
            world.fence.wrong_expiries.push((order.to_owned(), problem));
        }
    }
}

/// The connector: one per client (per container), all on the shared engine.
#[derive(Clone)]
struct SimConnector {
    engine: Database,
    world: Shared,
    faults: HttpFaults,
    lost: LostAnswers,
    expiry: ExpiryRule,
}

impl std::fmt::Debug for SimConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimConnector")
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl Serve for SimConnector {
    fn serve(&self, request: HttpRequest) -> HttpConnectorFuture {
        let this = self.clone();
        HttpConnectorFuture::new(async move {
            let operation = crate::http::operation(&request);
            let body = request
                .body()
                .bytes()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            this.world.latency(20).await;
            this.world.count(|c| c.store_requests += 1);
            let roll = this.world.roll();
            let mut f = this.faults;
            // Judged on the same draw: a run without a brownout keeps its random stream.
            if (f.brownout.0..f.brownout.1).contains(&this.world.lock().sim_ms()) {
                f.throttle_rate = f.throttle_rate.max(f.brownout_throttle_rate);
            }
            if roll < f.throttle_rate {
                this.world.count(|c| c.store_throttled += 1);
                return Ok(answer(
                    400,
                    r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"simulated throttling"}"#,
                ));
            }
            if roll < f.throttle_rate + f.error_rate {
                this.world.count(|c| c.store_errors += 1);
                return Ok(answer(
                    500,
                    r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"simulated"}"#,
                ));
            }
            // An update's item before and after it: the expiry it left is judged, and a claim
            // that took over an unfinished one is told apart (its answer is lost more often).
            let update = (operation == "UpdateItem")
                .then(|| serde_json::from_str::<serde_json::Value>(&body).ok())
                .flatten();
            let before = update
                .as_ref()
                .filter(|_| f.lost_at_takeover_rate > 0.0)
                .and_then(|request| {
                    token_and_status(
                        &read_item(&this.engine, &request["TableName"], &request["Key"]).1,
                    )
                });
            let (status, json) = run(&this.engine, &operation, &body);
            let mut lost_rate = f.lost_rate;
            if let Some(request) = update.as_ref().filter(|_| status == 200) {
                let after = read_item(&this.engine, &request["TableName"], &request["Key"]);
                this.expiry.judge(&this.world, request, &after);
                let took_over = match (&before, token_and_status(&after.1)) {
                    (Some((old, was)), Some((new, now))) => {
                        unfinished(was) && now == "IN_PROGRESS" && *old != new
                    }
                    _ => false,
                };
                if took_over {
                    lost_rate += f.lost_at_takeover_rate;
                }
            }
            if roll < f.throttle_rate + f.error_rate + lost_rate {
                this.world.count(|c| c.store_answers_lost += 1);
                this.lost.lost(&body);
                return Err(ConnectorError::io(
                    "simulated: applied, the answer lost on the way back".into(),
                ));
            }
            Ok(answer(status, &json))
        })
    }
}

/// Runs one operation on the engine: its status and JSON, as DynamoDB answers.
fn run(engine: &Database, operation: &str, body: &str) -> (u16, String) {
    use dynoxide::actions::{
        create_table, delete_item, get_item, put_item, update_item, update_time_to_live,
    };
    fn call<Req, Resp>(body: &str, op: impl FnOnce(Req) -> dynoxide::Result<Resp>) -> (u16, String)
    where
        Req: serde::de::DeserializeOwned,
        Resp: serde::Serialize,
    {
        let request = match serde_json::from_str::<Req>(body) {
            Ok(request) => request,
            Err(e) => {
                return (
                    400,
                    serde_json::json!({
                        "__type": "com.amazon.coral.service#SerializationException",
                        "Message": e.to_string(),
                    })
                    .to_string(),
                );
            }
        };
        match op(request) {
            Ok(response) => (200, serde_json::to_string(&response).unwrap_or_default()),
            Err(e) => (e.status_code(), e.to_json()),
        }
    }
    match operation {
        "UpdateItem" => call(body, |r: update_item::UpdateItemRequest| {
            engine.update_item(r)
        }),
        "DeleteItem" => call(body, |r: delete_item::DeleteItemRequest| {
            engine.delete_item(r)
        }),
        "GetItem" => call(body, |r: get_item::GetItemRequest| engine.get_item(r)),
        "PutItem" => call(body, |r: put_item::PutItemRequest| engine.put_item(r)),
        "CreateTable" => call(body, |r: create_table::CreateTableRequest| {
            engine.create_table(r)
        }),
        "UpdateTimeToLive" => call(body, |r: update_time_to_live::UpdateTimeToLiveRequest| {
            engine.update_time_to_live(r)
        }),
        other => (
            400,
            serde_json::json!({
                "__type": "com.amazon.coral.service#UnknownOperationException",
                "message": format!("the simulated engine does not serve {other}"),
            })
            .to_string(),
        ),
    }
}

/// A container's DynamoDB client as the function builds it (`DYNAMODB_*` bounds, the store's
/// own client on the JSON API: `process_orders::aws::dynamodb_direct`), over the engine through
/// the fault-injecting connector, which tells `lost` which items' answers it lost.
pub fn client(
    engine: &Database,
    world: &Shared,
    faults: HttpFaults,
    settings: &process_orders::aws::SdkSettings,
    lost: LostAnswers,
    expiry: ExpiryRule,
) -> idempotency::dynamodb::DirectClient {
    let connector = SimConnector {
        engine: engine.clone(),
        world: world.clone(),
        faults,
        lost,
        expiry,
    };
    let sdk = aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "sim", "sim", None, None, "sim",
        )))
        .endpoint_url("http://dynamodb.sim")
        // The client's jitter draws from an unseeded generator; without it the backoff is the
        // same exponential schedule at its upper bound, and a seed replays exactly.
        .retry_config(
            settings
                .retry_config()
                .with_use_static_exponential_base(true),
        )
        .timeout_config(settings.timeout_config())
        .build();
    idempotency::dynamodb::DirectClient::new(&sdk, crate::http::connector(connector))
        .expect("a region and credentials are set")
}
