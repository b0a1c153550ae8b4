//! CPU per order on the shipped path (`make bench-cpu`; docs/performance.md, "CPU per order on
//! the shipped path"), printing one table.
//!
//! The release bootstrap (`BENCH_FUNCTION`) serves events of 10 records (SQS's default batch
//! size) one after another over the local Runtime API, as a warm container does, with the
//! template's environment and each of the store's two clients (`DYNAMODB_CLIENT=direct`, the
//! default, and `sdk`): the HTTP gateway on the payment stub (it applies `Idempotency-Key`),
//! and the DynamoDB table on two servers, each through a counting proxy: moto (a separate
//! Python process answering one request at a time) and a stand-in that answers as DynamoDB
//! does (dynoxide's server in this process, each request held 4 ms, many at once). Every order
//! is new and charged once. With `BENCH_CPU_REPORT` set, the tables are also written to that
//! file (`make bench-cpu`: `docs/results/bench-cpu.md`, which docs/performance.md links). Its CPU is the process's own (user and system, every thread), read
//! after 200 and after 1,000 orders: the slope over the 800 between leaves start-up out. Beside
//! it, in the same rounds, the same orders' shape through Powertools for AWS Lambda (Python)
//! (`benches/powertools_cpu.py`, run with `BENCH_PYTHON`), with the same slope of its
//! `time.process_time()`. A bootstrap built with `--features count-allocations`
//! (`BENCH_COUNTING_FUNCTION`) serves the same kind of run for its allocation counts, so the
//! CPU is read on the shipped build alone. The floor beside them: this bench run again as a
//! child (`BENCH_FLOOR_CHILD`) that makes, per order, the same three round trips with no SDK,
//! no logs and no state machine (a conditional `PutItem` and an `UpdateItem` to the same proxy
//! and table, a charge with its `Idempotency-Key` to the same stub), on the function's client
//! stack (hyper's pooled client, `testkit::pooled_client`, on a current-thread tokio runtime),
//! its own CPU read the same way.
//!
//! Under `cargo test --all-targets` (no `--bench` argument) it runs a small smoke version on
//! the test build of the bootstrap: 20 then 40 orders, one round, Powertools only if
//! `BENCH_PYTHON` is set. Benchmarks, not tests: nothing here passes or fails on time.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use process_orders::count_allocations::{Counts, parse_report};
use process_orders::testkit::dynamo::{CountingProxy, create_table, moto_client, moto_endpoint};
use process_orders::testkit::payment_stub::PaymentStub;
use process_orders::testkit::runtime_api::{RuntimeApi, process_cpu_time};
use process_orders::testkit::{generated_body, template_environment};
use sqs_batch::testkit::{self as event, EventShape};

/// SQS's default batch size for an event source mapping.
const BATCH: usize = 10;

/// How much of a run: CPU is read after `warm` and after `total` orders.
#[derive(Clone, Copy)]
struct Marks {
    warm: usize,
    total: usize,
}

impl Marks {
    fn per_order(self, at_warm: f64, at_total: f64) -> f64 {
        (at_total - at_warm) / (self.total - self.warm) as f64
    }
}

/// What one run of `total` orders measured, per order.
#[derive(Clone, Copy, Default)]
struct PerOrder {
    cpu_us: f64,
    /// Time to the answer, per order (an event's time over its orders).
    wall_ms: f64,
    requests: f64,
    body_bytes: f64,
}

/// A DynamoDB-compatible server the orders' table lives on, behind a counting proxy.
struct Backend {
    /// As the table names it.
    name: &'static str,
    /// The server itself (set-up goes straight to it: only the orders' requests are counted).
    server: String,
    proxy: CountingProxy,
    /// The function's environment on it (the template's).
    env: Vec<(String, String)>,
}

/// The servers every run shares.
struct World {
    api: RuntimeApi,
    stub: PaymentStub,
    backends: Vec<Backend>,
    /// The backend the next run uses.
    on: usize,
    next_order: usize,
}

impl World {
    fn backend(&self) -> &Backend {
        &self.backends[self.on]
    }
}

/// The stand-in's latency per request: DynamoDB's own in a region is a few milliseconds.
const STAND_IN_DELAY: Duration = Duration::from_millis(4);

/// The store's two clients, as `DYNAMODB_CLIENT` names them.
const CLIENTS: [&str; 2] = ["direct", "sdk"];

fn main() {
    if let Ok(plan) = std::env::var("BENCH_FLOOR_CHILD") {
        floor_child(&plan);
        return;
    }
    let full = std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run(full));
}

