#!/usr/bin/env bash
# make ops-demo: an on-call session against a local server. Starts moto, runs a small demo so the
# DLQs hold poison messages, then shows orders-ops depth, inspect and redrive, and
# depth again. Stops moto on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ESM="${ESM:-target/debug/local-esm}"
OPS="${OPS:-target/debug/orders-ops}"
source scripts/moto.sh
RUST_LOG=error "$ESM" demo --endpoint "$endpoint" --orders 20 --poison-rate 0.2 >/dev/null
for step in "depth" "inspect --max 10" "redrive --yes --rate 50" "depth"; do
  echo "\$ orders-ops $step --queue orders --endpoint \$endpoint"
  # shellcheck disable=SC2086
  "$OPS" $step --queue orders --endpoint "$endpoint"
  echo
done
