"""The Powertools for AWS Lambda (Python) baseline of `benches/tail.rs`.

Runs the plan's SQS event through Powertools' BatchProcessor (records one after another) and
AsyncBatchProcessor (every record at once), with the plan's latencies simulated by sleeping:
two store calls per record and one payment, which fails as a timeout when the plan says it
outlasts the payment timeout. Prints one JSON line of wall times. A benchmark baseline only,
not part of the function.

Usage: python powertools_baseline.py PLAN.json
"""

import asyncio
import json
import sys
import time
from importlib.metadata import version

from aws_lambda_powertools.utilities.batch import (
    AsyncBatchProcessor,
    BatchProcessor,
    EventType,
    async_process_partial_response,
    process_partial_response,
)


def main() -> None:
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    event = plan["event"]
    latencies = {r["order_id"]: r for r in plan["records"]}
    timeout = plan["payment_timeout_s"]

    def delays(record):
        r = latencies[json.loads(record.body)["order_id"]]
        pay = r["payment_s"]
        return r["store_s"][0], (timeout if pay is None else pay), pay is None, r["store_s"][1]

    def handler(record):
        claim, pay, times_out, settle = delays(record)
        time.sleep(claim)
        time.sleep(pay)
        time.sleep(settle)
        if times_out:
            raise TimeoutError("payment timed out")

    async def async_handler(record):
        claim, pay, times_out, settle = delays(record)
        await asyncio.sleep(claim)
        await asyncio.sleep(pay)
        await asyncio.sleep(settle)
        if times_out:
            raise TimeoutError("payment timed out")

    started = time.perf_counter()
    sequential = process_partial_response(
        event=event,
        record_handler=handler,
        processor=BatchProcessor(event_type=EventType.SQS),
        context=None,
    )
    sequential_s = time.perf_counter() - started

    started = time.perf_counter()
    concurrent = async_process_partial_response(
        event=event,
        record_handler=async_handler,
        processor=AsyncBatchProcessor(event_type=EventType.SQS),
        context=None,
    )
    async_s = time.perf_counter() - started

    print(
        json.dumps(
            {
                "powertools": version("aws-lambda-powertools"),
                "sequential": {
                    "wall_s": sequential_s,
                    "failures": len(sequential["batchItemFailures"]),
                },
                "async": {
                    "wall_s": async_s,
                    "failures": len(concurrent["batchItemFailures"]),
                },
            }
        )
    )


if __name__ == "__main__":
    main()
