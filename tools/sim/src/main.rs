//! `make sim`: many seeds of the simulation, with progress and a summary table.
//!
//! - `ORDERS`: orders in all (default 1,000,000), spread over `SEEDS` seeds (default 100)
//!   starting at `FIRST_SEED` (default 1);
//! - `PROFILE`: `standard`, `fifo`, `brownout`, `skewed`, `lowered`, `archived`, `worker` or
//!   `mixed` (the default: the first six in turn);
//! - `MUTATION`: a planted bug to switch on (`sim::MUTATIONS`), to watch the checks catch it;
//!   only in the planted tree (`make sim MUTATION=...` runs there), else refused;
//! - `STORE`: `memory` (the default; `dynamodb` for `store-brownout`) or `dynamodb`, the shipped
//!   DynamoDB store on its own client on dynoxide's engine in the process;
//! - `RETRY_QUOTA`: `off` builds the DynamoDB store's client without its retry quota, to
//!   measure what the quota saves (`on`, the default, is the shipped client);
//! - `PROVIDER`: how the simulated provider words its answers: `draft` (the default), `stripe`,
//!   `adyen`, `bare`, or `mixed` (the four in turn by seed);
//! - `JOBS`: seeds run at once, each on a thread of its own (default: the machine's cores). A
//!   seed is deterministic on any thread, so the table is the same for any `JOBS`; only the
//!   order of the progress lines changes.
//!
//! A run that breaks an invariant prints the command that replays it and the story of the
//! order it broke on; the exit status is then 1.

use std::time::Instant;

use sim::{DIALECTS, Dialect, Faults, MUTATIONS, NO_PLANTED_BUGS, SimSettings, StoreKind, run};

/// A number from the environment, or its default when unset or empty; a value that is not a
/// number stops the run (a typo must not quietly replay another seed).
fn var(name: &str, default: u64) -> u64 {
    let Some(value) = std::env::var(name).ok().filter(|v| !v.trim().is_empty()) else {
        return default;
    };
    match value.trim().replace('_', "").parse() {
        Ok(n) => n,
        Err(_) => {
            eprintln!("{name}={value} is not a number");
            std::process::exit(2);
        }
    }
}

