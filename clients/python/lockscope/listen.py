"""Hearing release requests: an operator asks a holder to release its lock.

The Python twin of the Go library's Lease.ReleaseRequested (docs/events.md,
"Release requests"): a hold that listens subscribes the Pub/Sub channel of
its lease, ``lockscope:release-request:<lease>``, on the one Pub/Sub
connection its Redis client's Listener keeps, from one background thread,
while any of that client's holds listens. A hold that does not listen costs
nothing. Operators count the channel's subscribers (PUBSUB NUMSUB) to tell
a holder that can hear from one that cannot, and publish one JSON message:

    {"v": 1, "lease": "9f86d081884c7d65", "by": "alice", "reason": "...",
     "ts": 1700000000000000000, "grace_ms": 30000}

Classic Pub/Sub (not sharded): redis-py 4 has no SSUBSCRIBE, and a Cluster
forwards every PUBLISH to every node, so one connection hears every lease.
"""

import collections
import json
import os
import threading
import time
import weakref

CHANNEL_PREFIX = "lockscope:release-request:"
MAX_REQUEST_BYTES = 4096
VERSION = 1

# How long the listener thread waits for a message before it looks at the
# holds that began or stopped listening: the most a new hold waits to be
# subscribed (beyond its SUBSCRIBE's round trip).
POLL = 0.05
# How long it waits before retrying after a Redis error (the connection is
# re-made, and its channels subscribed again, by the next command).
RETRY = 0.5
SOCKET_TIMEOUT = 5.0
# How long a Listener keeps its connection and thread after its last hold
# stopped listening: an application holding one lock after another does
# not connect once per hold.
LINGER = 30.0


class ReleaseRequest(collections.namedtuple("ReleaseRequest", "operator reason at grace")):
    """An operator's request that a hold release its lock: who asks, why,
    when (Unix seconds) and the grace the operator gives before it may
    force the release (seconds; 0 when not said)."""


def channel(lease):
    """The Pub/Sub channel a hold of lease listens on."""
    return CHANNEL_PREFIX + lease


def encode_request(lease, by, reason, ts_ns, grace_ms=0):
    """The message an operator publishes on channel(lease) (as Go's
    event.Request.Encode)."""
    m = {"v": VERSION, "lease": lease, "by": by, "reason": reason, "ts": ts_ns}
    if grace_ms:
        m["grace_ms"] = grace_ms
    return json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_request(data, lease):
    """Returns the ReleaseRequest a message carries for lease, or None for
    anything else (malformed, too large, of a later version, or naming
    another lease)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_REQUEST_BYTES:
        return None
    try:
        m = json.loads(data)
    except ValueError:
        return None
    if not isinstance(m, dict) or m.get("v") != VERSION or m.get("lease") != lease:
        return None
    by, reason, ts, grace = m.get("by", ""), m.get("reason", ""), m.get("ts", 0), m.get("grace_ms", 0)
    if not isinstance(by, str) or not isinstance(reason, str) or not isinstance(ts, int) or not isinstance(grace, int) or grace < 0:
        return None
    return ReleaseRequest(by, reason, ts / 1e9, grace / 1000)


class Listener:
    """One Pub/Sub connection and thread for the holds of one Redis client
    that listen; default_listener(client) returns the client's.

    Memory: one entry per listening hold (the application's own, removed
    when the hold ends), and nothing once none has listened for linger
    seconds (the thread ends and closes its connection)."""

    def __init__(self, client):
        from .emitter import own_client  # the emitter's rule for a sync connection of its own
        self._client = own_client(client, SOCKET_TIMEOUT)
        self._mu = threading.Lock()
        self._holds = {}  # channel -> deliver(ReleaseRequest)
        self._ops = []  # ("subscribe" | "unsubscribe", channel), in order
        self._thread = None
        self.errors = 0  # Redis errors the thread retried after
        self.linger = LINGER

    def add(self, lease, deliver):
        """Starts hearing requests for lease: deliver(request) is called on
        the listener's thread for each."""
        ch = channel(lease)
        with self._mu:
            self._holds[ch] = deliver
            self._ops.append(("subscribe", ch))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lockscope-listener", daemon=True)
                self._thread.start()

    def remove(self, lease):
        """Stops hearing requests for lease."""
        ch = channel(lease)
        with self._mu:
            if self._holds.pop(ch, None) is not None:
                self._ops.append(("unsubscribe", ch))

    def listening(self):
        """The number of holds that listen now."""
        with self._mu:
            return len(self._holds)

    def _run(self):
        ps = self._client.pubsub(ignore_subscribe_messages=True)
        subscribed = set()
        idle_since = None
        try:
            while True:
                with self._mu:
                    ops, self._ops = self._ops, []
                    if self._holds:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since >= self.linger:
                        self._thread = None
                        return
                try:
                    for op, ch in ops:
                        if op == "subscribe" and ch not in subscribed:
                            ps.subscribe(ch)
                            subscribed.add(ch)
                        elif op == "unsubscribe" and ch in subscribed:
                            ps.unsubscribe(ch)
                            subscribed.discard(ch)
                    msg = ps.get_message(timeout=POLL)
                except Exception:  # Redis away: redis-py re-connects and re-subscribes on the next command
                    self.errors += 1
                    threading.Event().wait(RETRY)
                    continue
                if msg and msg.get("type") == "message":
                    self._deliver(msg)
        finally:
            try:
                ps.close()
            except Exception:
                pass

    def _deliver(self, msg):
        ch = msg.get("channel")
        if isinstance(ch, bytes):
            ch = ch.decode("utf-8", "replace")
        with self._mu:
            deliver = self._holds.get(ch)
        if deliver is None:
            return
        req = decode_request(msg.get("data"), ch[len(CHANNEL_PREFIX):])
        if req is not None:
            try:
                deliver(req)
            except Exception:  # an application callback's error must not end the listener
                pass


