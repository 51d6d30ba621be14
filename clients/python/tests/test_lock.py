"""lockscope.Lock against a real Redis: redis-py's behaviour, plus the events."""

import threading
import time

import pytest
import redis
from redis.exceptions import LockError, LockNotOwnedError

import lockscope
from lockscope import value
from helpers import read_stream, strip, wait_for


@pytest.fixture
def em():
    """An emitter keeping events in memory; flush() before reading them."""
    sink = lockscope.MemorySink()
    e = lockscope.Emitter(sink=sink)
    e.sink = sink
    yield e
    e.close()


def held_elsewhere(lk):
    """Acquires lk (thread_local=False) in another thread, so that the test's
    thread holds nothing it would list while it waits."""
    got = []
    t = threading.Thread(target=lambda: got.append(lk.acquire()))
    t.start()
    t.join()
    assert got == [True]
    return lk


def events(em):
    em.flush(timeout=30)
    return list(em.sink.events)


def test_acquire_release_events_and_value(r, prefix, em):
    key = prefix + "job"
    lk = lockscope.Lock(r, key, timeout=30, owner="billing/7", emitter=em)
    before = time.time_ns()
    assert lk.acquire() is True
    acquired = time.time_ns()
    v = value.parse(r.get(key))
    assert v is not None and v.owner == "billing/7" and v.fence == 0 and len(v.lease) == 16 and len(v.token) == 22
    assert before // 1_000_000 <= v.since_ms <= acquired // 1_000_000  # taken during acquire()
    # Redis counts down from the SET, sent after before: no more than the
    # time since is gone (and a millisecond of rounding), the time read
    # after PTTL's answer (read before, a loaded host's round trip broke it).
    left = r.pttl(key)
    assert 30_000 - (time.time_ns() - before) // 1_000_000 - 1 <= left <= 30_000
    assert lk.owned()
    releasing = time.time_ns()  # the hold lasts at least from acquired to here
    lk.release()
    assert r.exists(key) == 0
    got = events(em)
    assert strip(got, "key", "owner", "lease", "attempts", "ttl", "reason") == [
        ("acquired", key, "billing/7", v.lease, 1, 30_000, ""),
        ("released", key, "billing/7", v.lease, 0, 0, ""),
    ]
    assert got[0].ts // 1_000_000 == v.since_ms  # the event's time is the value's
    assert 0 <= got[0].wait <= acquired - before  # the acquire() call
    assert got[1].hold >= releasing - acquired and got[1].hold == got[1].ts - got[0].ts


def test_works_as_lock_class_and_context_manager(r, prefix, em):
    key = prefix + "job"
    lockscope.set_default_emitter(em)
    try:
        lk = r.lock(key, timeout=5, lock_class=lockscope.Lock)
        assert isinstance(lk, lockscope.Lock) and lk.emitter is em
        with lk:
            assert value.parse(r.get(key)).owner == lockscope.default_owner()
    finally:
        lockscope.set_default_emitter(None)
    assert r.exists(key) == 0
    assert [e.type for e in events(em)] == ["acquired", "released"]


def test_default_emitter_writes_to_the_lock_clients_server(server, prefix):
    c = redis.Redis(port=server.port)
    lk = lockscope.Lock(c, prefix + "job", timeout=5)
    assert lk.emitter is lockscope.default_emitter(c)
    with lk:
        pass
    lk.emitter.flush(timeout=5)
    _, got = read_stream(c, lockscope.DEFAULT_STREAM)
    assert [e.type for e in got if e.key == prefix + "job"] == ["acquired", "released"]


def test_wait_then_timeout(r, prefix, em):
    key = prefix + "job"
    held_elsewhere(lockscope.Lock(r, key, timeout=30, owner="editor/alice", emitter=em, thread_local=False))
    waiter = lockscope.Lock(r, key, timeout=30, owner="editor/bob", emitter=em, sleep=0.05, blocking_timeout=0.3)
    start = time.monotonic()
    assert waiter.acquire() is False
    assert time.monotonic() - start >= 0.25  # gives up when the next try would pass 0.3 s
    got = events(em)[1:]
    assert strip(got, "owner", "holder", "reason") == [
        ("waiting", "editor/bob", "editor/alice", ""),
        ("failed", "editor/bob", "editor/alice", "timeout"),
    ]
    w, f = got
    assert w.lease == f.lease and w.lease != events(em)[0].lease
    assert 0 < w.wait <= 0.3e9 and w.attempts == 1  # the most it will wait
    assert f.attempts >= 2 and f.wait >= 0.25e9


