//! The simulator's runs: a seed replays exactly; the fixed seeds (standard, FIFO, brownout and
//! skewed clocks, 20,000 orders in all) break no invariant; every planted bug is caught within a bounded
//! number of seeds (in the planted tree, `make planted-bugs`; ignored in this one); the
//! checks read the template.

mod email_once;

use sim::{DIALECTS, Dialect, MUTATIONS, Report, SimSettings, StoreKind, run};

/// Orders per seed of the fixed runs; seeds per profile (four profiles: 20,000 orders). Sized
/// for the simulator's share of `make test` to stay under two minutes on two cores (docs/design.md,
/// "In `make test`"); `make sim` is the long run.
const ORDERS: usize = 1_000;
const SEEDS: u64 = 5;
/// Seeds of the operators' profiles (`lowered`, `archived`).
const OPERATOR_SEEDS: u64 = 2;
/// Seeds of `lowered`, whose rarest edge needs more of them.
const LOWERED_SEEDS: u64 = 5;

/// The same profiles on the shipped DynamoDB store (through the SDK, on dynoxide's engine): it
/// runs about 70 orders a second in a test build, so fewer, smaller seeds.
const DYNAMODB_ORDERS: usize = 250;
const DYNAMODB_SEEDS: u64 = 2;

fn explain(settings: &SimSettings, profile: &str, report: &Report) -> String {
    let first = &report.violations[0];
    format!(
        "seed {}: {} violations; the first: {} on {}: {}\nreplay: {}\nwhat happened to {}:\n{}",
        settings.seed,
        report.violations.len(),
        first.rule,
        first.order_id,
        first.detail,
        settings.replay_command(profile),
        first.order_id,
        report.story
    )
}

/// The same seed gives the same run, event for event; another seed another.
#[test]
fn a_seed_replays_exactly() {
    for profile in ["standard", "fifo", "brownout", "skewed", "worker"] {
        let settings = |seed| SimSettings::profile(profile, seed, 300).expect("a profile");
        let a = run(&settings(7));
        let b = run(&settings(7));
        let c = run(&settings(8));
        assert_eq!(
            a.digest, b.digest,
            "{profile}: seed 7 ran differently twice"
        );
        assert_eq!(a.invocations, b.invocations);
        assert_ne!(a.digest, c.digest, "{profile}: seeds 7 and 8 ran the same");
    }
}

/// The DynamoDB store replays exactly too: the SDK's retry jitter, its only randomness, is off.
#[test]
fn a_seed_replays_exactly_on_the_dynamodb_store() {
    let settings = |seed| SimSettings {
        store: StoreKind::DynamoDb,
        ..SimSettings::profile("standard", seed, 150).expect("a profile")
    };
    let a = run(&settings(7));
    let b = run(&settings(7));
    let c = run(&settings(8));
    assert_eq!(a.digest, b.digest, "seed 7 ran differently twice");
    assert_ne!(a.digest, c.digest, "seeds 7 and 8 ran the same");
}

/// The fixed seeds: no order charged twice, none lost, nothing transient in the DLQ, FIFO
/// order kept, every response before its deadline, nothing deleted without its decision.
fn fixed_seeds(profile: &str) {
    fixed_seeds_on(profile, (StoreKind::Memory, Dialect::Draft), SEEDS, ORDERS);
}

/// At most `SIM_TEST_SEEDS` seeds of each fixed run, when set: `make mutants` runs the fixed
/// seeds once per mutant, so it takes fewer of them (the first ones: a smaller run, not another).
fn capped(seeds: u64) -> u64 {
    std::env::var("SIM_TEST_SEEDS")
        .ok()
        .and_then(|cap| cap.parse::<u64>().ok())
        .map_or(seeds, |cap| seeds.min(cap.max(1)))
}

