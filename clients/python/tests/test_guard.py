"""The fence guard against a real Redis and a real SQL database (sqlite3):
the resource takes a write only with a fence at least the highest it has
accepted, keeps the current holder's data, and records each refusal as a
fence_rejected event naming the lock key and the stale fence."""

import sqlite3

import pytest

import lockscope
from lockscope import event as ev


def test_set_refuses_a_stale_fence(r, prefix):
    sink = lockscope.MemorySink()
    em = lockscope.Emitter(sink=sink)
    guard = lockscope.FenceGuard(r, emitter=em)
    lock_key, res = prefix + "lock:order:42", prefix + "order:42"
    guard.set(lock_key, 100, res, "first")
    guard.set(lock_key, 200, res, "second")  # the successor's fence is higher
    with pytest.raises(lockscope.StaleFence) as err:
        guard.set(lock_key, 100, res, "stale")  # the first holder woke up
    assert (err.value.fence, err.value.highest) == (100, 200)
    assert r.get(res) == b"second"
    guard.set(lock_key, 200, res, "second again")  # the current holder writes on
    assert r.get(res) == b"second again"
    assert r.get(lockscope.guard_key(res)) == b"200"
    em.close()
    assert [(e.type, e.key, e.fence, e.reason) for e in sink.events] == [("fence_rejected", lock_key, 100, res)]


def test_updated_reports_the_sql_outcome():
    sink = lockscope.MemorySink()
    em = lockscope.Emitter(sink=sink)
    guard = lockscope.FenceGuard(None, emitter=em)
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER, fence INTEGER NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO orders (id, total) VALUES (42, 0)")
    update = "UPDATE orders SET total = ?, fence = ? WHERE id = ? AND fence <= ?"

    cur = db.execute(update, (500, 7, 42, 7))
    guard.updated("lock:order:42", 7, "orders/42", cur)  # accepted: no exception
    cur = db.execute(update, (999, 5, 42, 5))
    with pytest.raises(lockscope.StaleFence):
        guard.updated("lock:order:42", 5, "orders/42", cur)
    assert db.execute("SELECT total, fence FROM orders WHERE id = 42").fetchone() == (500, 7)
    em.close()
    assert [(e.type, e.key, e.fence, e.reason) for e in sink.events] == [("fence_rejected", "lock:order:42", 5, "orders/42")]


def test_fence_rejected_on_the_wire():
    e = ev.Event("fence_rejected", key="lock:order:42", fence=17, reason="orders/42", ts=1)
    for entry in (ev.fields(e), ev.packed_fields(1, ev.pack([e]))):
        got = ev.decode(entry)
        assert [(x.type, x.key, x.fence, x.reason) for x in got] == [("fence_rejected", "lock:order:42", 17, "orders/42")]


def test_guard_key_keeps_the_slot():
    assert lockscope.guard_key("order:42") == "lockscope:guard:{order:42}"
    assert lockscope.guard_key("job:{7}:run") == "lockscope:guard:t:job:{7}:run"