_defaults_lock = threading.Lock()
_defaults = {}  # id(client) -> (weakref to client, Listener)


def default_listener(client):
    """Returns the Listener of a Redis client (sync or asyncio): one per
    client, made on first use, as default_emitter makes its emitter."""
    key = id(client)
    with _defaults_lock:
        got = _defaults.get(key)
        if got is not None and got[0]() is client:
            return got[1]
        li = Listener(client)

        def gone(_ref, key=key):
            _defaults.pop(key, None)

        try:
            ref = weakref.ref(client, gone)
        except TypeError:
            ref = lambda: client  # noqa: E731 (not weakly referable: kept for the process)
        _defaults[key] = (ref, li)
        return li


class Asked:
    """What a sync lock's hold heard: the first request, an event set when
    one arrives (or the hold ends), and the callbacks to call."""

    def __init__(self):
        self._mu = threading.Lock()
        self.event = threading.Event()
        self.request = None
        self._callbacks = []

    def add(self, callback):
        if callback is not None:
            with self._mu:
                self._callbacks.append(callback)

    def deliver(self, req):
        """Called on the listener's thread."""
        with self._mu:
            if self.request is None:
                self.request = req
            callbacks = list(self._callbacks)
        self.event.set()
        for cb in callbacks:
            cb(req)

    def end(self):
        self.event.set()


class AsyncAsked:
    """An asyncio lock's Asked: the request reaches the event loop the lock
    listened from; callbacks run there (a coroutine one as a task)."""

    def __init__(self, loop):
        import asyncio
        self._asyncio = asyncio
        self._loop = loop
        self.event = asyncio.Event()
        self.request = None
        self._callbacks = []

    def add(self, callback):
        if callback is not None:
            self._callbacks.append(callback)

    def deliver(self, req):
        """Called on the listener's thread."""
        try:
            self._loop.call_soon_threadsafe(self._arrived, req)
        except RuntimeError:  # the loop is closed: nobody to tell
            pass

    def _arrived(self, req):
        if self.request is None:
            self.request = req
        self.event.set()
        for cb in list(self._callbacks):
            try:
                r = cb(req)
                if self._asyncio.iscoroutine(r):
                    self._loop.create_task(r)
            except Exception:
                pass

    def end(self):
        """Called on the loop (release and loss run there)."""
        self.event.set()


def _after_fork_in_child():
    # A child has no listener thread, and must not share the parent's
    # Pub/Sub connection: its holds start afresh.
    _defaults.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
