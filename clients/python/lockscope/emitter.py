"""The emitter: lock events to the lockscope stream, in packed batches.

It behaves as the Go library's lock.Emitter (docs/events.md, "How the Go
emitter sends"): record() appends to an in-memory buffer and returns, one
background thread writes; a write is one packed XADD ... MINID ~ of at most
batch_size events, sent as soon as a batch is full, at most flush_interval
after the first buffered event, on flush() and on close(). Memory is
bounded by buffer_size events, buffered plus being written; when the buffer
is full or a write fails, events are dropped, not retried, counted, and the
next successful write starts with a ``dropped`` event carrying the count.
"""

import atexit
import collections
import logging
import math
import os
import threading
import time
import weakref

import redis

from . import event as ev
from .value import default_owner

log = logging.getLogger("lockscope")

DEFAULT_MAX_AGE = 15 * 60.0  # seconds of stream kept, on Redis's clock (see Retention)
RETENTION_CLOCK_EVERY = 60.0  # seconds between two TIME calls
RETENTION_AHEAD_KEEP = 100_000  # entries a stream keeps after an ID in the future
DEFAULT_BATCH_SIZE = 2048
MAX_FLUSH_INTERVAL = 0.1
DEFAULT_BUFFER_SIZE = 16384
DEFAULT_WRITE_TIMEOUT = 1.0

EmitterStats = collections.namedtuple("EmitterStats", "recorded sent dropped batches errors")
EmitterStats.__doc__ = """An emitter's counters since it was created. Once it is closed,
recorded == sent + dropped."""


class Retention:
    """The rule by which every writer of a stream trims it by age, as the Go
    library's event.Retention (docs/events.md, "Retention"): entry IDs are
    chosen by whoever XADDs, so none is trusted.

    - The clock is Redis's (TIME, asked again every RETENTION_CLOCK_EVERY
      seconds and applied to the local clock in between); until
      TIME answers (or when it is refused) the local clock stands in.
    - Each XADD trims with MINID ~ (Redis's time - max_age).
    - When the ID the stream gave this writer's last entry, P-S, lies ahead
      of Redis's time and S >= RETENTION_AHEAD_KEEP, the MINID is
      P-(S - RETENTION_AHEAD_KEEP): the newest RETENTION_AHEAD_KEEP entries
      after the future ID are kept.
    """

    def __init__(self, max_age_ms):
        self.max_age_ms = max_age_ms
        self.offset_ms = 0.0  # Redis's clock minus the local one
        self.synced = None  # time.monotonic() of the last TIME
        self.ms, self.seq = 0, 0  # the newest entry ID the stream gave this writer

    def now_ms(self):
        return time.time() * 1000 + self.offset_ms

    def min_id(self):
        """The MINID of the next XADD, or None."""
        now = self.now_ms()
        if self.ms > now and self.seq >= RETENTION_AHEAD_KEEP:
            return "%d-%d" % (self.ms, self.seq - RETENTION_AHEAD_KEEP)
        cut = int(now) - self.max_age_ms
        return cut if cut > 0 else None

    def written(self, entry_id):
        if isinstance(entry_id, bytes):
            entry_id = entry_id.decode()
        ms, _, seq = str(entry_id).partition("-")
        try:
            ms, seq = int(ms), int(seq or 0)
        except ValueError:
            return
        if (ms, seq) > (self.ms, self.seq):
            self.ms, self.seq = ms, seq


def sync_clock(client, rules):
    """Asks Redis for its time (TIME) when the first of rules needs it, once
    a minute, and sets it on all of them; a refusal leaves the local
    clock."""
    if not rules:
        return
    now = time.monotonic()
    if rules[0].synced is not None and now - rules[0].synced < RETENTION_CLOCK_EVERY:
        return
    sent = time.time()
    try:
        sec, usec = client.time()
    except redis.RedisError:
        offset = None
    else:
        received = time.time()
        offset = sec * 1000 + usec / 1000 - (sent + received) / 2 * 1000
    for r in rules:
        if offset is not None:
            r.offset_ms = offset
        r.synced = time.monotonic()


