"""Reduced reproduction: are moto's approximate counts a fact while a receive runs?

A queue holds 40 messages; nothing is ever deleted, so visible + not visible + delayed is 40
at every instant. One thread receives them (10 at a time, 30 s visibility) while the main
thread reads the three counts in a loop. Any total other than 40 is a count that lies."""
import collections, sys, threading
from loopback import sqs_server

with sqs_server([sys.argv[1]]) as sqs:
    totals = collections.Counter()
    for run in range(20):
        url = sqs.create_queue(QueueName=f"q{run}")["QueueUrl"]
        for i in range(0, 40, 10):
            sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(j), "MessageBody": f"m{i+j}"} for j in range(10)])
        done = threading.Event()
        def receive():
            for _ in range(4):
                sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
            done.set()
        t = threading.Thread(target=receive); t.start()
        while not done.is_set():
            a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
            total = sum(int(a[k]) for k in ("ApproximateNumberOfMessages",
                        "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"))
            totals[total] += 1
        t.join()
    print("observed totals (value: times):", dict(sorted(totals.items())))
    print("reads that were not 40:", sum(n for v, n in totals.items() if v != 40), "of", sum(totals.values()))
