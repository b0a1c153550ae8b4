//! Real DynamoDB-compatible servers for the tests: dynoxide embedded in the test process, and
//! moto's server as an outside process. Both speak the DynamoDB wire protocol to the real SDK.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::aws::SdkSettings;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};

/// Short bounds so an outage test fails fast instead of waiting out production timeouts.
pub const TEST_SDK: SdkSettings = SdkSettings {
    max_attempts: 2,
    attempt_timeout: Duration::from_millis(1_500),
    operation_timeout: Duration::from_secs(4),
};

/// Counts the HTTP requests (attempts) a client sends.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter(Arc<AtomicUsize>);

impl RequestCounter {
    /// Requests sent so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl aws_sdk_dynamodb::config::Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// For moto, which shares its server with the chaos test and can be slow under that load: one
/// attempt, long enough. A retried conditional write would meet its own first attempt's item
/// and read as BUSY; a retried `CreateTable` as "already exists".
pub const MOTO_SDK: SdkSettings = SdkSettings {
    max_attempts: 1,
    attempt_timeout: Duration::from_secs(30),
    operation_timeout: Duration::from_secs(30),
};

/// An SDK client for a local endpoint, with static test credentials and [`TEST_SDK`]'s bounds.
pub fn client(endpoint: &str) -> (Client, RequestCounter) {
    client_with(endpoint, &TEST_SDK)
}

/// A client for the tests' moto server ([`moto_endpoint`]) with [`MOTO_SDK`]'s bounds.
pub fn moto_client() -> Client {
    client_with(&moto_endpoint(), &MOTO_SDK).0
}

/// An SDK client for a local endpoint, with static test credentials.
pub fn client_with(endpoint: &str, settings: &SdkSettings) -> (Client, RequestCounter) {
    let counter = RequestCounter::default();
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
        .endpoint_url(endpoint)
        // The function's own HTTP client (reqwest on the compiled-in roots), so every store
        // test runs the SDK over the stack the function uses.
        .http_client(crate::aws::http_client())
        .retry_config(settings.retry_config())
        .timeout_config(settings.timeout_config())
        .interceptor(counter.clone())
        .build();
    (Client::from_conf(config), counter)
}

pub use idempotency::testkit::dynoxide::{Dynoxide, unique_table};

/// Creates the idempotency table the store writes (key schema and TTL from the store's code).
pub async fn create_table(client: &Client, name: &str) {
    idempotency::dynamodb::create_table(client, name)
        .await
        .expect("create table");
}

/// moto's server, one per test binary, started on first use on a free loopback port.
///
/// It is spawned from a thread that never ends, with PR_SET_PDEATHSIG, so the kernel stops it
/// when the test process exits, whether the tests passed, failed or panicked.
pub fn moto_endpoint() -> String {
    static MOTO: OnceLock<Result<u16, String>> = OnceLock::new();
    let port = MOTO.get_or_init(kept_moto);
    match port {
        Ok(port) => format!("http://127.0.0.1:{port}"),
        Err(e) => panic!("{e}"),
    }
}

/// Keys moto knows once its IAM authentication is on ([`signing_moto`]).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct SigningKeys {
    /// An IAM user's long-term access key id.
    pub access_key_id: String,
    /// Its secret.
    pub secret_access_key: String,
    /// Session credentials from a role the user assumed.
    pub session: SessionKeys,
}

/// Session credentials: a key, a secret and a session token.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct SessionKeys {
    /// The temporary access key id.
    pub access_key_id: String,
    /// Its secret.
    pub secret_access_key: String,
    /// The session token every request must carry (signed).
    pub session_token: String,
}

/// A moto server of its own (one per test binary), with its IAM authentication on: every
/// request must carry a SigV4 signature by a key it knows (`scripts/moto_iam.py` made them). The
/// one server in these tests that checks signatures, as AWS does.
///
/// # Panics
///
/// When moto cannot be started or set up (a test set-up failure).
pub fn signing_moto() -> &'static (String, SigningKeys) {
    static SIGNING: OnceLock<Result<(String, SigningKeys), String>> = OnceLock::new();
    let started = SIGNING.get_or_init(|| {
        let port = kept_moto()?;
        let endpoint = format!("http://127.0.0.1:{port}");
        let python = moto_program()?.with_file_name("python");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/moto_iam.py");
        let output = std::process::Command::new(&python)
            .arg(script)
            .arg(&endpoint)
            .output()
            .map_err(|e| format!("{}: {e}", python.display()))?;
        if !output.status.success() {
            return Err(format!(
                "scripts/moto_iam.py: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let keys = serde_json::from_slice(&output.stdout).map_err(|e| e.to_string())?;
        Ok((endpoint, keys))
    });
    match started {
        Ok(started) => started,
        Err(e) => panic!("{e}"),
    }
}

/// A moto server of its own, its port: spawned from a thread that never ends, with
/// PR_SET_PDEATHSIG, so the kernel stops it when the test process exits.
fn kept_moto() -> Result<u16, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || match spawn_moto() {
        Ok((child, port)) => {
            let _ = tx.send(Ok(port));
            let _keep = child;
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            let _ = tx.send(Err(e));
        }
    });
    rx.recv().unwrap_or_else(|e| Err(e.to_string()))
}

