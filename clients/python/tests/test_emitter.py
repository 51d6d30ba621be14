"""The emitter against a real Redis: the Go emitter's semantics (batching,
dropping, reporting drops, Close bounds), from Python."""

import threading
import time

import pytest
import redis

import lockscope
from lockscope import event as ev
from helpers import read_stream, wait_for


def every_type(base):
    return [
        ev.Event("acquired", key="workflow:123", owner="api/host-1/42", lease="L1", ts=base, wait=1_500_000,
                 ttl=30_000, attempts=3, fence=17),
        ev.Event("failed", key="<script>alert(1)</script>\n\"'%/?", owner="w", ts=base + 100, wait=10**9,
                 attempts=9, reason="timeout", holder="other"),
        ev.Event("released", key=b"\xff\xfek\x00", owner="o", lease="L1", ts=base - 1_000_000, hold=120 * 10**9),
        ev.Event("renewed", key="r", owner="o", lease="L2", ts=base + 5, ttl=10_000, fence=1 << 40),
        ev.Event("renew_failed", key="r", owner="o", lease="L2", ts=base + 6, reason="error"),
        ev.Event("lost", key="r", owner="o", lease="L2", ts=base + 7, hold=3600 * 10**9, reason="not_owner"),
        ev.Event("expired", key="e", owner="py/1", ts=base + 8, hold=3 * 10**9, passive=True),
        ev.Event("forced", key="k" * 10_000, owner="old", lease="L3", by="alice", reason="stuck since lunch",
                 ts=base + 9, hold=3600 * 10**9),
        ev.Event("waiting", key="w", owner="o", lease="L4", ts=base + 10, wait=5 * 10**9, attempts=1,
                 holder="api/host-1/42", reason="L1,L2"),
        ev.Event("acquired", key="d", owner="o", ts=base + 11, degraded=True),
    ]


def test_writes_every_field_in_packed_entries(r, prefix):
    stream = prefix + "events"
    e = lockscope.Emitter(r, stream)
    want = every_type(time.time_ns())
    for x in want:
        e.record(x)
    e.close()
    entries, got = read_stream(r, stream)
    assert got == want
    assert len(entries) == 1
    assert set(entries[0][1]) == {b"v", b"n", b"batch"} and entries[0][1][b"v"] == b"1"
    assert e.stats() == lockscope.EmitterStats(recorded=10, sent=10, dropped=0, batches=1, errors=0)


def test_one_xadd_per_batch(r, prefix):
    stream = prefix + "events"
    e = lockscope.Emitter(r, stream, batch_size=100)
    ts = time.time_ns()
    want = [ev.Event("acquired", key="k%d" % i, owner="o", ts=ts + i, attempts=1) for i in range(2000)]
    for x in want:
        e.record(x)
    e.close()
    entries, got = read_stream(r, stream)
    assert got == want
    assert all(int(f[b"n"]) <= 100 for _, f in entries)
    # Full batches go as soon as they fill; the writer may take more than
    # one batch's worth at once, but never writes more than 100 per entry.
    assert 20 <= len(entries) <= 40
    assert e.stats().batches == len(entries)


def test_flushes_by_interval(r, prefix):
    stream = prefix + "events"
    e = lockscope.Emitter(r, stream, flush_interval=0.02)
    e.record(ev.Event("acquired", key="k", ts=time.time_ns()))
    wait_for("the interval flush", lambda: r.xlen(stream) == 1 and e.stats().sent == 1, within=5)
    e.close()


def test_flush_waits_for_the_write(r, prefix):
    stream = prefix + "events"
    with lockscope.Emitter(r, stream) as e:
        e.record(ev.Event("acquired", key="k", ts=time.time_ns()))
        e.flush(timeout=5)
        assert r.xlen(stream) == 1  # written before flush returned
    e.flush()  # after close: returns at once


