//! A panic under Lambda's JSON log format is a JSON line at level ERROR.

use std::process::Command;

/// Set in the child process this test starts.
const CHILD: &str = "PROCESS_ORDERS_PANIC_CHILD";

/// The test re-runs itself as a child, which sets up logging as `main.rs` does under
/// `AWS_LAMBDA_LOG_FORMAT=JSON` and panics; the parent reads the child's output.
#[test]
fn a_panic_is_a_json_error_line_when_logs_are_json() {
    if std::env::var_os(CHILD).is_some() {
        process_orders::logs::init(std::io::stdout);
        if process_orders::cli::json_logs() {
            process_orders::cli::log_panics_as_json();
        }
        panic!("a panic on purpose, MARKER-7731");
    }
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "panics::a_panic_is_a_json_error_line_when_logs_are_json",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .output()
        .expect("the child runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let line: serde_json::Value = text
        .lines()
        // The harness prints the test's name on the line the child's first output joins.
        .filter_map(|line| line.find('{').map(|start| &line[start..]))
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line.to_string().contains("MARKER-7731"))
        .unwrap_or_else(|| panic!("no JSON line carries the panic:\n{text}"));
    assert_eq!(line["level"], "ERROR", "{line}");
    assert!(
        line.to_string().contains("panics.rs"),
        "its location: {line}"
    );
}
