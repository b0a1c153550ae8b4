"""Reduced reproduction: a FIFO group's later message delivered ahead of its earlier ones when
the group's in-flight messages become visible during a receive.

A group `a` of three messages is received together; a1 is made visible at once, a2 after 1 s,
a3 after 2 s. On SQS the group is held while any of its messages is in flight, so nothing of `a`
comes back before 2 s, and then a1, a2, a3. moto_locked.py (before its fix) looked at the clock
once per message: it kept a3's pending mark (not visible yet), so group `a` was held, and a
moment later listed a3 among the visible messages; moto's loop skipped a1 and a2 (group held),
reached a3, found it visible and pending, freed the group and delivered a3 ahead of them. 3,000
other messages in flight (one per group) widen that moment to the milliseconds it takes to look
at every pending mark; in the chaos run, at 10,000 orders, 4 of 16 groups were charged out of
order this way.

Usage: python moto_fifo_instant.py TRIALS SERVER... (run like moto_server, `-H HOST -p PORT`
appended). SQS, and the fixed server, print no trial out of order."""
import sys, time
from loopback import sqs_server

trials = int(sys.argv[1])
with sqs_server(sys.argv[2:]) as sqs:
    out_of_order = 0
    for trial in range(trials):
        url = sqs.create_queue(QueueName=f"instant-{trial}.fifo",
                               Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"})["QueueUrl"]
        for i in range(0, 3000, 10):
            sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(j), "MessageBody": f"b{i+j}", "MessageGroupId": f"b{i+j}",
                 "MessageDeduplicationId": f"b{i+j}"} for j in range(10)])
        for i in range(0, 3000, 10):  # all 3,000 in flight
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        for body in ("a1", "a2", "a3"):
            sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="a",
                             MessageDeduplicationId=body)
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3)["Messages"]
        handles = {m["Body"]: m["ReceiptHandle"] for m in got}
        assert sorted(handles) == ["a1", "a2", "a3"], sorted(handles)
        for body, seconds in (("a1", 0), ("a2", 1), ("a3", 2)):
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[body],
                                          VisibilityTimeout=seconds)
        started = time.time()
        first = None
        while time.time() - started < 4 and first is None:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3).get("Messages", [])
            if messages:
                first = [m["Body"] for m in messages]
        wrong = first is None or first[0] != "a1"
        out_of_order += wrong
        print(f"trial {trial}: group a came back as {first} after {time.time() - started:.2f} s"
              + (" (out of order)" if wrong else ""), flush=True)
        sqs.delete_queue(QueueUrl=url)
    print(f"out of order: {out_of_order} of {trials} trials")