fn fixed_seeds_on(
    profile: &str,
    (store, provider): (StoreKind, Dialect),
    seeds: u64,
    per_seed: usize,
) {
    let seeds = capped(seeds);
    let mut orders = 0;
    let mut invocations = 0;
    let mut faults = sim::Faults::default();
    let mut reasons = std::collections::BTreeMap::<&str, usize>::new();
    let mut moved = std::collections::BTreeMap::<String, usize>::new();
    let mut currencies = std::collections::BTreeMap::<String, usize>::new();
    let mut currency_only_conflicts = 0;
    let mut redriven = 0;
    for seed in 1..=seeds {
        let settings = SimSettings {
            store,
            provider,
            ..SimSettings::profile(profile, seed, per_seed).expect("a profile")
        };
        let report = run(&settings);
        assert!(report.holds(), "{}", explain(&settings, profile, &report));
        orders += report.orders;
        invocations += report.invocations;
        faults.add(&report.faults);
        for (reason, count) in report.decisions {
            *reasons.entry(reason).or_default() += count;
        }
        for (reason, count) in report.moved_reasons {
            *moved.entry(reason).or_default() += count;
        }
        for (currency, count) in report.charged_by_currency {
            *currencies.entry(currency).or_default() += count;
        }
        currency_only_conflicts += report.currency_only_conflicts;
        redriven += report.redriven;
    }
    eprintln!(
        "{profile} ({store:?}, {provider:?}): {seeds} seeds, {orders} orders, {invocations} invocations, {faults:?}"
    );
    eprintln!("{profile} ({store:?}, {provider:?}): decisions {reasons:?}");
    eprintln!("{profile} ({store:?}, {provider:?}): moved to the DLQ {moved:?}");
    eprintln!(
        "{profile} ({store:?}, {provider:?}): charged by currency {currencies:?}, \
         {currency_only_conflicts} conflicts in currency alone"
    );
    // Orders in every kind of minor unit were charged (none, two and three digits, a code in
    // lower case), each in its own currency (the ledger is checked per currency above).
    for currency in ["EUR", "JPY", "KWD", "USD"] {
        assert!(
            currencies.get(currency).is_some_and(|n| *n > 0),
            "nothing charged in {currency}: {currencies:?}"
        );
    }
    // The producers' edges did reach the function: bodies that are not orders, moved with their
    // reason (within SQS's limits, or the run would have broken).
    assert!(
        moved.get("invalid_body").is_some_and(|n| *n > 0),
        "no body that is not an order was moved"
    );
    if orders >= 5_000 {
        assert!(
            currency_only_conflicts > 0,
            "no order was sent again in another currency alone"
        );
    }
    // Every exponent ISO 4217 has was charged at money's edges, the largest amount among them.
    if profile == "money" {
        for currency in ["CLF", "UYW", "BHD", "OMR", "KRW", "ISK", "GBP"] {
            assert!(
                currencies.get(currency).is_some_and(|n| *n > 0),
                "nothing charged in {currency} at money's edges: {currencies:?}"
            );
        }
    }
    // The faults the profile is about did happen.
    assert!(faults.crashes > 0 && faults.store_answers_lost > 0 && faults.charge_answers_lost > 0);
    // On the DynamoDB store a claim's answer is lost below the store's client, whose retry
    // meets its own write: a takeover whose first answer was lost still counts, and the store
    // reads the attempt it took over back from the item (207 to 940 in each profile's fixed
    // seeds with `store_lost_at_takeover_rate`; 0 to 2 at the common rate alone).
    if store == StoreKind::DynamoDb {
        assert!(
            faults.answers_lost_at_takeover > 0,
            "no takeover's answer was lost on the DynamoDB store: {faults:?}"
        );
    }
    assert!(faults.slow_charges > 0 && faults.pending_charges > 0 && faults.lookup_errors > 0);
    // On the DynamoDB store one order in 16 has its first charge request lost on the way: its
    // next copy's look-up finds nothing inside the key window (33 to 101 a profile).
    assert_eq!(
        faults.charges_lost_on_the_way > 0,
        store == StoreKind::DynamoDb,
        "first charge requests lost on the way: {faults:?}"
    );
    // Every write the DynamoDB table applied had its item's expiry judged (1,722 to 5,041 in
    // these profiles' short seeds); the in-memory table keeps its expiry out of sight.
    assert_eq!(
        faults.expiries_checked > 0,
        store == StoreKind::DynamoDb,
        "item expiries checked: {faults:?}"
    );
    // Another payload under an order's id met the order's own unfinished claim, and was judged
    // (24, 28, 21, 12 and 14 in these profiles' seeds at a cap of 3; the FIFO profiles and the
    // DynamoDB store's short seeds reach few or none).
    if store == StoreKind::Memory
        && matches!(
            profile,
            "standard" | "skewed" | "lowered" | "archived" | "money"
        )
    {
        assert!(
            faults.other_payloads_on_unfinished_claims > 0,
            "no other payload met an unfinished claim: {faults:?}"
        );
    }
    match profile {
        // The deadline edge is the function's, not the store's: asserted on the memory store's
        // brownout seeds. On the DynamoDB store skips at the deadline are rare and come in
        // clusters, so a few short seeds reach them or not by the luck of the random stream:
        // with the store's direct client the first 12 seeds reached none, 20 seeds 19 (the
        // SDK's client, which draws from the stream when it is built: 27 in the same 20).
        "brownout" => assert!(
            store != StoreKind::Memory || reasons.get("deadline").is_some_and(|n| *n > 0),
            "no batch ran into its deadline"
        ),
        "fifo" | "fifo-batch" => assert!(reasons.get("after_failure").is_some_and(|n| *n > 0)),
        // The fence is the skewed profile's own seeds' to reach (the draft dialect, several
        // seeds): a stale holder's write is rare since a container that finds the provider
        // down holds its records back (1 in 3 seeds of 1,000 orders, by dialect), and another
        // dialect's one seed is there for the dialect.
        "skewed" => assert!(
            provider != Dialect::Draft || faults.fenced_writes > 0,
            "no stale holder ever wrote"
        ),
        // Nine requests in ten throttled for ten minutes, against 1% outside. Once three records
        // in a row find the table down a container holds its records back and calls it once per
        // probe interval, so the brownout meets far fewer requests than it would (a quarter of
        // all the requests in the fixed seeds, against 45% without the hold): the guard is
        // that it throttled at all, and the requests the hold saves are the hold's test.
        "store-brownout" => assert!(
            faults.store_throttled > 100,
            "the table's brownout throttled too little: {faults:?}"
        ),
        "lowered" => {
            assert!(
                reasons.get("retries_exhausted").is_some_and(|n| *n > 0),
                "the function never gave up at the lowered count"
            );
            // The operator's lease of 20 s is shorter than the invocation's 30 s: leases that end
            // by their holder's deadline, taken over while it may still be at work.
            assert!(
                faults.leases_ending_by_the_deadline > 0,
                "no lease ended by its holder's deadline: {faults:?}"
            );
            // The edges of the schedule the profile exists for (issue 52): a DLQ move failed
            // at the give-up's receive, a crash between a charge and its completion at the
            // last receive, a store answer lost on the takeover of an expired lease.
            assert!(
                faults.dlq_failures_at_give_up > 0
                    && faults.crashes_between_charge_and_completion_at_last_receive > 0
                    && faults.answers_lost_at_takeover > 0,
                "an edge of the schedule was not reached: {faults:?}"
            );
            // Records abandoned at their last receive, whose copies must still name their order.
            assert!(
                faults.store_hangs_at_give_up > 0
                    && reasons.get("abandoned").is_some_and(|n| *n > 0),
                "no store call outlasted an invocation at the last receive: {faults:?}"
            );
        }
        // The copies came back after their items expired, and their look-ups settled them.
        "archived" => assert!(
            redriven > 0 && reasons.get("reconciled").is_some_and(|n| *n > 0),
            "no archived copy came back, or none was settled by its look-up: {reasons:?}"
        ),
        // Workers were stopped while a batch held a record at the give-up's receive, and what
        // their stops kept from starting was released.
        "worker" => assert!(
            faults.stops_at_give_up > 0 && faults.released_at_stops > 0,
            "no worker was stopped at a give-up receive, or none released anything: {faults:?}"
        ),
        _ => assert!(faults.outage_refusals > 0 && faults.duplicate_deliveries > 0),
    }
}

