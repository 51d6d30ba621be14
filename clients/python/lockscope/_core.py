"""What the sync and asyncio locks share: holds, leases held by the calling
context, and the events they emit."""

import contextvars
import os
import time

from redis.exceptions import LockError

from . import event as ev
from . import listen
from . import value
from .emitter import default_emitter

# The leases held in this thread or asyncio task (innermost first): a
# waiting event lists them, which is what links a deadlock's waiters in the
# collector's wait-for graph, and so does an acquired event (the edges of
# its lock-order graph). _live maps the leases held in this process to
# when their TTL runs out (time.monotonic(); None without a TTL): it filters
# out holds ended elsewhere (released by another thread, thread_local=False)
# or by their TTL.
_held = contextvars.ContextVar("lockscope_held", default=())
_live = {}
MAX_HELD_LEASES = 16  # as the Go library
_PRUNE_AT = 4096  # _live entries past which lapsed ones are dropped

_owner_cache = (None, "")


def process_owner():
    """The default owner, value.default_owner(), computed once per process."""
    global _owner_cache
    pid = os.getpid()
    if _owner_cache[0] != pid:
        _owner_cache = (pid, value.default_owner())
    return _owner_cache[1]


def held_leases():
    """Returns the leases the calling thread or task holds now, innermost
    first, at most MAX_HELD_LEASES."""
    now = time.monotonic()
    out = []
    for lease in _held.get():
        until = _live.get(lease, 0)
        if until is None or until > now:
            out.append(lease)
            if len(out) == MAX_HELD_LEASES:
                break
    return out


def _hold_until(ttl_ms):
    return time.monotonic() + ttl_ms / 1000 if ttl_ms else None


def _prune():
    now = time.monotonic()
    for lease, until in list(_live.items()):
        if until is not None and until <= now:
            _live.pop(lease, None)


class Hold:
    """One hold of a lock: its token, public lease id, owner, start (Unix ns)."""

    __slots__ = ("token", "lease", "owner", "since", "asked")

    def __init__(self, token, lease, owner, since):
        self.token, self.lease, self.owner, self.since = token, lease, owner, since
        self.asked = None  # listen.Asked once the hold listens for release requests


