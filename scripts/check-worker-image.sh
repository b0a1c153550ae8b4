#!/usr/bin/env bash
# The worker's image as ECS would start it, short of ECS: build it for amd64 (this machine's
# platform), export its root file system, and run the worker tests (tests/it/worker.rs: SIGTERM
# mid-batch, the heartbeat, a killed worker's message charged once) with the image's entry point
# started inside that file system (chroot, as the image's user) against moto's SQS, dynoxide and
# the payment stub. A missing entry point or a library the binary needs and the image lacks fails
# here. (`podman run` cannot start containers in this sandbox: no rlimits for its runtime.)
set -euo pipefail
cd "$(dirname "$0")/.."
image="${WORKER_IMAGE:-process-orders-worker}"
scripts/worker-image.sh amd64
rootfs="$(mktemp -d)"
# The image's root directory as a container has it: anyone may enter it (mktemp made it private).
chmod 755 "$rootfs"
container="$(podman create --platform linux/amd64 "$image")"
trap 'podman rm -f "$container" >/dev/null 2>&1 || true; rm -rf "$rootfs"' EXIT
podman export "$container" | tar -x -C "$rootfs"
# The image's own configuration (a container's Entrypoint reads back as a string, Cmd as a list).
words() {
  podman image inspect "$(podman inspect "$container" --format '{{.Image}}')" --format "{{json .Config.$1}}" |
    python3 -c 'import json, sys; v = json.load(sys.stdin) or []; print(" ".join([v] if isinstance(v, str) else v))'
}
entrypoint="$(words Entrypoint)"
command="$(words Cmd)"
user="$(podman inspect "$container" --format '{{.Config.User}}')"
echo "worker image: entry point [$entrypoint], command [$command], user $user; root file system:"
(cd "$rootfs" && find . -mindepth 1 | sort | sed 's/^/  /')
[ "$command" = worker ] || { echo "the image's command is [$command], not [worker]" >&2; exit 1; }
log="$rootfs.log"
WORKER_IMAGE_ROOTFS="$rootfs" WORKER_IMAGE_ENTRYPOINT="$entrypoint" WORKER_IMAGE_USER="${user:-0:0}" \
  cargo test --test it worker:: -- --test-threads 2 2>&1 | tee "$log"
# Fails closed: the tests that start the image's entry point must have run, not been filtered out.
for name in sigterm_mid_batch_finishes_what_started_and_releases_the_rest \
  the_heartbeat_holds_a_record_three_visibility_timeouts_long \
  a_killed_workers_message_comes_back_and_is_charged_once; do
  grep -q "^test worker::$name ... ok$" "$log" || { echo "worker::$name did not run against the image" >&2; exit 1; }
done
rm -f "$log"