def test_wait_then_acquire(r, prefix, em):
    key = prefix + "job"
    holder = held_elsewhere(lockscope.Lock(r, key, timeout=30, owner="a", emitter=em, thread_local=False))

    def release_once_b_waits():  # b's first attempt found it held
        try:
            wait_for("b's waiting event", lambda: any(e.type == "waiting" and e.owner == "b" for e in events(em)), within=30)
        finally:
            holder.release()

    threading.Thread(target=release_once_b_waits).start()
    waiter = lockscope.Lock(r, key, timeout=30, owner="b", emitter=em, sleep=0.02)
    assert waiter.acquire() is True
    got = [e for e in events(em) if e.owner == "b"]
    assert strip(got, "holder", "wait") [0] == ("waiting", "a", 0)  # no deadline
    assert got[1].type == "acquired" and got[1].lease == got[0].lease
    assert got[1].attempts >= 2 and got[1].wait > 0
    assert value.parse(r.get(key)).lease == got[1].lease
    waiter.release()


def test_try_once_names_the_holder(r, prefix, em):
    key = prefix + "job"
    held_elsewhere(lockscope.Lock(r, key, timeout=30, owner="cron/replica-1", emitter=em, thread_local=False))
    other = lockscope.Lock(r, key, timeout=30, owner="cron/replica-2", emitter=em)
    assert other.acquire(blocking=False) is False
    got = events(em)[1:]
    assert strip(got, "owner", "holder", "reason", "attempts") == [("failed", "cron/replica-2", "cron/replica-1", "held", 1)]


def test_foreign_holder_is_named_as_go_names_it(r, prefix, em):
    key = prefix + "job"
    plain = redis.lock.Lock(r, key, timeout=30)  # redis-py's own lock: a uuid1 hex token
    assert plain.acquire()
    token = r.get(key)
    lk = lockscope.Lock(r, key, emitter=em)
    assert lk.acquire(blocking=False) is False
    holder = events(em)[0].holder
    assert holder == "redis-py " + value.fingerprint(token)[:8]


def test_extend_and_reacquire_are_renewals(r, prefix, em):
    key = prefix + "job"
    lk = lockscope.Lock(r, key, timeout=10, owner="o", emitter=em)
    lk.acquire()
    assert lk.extend(5) is True  # adds to what is left
    ttl_added = r.pttl(key)
    assert lk.extend(2, replace_ttl=True) is True
    assert 1000 < r.pttl(key) <= 2000
    assert lk.reacquire() is True
    assert 9000 < r.pttl(key) <= 10000
    lk.release()
    got = events(em)
    assert [e.type for e in got] == ["acquired", "renewed", "renewed", "renewed", "released"]
    assert len({e.lease for e in got}) == 1
    assert ttl_added <= got[1].ttl <= 15_000 and got[1].ttl > 14_000
    assert got[2].ttl == 2000 and got[3].ttl == 10_000
    # headroom: what was left when each landed
    assert 9e9 < got[1].headroom <= 10e9 and 14e9 < got[2].headroom <= 15e9 and 1e9 < got[3].headroom <= 2e9


def test_extend_finding_the_lock_gone_is_lost(r, prefix, em):
    key = prefix + "job"
    lk = lockscope.Lock(r, key, timeout=10, owner="o", emitter=em)
    lk.acquire()
    r.set(key, "someone else")
    with pytest.raises(LockNotOwnedError):
        lk.extend(5)
    with pytest.raises(LockNotOwnedError):
        lk.reacquire()  # no second event: the hold is over
    got = events(em)
    assert strip(got, "reason") == [("acquired", ""), ("lost", "not_owner")]
    assert got[1].hold > 0 and got[1].lease == got[0].lease


def test_release_finding_another_holder(r, prefix, em):
    key = prefix + "job"
    lk = lockscope.Lock(r, key, timeout=10, owner="o", emitter=em)
    lk.acquire()
    r.set(key, "taken over")
    with pytest.raises(LockNotOwnedError):
        lk.release()
    assert r.get(key) == b"taken over"
    with pytest.raises(LockError, match="unlocked"):
        lk.release()  # redis-py's error, no event
    assert strip(events(em), "reason") == [("acquired", ""), ("released", "not_owner")]


def test_redis_error_while_obtaining(em, prefix):
    dead = redis.Redis(port=1, socket_connect_timeout=0.5)
    lk = lockscope.Lock(dead, prefix + "job", owner="o", emitter=em)
    with pytest.raises(redis.ConnectionError):
        lk.acquire()
    assert strip(events(em), "reason", "attempts") == [("failed", "error", 1)]


