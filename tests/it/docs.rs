//! Docs that cannot drift: every `make` target, test binary, environment variable, metric,
//! alarm, command-line flag and file path that the README and `docs/` name exists, and every
//! variable the code reads and every metric it emits is documented.
//!
//! What counts as "named": text in backticks and in fenced code blocks. Prose is free.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: impl AsRef<Path>) -> String {
    let path = Path::new(ROOT).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The README and every page under `docs/`, by path.
fn documents() -> Vec<(String, String)> {
    let mut docs = vec![("README.md".to_owned(), read("README.md"))];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    for page in pages {
        let name = format!(
            "docs/{}",
            page.file_name().expect("a name").to_string_lossy()
        );
        docs.push((name.clone(), read(&name)));
    }
    docs
}

/// The code a document names: each backtick span, and each line of a fenced block.
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            spans.push(line.to_owned());
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(code), Some(_)) = (parts.next(), parts.next()) {
            spans.push(code.to_owned());
        }
    }
    spans
}

/// Every span of every document, with where it came from.
fn all_spans() -> Vec<(String, String)> {
    documents()
        .into_iter()
        .flat_map(|(name, text)| {
            code_spans(&text)
                .into_iter()
                .map(move |span| (name.clone(), span))
        })
        .collect()
}

/// Words of a span: split on anything that cannot be in an identifier, a flag or a path.
fn words(span: &str) -> impl Iterator<Item = &str> {
    span.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '#')))
        .filter(|w| !w.is_empty())
}

/// `A_VARIABLE`: upper case and digits, at least one underscore.
fn is_variable(word: &str) -> bool {
    word.contains('_')
        && word.len() > 3
        && word.starts_with(|c: char| c.is_ascii_uppercase())
        && word
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && !word.ends_with('_')
}

/// The repository's own text, where an environment variable a document names must appear:
/// the code, the template, the Makefile, the scripts, CI.
fn repository_text() -> String {
    let mut text = String::new();
    let mut stack: Vec<PathBuf> = ["src", "crates", "tools", "scripts", "examples", ".ci"]
        .iter()
        .map(|dir| Path::new(ROOT).join(dir))
        .collect();
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            for entry in std::fs::read_dir(&path).expect("a folder").flatten() {
                stack.push(entry.path());
            }
        } else if path.extension().is_some_and(|e| {
            ["rs", "sh", "py", "toml", "yaml", "json"].contains(&&*e.to_string_lossy())
        }) || path.file_name().is_some_and(|n| n == "run")
        {
            text.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
    }
    for file in [
        "template.yaml",
        "Makefile",
        "samconfig.toml",
        "sam-local-env.json",
        "Cargo.toml",
    ] {
        text.push_str(&read(file));
    }
    text
}

/// Variables a user sets for the AWS SDK, the shell or Cargo: documented for them, read by
/// their tools rather than by ours.
const OUTSIDE_VARIABLES: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "CARGO_TARGET_DIR",
    "CARGO_INCREMENTAL",
    "CARGO_PROFILE_RELEASE_OPT_LEVEL",
    "RUST_BACKTRACE",
    // Lambda's logging controls, read by lambda_runtime's subscriber.
    "AWS_LAMBDA_LOG_LEVEL",
    // The AWS SDK's service-specific endpoint, for the tools against a local server.
    "AWS_ENDPOINT_URL_DYNAMODB",
    // Powertools' own (.NET), named by docs/library.md's "Coming from Powertools".
    "POWERTOOLS_BATCH_ERROR_HANDLING_POLICY",
    "POWERTOOLS_BATCH_PARALLEL_ENABLED",
    "POWERTOOLS_BATCH_THROW_ON_FULL_BATCH_FAILURE",
];

