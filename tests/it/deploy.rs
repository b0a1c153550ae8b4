//! `make deploy` (scripts/deploy.sh) names the account, region and stack, and deploys only once
//! the account is confirmed, against moto's STS (account 123456789012).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use process_orders::testkit::dynamo::moto_endpoint;

/// moto's default account.
const ACCOUNT: &str = "123456789012";

/// The Python that has boto3: the tests' venv (moto needs boto3), else the system's.
fn python() -> PathBuf {
    let venv = std::env::var("HOME")
        .map(|home| PathBuf::from(home).join(".cache/process-orders/venv/bin/python"))
        .unwrap_or_default();
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// Runs the deploy script with `sam` replaced by a stub that records its arguments; returns the
/// output and what `sam` was called with, if it was.
fn deploy(confirm: Option<&str>) -> (Output, Option<String>) {
    let dir = std::env::temp_dir().join(format!(
        "deploy-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let called = dir.join("sam-called");
    let sam = dir.join("sam");
    std::fs::write(
        &sam,
        format!("#!/bin/sh\necho \"$@\" > {}\n", called.display()),
    )
    .expect("stub");
    Command::new("chmod")
        .arg("+x")
        .arg(&sam)
        .status()
        .expect("chmod");
    let mut command = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/deploy.sh"));
    command
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PYTHON", python())
        .env("SAM", &sam)
        .env("AWS_ENDPOINT_URL", moto_endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "eu-west-1")
        .stdin(Stdio::null());
    if let Some(account) = confirm {
        command.env("DEPLOY_ACCOUNT", account);
    }
    let output = command.output().expect("the script runs");
    let args = std::fs::read_to_string(&called).ok();
    drop(std::fs::remove_dir_all(&dir));
    (output, args)
}

#[test]
fn deploy_names_the_account_and_waits_for_its_confirmation() {
    // No confirmation and no terminal: it says where, and deploys nothing.
    let (output, sam) = deploy(None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("to account {ACCOUNT}, region eu-west-1")),
        "{stdout}{stderr}"
    );
    assert!(
        stderr.contains(&format!("DEPLOY_ACCOUNT={ACCOUNT}")),
        "{stderr}"
    );
    assert_eq!(sam, None, "sam deploy ran unconfirmed");
    // Another account's id: refused.
    let (output, sam) = deploy(Some("210987654321"));
    assert!(!output.status.success());
    assert_eq!(sam, None, "sam deploy ran for the wrong account");
    // This account's id: deployed.
    let (output, sam) = deploy(Some(ACCOUNT));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // samconfig.toml fixes no region, so the first deployment is guided.
    assert!(
        sam.as_deref()
            .is_some_and(|args| args.starts_with("deploy")),
        "{sam:?}"
    );
}
