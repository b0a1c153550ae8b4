//! A payment provider on 127.0.0.1 for the tests: a real HTTP server (axum) that behaves like a
//! provider following the IETF Idempotency-Key draft (draft-ietf-httpapi-idempotency-key-header)
//! at its worst:
//!
//! - a request whose key is still being processed gets 409 (with `Retry-After`);
//! - a key reused with another payload gets 422 (`error.type = idempotency_error`);
//! - a finished key replays its original answer, status and body;
//! - a key is forgotten once its window has passed (`set_key_window`): the same key then charges
//!   again, as real providers do after about 24 hours;
//! - `GET /v1/charges/{key}` answers what became of a key (`succeeded`, `failed`, `pending`, or
//!   404), for as long as the provider keeps charges, not only for the key window, unless told to
//!   forget with the window (`set_lookup_retention`), as a look-up by idempotency key does at
//!   providers whose keys expire;
//! - a request without the `Idempotency-Key` header (or behind a proxy that strips it,
//!   `strip_idempotency_key`) gets the draft's own 400 `application/problem+json` answer,
//!   "Idempotency-Key is missing"; the key is read as HTTP servers read header values, with
//!   leading and trailing white space trimmed;
//! - on demand a 401 echoes the request's `Authorization` header back, as some gateways do;
//! - on demand it is slow, declines, charges and then answers 504 or breaks the connection, or
//!   answers a status of its own without charging.
//!
//! Time for the key window comes from an injected clock, so tests move it instead of sleeping.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use lambda_kit::{Clock, SystemClock};
use tokio::sync::Notify;

/// What the provider does with the first request of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Charge, answer 201; replays answer the same.
    Normal,
    /// Answer this status without charging and without keeping the key (as a load balancer or
    /// an auth layer in front of the provider does). 402 is a decline and is kept: see `Decline`.
    Status(u16),
    /// Decline (402); the key keeps the decline, a replay answers it again.
    Decline,
    /// Charge, then answer 200 with a body that is not JSON (a wrong URL, a proxy's page).
    NotJson,
    /// Keep the request in flight this long, then charge.
    Slow(Duration),
    /// Keep the request in flight this long, then decline it.
    SlowDecline(Duration),
    /// Charge, then answer 504 (a gateway timed out in front of a provider that went on).
    ChargeThen504,
    /// Charge, then break the connection in the middle of the answer.
    ChargeThenBreak,
    /// Charge, then answer 200 with a JSON body of 1 MiB.
    ChargeThenHugeBody,
    /// Charge, send the answer's status and headers at once, and its body (the 201's JSON)
    /// only after this long: a provider or proxy that stalls in the middle of an answer.
    ChargeThenStall(Duration),
}

/// How the look-up (`GET /charges/{key}`) words its answers: providers differ, and a reader that
/// knows only one dialect misreads the others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LookupDialect {
    /// The project's own: `status` `succeeded` / `pending` / `failed`, a failure naming its
    /// `decline_code`.
    #[default]
    Draft,
    /// As the draft, but a failure says only `"status": "failed"`: no code, no decline.
    BareFailed,
    /// A Stripe PaymentIntent: `succeeded`, `processing`, and a failed attempt as
    /// `requires_payment_method` with `last_payment_error` (`type`, `code`, `decline_code`); the
    /// currency lower-case.
    Stripe,
    /// A status nobody documented (`"status": "under_review"`), for every known key.
    UnknownStatus,
    /// Adyen's payment: `resultCode` `Authorised` / `Received` / `Refused`, the money nested as
    /// `"amount": {"value": ..., "currency": ...}`.
    Adyen,
}

/// How the look-up words a charge's amount: a JSON integer of minor units, as every documented
/// dialect does, or as some providers and proxies rewrite it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AmountWording {
    /// `5000`.
    #[default]
    Integer,
    /// `"5000"`: the minor units as text.
    Text,
    /// `5000.0`: the minor units as a decimal number.
    Decimal,
}

