//! The tool's command line: a typo is an error, each command explains itself with examples, and
//! numbers are checked against their ranges.

use std::process::{Command, Output};

fn esm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_local-esm"))
        .args(args)
        .env_clear()
        .output()
        .expect("spawn local-esm")
}

#[test]
fn unknown_flags_and_bad_numbers_are_errors() {
    for args in [
        &["demo", "--endpiont", "http://127.0.0.1:9"][..],
        &["demo", "--endpoint", "http://127.0.0.1:9", "--orders", "0"],
        &[
            "demo",
            "--endpoint",
            "http://127.0.0.1:9",
            "--poison-rate",
            "1.5",
        ],
        &["gen-event", "--records", "ten"],
        &["gen-event", "--recrods", "10"],
    ] {
        let output = esm(args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn every_command_has_help_with_examples() {
    for command in ["demo", "gen-event"] {
        let output = esm(&[command, "--help"]);
        assert!(output.status.success(), "{command}");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("Examples:"), "{command}:\n{text}");
    }
}

#[test]
fn gen_event_prints_the_event_it_was_asked_for() {
    let output = esm(&[
        "gen-event",
        "--records=3",
        "--fifo-groups",
        "2",
        "--seed",
        "1",
    ]);
    assert!(output.status.success());
    let event: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let records = event["Records"].as_array().expect("Records");
    assert_eq!(records.len(), 3);
    assert!(
        records
            .iter()
            .all(|r| r["attributes"]["MessageGroupId"].is_string())
    );
}

/// `make demo` end to end on the tests' moto: every valid order charged, each once, and only
/// poison left in the DLQs. (A demo whose function timeout did not fit its deadline margin once
/// charged 262 of 566 and sent the rest to the DLQs; nothing else ran it.)
#[test]
fn the_demo_charges_every_valid_order() {
    let endpoint = process_orders::testkit::dynamo::moto_endpoint();
    let output = esm(&["demo", "--endpoint", &endpoint, "--orders", "60"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = stdout
        .lines()
        .find_map(|l| l.strip_prefix("orders charged "))
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    let words: Vec<&str> = summary.split_whitespace().collect();
    // "C of V valid (charge requests R), ..."
    assert_eq!(words.get(1), Some(&"of"), "{summary}");
    assert_eq!(words.first(), words.get(2), "charged of valid: {summary}");
    assert_eq!(
        words.get(6).map(|r| r.trim_end_matches("),")),
        words.first().copied(),
        "one charge request per order: {summary}"
    );
}
