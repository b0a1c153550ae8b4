"""Reduced reproduction of moto delivering a FIFO group out of order.

Three messages of one group are received together and not deleted (a reported batch); once
their visibility runs out, SQS delivers them again in order. moto forgets a message's "pending"
mark only when a receive reaches it, and checks the group against the marks of the messages
behind it: it skips a1 and a2 (a3 still looks pending) and delivers a3 first.

Usage: python moto_fifo_reorder.py SERVER... (run like moto_server: `-H HOST -p PORT` appended).
moto_server prints ['a3']; `python scripts/moto_locked.py` prints ['a1', 'a2', 'a3']."""
import sys, time, uuid
from loopback import sqs_server

with sqs_server(sys.argv[1:]) as sqs:
    url = sqs.create_queue(QueueName="r.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    for body in ["a1", "a2", "a3"]:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="g",
                         MessageDeduplicationId=str(uuid.uuid4()))
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=1)
    print("first delivery:", [m["Body"] for m in first["Messages"]])
    time.sleep(1.5)
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)
    print("redelivery:", [m["Body"] for m in again.get("Messages", [])], "(SQS: a1, a2, a3)")
