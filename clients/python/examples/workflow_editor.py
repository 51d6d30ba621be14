"""A workflow editor's edit lock: one user edits a workflow at a time, and the
second one is told who is editing.

Alice opens workflow 42 and edits it, refreshing her lock while she works.
Bob opens it too: he is told that editor/alice is editing, then waits (at
most --wait-seconds) until she saves, and edits after her. On the
dashboard, key lock:workflow:42 shows editor/alice holding it, editor/bob
under "Waiting now" while he waits, then bob holding it.

    python3 examples/workflow_editor.py --redis redis://localhost:6379
"""

import argparse
import sys
import threading
import time

import redis

import lockscope


def edit_lock(r, emitter, workflow_id, user):
    return lockscope.Lock(r, "lock:workflow:%d" % workflow_id, timeout=30, owner="editor/" + user,
                          emitter=emitter, sleep=0.05)


_say_lock = threading.Lock()


def say(*args):
    # One write per line, under a lock: print() writes the text and the
    # newline separately, so two threads' lines could interleave.
    line = " ".join(str(a) for a in args) + "\n"
    with _say_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def alice_edits(r, emitter, opened, edit_seconds):
    lock = edit_lock(r, emitter, 42, "alice")
    if not lock.acquire(blocking=False):
        say("alice: workflow 42 is being edited by", lock.holder())
        opened.set()
        return
    say("alice: editing workflow 42")
    opened.set()
    until = time.monotonic() + edit_seconds
    while time.monotonic() < until:
        time.sleep(min(0.5, max(until - time.monotonic(), 0)))
        lock.reacquire()  # still editing: the lock lives another 30 s
    lock.release()
    say("alice: saved workflow 42")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default="redis://localhost:6379")
    p.add_argument("--edit-seconds", type=float, default=3.0)
    p.add_argument("--wait-seconds", type=float, default=10.0)
    args = p.parse_args(argv)
    r = redis.Redis.from_url(args.redis)
    with lockscope.Emitter(r) as emitter:
        opened = threading.Event()
        alice = threading.Thread(target=alice_edits, args=(r, emitter, opened, args.edit_seconds))
        alice.start()
        opened.wait()

        lock = edit_lock(r, emitter, 42, "bob")
        if not lock.acquire(blocking=False):
            say("bob: workflow 42 is being edited by", lock.holder())
            say("bob: waiting for it")
            if not lock.acquire(blocking_timeout=args.wait_seconds):
                say("bob: gave up after %gs" % args.wait_seconds)
                alice.join()
                return 1
        say("bob: editing workflow 42")
        lock.release()
        say("bob: saved workflow 42")
        alice.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
