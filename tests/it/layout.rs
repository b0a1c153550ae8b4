//! The repository's shape: the design card's top level, and a dependency graph that only points
//! down (lambda-kit, then the libraries, the function, the tools' shared crate, the tools).

use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Cargo as it runs these tests (`CARGO` is set for test binaries), offline: the graph is in
/// `Cargo.lock`.
fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args(args)
        .arg("--offline")
        .current_dir(ROOT)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The design card's top level: the function is the root package.
#[test]
fn the_root_holds_the_design_cards_entries() {
    for entry in [
        "Cargo.toml",
        "src/main.rs",
        "src/lib.rs",
        "events",
        "tests/it/main.rs",
        "template.yaml",
        "Makefile",
        "README.md",
    ] {
        assert!(Path::new(ROOT).join(entry).exists(), "{entry} at the root");
    }
    assert!(!Path::new(ROOT).join("crates/process-orders").exists());
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).expect("manifest");
    assert!(manifest.contains("[package]\nname = \"process-orders\""));
    assert!(manifest.contains("[workspace]"));
    assert!(
        !manifest.contains("default-members"),
        "the root package is the default"
    );
}

/// Each workspace crate's layer; a dependency (normal or dev) must point to a lower one. A
/// crate's dev-dependency on itself (to turn its testkit on) is the one exception.
fn layer(name: &str) -> usize {
    match name {
        "lambda-kit" => 0,
        "sqs-batch" => 1,
        // Its `sqs-batch` feature: the guard's outcome as a record's verdict.
        "idempotency" => 2,
        "claim-check" => 2,
        "process-orders" | "email-once" => 3,
        "sqs-admin" => 4,
        "local-esm" | "sim" => 5,
        "orders-ops" => 6,
        other => panic!("{other}: a workspace crate without a layer; give it one here"),
    }
}

#[test]
fn no_dependency_points_from_a_lower_layer_to_a_higher_one() {
    let metadata: serde_json::Value =
        serde_json::from_str(&cargo(&["metadata", "--no-deps", "--format-version", "1"]))
            .expect("metadata JSON");
    let members: Vec<&str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let mut checked = 0;
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("name");
        for dep in package["dependencies"].as_array().expect("dependencies") {
            let dep_name = dep["name"].as_str().expect("dependency name");
            if !members.contains(&dep_name) || dep_name == name {
                continue;
            }
            checked += 1;
            assert!(
                layer(dep_name) < layer(name),
                "{name} ({}) depends on {dep_name} ({}), kind {}",
                layer(name),
                layer(dep_name),
                dep["kind"]
            );
        }
    }
    assert!(checked > 10, "only {checked} workspace edges seen");
    // `crates/` holds the libraries only (layers 0 to 2, each publishable); whatever depends on
    // the function (the simulator, the tools) lives in `tools/`, examples in `examples/`.
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("name");
        let manifest = package["manifest_path"].as_str().expect("manifest path");
        if manifest.contains("/crates/") {
            assert!(
                layer(name) <= 2,
                "{name} is in crates/ but is not a library"
            );
        }
    }
}

/// The function built alone (`cargo build -p process-orders`, no other crate's features
/// unified in) resolves credentials as the AWS CLI does: SSO and `credential_process` profiles
/// for local runs (`signed::the_binary_signs_with_a_credential_process_profile` runs one).
#[test]
fn the_function_alone_reads_sso_and_credential_process_profiles() {
    let tree = cargo(&[
        "tree",
        "-p",
        "process-orders",
        "-e",
        "normal,features",
        "-i",
        "aws-config",
        "--depth",
        "1",
    ]);
    for feature in ["sso", "credentials-process"] {
        assert!(
            tree.contains(&format!("aws-config feature \"{feature}\"")),
            "{feature} missing for process-orders alone:\n{tree}"
        );
    }
}

