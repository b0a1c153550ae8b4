//! A redis-server of the test process's own (feature `testkit-redis`): started on first use on a
//! free loopback port, keeping nothing on disk, and stopped by the kernel when the test process
//! exits, whether the tests passed, failed or panicked. Each store gets a key prefix of its own
//! ([`store`]), so every test starts from an empty store on the one server.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::RedisStore;

/// How to get the server, for the message when it is missing.
const INSTALL: &str = "install it (Debian, Ubuntu: `sudo apt-get install -y redis-server`; \
    `make test` does), or set REDIS_SERVER to a redis-server or valkey-server";

/// The server's URL, `redis://127.0.0.1:{port}/`; the server starts on the first call.
///
/// # Panics
///
/// When the server cannot be started (not installed: the message says how to install it).
pub fn url() -> String {
    static SERVER: OnceLock<Result<u16, String>> = OnceLock::new();
    let port = SERVER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        // The kernel stops the server when the thread that started it ends (PR_SET_PDEATHSIG),
        // so it is started from a thread that lives as long as the process.
        std::thread::spawn(move || match spawn() {
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
    });
    match port {
        Ok(port) => format!("redis://127.0.0.1:{port}/"),
        Err(e) => panic!("{e}"),
    }
}

/// A managed connection to the server, for the calling test's runtime (the connection's task
/// lives on it). Its response timeout is long: two cores shared by many tests are slower than
/// a server next to its clients.
///
/// # Panics
///
/// When the server cannot be started or reached.
pub async fn connection() -> ConnectionManager {
    let client = ::redis::Client::open(url()).expect("the server's URL");
    let config = ConnectionManagerConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
    ConnectionManager::new_with_config(client, config)
        .await
        .expect("connect to the test's redis-server")
}

/// A key prefix no other store of this process uses.
pub fn unique_prefix() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "idem-{}-{}#",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh, empty store with [`RETENTION`](super::RETENTION), on a connection of its own.
pub async fn store() -> RedisStore {
    RedisStore::new(connection().await, super::RETENTION).with_key_prefix(unique_prefix())
}

/// The server: `REDIS_SERVER`, else `redis-server` or `valkey-server` on `PATH`.
fn program() -> Result<std::path::PathBuf, String> {
    if let Some(program) = std::env::var_os("REDIS_SERVER") {
        return Ok(program.into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["redis-server", "valkey-server"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| format!("redis-server not found on PATH: {INSTALL}"))
}

fn spawn() -> Result<(std::process::Child, u16), String> {
    use std::os::unix::process::CommandExt;
    let program = program()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let mut command = std::process::Command::new(&program);
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        // Nothing on disk: no snapshots, no append-only file.
        .args(["--save", "", "--appendonly", "no"])
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
    let program = program.display();
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {program} ({e}): {INSTALL}"))?;
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