#[test]
fn standard_queue_seeds_charge_every_order_once() {
    fixed_seeds("standard");
}

#[test]
fn fifo_seeds_charge_every_order_once_in_group_order() {
    fixed_seeds("fifo");
}

/// The same FIFO traffic deployed with `FifoScope=batch` (Lambda's own FIFO contract): a
/// failure holds the rest of the batch, every group's order kept. Fewer seeds: the processor's
/// batch scope is the one thing it adds.
#[test]
fn fifo_batch_scope_seeds_charge_every_order_once_in_order() {
    fixed_seeds_on(
        "fifo-batch",
        (StoreKind::Memory, Dialect::Draft),
        OPERATOR_SEEDS,
        ORDERS,
    );
}

#[test]
fn brownout_seeds_answer_before_every_deadline() {
    fixed_seeds("brownout");
}

/// Clocks 60 s apart: claims taken over while their holder works (its writes meet the fence),
/// and still every order charged once.
#[test]
fn skewed_clock_seeds_charge_every_order_once() {
    fixed_seeds("skewed");
}

/// An operator lowers `maxReceiveCount` from 201 to 5 in the console while the function runs:
/// the function learns it (`GetQueueAttributes`, kept five minutes), gives up at its last
/// receive with the message's history, and the week-later redrive still charges every order
/// once (a copy whose first failure is old enough is looked up before any charge).
#[test]
fn a_lowered_receive_count_loses_nothing_and_charges_nothing_twice() {
    // Five seeds: a crash between a charge and its completion at the last receive is rare (seed
    // 5 of the first eight reaches it), and the profile asserts it is reached.
    fixed_seeds_on(
        "lowered",
        (StoreKind::Memory, Dialect::Draft),
        LOWERED_SEEDS,
        ORDERS,
    );
}

/// The DLQ's copies sent again 20 days later, after their items expired: every copy is asked
/// about before any charge (its history says it may have been charged), and a provider that
/// remembers settles it.
#[test]
fn copies_sent_again_after_their_items_expired_charge_nothing_twice() {
    fixed_seeds_on(
        "archived",
        (StoreKind::Memory, Dialect::Draft),
        OPERATOR_SEEDS,
        ORDERS,
    );
}

/// Every fourth order at money's edges (`sim::MONEY_EDGES`: ISO 4217's exponents 0 to 4, 2^53 - 1
/// minor units and one past, exponents, fractions of the minor unit), judged by the world's own
/// reading of each body: charged exactly what it names, or moved as `invalid_body`.
#[test]
fn money_at_its_edges_is_charged_as_the_world_reads_it() {
    fixed_seeds("money");
}