class StreamSink:
    """Writes each batch as packed entries to the lockscope stream (or its
    partitions): one entry per batch unless it passes ev.ENTRY_BYTES or a
    decoder's limits. Each XADD trims the stream: with MAXLEN ~ maxlen if
    maxlen is positive, else with MINID ~ to the entries at most max_age
    seconds old by Retention's rule (on Redis's clock); neither: never
    trimmed. Used by the Emitter's thread only."""

    def __init__(self, client, stream=ev.DEFAULT_STREAM, maxlen=0, partitions=0, max_age=DEFAULT_MAX_AGE):
        self.client = client
        self.streams = ev.streams(stream or ev.DEFAULT_STREAM, partitions)
        self.maxlen = maxlen if maxlen and maxlen > 0 else None
        max_age_ms = int(max_age * 1000) if not self.maxlen and max_age and max_age > 0 else 0
        # stream -> its Retention; none when trimming by length or never
        self._rules = {s: Retention(max_age_ms) for s in self.streams} if max_age_ms else {}

    def _trim(self, stream):
        """The XADD trimming arguments for stream."""
        if self.maxlen:
            return {"maxlen": self.maxlen, "approximate": True}
        rule = self._rules.get(stream)
        min_id = rule.min_id() if rule else None
        if min_id is not None:
            return {"minid": min_id, "approximate": True}
        return {}

    def _written(self, stream, entry_id):
        rule = self._rules.get(stream)
        if rule:
            rule.written(entry_id)

    def write(self, events):
        if not events:
            return
        if self._rules:
            sync_clock(self.client, list(self._rules.values()))
        n = len(self.streams)
        if n == 1:
            entries = [(self.streams[0], e) for e in ev.pack_entries(events, ev.ENTRY_BYTES)]
        else:
            parts = [[] for _ in range(n)]
            for e in events:
                parts[ev.partition_of(e.key, n)].append(e)
            entries = [(self.streams[p], e) for p in range(n) for e in ev.pack_entries(parts[p], ev.ENTRY_BYTES)]
        if len(entries) == 1:
            stream, (count, batch, ext) = entries[0]
            self._written(stream, self.client.xadd(stream, ev.packed_fields(count, batch, ext), **self._trim(stream)))
            return
        pipe = self.client.pipeline(transaction=False)
        for stream, (count, batch, ext) in entries:
            pipe.xadd(stream, ev.packed_fields(count, batch, ext), **self._trim(stream))
        for (stream, _), entry_id in zip(entries, pipe.execute()):
            self._written(stream, entry_id)