impl AmountWording {
    /// `minor` in this wording (an amount that is not a number is left as it is).
    fn word(self, minor: serde_json::Value) -> serde_json::Value {
        let Some(n) = minor.as_u64() else {
            return minor;
        };
        match self {
            Self::Integer => minor,
            Self::Text => n.to_string().into(),
            // `n as f64` is exact for every amount the function accepts (at most 2^53 - 1).
            Self::Decimal => serde_json::Number::from_f64(n as f64).map_or(minor, Into::into),
        }
    }
}

/// Random faults for the chaos run, each a share of new requests.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Answered 503 without charging.
    pub unavailable: f64,
    /// Slower than the client's timeout: `Slow(slow_for)`.
    pub slow: f64,
    /// How long a slow answer takes.
    pub slow_for: Duration,
    /// `ChargeThen504`.
    pub charge_then_504: f64,
    /// Lookups answered 503.
    pub lookup_unavailable: f64,
}

/// What the provider keeps per idempotency key while it remembers the key.
#[derive(Debug, Clone)]
struct KeyUse {
    payload: String,
    first_seen_ms: u64,
    /// `None` while the first request is still being processed.
    answer: Option<(u16, String)>,
}

/// What became of a key, kept by reference for as long as the charges (the lookup's source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Accepted, not settled.
    Pending,
    /// Charged.
    Succeeded,
    /// Not charged.
    Failed,
}

#[derive(Debug, Default)]
struct Ledger {
    behaviour: HashMap<String, Behaviour>,
    default: Option<Behaviour>,
    faults: Faults,
    rng: Option<fastrand::Rng>,
    required_key: Option<String>,
    key_window_ms: Option<u64>,
    keys: HashMap<String, KeyUse>,
    fates: HashMap<String, Fate>,
    /// The amount each key was first charged for (the lookup answers it).
    amounts: HashMap<String, serde_json::Value>,
    /// The currency each key was first charged in.
    currencies: HashMap<String, String>,
    lookup_unavailable: bool,
    /// The look-up forgets a key this long after its first request (`None`: never).
    lookup_retention_ms: Option<u64>,
    /// When each key's fate was first recorded (for `lookup_retention_ms`).
    fate_since_ms: HashMap<String, u64>,
    /// A proxy in front strips the `Idempotency-Key` header.
    strip_key: bool,
    /// A 401 echoes the `Authorization` header in its body.
    echo_authorization: bool,
    /// A 401 echoes the bare credential after this many characters of other text.
    echo_key_after: Option<usize>,
    /// How the look-up words its answers.
    lookup_dialect: LookupDialect,
    /// How the look-up words amounts.
    amount_wording: AmountWording,
    requests: HashMap<String, usize>,
    /// Money that moved per key: above 1 is a double charge.
    charges: HashMap<String, usize>,
    /// The keys in the order their money moved.
    charge_log: Vec<String>,
    lookups: HashMap<String, usize>,
    /// Charge requests that came without an idempotency key.
    missing_key: usize,
    answers: Vec<(String, u16)>,
    authorization: Vec<Option<String>>,
    bodies: Vec<serde_json::Value>,
}

#[derive(Clone)]
struct Shared {
    ledger: Arc<Mutex<Ledger>>,
    clock: Arc<dyn Clock>,
    settled: Arc<Notify>,
}

/// A provider over real HTTP that follows the IETF Idempotency-Key draft, with faults on demand.
#[derive(Clone)]
pub struct PaymentStub {
    /// Where it listens.
    pub addr: SocketAddr,
    shared: Shared,
}

impl std::fmt::Debug for PaymentStub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentStub")
            .field("addr", &self.addr)
            .finish()
    }
}

impl PaymentStub {
    /// A provider on the system clock.
    pub async fn start() -> Self {
        Self::start_with_clock(Arc::new(SystemClock)).await
    }

    /// A provider whose key window runs on `clock`.
    pub async fn start_with_clock(clock: Arc<dyn Clock>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let shared = Shared {
            ledger: Arc::new(Mutex::new(Ledger::default())),
            clock,
            settled: Arc::new(Notify::new()),
        };
        let app = Router::new()
            .route("/v1/charges", post(charge))
            .route("/v1/charges/{key}", get(lookup))
            .with_state(shared.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared }
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.shared.ledger.lock().unwrap()
    }

