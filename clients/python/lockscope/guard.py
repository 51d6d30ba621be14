"""Fencing's other half: the protected resource refuses a write whose fence
is lower than the highest it has accepted, and says so to lockscope.

A lock alone cannot stop a holder that paused past its TTL (GC, swap, a
stopped VM) from writing after its successor; a resource that checks fences
can. The twin of Go's ``lock.FenceGuard``:

    guard = lockscope.FenceGuard(r, emitter=lockscope.default_emitter(r))
    guard.set("lock:order:42", fence, "order:42", payload)     # a Redis-held resource
    cur.execute("UPDATE orders SET total = %s, fence = %s WHERE id = %s AND fence <= %s",
                (total, fence, 42, fence))
    guard.updated("lock:order:42", fence, "orders/42", cur)    # the SQL form

A refused write raises StaleFence and is recorded as a ``fence_rejected``
event (docs/events.md) naming the lock key and the stale fence, so that the
overlap incident says "fencing held: N stale writes refused".
"""

import os
import time

from . import event as ev

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.lua"), encoding="utf-8") as _f:
    GUARD_LUA = _f.read()  # the same script as Go's lock/guard.lua

GUARD_PREFIX = "lockscope:guard:"


class StaleFence(Exception):
    """A write carried a fence lower than the highest the resource accepted:
    its writer no longer holds the lock. Nothing was written."""

    def __init__(self, resource, fence, highest=0):
        self.resource, self.fence, self.highest = resource, fence, highest
        msg = "lockscope: stale fence: %r refused fence %d" % (resource, fence)
        if highest:
            msg += " (it accepted %d)" % highest
        super().__init__(msg)


def guard_key(key):
    """The key that keeps the highest fence the Redis-held resource key
    accepted, in key's cluster hash slot (Go's lock.GuardKey, for keys that
    have a hash tag or no '}')."""
    k = key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else key
    start = k.find("{")
    if start >= 0:
        end = k.find("}", start + 1)
        if end > start + 1:
            return GUARD_PREFIX + "t:" + k
    if k and "}" not in k:
        return GUARD_PREFIX + "{" + k + "}"
    raise ValueError("guard_key: a key with braces but no hash tag: use a hash tag, e.g. {order:42}")


class FenceGuard:
    """Accepts a write only with a fence at least the highest the resource
    has accepted, and records each refusal (with emitter: a lockscope
    Emitter, or None for none)."""

    def __init__(self, client, emitter=None):
        self._r = client
        self._emitter = emitter
        self._script = client.register_script(GUARD_LUA) if client is not None else None

    def set(self, lock_key, fence, key, value):
        """Writes value to the Redis string key if fence is at least the
        highest fence a write to key carried: the check and the write are one
        script. Raises StaleFence (and records it) when refused."""
        ok, highest = self._script(keys=[guard_key(key), key], args=[int(fence), value])
        if ok == 1:
            return
        self._refused(lock_key, key, fence, highest)

    def updated(self, lock_key, fence, resource, cursor):
        """Reports the outcome of a fenced SQL update of one row, run on the
        DB-API cursor: UPDATE ... SET ..., fence = ? WHERE ... AND fence <= ?.
        No row changed means refused (the row must exist: insert it with
        fence 0 first): StaleFence is raised and recorded."""
        if cursor.rowcount > 0:
            return
        self._refused(lock_key, resource, fence, 0)

    def _refused(self, lock_key, resource, fence, highest):
        if self._emitter is not None:
            self._emitter.record(ev.Event("fence_rejected", key=lock_key, fence=int(fence),
                                          reason=resource if isinstance(resource, (str, bytes)) else str(resource),
                                          ts=time.time_ns()))
        raise StaleFence(resource if isinstance(resource, str) else repr(resource), int(fence), int(highest))
