"""Fixtures: a real redis-server on loopback, started once for the session.

A missing redis-server (or redis-py) is a failure, never a skip.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package under test, not an installed one


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One redis-server process on 127.0.0.1."""

    def __init__(self):
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server not found in PATH: apt-get install -y --no-install-recommends redis-server")
        self.dir = tempfile.mkdtemp(prefix="lockscope-py-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("redis-server did not start on port %d" % self.port)
                time.sleep(0.02)

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)

    def start_again(self):
        """Restarts the server on the same port (after stop)."""
        self.proc = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=1).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail("redis-server did not restart")
                time.sleep(0.02)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def private_server():
    """A server of the test's own, for tests that stop it."""
    s = Server()
    yield s
    s.close()


@pytest.fixture
def r(server):
    c = redis.Redis(port=server.port)
    yield c
    c.close()


@pytest.fixture
def prefix(request):
    """A key prefix unique to the test."""
    return "t:%s:%s:" % (request.node.name, uuid.uuid4().hex[:8])