class MemorySink:
    """Keeps every event written to it, for tests (yours and ours)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.events = []
        self.writes = 0

    def write(self, events):
        with self._lock:
            self.events.extend(events)
            self.writes += 1


# Connection arguments that mean the same to redis-py's sync and asyncio
# connections; the emitter's own connection is made of these only.
_PORTABLE = ("host", "port", "db", "username", "password", "path", "client_name", "encoding",
             "encoding_errors", "socket_keepalive", "socket_keepalive_options", "ssl_keyfile",
             "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data", "ssl_check_hostname")
_CONNECTIONS = {
    "Connection": redis.connection.Connection,
    "SSLConnection": redis.connection.SSLConnection,
    "UnixDomainSocketConnection": redis.connection.UnixDomainSocketConnection,
}


def own_client(client, write_timeout):
    """Returns a sync client for the emitter's writes to client's server: a
    connection of its own (so the emitter never takes a connection the
    application waits for) whose socket timeouts bound each write. A Cluster
    client, or one with a connection class of its own, is used as it is."""
    pool = getattr(client, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    conn = _CONNECTIONS.get(getattr(cls, "__name__", ""))
    if pool is None or conn is None or cls.__module__ not in ("redis.connection", "redis.asyncio.connection"):
        if isinstance(client, redis.Redis) or hasattr(client, "get_nodes"):
            return client
        raise TypeError("lockscope: cannot derive a sync Redis client from %r: pass Emitter a redis.Redis" % (client,))
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k in _PORTABLE}
    kwargs["socket_timeout"] = write_timeout
    kwargs["socket_connect_timeout"] = write_timeout
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=conn, max_connections=4, **kwargs))


class _FlushRequest:
    __slots__ = ("done", "error")

    def __init__(self):
        self.done = threading.Event()
        self.error = None


_emitters = weakref.WeakSet()


class Emitter:
    """Batches lock events and writes them from one background thread.

    ``Emitter(redis_client)`` writes packed batches to ``lockscope:events``
    on redis_client's server. Arguments (a zero or None means the default,
    as in Go's lock.EmitterOptions):

    - stream: the stream key ("lockscope:events").
    - partitions: spread events by lock key over this many streams
      (event.streams); collectors must read as many (``--partitions``).
    - max_age: keep the entries at most this many seconds old, by Redis's
      clock (XADD MINID ~, by Retention's rule; 900: 15 minutes).
      What a stopped collector can still read when it comes back, and what
      Redis's memory holds: some 100 bytes per event (30-byte keys).
    - maxlen: if positive, trim with MAXLEN ~ maxlen entries instead (an
      entry holds a batch); negative: never trim.
    - batch_size: most events per write, and a write as soon as this many
      are buffered (2048); capped at buffer_size and at 9 999.
    - flush_interval: the longest an event waits, in seconds (0.1, the most).
    - buffer_size: events held in memory, buffered or being written (16 384).
    - write_timeout: bound of one write, in seconds (1.0).
    - owner: identity of the emitter's own ``dropped`` reports (the
      process: program/host/pid).
    - sink: an object whose write(events) receives the batches, instead of
      the stream (MemorySink for tests).

    record() never blocks. Close the emitter (close(), or use it as a
    context manager) to flush the last events; emitters still open at
    interpreter exit are closed then, with a 1 s bound.
    """

    def __init__(self, redis_client=None, stream=ev.DEFAULT_STREAM, *, partitions=0, maxlen=0, max_age=0,
                 batch_size=0, flush_interval=0, buffer_size=0, write_timeout=0, owner=None, sink=None):
        self._write_timeout = write_timeout if write_timeout and write_timeout > 0 else DEFAULT_WRITE_TIMEOUT
        if sink is None:
            if redis_client is None:
                raise ValueError("lockscope: Emitter needs a Redis client or a sink")
            if not max_age or max_age <= 0:
                max_age = DEFAULT_MAX_AGE
            if maxlen and maxlen < 0:
                max_age = 0  # never trimmed
            sink = StreamSink(own_client(redis_client, self._write_timeout), stream, maxlen, partitions, max_age)
        self._sink = sink
        self._owner = default_owner() if owner is None else owner
        self._buffer_size = buffer_size if buffer_size and buffer_size > 0 else DEFAULT_BUFFER_SIZE
        batch_size = batch_size if batch_size and batch_size > 0 else DEFAULT_BATCH_SIZE
        self._batch_size = min(batch_size, self._buffer_size, ev.MAX_BATCH_EVENTS - 1)
        if not flush_interval or flush_interval <= 0 or flush_interval > MAX_FLUSH_INTERVAL:
            flush_interval = MAX_FLUSH_INTERVAL
        self._interval = flush_interval
        self._start()
        _emitters.add(self)

    def _start(self):
        # _cond's lock guards what record() touches; the thread holds it only
        # to take the buffer and to account for what it wrote.
        self._cond = threading.Condition(threading.Lock())
        self._buf = []
        self._inflight = 0
        self._closed = False
        self._stop = None  # monotonic deadline of close(), once called
        self._flushes = []
        self._recorded = self._sent = self._dropped = self._batches = self._errors = 0
        self._unreported = 0
        self._failing = False
        self._close_error = None
        self._thread = threading.Thread(target=self._run, name="lockscope-emitter", daemon=True)
        self._thread.start()

    def _after_fork(self):
        # A child process has no writer thread: start afresh, with nothing
        # of the parent's buffer (the parent writes it).
        self._start()

    def record(self, e):
        """Buffers event e for the next batch. It never blocks: if the buffer
        is full, the emitter is closed, or a string field is longer than
        event.MAX_STRING_LEN, the event is dropped and counted."""
        too_large = (len(e.key) > 16384 or len(e.owner) > 16384 or len(e.lease) > 16384 or len(e.reason) > 16384
                     or len(e.holder) > 16384 or len(e.by) > 16384) and e.too_large()
        with self._cond:
            self._recorded += 1
            if too_large or self._closed or len(self._buf) + self._inflight >= self._buffer_size:
                self._dropped += 1
                self._unreported += 1
                return
            self._buf.append(e)
            n = len(self._buf)
            # Wake the writer to start the interval clock, or because a batch
            # is full.
            if n == 1 or n == self._batch_size:
                self._cond.notify()

    def flush(self, timeout=None):
        """Writes every event recorded before the call and waits for the write,
        at most timeout seconds (None: no bound). Raises the write's error
        (those events are then dropped and counted) or TimeoutError. After
        close() it returns at once: close() flushed everything."""
        req = _FlushRequest()
        with self._cond:
            if self._stop is not None:
                return
            self._flushes.append(req)
            self._cond.notify()
        if not req.done.wait(timeout):
            raise TimeoutError("lockscope: flush did not finish within %ss" % timeout)
        if req.error is not None:
            raise req.error

    def close(self, timeout=5.0):
        """Flushes what is buffered and stops the thread, waiting at most
        timeout seconds; past it, the events not yet written are dropped.
        Events recorded after close() are dropped and counted. Idempotent;
        raises the final write's error, or TimeoutError."""
        self._shutdown(timeout)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("lockscope: emitter did not close within %ss" % timeout)
        if self._close_error is not None:
            raise self._close_error

    def _shutdown(self, timeout):
        """Tells the thread to write what is buffered and stop, within timeout
        seconds; does not wait."""
        with self._cond:
            if self._stop is None:
                self._closed = True
                self._stop = time.monotonic() + timeout
                self._cond.notify()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self.close()
        except Exception:
            if exc_type is None:
                raise

    def stats(self):
        """Returns the counters (EmitterStats)."""
        with self._cond:
            return EmitterStats(self._recorded, self._sent, self._dropped, self._batches, self._errors)

    @property
    def owner(self):
        return self._owner

    # --- the writer thread ----------------------------------------------------------------

    def _run(self):
        deadline = None  # when the oldest buffered event has waited the interval
        retry_at = 0.0  # after a failure, size-triggered writes wait until then
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._stop is not None or self._flushes:
                        break
                    n = len(self._buf)
                    if n >= self._batch_size and now >= retry_at:
                        break
                    if deadline is None and (n or self._unreported):
                        deadline = now + self._interval
                    if deadline is not None and now >= deadline:
                        break
                    wait = deadline - now if deadline is not None else None
                    if n >= self._batch_size:
                        wait = min(wait if wait is not None else math.inf, retry_at - now)
                    self._cond.wait(wait)
                stop = self._stop
                flushes, self._flushes = self._flushes, []
                batch, self._buf = self._buf, []
                self._inflight = len(batch)
                report = self._unreported
            err = self._flush(batch, report, stop)
            deadline = None
            if err is not None:
                retry_at = time.monotonic() + self._interval
            for f in flushes:
                f.error = err
                f.done.set()
            if stop is not None:
                self._close_error = err
                return

    def _flush(self, batch, report, stop):
        """Writes batch in chunks of at most batch_size, the first led by a
        dropped report when events were dropped since the last successful
        write. After a failed chunk, or past close()'s deadline, the rest is
        dropped without trying: the sink is failing, and memory stays
        bounded."""
        err = None
        i = 0
        while i < len(batch) or report > 0:
            size = self._batch_size - (1 if report > 0 else 0)
            chunk = batch[i:i + size]
            i += len(chunk)
            if err is None and stop is not None and time.monotonic() >= stop:
                err = TimeoutError("lockscope: close deadline passed before the write")
            if err is None:
                w = chunk
                if report > 0:
                    w = [ev.Event("dropped", owner=self._owner, ts=time.time_ns(), count=report)] + chunk
                err = self._write(w, len(chunk), report)
            with self._cond:
                if err is not None:
                    self._dropped += len(chunk)
                    self._unreported += len(chunk)
                self._inflight -= len(chunk)
            report = 0
        return err

    def _write(self, events, n, report):
        try:
            self._sink.write(events)
        except Exception as e:  # the batch is lost, counted, not retried
            with self._cond:
                self._errors += 1
            if not self._failing:
                self._failing = True
                log.warning("lockscope emitter: write of %d events failed; dropping events until it recovers: %s",
                            len(events), e)
            return e
        with self._cond:
            self._batches += 1
            self._sent += n
            self._unreported -= report
        if self._failing:
            self._failing = False
            log.info("lockscope emitter: writes recovered (%d events dropped in all)", self._dropped)
        return None


