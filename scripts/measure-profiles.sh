#!/usr/bin/env bash
# Builds the arm64 bootstrap with each candidate release profile and reports its size, zip size
# and build time, plus the one-shot time of a 10,000-record event on this machine (x86_64, same
# profile). Slow: about 7 minutes per profile per target on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${PROFILE_TARGET_DIR:-$HOME/.cache/process-orders/profile-target}"
EVENT="${EVENT_10K:-/tmp/event-10k.json}"
[ -f "$EVENT" ] || cargo run --quiet -p local-esm -- gen-event --records 10000 > "$EVENT"
printf '| profile | build s | bootstrap bytes | zip bytes | 10k one-shot ms (median of 7) |\n|---|---|---|---|---|\n'
for profile in ${PROFILES:-release-plain release-lto release-small}; do
  start=$(date +%s)
  cargo lambda build --quiet --arm64 --profile "$profile" --bin process-orders --output-format zip >&2
  took=$(( $(date +%s) - start ))
  dir="$CARGO_TARGET_DIR/lambda/process-orders"
  size=$(stat -c %s "$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/$profile/process-orders")
  zip=$(stat -c %s "$dir/bootstrap.zip")
  cargo build --quiet --profile "$profile" --bin process-orders
  ms=$(python3 - "$CARGO_TARGET_DIR/$profile/process-orders" "$EVENT" <<'PY'
import statistics, subprocess, sys, time
runs = []
for _ in range(7):
    t = time.perf_counter()
    subprocess.run([sys.argv[1], "--event", sys.argv[2]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    runs.append((time.perf_counter() - t) * 1000)
print(f"{statistics.median(runs):.1f}")
PY
)
  printf '| %s | %s | %s | %s | %s |\n' "$profile" "$took" "$size" "$zip" "$ms"
done
