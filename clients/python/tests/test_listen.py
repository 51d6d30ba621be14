"""Hearing release requests (lockscope.Lock.listen) against a real Redis."""

import asyncio
import threading
import time

import pytest
import redis
import redis.asyncio
from redis.exceptions import LockError

import lockscope
import lockscope.asyncio
from lockscope import listen, value
from helpers import wait_for


@pytest.fixture
def em():
    e = lockscope.Emitter(sink=lockscope.MemorySink())
    yield e
    e.close()


def lease_of(r, key):
    return value.parse(r.get(key)).lease


def listeners(r, lease):
    return dict(r.pubsub_numsub(listen.channel(lease))).get(listen.channel(lease).encode(), 0)


def ask(r, lease, by="bob", reason="I need to edit it", grace_ms=30000):
    """What an operator's RequestRelease publishes (docs/events.md)."""
    return r.publish(listen.channel(lease), listen.encode_request(lease, by, reason, time.time_ns(), grace_ms))


def test_wire_matches_go():
    # event/request_test.go TestRequestWire pins the same bytes.
    assert listen.encode_request("ab", "bob", "r", 5, 1500) == b'{"v":1,"lease":"ab","by":"bob","reason":"r","ts":5,"grace_ms":1500}'
    assert listen.decode_request(b'{"v":1,"lease":"ab","by":"bob","reason":"r","ts":5,"grace_ms":1500}', "ab") == \
        lockscope.ReleaseRequest("bob", "r", 5e-9, 1.5)
    for bad in (b"", b"null", b"[]", b'{"v":2,"lease":"ab"}', b'{"v":1,"lease":"cd"}', b'{"v":1,"lease":"ab","grace_ms":-1}',
                b'{"v":1,"lease":"ab","by":"' + b"x" * listen.MAX_REQUEST_BYTES + b'"}'):
        assert listen.decode_request(bad, "ab") is None, bad


def test_sync_holder_hears_within_the_ttl_and_releases(r, prefix, em):
    key = prefix + "workflow:42"
    lk = lockscope.Lock(r, key, timeout=30, owner="editor/alice", emitter=em)
    assert lk.acquire()
    lease = lease_of(r, key)
    assert listeners(r, lease) == 0  # not listening: cannot be asked
    heard = []
    lk.listen(heard.append)
    wait_for("the hold's subscription", lambda: listeners(r, lease) == 1)
    sent = time.monotonic()
    assert ask(r, lease) == 1
    req = lk.wait_release_request(timeout=30)
    took = time.monotonic() - sent
    assert req is not None and took < 30, (req, took)
    assert (req.operator, req.reason, req.grace) == ("bob", "I need to edit it", 30.0)
    assert abs(req.at - time.time()) < 60
    wait_for("the callback", lambda: heard == [req])
    lk.release()
    wait_for("the hold to stop listening", lambda: listeners(r, lease) == 0)
    assert listen.default_listener(r).listening() == 0


def test_listen_needs_a_held_lock(r, prefix, em):
    lk = lockscope.Lock(r, prefix + "k", timeout=30, emitter=em)
    with pytest.raises(LockError):
        lk.listen()
    with pytest.raises(LockError):
        lk.wait_release_request(timeout=0)


def test_only_requests_for_the_hold_arrive(r, prefix, em):
    key = prefix + "k"
    lk = lockscope.Lock(r, key, timeout=30, emitter=em)
    assert lk.acquire()
    lease = lease_of(r, key)
    lk.listen()
    wait_for("the hold's subscription", lambda: listeners(r, lease) == 1)
    ch = listen.channel(lease)
    for bad in (b"garbage", b'{"v":9,"lease":"' + lease.encode() + b'"}', listen.encode_request("0123456789abcdef", "other", "", 1),
                b'{"v":1,"lease":"' + lease.encode() + b'","by":"' + b"x" * listen.MAX_REQUEST_BYTES + b'"}'):
        r.publish(ch, bad)
    assert lk.wait_release_request(timeout=0) is None
    ask(r, lease, by="first")
    # Messages on one connection arrive in order: had a bad one been taken
    # for a request, it would be the first.
    req = lk.wait_release_request(timeout=30)
    assert req is not None and req.operator == "first"
    lk.release()


def test_a_waiter_wakes_when_the_hold_ends(r, prefix, em):
    key = prefix + "k"
    lk = lockscope.Lock(r, key, timeout=30, thread_local=False, emitter=em)
    assert lk.acquire()
    lk.listen()
    got = []
    t = threading.Thread(target=lambda: got.append(lk.wait_release_request()))
    t.start()
    lk.release()
    t.join(30)
    assert not t.is_alive() and got == [None]


def test_one_connection_per_client(private_server, em):
    r = redis.Redis(port=private_server.port)
    locks = [lockscope.Lock(r, "k:%d" % i, timeout=30, emitter=em) for i in range(4)]
    for lk in locks:
        assert lk.acquire()

    def pubsub_clients():
        return sum(1 for c in r.client_list() if "P" in c.get("flags", ""))

    assert pubsub_clients() == 0  # nobody listens: no connection
    li = listen.default_listener(r)
    assert li.linger == 30
    li.linger = 0.2  # closes soon after the last hold, for the test
    for lk in locks:
        lk.listen()
    for lk in locks:
        lease = lease_of(r, lk.name)
        wait_for("every hold's subscription", lambda: listeners(r, lease) == 1)
    assert pubsub_clients() == 1
    for lk in locks:
        lk.release()
    wait_for("the listener's connection to close", lambda: pubsub_clients() == 0)
    r.close()


def test_asyncio_holder_hears_and_releases(server, prefix, em):
    key = prefix + "doc"
    sync = redis.Redis(port=server.port)

    async def main():
        a = redis.asyncio.Redis(port=server.port)
        try:
            lk = lockscope.asyncio.Lock(a, key, timeout=30, owner="py-async/editor", emitter=em)
            assert await lk.acquire()
            lease = value.parse(await a.get(key)).lease
            in_loop = []

            async def on_request(req):
                in_loop.append((req.operator, threading.current_thread() is threading.main_thread()))

            lk.listen(on_request)
            while listeners(sync, lease) != 1:
                await asyncio.sleep(0.005)
            sent = time.monotonic()
            assert ask(sync, lease, by="carol", grace_ms=0) == 1
            req = await lk.wait_release_request(timeout=30)
            took = time.monotonic() - sent
            await lk.release()
            for _ in range(1000):
                if in_loop:
                    break
                await asyncio.sleep(0.005)
            return req, took, in_loop, lease
        finally:
            await a.close()

    req, took, in_loop, lease = asyncio.run(main())
    assert req is not None and took < 30 and (req.operator, req.grace) == ("carol", 0)
    assert in_loop == [("carol", True)]  # the callback ran on the loop's thread, as a task
    wait_for("the hold to stop listening", lambda: listeners(sync, lease) == 0)
    sync.close()