def test_redis_down_drops_counts_and_reports(private_server):
    r = redis.Redis(port=private_server.port)
    stream = "lockscope:events"
    e = lockscope.Emitter(r, owner="emitter-test", flush_interval=0.02, buffer_size=1000, batch_size=100)
    ts = time.time_ns()
    for i in range(10):
        e.record(ev.Event("acquired", key="before", ts=ts + i))
    e.flush(timeout=5)

    private_server.stop()
    n = 100_000
    start = time.monotonic()
    for i in range(n):
        e.record(ev.Event("released", key="during", ts=ts + i, hold=10**6))
    assert time.monotonic() - start < 30, "record blocks while Redis is down"
    wait_for("every event recorded while Redis is down to be counted dropped", lambda: e.stats().dropped == n)
    st = e.stats()
    assert st.recorded == n + 10 and st.sent == 10 and st.errors > 0

    private_server.start_again()
    wait_for("a dropped report after Redis is back", lambda: r.xlen(stream) > 0)
    _, got = read_stream(r, stream)
    assert [(x.type, x.owner, x.count) for x in got] == [("dropped", "emitter-test", n)]
    assert got[0].ts >= ts

    e.record(ev.Event("acquired", key="after", ts=ts))
    e.close()
    _, got = read_stream(r, stream)
    assert [x.key for x in got] == ["", "after"]  # reported once
    st = e.stats()
    assert st.recorded == st.sent + st.dropped and st.sent == 11