/// The on-call tool builds neither the emulator nor the batch testkit.
#[test]
fn the_on_call_tool_does_not_compile_the_emulator() {
    let tree = cargo(&["tree", "-p", "orders-ops", "-e", "normal,features"]);
    assert!(tree.contains("sqs-admin"), "{tree}");
    assert!(
        !tree.contains("local-esm"),
        "orders-ops reaches local-esm:\n{tree}"
    );
    assert!(
        !tree.contains("sqs-batch feature \"testkit\""),
        "orders-ops turns the batch testkit on"
    );
    assert!(
        !tree.contains("process-orders feature \"testkit\""),
        "orders-ops turns the function's testkit on"
    );
}

/// The variable that plants the simulator's bugs in the planted tree (`scripts/planted_tree.py`
/// applies `tools/sim/planted.patch`, whose lambda-kit build script reads it).
const SIM_MUTATIONS: &str = "PROCESS_ORDERS_SIM_MUTATIONS";

/// Every file of the repository as a path relative to it, with its text (binary files skipped),
/// build output and mutation runs left out.
fn repository_texts() -> Vec<(String, String)> {
    let mut texts = Vec::new();
    let mut stack = vec![Path::new(ROOT).to_owned()];
    while let Some(path) = stack.pop() {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if matches!(&*name, "target" | ".git" | ".aws-sam") || name.starts_with("mutants.out") {
                continue;
            }
            for entry in std::fs::read_dir(&path).expect("a folder").flatten() {
                stack.push(entry.path());
            }
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            let relative = path.strip_prefix(ROOT).expect("inside the repository");
            texts.push((relative.to_string_lossy().into_owned(), text));
        }
    }
    assert!(texts.len() > 100, "only {} files read", texts.len());
    texts
}

/// The crates that ship hold no planted bug and read no variable of the project's at build
/// time: no check site, no switch, no build script of lambda-kit's. The bugs are the patch the
/// planted tree applies, and it adds them back (a patch that lost them would plant nothing).
#[test]
fn the_published_crates_hold_no_planted_bug() {
    let planted = ["mutation::", "sim_mutations", SIM_MUTATIONS, "planted_"];
    let mut shipped = 0;
    for (file, text) in repository_texts() {
        if !file.starts_with("crates/") || file.ends_with(".md") {
            continue;
        }
        shipped += 1;
        for word in planted {
            assert!(!text.contains(word), "{file} names {word}");
        }
    }
    assert!(shipped > 40, "only {shipped} files of the crates read");
    assert!(!Path::new(ROOT).join("crates/lambda-kit/build.rs").exists());
    let patch = std::fs::read_to_string(Path::new(ROOT).join("tools/sim/planted.patch"))
        .expect("the planted bugs' patch");
    for added in [
        "+++ b/crates/lambda-kit/build.rs",
        "+++ b/crates/lambda-kit/src/mutation.rs",
        "+pub mod mutation;",
        "cargo::rustc-cfg=sim_mutations",
    ] {
        assert!(patch.contains(added), "the patch lacks {added}");
    }
    let sites = patch
        .lines()
        .filter(|l| l.starts_with('+') && l.contains("mutation::active(\""))
        .count();
    assert!(sites >= 25, "the patch plants {sites} check sites");
}

