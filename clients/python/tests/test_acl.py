"""The application ACL of docs/acl.md, applied verbatim, is enough for a
Python application once it allows SCRIPT LOAD (redis-py loads a script the
server does not know with it), and that addition is needed."""

import os
import re
import threading

import pytest
import redis

import lockscope
from helpers import read_stream

ACL_DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "acl.md")


def app_line():
    with open(ACL_DOC, encoding="utf-8") as f:
        m = re.search(r"^ACL SETUSER app .*$", f.read(), re.M)
    assert m, "docs/acl.md has no application line"
    return m.group(0)


def as_app(server, extra):
    admin = redis.Redis(port=server.port)
    admin.execute_command(*app_line().split(), *extra)
    return admin, redis.Redis(port=server.port, username="app", password="app-password")


def cycle(r, em):
    """Runs a lock cycle in a thread of its own (a hold left behind by a
    failure stays out of the test thread's held leases); raises its error."""
    errors = []

    def run():
        try:
            _cycle(r, em)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]


def _cycle(r, em):
    lk = lockscope.Lock(r, "app:py-acl", timeout=10, owner="py-acl", emitter=em)
    lk.acquire()
    assert not lockscope.Lock(r, "app:py-acl", owner="other", emitter=em).acquire(blocking=False)  # GET names the holder
    lk.extend(1)
    lk.reacquire()
    lk.release()


def test_python_app_with_the_docs_app_acl_and_script_load(private_server):
    admin, r = as_app(private_server, ["+script|load"])
    admin.script_flush()  # as after a restart: every script is loaded again
    em = lockscope.Emitter(r)
    cycle(r, em)
    em.close()
    _, got = read_stream(admin, lockscope.DEFAULT_STREAM)
    assert [(e.type, e.holder) for e in got] == [
        ("acquired", ""), ("failed", "py-acl"), ("renewed", ""), ("renewed", ""), ("released", "")]


def test_without_script_load_redis_py_cannot_run_its_scripts(private_server):
    admin, r = as_app(private_server, [])
    admin.script_flush()
    em = lockscope.Emitter(sink=lockscope.MemorySink())
    with pytest.raises(redis.exceptions.NoPermissionError):
        cycle(r, em)
    em.close()