/// moto's server: `MOTO_SERVER`, else `moto_server` on `PATH`, else the project's venv (where
/// `make test` installs it), so a plain `cargo test` finds it after one `make test`.
fn moto_program() -> Result<std::path::PathBuf, String> {
    if let Some(program) = std::env::var_os("MOTO_SERVER") {
        return Ok(program.into());
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("moto_server"))
        .find(|candidate| candidate.is_file());
    let venv = std::env::var_os("HOME")
        .map(|home| {
            std::path::PathBuf::from(home).join(".cache/process-orders/venv/bin/moto_server")
        })
        .filter(|candidate| candidate.is_file());
    on_path.or(venv).ok_or_else(|| {
        "moto_server not found (not on PATH, not in ~/.cache/process-orders/venv): run `make \
         test` once, which installs moto[server] there, or set MOTO_SERVER"
            .to_owned()
    })
}

fn spawn_moto() -> Result<(std::process::Child, u16), String> {
    use std::os::unix::process::CommandExt;
    let server = moto_program()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    // moto's server through scripts/moto_locked.py (its SQS backend serialized: moto's own
    // loses FIFO groups under concurrent receives and deletes), run by the Python next to
    // moto_server. MOTO_SERVER, when set, is run as it is.
    let locked = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/moto_locked.py");
    let python = server.with_file_name("python");
    let (program, script) = if std::env::var_os("MOTO_SERVER").is_none() && python.is_file() {
        (python, Some(locked))
    } else {
        (server, None)
    };
    let program = program.display().to_string();
    let mut command = std::process::Command::new(&program);
    command
        .args(script.iter())
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: prctl is async-signal-safe and touches only the child's own settings.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = command.spawn().map_err(|e| {
        format!("cannot start {program} ({e}): run `make test` once, which installs moto[server]")
    })?;
    for _ in 0..300 {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{program} exited at start-up with {status}"));
        }
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok((child, port));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    Err(format!(
        "{program} did not answer on port {port} within 30 s"
    ))
}

/// An HTTP proxy in front of a DynamoDB-compatible server that counts the requests it forwards
/// and their body bytes (the JSON a client sends; headers not counted), whatever the client's
/// language: the benchmarks compare the function's SDK with boto3 on it.
#[derive(Debug, Clone)]
pub struct CountingProxy {
    addr: std::net::SocketAddr,
    requests: Arc<AtomicUsize>,
    body_bytes: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct Upstream {
    client: reqwest::Client,
    url: String,
    /// Added before each request is forwarded: a server's own latency, requests waiting side
    /// by side.
    delay: std::time::Duration,
    requests: Arc<AtomicUsize>,
    body_bytes: Arc<AtomicUsize>,
}

impl CountingProxy {
    /// A proxy to `upstream` (`http://host:port`) on a free loopback port.
    pub async fn start(upstream: &str) -> Self {
        Self::start_with_delay(upstream, std::time::Duration::ZERO).await
    }

    /// [`Self::start`], each request held `delay` before it is forwarded (many at once): a
    /// fast local server answering in DynamoDB's time.
    pub async fn start_with_delay(upstream: &str, delay: std::time::Duration) -> Self {
        let tls = crate::tls::client_config().expect("a TLS configuration");
        let state = Upstream {
            client: reqwest::Client::builder()
                .tls_backend_preconfigured(tls)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("an HTTP client"),
            url: upstream.trim_end_matches('/').to_owned(),
            delay,
            requests: Arc::default(),
            body_bytes: Arc::default(),
        };
        let (requests, body_bytes) = (state.requests.clone(), state.body_bytes.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new().fallback(forward).with_state(state);
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            requests,
            body_bytes,
        }
    }

    /// The endpoint URL for a client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests forwarded so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Request body bytes forwarded so far.
    pub fn body_bytes(&self) -> usize {
        self.body_bytes.load(Ordering::SeqCst)
    }
}

async fn forward(
    axum::extract::State(upstream): axum::extract::State<Upstream>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 16 * 1024 * 1024).await else {
        return http::StatusCode::BAD_REQUEST.into_response();
    };
    upstream.requests.fetch_add(1, Ordering::SeqCst);
    upstream.body_bytes.fetch_add(body.len(), Ordering::SeqCst);
    if !upstream.delay.is_zero() {
        tokio::time::sleep(upstream.delay).await;
    }
    let mut headers = parts.headers;
    // The client's signature covers the original host; DynamoDB-compatible servers do not check it.
    headers.remove(http::header::HOST);
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let answer = upstream
        .client
        .request(parts.method, format!("{}{path}", upstream.url))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let Ok(answer) = answer else {
        return http::StatusCode::BAD_GATEWAY.into_response();
    };
    let status = answer.status();
    let mut headers = answer.headers().clone();
    // The body is passed on whole: its framing is the proxy's own.
    for framing in [
        http::header::CONTENT_LENGTH,
        http::header::TRANSFER_ENCODING,
        http::header::CONNECTION,
    ] {
        headers.remove(framing);
    }
    let body = answer.bytes().await.unwrap_or_default();
    (status, headers, body).into_response()
}
