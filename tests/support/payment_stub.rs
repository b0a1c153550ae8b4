//! A payment provider on 127.0.0.1 for the tests: a real HTTP server (axum) that applies
//! idempotency keys as a provider does (one effective charge per key), counts requests and
//! charges per key, and fails on demand.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

/// What the provider does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// Apply the key: 201 on the first request, the original answer (200) on a replay.
    Normal,
    /// As Normal, but a replayed key answers 409 ("already used for this same request").
    ConflictOnReplay,
    /// Answer this status without charging.
    Status(u16),
    /// Charge, then answer 200 with a body that is not JSON.
    NotJson,
    /// Charge, then answer only after this long (a client timeout leaves the charge applied).
    Slow(Duration),
}

#[derive(Debug, Default)]
struct Ledger {
    behaviour: HashMap<String, Behaviour>,
    default: Option<Behaviour>,
    requests: HashMap<String, usize>,
    charges: HashMap<String, f64>,
    authorization: Vec<Option<String>>,
    bodies: Vec<serde_json::Value>,
    /// Share of requests answered 503 without charging.
    flaky_rate: f64,
    rng: Option<fastrand::Rng>,
}

#[derive(Debug, Clone)]
pub struct PaymentStub {
    pub addr: SocketAddr,
    ledger: Arc<Mutex<Ledger>>,
}

impl PaymentStub {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let app = Router::new()
            .route("/v1/charges", post(charge))
            .with_state(Arc::clone(&ledger));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, ledger }
    }

    /// The base URL to configure (`PAYMENT_API_URL`).
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn set(&self, key: &str, behaviour: Behaviour) {
        self.ledger
            .lock()
            .unwrap()
            .behaviour
            .insert(key.to_owned(), behaviour);
    }

    pub fn set_default(&self, behaviour: Behaviour) {
        self.ledger.lock().unwrap().default = Some(behaviour);
    }

    /// Answers this share of all requests with a 503, without charging (seeded, repeatable).
    pub fn set_flaky(&self, rate: f64, seed: u64) {
        let mut l = self.ledger.lock().unwrap();
        l.flaky_rate = rate;
        l.rng = Some(fastrand::Rng::with_seed(seed));
    }

    /// Charged keys.
    pub fn charged_keys(&self) -> Vec<String> {
        self.ledger
            .lock()
            .unwrap()
            .charges
            .keys()
            .cloned()
            .collect()
    }

    /// Requests for every key.
    pub fn all_requests(&self) -> usize {
        self.ledger.lock().unwrap().requests.values().sum()
    }

    pub fn requests(&self, key: &str) -> usize {
        self.ledger
            .lock()
            .unwrap()
            .requests
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Effective charges for `key`: 0 or 1, whatever the number of requests.
    pub fn charges(&self, key: &str) -> usize {
        usize::from(self.ledger.lock().unwrap().charges.contains_key(key))
    }

    pub fn total_charges(&self) -> usize {
        self.ledger.lock().unwrap().charges.len()
    }

    pub fn authorization(&self) -> Vec<Option<String>> {
        self.ledger.lock().unwrap().authorization.clone()
    }

    pub fn bodies(&self) -> Vec<serde_json::Value> {
        self.ledger.lock().unwrap().bodies.clone()
    }
}

async fn charge(
    State(ledger): State<Arc<Mutex<Ledger>>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
    else {
        return (
            StatusCode::BAD_REQUEST,
            r#"{"message":"Idempotency-Key missing"}"#,
        )
            .into_response();
    };
    let Ok(parsed) = serde_json::from_str::<serde_json::Value>(&body) else {
        return (StatusCode::BAD_REQUEST, r#"{"message":"body is not JSON"}"#).into_response();
    };
    let amount = parsed["amount"].as_f64().unwrap_or(f64::NAN);
    let behaviour = {
        let mut l = ledger.lock().unwrap();
        *l.requests.entry(key.clone()).or_default() += 1;
        l.authorization.push(
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        );
        l.bodies.push(parsed);
        let rate = l.flaky_rate;
        if l.rng.as_mut().is_some_and(|rng| rng.f64() < rate) {
            Behaviour::Status(503)
        } else {
            l.behaviour
                .get(&key)
                .copied()
                .or(l.default)
                .unwrap_or(Behaviour::Normal)
        }
    };
    if let Behaviour::Status(code) = behaviour {
        let status = StatusCode::from_u16(code).unwrap();
        return (status, format!(r#"{{"message":"stub answers {code}"}}"#)).into_response();
    }
    let replay = {
        let mut l = ledger.lock().unwrap();
        match l.charges.get(&key) {
            Some(previous) if *previous != amount => {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    r#"{"message":"key reused with another request"}"#,
                )
                    .into_response();
            }
            Some(_) => true,
            None => {
                l.charges.insert(key.clone(), amount);
                false
            }
        }
    };
    match behaviour {
        Behaviour::Slow(delay) => tokio::time::sleep(delay).await,
        Behaviour::NotJson => return (StatusCode::OK, "<html>charged</html>").into_response(),
        Behaviour::ConflictOnReplay if replay => {
            return (
                StatusCode::CONFLICT,
                r#"{"message":"key already used for this request"}"#,
            )
                .into_response();
        }
        _ => {}
    }
    let status = if replay {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (
        status,
        format!(r#"{{"id":"ch_{key}","status":"succeeded"}}"#),
    )
        .into_response()
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
