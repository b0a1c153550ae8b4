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

/// The tools' `--name value` arguments; the names in `switches` take no value (`"true"`).
pub fn parse_flags(
    args: &[String],
    switches: &[&str],
) -> Result<std::collections::HashMap<String, String>, String> {
    let mut map = std::collections::HashMap::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {flag:?}"))?;
        let value = if switches.contains(&name) {
            "true".to_owned()
        } else {
            it.next()
                .ok_or_else(|| format!("--{name} needs a value"))?
                .clone()
        };
        map.insert(name.to_owned(), value);
    }
    Ok(map)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_take_values_and_switches_take_none() {
        let args: Vec<String> = ["--queue", "q", "--yes", "--rate", "5"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let flags = parse_flags(&args, &["yes"]).expect("parsed");
        assert_eq!(flags.get("queue").map(String::as_str), Some("q"));
        assert_eq!(flags.get("yes").map(String::as_str), Some("true"));
        assert_eq!(flags.get("rate").map(String::as_str), Some("5"));
        assert!(
            parse_flags(&args[..1], &[]).is_err(),
            "a flag without its value"
        );
        assert!(parse_flags(&["q".to_owned()], &[]).is_err(), "a bare word");
    }
}
