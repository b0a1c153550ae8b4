"""How moto's per-call cost grows with queue size: send N in batches of 10, then receive+delete."""
import os, sys, time
from loopback import sqs_server
N = int(os.environ.get("N", "10000"))
with sqs_server(sys.argv[1:]) as sqs:
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
