"""moto's server, with its SQS backend made safe for concurrent requests.

moto serves requests on threads and its SQS backend keeps a queue's in-flight ("pending")
messages in a set that receive, delete and visibility calls change without a lock. A receive
takes the list of visible messages first and marks them received afterwards; a delete of one of
them that lands in between removes the message, and the receive then puts it back into the
pending set. For a FIFO queue its message group then stays pending for ever: the group's later
messages are visible, counted, and never delivered. (`scripts/repro/moto_fifo_stall.py`
reproduces it; docs/local-development.md, "The chaos test", tells the story.)

A long poll has the same flaw at a larger scale: moto takes the set of pending groups once, when
the call starts, and keeps it while it waits. A group that another consumer received meanwhile
is not in it, so the waiting call can deliver the group's next message while the earlier one is
still in flight.

And moto forgets a received message's "pending" mark only when a receive reaches it in the
queue's order. When a reported batch of one group becomes visible again, the first messages are
skipped because the later ones still look pending, and the receive delivers the group's later
messages first (`scripts/repro/moto_fifo_reorder.py`; the chaos run charged 14 of 16 FIFO groups
out of order this way).

Here every public method of the SQS backend runs under one lock; every receive sees one instant
and first drops the pending marks of messages that are visible by then or gone; and a long poll is a series of such
short polls, with the lock released between them. moto then behaves as one consistent queue
service. On a FIFO queue a delete with a receipt handle of an
earlier delivery fails as on SQS (ReceiptHandleIsInvalid) instead of deleting a message another
consumer now holds.

It also makes moto's SQS fast enough for a queue of 10,000 messages. moto computes the three
approximate counts, each a pass over the queue, whenever code reads a queue's attributes, and
every send reads them up to five times: sending N messages cost O(N^2), 20 ms a message at 750
messages (`scripts/repro/moto_scale.py`). Its clock (a datetime subtraction) is read twice per
message per pass, and a delete or visibility change scans the whole queue for its receipt handle.
Here the counts are computed only for GetQueueAttributes, the clock is `time.time()`, and receipt
handles are found through an index. The behaviour is moto's; only the cost changes.

Usage: the same arguments as `moto_server` (`-H 127.0.0.1 -p PORT`).
"""

import functools
import sys
import threading
import time

from moto.server import main
from moto.sqs import models, responses
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
    # holds its group. And the whole receive sees one instant: moto's loop skips a group's
    # messages while a later one is still pending, and when it reaches that one and finds it
    # visible by now, it frees the group and delivers it, ahead of the ones it skipped
    # (`scripts/repro/moto_fifo_instant.py`).
    global _frozen_ms
    outer = _frozen_ms
    _frozen_ms = time.time() * 1000.0 if outer is None else outer
    try:
        queue = self.get_queue(queue_name)
        present = set(map(id, queue._messages))
        for message in list(queue.pending_messages):
            if message.visible or id(message) not in present:
                queue.pending_messages.discard(message)
        return _receive_message(self, queue_name, count, wait_seconds_timeout, *args, **kwargs)
    finally:
        _frozen_ms = outer


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


# The instant a receive runs at, while it runs (under the lock).
_frozen_ms = None


def _now_ms():
    # moto's unix_time_millis builds two datetimes per call; this is the same instant.
    if _frozen_ms is not None:
        return _frozen_ms
    return time.time() * 1000.0


def _visible(self):
    return _now_ms() > self.visible_at


def _delayed(self):
    return _now_ms() < self.delayed_until


def _visible_messages(self):
    now = _now_ms()
    return [m for m in self._messages if m.visible_at < now and m.delayed_until <= now]


# Every receipt handle ever given out, to the message it was given for (handles are unique).
_by_handle = {}
_mark_received = models.Message.mark_received


def _mark_received_indexed(self, *args, **kwargs):
    _mark_received(self, *args, **kwargs)
    _by_handle[self.receipt_handle] = self


def _held_message(queue, receipt_handle):
    # The message in this queue that was given this handle, or None. `in` on a list compares by
    # identity first (Message defines no __eq__), in C.
    message = _by_handle.get(receipt_handle)
    if message is None or message not in queue._messages:
        return None
    return message


def _delete_current_only(self, receipt_handle):
    # moto's delete, without its two scans of the queue. And SQS refuses a FIFO delete by the
    # handle of an earlier delivery once the message has been received again; moto would delete
    # the message under its new holder.
    if receipt_handle in self.deleted_messages:
        return
    message = _held_message(self, receipt_handle)
    if message is None or (self.fifo_queue and message.receipt_handle != receipt_handle):
        raise ReceiptHandleIsInvalid()
    self._messages.remove(message)
    self.pending_messages.discard(message)
    self.deleted_messages.update(message.all_receipt_handles)
    for handle in message.all_receipt_handles:
        _by_handle.pop(handle, None)


_change_message_visibility = models.SQSBackend.change_message_visibility


def _change_visibility_indexed(self, queue_name, receipt_handle, visibility_timeout):
    # moto scans the queue for the handle and then changes that one message: let it scan a
    # queue of one.
    queue = self.get_queue(queue_name)
    message = _held_message(queue, receipt_handle)
    if message is None:
        raise ReceiptHandleIsInvalid()
    everything = queue._messages
    queue._messages = [message]
    try:
        return _change_message_visibility(self, queue_name, receipt_handle, visibility_timeout)
    finally:
        queue._messages = everything


_counting = threading.local()


def _count_only_when_asked(count):
    # Called by every read of Queue.attributes (five times per FIFO send, once per received
    # message), these passes over the queue are needed by the GetQueueAttributes call alone.
    def run(self):
        if getattr(_counting, "on", False):
            return count(self)
        return None

    return property(run)


def _with_counts(method):
    @functools.wraps(method)
    def run(*args, **kwargs):
        _counting.on = True
        try:
            return method(*args, **kwargs)
        finally:
            _counting.on = False

    return run


for name, value in list(vars(models.SQSBackend).items()):
    if callable(value) and not name.startswith("_"):
        setattr(models.SQSBackend, name, _serialized(value))
models.SQSBackend.receive_message = _long_poll(_serialized(_receive_fresh))
models.SQSBackend.change_message_visibility = _serialized(_change_visibility_indexed)
responses.SQSResponse.get_queue_attributes = _with_counts(
    responses.SQSResponse.get_queue_attributes
)
models.Queue.delete_message = _delete_current_only
models.Queue.messages = property(_visible_messages)
models.Message.visible = property(_visible)
models.Message.delayed = property(_delayed)
models.Message.mark_received = _mark_received_indexed
for _name, _count in [
    ("approximate_number_of_messages", lambda q: len(q.messages)),
    ("approximate_number_of_messages_not_visible", lambda q: sum(not m.visible for m in q._messages)),
    ("approximate_number_of_messages_delayed", lambda q: sum(m.delayed for m in q._messages)),
]:
    setattr(models.Queue, _name, _count_only_when_asked(_count))

if __name__ == "__main__":
    main(sys.argv[1:])
