#!/usr/bin/env bash
# `make deploy`: says which account, region and stack it is about to change, and goes on only when
# the account is confirmed, as `orders-ops redrive` does: DEPLOY_ACCOUNT=<account id> for scripts
# and CI, or the account id typed at the prompt. Then `sam deploy` (guided the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
sam="${SAM:-sam}"
identity=$("$python" - <<'PY'
import boto3, sys
try:
    session = boto3.session.Session()
    account = session.client("sts").get_caller_identity()["Account"]
except Exception as e:  # no credentials, no network: nothing is deployed
    sys.exit(f"cannot tell which account these credentials belong to: {e}")
print(account, session.region_name or "(no region)")
PY
)
read -r account region <<<"$identity"
stack=$(sed -n 's/^stack_name *= *"\(.*\)"/\1/p' samconfig.toml | head -1)
echo "Deploying stack ${stack:-(asked next)} to account $account, region $region."
if [ "${DEPLOY_ACCOUNT:-}" != "$account" ]; then
  if [ -n "${DEPLOY_ACCOUNT:-}" ]; then
    echo "DEPLOY_ACCOUNT is $DEPLOY_ACCOUNT, but these credentials are for $account: nothing deployed." >&2
    exit 1
  fi
  if [ ! -t 0 ]; then
    echo "Not a terminal: set DEPLOY_ACCOUNT=$account to confirm. Nothing deployed." >&2
    exit 1
  fi
  read -r -p "Type the account id to deploy to it: " typed
  if [ "$typed" != "$account" ]; then
    echo "Not confirmed: nothing deployed." >&2
    exit 1
  fi
fi
if grep -q '^stack_name' samconfig.toml && grep -q '^region' samconfig.toml; then
  SAM_CLI_TELEMETRY=0 "$sam" deploy
else
  SAM_CLI_TELEMETRY=0 "$sam" deploy --guided
fi