def _close_all():
    for e in list(_emitters):
        try:
            e.close(timeout=1.0)
        except Exception:
            pass


def _after_fork_in_child():
    for e in list(_emitters):
        e._after_fork()


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_defaults_lock = threading.Lock()
_defaults = {}  # id(client) -> (weakref to client, Emitter)
_default_override = None


def set_default_emitter(emitter):
    """Makes emitter the one every lockscope lock created without an emitter
    uses (for instance through redis_client.lock(name, lock_class=...)).
    None goes back to one emitter per Redis client, created on first use."""
    global _default_override
    _default_override = emitter


def default_emitter(client):
    """Returns the emitter of locks created without one: the one set by
    set_default_emitter, else one per Redis client, created on first use,
    writing to lockscope:events on that client's server."""
    if _default_override is not None:
        return _default_override
    key = id(client)
    with _defaults_lock:
        got = _defaults.get(key)
        if got is not None and got[0]() is client:
            return got[1]
        em = Emitter(client)

        def gone(_ref, key=key):
            got = _defaults.pop(key, None)
            if got is not None:
                got[1]._shutdown(1.0)  # writes what it holds, then its thread ends

        try:
            ref = weakref.ref(client, gone)
        except TypeError:
            ref = lambda: client  # noqa: E731 (not weakly referable: kept for the process)
        _defaults[key] = (ref, em)
        return em
