//! Local tools, not part of the Lambda function: an event source mapping that does what
//! Lambda's SQS poller does against a local SQS-compatible server (moto), the queue and table
//! set-up, and an order generator. `make demo` and the end-to-end tests use them.

pub mod esm;
pub mod send;
pub mod setup;

pub use sqs_admin::{ToolError, init_tool_logging, progress_bar, queues, sdk_config};