    /// The base URL to configure (`PAYMENT_API_URL`).
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// What the stub does for one key.
    pub fn set(&self, key: &str, behaviour: Behaviour) {
        self.ledger().behaviour.insert(key.to_owned(), behaviour);
    }

    /// What it does for keys without their own behaviour.
    pub fn set_default(&self, behaviour: Behaviour) {
        self.ledger().default = Some(behaviour);
    }

    /// Random faults on new requests, seeded so a run repeats.
    pub fn set_faults(&self, faults: Faults, seed: u64) {
        let mut l = self.ledger();
        l.faults = faults;
        l.rng = Some(fastrand::Rng::with_seed(seed));
    }

    /// Only `Bearer <key>` is accepted; anything else gets 401 (`None`: no check).
    pub fn require_api_key(&self, key: Option<&str>) {
        self.ledger().required_key = key.map(str::to_owned);
    }

    /// Lookups answer 503 while `false`.
    pub fn set_lookup_available(&self, available: bool) {
        self.ledger().lookup_unavailable = !available;
    }

    /// Keys are forgotten this long after their first request (`None`: never).
    pub fn set_key_window(&self, window: Option<Duration>) {
        self.ledger().key_window_ms = window.map(|w| w.as_millis() as u64);
    }

    /// The look-up forgets a key this long after its first request (`None`: never): a provider
    /// whose look-up is by idempotency key and forgets with the key window.
    pub fn set_lookup_retention(&self, retention: Option<Duration>) {
        self.ledger().lookup_retention_ms = retention.map(|w| w.as_millis() as u64);
    }

    /// A proxy in front of the provider strips the `Idempotency-Key` header from every request.
    pub fn strip_idempotency_key(&self, strip: bool) {
        self.ledger().strip_key = strip;
    }

    /// A 401 echoes the request's `Authorization` header in its body (some gateways do).
    pub fn echo_authorization(&self, echo: bool) {
        self.ledger().echo_authorization = echo;
    }

    /// A 401 says, after `filler` characters of other text, the bare credential it refused (no
    /// scheme before it, so nothing but the key's own value can tell it apart).
    pub fn echo_key_after(&self, filler: Option<usize>) {
        self.ledger().echo_key_after = filler;
    }

    /// How the look-up words its answers from now on.
    pub fn set_lookup_dialect(&self, dialect: LookupDialect) {
        self.ledger().lookup_dialect = dialect;
    }

    /// How the look-up words amounts from now on.
    pub fn set_amount_wording(&self, wording: AmountWording) {
        self.ledger().amount_wording = wording;
    }

    /// Charges `key` for `amount` minor units in `currency` as another client of the provider
    /// would (the key then belongs to that payload): the provider's ledger, not our request.
    pub fn charge_directly(&self, key: &str, amount: u64, currency: &str) {
        let now_ms = self.shared.clock.now_ms();
        let mut l = self.ledger();
        let body = serde_json::json!({ "order_id": key, "amount": amount, "currency": currency });
        l.keys.insert(
            key.to_owned(),
            KeyUse {
                payload: format!("{}|{}", body["order_id"], body["amount"]),
                first_seen_ms: now_ms,
                answer: Some((201, succeeded_body(key))),
            },
        );
        *l.charges.entry(key.to_owned()).or_default() += 1;
        l.charge_log.push(key.to_owned());
        l.fates.insert(key.to_owned(), Fate::Succeeded);
        l.fate_since_ms.insert(key.to_owned(), now_ms);
        l.amounts.insert(key.to_owned(), body["amount"].clone());
        l.currencies.insert(key.to_owned(), currency.to_owned());
    }

    /// Waits until `key`'s fate (as the lookup would answer it) satisfies `done`.
    async fn wait_fate(&self, key: &str, done: impl Fn(Option<Fate>) -> bool) {
        loop {
            let notified = self.shared.settled.notified();
            if done(self.fate(key)) {
                return;
            }
            notified.await;
        }
    }

