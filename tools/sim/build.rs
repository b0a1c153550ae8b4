//! The simulator's planted-bug tests run only where the bugs are compiled in: in the planted
//! tree (`scripts/planted_tree.py`), lambda-kit's build script sets `--cfg sim_mutations` from
//! `PROCESS_ORDERS_SIM_MUTATIONS=1`, and this one reads the same variable, so the tests are
//! ignored (visibly, never passing for nothing) otherwise. `tests/it/main.rs` checks that both
//! agree (`planted::ENABLED`).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(sim_mutations)");
    println!("cargo::rerun-if-env-changed=PROCESS_ORDERS_SIM_MUTATIONS");
    if std::env::var_os("PROCESS_ORDERS_SIM_MUTATIONS").is_some_and(|v| v == "1") {
        println!("cargo::rustc-cfg=sim_mutations");
    }
}
