"""lockscope.asyncio.Lock against a real Redis."""

import asyncio
import time

import pytest
import redis.asyncio
from redis.exceptions import LockNotOwnedError

import lockscope
import lockscope.asyncio
from lockscope import value
from helpers import strip


@pytest.fixture
def em():
    sink = lockscope.MemorySink()
    e = lockscope.Emitter(sink=sink)
    e.sink = sink
    yield e
    e.close()


def events(em):
    em.flush(timeout=5)
    return list(em.sink.events)


def run(server, fn):
    async def main():
        a = redis.asyncio.Redis(port=server.port)
        try:
            return await fn(a)
        finally:
            await a.close()
    return asyncio.run(main())


def test_acquire_release(server, prefix, em):
    key = prefix + "job"

    async def body(a):
        lk = lockscope.asyncio.Lock(a, key, timeout=30, owner="py-async/1", emitter=em)
        async with lk:
            v = value.parse(await a.get(key))
            assert v.owner == "py-async/1"
            assert await lk.owned()
        assert await a.exists(key) == 0
        return v

    v = run(server, body)
    got = events(em)
    assert strip(got, "owner", "lease", "ttl", "attempts") == [
        ("acquired", "py-async/1", v.lease, 30_000, 1), ("released", "py-async/1", v.lease, 0, 0)]


def test_lock_class_and_default_emitter(server, prefix, em):
    key = prefix + "job"
    lockscope.set_default_emitter(em)
    try:
        async def body(a):
            lk = a.lock(key, timeout=5, lock_class=lockscope.asyncio.Lock)
            assert isinstance(lk, lockscope.asyncio.Lock)
            assert await lk.acquire(blocking=False)
            await lk.release()
        run(server, body)
    finally:
        lockscope.set_default_emitter(None)
    assert [e.type for e in events(em)] == ["acquired", "released"]


def test_tasks_wait_each_with_their_own_held_leases(server, prefix, em):
    x, y = prefix + "x", prefix + "y"

    async def body(a):
        hx = lockscope.asyncio.Lock(a, x, timeout=30, owner="holder-x", emitter=em, thread_local=False)
        # In a task of its own: tasks created below copy the main task's
        # context, and would hold x with it.
        assert await asyncio.create_task(hx.acquire())
        holds_y = asyncio.Event()

        async def task_b():
            ly = lockscope.asyncio.Lock(a, y, timeout=30, owner="task-b", emitter=em, thread_local=False)
            async with ly:
                holds_y.set()
                # waits on x, held by the main task, while holding y
                lx = lockscope.asyncio.Lock(a, x, owner="task-b", emitter=em, sleep=0.01, blocking_timeout=1)
                assert not await lx.acquire()

        async def task_c():
            await holds_y.wait()
            ly = lockscope.asyncio.Lock(a, y, owner="task-c", emitter=em, sleep=0.01, blocking_timeout=0.3)
            assert not await ly.acquire()

        await asyncio.gather(asyncio.create_task(task_b()), asyncio.create_task(task_c()))
        await hx.release()

    run(server, body)
    got = events(em)
    ly_lease = [e.lease for e in got if e.type == "acquired" and e.owner == "task-b"][0]
    waits = sorted((e.owner, e.key, e.holder, e.reason) for e in got if e.type == "waiting")
    assert waits == [("task-b", x, "holder-x", ly_lease), ("task-c", y, "task-b", "")]
    fails = sorted((e.owner, e.reason) for e in got if e.type == "failed")
    assert fails == [("task-b", "timeout"), ("task-c", "timeout")]


def test_cancelled_wait_is_failed_canceled(server, prefix, em):
    key = prefix + "job"

    async def body(a):
        holder = lockscope.asyncio.Lock(a, key, timeout=30, owner="h", emitter=em)
        assert await asyncio.create_task(holder.acquire())
        waiter = lockscope.asyncio.Lock(a, key, owner="w", emitter=em, sleep=0.01)
        t = asyncio.create_task(waiter.acquire())
        while not [e for e in events(em) if e.type == "waiting"]:
            await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        await holder.release()

    run(server, body)
    got = [e for e in events(em) if e.owner == "w"]
    assert strip(got, "holder", "reason") == [("waiting", "h", ""), ("failed", "h", "canceled")]
    assert got[0].lease == got[1].lease


def test_a_task_created_while_holding_holds_with_its_parent(server, prefix, em):
    # As a Go goroutine given the lease's context: a parent that awaits a
    # child waiting for the parent's own lock is a deadlock, and the
    # child's waiting event says so.
    key = prefix + "job"

    async def body(a):
        parent = lockscope.asyncio.Lock(a, key, timeout=30, owner="parent", emitter=em)
        assert await parent.acquire()
        child = lockscope.asyncio.Lock(a, key, owner="child", emitter=em, sleep=0.01, blocking_timeout=0.3)
        assert not await asyncio.create_task(child.acquire())
        await parent.release()

    run(server, body)
    got = events(em)
    assert [e.reason for e in got if e.type == "waiting"] == [got[0].lease]


def test_renewals_and_loss(server, prefix, em):
    key = prefix + "job"

    async def body(a):
        lk = lockscope.asyncio.Lock(a, key, timeout=10, owner="o", emitter=em)
        assert await lk.acquire()
        assert await lk.extend(5)
        assert await lk.reacquire()
        await a.set(key, "taken")
        with pytest.raises(LockNotOwnedError):
            await lk.extend(1)
        other = lockscope.asyncio.Lock(a, key, timeout=10, owner="o2", emitter=em)
        await a.delete(key)
        assert await other.acquire()
        await a.set(key, "taken again")
        with pytest.raises(LockNotOwnedError):
            await other.release()

    run(server, body)
    got = events(em)
    assert strip(got, "owner", "reason") == [
        ("acquired", "o", ""), ("renewed", "o", ""), ("renewed", "o", ""), ("lost", "o", "not_owner"),
        ("acquired", "o2", ""), ("released", "o2", "not_owner")]
    assert 14_000 < got[1].ttl <= 15_000 and got[2].ttl == 10_000
    assert 9e9 < got[1].headroom <= 10e9 and 14e9 < got[2].headroom <= 15e9
