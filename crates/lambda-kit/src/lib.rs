//! # lambda-kit
//!
//! The few things every crate of this workspace needs and none of them owns.
//!
//! ## Layout
//!
//! - [`clock`]: injected time in epoch milliseconds ([`Clock`], [`SystemClock`],
//!   [`ManualClock`]), so leases, TTLs and deadlines are decided without sleeping in tests.
//! - [`env`](mod@env): settings read from the environment once, each component its own, with errors that
//!   name the variable ([`Env`], [`EnvError`]).
//! - [`mutation`]: planted bugs the simulator must catch, compiled out unless the `mutations`
//!   feature is on (only the simulator turns it on).
//! - [`error_chain`]: an error and its sources on one line, for a log field.
//!
//! ```
//! use lambda_kit::{Clock, Env, ManualClock};
//!
//! let clock = ManualClock::at(1_000);
//! clock.advance_ms(500);
//! assert_eq!(clock.now_ms(), 1_500);
//!
//! let env = Env::new(|name| (name == "MAX_CONCURRENCY").then(|| "32".to_owned()));
//! assert_eq!(env.ranged("MAX_CONCURRENCY", 16, 1, 1_000), Ok(32));
//! ```

#![warn(missing_docs)]

pub mod clock;
pub mod env;
pub mod mutation;

pub use clock::{Clock, ManualClock, SystemClock};
pub use env::{Env, EnvError};

/// An error and its sources on one line (`outer: inner: innermost`), for the log.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn an_error_chain_names_every_source() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&error), "outer: inner");
    }
}
