#!/usr/bin/env bash
# Runs each cargo-fuzz target for FUZZ_SECONDS (default 600), seeded from events/.
# cargo-fuzz wants nightly flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them.
# No sanitizer: the code is safe Rust, and what we hunt is panics and broken invariants.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-600}"
mkdir -p corpus/event corpus/body corpus/answer
cp regressions/answer/* corpus/answer/
cp ../events/*.json corpus/event/
python3 - <<'PY'
import glob, json, os
for path in glob.glob("../events/*.json"):
    for i, record in enumerate(json.load(open(path))["Records"]):
        name = os.path.basename(path).replace(".json", f"-{i}")
        open(f"corpus/body/{name}", "w").write(record.get("body") or "")
PY
for target in ${TARGETS:-event body answer}; do
  echo "== $target for ${seconds}s"
  RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none "$target" "corpus/$target" -- \
    -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 2>&1 | tail -25
done
