"""Test helpers: reading the event stream back, polling."""

import time

from lockscope import event as ev


def read_stream(r, stream):
    """Returns the stream's entries and the events they decode to."""
    entries = r.xrange(stream)
    events = []
    for _, fields in entries:
        events.extend(ev.decode(fields))
    return entries, events


def wait_for(what, cond, within=10.0):
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("still waiting after %ss for %s" % (within, what))
        time.sleep(0.005)


def strip(events, *fields):
    """Returns (type, field values...) tuples, for comparing what matters."""
    return [(e.type,) + tuple(getattr(e, f) for f in fields) for e in events]
