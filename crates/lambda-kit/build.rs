//! The simulator's planted bugs (`src/mutation.rs`) are compiled in only under `--cfg
//! sim_mutations`, which this script sets when `PROCESS_ORDERS_SIM_MUTATIONS=1`, and nothing
//! else sets. A Cargo feature would be unified across a user's whole dependency graph (any crate
//! enabling it would plant the bugs for everyone); RUSTFLAGS would rebuild every dependency.

/// The one variable that plants the bugs; only the simulator's runs (the Makefile's `test`,
/// `sim` and `mutants`) set it.
const VARIABLE: &str = "PROCESS_ORDERS_SIM_MUTATIONS";

fn main() {
    println!("cargo::rustc-check-cfg=cfg(sim_mutations)");
    println!("cargo::rerun-if-env-changed={VARIABLE}");
    if std::env::var_os(VARIABLE).is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=sim_mutations");
    }
}
