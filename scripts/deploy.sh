#!/usr/bin/env bash
# `make deploy`: says which account, region and stack it is about to change, and goes on only when
# the account is confirmed, as `orders-ops redrive` does: DEPLOY_ACCOUNT=<account id> for scripts
# and CI, or the account id typed at the prompt. Then `sam deploy` (guided the first time), with
# ConfigurationHash computed over the built bootstrap and every parameter value the stack will
# have (scripts/configuration_hash.py), so a parameter-only change reaches the live alias.
# PARAMETERS="Key=Value ..." adds overrides to samconfig.toml's.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
sam="${SAM:-sam}"
samconfig="${SAMCONFIG:-samconfig.toml}"
bootstrap="${BOOTSTRAP:-.aws-sam/build/OrdersFunction/bootstrap}"
# What sam deploy will use: samconfig.toml's profile and region when it names them, else the
# environment's (and a guided first deployment asks for the region).
setting() { sed -n "s/^$1 *= *\"\(.*\)\"/\1/p" "$samconfig" | head -1; }
stack=$(setting stack_name)
profile=$(setting profile)
saved_region=$(setting region)
identity=$(SAMCONFIG_PROFILE="$profile" SAMCONFIG_REGION="$saved_region" "$python" - <<'PY'
import boto3, os, sys
try:
    session = boto3.session.Session(
        profile_name=os.environ["SAMCONFIG_PROFILE"] or None,
        region_name=os.environ["SAMCONFIG_REGION"] or None,
    )
    account = session.client("sts").get_caller_identity()["Account"]
except Exception as e:  # no credentials, no network: nothing is deployed
    sys.exit(f"cannot tell which account these credentials belong to: {e}")
print(account, session.region_name or "(asked by sam deploy --guided)")
PY
)
read -r account region <<<"$identity"
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
[ -f "$bootstrap" ] || { echo "no built bootstrap at $bootstrap: run make build first" >&2; exit 1; }
# shellcheck disable=SC2086 # PARAMETERS is a list of Key=Value words.
overrides=$("$python" scripts/configuration_hash.py deploy-overrides --bootstrap "$bootstrap" \
  --stack "${stack:-process-orders}" --samconfig "$samconfig" --profile "$profile" \
  --region "${saved_region:-$region}" ${PARAMETERS:-})
echo "ConfigurationHash ${overrides##*ConfigurationHash=}: a new version for the live alias whenever code or configuration changed."
args=(--parameter-overrides "$overrides")
[ "$samconfig" != samconfig.toml ] && args+=(--config-file "$samconfig")
# Confirmed without a terminal: sam must not stop at its own change-set prompt either.
[ -n "${DEPLOY_ACCOUNT:-}" ] && args+=(--no-confirm-changeset)
if [ -n "$stack" ] && [ -n "$saved_region" ]; then
  SAM_CLI_TELEMETRY=0 "$sam" deploy "${args[@]}"
else
  SAM_CLI_TELEMETRY=0 "$sam" deploy --guided "${args[@]}"
fi
