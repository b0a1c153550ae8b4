//! Planted bugs for the simulator (issue 30's "teeth"): a check site in the real code asks
//! [`active`] whether its named mutation is switched on, and if so does the wrong thing on
//! purpose. The simulator switches one mutation on for a run and must find a seed that breaks
//! an invariant; a simulator that cannot is proving nothing.
//!
//! The bugs are compiled in only under `--cfg sim_mutations`, which lambda-kit's build script
//! sets when the environment variable `PROCESS_ORDERS_SIM_MUTATIONS` is `1` (the Makefile's
//! `test`, `sim` and `mutants` set it; nothing on the release path does, and `tests/it/layout.rs`
//! checks both). Not a Cargo feature: features are unified, so one crate anywhere in a user's
//! graph turning it on would plant the bugs for every crate there. Without the cfg, [`ENABLED`]
//! is `false`, [`active`] is a constant `false` and every check site compiles away; [`with`]
//! still exists (it runs its closure and counts no hit), so the simulator builds either way.
//! With it, the switch is per thread, so a simulation (one thread, a current-thread runtime)
//! mutates only itself and tests running beside it on other threads see the real code.

/// Whether this build has the planted bugs (`--cfg sim_mutations`): a caller that needs one
/// (the simulator's `MUTATION=`) must refuse to run without them rather than pass for nothing.
pub const ENABLED: bool = cfg!(sim_mutations);

#[cfg(sim_mutations)]
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

#[cfg(sim_mutations)]
pub use switch::{active, with};

/// Whether the named mutation is on: never, without `--cfg sim_mutations`.
#[cfg(not(sim_mutations))]
#[inline(always)]
pub const fn active(_name: &'static str) -> bool {
    false
}

/// Runs `f`; without `--cfg sim_mutations` no mutation can be switched on, so no check site is
/// ever hit (0). A caller that asked for one learns it from [`ENABLED`], or from the 0.
#[cfg(not(sim_mutations))]
pub fn with<T>(_name: Option<&'static str>, f: impl FnOnce() -> T) -> (T, u64) {
    (f(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(
        not(sim_mutations),
        ignore = "planted bugs are compiled out: set PROCESS_ORDERS_SIM_MUTATIONS=1"
    )]
    fn a_mutation_is_on_only_inside_its_scope_and_its_hits_are_counted() {
        assert!(!active("m"));
        let (seen, hits) = with(Some("m"), || (active("m"), active("other"), active("m")));
        assert_eq!(seen, (true, false, true));
        assert_eq!(hits, 2);
        assert!(!active("m"), "switched off after the scope");
    }

    /// `active` stays a `const fn` without the cfg, so a check site is a constant `false`.
    #[cfg(not(sim_mutations))]
    #[test]
    fn without_the_cfg_nothing_is_ever_on_and_with_only_runs_its_closure() {
        const { assert!(!ENABLED) };
        const { assert!(!active("m")) };
        let (seen, hits) = with(Some("m"), || active("m"));
        assert!(!seen);
        assert_eq!(hits, 0);
    }
}
