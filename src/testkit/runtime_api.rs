//! A local Lambda Runtime API for the tests and benchmarks: hands a spawned bootstrap one queued
//! event with the headers Lambda sends (request id, deadline, function ARN, X-Ray trace header),
//! then takes its answer; later polls wait until the process is killed, as Lambda freezes it.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use lambda_kit::{Clock, SystemClock};
use tokio::sync::mpsc;

/// The request id every invocation gets.
pub const REQUEST_ID: &str = "req-1";
/// The X-Ray trace header every invocation gets (`lambda-runtime-trace-id`).
pub const TRACE_HEADER: &str =
    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
/// The function ARN every invocation names.
pub const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:bench";

/// The Runtime API, listening on 127.0.0.1.
#[derive(Clone)]
pub struct RuntimeApi {
    addr: String,
    next: Arc<Mutex<Option<String>>>,
    answers: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Result<String, String>>>>,
}

#[derive(Clone)]
struct ApiState {
    next: Arc<Mutex<Option<String>>>,
    answers: mpsc::UnboundedSender<Result<String, String>>,
}

/// One invocation of a spawned bootstrap.
#[derive(Debug)]
pub struct Served {
    /// The response body, or the error the function reported.
    pub answer: Result<String, String>,
    /// From spawn to the answer.
    pub took: Duration,
    /// The process's peak RSS (VmHWM, KiB), read before it was killed.
    pub peak_rss_kib: u64,
    /// What it wrote to stdout (Lambda's log stream: log lines, EMF documents).
    pub stdout: String,
    /// What it wrote to stderr.
    pub stderr: String,
}

impl RuntimeApi {
    /// Starts the API.
    pub async fn start() -> Self {
        let next = Arc::new(Mutex::new(None));
        let (tx, rx) = mpsc::unbounded_channel();
        let state = ApiState {
            next: Arc::clone(&next),
            answers: tx,
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next_event))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(|State(s): State<ApiState>, body: String| async move {
                    let _ = s.answers.send(Ok(body));
                    "{}"
                }),
            )
            .route(
                "/2018-06-01/runtime/invocation/{id}/error",
                post(|State(s): State<ApiState>, body: String| async move {
                    let _ = s.answers.send(Err(body));
                    "{}"
                }),
            )
            .route(
                "/2018-06-01/runtime/init/error",
                post(|State(s): State<ApiState>, body: String| async move {
                    let _ = s.answers.send(Err(format!("init error: {body}")));
                    "{}"
                }),
            )
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            addr,
            next,
            answers: Arc::new(tokio::sync::Mutex::new(rx)),
        }
    }

    /// Spawns `bin` against this API with Lambda's variables, `env` added, and `event` queued;
    /// returns once it has answered, with its output.
    pub async fn serve_one(&self, bin: &str, env: &[(&str, &str)], event: &str) -> Served {
        *self.next.lock().expect("lock") = Some(event.to_owned());
        let mut answers = self.answers.lock().await;
        let started = Instant::now();
        let mut child = tokio::process::Command::new(bin)
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", &self.addr)
            .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/bench")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "bench")
            .env("AWS_SECRET_ACCESS_KEY", "bench")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let answer = tokio::time::timeout(Duration::from_secs(60), answers.recv())
            .await
            .unwrap_or_else(|_| panic!("{bin} did not answer within 60 s"))
            .expect("channel open");
        let took = started.elapsed();
        let peak_rss_kib = child.id().map_or(0, vm_hwm_kib);
        let _ = child.start_kill();
        let output = child.wait_with_output().await.expect("output");
        Served {
            answer,
            took,
            peak_rss_kib,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

async fn next_event(State(s): State<ApiState>) -> impl IntoResponse {
    let event = s.next.lock().expect("lock").take();
    match event {
        Some(body) => {
            let deadline = SystemClock.now_ms() + 60_000;
            let mut headers = HeaderMap::new();
            let mut put = |k: &'static str, v: String| {
                headers.insert(k, v.parse().expect("header value"));
            };
            put("lambda-runtime-aws-request-id", REQUEST_ID.into());
            put("lambda-runtime-deadline-ms", deadline.to_string());
            put("lambda-runtime-invoked-function-arn", FUNCTION_ARN.into());
            put("lambda-runtime-trace-id", TRACE_HEADER.into());
            (headers, body)
        }
        // One event per process: later polls wait until the process is killed.
        None => std::future::pending().await,
    }
}

/// A process's peak RSS (VmHWM), KiB; 0 when it cannot be read.
fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
