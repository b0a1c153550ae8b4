"""What the reproductions share: a server started like moto_server on a free loopback port, with
an SQS client for it, stopped when the block ends."""
import contextlib
import socket
import subprocess
import time

import boto3


def client(endpoint_url):
    """An SQS client for a local server (any credentials do)."""
    return boto3.client("sqs", endpoint_url=endpoint_url, region_name="us-east-1",
                        aws_access_key_id="t", aws_secret_access_key="t")


@contextlib.contextmanager
def sqs_server(command):
    """Runs `command` (a list) with `-H 127.0.0.1 -p PORT` appended; yields an SQS client."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(command + ["-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield client(f"http://127.0.0.1:{port}")
    finally:
        server.terminate()
        server.wait()
