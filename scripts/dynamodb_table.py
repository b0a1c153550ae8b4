#!/usr/bin/env python3
"""Create (or scan) the idempotency table on a local DynamoDB-compatible endpoint.

The key schema and TTL attribute are read from template.yaml, so the local table is the one
the deployment creates.
"""
import argparse
import sys

import boto3
import yaml


class CfnLoader(yaml.SafeLoader):
    """A YAML loader that accepts CloudFormation short tags (!Ref, !GetAtt, !Sub, ...)."""


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node)
    else:
        value = loader.construct_mapping(node)
    return {suffix: value}


CfnLoader.add_multi_constructor("!", _tag)


def table_spec(template_path):
    with open(template_path) as f:
        template = yaml.load(f, Loader=CfnLoader)
    tables = [r for r in template["Resources"].values() if r["Type"] == "AWS::DynamoDB::Table"]
    if len(tables) != 1:
        sys.exit(f"expected one DynamoDB table in {template_path}, found {len(tables)}")
    return tables[0]["Properties"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--template", default="template.yaml")
    parser.add_argument("--scan", action="store_true", help="print the items instead of creating")
    args = parser.parse_args()
    client = boto3.client("dynamodb", endpoint_url=args.endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    if args.scan:
        items = client.scan(TableName=args.table)["Items"]
        for item in sorted(items, key=lambda i: i["pk"]["S"]):
            print("  " + " ".join(f"{k}={list(v.values())[0]}" for k, v in sorted(item.items())))
        print(f"  {len(items)} items")
        return
    spec = table_spec(args.template)
    client.create_table(TableName=args.table, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=spec["AttributeDefinitions"], KeySchema=spec["KeySchema"])
    ttl = spec["TimeToLiveSpecification"]
    client.update_time_to_live(TableName=args.table, TimeToLiveSpecification={
        "AttributeName": ttl["AttributeName"], "Enabled": True})
    print(f"created {args.table}: key {spec['KeySchema']}, TTL on {ttl['AttributeName']}")


if __name__ == "__main__":
    main()