/// The function as a fleet of long-polling workers on a FIFO queue, stopped every few minutes
/// and at the give-up's receive: no record the stop kept from starting is moved, nothing is
/// deleted without its decision, every order charged once.
#[test]
fn worker_seeds_release_what_a_stop_kept_from_starting() {
    fixed_seeds_on(
        "worker",
        (StoreKind::Memory, Dialect::Draft),
        OPERATOR_SEEDS,
        ORDERS,
    );
}

/// The simulated SQS holds the function's calls to SQS's own limits (so that a seed breaking
/// none is evidence): ten entries a call, 1 MiB a call, the DLQ's maximum message size, ten
/// attributes, SQS's characters, visibility within 12 hours of the receive.
#[tokio::test(start_paused = true)]
async fn the_simulated_sqs_refuses_what_sqs_refuses() {
    use aws_sdk_sqs::error::ProvideErrorMetadata;
    use aws_sdk_sqs::types::{
        ChangeMessageVisibilityBatchRequestEntry, MessageAttributeValue,
        SendMessageBatchRequestEntry,
    };
    use sim::queue::SharedQueue;
    use sim::world::{Shared, SimClock};
    let clock = SimClock {
        start: tokio::time::Instant::now(),
        offset_ms: 0,
    };
    let world = Shared::new(1, clock.clone());
    let queue = SharedQueue::new(false, 5, 60_000, 0.0, 0.0);
    let client = aws_sdk_sqs::Client::new(&sim::sqs::sdk_config(
        &queue,
        &world,
        &clock,
        sim::world::Told::default(),
    ));
    let dlq = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";
    let entry = |id: usize, body: &str| {
        SendMessageBatchRequestEntry::builder()
            .id(id.to_string())
            .message_body(body)
    };
    let send = |entries: Vec<SendMessageBatchRequestEntry>| {
        client
            .send_message_batch()
            .queue_url(dlq)
            .set_entries(Some(entries))
            .send()
    };
    let eleven = (0..11)
        .map(|i| entry(i, "x").build().expect("an entry"))
        .collect();
    let refused = send(eleven).await.expect_err("eleven entries");
    assert_eq!(
        refused.into_service_error().code(),
        Some("TooManyEntriesInBatchRequest")
    );
    let large = "x".repeat(250_000);
    let five = (0..5)
        .map(|i| entry(i, &large).build().expect("an entry"))
        .collect();
    let refused = send(five).await.expect_err("1.25 MB in one call");
    assert_eq!(
        refused.into_service_error().code(),
        Some("BatchRequestTooLong")
    );
    let mut eleven_attributes = entry(1, "{}");
    for n in 0..11 {
        eleven_attributes = eleven_attributes.message_attributes(
            format!("a{n}"),
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value("v")
                .build()
                .expect("an attribute"),
        );
    }
    let entries = vec![
        entry(0, &"y".repeat(262_145)).build().expect("an entry"),
        eleven_attributes.build().expect("an entry"),
        entry(2, "a NUL \u{0}").build().expect("an entry"),
        entry(3, "fits").build().expect("an entry"),
    ];
    let answer = send(entries).await.expect("a call within the limits");
    let failed: Vec<(&str, &str)> = answer.failed().iter().map(|f| (f.id(), f.code())).collect();
    assert_eq!(
        failed,
        [
            ("0", "InvalidParameterValue"),
            ("1", "InvalidParameterValue"),
            ("2", "InvalidMessageContents")
        ]
    );
    assert_eq!(answer.successful().len(), 1);

    // Visibility: at most 12 hours from the receive (not from the call: a call made later has
    // less left).
    let payload = sim::Payload {
        order_id: "o-1".into(),
        price: None,
        body: "{}".into(),
        group: None,
        attributes: sim::queue::Attrs::new(),
        poison: false,
        sent_ms: 0,
    };
    queue.lock().send(0, &payload, 0);
    let receipt = queue.lock().receive(1, 0, &world).remove(0).receipt;
    let change = |id: &str, seconds: i32| {
        ChangeMessageVisibilityBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(&receipt)
            .visibility_timeout(seconds)
            .build()
            .expect("an entry")
    };
    let answer = client
        .change_message_visibility_batch()
        .queue_url("https://sqs.us-east-1.amazonaws.com/123456789012/orders")
        .entries(change("over", 43_201))
        // What is left of the 12 hours, less the call's own latency.
        .entries(change("within", 43_199))
        .send()
        .await
        .expect("a call");
    let failed: Vec<(&str, &str)> = answer.failed().iter().map(|f| (f.id(), f.code())).collect();
    assert_eq!(failed, [("over", "InvalidParameterValue")]);
    assert_eq!(answer.successful().len(), 1);
    let refused: Vec<String> = queue.lock().refused.keys().cloned().collect();
    assert_eq!(
        refused,
        [
            "BatchRequestTooLong",
            "InvalidMessageContents",
            "InvalidParameterValue",
            "TooManyEntriesInBatchRequest"
        ]
    );
}

