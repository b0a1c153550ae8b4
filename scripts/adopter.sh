#!/usr/bin/env bash
# A team's own crate (tests/adopter, outside the workspace, so its features resolve as a user's
# build resolves them): its tests, then the build without `idempotency`'s `sqs-batch` feature,
# which must fail with an error that names the feature.
set -euo pipefail
cd "$(dirname "$0")/../tests/adopter"
# The workspace's versions, so the crates it builds are the ones the workspace tested.
cp ../../Cargo.lock Cargo.lock
cargo test --quiet
if out=$(cargo check --quiet --no-default-features --lib 2>&1); then
    echo "adopter: built without idempotency's sqs-batch feature, yet it calls into_verdict" >&2
    exit 1
fi
if ! grep -qF '`into_verdict` needs the `sqs-batch` feature of `idempotency`' <<<"$out"; then
    echo "adopter: the build without the feature failed without naming it:" >&2
    echo "$out" >&2
    exit 1
fi
echo "adopter: without the sqs-batch feature the compiler names it"