async fn run(full: bool) {
    let (marks, rounds) = if full {
        (
            Marks {
                warm: 200,
                total: 1_000,
            },
            // Fewer for a quick look; the page's tables are made with 5.
            std::env::var("BENCH_ROUNDS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(5),
        )
    } else {
        (
            Marks {
                warm: 20,
                total: 40,
            },
            1,
        )
    };
    // The release build as deployed when make bench-cpu built it, else the test build.
    let function = std::env::var("BENCH_FUNCTION")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_process-orders").to_owned());
    let counting = std::env::var("BENCH_COUNTING_FUNCTION").ok();
    let python = std::env::var("BENCH_PYTHON").ok();
    let table = "bench-cpu-orders";
    let stub = PaymentStub::start().await;
    // moto (a separate Python process, one request at a time) and the stand-in: dynoxide's
    // server in this process answering after STAND_IN_DELAY, many requests at once, as
    // DynamoDB does.
    let moto = moto_endpoint();
    create_table(&moto_client(), table).await;
    let dynoxide = process_orders::testkit::dynamo::Dynoxide::start().await;
    create_table(
        &process_orders::testkit::dynamo::client(&dynoxide.endpoint()).0,
        table,
    )
    .await;
    let mut backends = Vec::new();
    for (name, server, delay) in [
        ("moto", moto, Duration::ZERO),
        (
            "stand-in (dynoxide, 4 ms a request)",
            dynoxide.endpoint(),
            STAND_IN_DELAY,
        ),
    ] {
        let proxy = CountingProxy::start_with_delay(&server, delay).await;
        let env = template_environment(table, &stub.url(), &proxy.endpoint());
        backends.push(Backend {
            name,
            server,
            proxy,
            env,
        });
    }
    let mut world = World {
        api: RuntimeApi::start().await,
        stub,
        backends,
        on: 0,
        next_order: 0,
    };
    let kinds = world.backends.len();
    // Per backend: each client's runs, the floor's, Powertools'.
    let mut ours = vec![[Vec::new(), Vec::new()]; kinds];
    let mut floors = vec![Vec::new(); kinds];
    let mut theirs = vec![Vec::new(); kinds];
    let mut allocations = Vec::new();
    let mut powertools_version = None;
    for round in 0..rounds {
        for on in 0..kinds {
            world.on = on;
            // Alternate, so drift on the machine touches every run alike.
            for (c, client) in CLIENTS.iter().enumerate() {
                let run = bootstrap(&mut world, &function, marks, client).await.0;
                ours[on][c].push(run);
            }
            floors[on].push(floor(&mut world, table, marks).await);
            if let Some(python) = &python {
                let (per_order, version) = powertools(&mut world, python, marks, round).await;
                theirs[on].push(per_order);
                powertools_version = Some(version);
            }
        }
        if let Some(counting) = &counting {
            world.on = 0;
            let (_, stderr) = bootstrap(&mut world, counting, marks, CLIENTS[0]).await;
            allocations.push(allocations_per_order(&stderr, marks));
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    let text = report(
        marks,
        &world,
        &ours,
        &floors,
        &theirs,
        &allocations,
        powertools_version,
    );
    println!("{text}");
    // `make bench-cpu` names the page's results file: no figure is copied by hand.
    if let Ok(path) = std::env::var("BENCH_CPU_REPORT") {
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
        eprintln!("written to {path}");
    }
}

/// The floor: the same three round trips an order costs, made by a bare client in a process of
/// its own ([`floor_child`]); per order between the marks.
async fn floor(world: &mut World, table: &str, marks: Marks) -> PerOrder {
    let first = world.next_order;
    world.next_order += marks.total;
    let plan = format!(
        "{} {} {table} {first} {} {}",
        world.backend().proxy.endpoint(),
        world.stub.url(),
        marks.warm,
        marks.total
    );
    let proxy = &world.backend().proxy;
    let (requests, bytes) = (proxy.requests(), proxy.body_bytes());
    let exe = std::env::current_exe().expect("the bench's own path");
    let output = tokio::process::Command::new(exe)
        .env("BENCH_FLOOR_CHILD", plan)
        .output()
        .await
        .expect("the floor's process");
    assert!(
        output.status.success(),
        "the floor failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let cpu: Vec<f64> = text
        .split_whitespace()
        .map(|n| n.parse().expect("a CPU time"))
        .collect();
    let orders: Vec<String> = (first..first + marks.total)
        .map(|i| format!("floor-{i}"))
        .collect();
    check_charged_once(world, &orders);
    let proxy = &world.backend().proxy;
    PerOrder {
        cpu_us: marks.per_order(cpu[0], cpu[1]) * 1e6,
        wall_ms: f64::NAN,
        requests: (proxy.requests() - requests) as f64 / marks.total as f64,
        body_bytes: (proxy.body_bytes() - bytes) as f64 / marks.total as f64,
    }
}

/// The floor's process: `plan` is "dynamodb-endpoint payment-url table first warm total".
/// Prints its own CPU seconds after `warm` and after `total` orders.
fn floor_child(plan: &str) {
    let words: Vec<&str> = plan.split(' ').collect();
    let [dynamodb, payment, table, first, warm, total] = words[..] else {
        panic!("BENCH_FLOOR_CHILD is not a plan: {plan}");
    };
    let number = |w: &str| w.parse::<usize>().expect("a number");
    let (first, warm, total) = (number(first), number(warm), number(total));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = process_orders::testkit::pooled_client();
    let dynamodb: http::Uri = dynamodb.parse().expect("the DynamoDB endpoint");
    let charges: http::Uri = format!("{payment}/charges")
        .parse()
        .expect("the charges URL");
    // One exchange, the answer's body read whole (as the function reads every answer).
    let exchange = |request: http::Request<Full<Bytes>>| {
        let answer = client.request(request);
        async move {
            let answer = answer.await.expect("an answer");
            let status = answer.status();
            let body = answer.into_body().collect().await.expect("the body");
            (status, body.to_bytes())
        }
    };
    let dynamodb_call = |target: &'static str, body: String| {
        let request = http::Request::post(dynamodb.clone())
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", target)
            // moto reads the region and the account from it; nothing checks the signature, and
            // dynoxide only that it is dated.
            .header("x-amz-date", "20260101T000000Z")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, \
                 SignedHeaders=host, Signature=0",
            )
            .body(Full::new(Bytes::from(body)))
            .expect("a request");
        exchange(request)
    };
    let mut cpu = Vec::new();
    runtime.block_on(async {
        for n in 0..total {
            let id = format!("floor-{}", first + n);
            let claim = serde_json::json!({
                "TableName": table,
                "Item": {"pk": {"S": &id}, "status": {"S": "IN_PROGRESS"}, "expiry": {"N": "9999999999"}},
                "ConditionExpression": "attribute_not_exists(pk)",
            });
            let (status, answer) =
                dynamodb_call("DynamoDB_20120810.PutItem", claim.to_string()).await;
            assert!(status.is_success(), "claimed: {status} {answer:?}");
            let body = serde_json::json!({"order_id": &id, "amount": 1000, "currency": "EUR"});
            let charge = http::Request::post(charges.clone())
                .header("idempotency-key", &id)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())))
                .expect("a request");
            let (status, answer) = exchange(charge).await;
            assert!(status.is_success(), "charged: {status} {answer:?}");
            let complete = serde_json::json!({
                "TableName": table,
                "Key": {"pk": {"S": &id}},
                "UpdateExpression": "SET #s = :c",
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {":c": {"S": "COMPLETED"}},
            });
            let (status, answer) =
                dynamodb_call("DynamoDB_20120810.UpdateItem", complete.to_string()).await;
            assert!(status.is_success(), "completed: {status} {answer:?}");
            if n + 1 == warm || n + 1 == total {
                cpu.push(process_cpu_time(std::process::id()).as_secs_f64());
            }
        }
    });
    println!("{} {}", cpu[0], cpu[1]);
}

