//! `make sim`: many seeds of the simulation, with progress and a summary table.
//! `ORDERS` orders in all (default 1,000,000), `SEEDS` seeds (default 100), each run with
//! `SimSettings::faulty`. Exits 1 and names the seed when any run breaks an invariant.

use std::time::Instant;

use sim::{Faults, SimSettings, run};

fn var(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn main() {
    let orders = var("ORDERS", 1_000_000);
    let seeds = var("SEEDS", 100).max(1);
    let first_seed = var("FIRST_SEED", 1);
    let per_seed = usize::try_from(orders / seeds).unwrap_or(usize::MAX).max(1);
    let started = Instant::now();
    let (mut total, mut invocations, mut crashes, mut sim_ms, mut dlq) = (0, 0, 0, 0u64, 0);
    let mut faults = Faults::default();
    let mut broken = Vec::new();
    for seed in first_seed..first_seed + seeds {
        let report = run(&SimSettings::faulty(seed, per_seed));
        total += report.orders;
        invocations += report.invocations;
        crashes += report.crashes;
        sim_ms += report.sim_ms;
        dlq += report.in_dlq;
        faults.store_errors += report.faults.store_errors;
        faults.store_answers_lost += report.faults.store_answers_lost;
        faults.charge_answers_lost += report.faults.charge_answers_lost;
        faults.outage_refusals += report.faults.outage_refusals;
        faults.duplicate_deliveries += report.faults.duplicate_deliveries;
        let transient: Vec<_> = report
            .dlq_reasons
            .keys()
            .filter(|r| **r != "needs_reconciliation")
            .collect();
        if !report.double_charged.is_empty() || !report.lost.is_empty() || !transient.is_empty() {
            broken.push(format!(
                "seed {seed}: charged twice {:?}, lost {:?}, transient in the DLQ {transient:?} \
                 (replay: SEEDS=1 FIRST_SEED={seed} ORDERS={per_seed} make sim)",
                report.double_charged, report.lost
            ));
        }
        eprintln!(
            "seed {seed}: {} orders, {} invocations, digest {:016x}",
            report.orders, report.invocations, report.digest
        );
    }
    let wall = started.elapsed().as_secs_f64();
    println!("| measure | value |");
    println!("|---|---|");
    println!("| seeds | {seeds} |");
    println!("| orders | {total} |");
    println!("| invocations | {invocations} |");
    println!("| crashes | {crashes} |");
    println!("| store errors | {} |", faults.store_errors);
    println!("| store answers lost | {} |", faults.store_answers_lost);
    println!("| charge answers lost | {} |", faults.charge_answers_lost);
    println!("| outage refusals | {} |", faults.outage_refusals);
    println!("| duplicate deliveries | {} |", faults.duplicate_deliveries);
    println!("| in the DLQ (needs_reconciliation) | {dlq} |");
    println!("| simulated time | {:.1} h |", sim_ms as f64 / 3_600_000.0);
    println!("| wall time | {wall:.1} s |");
    println!(
        "| simulated orders per second | {:.0} |",
        total as f64 / wall
    );
    println!("| invariants broken | {} |", broken.len());
    if !broken.is_empty() {
        for line in &broken {
            eprintln!("{line}");
        }
        std::process::exit(1);
    }
}
