#!/usr/bin/env python3
"""The function's ConfigurationHash: what makes a parameter-only deploy reach the `live` alias.

SAM hashes the function's properties before it resolves parameter references, so changing a
parameter the function reads (its environment, its timeout) publishes no new version, and the
event source mappings, which invoke `live`, keep running the old configuration (SAM issues #1640,
#3820). SAM does resolve the parameter that `AutoPublishCodeSha256` names, and with it set the
version's logical id is taken from that value alone. So `make deploy` passes
`ConfigurationHash` = SHA-256 over the built bootstrap's digest and every parameter value it
deploys with, and the template sets `AutoPublishCodeSha256: !Ref ConfigurationHash`: any change
of code or configuration is a new version, and nothing else is.

  configuration_hash.py hash --bootstrap PATH [--parameters FILE] [Key=Value ...]
      the hash, for the effective parameters: FILE (JSON, as CloudFormation's DescribeStacks
      gives the stack's current values) overlaid with Key=Value, the template's defaults for the
      rest
  configuration_hash.py version-id [Key=Value ...]
      the AWS::Lambda::Version logical id SAM's translator gives for those values (as
      CloudFormation passes them, CodeUri as `sam package` leaves it)
  configuration_hash.py check [--markdown]
      for every parameter the function's properties reference: changing it alone changes the
      hash and the version id; exits 1 naming each that does not
  configuration_hash.py deploy-overrides --bootstrap PATH --stack NAME [--samconfig FILE]
                                         [--profile P] [--region R] [Key=Value ...]
      what `make deploy` passes to `sam deploy --parameter-overrides`: samconfig.toml's overrides
      and Key=Value, with ConfigurationHash over the values the stack will have (a parameter not
      given keeps the stack's current value, as `sam deploy` passes UsePreviousValue; a new stack
      takes the template's defaults)
"""
import argparse
import copy
import hashlib
import json
import logging
import os
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"
FUNCTION = "OrdersFunction"
HASH_PARAMETER = "ConfigurationHash"


class CfnLoader(yaml.SafeLoader):
    """template.yaml with CloudFormation's short tags read as the JSON form SAM takes."""


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):
        return {"Fn::GetAtt": value.split(".", 1)}
    return {f"Fn::{suffix}": value}


CfnLoader.add_multi_constructor("!", _tag)


def template():
    with open(TEMPLATE) as f:
        return yaml.load(f, Loader=CfnLoader)


def effective(tpl, given):
    """Every parameter's value as CloudFormation passes it: given, else the template's default."""
    values = {}
    for name, spec in tpl["Parameters"].items():
        if name in given:
            values[name] = str(given[name])
        elif "Default" in spec:
            values[name] = str(spec["Default"])
    return values


