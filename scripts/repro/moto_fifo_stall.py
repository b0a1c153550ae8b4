"""Reduced reproduction of moto's FIFO stall: a message group that stays "pending" for ever.

moto's receive first lists the visible messages, then marks them received and adds them to the
queue's pending set, without a lock. A delete of such a message (by the receipt handle of an
earlier delivery whose visibility ran out) that lands in between removes the message, and the
receive then re-adds it to the pending set: its group is pending for ever, and the group's
later messages are visible, counted, and never delivered.

The window is made wide: the target message m (group g) is first in the queue, followed by N
messages of other groups held in flight, so the listing pass evaluates m first and then N more.

Usage: python moto_fifo_stall.py SERVER TRIALS N, where SERVER runs like moto_server
(`-H HOST -p PORT`): moto_server itself stalls (1 of 1 trial at N = 1000 on the development
machine, with ReceiptHandleIsInvalid on the redelivery's delete, the tell); scripts/moto_locked.py
does not."""
import sys, threading, time, uuid
from loopback import client, sqs_server

trials, others = int(sys.argv[2]), int(sys.argv[3])
with sqs_server([sys.argv[1]]) as sqs:
    racer = client(sqs.meta.endpoint_url)
    stalled = 0
    for trial in range(trials):
        url = sqs.create_queue(QueueName=f"t{trial}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        def send(body, group):
            sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group,
                             MessageDeduplicationId=str(uuid.uuid4()))
        send("first", "g")
        for i in range(0, others, 10):
            sqs.send_message_batch(QueueUrl=url, Entries=[
                {"Id": str(j), "MessageBody": f"o{i+j}", "MessageGroupId": f"h{i+j}",
                 "MessageDeduplicationId": str(uuid.uuid4())} for j in range(10)])
        handle = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1,
                                     VisibilityTimeout=60)["Messages"][0]["ReceiptHandle"]
        held = 0
        while held < others:
            held += len(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                            VisibilityTimeout=300).get("Messages", []))
        # m's first delivery times out now: visible again, and its handle still deletes it.
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
        stop = threading.Event()
        redelivered = []
        def receive_loop():
            while not stop.is_set():
                redelivered.extend(racer.receive_message(QueueUrl=url, MaxNumberOfMessages=1,
                                                         VisibilityTimeout=300).get("Messages", []))
        t = threading.Thread(target=receive_loop); t.start()
        time.sleep(0.01 * (trial % 5))
        try:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
        except sqs.exceptions.ReceiptHandleIsInvalid:
            # SQS's answer on a FIFO queue once the message was received again (moto_locked.py).
            print(f"trial {trial}: the first delivery's handle was refused", flush=True)
        time.sleep(0.2); stop.set(); t.join()
        for m in redelivered:  # processed: delete (may fail: the message is gone already)
            try:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            except Exception as e:
                print(f"trial {trial}: deleting the redelivery failed: {type(e).__name__}")
        send("second", "g")
        out = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2,
                                  VisibilityTimeout=300).get("Messages", [])
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        if not any(m["Body"] == "second" for m in out):
            stalled += 1
            print(f"trial {trial}: group g stalled: 'second' not delivered, visible="
                  f"{a['ApproximateNumberOfMessages']}, redelivered first {len(redelivered)}x", flush=True)
    print(f"stalled groups: {stalled} of {trials} trials ({others} other messages in flight)")