class BlockingSink(lockscope.MemorySink):
    """Holds every write until released: a slow Redis, so the buffer fills."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def write(self, events):
        self.entered.release()
        self.release.wait()
        super().write(events)


def test_drops_when_buffer_full():
    sink = BlockingSink()
    e = lockscope.Emitter(sink=sink, buffer_size=100, batch_size=10, owner="me")
    for i in range(10):
        e.record(ev.Event("acquired", key="a%d" % i, ts=i + 1))
    assert sink.entered.acquire(timeout=5), "the first batch was not written"
    # The writer holds 10 events; 90 more fit; the rest are dropped.
    for i in range(200):
        e.record(ev.Event("acquired", key="b%d" % i, ts=i + 1))
    st = e.stats()
    assert st.recorded == 210 and st.dropped == 110
    sink.release.set()
    e.close()
    keys = [x.key for x in sink.events]
    assert keys[:10] == ["a%d" % i for i in range(10)]
    assert sink.events[10].type == "dropped" and sink.events[10].count == 110 and sink.events[10].owner == "me"
    assert keys[11:] == ["b%d" % i for i in range(90)]
    st = e.stats()
    assert st.sent == 100 and st.recorded == st.sent + st.dropped


class FailingSink:
    def __init__(self):
        self.calls = 0

    def write(self, events):
        self.calls += 1
        raise redis.ConnectionError("down")


def test_flush_raises_the_write_error_and_counts_the_drop():
    e = lockscope.Emitter(sink=FailingSink())
    e.record(ev.Event("acquired", key="k", ts=1))
    with pytest.raises(redis.ConnectionError):
        e.flush(timeout=5)
    st = e.stats()
    assert st.dropped == 1 and st.errors >= 1 and st.sent == 0
    with pytest.raises(redis.ConnectionError):
        e.close()


def test_drops_oversized_events():
    sink = lockscope.MemorySink()
    e = lockscope.Emitter(sink=sink)
    e.record(ev.Event("acquired", key="x" * (ev.MAX_STRING_LEN + 1), ts=1))
    e.record(ev.Event("acquired", key="é" * (ev.MAX_STRING_LEN // 2 + 1), ts=1))  # 2 bytes a character
    e.record(ev.Event("acquired", key="ok", ts=1))
    e.close()
    assert [x.key for x in sink.events] == ["", "ok"]
    assert sink.events[0].type == "dropped" and sink.events[0].count == 2


def test_close_is_bounded():
    sink = BlockingSink()  # never released: Redis hangs
    e = lockscope.Emitter(sink=sink)
    e.record(ev.Event("acquired", key="k", ts=1))
    assert sink.entered.acquire(timeout=5)
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        e.close(timeout=0.2)
    assert time.monotonic() - start < 5
    e.record(ev.Event("acquired", key="after", ts=1))
    assert e.stats().dropped == 1  # recorded after close
    sink.release.set()


def test_concurrent_record():
    sink = lockscope.MemorySink()
    e = lockscope.Emitter(sink=sink, buffer_size=1_000_000)

    def work(t):
        for i in range(5000):
            e.record(ev.Event("acquired", key="t%d" % t, ts=i + 1))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    e.close()
    assert len(sink.events) == 40_000
    for t in range(8):
        ts = [x.ts for x in sink.events if x.key == "t%d" % t]
        assert ts == list(range(1, 5001))  # one thread's events stay in order
    assert e.stats() == lockscope.EmitterStats(40_000, 40_000, 0, sink.writes, 0)


def test_partitions(r, prefix):
    base = prefix + "events"
    e = lockscope.Emitter(r, base, partitions=4)
    keys = ["workflow:%d" % i for i in range(40)]
    for i, k in enumerate(keys):
        e.record(ev.Event("acquired", key=k, ts=i + 1))
    e.close()
    seen = []
    for p, stream in enumerate(ev.streams(base, 4)):
        _, got = read_stream(r, stream)
        assert all(ev.partition_of(x.key, 4) == p for x in got)
        seen += [x.key for x in got]
    assert sorted(seen) == sorted(keys)
    assert r.exists(base) == 0


def test_maxlen_trims(r, prefix):
    stream = prefix + "events"
    e = lockscope.Emitter(r, stream, maxlen=10, batch_size=1)
    for i in range(500):
        e.record(ev.Event("acquired", key="k", ts=i + 1))
        if i % 50 == 0:
            e.flush(timeout=5)
    e.close()
    assert r.xlen(stream) < 200  # MAXLEN ~ trims whole nodes (100 entries each)


def fill_old_and_recent(r, stream, now_ms):
    """300 entries two hours old and 300 one minute old, by the IDs' times
    (the stream's own clock), as other clients would have written them."""
    for i in range(300):
        r.xadd(stream, {"other": "old"}, id=f"{now_ms - 2 * 3600_000}-{i}")
    for i in range(300):
        r.xadd(stream, {"other": "recent"}, id=f"{now_ms - 60_000}-{i}")


def test_default_keeps_fifteen_minutes_by_redis_clock(r, prefix):
    stream = prefix + "events"
    sec, usec = r.time()
    now_ms = sec * 1000 + usec // 1000
    fill_old_and_recent(r, stream, now_ms)
    e = lockscope.Emitter(r, stream, batch_size=1)
    for i in range(3):
        e.record(ev.Event("acquired", key="k", ts=i + 1))
        e.flush(timeout=5)
    e.close()
    kinds = [f.get(b"other") for _, f in r.xrange(stream)]
    # MINID ~ trims whole nodes (up to 100 entries): at most one node of old
    # entries may stay, every recent one stays.
    assert kinds.count(b"old") < 100
    assert kinds.count(b"recent") == 300
    assert kinds.count(None) == 3


def test_partitions_trim_by_age_each_on_its_own(r, prefix):
    base = prefix + "events"
    streams = ev.streams(base, 2)
    sec, usec = r.time()
    for s in streams:
        fill_old_and_recent(r, s, sec * 1000 + usec // 1000)
    keys = {}
    i = 0
    while len(keys) < 2:
        keys.setdefault(ev.partition_of("k%d" % i, 2), "k%d" % i)
        i += 1
    e = lockscope.Emitter(r, base, partitions=2)
    for i in range(3):  # one pipelined write to both partitions each time
        for k in keys.values():
            e.record(ev.Event("acquired", key=k, ts=i + 1))
        e.flush(timeout=5)
    e.close()
    for s in streams:
        kinds = [f.get(b"other") for _, f in r.xrange(s)]
        assert kinds.count(b"old") < 100, s
        assert kinds.count(b"recent") == 300, s
        assert kinds.count(None) == 3, s


@pytest.mark.parametrize("ahead", ["20 minutes", "9999999999999-0"])
def test_retention_distrusts_future_ids(r, prefix, ahead):
    """A writer XADDs an entry with an ID in the future among 300 entries two
    hours old and 300 a minute old: the emitter trims the old ones by Redis's
    clock and keeps the recent ones and the future one (before, it trimmed
    with MINID newest - 15 min and cut them all)."""
    stream = prefix + "events"
    sec, usec = r.time()
    now_ms = sec * 1000 + usec // 1000
    fill_old_and_recent(r, stream, now_ms)
    future = "%d-0" % (now_ms + 20 * 60_000) if ahead == "20 minutes" else ahead
    r.xadd(stream, {"other": "future"}, id=future)
    e = lockscope.Emitter(r, stream, batch_size=1)
    for i in range(3):
        e.record(ev.Event("acquired", key="k", ts=i + 1))
        e.flush(timeout=5)
    e.close()
    kinds = [f.get(b"other") for _, f in r.xrange(stream)]
    assert kinds.count(b"old") < 100
    assert kinds.count(b"recent") == 300
    assert kinds.count(b"future") == 1
    assert kinds.count(None) == 3


def test_retention_bounded_after_future_id(r, prefix):
    """After 9999999999999-0 no age reaches the entries Redis numbers after
    it: once there are RETENTION_AHEAD_KEEP of them the emitter keeps the
    newest RETENTION_AHEAD_KEEP (before, the stream grew without bound)."""
    from lockscope.emitter import RETENTION_AHEAD_KEEP
    stream = prefix + "events"
    r.xadd(stream, {"other": "future"}, id="9999999999999-0")
    after = RETENTION_AHEAD_KEEP + 1000
    for i in range(0, after, 5000):
        pipe = r.pipeline(transaction=False)
        for _ in range(min(5000, after - i)):
            pipe.xadd(stream, {"other": "after"})
        pipe.execute()
    e = lockscope.Emitter(r, stream, batch_size=1)
    for i in range(2):  # the first learns the stream's newest ID, the second trims by it
        e.record(ev.Event("acquired", key="k", ts=i + 1))
        e.flush(timeout=5)
    e.close()
    n = r.xlen(stream)
    r.delete(stream)
    assert RETENTION_AHEAD_KEEP <= n <= RETENTION_AHEAD_KEEP + 200  # MINID ~: whole nodes


def test_negative_maxlen_never_trims(r, prefix):
    stream = prefix + "events"
    sec, usec = r.time()
    fill_old_and_recent(r, stream, sec * 1000 + usec // 1000)
    e = lockscope.Emitter(r, stream, maxlen=-1, batch_size=1)
    for i in range(3):
        e.record(ev.Event("acquired", key="k", ts=i + 1))
        e.flush(timeout=5)
    e.close()
    assert r.xlen(stream) == 603


def test_async_client_gets_a_sync_connection(server, prefix):
    import redis.asyncio
    a = redis.asyncio.Redis(port=server.port)
    stream = prefix + "events"
    e = lockscope.Emitter(a, stream)
    e.record(ev.Event("acquired", key="k", ts=1))
    e.close()
    assert redis.Redis(port=server.port).xlen(stream) == 1


def test_fork_child_writes_its_own_events(r, prefix):
    import os
    stream = prefix + "events"
    e = lockscope.Emitter(r, stream)
    e.record(ev.Event("acquired", key="parent", ts=1))
    pid = os.fork()
    if pid == 0:  # the child: a fresh writer thread
        try:
            e.record(ev.Event("acquired", key="child", ts=2))
            e.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    e.close()
    _, got = read_stream(r, stream)
    assert sorted(x.key for x in got) == ["child", "parent"]