class Core:
    """The instrumentation shared by lockscope.Lock and
    lockscope.asyncio.Lock; placed before redis-py's class in their bases."""

    def _ls_setup(self, owner, emitter):
        self.owner = owner
        self.emitter = emitter if emitter is not None else default_emitter(self.redis)

    def _ls_owner(self):
        return self.owner if self.owner is not None else process_owner()

    def _ls_ttl_ms(self):
        return int(self.timeout * 1000) if self.timeout else 0

    def _ls_hold(self):
        """The hold of the token this thread (or the lock) holds now."""
        h = getattr(self.local, "lockscope_hold", None)
        if h is not None and h.token == getattr(self.local, "token", None):
            return h
        return None

    def _ls_call(self, token, encode):
        """Starts one acquire call: returns (secret, fixed token, lease)."""
        if token is not None:
            return None, encode(token), value.new_lease()[1]
        secret, lease = value.new_lease()
        return secret, None, lease

    def _ls_attempt_token(self, secret, fixed, lease, owner, at):
        return fixed if fixed is not None else value.make(secret, lease, at // 1_000_000, owner)

    def _ls_acquired(self, token, lease, owner, at, start, attempts):
        h = Hold(token, lease, owner, at)
        self.local.lockscope_hold = h
        ttl = self._ls_ttl_ms()
        # What the caller already holds, as a waiting event lists it: the
        # collector's lock-order graph. An empty context costs one lookup.
        outer = ",".join(held_leases()) if _held.get() else ""
        if len(_live) >= _PRUNE_AT:
            _prune()
        _live[lease] = _hold_until(ttl)
        _held.set((lease,) + tuple(x for x in _held.get() if x in _live))
        self.emitter.record(ev.Event("acquired", key=self.name, owner=owner, lease=lease, ts=at,
                                     wait=time.time_ns() - start, ttl=ttl, attempts=attempts, reason=outer))

    def _ls_failed(self, lease, owner, start, attempts, reason, holder):
        now = time.time_ns()
        self.emitter.record(ev.Event("failed", key=self.name, owner=owner, lease=lease, ts=now,
                                     wait=now - start, attempts=attempts, reason=reason, holder=holder))

    def _ls_waiting(self, lease, owner, holder, budget):
        """budget: seconds the call will wait at most (None: no bound)."""
        self.emitter.record(ev.Event("waiting", key=self.name, owner=owner, lease=lease, ts=time.time_ns(),
                                     wait=max(int(budget * 1e9), 0) if budget is not None else 0,
                                     attempts=1, holder=holder, reason=",".join(held_leases())))

    def _ls_listen(self, callback, make):
        """Makes the hold this lock has now listen for release requests
        (once; make() builds its Asked) and adds callback; returns the hold.
        Raises LockError when the lock is not held."""
        h = self._ls_hold()
        if h is None:
            raise LockError("Cannot listen for release requests: the lock is not held")
        if h.asked is None:
            h.asked = make()
            h.asked.add(callback)
            listen.default_listener(self.redis).add(h.lease, h.asked.deliver)
        else:
            h.asked.add(callback)
        return h

    def _ls_renewed(self, h, ttl_ms, left_ms):
        """Records a renewal that set ttl_ms when left_ms were left."""
        if h is not None and h.lease in _live:
            _live[h.lease] = _hold_until(ttl_ms)
        self._ls_event(h, "renewed", ttl=ttl_ms, headroom=max(left_ms, 0) * 1_000_000)

    def _ls_event(self, h, type, **fields):
        if h is not None:
            self.emitter.record(ev.Event(type, key=self.name, owner=h.owner, lease=h.lease, ts=time.time_ns(),
                                         **fields))

    def _ls_end(self, h, type, reason=""):
        """Records that hold h ended (released or lost) and forgets it."""
        if h is None:
            return
        now = time.time_ns()
        self.emitter.record(ev.Event(type, key=self.name, owner=h.owner, lease=h.lease, ts=now,
                                     hold=now - h.since, reason=reason))
        self._ls_forget(h)

    def _ls_forget(self, h):
        if h is None:
            return
        if h.asked is not None:
            listen.default_listener(self.redis).remove(h.lease)
            h.asked.end()
        _live.pop(h.lease, None)
        held = _held.get()
        if h.lease in held:
            _held.set(tuple(lease for lease in held if lease != h.lease))
        if getattr(self.local, "lockscope_hold", None) is h:
            self.local.lockscope_hold = None


# KEYS[1] lock name; ARGV[1] token, ARGV[2] milliseconds, ARGV[3] "1" to
# replace the TTL, "0" to add to it. redis-py's extend script, returning
# what it set: 0 if the token is not the lock's (or it has no TTL), else
# {new TTL ms, TTL ms left before}.
LUA_EXTEND = """
local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
local expiration = redis.call('pttl', KEYS[1])
if not expiration then
    expiration = 0
end
if expiration < 0 then
    return 0
end
local newttl = tonumber(ARGV[2])
if ARGV[3] == "0" then
    newttl = newttl + expiration
end
redis.call('pexpire', KEYS[1], newttl)
return {newttl, expiration}
"""


# KEYS[1] lock name; ARGV[1] token, ARGV[2] milliseconds. redis-py's
# reacquire script, also returning the TTL that was left: 0 if the token is
# not the lock's, else {1, PTTL before}.
LUA_REACQUIRE = """
local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then
    return 0
end
local left = redis.call('pttl', KEYS[1])
redis.call('pexpire', KEYS[1], ARGV[2])
return {1, left}
"""


def holder_of(stored):
    return value.holder_name(stored) if stored is not None else ""