/// Nothing on the release path sets `PROCESS_ORDERS_SIM_MUTATIONS`: only the simulator (which
/// reads it), the planted bugs' patch and script, the docs and the Makefile name it, and the
/// Makefile only where it runs in the planted tree, never by `export` (which would reach
/// `make build`, `build-lambda`, `deploy` and the rest).
#[test]
fn the_release_build_never_sets_the_planted_bugs_variable() {
    let mut naming = Vec::new();
    for (file, text) in repository_texts() {
        if text.contains(SIM_MUTATIONS) || text.contains("sim_mutations") {
            naming.push(file);
        }
    }
    for file in &naming {
        assert!(
            file.starts_with("tools/sim/")
                || file.ends_with(".md")
                || file == "scripts/planted_tree.py"
                || file == "Makefile"
                || file == "tests/it/layout.rs",
            "{file} names {SIM_MUTATIONS} or its cfg: only the simulator, its patch and script, \
             the docs and the Makefile's planted tree may"
        );
    }
    let makefile = std::fs::read_to_string(Path::new(ROOT).join("Makefile")).expect("the Makefile");
    let mut uses = Vec::new();
    for line in makefile.lines() {
        let code = line.split_once('#').map_or(line, |(code, _)| code);
        if code.contains(SIM_MUTATIONS) {
            assert_eq!(
                code,
                format!("SIM_MUTATIONS := {SIM_MUTATIONS}=1"),
                "the variable is named once, as SIM_MUTATIONS"
            );
        }
        assert!(
            !(code.contains("export") && code.contains("SIM_MUTATIONS"))
                && code.trim() != "export"
                && !code.contains(".EXPORT_ALL_VARIABLES"),
            "exported to every target: {line}"
        );
        if code.contains("$(SIM_MUTATIONS)") {
            uses.push(code.to_owned());
        }
    }
    assert_eq!(uses.len(), 1, "{uses:#?}");
    assert!(
        uses[0].starts_with("PLANTED = tree=$$(python3 scripts/planted_tree.py) && cd \"$$tree\""),
        "only the planted tree sets it: {}",
        uses[0]
    );
}

/// The libraries are publishable as crates.io takes them (`make package` packages and verifies
/// them): a README that is their front page, both license files, keywords and categories, and,
/// for a crate with features, docs.rs metadata that documents them. Everything else stays
/// unpublishable.
#[test]
fn the_libraries_are_publishable_and_nothing_else_is() {
    const LIBRARIES: [&str; 4] = ["lambda-kit", "sqs-batch", "idempotency", "claim-check"];
    let metadata: serde_json::Value =
        serde_json::from_str(&cargo(&["metadata", "--no-deps", "--format-version", "1"]))
            .expect("metadata JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let mut libraries = 0;
    for package in packages {
        let name = package["name"].as_str().expect("name");
        // `publish = false` is an empty list of registries; unset (null) is crates.io.
        let publishable = package["publish"].as_array().is_none_or(|r| !r.is_empty());
        if !LIBRARIES.contains(&name) {
            assert!(!publishable, "{name} would be published");
            continue;
        }
        libraries += 1;
        assert!(publishable, "{name} cannot be published");
        let dir = Path::new(package["manifest_path"].as_str().expect("manifest path"))
            .parent()
            .expect("the crate's folder")
            .to_owned();
        assert_eq!(package["readme"].as_str(), Some("README.md"), "{name}");
        let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
        assert!(
            readme.starts_with(&format!("# {name}\n")) && readme.contains("```rust"),
            "{name}: its README names it and shows it in use"
        );
        for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
            let text = std::fs::read_to_string(dir.join(license)).expect(license);
            assert!(text.len() > 1_000, "{name}: {license} is not the license");
        }
        assert_eq!(package["license"].as_str(), Some("MIT OR Apache-2.0"));
        for link in ["repository", "homepage"] {
            assert!(
                package[link]
                    .as_str()
                    .is_some_and(|l| l.starts_with("https://")),
                "{name}: no {link}"
            );
        }
        for list in ["keywords", "categories"] {
            let items = package[list].as_array().expect(list);
            assert!(
                (1..=5).contains(&items.len()),
                "{name}: {list} {items:?} (crates.io takes one to five)"
            );
        }
        let features: Vec<&str> = package["features"]
            .as_object()
            .expect("features")
            .keys()
            .map(String::as_str)
            .filter(|f| *f != "default")
            .collect();
        let documented: Vec<&str> = package["metadata"]["docs"]["rs"]["features"]
            .as_array()
            .map(|f| f.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        for feature in &documented {
            assert!(
                features.contains(feature),
                "{name}: docs.rs names {feature}"
            );
        }
        // Adapters (the features that bring an AWS SDK) must show on docs.rs.
        for feature in features.iter().filter(|f| !f.starts_with("testkit")) {
            assert!(
                documented.contains(feature),
                "{name}: docs.rs would not document the `{feature}` feature"
            );
        }
    }
    assert_eq!(libraries, LIBRARIES.len());
}

/// What the libraries ship (their code's doc comments, their READMEs) points at no file of this
/// repository they do not ship: on crates.io and docs.rs such a path leads nowhere. A file of the
/// repository is named by its URL.
#[test]
fn the_libraries_docs_name_no_file_they_do_not_ship() {
    let outside = [
        "docs/",
        "template.yaml",
        "worker.yaml",
        "src/app.rs",
        "orders-ops",
        "scripts/",
        "tools/",
        "examples/",
        "Makefile",
        "shared/",
    ];
    let mut read = 0;
    for (file, text) in repository_texts() {
        if !file.starts_with("crates/") {
            continue;
        }
        let is_readme = file.ends_with("README.md");
        if !is_readme && !file.ends_with(".rs") {
            continue;
        }
        read += 1;
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            if !(is_readme || trimmed.starts_with("///") || trimmed.starts_with("//!")) {
                continue;
            }
            // A URL names the file where it is.
            let words: Vec<&str> = line
                .split_whitespace()
                .filter(|w| !w.contains("https://"))
                .collect();
            let line_text = words.join(" ");
            for path in outside {
                assert!(
                    !line_text.contains(path),
                    "{file}:{}: names {path}, which the crate does not ship: {line}",
                    n + 1
                );
            }
        }
    }
    assert!(read > 30, "only {read} files read");
}

