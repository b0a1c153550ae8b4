//! What the two command-line tools share: SQS administration (a queue by name or URL, its DLQ,
//! its depth), the tools' logging and progress bars, their AWS configuration and their error.
//! Both `local-esm` (the emulator) and `orders-ops` (the on-call tool) sit on it, so the on-call
//! tool never compiles the emulator or the batch testkit.

#![warn(missing_docs)]

pub mod queues;

/// The AWS SDK configuration the tools use: the function's own (reqwest over the compiled-in
/// roots), with an endpoint for local servers.
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

/// An error of the tools, with its source.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// An AWS call failed; `what` says which.
    #[error("{what}")]
    Aws {
        /// What the tool was doing.
        what: String,
        /// The SDK's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Anything else, said in words.
    #[error("{0}")]
    Other(String),
}

/// What kind of failure an error is, for a command line's exit code (the AWS CLI's classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// The service answered with an error (no such queue, access denied, throttled).
    Service,
    /// The request could not be made from this configuration (no region, no credentials, a
    /// malformed endpoint): nothing reached the service.
    Configuration,
    /// Anything else: the network, a timeout, an answer that could not be read.
    Other,
}

impl ToolError {
    /// Which class of failure this is: an AWS call's is read from the SDK's error kind (its
    /// display names it: "service error", "failed to construct request", ...).
    pub fn class(&self) -> FailureClass {
        match self {
            Self::Aws { source, .. } => match source.to_string().as_str() {
                "service error" => FailureClass::Service,
                "failed to construct request" => FailureClass::Configuration,
                _ => FailureClass::Other,
            },
            Self::Other(_) => FailureClass::Other,
        }
    }

    /// An AWS call's failure, saying what the tool was doing.
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
