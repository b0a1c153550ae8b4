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
//! - [`error_chain`]: an error and its sources on one line, for a log field.
//! - [`Fnv1a`]: a hash that stays the same across builds and platforms, for what is stored.
//!
//! ```
//! use lambda_kit::{Clock, Env, ManualClock};
//!
//! let clock = ManualClock::at(1_000);
//! clock.advance_ms(500);
//! assert_eq!(clock.now_ms(), 1_500);
//!
//! let env = Env::new(|name| (name == "SQS_BATCH_MAX_CONCURRENCY").then(|| "32".to_owned()));
//! assert_eq!(env.ranged("SQS_BATCH_MAX_CONCURRENCY", 16, 1, 1_000), Ok(32));
//! ```

#![warn(missing_docs)]

// The README's example is a doctest too, so the crate's front page cannot drift from its API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod clock;
pub mod env;

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

/// FNV-1a, 64 bits: stable across builds and platforms (what it hashes is stored for weeks and
/// compared later), cheap, and not for anything an adversary could exploit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// An empty hash.
    pub const fn new() -> Self {
        Self(Self::OFFSET)
    }

    /// Hashes `bytes` in.
    pub fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    /// The hash so far.
    pub const fn finish(self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

/// As a map's hasher (`BuildHasherDefault<Fnv1a>`), for maps of short keys that no adversary
/// chooses: a few multiplications where the standard hasher's SipHash rounds cost several
/// times as much on a key of ten bytes.
impl std::hash::Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        Fnv1a::write(self, bytes);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv1a_is_the_published_function() {
        // The FNV test vectors for 64-bit FNV-1a.
        let hash = |text: &str| {
            let mut h = super::Fnv1a::new();
            h.write(text.as_bytes());
            h.finish()
        };
        assert_eq!(hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn as_a_map_hasher_it_is_the_same_function() {
        use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
        let mut h = super::Fnv1a::default();
        Hasher::write(&mut h, b"foobar");
        assert_eq!(Hasher::finish(&h), 0x8594_4171_f739_67e8);
        // A map's key is hashed as its bytes and str's terminator (0xff), nothing else.
        let build = BuildHasherDefault::<super::Fnv1a>::default();
        let mut expected = super::Fnv1a::new();
        expected.write(b"o-1\xff");
        assert_eq!(build.hash_one("o-1"), expected.finish());
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn an_error_chain_names_every_source() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(super::error_chain(&error), "outer: inner");
    }
}