/// The function's modules (and the payment module's own) depend on one another without a
/// circle: each is read, understood and tested from the ones below it. An edge is a `crate::m`
/// (or, inside `payment`, a `super::m`) in a module's code outside its tests.
#[test]
fn the_functions_modules_form_no_circle() {
    let src = Path::new(ROOT).join("src");
    let mut modules: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(&src).expect("src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if matches!(name.as_str(), "main" | "lib" | "testkit") {
            continue;
        }
        if path.is_dir() {
            for file in std::fs::read_dir(&path).expect("dir") {
                let file = file.expect("entry").path();
                if file.extension().is_some_and(|e| e == "rs") {
                    let sub = file
                        .file_stem()
                        .expect("name")
                        .to_string_lossy()
                        .into_owned();
                    let module = if sub == "mod" {
                        name.clone()
                    } else {
                        format!("{name}::{sub}")
                    };
                    modules.push((module, std::fs::read_to_string(&file).expect("read")));
                }
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            modules.push((name, std::fs::read_to_string(&path).expect("read")));
        }
    }
    // A parent's use of its children is left out here: the payment module's provider dispatch
    // (`payment::answers` and its providers, `payment::key` and its Secrets Manager source) uses
    // its children, which use its types.
    no_circle(&modules, ("config", "payment::http"), false);
}

/// Each library's README has a Layout section naming every source file of its `src/`, and only
/// files that exist: a module added, moved or removed without its line fails here.
#[test]
fn each_librarys_layout_names_every_source_file() {
    for crate_name in ["lambda-kit", "sqs-batch", "idempotency", "claim-check"] {
        let dir = Path::new(ROOT).join("crates").join(crate_name);
        let readme = std::fs::read_to_string(dir.join("README.md")).expect("a README");
        let section = readme
            .split("\n## Layout\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{crate_name}'s README has no Layout section"));
        let section = section.split("\n## ").next().unwrap_or_default();
        let named: Vec<&str> = section
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|span| span.ends_with(".rs"))
            .collect();
        let mut files = Vec::new();
        sources(&dir.join("src"), &dir.join("src"), &mut files);
        for file in &files {
            assert!(
                named.contains(&file.as_str()),
                "{crate_name}'s Layout does not name src/{file}"
            );
        }
        for name in &named {
            assert!(
                files.iter().any(|f| f == name),
                "{crate_name}'s Layout names src/{name}, which does not exist"
            );
        }
    }
}

/// The `.rs` files under `dir`, as paths relative to `root` with `/` between folders.
fn sources(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root).expect("under src");
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