fn main() {
    let orders = var("ORDERS", 1_000_000);
    let seeds = var("SEEDS", 100).max(1);
    let first_seed = var("FIRST_SEED", 1);
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "mixed".into());
    let mutation = match std::env::var("MUTATION").ok().filter(|m| !m.is_empty()) {
        None => None,
        Some(name) => match MUTATIONS.iter().find(|(m, _)| *m == name) {
            Some((m, _)) if !sim::planted::ENABLED => {
                eprintln!("MUTATION={m}: {NO_PLANTED_BUGS}");
                std::process::exit(2);
            }
            Some((m, _)) => Some(*m),
            None => {
                eprintln!("MUTATION={name} is not one of:");
                for (m, what) in MUTATIONS {
                    eprintln!("  {m}: {what}");
                }
                std::process::exit(2);
            }
        },
    };
    // Unset: the profile's own store.
    let store = match std::env::var("STORE").ok().filter(|s| !s.is_empty()) {
        None => None,
        Some(name) => match StoreKind::parse(&name) {
            Some(store) => Some(store),
            None => {
                eprintln!("STORE={name} is not one of memory, dynamodb");
                std::process::exit(2);
            }
        },
    };
    let retry_quota = match std::env::var("RETRY_QUOTA").ok().as_deref().map(str::trim) {
        None | Some("" | "on") => true,
        Some("off") => false,
        Some(other) => {
            eprintln!("RETRY_QUOTA={other} is not one of on, off");
            std::process::exit(2);
        }
    };
    let provider_name = std::env::var("PROVIDER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "draft".into());
    let dialect = |seed: u64| match provider_name.as_str() {
        "mixed" => Some(DIALECTS[(seed % DIALECTS.len() as u64) as usize].1),
        name => Dialect::parse(name),
    };
    if dialect(first_seed).is_none() {
        eprintln!("PROVIDER={provider_name} is not one of draft, stripe, adyen, bare, mixed");
        std::process::exit(2);
    }
    let per_seed = usize::try_from(orders / seeds).unwrap_or(usize::MAX).max(1);
    if SimSettings::profile(&profile, first_seed, per_seed).is_none() {
        eprintln!(
            "PROFILE={profile} is not one of standard, fifo, fifo-batch, brownout, store-brownout, skewed, lowered, archived, worker, money, mixed"
        );
        std::process::exit(2);
    }
    let jobs = var(
        "JOBS",
        std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
    )
    .clamp(1, seeds);
    let started = Instant::now();
    let (mut total, mut messages, mut invocations, mut sim_ms) = (0, 0, 0, 0u64);
    let (mut charged, mut declined, mut redriven) = (0, 0, 0);
    let mut dlq = std::collections::BTreeMap::<String, usize>::new();
    let mut decisions = std::collections::BTreeMap::<&str, usize>::new();
    let mut faults = Faults::default();
    let mut recovery_delays: Vec<u64> = Vec::new();
    let mut outage_container_ms = 0u64;
    let mut broken = Vec::new();
    let settings_of = |seed: u64| {
        SimSettings::profile(&profile, seed, per_seed).map(|settings| SimSettings {
            mutation,
            store: store.unwrap_or(settings.store),
            retry_quota,
            provider: dialect(seed).unwrap_or_default(),
            ..settings
        })
    };
    // Workers take the next seed as they free up; each seed's run owns its runtime, its random
    // source and its mutation switch (all per thread), so where it runs changes nothing in it.
    let next = std::sync::atomic::AtomicU64::new(first_seed);
    let (done, reports) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            let done = done.clone();
            let (next, settings_of) = (&next, &settings_of);
            scope.spawn(move || {
                loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seed >= first_seed + seeds {
                        break;
                    }
                    if let Some(settings) = settings_of(seed) {
                        let report = run(&settings);
                        if done.send((seed, settings, report)).is_err() {
                            break;
                        }
                    }
                }
            });
        }
        drop(done);
        // Summed as they arrive (sums do not depend on the order); progress as each ends.
        for (seed, settings, report) in reports {
            total += report.orders;
            messages += report.messages;
            invocations += report.invocations;
            sim_ms += report.sim_ms;
            charged += report.charged_once;
            declined += report.declined;
            redriven += report.redriven;

            for (reason, count) in &report.dlq_reasons {
                *dlq.entry(reason.clone()).or_default() += count;
            }
            faults.add(&report.faults);
            recovery_delays.extend_from_slice(&report.recovery_delays_ms);
            // Container-minutes of outage: the fleet the provider's refusals are shared by.
            outage_container_ms +=
                (report.windows[0].1 - report.windows[0].0) * settings.containers as u64;
            for (reason, count) in &report.decisions {
                *decisions.entry(reason).or_default() += count;
            }
            eprintln!(
                "seed {seed} ({:?}): {} orders, {} invocations, {} violations, {} mutation hits, outage {:?}, most receives {}, digest {:016x}, {:.0} s so far",
                settings.queue,
                report.orders,
                report.invocations,
                report.violations.len(),
                report.mutation_hits,
                report.windows[0],
                report.max_receives,
                report.digest,
                started.elapsed().as_secs_f64()
            );
            if let Some(first) = report.violations.first() {
                let mut rules = std::collections::BTreeMap::<&str, usize>::new();
                for violation in &report.violations {
                    *rules.entry(violation.rule).or_default() += 1;
                }
                broken.push((seed, format!(
                "seed {seed}: {} violations {rules:?}; the first: {} on {}: {}\nreplay: {}\nwhat happened to {}:\n{}",
                report.violations.len(),
                first.rule,
                first.order_id,
                first.detail,
                settings.replay_command(&profile),
                first.order_id,
                report.story
            )));
            }
        }
    });
    broken.sort_by_key(|(seed, _)| *seed);
    let wall = started.elapsed().as_secs_f64();
    println!("| measure | value |");
    println!("|---|---|");
    println!("| seeds ({profile}) | {seeds} ({jobs} at a time) |");
    if let Some(m) = mutation {
        println!("| mutation | {m} |");
    }
    println!("| orders | {total} |");
    println!("| messages (with duplicates and reused keys) | {messages} |");
    println!("| invocations | {invocations} |");
    for (kind, count) in faults.rows() {
        println!("| {kind} | {count} |");
    }
    if !recovery_delays.is_empty() {
        recovery_delays.sort_unstable();
        let at = |q: f64| {
            let i = ((recovery_delays.len() - 1) as f64 * q).round() as usize;
            recovery_delays[i] as f64 / 1_000.0
        };
        println!(
            "| orders sent before the provider's return, charged after it | {} |",
            recovery_delays.len()
        );
        println!(
            "| their charge after the outage's end, s: p50 / p99 / max | {:.0} / {:.0} / {:.0} |",
            at(0.5),
            at(0.99),
            at(1.0)
        );
        println!(
            "| provider calls in its outage, per container-minute | {:.1} |",
            faults.outage_refusals as f64 / (outage_container_ms.max(1) as f64 / 60_000.0)
        );
    }
    if faults.store_requests > 0 {
        println!(
            "| store requests per order (retry quota {}) | {:.2} |",
            if retry_quota { "on" } else { "off" },
            faults.store_requests as f64 / total.max(1) as f64
        );
    }
    for (reason, count) in &decisions {
        println!("| decisions: {reason} | {count} |");
    }
    println!("| charged exactly once | {charged} |");
    println!("| declined, never charged | {declined} |");
    println!("| redriven from the DLQ by the operator | {redriven} |");
    for (reason, count) in &dlq {
        println!("| left in the DLQ: {reason} | {count} |");
    }
    println!(
        "| simulated time | {:.1} days |",
        sim_ms as f64 / 86_400_000.0
    );
    println!("| wall time | {wall:.1} s |");
    println!(
        "| simulated orders per second | {:.0} |",
        total as f64 / wall
    );
    println!("| seeds that broke an invariant | {} |", broken.len());
    if !broken.is_empty() {
        for (_, text) in &broken {
            eprintln!("\n{text}");
        }
        std::process::exit(1);
    }
}