/// `total` new orders in events of [`BATCH`] records, their ids never used before in this run.
fn events(world: &mut World, total: usize) -> (Vec<String>, Vec<String>) {
    let first = world.next_order;
    world.next_order += total;
    let events = (0..total / BATCH)
        .map(|e| {
            let shape = EventShape {
                records: BATCH,
                fifo_groups: 0,
                seed: (first + e) as u64,
            };
            let base = first + e * BATCH;
            let event = event::generate(shape, |i, rng| generated_body(base + i, rng));
            serde_json::to_string(&event).expect("event")
        })
        .collect();
    let orders = (first..first + total).map(|i| format!("o-{i}")).collect();
    (events, orders)
}

/// Every order charged exactly once at the provider.
fn check_charged_once(world: &World, orders: &[String]) {
    for order in orders {
        assert_eq!(world.stub.charges(order), 1, "{order} charged once");
    }
}

/// One bootstrap of `bin` serving `marks.total` new orders through the store's `client`
/// (`DYNAMODB_CLIENT`); per order between the marks, and what it wrote to stderr.
async fn bootstrap(world: &mut World, bin: &str, marks: Marks, client: &str) -> (PerOrder, String) {
    let (events, orders) = events(world, marks.total);
    let mut env: Vec<(&str, &str)> = world
        .backend()
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    env.push(("DYNAMODB_CLIENT", client));
    let proxy = world.backend().proxy.clone();
    let (requests, bytes) = (proxy.requests(), proxy.body_bytes());
    let mut process = world.api.spawn(bin, &env).await;
    let mut cpu_warm = Duration::ZERO;
    let mut wall_warm = std::time::Instant::now();
    for (n, event) in events.iter().enumerate() {
        let answer = process.invoke(event).await;
        let answer = answer.unwrap_or_else(|e| panic!("{bin} failed: {e}"));
        let response: serde_json::Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(
            response["batchItemFailures"],
            serde_json::json!([]),
            "every order acknowledged"
        );
        if (n + 1) * BATCH == marks.warm {
            cpu_warm = process.cpu_time();
            wall_warm = std::time::Instant::now();
        }
    }
    let cpu_total = process.cpu_time();
    let wall = wall_warm.elapsed();
    let (_, stderr) = process.stop().await;
    check_charged_once(world, &orders);
    let per_order = PerOrder {
        cpu_us: marks.per_order(cpu_warm.as_secs_f64(), cpu_total.as_secs_f64()) * 1e6,
        wall_ms: marks.per_order(0.0, wall.as_secs_f64()) * 1e3,
        // The function makes no request at start-up: every one belongs to an order.
        requests: (proxy.requests() - requests) as f64 / marks.total as f64,
        body_bytes: (proxy.body_bytes() - bytes) as f64 / marks.total as f64,
    };
    (per_order, stderr)
}

