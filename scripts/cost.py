#!/usr/bin/env python3
"""Cost per million orders, from measured figures: `python3 scripts/cost.py`.

Every input below names the measurement it comes from (docs/performance.md); change one with
`--set name=value` (for example `--set ours_ms_per_record=30`) to price another measurement.
Prices are AWS's public on-demand prices in us-east-1 (checked 2026-12-01); `--set` them for
another region. The output is the Markdown table docs/performance.md quotes.
"""

import argparse
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

INPUTS = {
    # Billed time per record: the invocation's wall time divided by its records. Measured
    # 2026-11-30 with `make bench` (docs/performance.md (f) and (g)): the same seeded batch
    # of 1,000 orders, store calls 5 ms, payments log-normal with median 120 ms.
    "ours_ms_per_record": 21.60,  # process-orders, SQS_BATCH_MAX_CONCURRENCY 16
    "powertools_ms_per_record": 305.54,  # Powertools Python BatchProcessor
    "powertools_async_ms_per_record": 7.46,  # Powertools Python AsyncBatchProcessor, unbounded
    # CPU per order on the shipped path, measured 2026-12-06 with `make bench-cpu` (the later
    # session's run) (docs/performance.md, "CPU per order on the shipped path"): the release
    # bootstrap and Powertools Python on the same orders, median of 5 rounds, on the x86_64
    # development machine.
    "ours_cpu_us_per_order": 265.7,
    "powertools_cpu_us_per_order": 2495.1,
    # Lambda gives a function CPU in proportion to its memory: one vCPU at 1,769 MB.
    "lambda_mb_per_vcpu": 1769,
    # Requests per order: docs/performance.md (e), a new order's claim and completion; no path
    # reads.
    "dynamodb_writes_per_order": 2,
    "dynamodb_reads_per_order": 0,
    # The event source mapping: one ReceiveMessage per 10 messages, one DeleteMessageBatch per
    # 10 acknowledged (the poller's own calls, billed to the account), template BatchSize 100.
    "sqs_requests_per_order": 0.2,
    "batch_size": 100,
    # One worker's throughput (process-orders worker, defaults: two receives of ten in flight),
    # from `make bench` (docs/performance.md (i)): the plan of (f) on an in-process queue.
    "worker_orders_per_s": 14.5,
    # A worker task: Fargate, arm64, 0.25 vCPU and 0.5 GB.
    "fargate_vcpu": 0.25,
    "fargate_gb": 0.5,
    # The worker's own SQS requests beside the 0.2 per order: a long poll every 20 s per receive
    # in flight when the queue is empty (2 in flight), per task-hour.
    "worker_idle_receives_per_hour": 360,
    # Prices, us-east-1.
    "fargate_vcpu_hour_arm64": 0.03238,
    "fargate_gb_hour_arm64": 0.00356,
    "lambda_gb_s_arm64": 0.0000133334,
    "lambda_per_million_requests": 0.20,
    "dynamodb_per_million_writes": 0.625,
    "dynamodb_per_million_reads": 0.125,
    "sqs_per_million_requests": 0.40,
    "metric_per_month": 0.30,
    "alarm_per_metric_per_month": 0.10,
    "dashboard_per_month": 3.00,
    "secret_per_month": 0.40,
    # Custom metrics: 21 per queue for two queues, 3 per live version, and ColdStart once
    # (docs/operations.md).
    "custom_metrics": 46,
}


def alarm_metrics():
    """Metrics the template's alarms watch: one per plain alarm, one per metric of a
    metric-math alarm (what CloudWatch bills)."""
    text = (ROOT / "template.yaml").read_text()
    blocks = re.split(r"\n  (?=[A-Za-z0-9]+:\n    Type: )", text)
    total = 0
    for block in blocks:
        if "Type: AWS::CloudWatch::Alarm" not in block:
            continue
        stats = block.count("MetricStat:")
        total += stats if stats else 1
    return total


