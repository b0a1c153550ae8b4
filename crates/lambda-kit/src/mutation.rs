//! Planted bugs for the simulator (issue 30's "teeth"): a check site in the real code asks
//! [`active`] whether its named mutation is switched on, and if so does the wrong thing on
//! purpose. The simulator switches one mutation on for a run and must find a seed that breaks
//! an invariant; a simulator that cannot is proving nothing.
//!
//! Without the `mutations` feature [`active`] is a constant `false` and every check site
//! compiles away; the feature is turned on only by the simulator crate, never by the function's
//! deployable build (`tests/it/layout.rs` checks the bootstrap's feature tree). With it, the
//! switch is per thread, so a simulation (one thread, a current-thread runtime) mutates only
//! itself and tests running beside it on other threads see the real code.

#[cfg(feature = "mutations")]
mod switch {
    use std::cell::Cell;

    thread_local! {
        static ACTIVE: Cell<Option<&'static str>> = const { Cell::new(None) };
        static HITS: Cell<u64> = const { Cell::new(0) };
    }

    /// Whether `name` is the mutation switched on for this thread; counts the hit.
    pub fn active(name: &'static str) -> bool {
        let on = ACTIVE.with(|a| a.get() == Some(name));
        if on {
            HITS.with(|h| h.set(h.get() + 1));
        }
        on
    }

    /// Runs `f` with `name` switched on (or none) on this thread; returns its result and how
    /// many times a check site found the mutation on, so a caller can tell a name that no site
    /// asks for (a typo, a removed site) from a mutation that was reached.
    pub fn with<T>(name: Option<&'static str>, f: impl FnOnce() -> T) -> (T, u64) {
        let before = ACTIVE.with(|a| a.replace(name));
        let hits_before = HITS.with(|h| h.replace(0));
        let out = f();
        let hits = HITS.with(|h| h.replace(hits_before));
        ACTIVE.with(|a| a.set(before));
        (out, hits)
    }
}

#[cfg(feature = "mutations")]
pub use switch::{active, with};

/// Whether the named mutation is on: never, without the `mutations` feature.
#[cfg(not(feature = "mutations"))]
#[inline(always)]
pub const fn active(_name: &'static str) -> bool {
    false
}

#[cfg(all(test, feature = "mutations"))]
mod tests {
    use super::*;

    #[test]
    fn a_mutation_is_on_only_inside_its_scope_and_its_hits_are_counted() {
        assert!(!active("m"));
        let (seen, hits) = with(Some("m"), || (active("m"), active("other"), active("m")));
        assert_eq!(seen, (true, false, true));
        assert_eq!(hits, 2);
        assert!(!active("m"), "switched off after the scope");
    }
}