    /// Waits until a request of `key` is being processed.
    pub async fn in_flight(&self, key: &str) {
        self.wait_fate(key, |f| f == Some(Fate::Pending)).await;
    }

    /// Waits until no request of `key` is in flight any more.
    pub async fn settled(&self, key: &str) {
        self.wait_fate(key, |f| f != Some(Fate::Pending)).await;
    }

    /// What became of `key`, as the lookup endpoint answers it.
    pub fn fate(&self, key: &str) -> Option<Fate> {
        self.ledger().fates.get(key).copied()
    }

    /// Keys charged at least once.
    pub fn charged_keys(&self) -> Vec<String> {
        self.ledger().charges.keys().cloned().collect()
    }

    /// Charge requests for every key.
    pub fn all_requests(&self) -> usize {
        self.ledger().requests.values().sum()
    }

    /// Charge requests for `key`, replays included.
    pub fn requests(&self, key: &str) -> usize {
        self.ledger().requests.get(key).copied().unwrap_or(0)
    }

    /// Lookups of every key.
    pub fn all_lookups(&self) -> usize {
        self.ledger().lookups.values().sum()
    }

    /// Charge requests that arrived without an idempotency key.
    pub fn missing_key_requests(&self) -> usize {
        self.ledger().missing_key
    }

    /// Lookups of `key`.
    pub fn lookups(&self, key: &str) -> usize {
        self.ledger().lookups.get(key).copied().unwrap_or(0)
    }

    /// Times money moved for `key`: 1 is right, 2 is a double charge.
    pub fn charges(&self, key: &str) -> usize {
        self.ledger().charges.get(key).copied().unwrap_or(0)
    }

    /// The keys in the order their money moved (a key twice if it was charged twice).
    pub fn charge_order(&self) -> Vec<String> {
        self.ledger().charge_log.clone()
    }

    /// Money movements over all keys.
    pub fn total_charges(&self) -> usize {
        self.ledger().charges.values().sum()
    }

    /// The statuses answered to charge requests for `key`, in order.
    pub fn answers(&self, key: &str) -> Vec<u16> {
        self.ledger()
            .answers
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| *s)
            .collect()
    }

    /// Charge requests answered with `status`, over all keys.
    pub fn answered(&self, status: u16) -> usize {
        self.ledger()
            .answers
            .iter()
            .filter(|(_, s)| *s == status)
            .count()
    }

    /// The `Authorization` header of every request, in order.
    pub fn authorization(&self) -> Vec<Option<String>> {
        self.ledger().authorization.clone()
    }

    /// Every charge request's JSON body, in order.
    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.ledger().bodies.clone()
    }
}

fn json_answer(status: u16, body: &str) -> Response {
    let status = StatusCode::from_u16(status).unwrap();
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_owned(),
    )
        .into_response()
}

