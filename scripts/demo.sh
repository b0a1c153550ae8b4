#!/usr/bin/env bash
# make demo: the whole system on loopback, no Docker. Starts moto (SQS + DynamoDB), creates both
# queues with their DLQs and the table, sends generated orders (with duplicate sends and poison
# bodies), runs the local event source mapping until the queues drain, prints a summary, and
# stops everything it started, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-target/debug/local-esm}"
source scripts/moto.sh
"$BIN" demo --endpoint "$endpoint" "$@"
