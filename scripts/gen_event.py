#!/usr/bin/env python3
"""Print a generated SQS event of N valid orders (standard queue), as Lambda delivers it."""
import argparse
import json
import random

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--records", type=int, default=10000)
parser.add_argument("--fifo-groups", type=int, default=0, help="FIFO event with this many message groups")
parser.add_argument("--seed", type=int, default=7)
args = parser.parse_args()
rng = random.Random(args.seed)
arn = "arn:aws:sqs:us-east-1:123456789012:orders" + (".fifo" if args.fifo_groups else "")
records = []
for i in range(args.records):
    attributes = {
        "ApproximateReceiveCount": "1",
        "SentTimestamp": "1767225600000",
        "SenderId": "AIDAIENQZJOLO23YVJ4VO",
        "ApproximateFirstReceiveTimestamp": "1767225600012",
    }
    if args.fifo_groups:
        attributes.update({
            "SequenceNumber": str(18849496460467696128 + i),
            "MessageGroupId": f"g-{i % args.fifo_groups}",
            "MessageDeduplicationId": f"d-{i}",
        })
    records.append({
        "messageId": f"00000000-0000-4000-8000-{i:012d}",
        "receiptHandle": "AQEB" + "x" * 300,
        "body": json.dumps({"order_id": f"o-{i}", "amount": round(rng.uniform(1, 500), 2)}),
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": "us-east-1",
    })
print(json.dumps({"Records": records}))