def test_waiting_lists_the_leases_this_thread_holds(r, prefix, em):
    outer = lockscope.Lock(r, prefix + "ledger", timeout=30, owner="svc", emitter=em)
    held_elsewhere(lockscope.Lock(r, prefix + "account", timeout=30, owner="other", emitter=em, thread_local=False))
    with outer:
        inner = lockscope.Lock(r, prefix + "account", timeout=30, owner="svc", emitter=em, sleep=0.01,
                               blocking_timeout=0.3)
        assert not inner.acquire()
        # Another thread holds nothing.
        t = threading.Thread(target=lambda: lockscope.Lock(r, prefix + "account", owner="t", emitter=em,
                                                           sleep=0.01, blocking_timeout=0.3).acquire())
        t.start()
        t.join()
    after = lockscope.Lock(r, prefix + "account", owner="svc", emitter=em, sleep=0.01, blocking_timeout=0.3)
    assert not after.acquire()  # outer released: listed no more
    got = events(em)
    lease = [e for e in got if e.type == "acquired" and e.key == prefix + "ledger"][0].lease
    waits = [(e.owner, e.reason) for e in got if e.type == "waiting"]
    assert waits == [("svc", lease), ("t", ""), ("svc", "")]


def test_custom_token_is_stored_as_given(r, prefix, em):
    key = prefix + "job"
    lk = lockscope.Lock(r, key, owner="o", emitter=em)
    assert lk.acquire(token="my-token")
    assert r.get(key) == b"my-token"
    lk.release()
    got = events(em)
    assert [e.type for e in got] == ["acquired", "released"] and got[0].lease == got[1].lease != ""


def test_thread_local_tokens_as_redis_py(r, prefix, em):
    key = prefix + "job"
    lk = lockscope.Lock(r, key, timeout=10, emitter=em)
    lk.acquire()
    errors = []

    def other():
        try:
            lk.release()
        except Exception as e:  # redis-py 4.3 raises AttributeError here, later ones LockError
            errors.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(errors) == 1 and r.exists(key) == 1  # another thread cannot release it
    lk.release()
    shared = lockscope.Lock(r, key, timeout=10, emitter=em, thread_local=False)
    shared.acquire()
    t = threading.Thread(target=shared.release)
    t.start()
    t.join()
    assert r.exists(key) == 0
    assert [e.type for e in events(em)] == ["acquired", "released", "acquired", "released"]


def test_no_timeout_lock(r, prefix, em):
    key = prefix + "job"
    lk = lockscope.Lock(r, key, emitter=em)
    lk.acquire()
    assert r.pttl(key) == -1
    with pytest.raises(LockError, match="no timeout"):
        lk.extend(1)
    lk.release()
    assert [(e.type, e.ttl) for e in events(em)] == [("acquired", 0), ("released", 0)]


def test_go_and_python_agree_on_values():
    v, lease = value.make(b"A" * 22, "0123456789abcdef", 1700000000123, "py/é/1"), "0123456789abcdef"
    assert v == "ls1|AAAAAAAAAAAAAAAAAAAAAA|0123456789abcdef|0|1700000000123|py/é/1".encode()
    p = value.parse(v)
    assert (p.token, p.lease, p.fence, p.since_ms, p.owner) == ("A" * 22, lease, 0, 1700000000123, "py/é/1")
    assert value.parse(b"ls1|t|l|x|1|o") is None and value.parse(b"uuid") is None
    assert value.holder_name(v) == "py/é/1"
    assert value.holder_name(b"Zm9vYmFyYmF6cXV4MTIzNA==").startswith("redsync ")
    assert value.holder_name(b"aB3dEf7hIjKlMnOpQrStUw-meta").startswith("redislock ")
    assert value.holder_name(b"locked") == "foreign " + value.fingerprint(b"locked")[:8]


def test_decoding_client(server, prefix, em):
    r = redis.Redis(port=server.port, decode_responses=True)
    key = prefix + "job"
    lk = lockscope.Lock(r, key, timeout=10, owner="dé", emitter=em)
    assert lk.acquire() and lk.owned()
    assert lockscope.Lock(r, key, emitter=em).holder() == "dé"
    assert lk.extend(1) and lk.reacquire()
    lk.release()
    assert [(e.type, e.owner) for e in events(em)] == [("acquired", "dé"), ("renewed", "dé"), ("renewed", "dé"),
                                                       ("released", "dé")]
