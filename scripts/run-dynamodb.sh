#!/usr/bin/env bash
# The one-shot mode against a local DynamoDB-compatible server (moto): the same event twice.
# The second run must ACK every valid order as a duplicate, without charging.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENT="${EVENT:-events/standard.json}"
BIN="${BIN:-target/debug/process-orders}"
source scripts/moto.sh
table=process-orders-local
python3 scripts/dynamodb_table.py --endpoint "$endpoint" --table "$table"
export AWS_ENDPOINT_URL="$endpoint" AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
  AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true IDEMPOTENCY_TABLE="$table" \
  RUST_LOG="${RUST_LOG:-info}"
for run in first second; do
  echo "== $run run of $EVENT"
  "$BIN" --event "$EVENT" 2> >(grep "batch processed" >&2)
  sleep 0.2
done
echo "== the table"
python3 scripts/dynamodb_table.py --endpoint "$endpoint" --table "$table" --scan