// Depth-first search for a circle, naming it when found.
fn visit(
    node: &str,
    edges: &[(String, String)],
    path: &mut Vec<String>,
    done: &mut Vec<String>,
) -> Option<Vec<String>> {
    if let Some(at) = path.iter().position(|p| p == node) {
        let mut circle = path[at..].to_vec();
        circle.push(node.to_owned());
        return Some(circle);
    }
    if done.iter().any(|d| d == node) {
        return None;
    }
    path.push(node.to_owned());
    for (_, to) in edges.iter().filter(|(from, _)| from == node) {
        if let Some(circle) = visit(to, edges, path, done) {
            return Some(circle);
        }
    }
    path.pop();
    done.push(node.to_owned());
    None
}

/// A library crate's modules outside its tests and testkit, each a name such as
/// `dynamodb::direct` and its source.
fn library_modules(crate_name: &str) -> Vec<(String, String)> {
    let src = Path::new(ROOT).join("crates").join(crate_name).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    files
        .iter()
        .filter(|f| *f != "lib.rs" && !f.starts_with("testkit") && !f.ends_with("tests.rs"))
        .map(|f| {
            let name = f
                .trim_end_matches(".rs")
                .trim_end_matches("/mod")
                .replace('/', "::");
            (name, std::fs::read_to_string(src.join(f)).expect("read"))
        })
        .collect()
}

/// The idempotency crate in layers, lowest first: the store's contracts, the stores, the guarded
/// run, `once`, the verdicts for `sqs-batch`. No module imports from a higher layer, and none
/// circles back.
#[test]
fn the_idempotency_crates_modules_import_only_downwards() {
    let modules = library_modules("idempotency");
    no_circle(&modules, ("guard", "store"), true);
    layered(
        &modules,
        &[
            &["store"],
            &[
                "memory",
                "dynamodb::table",
                "dynamodb::item",
                "dynamodb::sdk",
                "dynamodb",
                "dynamodb::direct::error",
                "dynamodb::direct::transport",
                "dynamodb::direct::wire",
                "dynamodb::direct::quota",
                "dynamodb::direct::sigv4",
                "dynamodb::direct",
                "redis",
                "cached",
                "configured",
            ],
            &["guard"],
            &["once"],
            &["verdict", "no_verdict"],
        ],
    );
}

/// The batch crate in layers, lowest first: the event's edge, the processor, settling
/// (visibility, DLQ moves), one batch from event to response, the runners. No module imports
/// from a higher layer, and none circles back.
#[test]
fn the_batch_crates_modules_import_only_downwards() {
    let modules = library_modules("sqs-batch");
    no_circle(&modules, ("processor", "edge"), true);
    layered(
        &modules,
        &[
            &["edge", "failure", "turns", "env_names", "sqs_entries"],
            &[
                "processor::record",
                "processor::options",
                "processor::report",
                "processor::scope",
                "processor",
                "typed",
            ],
            &[
                "backoff",
                "visibility",
                "visibility::sqs",
                "recovery",
                "dead_letter",
                "dead_letter::sqs",
            ],
            &["batch"],
            &[
                "lambda",
                "worker::options",
                "worker::port",
                "worker::scaling",
                "worker",
                "worker::sqs",
            ],
        ],
    );
}

/// Fails naming the import when a module of `modules` imports from a higher layer of `layers`
/// (lowest first), or when a module is in no layer (a new file must be placed).
fn layered(modules: &[(String, String)], layers: &[&[&str]]) {
    let layer = |name: &str| {
        layers
            .iter()
            .position(|l| l.contains(&name))
            .unwrap_or_else(|| panic!("the module {name} is in no layer: place it"))
    };
    for (name, _) in modules {
        layer(name);
    }
    let edges = module_edges(modules, true);
    let upward: Vec<String> = edges
        .iter()
        .filter(|(from, to)| layer(from) < layer(to))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(upward.is_empty(), "imports from a higher layer: {upward:?}");
    assert!(
        edges.iter().any(|(from, to)| layer(from) > layer(to)),
        "the graph is read: {edges:?}"
    );
}

