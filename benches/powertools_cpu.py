"""The Powertools for AWS Lambda (Python) side of `benches/cpu.rs`: CPU per order.

The plan's events go one after another through `BatchProcessor` and `process_partial_response`;
each record's charge runs in `idempotent_function` on `DynamoDBPersistenceLayer` (its own table,
keyed by the order id) and goes to the provider through `requests` with the order id as
`Idempotency-Key`, the body the function sends (the amount in minor units, the currency). The
process's CPU time (`time.process_time()`: user and system, every thread) is read after each
event the plan marks. Prints one JSON line. A benchmark baseline only, not part of the function.

Usage: python powertools_cpu.py PLAN.json
"""

import json
import platform
import sys
import time
from decimal import Decimal
from importlib.metadata import version

import boto3
import requests
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)


def dynamodb(endpoint):
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )


def main() -> None:
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    # Set-up straight to the server: only the orders' requests pass the counting proxy.
    dynamodb(plan["server"]).create_table(
        TableName=plan["table"],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    persistence = DynamoDBPersistenceLayer(
        table_name=plan["table"], boto3_client=dynamodb(plan["dynamodb"])
    )
    config = IdempotencyConfig(event_key_jmespath="order_id")
    session = requests.Session()
    charges = plan["payment_url"] + "/charges"
    timeout = (plan["connect_timeout_s"], plan["timeout_s"])

    @idempotent_function(
        data_keyword_argument="order", config=config, persistence_store=persistence
    )
    def charge(order):
        response = session.post(
            charges,
            json={
                "order_id": order["order_id"],
                "amount": int(Decimal(order["amount"]) * 100),
                "currency": order.get("currency", plan["currency"]),
            },
            headers={"Idempotency-Key": order["order_id"]},
            timeout=timeout,
        )
        response.raise_for_status()
        return response.json()

    def record_handler(record):
        # Amounts as exact decimals (kept as text for the idempotency record's JSON).
        order = json.loads(record.body, parse_float=str)
        return charge(order=order)

    marks = set(plan["marks"])
    cpu_s = []
    wall_s = []
    failures = 0
    for n, event in enumerate(plan["events"], start=1):
        response = process_partial_response(
            event=event,
            record_handler=record_handler,
            processor=BatchProcessor(event_type=EventType.SQS),
            context=None,
        )
        failures += len(response["batchItemFailures"])
        if n in marks:
            cpu_s.append(time.process_time())
            wall_s.append(time.perf_counter())
    print(
        json.dumps(
            {
                "powertools": version("aws-lambda-powertools"),
                "python": platform.python_version(),
                "cpu_s": cpu_s,
                "wall_s": wall_s,
                "failures": failures,
            }
        )
    )


if __name__ == "__main__":
    main()
