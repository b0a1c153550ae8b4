#!/usr/bin/env bash
# `cargo lambda watch` and `cargo lambda invoke --data-file EVENT` exactly as a user types them,
# with no flags: `[workspace.metadata.lambda.watch]` in Cargo.toml names the binary and declares
# the local emulator. Prints the response, and fails unless it is the one-shot mode's answer to
# the same event (both run the in-memory store and the simulated gateway).
set -euo pipefail
cd "$(dirname "$0")/.."
event="${1:-events/standard.json}"
log="$(mktemp)"
cargo build --quiet --bin process-orders
cargo lambda watch >"$log" 2>&1 &
watch_pid=$!
trap 'kill "$watch_pid" 2>/dev/null || true; pkill -P "$watch_pid" 2>/dev/null || true; rm -f "$log"' EXIT
# The watcher compiles and starts the function at the first invocation: probe with an empty batch.
for _ in $(seq 1 300); do
  if cargo lambda invoke --data-file events/empty.json >/dev/null 2>&1; then
    got="$(cargo lambda invoke --data-file "$event")"
    echo "$got"
    expected="$(env -i PATH="$PATH" METRICS_ENABLED=false "${CARGO_TARGET_DIR:-target}/debug/process-orders" --event "$event" 2>/dev/null)"
    if [ "$got" != "$expected" ]; then
      echo "cargo lambda invoke answered $got, the one-shot mode $expected" >&2
      exit 1
    fi
    echo "cargo lambda watch + invoke answer $event as the one-shot mode does" >&2
    exit 0
  fi
  kill -0 "$watch_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 1
done
echo "cargo lambda watch did not serve in time" >&2
cat "$log" >&2
exit 1
