//! The real binary in one-shot mode: what scripts, `make run` and benchmarks call.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_process-orders");

fn events(name: &str) -> String {
    format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs the binary with a clean environment plus `vars`, feeding `stdin`.
fn run(args: &[&str], vars: &[(&str, &str)], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_clear()
        .envs(vars.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().expect("wait")
}

fn stdout_json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is the response JSON")
}

#[test]
fn a_file_event_prints_the_response_and_logs_to_stderr() {
    let output = run(&["--event", &events("fifo.json")], &[], "");
    let response = stdout_json(&output);
    let ids: Vec<_> = response["batchItemFailures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], "11111111-aaaa-4000-8000-000000000003");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("batch processed"), "{stderr}");
    // The EMF documents go to stderr too, one line each, never onto the response: the
    // invocation's, and the cold start's (one process, one invocation: a cold start).
    let emf: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{') && l.contains(r#""_aws":"#))
        .map(|l| serde_json::from_str(l).expect("EMF line is JSON"))
        .collect();
    assert_eq!(emf.len(), 2, "{stderr}");
    assert_eq!(emf[0]["Records"], 5.0);
    assert_eq!(emf[1]["ColdStart"], 1);
}

#[test]
fn stdin_works_too() {
    let json = std::fs::read_to_string(events("empty.json")).unwrap();
    let output = run(&["--event", "-"], &[], &json);
    assert_eq!(
        stdout_json(&output),
        serde_json::json!({ "batchItemFailures": [] })
    );
}

/// Under Lambda's JSON format the lines are Powertools-shaped: flat keys, the function's
/// context on every line, and the record's own fields (`order_id` included) at the top level.
#[test]
fn json_logs_when_lambda_asks_for_them() {
    let output = run(
        &["--event", &events("standard.json")],
        &[
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
            ("POWERTOOLS_SERVICE_NAME", "payments"),
        ],
        "",
    );
    stdout_json(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).expect("every log line is JSON"))
        .collect();
    let logs: Vec<_> = lines.iter().filter(|l| l["_aws"].is_null()).collect();
    assert!(!logs.is_empty());
    for line in &logs {
        for key in ["level", "location", "message", "timestamp"] {
            assert!(line[key].is_string(), "{key} missing in {line}");
        }
        assert_eq!(line["service"], "payments", "{line}");
        assert_eq!(line["cold_start"], true, "one invocation: all cold, {line}");
        assert!(
            line.get("fields").is_none() && line.get("span").is_none(),
            "{line}"
        );
    }
    let rejected: Vec<_> = logs
        .iter()
        .filter(|l| l["message"] == "record not acknowledged")
        .collect();
    assert_eq!(rejected.len(), 3);
    for line in &rejected {
        assert_eq!(line["level"], "WARN");
        for field in ["message_id", "outcome", "reason", "receive_count"] {
            assert!(!line[field].is_null(), "{field} missing in {line}");
        }
    }
    // Every line of a record whose body names an order carries its id, valid order or not
    // (o-3 has amount 0); a body that is not JSON names none.
    let order_ids: Vec<&str> = rejected
        .iter()
        .filter_map(|l| l["order_id"].as_str())
        .collect();
    assert_eq!(order_ids, ["o-3", "o-4"], "{stderr}");
    for line in rejected.iter().filter(|l| !l["order_id"].is_null()) {
        assert_eq!(line["key"], line["order_id"], "{line}");
    }
}

/// Lambda's text-format logs (and one-shot mode's stderr) are read by CloudWatch and by people,
/// never by a terminal: no colour codes, whatever else in the build enables them.
#[test]
fn text_logs_carry_no_escape_bytes() {
    let output = run(
        &["--event", &events("standard.json")],
        &[("RUST_LOG", "debug")],
        "",
    );
    stdout_json(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("record not acknowledged"), "{stderr}");
    assert!(
        !output.stderr.contains(&0x1b),
        "an escape byte in the text logs: {stderr:?}"
    );
}

#[test]
fn a_malformed_event_is_a_clear_error() {
    let output = run(&["--event", "-"], &[], r#"{"Records": "nope"}"#);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not an SQS event"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn a_record_without_message_id_fails_the_invocation() {
    let output = run(&["--event", "-"], &[], r#"{"Records": [{"body": "{}"}]}"#);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("messageId"));
}

#[test]
fn a_bad_setting_stops_start_up_naming_the_variable() {
    let output = run(
        &["--event", &events("empty.json")],
        &[("SQS_BATCH_MAX_CONCURRENCY", "zero")],
        "",
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("SQS_BATCH_MAX_CONCURRENCY"));
}

#[test]
fn inside_lambda_without_a_table_it_refuses_to_start() {
    let output = run(&[], &[("AWS_LAMBDA_FUNCTION_NAME", "process-orders")], "");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("IDEMPOTENCY_TABLE"));
}

#[test]
fn a_wrong_argument_prints_the_usage() {
    let output = run(&["--evnt"], &[], "");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("usage:"));
}

/// The JSON log lines of an output (stdout and stderr), parsed; other lines are skipped.
fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    [&output.stdout, &output.stderr]
        .iter()
        .flat_map(|stream| {
            String::from_utf8_lossy(stream)
                .into_owned()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect()
}

/// With Lambda's JSON log format (`AWS_LAMBDA_LOG_FORMAT=JSON`), a start-up refusal is a JSON
/// line at level ERROR, so the runbook's `filter level = "ERROR"` finds it; plain text would be
/// missed by every JSON query.
#[test]
fn a_start_up_refusal_is_a_json_error_line_when_logs_are_json() {
    let output = run(
        &[],
        &[
            ("AWS_LAMBDA_FUNCTION_NAME", "process-orders"),
            ("AWS_LAMBDA_LOG_FORMAT", "JSON"),
        ],
        "",
    );
    assert_eq!(output.status.code(), Some(2));
    let lines = json_lines(&output);
    let refusal = lines
        .iter()
        .find(|line| line.to_string().contains("IDEMPOTENCY_TABLE must be set"))
        .unwrap_or_else(|| {
            panic!(
                "no JSON line names the refusal; stdout {:?}, stderr {:?}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
        });
    assert_eq!(refusal["level"], "ERROR", "{refusal}");
}

/// The text format keeps the refusal as one plain line on stderr, for people and scripts.
#[test]
fn a_start_up_refusal_is_plain_text_otherwise() {
    let output = run(&[], &[("AWS_LAMBDA_FUNCTION_NAME", "process-orders")], "");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("process-orders: IDEMPOTENCY_TABLE must be set"),
        "{stderr}"
    );
}
