"""moto's server, with its SQS backend made safe for concurrent requests.

moto serves requests on threads and its SQS backend keeps a queue's in-flight ("pending")
messages in a set that receive, delete and visibility calls change without a lock. A receive
takes the list of visible messages first and marks them received afterwards; a delete of one of
them that lands in between removes the message, and the receive then puts it back into the
pending set. For a FIFO queue its message group then stays pending for ever: the group's later
messages are visible, counted, and never delivered. (`scripts/repro/moto_fifo_stall.py`
reproduces it; the README's "The chaos test" tells the story.)

A long poll has the same flaw at a larger scale: moto takes the set of pending groups once, when
the call starts, and keeps it while it waits. A group that another consumer received meanwhile
is not in it, so the waiting call can deliver the group's next message while the earlier one is
still in flight.

And moto forgets a received message's "pending" mark only when a receive reaches it in the
queue's order. When a reported batch of one group becomes visible again, the first messages are
skipped because the later ones still look pending, and the receive delivers the group's later
messages first (`scripts/repro/moto_fifo_reorder.py`; the chaos run charged 14 of 16 FIFO groups
out of order this way).

Here every public method of the SQS backend runs under one lock; every receive first drops the
pending marks of messages that are visible again or gone; and a long poll is a series of such
short polls, with the lock released between them. moto then behaves as one consistent queue
service. On a FIFO queue a delete with a receipt handle of an
earlier delivery fails as on SQS (ReceiptHandleIsInvalid) instead of deleting a message another
consumer now holds.

Usage: the same arguments as `moto_server` (`-H 127.0.0.1 -p PORT`).
"""

import functools
import sys
import threading
import time

from moto.server import main
from moto.sqs import models
from moto.sqs.exceptions import ReceiptHandleIsInvalid

_lock = threading.Lock()
_held = threading.local()


def _serialized(method):
    @functools.wraps(method)
    def run(*args, **kwargs):
        depth = getattr(_held, "depth", 0)
        if depth == 0:
            _lock.acquire()
        _held.depth = depth + 1
        try:
            return method(*args, **kwargs)
        finally:
            _held.depth -= 1
            if _held.depth == 0:
                _lock.release()

    return run


_receive_message = models.SQSBackend.receive_message


def _receive_fresh(self, queue_name, count, wait_seconds_timeout, *args, **kwargs):
    # A message is pending only while it is in flight: one visible again, or deleted, no longer
    # holds its group.
    queue = self.get_queue(queue_name)
    present = set(map(id, queue._messages))
    for message in list(queue.pending_messages):
        if message.visible or id(message) not in present:
            queue.pending_messages.discard(message)
    return _receive_message(self, queue_name, count, wait_seconds_timeout, *args, **kwargs)


# How often a waiting receive looks again.
_POLL_SECONDS = 0.1


def _long_poll(receive):
    # Short polls (wait 0) under the lock, sleeping without it between them, until a message
    # comes or the wait is over: every look sees the pending groups as they are now.
    @functools.wraps(receive)
    def run(self, queue_name, count, wait_seconds_timeout, *args, **kwargs):
        deadline = time.monotonic() + float(wait_seconds_timeout or 0)
        while True:
            result = receive(self, queue_name, count, 0, *args, **kwargs)
            left = deadline - time.monotonic()
            if result or left <= 0:
                return result
            time.sleep(min(_POLL_SECONDS, left))

    return run


_delete_message = models.Queue.delete_message


def _delete_current_only(self, receipt_handle):
    # SQS refuses a FIFO delete by the handle of an earlier delivery once the message has been
    # received again; moto would delete the message under its new holder.
    if self.fifo_queue:
        for message in self._messages:
            if (
                message.had_receipt_handle(receipt_handle)
                and message.receipt_handle != receipt_handle
            ):
                raise ReceiptHandleIsInvalid()
    return _delete_message(self, receipt_handle)


for name, value in list(vars(models.SQSBackend).items()):
    if callable(value) and not name.startswith("_"):
        setattr(models.SQSBackend, name, _serialized(value))
models.SQSBackend.receive_message = _long_poll(_serialized(_receive_fresh))
models.Queue.delete_message = _delete_current_only

if __name__ == "__main__":
    main(sys.argv[1:])
