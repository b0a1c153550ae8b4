"""How moto's per-call cost grows with queue size: send N in batches of 10, then receive+delete."""
import subprocess, socket, sys, time
import boto3
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
port = free_port()
server = subprocess.Popen(sys.argv[1:] + ["-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
N = int(__import__("os").environ.get("N", "10000"))
try:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close(); break
        except OSError:
            time.sleep(0.1)
    sqs = boto3.client("sqs", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    for fifo in (False, True):
        name = "q.fifo" if fifo else "q"
        attrs = {"FifoQueue": "true"} if fifo else {}
        url = sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
        t0 = time.time(); last = t0
        for i in range(0, N, 10):
            entries = [{"Id": str(j), "MessageBody": f"m{i+j}"} for j in range(10)]
            if fifo:
                for j, e in enumerate(entries):
                    e["MessageGroupId"] = f"g{(i+j)%16}"; e["MessageDeduplicationId"] = f"d{i+j}"
            sqs.send_message_batch(QueueUrl=url, Entries=entries)
            if (i + 10) % 2000 == 0:
                now = time.time(); print(f"{name} sent {i+10}: {1000*(now-last)/200:.1f} ms/batch", flush=True); last = now
        print(f"{name} send total {time.time()-t0:.1f} s", flush=True)
        t0 = time.time(); n = 0; calls = 0; last = t0
        while n < min(N, 3000):
            r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
            calls += 1
            ms = r.get("Messages", [])
            if ms:
                sqs.delete_message_batch(QueueUrl=url, Entries=[{"Id": str(k), "ReceiptHandle": m["ReceiptHandle"]} for k, m in enumerate(ms)])
            n += len(ms)
            if calls % 100 == 0:
                now = time.time(); print(f"{name} recv+del {n}: {1000*(now-last)/100:.1f} ms/pair", flush=True); last = now
        print(f"{name} recv total {time.time()-t0:.1f} s for {n}", flush=True)
finally:
    server.terminate()
