"""A cron job that runs once across replicas: every replica fires at the same
tick, one runs the job, the others skip it and say who runs it.

Here the replicas are threads of one process, each with its own owner
(cron/replica-N), as separate pods would be. On the dashboard, key
cron:nightly-report shows one acquisition and the other replicas' refused
tries (reason held, naming the replica that ran it).

    python3 examples/cron_once.py --redis redis://localhost:6379 --replicas 3
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


def replica(r, emitter, n, start, job_seconds, ran):
    lock = lockscope.Lock(r, "cron:nightly-report", timeout=600, owner="cron/replica-%d" % n, emitter=emitter)
    start.wait()  # the tick
    if not lock.acquire(blocking=False):
        say("replica-%d: skipped, %s runs the nightly report" % (n, lock.holder()))
        return
    try:
        say("replica-%d: running the nightly report" % n)
        time.sleep(job_seconds)
        ran.append(n)
    finally:
        lock.release()
    say("replica-%d: done" % n)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default="redis://localhost:6379")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--job-seconds", type=float, default=1.0)
    args = p.parse_args(argv)
    r = redis.Redis.from_url(args.redis)
    with lockscope.Emitter(r) as emitter:
        start, ran = threading.Event(), []
        threads = [threading.Thread(target=replica, args=(r, emitter, n, start, args.job_seconds, ran))
                   for n in range(1, args.replicas + 1)]
        for t in threads:
            t.start()
        start.set()
        for t in threads:
            t.join()
    say("the report ran %d time(s)" % len(ran))
    return 0 if len(ran) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