def worker_table(i, lambda_per_million):
    """Per million orders at a steady rate: the Lambda function (the same at any rate) against
    worker tasks on Fargate, as many as the rate needs (at least one), billed whether busy or
    not. DynamoDB and SQS per order are the same for both and left out of both columns."""
    task_hour = (
        i["fargate_vcpu"] * i["fargate_vcpu_hour_arm64"]
        + i["fargate_gb"] * i["fargate_gb_hour_arm64"]
    )
    idle_sqs_hour = i["worker_idle_receives_per_hour"] / 1e6 * i["sqs_per_million_requests"]
    print()
    print(
        f"| steady rate | Lambda (256 MB) | worker tasks | Fargate per million orders |"
    )
    print("|---|---|---|---|")
    for rate in (0.1, 1, 10, 100, 1000):
        tasks = max(1, math.ceil(rate / i["worker_orders_per_s"]))
        orders_per_hour = rate * 3600
        fargate = tasks * (task_hour + idle_sqs_hour) / orders_per_hour * 1e6
        print(
            f"| {rate:g} orders/s | ${lambda_per_million:.2f} | {tasks} "
            f"| **${fargate:.2f}** |"
        )
    busy = (task_hour + idle_sqs_hour) / (i["worker_orders_per_s"] * 3600) * 1e6
    breakeven = task_hour / (lambda_per_million / 1e6) / 3600
    print()
    print(
        f"A task costs ${task_hour:.4f} an hour and serves up to {i['worker_orders_per_s']:g} "
        f"orders/s: kept busy, ${busy:.2f} per million orders against the function's "
        f"${lambda_per_million:.2f}. A task would have to serve {breakeven:.1f} orders/s to "
        f"cost what the function does (DynamoDB and SQS, the same for both, left out)."
    )


def cpu_table(i):
    """Compute per million orders billed for CPU alone, as if waiting on the network were free:
    below one vCPU an order's CPU takes cpu * lambda_mb_per_vcpu / memory of billed time, so the
    GB-seconds, and the price, are the same at every size up to 1,769 MB."""
    print()
    print("| function | memory | CPU per order | billed per order, CPU-bound | compute per million orders |")
    print("|---|---|---|---|---|")
    rows = (
        ("process-orders", "ours_cpu_us_per_order"),
        ("Powertools Python BatchProcessor", "powertools_cpu_us_per_order"),
    )
    for name, key in rows:
        for memory in (128, 256, 512):
            cpu_s = i[key] / 1e6
            billed_s = cpu_s * i["lambda_mb_per_vcpu"] / memory
            cost = 1e6 * billed_s * memory / 1024 * i["lambda_gb_s_arm64"]
            print(
                f"| {name} | {memory} MB | {i[key]:.0f} us | {billed_s * 1000:.2f} ms "
                f"| **${cost:.3f}** |"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    inputs = dict(INPUTS)
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in inputs:
            sys.exit(f"unknown input {name}; known: {', '.join(sorted(inputs))}")
        try:
            inputs[name] = float(value)
        except ValueError:
            sys.exit(f"{name}={value!r}: not a number")
    i = inputs
    orders = 1_000_000
    storage = (
        orders * i["dynamodb_writes_per_order"] / 1e6 * i["dynamodb_per_million_writes"]
        + orders * i["dynamodb_reads_per_order"] / 1e6 * i["dynamodb_per_million_reads"]
    )
    queue = orders * i["sqs_requests_per_order"] / 1e6 * i["sqs_per_million_requests"]
    invocations = orders / i["batch_size"]
    requests = invocations / 1e6 * i["lambda_per_million_requests"]

    def compute(ms_per_record, memory_mb):
        gb_s = orders * ms_per_record / 1000 * memory_mb / 1024
        return gb_s * i["lambda_gb_s_arm64"]

    lambda_256 = compute(i["ours_ms_per_record"], 256) + requests
    rows = [
        ("process-orders", i["ours_ms_per_record"], 128),
        ("process-orders", i["ours_ms_per_record"], 256),
        ("process-orders", i["ours_ms_per_record"], 512),
        ("Powertools Python BatchProcessor", i["powertools_ms_per_record"], 256),
        ("Powertools Python AsyncBatchProcessor", i["powertools_async_ms_per_record"], 256),
    ]
    print("| function | memory | Lambda compute | Lambda requests | DynamoDB | SQS | per million orders |")
    print("|---|---|---|---|---|---|---|")
    for name, ms, memory in rows:
        lam = compute(ms, memory)
        total = lam + requests + storage + queue
        print(
            f"| {name} | {memory} MB | ${lam:.3f} | ${requests:.3f} | ${storage:.3f} "
            f"| ${queue:.3f} | **${total:.2f}** |"
        )
    alarms = alarm_metrics()
    fixed = (
        i["custom_metrics"] * i["metric_per_month"]
        + alarms * i["alarm_per_metric_per_month"]
        + i["dashboard_per_month"]
        + i["secret_per_month"]
    )
    print()
    print(
        f"Fixed, per month whatever the traffic: {int(i['custom_metrics'])} custom metrics "
        f"${i['custom_metrics'] * i['metric_per_month']:.2f}, {alarms} alarm metrics "
        f"${alarms * i['alarm_per_metric_per_month']:.2f}, the dashboard "
        f"${i['dashboard_per_month']:.2f}, the secret ${i['secret_per_month']:.2f}: "
        f"**${fixed:.2f}**."
    )
    worker_table(i, lambda_256)
    cpu_table(i)


if __name__ == "__main__":
    main()
