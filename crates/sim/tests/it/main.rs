//! The simulator's runs: a seed replays exactly, and seeds with crashes, outages, lost answers
//! and clock skew break neither exactly-once nor durability.

use sim::{SimSettings, run};

/// The same seed gives the same run, event for event; another seed another.
#[test]
fn a_seed_replays_exactly() {
    let a = run(&SimSettings::faulty(7, 300));
    let b = run(&SimSettings::faulty(7, 300));
    let c = run(&SimSettings::faulty(8, 300));
    assert_eq!(a.digest, b.digest, "seed 7 ran differently twice");
    assert_eq!(a.invocations, b.invocations);
    assert_ne!(a.digest, c.digest, "seeds 7 and 8 ran the same");
}

/// Over many seeds: no order charged twice by the provider's ledger, and none lost (each
/// charged, or its message in the DLQ); a two-minute outage within the retry schedule puts no
/// order in the DLQ.
#[test]
fn crashes_outages_lost_answers_and_skew_charge_every_order_once() {
    let seeds = 20;
    let mut orders = 0;
    let mut invocations = 0;
    let mut crashes = 0;
    let mut reconciliation = 0;
    for seed in 1..=seeds {
        let report = run(&SimSettings::faulty(seed, 500));
        assert!(
            report.double_charged.is_empty(),
            "seed {seed}: charged twice: {:?} (replay: SimSettings::faulty({seed}, 500))",
            report.double_charged
        );
        assert!(
            report.lost.is_empty(),
            "seed {seed}: lost: {:?} (replay: SimSettings::faulty({seed}, 500))",
            report.lost
        );
        // Only what needs a person reaches the DLQ: a charge that may exist past the key window
        // and that the look-up cannot settle. Nothing transient: the outage is shorter than the
        // retry schedule.
        for (reason, count) in &report.dlq_reasons {
            assert!(
                *reason == "needs_reconciliation",
                "seed {seed}: {count} in the DLQ for {reason} (replay: SimSettings::faulty({seed}, 500)): {:#?}",
                report.dlq_histories
            );
        }
        reconciliation += report.in_dlq;
        orders += report.orders;
        invocations += report.invocations;
        crashes += report.crashes;
    }
    eprintln!(
        "{seeds} seeds, {orders} orders, {invocations} invocations, {crashes} crashes: none \
         charged twice, none lost, {reconciliation} left to a person (needs_reconciliation)"
    );
}

/// The checks have teeth: with a table per container (a broken deployment), a duplicate that
/// arrives after the provider forgot the key is charged again, and the ledger shows it.
#[test]
fn a_table_per_container_is_caught_charging_twice() {
    let caught = (1..=20).find_map(|seed| {
        let settings = SimSettings {
            shared_store: false,
            ..SimSettings::faulty(seed, 500)
        };
        let report = run(&settings);
        (!report.double_charged.is_empty()).then_some((seed, report.double_charged.len()))
    });
    let (seed, orders) = caught.expect("no seed of 20 caught a double charge");
    eprintln!("seed {seed} caught {orders} orders charged twice");
}