/// The four profiles on the shipped DynamoDB store: its condition expressions, fence and
/// look-ups under throttles, 500s and writes applied whose answer is lost (which the SDK then
/// retries, meeting its own write).
#[test]
fn standard_queue_seeds_on_the_dynamodb_store() {
    fixed_seeds_on(
        "standard",
        (StoreKind::DynamoDb, Dialect::Draft),
        DYNAMODB_SEEDS,
        DYNAMODB_ORDERS,
    );
}

#[test]
fn fifo_seeds_on_the_dynamodb_store() {
    fixed_seeds_on(
        "fifo",
        (StoreKind::DynamoDb, Dialect::Draft),
        DYNAMODB_SEEDS,
        DYNAMODB_ORDERS,
    );
}

#[test]
fn brownout_seeds_on_the_dynamodb_store() {
    // Its runs are short (no outage to wait out); more seeds reach a failing look-up.
    fixed_seeds_on(
        "brownout",
        (StoreKind::DynamoDb, Dialect::Draft),
        3 * DYNAMODB_SEEDS,
        DYNAMODB_ORDERS,
    );
}

/// The DynamoDB table throttles nine requests in ten for ten minutes: every order is still
/// charged once or moved with its reason, while the client's retry quota runs dry.
#[test]
fn store_brownout_seeds_on_the_dynamodb_store() {
    fixed_seeds_on(
        "store-brownout",
        (StoreKind::DynamoDb, Dialect::Draft),
        DYNAMODB_SEEDS,
        DYNAMODB_ORDERS,
    );
}

/// What the retry quota is for: the same seed of the table's brownout sends the table fewer
/// requests with it than without it (docs/performance.md, "The retry quota"), and holds every
/// invariant both ways.
#[test]
fn the_retry_quota_sends_a_throttled_table_fewer_requests() {
    let run_with = |retry_quota: bool| {
        // Without the function's hold, which spares a table that fails for every record most
        // of its requests: the quota is the client's own defence (a FIFO queue is never held).
        let settings = SimSettings {
            retry_quota,
            recovery: false,
            ..SimSettings::profile("store-brownout", 1, DYNAMODB_ORDERS).expect("a profile")
        };
        let report = run(&settings);
        assert!(
            report.holds(),
            "{}",
            explain(&settings, "store-brownout", &report)
        );
        report.faults.store_requests
    };
    let (with, without) = (run_with(true), run_with(false));
    assert!(
        with < without,
        "{with} requests with the quota, {without} without"
    );
}

#[test]
fn skewed_clock_seeds_on_the_dynamodb_store() {
    fixed_seeds_on(
        "skewed",
        (StoreKind::DynamoDb, Dialect::Draft),
        DYNAMODB_SEEDS,
        DYNAMODB_ORDERS,
    );
}

/// Every profile with the provider speaking another dialect: its answers go through the
/// function's own readers, so a misread shape (Adyen's 704, a bare `failed`, a status nobody
/// documented) breaks an invariant here.
fn dialect_seeds(provider: Dialect) {
    for profile in ["standard", "fifo", "brownout", "skewed"] {
        fixed_seeds_on(
            profile,
            (StoreKind::Memory, provider),
            DIALECT_SEEDS,
            ORDERS,
        );
    }
}

/// Seeds per profile for each other dialect.
const DIALECT_SEEDS: u64 = 1;

#[test]
fn seeds_with_a_stripe_shaped_provider() {
    dialect_seeds(Dialect::Stripe);
}

#[test]
fn seeds_with_an_adyen_shaped_provider() {
    dialect_seeds(Dialect::Adyen);
}

#[test]
fn seeds_with_a_provider_that_says_little() {
    dialect_seeds(Dialect::Bare);
}

/// Every dialect has its seeds.
#[test]
fn every_dialect_is_simulated() {
    let source = include_str!("main.rs");
    for (_, dialect) in DIALECTS {
        assert!(
            dialect == Dialect::Draft
                || source.contains(&format!("dialect_seeds(Dialect::{dialect:?})")),
            "{dialect:?} has no seeds"
        );
    }
}

/// Each planted bug breaks an invariant within a bounded number of seeds, and its check site
/// was reached (the name is one the real code asks for). The report of the seed that caught it.
fn caught(mutation: &'static str, profile: &str) -> Report {
    caught_on(
        mutation,
        profile,
        (StoreKind::Memory, Dialect::Draft),
        CAUGHT_ORDERS,
        10,
    )
}

/// As [`caught`], and the invariant the bug must break is among those its seed broke.
fn caught_breaking(mutation: &'static str, profile: &str, rule: &str) -> Report {
    let report = caught(mutation, profile);
    assert!(
        report.violations.iter().any(|v| v.rule == rule),
        "{mutation}: {rule} not among {:?}",
        report.violations.first()
    );
    report
}

/// Orders per seed of the planted bugs' runs: each stops at its first seed that breaks an
/// invariant, and a smaller world is faster to break.
const CAUGHT_ORDERS: usize = 500;

