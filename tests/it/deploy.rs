//! `make deploy` (scripts/deploy.sh) names the account, region and stack, and deploys only once
//! the account is confirmed, against moto's STS (account 123456789012); and it passes a
//! ConfigurationHash that changes with the code and with every parameter, which SAM's own
//! translator turns into a new version for the `live` alias (scripts/configuration_hash.py).

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
    deploy_with(confirm, "", b"bootstrap")
}

/// As [`deploy`], with `PARAMETERS` and a bootstrap of `code`.
fn deploy_with(confirm: Option<&str>, parameters: &str, code: &[u8]) -> (Output, Option<String>) {
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
    let bootstrap = dir.join("bootstrap");
    std::fs::write(&bootstrap, code).expect("bootstrap");
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
        .env("BOOTSTRAP", &bootstrap)
        .env("PARAMETERS", parameters)
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

/// The ConfigurationHash `make deploy` passes: the same for the same code and parameters, another
/// for another parameter value or another build, and always passed to `sam deploy`.
#[test]
fn every_deploy_passes_a_configuration_hash_of_the_code_and_the_parameters() {
    let hash = |parameters: &str, code: &[u8]| {
        let (output, sam) = deploy_with(Some(ACCOUNT), parameters, code);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let sam = sam.expect("sam deploy ran");
        assert!(sam.contains("--parameter-overrides"), "{sam}");
        let hash = sam
            .split("ConfigurationHash=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .expect("a ConfigurationHash")
            .to_owned();
        assert_eq!(hash.len(), 64, "{sam}");
        assert!(
            sam.contains(parameters),
            "the given overrides pass on: {sam}"
        );
        hash
    };
    let url = |u: &str| format!("PaymentApiUrl={u}");
    let first = hash(&url("https://pay.example/v1"), b"build 1");
    assert_eq!(first, hash(&url("https://pay.example/v1"), b"build 1"));
    assert_ne!(first, hash(&url("https://pay.example/v2"), b"build 1"));
    assert_ne!(first, hash(&url("https://pay.example/v1"), b"build 2"));
    // The template's default is 30: another value.
    let with_timeout = format!("{} FunctionTimeout=10", url("https://pay.example/v1"));
    assert_ne!(first, hash(&with_timeout, b"build 1"));
}

/// SAM's own translator (aws-sam-translator, as CloudFormation passes parameter values, `CodeUri`
/// as `sam package` leaves it): changing any one parameter the function's properties reference,
/// or the build, gives another `AWS::Lambda::Version` logical id, so `live` moves. The runbook's
/// "redeploy with" steps are among them. Without `AutoPublishCodeSha256` none would
/// (`configuration_hash.py check` refuses such a template).
#[test]
fn every_parameter_the_function_reads_publishes_a_new_version() {
    let output = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/configuration_hash.py"))
        .args(["check", "--markdown"])
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()
        .expect("the check runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("; 0 publish no new version"), "{stdout}");
    for runbook in [
        "PaymentApiUrl",
        "PaymentApiKey",
        "FunctionTimeout",
        "MaxConcurrency",
        "(bootstrap digest)",
    ] {
        let row = stdout
            .lines()
            .find(|line| line.starts_with(&format!("| `{runbook}` |")))
            .unwrap_or_else(|| panic!("{runbook} not checked: {stdout}"));
        let ids: Vec<&str> = row
            .split('|')
            .map(str::trim)
            .filter(|cell| cell.starts_with("`OrdersFunctionVersion"))
            .collect();
        assert_eq!(ids.len(), 2, "{row}");
        assert_ne!(ids[0], ids[1], "{row}");
    }
    eprintln!("{stdout}");
}
