//! The init benchmark's baseline: a hello-world `lambda_runtime` function, built with the same
//! profile as the function (`cargo build --release --example hello`).

use lambda_runtime::{Error, LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(|_: LambdaEvent<Value>| async {
        Ok::<_, Error>(serde_json::json!({ "batchItemFailures": [] }))
    }))
    .await
}
