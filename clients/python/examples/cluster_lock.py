"""A cluster lock in the style of AutoGPT's ClusterLock: try to take it, learn
who owns it when that fails, and refresh it while working.

node-a takes the lock and works, refreshing it every timeout/3; node-b
tries, learns that node-a owns it, and tries again until node-a is done.
On the dashboard, key cluster:agent-scheduler shows node-a holding it with
its renewals, node-b's refused tries naming node-a, then node-b holding it.

    python3 examples/cluster_lock.py --redis redis://localhost:6379
"""

import argparse
import sys
import threading
import time

import redis

import lockscope


_say_lock = threading.Lock()


def say(*args):
    # One write per line, under a lock: print() writes the text and the
    # newline separately, so two threads' lines could interleave.
    line = " ".join(str(a) for a in args) + "\n"
    with _say_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


class ClusterLock:
    """A lock one node of a cluster holds while it works."""

    def __init__(self, r, key, owner, timeout=6, emitter=None):
        self.owner = owner
        self._lock = lockscope.Lock(r, key, timeout=timeout, owner=owner, emitter=emitter, thread_local=False)
        self._timeout = timeout

    def try_acquire(self):
        """Takes the lock if it is free; returns who owns it now (this node
        when it took it, None when the owner could not be read)."""
        if self._lock.acquire(blocking=False):
            return self.owner
        return self._lock.holder()

    def refresh(self):
        """Extends the lock to its full timeout; False if it was lost."""
        try:
            return self._lock.reacquire()
        except lockscope.LockNotOwnedError:
            return False

    def release(self):
        self._lock.release()

    @property
    def refresh_every(self):
        return self._timeout / 3


def node_a(r, emitter, work_seconds, started):
    lock = ClusterLock(r, "cluster:agent-scheduler", "node-a", emitter=emitter)
    assert lock.try_acquire() == "node-a"
    say("node-a: scheduling agents")
    started.set()
    until = time.monotonic() + work_seconds
    while time.monotonic() < until:
        time.sleep(min(lock.refresh_every, max(until - time.monotonic(), 0)))
        if not lock.refresh():
            say("node-a: lost the lock, stopping")
            return
    lock.release()
    say("node-a: done")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default="redis://localhost:6379")
    p.add_argument("--work-seconds", type=float, default=5.0)
    args = p.parse_args(argv)
    r = redis.Redis.from_url(args.redis)
    with lockscope.Emitter(r) as emitter:
        started = threading.Event()
        a = threading.Thread(target=node_a, args=(r, emitter, args.work_seconds, started))
        a.start()
        started.wait()
        lock = ClusterLock(r, "cluster:agent-scheduler", "node-b", emitter=emitter)
        owner = lock.try_acquire()
        say("node-b: the scheduler is owned by", owner)
        while owner != "node-b":
            time.sleep(0.5)
            owner = lock.try_acquire()
        say("node-b: scheduling agents")
        lock.release()
        a.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
