//! The command line: Lambda mode (no arguments), one-shot mode (`--event FILE`, `-` for stdin),
//! or the long-polling worker (`worker --queue-url URL`).

use std::io::Read;

use crate::app::App;
use lambda_kit::{Clock, SystemClock};
use sqs_batch::edge::EventError;

/// The time a one-shot run gets, as if it were an invocation with Lambda's longest timeout.
pub const ONE_SHOT_BUDGET_MS: u64 = 900_000;

/// The command line's usage, printed with `--help` and after a usage error.
pub const USAGE: &str = "usage: process-orders [--event FILE|-]
       process-orders worker --queue-url URL
  no arguments   serve as an AWS Lambda function (Runtime API)
  --event FILE   process one SQS event from FILE ('-' for stdin) and print the response JSON
  worker         consume the queue at URL by long polling (ECS, EKS, EC2) until SIGTERM";

/// How the binary runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Under Lambda's Runtime API (no arguments).
    Lambda,
    /// One event from a file (`-`: stdin), the response on stdout.
    OneShot {
        /// The event file, or `-`.
        source: String,
    },
    /// A long-polling consumer of one queue, until SIGTERM or SIGINT.
    Worker {
        /// The queue's URL.
        queue_url: String,
    },
    /// `--help`.
    Help,
}

/// Why the one-shot mode or the command line failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The arguments are wrong.
    #[error("{0}\n{USAGE}")]
    Usage(String),
    /// The event could not be read.
    #[error("cannot read the event from {source_name}")]
    Read {
        /// The file name, or `stdin`.
        source_name: String,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// The event is not an SQS event.
    #[error(transparent)]
    Event(#[from] EventError),
    /// The response could not be written as JSON.
    #[error("cannot write the response")]
    Encode(#[source] serde_json::Error),
}

/// Reads the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Mode, CliError> {
    let mut args = args.into_iter();
    match (args.next().as_deref(), args.next(), args.next()) {
        (None, _, _) => Ok(Mode::Lambda),
        (Some("-h" | "--help"), None, _) => Ok(Mode::Help),
        (Some("--event"), Some(source), None) => Ok(Mode::OneShot { source }),
        (Some("--event"), None, _) => Err(CliError::Usage("--event needs a file or '-'".into())),
        (Some("worker"), Some(flag), Some(queue_url)) if flag == "--queue-url" => {
            match args.next() {
                None if !queue_url.is_empty() => Ok(Mode::Worker { queue_url }),
                None => Err(CliError::Usage("--queue-url needs a URL".into())),
                Some(other) => Err(CliError::Usage(format!("unexpected argument {other:?}"))),
            }
        }
        (Some("worker"), _, _) => Err(CliError::Usage("worker needs --queue-url URL".into())),
        (Some(other), _, _) => Err(CliError::Usage(format!("unexpected argument {other:?}"))),
    }
}

/// Processes the event in `source` once and returns the response JSON.
pub async fn run_once(app: &App, source: &str) -> Result<String, CliError> {
    let text = read_source(source)?;
    let deadline_ms = SystemClock.now_ms().saturating_add(ONE_SHOT_BUDGET_MS);
    let response = tracing::Instrument::instrument(
        app.handle_json(&text, deadline_ms),
        crate::telemetry::invocation_span("one-shot", ""),
    )
    .await?;
    serde_json::to_string(&response).map_err(CliError::Encode)
}

fn read_source(source: &str) -> Result<String, CliError> {
    let read = |source_name: &str, result: std::io::Result<String>| {
        result.map_err(|e| CliError::Read {
            source_name: source_name.to_owned(),
            source: e,
        })
    };
    if source == "-" {
        let mut text = String::new();
        let result = std::io::stdin().read_to_string(&mut text).map(|_| text);
        read("stdin", result)
    } else {
        read(source, std::fs::read_to_string(source))
    }
}

/// Whether Lambda's logging controls ask for JSON (`AWS_LAMBDA_LOG_FORMAT=JSON`), read as
/// lambda_runtime's default subscriber reads it.
pub fn json_logs() -> bool {
    std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|format| format.eq_ignore_ascii_case("json"))
}

/// In JSON log format, a panic becomes one JSON line at level ERROR (its message and location)
/// through the subscriber, instead of the default hook's plain text: Logs Insights queries on
/// `level` find it. A record's panic is still caught and retried; this only changes its line.
pub fn log_panics_as_json() {
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(a panic without a message)");
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(panic = message, location, "panicked");
    }));
}

/// Reports why the binary cannot go on: a JSON ERROR line through the subscriber when logs are
/// JSON and the subscriber is up (`logging`), otherwise one plain line on stderr.
pub fn report_failure(error: &dyn std::error::Error, logging: bool) {
    let chain = lambda_kit::error_chain(error);
    if logging && json_logs() {
        tracing::error!(error = %chain, "process-orders: {chain}");
    } else {
        eprintln!("process-orders: {chain}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Mode, CliError> {
        parse_args(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn modes() {
        assert_eq!(args(&[]).expect("lambda"), Mode::Lambda);
        assert_eq!(args(&["--help"]).expect("help"), Mode::Help);
        assert_eq!(
            args(&["--event", "-"]).expect("stdin"),
            Mode::OneShot { source: "-".into() }
        );
        assert!(matches!(args(&["--event"]), Err(CliError::Usage(_))));
        assert!(matches!(args(&["--evnt", "x"]), Err(CliError::Usage(_))));
        assert!(matches!(
            args(&["--event", "a", "b"]),
            Err(CliError::Usage(_))
        ));
        assert_eq!(
            args(&["worker", "--queue-url", "http://q"]).expect("worker"),
            Mode::Worker {
                queue_url: "http://q".into()
            }
        );
        for wrong in [
            &["worker"][..],
            &["worker", "--queue-url"],
            &["worker", "--queue-url", ""],
            &["worker", "--queue", "http://q"],
            &["worker", "--queue-url", "http://q", "extra"],
        ] {
            assert!(matches!(args(wrong), Err(CliError::Usage(_))), "{wrong:?}");
        }
    }
}
