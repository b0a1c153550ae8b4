"""The seed's SQS consumer, as a baseline for benches/records.rs (make bench); not the function.

The consumer the product grew from (the "SQS consumer patterns" article): a batch loop that
reports failed records by message id (FIFO: the first failure and everything after it), a
handler that validates the body with a pydantic model and refuses a non-positive amount, and an
in-memory idempotency store with a lease behind a lock. The charge does nothing, as the
function's simulated provider does nothing but record. Rewritten here from the article's
description to measure its per-record CPU on the same event the function is measured on.

Usage: python seed_consumer.py EVENT_FILE ROUNDS FIFO

Each round parses the event's text and handles every record with a fresh store (so every order
is new, as in the function's whole-run measurement). Prints one JSON line: the wall time per
record of each round in microseconds, the failures of the last round and pydantic's version.
"""

import json
import sys
import threading
import time

import pydantic


class Order(pydantic.BaseModel):
    order_id: str
    amount: float


class LeaseStore:
    """Done keys and leased keys, as the seed keeps them (one lock, a monotonic lease)."""

    def __init__(self, lease_s=60.0):
        self.lock = threading.Lock()
        self.done = set()
        self.leases = {}
        self.lease_s = lease_s

    def begin(self, key):
        with self.lock:
            if key in self.done:
                return "done"
            if self.leases.get(key, 0.0) > time.monotonic():
                return "busy"
            self.leases[key] = time.monotonic() + self.lease_s
            return "started"

    def complete(self, key):
        with self.lock:
            self.done.add(key)
            self.leases.pop(key, None)


class Retry(Exception):
    pass


def handle(body, store):
    try:
        order = Order.model_validate(json.loads(body))
    except (ValueError, pydantic.ValidationError):
        raise Retry("poison")  # the seed leaves poison for the redrive: not acknowledged
    if order.amount <= 0:
        raise Retry("poison")
    claim = store.begin(order.order_id)
    if claim == "done":
        return
    if claim == "busy":
        raise Retry("busy")
    # charge(order): the simulated provider, nothing to do
    store.complete(order.order_id)


def process_batch(event, store, fifo):
    failures = []
    records = event["Records"]
    for index, record in enumerate(records):
        try:
            handle(record["body"], store)
        except Exception:
            failures.append({"itemIdentifier": record["messageId"]})
            if fifo:
                failures += [{"itemIdentifier": r["messageId"]} for r in records[index + 1:]]
                break
    return {"batchItemFailures": failures}


def main():
    path, rounds, fifo = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    per_record = []
    failures = 0
    for _ in range(rounds):
        start = time.perf_counter()
        event = json.loads(text)
        response = process_batch(event, LeaseStore(), fifo)
        elapsed = time.perf_counter() - start
        per_record.append(elapsed / len(event["Records"]) * 1e6)
        failures = len(response["batchItemFailures"])
    print(json.dumps({
        "per_record_us": per_record,
        "failures": failures,
        "pydantic": pydantic.VERSION,
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main()
