#!/usr/bin/env bash
# The one-shot mode against a local DynamoDB-compatible server (moto): the same event twice.
# The second run must ACK every valid order as a duplicate, without charging.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENT="${EVENT:-events/standard.json}"
BIN="${BIN:-target/debug/process-orders}"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="http://127.0.0.1:$port"
moto_server -H 127.0.0.1 -p "$port" >/tmp/process-orders-moto.log 2>&1 &
moto_pid=$!
trap 'kill $moto_pid 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.1
done
table=process-orders-local
python3 scripts/dynamodb_table.py --endpoint "$endpoint" --table "$table"
export AWS_ENDPOINT_URL="$endpoint" AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
  AWS_SECRET_ACCESS_KEY=test AWS_EC2_METADATA_DISABLED=true IDEMPOTENCY_TABLE="$table" \
  RUST_LOG="${RUST_LOG:-info}"
for run in first second; do
  echo "== $run run of $EVENT"
  "$BIN" --event "$EVENT" 2> >(grep "batch processed" | sed 's/\x1b\[[0-9;]*m//g' >&2)
  sleep 0.2
done
echo "== the table"
python3 scripts/dynamodb_table.py --endpoint "$endpoint" --table "$table" --scan