fn caught_on(
    mutation: &'static str,
    profile: &str,
    (store, provider): (StoreKind, Dialect),
    orders: usize,
    max_seeds: u64,
) -> Report {
    assert!(
        MUTATIONS.iter().any(|(m, _)| *m == mutation),
        "{mutation} is not listed"
    );
    let mut hits = 0;
    for seed in 1..=max_seeds {
        let settings = SimSettings {
            mutation: Some(mutation),
            store,
            provider,
            ..SimSettings::profile(profile, seed, orders).expect("a profile")
        };
        let report = run(&settings);
        hits += report.mutation_hits;
        if let Some(first) = report.violations.first() {
            assert!(
                hits > 0,
                "{mutation}: a violation without the bug being reached"
            );
            eprintln!(
                "{mutation}: caught by seed {seed} of {max_seeds} ({}: {}); replay: {}",
                first.rule,
                first.order_id,
                settings.replay_command(profile)
            );
            return report;
        }
    }
    assert!(hits > 0, "{mutation}: no check site asks for it");
    panic!("{mutation}: no seed of {max_seeds} ({profile}) broke an invariant ({hits} hits)");
}

/// An unfenced store applies the write of a holder whose lease was taken over (clocks that
/// disagree let a second container claim while the first still works). The provider dedupes the
/// charge inside its window, so only the fence audit (a write applied for a lease the table no
/// longer granted) sees it.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn an_unfenced_store_is_caught_by_the_fence_audit() {
    caught("store.ignores_lease_token", "skewed");
}

/// A takeover that keeps the old holder's token: the cut-off holder's writes pass the fence,
/// and an audit that knew holders by the token the store handed out would see nothing. The world
/// names each holder by its own record (container and invocation), so it does.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_store_that_hands_one_token_to_two_holders_is_caught() {
    let report = caught("store.reuses_lease_token", "skewed");
    assert!(
        report
            .violations
            .iter()
            .any(|v| v.rule == "a write applied for a stale lease"
                && v.detail
                    .contains("while the table last granted the key to container")),
        "{:?}",
        report.violations.first()
    );
}

/// A lease cut short of the design's rule (it ends at the invocation's deadline, without the
/// margin). Fencing cleans up after it and no money invariant breaks; the world's own record of
/// each holder's invocation, against which every lease the table grants is judged, sees it.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_lease_cut_short_of_its_holders_invocation_is_caught() {
    let report = caught("store.lease_ends_at_deadline", "standard");
    assert!(
        report
            .violations
            .iter()
            .all(|v| v.rule == "a lease that does not cover its holder's invocation"),
        "{:?}",
        report.violations.first()
    );
}

/// Orders in mixed currencies: the same order id and number in another currency is another
/// payload. Taken as a duplicate, the second is acknowledged and never charged nor moved.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_fingerprint_without_the_currency_is_caught() {
    caught("order.fingerprint_ignores_currency", "standard");
}

/// A busy key's RETRY must stay away until the holder's lease ends: back sooner, it only finds
/// the key busy again and burns a receive. Only the visibility check sees it.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_visibility_that_ignores_the_retry_time_is_caught() {
    caught("backoff.ignores_retry_after", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_release_after_an_ambiguous_charge_is_caught() {
    caught("guard.releases_after_ambiguous", "standard");
}

/// The seams finding of a provider that says only `failed`: read as "not charged" (the reading
/// before its fix), a pending charge that ended declined is sent again. Only a provider speaking
/// the bare dialect reaches it.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_bare_failed_read_as_not_charged_is_caught() {
    caught_on(
        "lookup.bare_failed_is_retryable",
        "standard",
        (StoreKind::Memory, Dialect::Bare),
        CAUGHT_ORDERS,
        10,
    );
}

/// The seams finding of a copy replayed after its item expired (the reading before its fix: the
/// copy's failure history ignored). Only `archived` replays the DLQ after the table's retention,
/// so only there is the order taken as new and charged a second time.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_replayed_copy_whose_history_is_ignored_is_caught() {
    caught("handler.ignores_carried_history", "archived");
}

/// The seams finding of a look-up that found another amount under the key (the reading before
/// its fix: a failed look-up). Past the key window the record retries until its schedule gives
/// up, a transient reason in the DLQ for what only a person can settle.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_conflict_found_by_the_look_up_read_as_a_failure_is_caught() {
    caught("lookup.conflict_is_an_error", "archived");
}

/// Issue 49, finding 2: a worker stopped while a batch holds records at the receive before the
/// queue's redrive. With the stop answered as a RETRY for the records not started (the old
/// behaviour), the give-up moves them to the DLQ as `retries_exhausted`: never tried.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_stop_that_gives_up_records_never_started_is_caught() {
    caught_breaking(
        "processor.stopping_gives_up",
        "worker",
        "moved as retries_exhausted without being tried",
    );
}

/// Issue 52: a give-up that keeps the record a RETRY leaves it to SQS's redrive. The world,
/// which saw the handler answer RETRY at the receive its container knew as the give-up's,
/// sees it received again with no failed move to explain it.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_give_up_that_moves_nothing_is_caught() {
    caught_breaking(
        "processor.give_up_keeps_retry",
        "worker",
        "kept past its give-up",
    );
}

