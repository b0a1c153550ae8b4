#!/usr/bin/env bash
# Builds the worker's image for each platform named (arm64, amd64; both by default) with podman
# (installed from Debian's packages when missing) as the manifest list $WORKER_IMAGE
# (process-orders-worker by default), one image per platform inside it.
#
# The binary is `cargo lambda build --release` for the platform's musl target (zig links it,
# statically, so the image needs no C library). It is the same code as the Lambda bootstrap,
# built for another libc.
set -euo pipefail
cd "$(dirname "$0")/.."
image="${WORKER_IMAGE:-process-orders-worker}"
arches=("$@")
[ ${#arches[@]} -gt 0 ] || arches=(arm64 amd64)
target_dir="${CARGO_TARGET_DIR:-target}"
context="$target_dir/worker-image/context"

command -v podman >/dev/null || {
  { apt-get install -y -q podman >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q podman; }; } ||
    { sudo apt-get update -q && sudo apt-get install -y -q podman; }
}

rm -rf "$context"
platforms=()
for arch in "${arches[@]}"; do
  case "$arch" in
    arm64) triple=aarch64-unknown-linux-musl ;;
    amd64) triple=x86_64-unknown-linux-musl ;;
    *) echo "worker-image: unknown platform $arch (arm64 or amd64)" >&2; exit 2 ;;
  esac
  rustup target add "$triple" >/dev/null
  # --lambda-dir: the Lambda bootstrap's own output (target/lambda) is left as it is.
  cargo lambda build --release --target "$triple" --bin process-orders \
    --lambda-dir "$target_dir/worker-image/lambda-$arch"
  mkdir -p "$context/$arch"
  cp "$target_dir/worker-image/lambda-$arch/process-orders/bootstrap" "$context/$arch/process-orders"
  # Static or it does not run FROM scratch: a program interpreter means a loader to ship.
  if readelf -l "$context/$arch/process-orders" | grep -q 'Requesting program interpreter'; then
    echo "worker-image: the $arch binary is dynamically linked" >&2
    exit 1
  fi
  platforms+=("linux/$arch")
done

podman manifest rm "$image" >/dev/null 2>&1 || true
podman image rm "$image" >/dev/null 2>&1 || true
podman build --quiet --platform "$(IFS=,; echo "${platforms[*]}")" --manifest "$image" \
  -f Containerfile "$context" >/dev/null
podman manifest inspect "$image" | python3 -c '
import json, sys
for m in json.load(sys.stdin)["manifests"]:
    print("worker-image:", m["platform"]["os"] + "/" + m["platform"]["architecture"], m["digest"])
'
