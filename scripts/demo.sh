#!/usr/bin/env bash
# make demo: the whole system on loopback, no Docker. Starts moto (SQS + DynamoDB), creates both
# queues with their DLQs and the table, sends generated orders (with duplicate sends and poison
# bodies), runs the local event source mapping until the queues drain, prints a summary, and
# stops everything it started, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${BIN:-target/debug/local-esm}"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
moto_server -H 127.0.0.1 -p "$port" >/tmp/process-orders-demo-moto.log 2>&1 &
moto_pid=$!
trap 'kill $moto_pid 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.1
done
"$BIN" demo --endpoint "http://127.0.0.1:$port" "$@"
