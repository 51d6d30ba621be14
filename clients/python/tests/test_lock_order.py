"""Acquired events list the leases the caller already holds (the
collector's lock-order graph), through nested with blocks, threads and
asyncio tasks, as waiting events do."""

import asyncio
import threading

import pytest
import redis.asyncio

import lockscope
import lockscope.asyncio


@pytest.fixture
def em():
    sink = lockscope.MemorySink()
    e = lockscope.Emitter(sink=sink)
    e.sink = sink
    yield e
    e.close()


def acquired(em):
    """Returns {key: the acquired event} of what em recorded."""
    em.flush(timeout=5)
    return {e.key: e for e in em.sink.events if e.type == "acquired"}


def test_nested_with_blocks_list_the_outer_leases(r, prefix, em):
    order, inventory, ledger, after = (prefix + k for k in ("order:1", "inventory:1", "ledger:1", "after:1"))
    with lockscope.Lock(r, order, timeout=30, owner="svc", emitter=em):
        with lockscope.Lock(r, inventory, timeout=30, owner="svc", emitter=em):
            with lockscope.Lock(r, ledger, timeout=30, owner="svc", emitter=em):
                pass
        # Another thread holds nothing of this one's.
        t = threading.Thread(target=lambda: lockscope.Lock(r, prefix + "thread:1", timeout=30, owner="t",
                                                           emitter=em).acquire())
        t.start()
        t.join()
    with lockscope.Lock(r, after, timeout=30, owner="svc", emitter=em):
        pass
    got = acquired(em)
    o, i = got[order].lease, got[inventory].lease
    assert got[order].reason == "" and got[order].held_leases() == []
    assert got[inventory].held_leases() == [o]
    assert got[ledger].held_leases() == [i, o]  # innermost first
    assert got[prefix + "thread:1"].reason == ""
    assert got[after].reason == ""  # the outer locks were released


def test_asyncio_tasks_list_what_their_context_holds(server, prefix, em):
    x, y, z = prefix + "order:1", prefix + "inventory:1", prefix + "ledger:1"

    async def body(a):
        lx = lockscope.asyncio.Lock(a, x, timeout=30, owner="main", emitter=em, thread_local=False)
        async with lx:
            # A task created while holding x holds x with its parent (it
            # copies the context): its acquisition lists x.
            async def child():
                async with lockscope.asyncio.Lock(a, y, timeout=30, owner="child", emitter=em):
                    pass
            await asyncio.create_task(child())

        # Two tasks side by side: each lists only its own hold.
        ready = asyncio.Event()

        async def holder():
            async with lockscope.asyncio.Lock(a, prefix + "invoice:1", timeout=30, owner="b", emitter=em):
                ready.set()
                async with lockscope.asyncio.Lock(a, z, timeout=30, owner="b", emitter=em):
                    pass

        async def bystander():
            await ready.wait()
            async with lockscope.asyncio.Lock(a, prefix + "stock:1", timeout=30, owner="c", emitter=em):
                pass

        await asyncio.gather(asyncio.create_task(holder()), asyncio.create_task(bystander()))

    async def main():
        a = redis.asyncio.Redis(port=server.port)
        try:
            await body(a)
        finally:
            await a.close()
    asyncio.run(main())
    got = acquired(em)
    assert got[y].held_leases() == [got[x].lease]
    assert got[x].reason == ""
    assert got[z].held_leases() == [got[prefix + "invoice:1"].lease]
    assert got[prefix + "stock:1"].reason == ""
