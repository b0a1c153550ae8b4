//! Every AWS client the function uses, against a server that checks SigV4 signatures as AWS
//! does: moto with its IAM authentication on (dynoxide never checks them, and moto only with
//! it on). Each client's request passes signed by a key moto knows, with and without a session
//! token, and is refused with a wrong secret, so these tests can fail.

use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_sqs::config::{Credentials, SharedCredentialsProvider};
use idempotency::IdempotencyStore;
use idempotency::testkit::{RETENTION, claim, t0};
use process_orders::app::SQS_SDK;
use process_orders::aws::{self, DynamoDbClient};
use process_orders::payment::key::KeySource;
use process_orders::payment::key::secrets_manager::SecretsManagerKey;
use process_orders::testkit::dynamo::{TEST_SDK, create_table, signing_moto, unique_table};

/// The three ways a request is signed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signed {
    /// The IAM user's long-term key.
    User,
    /// A role's session credentials: the session token is sent and signed.
    Session,
    /// The user's key id with a secret that is not its own.
    WrongSecret,
}

const ALL: [Signed; 3] = [Signed::User, Signed::Session, Signed::WrongSecret];

/// The function's shared configuration for the signing server, with `signed`'s credentials.
fn sdk(signed: Signed) -> SdkConfig {
    let (endpoint, keys) = signing_moto();
    let credentials = match signed {
        Signed::User => Credentials::new(
            &keys.access_key_id,
            &keys.secret_access_key,
            None,
            None,
            "signed",
        ),
        Signed::Session => Credentials::new(
            &keys.session.access_key_id,
            &keys.session.secret_access_key,
            Some(keys.session.session_token.clone()),
            None,
            "signed",
        ),
        Signed::WrongSecret => Credentials::new(
            &keys.access_key_id,
            "not-the-secret-moto-issued-for-this-key",
            None,
            None,
            "signed",
        ),
    };
    aws::local_config(endpoint)
        .to_builder()
        .credentials_provider(SharedCredentialsProvider::new(credentials))
        .build()
}

/// Whether each way of signing got through, in [`ALL`]'s order.
fn passed(results: [bool; 3]) {
    assert_eq!(
        results,
        [true, true, false],
        "user key, session, wrong secret: only the last is refused"
    );
}

/// The store's own client and the SDK's: a claim goes through, signed either way, and a wrong
/// secret is refused (an outage to the store, never an answer).
#[tokio::test]
async fn the_store_clients_sign_as_dynamodb_checks() {
    let table = unique_table();
    let admin = aws::dynamodb(&sdk(Signed::User), &TEST_SDK);
    create_table(&admin, &table).await;
    for which in [DynamoDbClient::Direct, DynamoDbClient::Sdk] {
        let mut results = [false; 3];
        for (i, signed) in ALL.into_iter().enumerate() {
            let store = aws::dynamodb_store(&sdk(signed), &TEST_SDK, which, &table, RETENTION)
                .expect("a region and credentials");
            let key = format!("{which:?}-{signed:?}");
            results[i] = store.begin(&claim(&key, t0())).await.is_ok();
        }
        assert_eq!(results, [true, true, false], "{which:?}");
    }
}

/// The SQS client (visibility backoff, DLQ moves, the worker's receives).
#[tokio::test]
async fn the_sqs_client_signs_as_sqs_checks() {
    let mut results = [false; 3];
    for (i, signed) in ALL.into_iter().enumerate() {
        let sqs = aws::sqs(&sdk(signed), &SQS_SDK);
        results[i] = sqs
            .create_queue()
            .queue_name(format!("signed-{i}"))
            .send()
            .await
            .is_ok();
    }
    passed(results);
}

/// The Secrets Manager client, reading the payment API key.
#[tokio::test]
async fn the_secrets_manager_client_signs_as_secrets_manager_checks() {
    let admin = aws_sdk_secretsmanager::Client::new(&sdk(Signed::User));
    admin
        .create_secret()
        .name("payment-key")
        .secret_string("sk_test_signed")
        .send()
        .await
        .expect("a secret");
    let mut results = [false; 3];
    for (i, signed) in ALL.into_iter().enumerate() {
        let key = SecretsManagerKey::new(sdk(signed), "payment-key");
        results[i] = tokio::time::timeout(Duration::from_secs(30), key.fetch())
            .await
            .expect("an answer")
            .is_ok();
    }
    passed(results);
}

/// The binary resolves its credentials as the AWS CLI does: a `credential_process` profile
/// (`AWS_PROFILE`, `AWS_CONFIG_FILE`) signs every store request, checked by a server that
/// verifies them; the same profile printing a wrong secret gets every record retried.
#[tokio::test]
async fn the_binary_signs_with_a_credential_process_profile() {
    let (endpoint, keys) = signing_moto();
    let table = unique_table();
    create_table(&aws::dynamodb(&sdk(Signed::User), &TEST_SDK), &table).await;
    let run = |secret: &str| {
        let dir = std::env::temp_dir().join(format!("profile-{}-{secret}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let process = dir.join("credentials.sh");
        std::fs::write(
            &process,
            format!(
                "#!/bin/sh\necho '{{\"Version\": 1, \"AccessKeyId\": \"{}\", \"SecretAccessKey\": \"{secret}\"}}'\n",
                keys.access_key_id
            ),
        )
        .expect("the process");
        let config = dir.join("config");
        std::fs::write(
            &config,
            format!(
                "[profile signer]\nregion = us-east-1\ncredential_process = /bin/sh {}\n",
                process.display()
            ),
        )
        .expect("the profile");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
            .args([
                "--event",
                &format!("{}/events/standard.json", env!("CARGO_MANIFEST_DIR")),
            ])
            .env_clear()
            .envs([
                ("AWS_CONFIG_FILE", config.display().to_string()),
                (
                    "AWS_SHARED_CREDENTIALS_FILE",
                    dir.join("none").display().to_string(),
                ),
                ("AWS_PROFILE", "signer".to_owned()),
                ("AWS_REGION", "us-east-1".to_owned()),
                ("AWS_ENDPOINT_URL", endpoint.clone()),
                ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
                ("IDEMPOTENCY_TABLE", table.clone()),
                ("METRICS_ENABLED", "false".to_owned()),
            ])
            .output()
            .expect("the binary runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let response: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("the response");
        response["batchItemFailures"]
            .as_array()
            .expect("failures")
            .len()
    };
    let in_memory = std::process::Command::new(env!("CARGO_BIN_EXE_process-orders"))
        .args([
            "--event",
            &format!("{}/events/standard.json", env!("CARGO_MANIFEST_DIR")),
        ])
        .env_clear()
        .env("METRICS_ENABLED", "false")
        .output()
        .expect("the binary runs");
    let expected = serde_json::from_slice::<serde_json::Value>(&in_memory.stdout)
        .expect("the response")["batchItemFailures"]
        .as_array()
        .expect("failures")
        .len();
    let records = std::fs::read_to_string(format!(
        "{}/events/standard.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("the event")
    .matches("\"messageId\"")
    .count();
    assert!(expected < records, "some records are charged");
    assert_eq!(
        run(&keys.secret_access_key),
        expected,
        "signed by the profile's key"
    );
    assert_eq!(run("not-the-secret"), records, "every record retried");
}
