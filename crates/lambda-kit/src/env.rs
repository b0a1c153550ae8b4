//! Settings read from the environment once, at start-up.
//!
//! Each component reads its own variables (a `from_env` beside the code that uses them) through
//! an [`Env`], and the application composes them. A bad value is an [`EnvError`] naming the
//! variable, so start-up stops with a message an operator can act on; nothing fails later.

use std::fmt::Display;
use std::str::FromStr;

/// A variable's value by name.
type Lookup<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// Where settings come from: the process environment, or a lookup function (tests).
pub struct Env<'a>(Box<Lookup<'a>>);

impl std::fmt::Debug for Env<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Env")
    }
}

/// A value that cannot be used, named by its variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// The value does not parse or is out of range.
    #[error("{var}={value:?} is invalid: {expected}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// The value as given (or a placeholder when it must not be shown).
        value: String,
        /// What would have been accepted.
        expected: String,
    },
    /// The value asks for something this build cannot do: a crate feature left out, say.
    #[error("{var}={value:?} needs {needs}")]
    Unsupported {
        /// The variable.
        var: &'static str,
        /// The value as given.
        value: String,
        /// What it needs, and how to get it.
        needs: String,
    },
}

impl EnvError {
    /// `var` holds `value`, which needs `needs` (a feature this build was compiled without).
    pub fn unsupported(var: &'static str, value: &str, needs: impl Into<String>) -> Self {
        Self::Unsupported {
            var,
            value: value.to_owned(),
            needs: needs.into(),
        }
    }

    /// `var` holds `value`, which is not `expected`.
    pub fn invalid(var: &'static str, value: &str, expected: impl Into<String>) -> Self {
        Self::Invalid {
            var,
            value: value.to_owned(),
            expected: expected.into(),
        }
    }
}

impl<'a> Env<'a> {
    /// Settings through `lookup`, so tests need not touch the process environment.
    pub fn new(lookup: impl Fn(&str) -> Option<String> + 'a) -> Self {
        Self(Box::new(lookup))
    }

    /// The process environment.
    pub fn process() -> Env<'static> {
        Env::new(|name| std::env::var(name).ok())
    }

    /// A set, non-blank value.
    pub fn text(&self, name: &str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    /// An integer in `[min, max]`, or `default` when unset.
    pub fn ranged<T>(&self, var: &'static str, default: T, min: T, max: T) -> Result<T, EnvError>
    where
        T: FromStr + PartialOrd + Copy + Display,
    {
        let Some(raw) = self.text(var) else {
            return Ok(default);
        };
        match raw.trim().parse::<T>() {
            Ok(v) if v >= min && v <= max => Ok(v),
            _ => Err(EnvError::invalid(
                var,
                &raw,
                format!("an integer from {min} to {max}"),
            )),
        }
    }

    /// `true`/`1` or `false`/`0`, or `default` when unset.
    pub fn flag(&self, var: &'static str, default: bool) -> Result<bool, EnvError> {
        match self.text(var).as_deref() {
            None => Ok(default),
            Some("1" | "true") => Ok(true),
            Some("0" | "false") => Ok(false),
            Some(v) => Err(EnvError::invalid(var, v, "true/1 or false/0")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> Env<'static> {
        Env::new(move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn values_are_read_with_their_defaults_and_bounds() {
        let e = env(&[("N", "7"), ("BLANK", "  "), ("F", "1")]);
        assert_eq!(e.ranged("N", 1u32, 1, 10), Ok(7));
        assert_eq!(e.ranged("UNSET", 3u32, 1, 10), Ok(3));
        assert_eq!(e.ranged("BLANK", 3u32, 1, 10), Ok(3));
        assert_eq!(e.flag("F", false), Ok(true));
        assert_eq!(e.flag("UNSET", true), Ok(true));
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        let e = env(&[("N", "70"), ("F", "maybe")]);
        let err = e.ranged("N", 1u32, 1, 10).expect_err("out of range");
        assert_eq!(
            err.to_string(),
            "N=\"70\" is invalid: an integer from 1 to 10"
        );
        assert!(
            e.flag("F", false)
                .expect_err("bad")
                .to_string()
                .starts_with("F=")
        );
    }
}
