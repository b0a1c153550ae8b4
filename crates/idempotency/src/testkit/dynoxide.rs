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
        client_for(&self.endpoint())
    }
}

/// A DynamoDB client for `endpoint` (a server, or a proxy in front of one): static test
/// credentials, plain HTTP, the SDK's standard retries.
pub fn client_for(endpoint: &str) -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "testkit"))
        .endpoint_url(endpoint)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(config)
}

/// The store's own client ([`DirectClient`](crate::dynamodb::DirectClient)) for `endpoint`:
/// the same region, test credentials and standard retries as [`client_for`]'s, over the SDK's
/// plain-HTTP connector.
///
/// # Panics
///
/// Never for this configuration (a region and credentials are set).
pub fn direct_client_for(endpoint: &str) -> crate::dynamodb::DirectClient {
    use aws_sdk_dynamodb::config::SharedCredentialsProvider;
    let sdk = aws_config::SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "test", "test", None, None, "testkit",
        )))
        .endpoint_url(endpoint)
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::standard())
        .build();
    let connector = aws_smithy_http_client::Connector::builder().build_http();
    crate::dynamodb::DirectClient::new(
        &sdk,
        aws_smithy_runtime_api::client::http::SharedHttpConnector::new(connector),
    )
    .expect("a region and credentials are set")
}

/// Which client a test's store writes through.
#[derive(Debug, Clone, Copy)]
pub enum Via {
    /// The SDK's client ([`client_for`]).
    Sdk,
    /// The store's own ([`direct_client_for`]).
    Direct,
    /// A store the caller makes from the endpoint and the table (its own client on a
    /// transport of its own, say).
    Store(fn(&str, &str) -> crate::DynamoDbStore),
}

impl Via {
    /// A store on `table` at `endpoint` through this client.
    pub fn store(self, endpoint: &str, table: &str) -> crate::DynamoDbStore {
        match self {
            Self::Sdk => crate::DynamoDbStore::new(client_for(endpoint), table, super::RETENTION),
            Self::Direct => {
                crate::DynamoDbStore::direct(direct_client_for(endpoint), table, super::RETENTION)
            }
            Self::Store(make) => make(endpoint, table),
        }
    }
}

/// A TCP proxy in front of a server that can lose answers: for each of the next `n`
/// connections ([`LossyProxy::lose_next_answers`]) it forwards the request, waits until the
/// server has begun to answer (so the server has applied it), then resets the connection
/// without passing the answer on. The client sees a write whose outcome it cannot know, and the
/// SDK retries it: the ambiguous outcome of a real network.
pub struct LossyProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    to_lose: std::sync::Arc<AtomicUsize>,
    lost: std::sync::Arc<AtomicUsize>,
}

impl LossyProxy {
    /// A proxy to `upstream` on a free loopback port, losing nothing until told to.
    ///
    /// # Panics
    ///
    /// When no port can be bound: a test set-up failure.
    pub async fn start(upstream: SocketAddr) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        let to_lose = std::sync::Arc::new(AtomicUsize::new(0));
        let lost = std::sync::Arc::new(AtomicUsize::new(0));
        let (lose, count) = (to_lose.clone(), lost.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let losing = lose
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                let count = count.clone();
                tokio::spawn(async move {
                    if !losing {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        return;
                    }
                    let (mut client_read, _client_write) = client.split();
                    let (mut server_read, mut server_write) = server.split();
                    let forward = tokio::io::copy(&mut client_read, &mut server_write);
                    let mut first = [0u8; 1];
                    tokio::select! {
                        _ = forward => {}
                        answered = server_read.read(&mut first) => {
                            if matches!(answered, Ok(n) if n > 0) {
                                count.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                    }
                    let _ = server_write.shutdown().await;
                    // Closed with RST, the answer never passed on.
                    let _ = client.set_zero_linger();
                });
            }
        });
        Self {
            addr,
            to_lose,
            lost,
        }
    }

    /// The endpoint URL for an SDK client.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Loses the answers on the next `n` connections.
    pub fn lose_next_answers(&self, n: usize) {
        self.to_lose.store(n, Ordering::SeqCst);
    }

    /// Answers the server gave and the proxy lost so far.
    pub fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
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
