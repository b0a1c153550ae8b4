//! Local tools, not part of the Lambda function: an event source mapping that does what
//! Lambda's SQS poller does against a local SQS-compatible server (moto), the queue and table
//! set-up, and an order generator. `make demo` and the end-to-end tests use them.

pub mod esm;
pub mod queues;
pub mod send;
pub mod setup;

pub use process_orders::aws::local_config as sdk_config;

/// Logging for the command-line tools: `RUST_LOG` (default `warn`) to stderr, so their stdout
/// stays for results.
pub fn init_tool_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// A bar on stderr for the tools' work that can run past a few seconds (a redrive, the demo's
/// send and drain); hidden when stderr is not a terminal (a script, CI), so logs stay clean.
pub fn progress_bar(total: u64, what: &'static str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    let target = if std::io::stderr().is_terminal() {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let bar = indicatif::ProgressBar::with_draw_target(Some(total), target);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{elapsed_precise} [{bar:40}] {pos}/{len} {msg} (eta {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what);
    bar
}

/// An error of the local tools, with its source.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error("{what}")]
    Aws {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{0}")]
    Other(String),
}

impl LocalError {
    pub fn aws(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Aws {
            what: what.into(),
            source: Box::new(source),
        }
    }
}