/// Issue 52: a FIFO hold after a success. Nothing is charged out of order, so only the world's
/// record of which records the invocation started (the claims it asked the table for) sees
/// records reported with nothing holding them.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_fifo_hold_after_a_success_is_caught() {
    caught_breaking(
        "processor.holds_after_success",
        "fifo",
        "held behind FIFO records that did not hold it",
    );
}

/// Issue 49, finding 1: a look-up that finds another payload's charge under the id, its amount
/// worded as text (`archived`'s seed 1 words every look-up's amounts so). Read as the order's
/// (the reading before the fix), the order is completed as paid without being charged; read as
/// it must be, it is left to a person.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn an_unreadable_amount_read_as_a_match_is_caught() {
    caught("lookup.unreadable_amount_is_a_match", "archived");
}

/// Issue 49, finding 3: a copy refused on day 10 (a conflict, a decline: no item written) and
/// redriven on day 20, after the order's own item of day 0 expired, ten days after its own move.
/// Trusting the missing item because the copy is younger than the retention (the rule before
/// the fix), the order is charged again, or its declined card sent again.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_young_refused_copy_trusted_to_have_no_earlier_attempt_is_caught() {
    caught("store.trusts_absence_of_young_copies", "archived");
    // Both refusals reach it: seed 1 charges conflicts a second time; within ten seeds a
    // declined order sent again on day 10 has its card sent again on day 20.
    let declined_again = (2..=10).find(|seed| {
        run(&SimSettings {
            mutation: Some("store.trusts_absence_of_young_copies"),
            ..SimSettings::archived(*seed, CAUGHT_ORDERS)
        })
        .violations
        .iter()
        .any(|v| v.rule == "a declined card sent again")
    });
    assert!(
        declined_again.is_some(),
        "no declined card was sent again in seeds 2 to 10"
    );
}

/// The seams finding of a payment key echoed deep in a provider's text: cut before it was
/// scrubbed, its first characters reached the DLQ copy's detail.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_key_cut_before_it_is_scrubbed_is_caught() {
    caught("redact.cut_before_scrub", "standard");
}

/// A wrong entry in the function's minor-unit table. The world writes and reads amounts by its
/// own table (`sim::worldmoney`), so a dinar of three digits the function takes for two is an
/// order refused as invalid (or charged ten times over); while the simulator priced its orders
/// with the function's own table, it wrote the wrong digits into the bodies and agreed.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_wrong_minor_unit_in_the_functions_table_is_caught() {
    // Every dinar order meets it (15% of them): a smaller world is enough.
    caught_on(
        "money.wrong_minor_digits",
        "standard",
        (StoreKind::Memory, Dialect::Draft),
        200,
        10,
    );
}

/// An amount read through a float: the world reads every body by its digits, and the provider's
/// ledger shows a cent less than the body names.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn an_amount_read_through_a_float_is_caught() {
    // Most decimal amounts meet it: a smaller world is enough.
    caught_on(
        "order.amount_through_float",
        "standard",
        (StoreKind::Memory, Dialect::Draft),
        200,
        10,
    );
}

/// The guard's bugs do not depend on the store: the same planted bug is caught on the real one.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_release_after_an_ambiguous_charge_is_caught_on_the_dynamodb_store() {
    caught_on(
        "guard.releases_after_ambiguous",
        "standard",
        (StoreKind::DynamoDb, Dialect::Draft),
        100,
        5,
    );
}

/// A look-up failing past the key window is transient: the record must retry until the look-up
/// answers. Sent to a person instead, the DLQ holds it under a person's label; only a check that
/// asks the world (did any look-up leave the question open?) tells.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_failing_look_up_sent_to_a_person_is_caught() {
    caught("handler.look_up_failure_to_a_person", "standard");
}