/// The IETF Idempotency-Key draft's error answers: `application/problem+json` whose `type`
/// names the provider's idempotency documentation.
fn problem(status: u16, title: &str, detail: &str) -> Response {
    let body = serde_json::json!({
        "type": "https://developer.example.com/idempotency",
        "title": title,
        "detail": detail,
    });
    let status = StatusCode::from_u16(status).unwrap();
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

fn error_body(kind: &str, message: &str) -> String {
    serde_json::json!({ "error": { "type": kind, "message": message } }).to_string()
}

fn succeeded_body(key: &str) -> String {
    serde_json::json!({ "id": format!("ch_{key}"), "status": "succeeded" }).to_string()
}

fn declined_body() -> String {
    serde_json::json!({ "error": {
        "type": "card_error",
        "code": "card_declined",
        "message": "card declined",
    } })
    .to_string()
}

/// A 401, echoing the `Authorization` header it refused when the ledger says so.
fn unauthorized(l: &Ledger, authorization: Option<&str>) -> Response {
    let message = match (authorization, l.echo_key_after) {
        (Some(sent), Some(filler)) => format!(
            "{}{}",
            &"the request was refused ".repeat(filler / 24 + 1)[..filler],
            sent.strip_prefix("Bearer ").unwrap_or(sent)
        ),
        (Some(sent), None) if l.echo_authorization => {
            format!("invalid API key in header 'Authorization: {sent}'")
        }
        _ => "invalid API key".to_owned(),
    };
    json_answer(401, &error_body("authentication_error", &message))
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// The key's first request: the in-flight record is in place; do the work and settle it.
async fn first_request(shared: &Shared, key: &str, behaviour: Behaviour) -> Response {
    let (delay, charge, answer) = match behaviour {
        Behaviour::Normal
        | Behaviour::NotJson
        | Behaviour::ChargeThenBreak
        | Behaviour::ChargeThenHugeBody
        | Behaviour::ChargeThenStall(_)
        | Behaviour::ChargeThen504 => (None, true, (201, succeeded_body(key))),
        Behaviour::Slow(d) => (Some(d), true, (201, succeeded_body(key))),
        Behaviour::Decline | Behaviour::Status(402) => (None, false, (402, declined_body())),
        Behaviour::SlowDecline(d) => (Some(d), false, (402, declined_body())),
        Behaviour::Status(_) => unreachable!("answered before the key is used"),
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    {
        let mut l = shared.ledger.lock().unwrap();
        if charge {
            *l.charges.entry(key.to_owned()).or_default() += 1;
            l.charge_log.push(key.to_owned());
        }
        l.fates.insert(
            key.to_owned(),
            if charge {
                Fate::Succeeded
            } else {
                Fate::Failed
            },
        );
        if let Some(record) = l.keys.get_mut(key) {
            record.answer = Some(answer.clone());
        }
        let status = match behaviour {
            Behaviour::ChargeThen504 => 504,
            Behaviour::NotJson => 200,
            _ => answer.0,
        };
        l.answers.push((key.to_owned(), status));
    }
    shared.settled.notify_waiters();
    match behaviour {
        Behaviour::ChargeThen504 => json_answer(504, &error_body("api_error", "gateway timeout")),
        Behaviour::NotJson => (StatusCode::OK, "<html>charged</html>").into_response(),
        Behaviour::ChargeThenHugeBody => {
            let padding = "x".repeat(1024 * 1024);
            json_answer(
                200,
                &serde_json::json!({ "status": "succeeded", "padding": padding }).to_string(),
            )
        }
        Behaviour::ChargeThenBreak => {
            // Headers go out, then the body fails: hyper drops the connection mid-answer.
            let broken = futures_util::stream::once(async {
                Err::<axum::body::Bytes, _>(std::io::Error::other("connection broken"))
            });
            Response::builder()
                .status(StatusCode::CREATED)
                .header("content-length", "100")
                .body(Body::from_stream(broken))
                .unwrap()
        }
        Behaviour::ChargeThenStall(stall) => {
            let body = answer.1;
            let length = body.len();
            let late = futures_util::stream::once(async move {
                tokio::time::sleep(stall).await;
                Ok::<_, std::io::Error>(axum::body::Bytes::from(body))
            });
            Response::builder()
                .status(StatusCode::CREATED)
                .header("content-type", "application/json")
                .header("content-length", length)
                .body(Body::from_stream(late))
                .unwrap()
        }
        _ => json_answer(answer.0, &answer.1),
    }
}

async fn charge(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let now_ms = shared.clock.now_ms();
    let strip = shared.ledger.lock().unwrap().strip_key;
    // HTTP servers hand a header value over with its surrounding white space trimmed
    // (RFC 9110 5.5): " o-1" arrives as "o-1".
    let Some(key) = headers
        .get("idempotency-key")
        .filter(|_| !strip)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
    else {
        shared.ledger.lock().unwrap().missing_key += 1;
        return problem(
            400,
            "Idempotency-Key is missing",
            "This operation is idempotent and it requires correct usage of Idempotency Key.",
        );
    };
    let Ok(parsed) = serde_json::from_str::<serde_json::Value>(&body) else {
        return json_answer(
            400,
            &error_body("invalid_request_error", "body is not JSON"),
        );
    };
    // What a replay must match: the request's payload, whatever its spelling.
    let payload = format!("{}|{}", parsed["order_id"], parsed["amount"]);
    let amount = parsed["amount"].clone();
    let currency = parsed["currency"].as_str().unwrap_or("EUR").to_owned();
    let behaviour = {
        let mut l = shared.ledger.lock().unwrap();
        *l.requests.entry(key.clone()).or_default() += 1;
        let authorization = bearer(&headers);
        l.authorization.push(authorization.clone());
        l.bodies.push(parsed);
        if let Some(required) = &l.required_key
            && authorization.as_deref() != Some(&format!("Bearer {required}"))
        {
            l.answers.push((key.clone(), 401));
            return unauthorized(&l, authorization.as_deref());
        }
        // The key window: past it, the provider has forgotten the key.
        if let (Some(window), Some(record)) = (l.key_window_ms, l.keys.get(&key))
            && now_ms.saturating_sub(record.first_seen_ms) >= window
            && record.answer.is_some()
        {
            l.keys.remove(&key);
        }
        if let Some(record) = l.keys.get(&key).cloned() {
            let answer = if record.payload != payload {
                l.answers.push((key.clone(), 422));
                return problem(
                    422,
                    "Idempotency-Key is already used",
                    "This operation is idempotent and it requires correct usage of Idempotency \
                     Key. Idempotency Key MUST not be reused across different payloads of this \
                     operation.",
                );
            } else {
                match record.answer {
                    None => {
                        l.answers.push((key.clone(), 409));
                        let mut response = problem(
                            409,
                            "A request is outstanding for this Idempotency-Key",
                            "A request with the same Idempotency-Key for the same operation is \
                             being processed or is outstanding.",
                        );
                        response
                            .headers_mut()
                            .insert("retry-after", "1".parse().unwrap());
                        return response;
                    }
                    Some(answer) => answer,
                }
            };
            l.answers.push((key.clone(), answer.0));
            let mut response = json_answer(answer.0, &answer.1);
            response
                .headers_mut()
                .insert("idempotent-replayed", "true".parse().unwrap());
            return response;
        }
        let faults = l.faults;
        let roll = l.rng.as_mut().map(|rng| rng.f64());
        let behaviour = match roll {
            Some(r) if r < faults.unavailable => Behaviour::Status(503),
            Some(r) if r < faults.unavailable + faults.slow => Behaviour::Slow(faults.slow_for),
            Some(r) if r < faults.unavailable + faults.slow + faults.charge_then_504 => {
                Behaviour::ChargeThen504
            }
            _ => l
                .behaviour
                .get(&key)
                .copied()
                .or(l.default)
                .unwrap_or(Behaviour::Normal),
        };
        if let Behaviour::Status(code) = behaviour
            && code != 402
        {
            l.answers.push((key.clone(), code));
            return json_answer(
                code,
                &error_body("api_error", &format!("stub answers {code}")),
            );
        }
        l.keys.insert(
            key.clone(),
            KeyUse {
                payload,
                first_seen_ms: now_ms,
                answer: None,
            },
        );
        l.fates.insert(key.clone(), Fate::Pending);
        l.fate_since_ms.insert(key.clone(), now_ms);
        l.amounts.insert(key.clone(), amount);
        l.currencies.insert(key.clone(), currency);
        behaviour
    };
    shared.settled.notify_waiters();
    // Processed on its own task, as a provider does: a client that gives up does not stop it.
    let task = {
        let shared = shared.clone();
        let key = key.clone();
        tokio::spawn(async move { first_request(&shared, &key, behaviour).await })
    };
    task.await
        .unwrap_or_else(|_| json_answer(500, &error_body("api_error", "stub task failed")))
}

async fn lookup(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Response {
    let mut l = shared.ledger.lock().unwrap();
    *l.lookups.entry(key.clone()).or_default() += 1;
    if let Some(required) = &l.required_key
        && bearer(&headers).as_deref() != Some(&format!("Bearer {required}"))
    {
        return unauthorized(&l, bearer(&headers).as_deref());
    }
    let rate = l.faults.lookup_unavailable;
    if l.lookup_unavailable || l.rng.as_mut().is_some_and(|rng| rng.f64() < rate) {
        return json_answer(503, &error_body("api_error", "lookup unavailable"));
    }
    let now_ms = shared.clock.now_ms();
    let forgotten = match (l.lookup_retention_ms, l.fate_since_ms.get(&key)) {
        (Some(retention), Some(since)) => now_ms.saturating_sub(*since) >= retention,
        _ => false,
    };
    let Some(fate) = l.fates.get(&key).filter(|_| !forgotten).copied() else {
        let body = serde_json::json!({ "error": {
            "type": "invalid_request_error",
            "code": "resource_missing",
            "message": "no charge with this key",
        } });
        return json_answer(404, &body.to_string());
    };
    let amount = l.amounts.get(&key).cloned().unwrap_or_default();
    let currency = l
        .currencies
        .get(&key)
        .cloned()
        .unwrap_or_else(|| "EUR".into());
    let amount = l.amount_wording.word(amount);
    let body = lookup_body(l.lookup_dialect, &key, fate, amount, &currency);
    json_answer(200, &body.to_string())
}

/// A look-up's answer for a known key, in `dialect`. The stub's only failures are declines.
fn lookup_body(
    dialect: LookupDialect,
    key: &str,
    fate: Fate,
    amount: serde_json::Value,
    currency: &str,
) -> serde_json::Value {
    use serde_json::json;
    match dialect {
        LookupDialect::Draft | LookupDialect::BareFailed => {
            let status = match fate {
                Fate::Pending => "pending",
                Fate::Succeeded => "succeeded",
                Fate::Failed => "failed",
            };
            let mut body = json!({
                "id": format!("ch_{key}"), "status": status, "amount": amount, "currency": currency,
            });
            if fate == Fate::Failed && dialect == LookupDialect::Draft {
                body["decline_code"] = "card_declined".into();
            }
            body
        }
        LookupDialect::Stripe => {
            let mut body = json!({
                "id": format!("pi_{key}"),
                "object": "payment_intent",
                "amount": amount,
                "currency": currency.to_ascii_lowercase(),
                "status": match fate {
                    Fate::Pending => "processing",
                    Fate::Succeeded => "succeeded",
                    Fate::Failed => "requires_payment_method",
                },
            });
            if fate == Fate::Failed {
                body["last_payment_error"] = json!({
                    "type": "card_error",
                    "code": "card_declined",
                    "decline_code": "insufficient_funds",
                    "message": "Your card has insufficient funds.",
                });
            }
            body
        }
        LookupDialect::Adyen => json!({
            "pspReference": format!("psp_{key}"),
            "merchantReference": key,
            "resultCode": match fate {
                Fate::Pending => "Received",
                Fate::Succeeded => "Authorised",
                Fate::Failed => "Refused",
            },
            "amount": { "value": amount, "currency": currency },
        }),
        LookupDialect::UnknownStatus => json!({
            "id": format!("ch_{key}"), "status": "under_review", "amount": amount,
            "currency": currency,
        }),
    }
}

/// An address that accepts connections and resets them at once.
pub async fn resetting_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            // SO_LINGER 0: close with RST instead of FIN.
            let _ = socket.set_zero_linger();
            drop(socket);
        }
    });
    format!("http://{addr}/v1")
}

/// An address where nothing listens: connections are refused.
pub fn refusing_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}/v1")
}

/// An HTTPS address whose certificate is self-signed (`tests/tls/`): no trusted root
/// signed it, so a client refuses it in the handshake, before any request is written.
pub async fn self_signed_endpoint() -> String {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls");
    let certs = CertificateDer::pem_file_iter(format!("{dir}/cert.pem"))
        .expect("cert.pem")
        .collect::<Result<Vec<_>, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(format!("{dir}/key.pem")).expect("key.pem");
    let acceptor = super::tls_acceptor(certs, key);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            // The handshake fails on the client's side; nothing more to serve.
            tokio::spawn(async move { drop(acceptor.accept(socket).await) });
        }
    });
    format!("https://{addr}/v1")
}