def configuration_hash(bootstrap_digest, values):
    """SHA-256 over the code's digest and every parameter but the hash itself, by name."""
    lines = [f"bootstrap={bootstrap_digest}"]
    lines += [f"{k}={v}" for k, v in sorted(values.items()) if k != HASH_PARAMETER]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def file_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def version_id(tpl, values):
    """The AWS::Lambda::Version logical id SAM's translator makes of `tpl` with `values`."""
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    # The translator's own chatter (feature toggles, its metrics) is not our output.
    logging.disable(logging.WARNING)
    from samtranslator.translator.transform import transform

    class NoManagedPolicies:
        def load(self):
            return {}

    packaged = copy.deepcopy(tpl)
    # As `sam package` leaves it: the code in S3, under its content's hash.
    packaged["Resources"][FUNCTION]["Properties"]["CodeUri"] = "s3://deployment-bucket/code"
    output = transform(packaged, dict(values), NoManagedPolicies())
    versions = [
        name
        for name, resource in output["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Version"
    ]
    if len(versions) != 1:
        sys.exit(f"expected one AWS::Lambda::Version, found {versions}")
    return versions[0]


def referenced_parameters(node, parameters, found):
    """The parameters `node` refers to (Ref, and ${Name} in Sub), in `found`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and value in parameters:
                found.add(value)
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                for name in parameters:
                    if "${" + name + "}" in text:
                        found.add(name)
                referenced_parameters(value, parameters, found)
            else:
                referenced_parameters(value, parameters, found)
    elif isinstance(node, list):
        for item in node:
            referenced_parameters(item, parameters, found)
    return found


def another_value(spec, value):
    """A different value the parameter's type and constraints allow."""
    allowed = spec.get("AllowedValues")
    if allowed:
        others = [str(v) for v in allowed if str(v) != value]
        return others[0] if others else None
    if spec.get("Type") == "Number":
        low = spec.get("MinValue")
        high = spec.get("MaxValue")
        number = float(value) if value else 0
        candidate = number + 1
        if high is not None and candidate > float(high):
            candidate = number - 1
        if low is not None and candidate < float(low):
            return None
        return str(int(candidate)) if candidate.is_integer() else str(candidate)
    if value.startswith("arn:"):
        return value + "-other"
    if value.startswith("https://") or value.startswith("http://"):
        return value.rstrip("/") + "/other"
    return (value + "x") if value else "x"


def check(markdown):
    tpl = template()
    parameters = set(tpl["Parameters"]) - {HASH_PARAMETER}
    props = tpl["Resources"][FUNCTION]["Properties"]
    if props.get("AutoPublishCodeSha256") != {"Ref": HASH_PARAMETER}:
        sys.exit(f"{FUNCTION} must set AutoPublishCodeSha256: !Ref {HASH_PARAMETER}")
    used = sorted(referenced_parameters(props, parameters, set()))
    # Values a first deployment passes for the parameters without a default.
    base_given = {"PaymentApiUrl": "https://pay.example/v1"}
    base = effective(tpl, base_given)
    code = "0" * 64
    base[HASH_PARAMETER] = configuration_hash(code, base)
    base_id = version_id(tpl, base)
    rows, failures = [], []
    for name in used:
        changed = dict(base)
        other = another_value(tpl["Parameters"][name], changed.get(name, ""))
        if other is None:
            rows.append((name, "(no other allowed value)", "-", "-"))
            continue
        changed[name] = other
        changed[HASH_PARAMETER] = configuration_hash(code, changed)
        new_id = version_id(tpl, changed)
        rows.append((name, other, base_id, new_id))
        if new_id == base_id:
            failures.append(name)
    # The code alone moves it too.
    code_changed = dict(base)
    code_changed[HASH_PARAMETER] = configuration_hash("1" * 64, base)
    code_id = version_id(tpl, code_changed)
    rows.append(("(bootstrap digest)", "another build", base_id, code_id))
    if code_id == base_id:
        failures.append("the bootstrap's digest")
    if markdown:
        print("| parameter changed | to | version before | version after |")
        print("|---|---|---|---|")
        for row in rows:
            print("| " + " | ".join(f"`{c}`" if i != 1 else c for i, c in enumerate(row)) + " |")
    print(f"{len(used)} parameters the function references; {len(failures)} publish no new version")
    if failures:
        sys.exit("these changes would not reach the live alias: " + ", ".join(failures))


# `sam deploy --parameter-overrides` syntax: Key=Value, the value quoted when it has to be.
OVERRIDE = re.compile(r'([A-Za-z0-9]+)=("(?:\\.|[^"\\])*"|(?:\\.|[^ "\\])+)')


def parse_overrides(text):
    given = {}
    for key, value in OVERRIDE.findall(text):
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        given[key] = value
    return given


def quote(key, value):
    if value and not re.search(r'[\s"\\]', value):
        return f"{key}={value}"
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{key}="{escaped}"'


def samconfig_overrides(path):
    """The `parameter_overrides` samconfig.toml saves for `sam deploy` (a string or a list)."""
    if not path or not Path(path).exists():
        return {}
    with open(path, "rb") as f:
        config = tomllib.load(f)
    saved = config.get("default", {}).get("deploy", {}).get("parameters", {})
    value = saved.get("parameter_overrides", "")
    return parse_overrides(" ".join(value) if isinstance(value, list) else value)


def stack_values(stack, profile, region):
    """The stack's current parameter values, or {} when it does not exist yet."""
    import boto3
    from botocore.exceptions import ClientError

    session = boto3.session.Session(profile_name=profile or None, region_name=region or None)
    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=stack)["Stacks"]
    except ClientError as e:
        if "does not exist" in str(e):
            return {}
        raise
    return {p["ParameterKey"]: p.get("ParameterValue", "") for p in stacks[0].get("Parameters", [])}


def deploy_overrides(args):
    tpl = template()
    given = samconfig_overrides(args.samconfig)
    given.update(parse_pairs(args.pairs))
    given.pop(HASH_PARAMETER, None)
    values = effective(tpl, {**stack_values(args.stack, args.profile, args.region), **given})
    digest = configuration_hash(file_digest(args.bootstrap), values)
    pairs = [quote(k, v) for k, v in given.items()] + [quote(HASH_PARAMETER, digest)]
    print(" ".join(pairs))


def parse_pairs(pairs):
    given = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            sys.exit(f"not Key=Value: {pair}")
        given[key] = value
    return given


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    h = sub.add_parser("hash")
    h.add_argument("--bootstrap", required=True)
    h.add_argument("--parameters")
    h.add_argument("pairs", nargs="*")
    v = sub.add_parser("version-id")
    v.add_argument("pairs", nargs="*")
    c = sub.add_parser("check")
    c.add_argument("--markdown", action="store_true")
    d = sub.add_parser("deploy-overrides")
    d.add_argument("--bootstrap", required=True)
    d.add_argument("--stack", required=True)
    d.add_argument("--samconfig", default=str(ROOT / "samconfig.toml"))
    d.add_argument("--profile")
    d.add_argument("--region")
    d.add_argument("pairs", nargs="*")
    args = parser.parse_args()
    if args.command == "deploy-overrides":
        deploy_overrides(args)
        return
    tpl = template()
    if args.command == "hash":
        given = {}
        if args.parameters:
            with open(args.parameters) as f:
                given.update(json.load(f))
        given.update(parse_pairs(args.pairs))
        print(configuration_hash(file_digest(args.bootstrap), effective(tpl, given)))
    elif args.command == "version-id":
        print(version_id(tpl, effective(tpl, parse_pairs(args.pairs))))
    else:
        check(args.markdown)


if __name__ == "__main__":
    main()
