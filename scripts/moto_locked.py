"""moto's server, with its SQS backend made safe for concurrent requests.

moto serves requests on threads and its SQS backend keeps a queue's in-flight ("pending")
messages in a set that receive, delete and visibility calls change without a lock. A receive
takes the list of visible messages first and marks them received afterwards; a delete of one of
them that lands in between removes the message, and the receive then puts it back into the
pending set. For a FIFO queue its message group then stays pending for ever: the group's later
messages are visible, counted, and never delivered. (`scripts/repro/moto_fifo_stall.py`
reproduces it; the README's "The chaos test" tells the story.)

Here every public method of the SQS backend runs under one lock, released only while a long
poll waits for messages, so moto behaves as one consistent queue service. On a FIFO queue a
delete with a receipt handle of an earlier delivery fails as on SQS (ReceiptHandleIsInvalid)
instead of deleting a message another consumer now holds.

Usage: the same arguments as `moto_server` (`-H 127.0.0.1 -p PORT`).
"""

import functools
import sys
import threading

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


_wait_for_messages = models.Queue.wait_for_messages


def _wait_unlocked(self, timeout):
    # A long poll waits without the lock, so sends (which wake it) and other calls go on.
    depth = getattr(_held, "depth", 0)
    if depth:
        _held.depth = 0
        _lock.release()
    try:
        return _wait_for_messages(self, timeout)
    finally:
        if depth:
            _lock.acquire()
            _held.depth = depth


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
models.Queue.wait_for_messages = _wait_unlocked
models.Queue.delete_message = _delete_current_only

if __name__ == "__main__":
    main(sys.argv[1:])