/// The edges between `modules` (each a name such as `payment::http` and its source): a
/// `crate::m` or a `super::m` (from the module's parent) in its code outside its tests and
/// comments, each name of a `{...}` group counted, to the longest module name the path starts
/// with; with `children`, also a parent's own use of a child module (`use wire::read_answer`,
/// not a `pub use` re-export, which is its face). Sorted, without repeats.
fn module_edges(modules: &[(String, String)], children: bool) -> Vec<(String, String)> {
    let names: Vec<&str> = modules.iter().map(|(m, _)| m.as_str()).collect();
    let target = |path: &str| {
        names
            .iter()
            .filter(|n| path == **n || path.starts_with(&format!("{n}::")))
            .max_by_key(|n| n.len())
            .map(|n| (*n).to_owned())
    };
    let mut edges: Vec<(String, String)> = Vec::new();
    for (module, text) in modules {
        // Code only: not the tests, not comments (a doc link is no dependency).
        let code: String = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        if children {
            // A parent's own use of a child (`use wire::read_answer`), where the child is a
            // module of the list; a `pub use` re-export is the parent's face, not its use.
            for child in names
                .iter()
                .filter_map(|n| n.strip_prefix(&format!("{module}::")))
            {
                if child.contains("::") {
                    continue;
                }
                let at = format!("{child}::");
                for (i, _) in code.match_indices(&at) {
                    let before = code[..i].chars().next_back();
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    let line = code[..i]
                        .rsplit('\n')
                        .next()
                        .unwrap_or_default()
                        .trim_start();
                    let re_export = line.starts_with("pub use ")
                        || (line.starts_with("pub(") && line.contains(") use "));
                    if re_export {
                        continue;
                    }
                    let base = format!("{module}::{child}");
                    for to in use_paths(&base, &code[i + at.len()..])
                        .iter()
                        .filter_map(|p| target(p))
                    {
                        if to != *module {
                            edges.push((module.clone(), to));
                        }
                    }
                }
            }
        }
        for (prefix, base) in [("crate::", String::new()), ("super::", parent.to_owned())] {
            if prefix == "super::" && parent.is_empty() {
                continue;
            }
            for (i, _) in code.match_indices(prefix) {
                for to in use_paths(&base, &code[i + prefix.len()..])
                    .iter()
                    .filter_map(|p| target(p))
                {
                    if to != *module {
                        edges.push((module.clone(), to));
                    }
                }
            }
        }
    }
    edges.sort();
    edges.dedup();
    edges
}

/// The paths a use or a path expression names, from just after its `crate::` (or `super::`)
/// under `base`: `payment::http` is one; `{edge::Batch, processor::{A, B}}` and
/// `payment::{http, key}` are each of their names, nested groups included.
fn use_paths(base: &str, rest: &str) -> Vec<String> {
    let path: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
        .collect();
    let after = &rest[path.len()..];
    let trimmed = path.trim_end_matches(':');
    let full = match (base.is_empty(), trimmed.is_empty()) {
        (_, true) => base.to_owned(),
        (true, false) => trimmed.to_owned(),
        (false, false) => format!("{base}::{trimmed}"),
    };
    let mut paths = vec![full.clone()];
    if let Some(group) = after.strip_prefix('{') {
        // The group's names at its own depth, each expanded in turn.
        let mut depth = 0usize;
        let mut item = String::new();
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    paths.extend(use_paths(&full, item.trim()));
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        if !item.trim().is_empty() {
            paths.extend(use_paths(&full, item.trim()));
        }
    }
    paths
}

/// Fails naming the circle when `modules` depend on one another in one; `known` is an edge the
/// graph must hold, so a reading that finds no edge cannot pass.
fn no_circle(modules: &[(String, String)], known: (&str, &str), children: bool) {
    let edges = module_edges(modules, children);
    let mut done = Vec::new();
    for (name, _) in modules {
        if let Some(circle) = visit(name, &edges, &mut Vec::new(), &mut done) {
            panic!("a circle of modules: {}", circle.join(" -> "));
        }
    }
    assert!(
        edges
            .iter()
            .any(|(from, to)| (from.as_str(), to.as_str()) == known),
        "the graph is read: {edges:?}"
    );
}
