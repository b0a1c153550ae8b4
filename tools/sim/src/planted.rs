//! The planted bugs' switch. This tree has no planted bug: the crates that ship hold none. The
//! bugs are `tools/sim/planted.patch`, which `scripts/planted-tree.sh` applies to a copy of the
//! repository (for `make test`'s planted-bug tests and `make sim MUTATION=...`); in that copy
//! this module is lambda-kit's switch, and the check sites are in the real code.

/// Whether this build has the planted bugs: never, in this tree. A run that asks for one
/// refuses rather than pass for nothing.
pub const ENABLED: bool = false;

/// Runs `f`; no mutation can be switched on here, so no check site is ever hit (0).
pub fn with<T>(_name: Option<&'static str>, f: impl FnOnce() -> T) -> (T, u64) {
    (f(), 0)
}
