//! dynoxide, a DynamoDB-compatible server, embedded in the test process (feature
//! `testkit-dynamodb`): the real SDK speaks the DynamoDB protocol to it over loopback, so a
//! store is proven on a real server without Docker or Python.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use tokio::sync::oneshot;

/// dynoxide served from inside the test process, on a port of its own. The server stops when
/// this is dropped or [`Dynoxide::stop`]ped.
pub struct Dynoxide {
    /// Where it listens.
    pub addr: SocketAddr,
    db: dynoxide::Database,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Dynoxide {
    /// Starts an empty in-memory server on a free loopback port.
    ///
    /// # Panics
    ///
    /// When no port can be bound or the database cannot be opened: a test set-up failure.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        let db = dynoxide::Database::memory().expect("an in-memory database");
        let mut server = Self {
            addr,
            db,
            shutdown: None,
            task: None,
        };
        server.serve(listener);
        server
    }

    /// The endpoint URL for an SDK client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (tx, rx) = oneshot::channel::<()>();
        let db = self.db.clone();
        self.shutdown = Some(tx);
        self.task = Some(tokio::spawn(async move {
            let _ = dynoxide::server::serve_with_shutdown(listener, db, async {
                let _ = rx.await;
            })
            .await;
        }));
    }

    /// Stops serving; the data stays for [`Dynoxide::restart`].
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Serves the same data on the same address again.
    ///
    /// # Panics
    ///
    /// When the address cannot be bound again.
    pub async fn restart(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("rebind the same address");
        self.serve(listener);
    }

    /// A DynamoDB client for this server: static test credentials, plain HTTP.
    pub fn client(&self) -> Client {
        let config = aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "testkit"))
            .endpoint_url(self.endpoint())
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .build();
        Client::from_conf(config)
    }
}

impl Drop for Dynoxide {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A table name no other test of this process uses.
pub fn unique_table() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "idem-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}
