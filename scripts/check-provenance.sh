#!/usr/bin/env bash
# Checks a built bootstrap's provenance: the dependency list cargo-auditable embeds (the `.dep-v0`
# section, which `cargo audit bin` and other scanners read) and the CycloneDX SBOM recovered from
# it, which must name the function and the crates that handle money and the key.
# Usage: scripts/check-provenance.sh BOOTSTRAP SBOM.json
set -euo pipefail
bootstrap="$1"
sbom="$2"
if ! readelf -S "$bootstrap" | grep -q '\.dep-v0'; then
  echo "$bootstrap has no embedded dependency list (.dep-v0): build it through cargo-auditable" >&2
  exit 1
fi
python3 - "$sbom" <<'PY'
import json, sys
bom = json.load(open(sys.argv[1]))
assert bom.get("bomFormat") == "CycloneDX", "not a CycloneDX document"
names = {c.get("name") for c in bom.get("components", [])}
names.add(bom.get("metadata", {}).get("component", {}).get("name"))
missing = {"process-orders", "reqwest", "rustls", "aws-sdk-dynamodb", "serde_json"} - names
if missing:
    sys.exit(f"the SBOM lacks {sorted(missing)} ({len(names)} components)")
print(f"provenance: .dep-v0 embedded, SBOM of {len(names)} components")
PY