#[test]
fn every_make_target_named_exists() {
    let makefile = read("Makefile");
    let targets: BTreeSet<&str> = makefile
        .lines()
        .filter_map(|line| line.split_once(':').map(|(name, _)| name))
        .filter(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
        .collect();
    assert!(targets.contains("run") && targets.contains("test"));
    let mut missing = Vec::new();
    for (doc, span) in all_spans() {
        let mut tokens = words(&span).peekable();
        while let Some(word) = tokens.next() {
            if word == "make"
                && let Some(&target) = tokens.peek()
                && !target.starts_with('-')
                && !target.contains('=')
                && !targets.contains(target)
            {
                missing.push(format!("{doc}: make {target}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "targets the Makefile lacks: {missing:#?}"
    );
}

#[test]
fn every_test_binary_and_package_named_exists() {
    let packages = [
        "process-orders",
        "lambda-kit",
        "sqs-batch",
        "idempotency",
        "claim-check",
        "sqs-admin",
        "local-esm",
        "orders-ops",
        "email-once",
        "sim",
    ];
    let mut wrong = Vec::new();
    for (doc, span) in all_spans() {
        if !span.contains("cargo") {
            continue;
        }
        let tokens: Vec<&str> = span.split_whitespace().collect();
        for pair in tokens.windows(2) {
            match pair[0] {
                // Every crate's integration tests are one binary, `it`.
                "--test" if pair[1] != "it" => wrong.push(format!("{doc}: --test {}", pair[1])),
                "-p" | "--package" if !packages.contains(&pair[1]) => {
                    wrong.push(format!("{doc}: -p {}", pair[1]))
                }
                _ => {}
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "no such test binary or package: {wrong:#?}"
    );
}

/// Variables the code no longer reads, which only the CHANGELOG may name (it says they went).
const REMOVED_VARIABLES: &[&str] = &["IDEMPOTENCY_FIND_UNPREFIXED"];

#[test]
fn every_environment_variable_named_is_read_or_set_somewhere() {
    let code = repository_text();
    let mut unknown = BTreeSet::new();
    for (doc, span) in all_spans() {
        for word in words(&span) {
            let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_');
            let removed = doc.ends_with("CHANGELOG.md") && REMOVED_VARIABLES.contains(&word);
            if is_variable(word)
                && !OUTSIDE_VARIABLES.contains(&word)
                && !removed
                && !code.contains(word)
            {
                unknown.insert(format!("{doc}: {word}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "named in the docs, unknown to the code, template, Makefile and scripts: {unknown:#?}"
    );
}

#[test]
fn every_variable_the_code_reads_is_documented() {
    let docs: String = documents().into_iter().map(|(_, text)| text).collect();
    let missing: Vec<&str> = process_orders::config::variables()
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| !docs.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "variables the docs never name: {missing:?}"
    );
}

#[test]
fn every_metric_emitted_is_documented_and_every_metric_documented_is_emitted() {
    let emitted = process_orders::testkit::emitted_metrics();
    let docs: String = documents().into_iter().map(|(_, text)| text).collect();
    let undocumented: Vec<&String> = emitted
        .iter()
        .filter(|m| !docs.contains(&format!("`{m}`")) && !docs.contains(&format!("\"{m}\"")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "metrics the docs never name: {undocumented:?}"
    );
    // A sample EMF document in the docs lists only metrics the function writes.
    let mut invented = Vec::new();
    for (doc, text) in documents() {
        for block in text.split("```").skip(1).step_by(2) {
            if !block.contains("CloudWatchMetrics") {
                continue;
            }
            for line in block.lines() {
                if let Some(rest) = line.split("\"Name\"").nth(1) {
                    let name: String = rest
                        .trim_start_matches([':', ' ', '"'])
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric())
                        .collect();
                    if !emitted.contains(&name) {
                        invented.push(format!("{doc}: {name}"));
                    }
                }
            }
        }
    }
    assert!(
        invented.is_empty(),
        "metrics the function never writes: {invented:?}"
    );
}

#[test]
fn every_alarm_named_exists_and_every_alarm_has_a_runbook_entry() {
    // The function's stack and the worker's.
    let template = read("template.yaml") + &read("worker.yaml");
    let alarms: BTreeSet<&str> = template
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.strip_suffix(':'))
        .filter(|name| name.ends_with("Alarm"))
        .collect();
    assert!(alarms.len() >= 8, "{alarms:?}");
    let mut unknown = Vec::new();
    for (doc, span) in all_spans() {
        for word in words(&span) {
            // `cloudwatch:PutMetricAlarm` is an IAM action, not an alarm.
            if word.ends_with("Alarm")
                && word.starts_with(|c: char| c.is_ascii_uppercase())
                && !word.starts_with("Put")
                && !span.contains(&format!(":{word}"))
                && !alarms.contains(word)
            {
                unknown.push(format!("{doc}: {word}"));
            }
        }
    }
    assert!(unknown.is_empty(), "alarms the template lacks: {unknown:?}");
    let runbook = read("docs/operations.md");
    let missing: Vec<&&str> = alarms
        .iter()
        .filter(|alarm| !runbook.contains(&format!("`{alarm}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "alarms without a runbook entry: {missing:?}"
    );
}

/// The flags each binary accepts, from its source: clap's `--long` names come from the fields of
/// its derive (`dry_run` is `--dry-run`) or a `long = "..."` / alias.
fn accepts(tool_source: &str, flag: &str) -> bool {
    let name = flag.trim_start_matches('-');
    ["help", "version"].contains(&name)
        || tool_source.contains(&format!("\"{name}\""))
        || tool_source.contains(&format!("--{name}"))
        || tool_source.contains(&format!("{}:", name.replace('-', "_")))
}

#[test]
fn every_flag_named_for_our_binaries_exists() {
    let sources = [
        ("orders-ops", read("tools/orders-ops/src/main.rs")),
        ("local-esm", read("tools/local-esm/src/main.rs")),
        ("process-orders", read("src/cli.rs")),
    ];
    let mut unknown = Vec::new();
    for (doc, span) in all_spans() {
        // A command line of one of ours: the flags after the binary's name, up to a pipe or `&&`.
        for command in span.split(['|', ';']).flat_map(|part| part.split("&&")) {
            let tokens: Vec<&str> = command.split_whitespace().collect();
            // The binary as a command: not a flag's value (`-p local-esm`, `--path
            // tools/orders-ops`, `--stack-name process-orders`).
            let Some(start) = tokens.iter().enumerate().position(|(i, t)| {
                let value = i > 0 && tokens[i - 1].starts_with('-');
                !value
                    && sources
                        .iter()
                        .any(|(bin, _)| t.ends_with(bin) && !t.contains('.'))
            }) else {
                continue;
            };
            let (_, source) = sources
                .iter()
                .find(|(bin, _)| tokens[start].ends_with(bin))
                .expect("found above");
            for token in &tokens[start + 1..] {
                let flag = token.split('=').next().unwrap_or(token);
                if flag.starts_with("--") && flag.len() > 2 && !accepts(source, flag) {
                    unknown.push(format!("{doc}: {} {flag}", tokens[start]));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "flags our binaries do not take: {unknown:#?}"
    );
}

/// The repository's top-level folders: a span that starts with one of them is a path.
const TOP_LEVEL: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "examples/",
    "crates/",
    "tools/",
    "docs/",
    "scripts/",
    "events/",
    "fuzz/",
    ".ci/",
    ".cargo/",
];

#[test]
fn every_file_path_named_exists() {
    let mut missing = BTreeSet::new();
    for (doc, span) in all_spans() {
        for word in words(&span) {
            let path = word.trim_end_matches(['.', ':']);
            let with_extension = [
                ".rs", ".toml", ".yaml", ".json", ".py", ".sh", ".md", ".txt",
            ]
            .iter()
            .any(|e| path.ends_with(e));
            let in_repository = TOP_LEVEL.iter().any(|top| path.starts_with(top));
            // Only a path we can check: in the repository, or a file name at the root.
            if !(in_repository || (with_extension && !path.contains('/'))) {
                continue;
            }
            // Build output, wildcards and placeholders.
            if path.contains(['*', '<', '{', '$']) || path.starts_with("fuzz/target") {
                continue;
            }
            let here = Path::new(ROOT).join(path);
            let beside = Path::new(ROOT)
                .join(Path::new(&doc).parent().unwrap_or(Path::new("")))
                .join(path);
            if !with_extension && !in_repository {
                continue;
            }
            if !here.exists() && !beside.exists() && !is_generated(path) {
                missing.insert(format!("{doc}: {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "paths that do not exist: {missing:#?}");
}

/// Files that a build or a run creates, or that a user writes, and names the docs may use.
fn is_generated(path: &str) -> bool {
    [
        "bootstrap.zip",
        ".cdx.json",
        "cargo-timing.html",
        "samconfig.local.toml",
        "Cargo.lock",
        "rustup-init",
        "lcov.info",
        "event.json",
        "policy.json",
        // Files the reader writes while following a step.
        "smoke.json",
        "ORDER.json",
    ]
    .iter()
    .any(|name| path.ends_with(name))
}

/// The deployer's permissions in the README have a row for every AWS service whose resources
/// `template.yaml` creates, so a new resource type cannot ship without saying what deploying it
/// takes.
#[test]
fn the_deployers_permissions_cover_every_resource_type_in_the_template() {
    let template = read("template.yaml");
    let services: BTreeSet<&str> = template
        .lines()
        .filter_map(|line| line.strip_prefix("    Type: AWS::"))
        .filter_map(|kind| kind.split("::").next())
        .collect();
    let readme = read("README.md");
    let section = readme
        .split("### The deployer's permissions")
        .nth(1)
        .expect("the deployer's permissions section");
    let rows: BTreeSet<&str> = section
        .lines()
        .take_while(|line| !line.starts_with("## "))
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|line| line.split(" |").next())
        .collect();
    fn covered(service: &str) -> Vec<&str> {
        match service {
            // SAM's function: the function, its role, and with a deployment preference CodeDeploy.
            "Serverless" => vec!["Lambda", "IAM", "CodeDeploy"],
            "Logs" => vec!["CloudWatch Logs"],
            other => vec![other],
        }
    }
    let mut missing = Vec::new();
    for service in &services {
        for row in covered(service) {
            if !rows.iter().any(|r| r.starts_with(row)) {
                missing.push(format!("{service}: no \"{row}\" row"));
            }
        }
    }
    assert!(services.len() >= 8, "{services:?}");
    assert!(missing.is_empty(), "{missing:?} in {rows:?}");
}

/// The variables a production source file reads by name (`var("X")`, `text("X")`, `flag`,
/// `ranged`, `var_os`), its tests left out.
fn variables_read_in(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut names = BTreeSet::new();
    for call in ["var(", "text(", "flag(", "ranged(", "var_os("] {
        for (at, _) in code.match_indices(call) {
            let rest = code[at + call.len()..].trim_start();
            let Some(rest) = rest.strip_prefix('"') else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if rest[name.len()..].starts_with('"') && is_variable(&name) {
                names.insert(name);
            }
        }
    }
    names
}

/// The README's configuration table names every variable the function reads, wherever the
/// reading is (the function, the libraries it composes, the log and trace layers): a variable
/// added to the code without a row fails here.
#[test]
fn the_readme_configuration_table_names_every_variable_the_function_reads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = read(root.join("README.md"));
    let table = readme
        .split("\n## Configuration")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README's Configuration section");
    let mut read_by = BTreeSet::new();
    let mut files = Vec::new();
    for dir in [
        "src",
        "crates/sqs-batch/src",
        "crates/idempotency/src",
        "crates/claim-check/src",
        "crates/lambda-kit/src",
    ] {
        let mut stack = vec![root.join(dir)];
        while let Some(path) = stack.pop() {
            for entry in std::fs::read_dir(&path).expect("dir").flatten() {
                let path = entry.path();
                // Test support reads its own variables (MOTO_SERVER, HOME): not the function's.
                // Nor is `ConfiguredStore` (the one-screen store for other functions: the order
                // function builds its store itself, src/store.rs).
                if path.ends_with("configured.rs") {
                    continue;
                }
                if path.is_dir() && !path.ends_with("testkit") {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
    }
    for file in &files {
        read_by.extend(variables_read_in(&read(file)));
    }
    for (name, _) in process_orders::config::variables() {
        read_by.insert(name.to_owned());
    }
    assert!(read_by.len() >= 40, "{read_by:?}");
    let missing: Vec<&String> = read_by
        .iter()
        .filter(|name| !table.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "read by the function, missing from the README's configuration table: {missing:?}"
    );
}

/// The README and the pages under `docs/` state what is true now: a figure says what it was
/// measured on and by which command, never when or in which round of work. History belongs to
/// the CHANGELOG (and git), which is left out.
#[test]
fn no_page_dates_a_fact_by_when_it_was_made() {
    let ordinals = [
        "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
        "tenth", "later", "earlier", "this", "that", "last", "next",
    ];
    let mut dated = Vec::new();
    for (name, text) in documents() {
        if name == "docs/CHANGELOG.md" {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            let words: Vec<&str> = lower
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != ':')
                .filter(|w| !w.is_empty())
                .collect();
            let is_date = |w: &str| {
                let b = w.as_bytes();
                b.len() >= 10
                    && b[..4].iter().all(u8::is_ascii_digit)
                    && b[4] == b'-'
                    && b[5..7].iter().all(u8::is_ascii_digit)
                    && b[7] == b'-'
                    && b[8..10].iter().all(u8::is_ascii_digit)
            };
            let is_clock = |w: &str| {
                let b = w.as_bytes();
                b.len() == 5 && b[2] == b':' && b.iter().filter(|c| c.is_ascii_digit()).count() == 4
            };
            let by_round = words.windows(2).any(|pair| {
                (ordinals.contains(&pair[0]) && matches!(pair[1], "session" | "round"))
                    || (pair[0] == "same" && pair[1] == "day")
                    // An issue is a round of work: a page says what is true, not which asked.
                    || (pair[0] == "issue" && pair[1].starts_with(|c: char| c.is_ascii_digit()))
            });
            if words.iter().any(|w| is_date(w) || is_clock(w)) || by_round {
                dated.push(format!("{name}:{}: {line}", n + 1));
            }
        }
    }
    assert!(
        dated.is_empty(),
        "{} lines date a fact by when it was made:\n{}",
        dated.len(),
        dated.join("\n")
    );
}

/// The README's configuration table gives each variable the default the code applies (the
/// crates' and the function's registries, `config::variables()` and the worker's, whose values
/// the configuration's own tests hold to what is applied): a default changed in the code and not
/// in the table fails here.
#[test]
fn the_readme_gives_each_variable_the_default_the_code_applies() {
    let readme = read(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"));
    let mut registered = process_orders::config::variables();
    registered.extend_from_slice(sqs_batch::worker::VARIABLES);
    let mut wrong = Vec::new();
    for (name, default) in registered {
        let Some(default) = default else { continue };
        let row = readme
            .lines()
            .find(|line| line.starts_with(&format!("| `{name}` |")));
        let Some(row) = row else {
            wrong.push(format!("{name}: no row of its own in the README's table"));
            continue;
        };
        let cell = row.split('|').nth(2).unwrap_or_default().trim();
        if !cell.starts_with(&format!("`{default}`")) {
            wrong.push(format!(
                "{name}: the code's default is {default}, the README says {cell}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The workspace's Rust sources (and the simulator's planted-bug patch, whose names its page
/// uses), as path and text.
fn rust_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if name == "target" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                out.push((path.display().to_string(), text));
            }
        }
    }
    let mut out = Vec::new();
    for top in [
        "src", "crates", "examples", "tools", "tests", "benches", "fuzz",
    ] {
        walk(&Path::new(ROOT).join(top), &mut out);
    }
    out.push((
        "tools/sim/planted.patch".to_owned(),
        read("tools/sim/planted.patch"),
    ));
    out
}

/// The identifiers in code lines (comment lines left out, so a name only a comment keeps is
/// not "in the code").
fn code_identifiers(sources: &[(String, String)]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (_, text) in sources {
        for line in text.lines() {
            let line = line.trim_start_matches(['+', '-', ' ']).trim_start();
            if line.starts_with("//") {
                continue;
            }
            names.extend(
                line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
                    .map(str::to_owned),
            );
        }
    }
    names
}

/// The crates the lock file names that are not this workspace's: a path starting with one of
/// them (`http::Request`, `dynoxide::Database`) is theirs to keep, not ours.
fn outside_crates() -> BTreeSet<String> {
    let ours = [
        "process-orders",
        "sqs-batch",
        "idempotency",
        "lambda-kit",
        "claim-check",
    ];
    read("Cargo.lock")
        .lines()
        .filter_map(|line| line.strip_prefix("name = \""))
        .map(|name| name.trim_end_matches('"'))
        .filter(|name| !ours.contains(name))
        .map(|name| name.replace('-', "_"))
        .chain(["std", "core", "alloc"].map(str::to_owned))
        .collect()
}

/// A Rust path the README or a page names (`sqs_batch::process_batch`,
/// `BatchOptions::fail_on_entire_batch_failure`, `guard::run`) names something the code has:
/// every name in it after the first is in the workspace's code. Only paths that start in this
/// workspace are read (a crate of ours, or a name our code uses that is no outside crate's);
/// the CHANGELOG names what was, and is left out.
#[test]
fn every_rust_path_named_is_in_the_code() {
    let sources = rust_sources();
    let names = code_identifiers(&sources);
    let outside = outside_crates();
    let ours = [
        "sqs_batch",
        "idempotency",
        "lambda_kit",
        "claim_check",
        "email_once",
    ];
    let mut checked = 0;
    let mut missing = BTreeSet::new();
    for (doc, span) in all_spans() {
        if doc == "docs/CHANGELOG.md" {
            continue;
        }
        let span = span.trim();
        let path: String = span
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let segments: Vec<&str> = path.trim_end_matches(':').split("::").collect();
        if segments.len() < 2 || segments.iter().any(|s| s.is_empty()) {
            continue;
        }
        let first = segments[0];
        let starts_here = ours.contains(&first)
            || (names.contains(first) && !outside.contains(first) && first != "crate");
        if !starts_here {
            continue;
        }
        checked += 1;
        if let Some(gone) = segments[1..].iter().find(|s| !names.contains(**s)) {
            missing.insert(format!("{doc}: `{span}` ({gone})"));
        }
    }
    assert!(checked > 150, "only {checked} paths read");
    assert!(
        missing.is_empty(),
        "paths naming what the code does not have: {missing:#?}"
    );
}

/// The Rust blocks of the README and the pages are code that compiles: each is, line for line
/// (indentation aside), in a source file of the workspace, which `cargo test` builds, or in a
/// doc comment's example, which it runs as a doctest. The libraries' READMEs are doctests of
/// their own.
#[test]
fn every_rust_block_in_the_docs_is_code_that_compiles() {
    let normalise = |text: &str| -> Vec<String> {
        text.lines()
            .map(|line| {
                let line = line.trim();
                let line = line
                    .strip_prefix("//!")
                    .or_else(|| line.strip_prefix("///"))
                    .unwrap_or(line);
                line.trim().to_owned()
            })
            .filter(|line| !line.is_empty())
            .collect()
    };
    let sources: Vec<Vec<String>> = rust_sources()
        .iter()
        .map(|(_, text)| normalise(text))
        .collect();
    let mut blocks = 0;
    let mut loose = Vec::new();
    for (doc, text) in documents() {
        let mut block: Option<String> = None;
        for line in text.lines() {
            let fence = line.trim_start().strip_prefix("```");
            match (&mut block, fence) {
                (None, Some(info)) if info.starts_with("rust") => block = Some(String::new()),
                (Some(code), Some(_)) => {
                    let lines = normalise(code);
                    blocks += 1;
                    let found = sources.iter().any(|file| {
                        file.windows(lines.len().max(1))
                            .any(|window| window == lines.as_slice())
                    });
                    if !found {
                        loose.push(format!(
                            "{doc}: {}",
                            lines.first().cloned().unwrap_or_default()
                        ));
                    }
                    block = None;
                }
                (Some(code), None) => {
                    code.push_str(line);
                    code.push('\n');
                }
                _ => {}
            }
        }
    }
    assert!(blocks >= 4, "only {blocks} Rust blocks read");
    assert!(
        loose.is_empty(),
        "Rust blocks that are in no compiled file (copy them from one): {loose:#?}"
    );
}