/// Allocations, reallocations and bytes per order between the marks, from the counting
/// bootstrap's lines (one after each invocation).
fn allocations_per_order(stderr: &str, marks: Marks) -> [f64; 3] {
    let lines: Vec<Counts> = stderr.lines().filter_map(parse_report).collect();
    assert_eq!(
        lines.len(),
        marks.total / BATCH,
        "one count line per invocation: is it a count-allocations build?"
    );
    let (warm, total) = (
        lines[marks.warm / BATCH - 1],
        lines[marks.total / BATCH - 1],
    );
    let per_order =
        |count: fn(&Counts) -> u64| marks.per_order(count(&warm) as f64, count(&total) as f64);
    [
        per_order(|c| c.allocations),
        per_order(|c| c.reallocations),
        per_order(|c| c.bytes),
    ]
}

/// The same number of new orders through Powertools; per order, and its version.
async fn powertools(
    world: &mut World,
    python: &str,
    marks: Marks,
    round: usize,
) -> (PerOrder, String) {
    let (events, orders) = events(world, marks.total);
    let backend = world.backend();
    let var = |name: &str| {
        let value = backend.env.iter().find(|(n, _)| n == name);
        value.expect("a template variable").1.clone()
    };
    let seconds = |name: &str| var(name).parse::<f64>().expect("milliseconds") / 1000.0;
    let events: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::from_str(e).expect("event"))
        .collect();
    let plan = serde_json::json!({
        "events": events,
        "marks": [marks.warm / BATCH, marks.total / BATCH],
        "table": format!("bench-cpu-powertools-{round}-{}", world.on),
        "server": backend.server,
        "dynamodb": backend.proxy.endpoint(),
        "payment_url": world.stub.url(),
        "currency": var("DEFAULT_CURRENCY"),
        "connect_timeout_s": seconds("PAYMENT_CONNECT_TIMEOUT_MS"),
        "timeout_s": seconds("PAYMENT_TIMEOUT_MS"),
    });
    let path = std::env::temp_dir().join(format!(
        "powertools-cpu-{}-{round}.json",
        std::process::id()
    ));
    std::fs::write(&path, plan.to_string()).expect("write the plan");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/powertools_cpu.py");
    let proxy = backend.proxy.clone();
    let (requests, bytes) = (proxy.requests(), proxy.body_bytes());
    let output = tokio::process::Command::new(python)
        .arg(script)
        .arg(&path)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot start {python}: {e}"));
    let _ = std::fs::remove_file(&path);
    assert!(
        output.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).expect("its JSON line");
    assert_eq!(result["failures"], 0, "every order acknowledged: {result}");
    check_charged_once(world, &orders);
    let cpu = |i: usize| result["cpu_s"][i].as_f64().expect("a CPU time");
    let wall = |i: usize| result["wall_s"][i].as_f64().expect("a wall time");
    let per_order = PerOrder {
        cpu_us: marks.per_order(cpu(0), cpu(1)) * 1e6,
        wall_ms: marks.per_order(wall(0), wall(1)) * 1e3,
        requests: (proxy.requests() - requests) as f64 / marks.total as f64,
        body_bytes: (proxy.body_bytes() - bytes) as f64 / marks.total as f64,
    };
    let version = format!(
        "Powertools {} (Python {})",
        result["powertools"].as_str().unwrap_or("?"),
        result["python"].as_str().unwrap_or("?")
    );
    (per_order, version)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn report(
    marks: Marks,
    world: &World,
    ours: &[[Vec<PerOrder>; 2]],
    floors: &[Vec<PerOrder>],
    theirs: &[Vec<PerOrder>],
    allocations: &[[f64; 3]],
    powertools_version: Option<String>,
) -> String {
    use std::fmt::Write as _;
    let summary = |runs: &[PerOrder]| PerOrder {
        cpu_us: median(runs.iter().map(|r| r.cpu_us).collect()),
        wall_ms: median(runs.iter().map(|r| r.wall_ms).collect()),
        requests: median(runs.iter().map(|r| r.requests).collect()),
        body_bytes: median(runs.iter().map(|r| r.body_bytes).collect()),
    };
    let list = |runs: &[PerOrder]| {
        let values: Vec<String> = runs.iter().map(|r| format!("{:.1}", r.cpu_us)).collect();
        values.join(", ")
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "CPU per order on the shipped path (`make bench-cpu`): events of {BATCH} new orders, CPU \
         from {} to {} orders over {}, median of {} rounds.\n",
        marks.warm,
        marks.total,
        marks.total - marks.warm,
        floors.first().map_or(0, Vec::len)
    );
    let counted = if allocations.is_empty() {
        "not counted (BENCH_COUNTING_FUNCTION is not set)".to_owned()
    } else {
        let at = |i: usize| median(allocations.iter().map(|a| a[i]).collect());
        format!(
            "{:.1} (and {:.1} reallocations, {:.0} bytes)",
            at(0),
            at(1),
            at(2)
        )
    };
    let mut rounds = Vec::new();
    for (on, backend) in world.backends.iter().enumerate() {
        let _ = writeln!(
            out,
            "On {}:\n\n| function | CPU per order | time per order | DynamoDB requests per order \
             | DynamoDB request body bytes per order | allocations per order |\n\
             |---|---|---|---|---|---|",
            backend.name
        );
        let direct = summary(&ours[on][0]);
        let floor = summary(&floors[on]);
        for (c, client) in CLIENTS.iter().enumerate() {
            let mine = summary(&ours[on][c]);
            let counted = if on == 0 && c == 0 {
                counted.as_str()
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "| process-orders, `DYNAMODB_CLIENT={client}` | {:.1} us | {:.2} ms | {:.2} | {:.0} | {counted} |",
                mine.cpu_us, mine.wall_ms, mine.requests, mine.body_bytes
            );
            rounds.push(format!("{} {client}: {}", backend.name, list(&ours[on][c])));
        }
        let _ = writeln!(
            out,
            "| floor: the same round trips, bare hyper | {:.1} us | | {:.2} | {:.0} | |",
            floor.cpu_us, floor.requests, floor.body_bytes
        );
        let sdk = summary(&ours[on][1]);
        let _ = writeln!(
            out,
            "| direct / floor; sdk / direct | **{:.2}**; {:.2} | | | | |",
            direct.cpu_us / floor.cpu_us,
            sdk.cpu_us / direct.cpu_us
        );
        rounds.push(format!("{} floor: {}", backend.name, list(&floors[on])));
        if let Some(version) = &powertools_version {
            let theirs_summary = summary(&theirs[on]);
            let _ = writeln!(
                out,
                "| {version} | {:.1} us | {:.2} ms | {:.2} | {:.0} | |",
                theirs_summary.cpu_us,
                theirs_summary.wall_ms,
                theirs_summary.requests,
                theirs_summary.body_bytes
            );
            let _ = writeln!(
                out,
                "| Powertools / direct; Powertools / sdk | **{:.1}**; {:.1} | | | | |",
                theirs_summary.cpu_us / direct.cpu_us,
                theirs_summary.cpu_us / sdk.cpu_us,
            );
            rounds.push(format!(
                "{} Powertools: {}",
                backend.name,
                list(&theirs[on])
            ));
        }
        out.push('\n');
    }
    if powertools_version.is_none() {
        out.push_str("Powertools skipped: BENCH_PYTHON is not set (make bench-cpu sets it).\n\n");
    }
    let _ = writeln!(out, "CPU per order in each round, us:\n");
    for line in rounds {
        let _ = writeln!(out, "- {line}");
    }
    out
}
