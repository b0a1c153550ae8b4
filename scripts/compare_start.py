#!/usr/bin/env python3
"""Compares two runs of the function in one-shot mode, spawn to exit, alternating A and B:
`python3 scripts/compare_start.py A_BINARY B_BINARY [--runs 201] [--event FILE] [--b-env NAME=VALUE]`.

The environment is template-like (a DynamoDB table, the HTTP gateway with a key, the backoff, DLQ
moves, JSON logs, metrics), with nothing reached on an empty event. `--b-env` adds variables to
B's runs only; `--trace-receiver` starts a local OTLP/HTTP receiver and sets B's
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT to it. Medians and p10/p90 in milliseconds.
"""

import argparse
import http.server
import statistics
import subprocess
import threading
import time

TEMPLATE_LIKE = {
    "PATH": "/usr/bin:/bin",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "x",
    "AWS_SECRET_ACCESS_KEY": "y",
    "IDEMPOTENCY_TABLE": "orders",
    "PAYMENT_API_URL": "https://pay.example.invalid/v1",
    "PAYMENT_API_KEY": "k",
    "SQS_BATCH_VISIBILITY_BACKOFF": "true",
    "SQS_BATCH_MOVE_POISON_TO_DLQ": "true",
    "AWS_LAMBDA_LOG_FORMAT": "JSON",
    "METRICS_ENABLED": "true",
}


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def run(binary, env, event):
    start = time.perf_counter()
    done = subprocess.run(
        [binary, "--event", event], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise SystemExit(f"{binary} exited with {done.returncode}")
    return (time.perf_counter() - start) * 1000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--runs", type=int, default=201)
    p.add_argument("--event", default="events/empty.json")
    p.add_argument("--b-env", action="append", default=[])
    p.add_argument("--in-memory", action="store_true", help="no table, simulated gateway")
    p.add_argument("--trace-receiver", action="store_true")
    args = p.parse_args()
    base = {"PATH": "/usr/bin:/bin", "AWS_LAMBDA_LOG_FORMAT": "JSON"} if args.in_memory else TEMPLATE_LIKE
    env_b = dict(base, **dict(kv.split("=", 1) for kv in args.b_env))
    if args.trace_receiver:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env_b["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    times = {"A": [], "B": []}
    for i in range(args.runs):
        order = [("A", args.a, base), ("B", args.b, env_b)]
        for label, binary, env in order if i % 2 == 0 else reversed(order):
            times[label].append(run(binary, env, args.event))
    for label, values in times.items():
        values.sort()
        print(
            f"{label}: median {statistics.median(values):.2f} ms, "
            f"p10 {values[len(values) // 10]:.2f}, p90 {values[len(values) * 9 // 10]:.2f} "
            f"({len(values)} runs)"
        )


if __name__ == "__main__":
    main()