/// SQS's 1 MiB a call: ten large copies in one `SendMessageBatch` are refused whole, and the
/// poison stays in its queue until SQS's own redrive.
#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn dlq_copies_packed_past_a_mebibyte_are_caught() {
    caught("dead_letter.ignores_batch_bytes", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn trusting_not_found_past_the_key_window_is_caught() {
    caught("guard.not_found_is_proof", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn skipping_the_look_up_is_caught() {
    caught("guard.skips_look_up", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn acknowledging_a_charge_in_flight_is_caught() {
    caught("handler.acks_in_flight", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn acknowledging_a_store_error_is_caught() {
    caught("handler.acks_store_errors", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn ignoring_the_fingerprint_is_caught() {
    caught("store.ignores_fingerprint", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn forgetting_a_completed_key_is_caught() {
    caught("store.forgets_completed", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn a_retry_schedule_without_its_floor_is_caught() {
    caught("backoff.retries_at_once", "standard");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn fifo_going_on_after_a_failure_is_caught() {
    caught("processor.fifo_goes_on_after_failure", "fifo");
}

#[test]
#[cfg_attr(
    not(sim_mutations),
    ignore = "a planted bug: runs in the planted tree (make planted-bugs)"
)]
fn never_abandoning_a_record_at_the_deadline_is_caught() {
    caught("processor.never_abandons", "brownout");
}

/// The simulator's find in the real code: a charge answered "pending" and then declined by the
/// bank was charged again once the key window had passed, because the look-up's "failed" read as
/// "may be charged again". This seed broke the rule before the look-up's decline became final
/// (`ChargeStatus::Declined`, `Found::Refused`): o-60, declined at 0.3 s, charged again later
/// (every profile's fixed seeds broke it too).
#[test]
fn a_decline_found_by_the_look_up_is_final() {
    let settings = SimSettings::faulty(4, ORDERS);
    let report = run(&settings);
    assert!(
        report.holds(),
        "{}",
        explain(&settings, "standard", &report)
    );
    assert!(report.faults.pending_charges > 0 && report.declined > 0);
}

/// Every listed mutation is in docs/simulation.md's table, with what caught it.
#[test]
fn every_mutation_is_in_the_simulations_table() {
    let design = include_str!("../../../../docs/simulation.md");
    for (mutation, _) in MUTATIONS {
        assert!(
            design.contains(&format!("| `{mutation}` |")),
            "{mutation} is not in docs/simulation.md's table"
        );
    }
}

/// Every listed mutation has its test above.
#[test]
fn every_mutation_has_its_test() {
    let source = include_str!("main.rs");
    for (mutation, _) in MUTATIONS {
        assert!(
            source.contains(&format!("caught(\"{mutation}\""))
                || source.contains(&format!("caught_breaking(\n        \"{mutation}\""))
                || source.contains(&format!("caught_on(\n        \"{mutation}\"")),
            "{mutation} has no test"
        );
    }
}

/// Each planted bug's test runs only where the bugs are compiled in, and is ignored (shown as
/// such, never passing for nothing) where they are not: every test that asks for one carries the
/// `ignore` of a build without `--cfg sim_mutations`.
#[test]
fn every_planted_bug_test_is_ignored_without_the_bugs() {
    let source = include_str!("main.rs");
    let mut planted = 0;
    for test in source.split("#[test]\n").skip(1) {
        let body = test.split("\n}\n").next().expect("a test's body");
        if body.contains("caught(\"")
            || body.contains("caught_breaking(\n")
            || body.contains("caught_on(\n")
        {
            planted += 1;
            assert!(
                test.starts_with(
                    "#[cfg_attr(\n    not(sim_mutations),\n    \
                     ignore = \"a planted bug: runs in the planted tree (make planted-bugs)\"\n)]\n"
                ),
                "a planted bug's test would fail (or pass for nothing) without the bugs:\n{}",
                body.lines().find(|l| l.starts_with("fn ")).unwrap_or(body)
            );
        }
    }
    assert!(planted >= MUTATIONS.len(), "{planted} planted bug tests");
}

/// This crate's cfg (its build script) and the switch's (whether the bugs are compiled in, only
/// ever in the planted tree) come from the same variable: a planted bug's test is run exactly
/// when its bug exists.
#[test]
fn the_planted_bug_tests_run_exactly_when_the_bugs_are_compiled_in() {
    assert_eq!(sim::planted::ENABLED, cfg!(sim_mutations));
}

/// Without the planted bugs, a run that asks for one refuses (it would find nothing and prove
/// nothing), and says where they are built in.
#[test]
#[cfg_attr(sim_mutations, ignore = "the planted bugs are compiled in")]
#[should_panic(expected = "run it in the planted tree")]
fn a_mutation_asked_of_a_build_without_the_bugs_is_refused() {
    run(&SimSettings {
        mutation: Some(MUTATIONS[0].0),
        ..SimSettings::faulty(1, 10)
    });
}

/// The checks have teeth without a planted bug too: with a table per container (a broken
/// deployment), a duplicate that arrives after the provider forgot the key is charged again.
#[test]
fn a_table_per_container_is_caught_charging_twice() {
    let caught = (1..=10).find(|seed| {
        let settings = SimSettings {
            shared_store: false,
            ..SimSettings::faulty(*seed, ORDERS)
        };
        run(&settings)
            .violations
            .iter()
            .any(|v| v.rule == "charged twice")
    });
    let seed = caught.expect("no seed of 10 caught a double charge");
    eprintln!("a table per container: seed {seed} caught a double charge");
}

/// The simulation runs the function as the template deploys it.
#[test]
fn the_function_runs_with_the_templates_settings() {
    let shipped = sim::Shipped::read().expect("template.yaml");
    assert_eq!(
        shipped
            .env
            .get("SQS_BATCH_MOVE_POISON_TO_DLQ")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        shipped
            .env
            .get("SQS_BATCH_VISIBILITY_BACKOFF")
            .map(String::as_str),
        Some("true")
    );
    assert!(shipped.env.contains_key("SQS_BATCH_MAX_RECEIVE_COUNT"));
    assert!(shipped.timeout_ms > 0 && shipped.visibility_ms > shipped.timeout_ms);
    assert!(shipped.max_receive >= 5 && shipped.batch_size >= shipped.fifo_batch_size);
}
