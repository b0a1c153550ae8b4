//! A local Lambda Runtime API for the tests and benchmarks: hands a spawned bootstrap queued
//! events with the headers Lambda sends (request id, deadline, function ARN, X-Ray trace header)
//! and takes its answers; between events a poll waits, as Lambda freezes a warm container.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use lambda_kit::{Clock, SystemClock};
use tokio::io::AsyncReadExt;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

/// The request id every invocation gets.
pub const REQUEST_ID: &str = "req-1";
/// The X-Ray trace header every invocation gets (`lambda-runtime-trace-id`).
pub const TRACE_HEADER: &str =
    "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
/// The function ARN every invocation names.
pub const FUNCTION_ARN: &str = "arn:aws:lambda:us-east-1:123456789012:function:bench";

type Answers = mpsc::UnboundedReceiver<Result<String, String>>;

/// The Runtime API, listening on 127.0.0.1.
#[derive(Clone)]
pub struct RuntimeApi {
    addr: String,
    queue: Arc<Queue>,
    answers: Arc<tokio::sync::Mutex<Answers>>,
}

/// The next event, and the process it is for.
#[derive(Default)]
struct Queue {
    next: Mutex<Option<String>>,
    queued: Notify,
    /// Counts spawned processes: a poll left over from a killed process never takes a later
    /// process's event.
    generation: AtomicU64,
}

#[derive(Clone)]
struct ApiState {
    queue: Arc<Queue>,
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
        let queue = Arc::new(Queue::default());
        let (tx, rx) = mpsc::unbounded_channel();
        let state = ApiState {
            queue: Arc::clone(&queue),
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
            queue,
            answers: Arc::new(tokio::sync::Mutex::new(rx)),
        }
    }

    /// Spawns `bin` against this API with Lambda's variables and `env` added; returns once it
    /// has answered `event`, with its output.
    pub async fn serve_one(&self, bin: &str, env: &[(&str, &str)], event: &str) -> Served {
        let mut bootstrap = self.spawn(bin, env).await;
        let answer = bootstrap.invoke(event).await;
        let took = bootstrap.started.elapsed();
        let peak_rss_kib = bootstrap.peak_rss_kib();
        let (stdout, stderr) = bootstrap.stop().await;
        Served {
            answer,
            took,
            peak_rss_kib,
            stdout,
            stderr,
        }
    }

    /// Spawns `bin` against this API with Lambda's variables and `env` added, to serve events
    /// one after another ([`Bootstrap::invoke`]) as a warm container does. The API serves this
    /// process alone until it is stopped.
    pub async fn spawn(&self, bin: &str, env: &[(&str, &str)]) -> Bootstrap<'_> {
        let answers = self.answers.lock().await;
        self.queue.generation.fetch_add(1, Ordering::SeqCst);
        *self.queue.next.lock().expect("lock") = None;
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
        let pid = child.id().expect("a running child");
        // Read as it is written, so a long-lived process never blocks on a full pipe.
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        Bootstrap {
            bin: bin.to_owned(),
            queue: Arc::clone(&self.queue),
            answers,
            child,
            pid,
            started,
            stdout,
            stderr,
        }
    }
}

/// A bootstrap spawned by [`RuntimeApi::spawn`]: one process, any number of invocations.
pub struct Bootstrap<'a> {
    bin: String,
    queue: Arc<Queue>,
    answers: tokio::sync::MutexGuard<'a, Answers>,
    child: tokio::process::Child,
    pid: u32,
    started: Instant,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

impl Bootstrap<'_> {
    /// Hands the process `event` and waits (60 s at most) for its answer: the response body,
    /// or the error it reported.
    pub async fn invoke(&mut self, event: &str) -> Result<String, String> {
        *self.queue.next.lock().expect("lock") = Some(event.to_owned());
        self.queue.queued.notify_waiters();
        tokio::time::timeout(Duration::from_secs(60), self.answers.recv())
            .await
            .unwrap_or_else(|_| panic!("{} did not answer within 60 s", self.bin))
            .expect("channel open")
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// CPU time the process has used so far, user and system, over all its threads (those that
    /// ended too): the kernel's process CPU clock, which `getrusage` and `/proc/<pid>/stat`
    /// report as well, read here in nanoseconds rather than 10 ms clock ticks.
    pub fn cpu_time(&self) -> Duration {
        process_cpu_time(self.pid)
    }

    /// The process's peak RSS (VmHWM, KiB); 0 when it cannot be read.
    pub fn peak_rss_kib(&self) -> u64 {
        vm_hwm_kib(self.pid)
    }

    /// Kills the process; what it wrote to stdout and to stderr.
    pub async fn stop(mut self) -> (String, String) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        let stdout = self.stdout.await.unwrap_or_default();
        let stderr = self.stderr.await.unwrap_or_default();
        (stdout, stderr)
    }
}

/// Everything `pipe` gives until it closes, as text.
fn drain(pipe: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>) -> JoinHandle<String> {
    tokio::spawn(async move {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes).await;
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// The CPU time of process `pid` (user and system, every thread): its CPU-time clock
/// (`clock_getcpuclockid`). A benchmark reads its own with `std::process::id()`.
pub fn process_cpu_time(pid: u32) -> Duration {
    let pid = libc::pid_t::try_from(pid).expect("a pid");
    let mut clock: libc::clockid_t = 0;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both calls only write the out-parameters they are given, which live on this stack.
    #[allow(unsafe_code)]
    let read = unsafe {
        libc::clock_getcpuclockid(pid, &mut clock) == 0 && libc::clock_gettime(clock, &mut now) == 0
    };
    assert!(
        read,
        "cannot read the CPU clock of process {pid}: {}",
        std::io::Error::last_os_error()
    );
    Duration::new(
        u64::try_from(now.tv_sec).expect("seconds"),
        u32::try_from(now.tv_nsec).expect("nanoseconds"),
    )
}

async fn next_event(State(s): State<ApiState>) -> impl IntoResponse {
    let generation = s.queue.generation.load(Ordering::SeqCst);
    let body = loop {
        let queued = s.queue.queued.notified();
        if s.queue.generation.load(Ordering::SeqCst) != generation {
            // The process that polled has been stopped: it waits until its connection drops.
            std::future::pending::<()>().await;
        }
        if let Some(body) = s.queue.next.lock().expect("lock").take() {
            break body;
        }
        // Between events: wait, as Lambda does with a frozen container.
        queued.await;
    };
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
