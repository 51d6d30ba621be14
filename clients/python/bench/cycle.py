"""The cost of lockscope's instrumentation per lock cycle (acquire + release)
in Python, against redis-py's own Lock on the same Redis.

Variants, each creating its lock per cycle as `with r.lock(...)` does:

  redis-py     redis.lock.Lock
  no-emitter   lockscope.Lock whose events go nowhere (record() does nothing):
               the lock's own bookkeeping
  emitter      lockscope.Lock with a real lockscope.Emitter writing packed
               batches to a stream on the same Redis (MAXLEN ~ 1000)

Every round runs each variant for --cycles cycles, in an order that rotates
from round to round, so load from elsewhere on the machine hits all alike.
Per variant it prints the median over rounds of the wall time, this
process's CPU time (the emitter's thread included) and redis-server's CPU
time (INFO cpu) per cycle, and the median of the per-round ratios to
redis-py.

    /usr/bin/python3 clients/python/bench/cycle.py --redis redis://127.0.0.1:6379
"""

import argparse
import os
import statistics
import sys
import time

import redis

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lockscope  # noqa: E402


class Discard:
    def record(self, e):
        pass


def server_cpu(r):
    info = r.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default="redis://127.0.0.1:6379")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--cycles", type=int, default=2000)
    args = p.parse_args()
    r = redis.Redis.from_url(args.redis)
    em = lockscope.Emitter(r, "lockscope:bench", maxlen=1000)
    discard = Discard()
    variants = {
        "redis-py": lambda key: redis.lock.Lock(r, key, timeout=10),
        "no-emitter": lambda key: lockscope.Lock(r, key, timeout=10, owner="bench", emitter=discard),
        "emitter": lambda key: lockscope.Lock(r, key, timeout=10, owner="bench", emitter=em),
    }
    names = list(variants)
    for name, new in variants.items():  # warm up: connections, scripts
        for _ in range(100):
            with new("bench:" + name):
                pass
    em.flush(timeout=10)
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    srv = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names[rnd % len(names):] + names[:rnd % len(names)]
        for name in order:
            new, key = variants[name], "bench:" + name
            s0, c0, w0 = server_cpu(r), time.process_time(), time.perf_counter()
            for _ in range(args.cycles):
                lk = new(key)
                lk.acquire()
                lk.release()
            if name == "emitter":
                em.flush(timeout=10)  # its writes belong to its cycles
            w1, c1, s1 = time.perf_counter(), time.process_time(), server_cpu(r)
            wall[name].append((w1 - w0) / args.cycles * 1e6)
            cpu[name].append((c1 - c0) / args.cycles * 1e6)
            srv[name].append((s1 - s0) / args.cycles * 1e6)
    em.close()
    st = em.stats()
    print("redis-py %s, Python %s, %d rounds x %d cycles; emitter: %d events in %d writes, %d dropped" % (
        redis.__version__, sys.version.split()[0], args.rounds, args.cycles, st.sent, st.batches, st.dropped))
    print("%-11s %12s %12s %12s %14s %14s" % ("variant", "wall µs", "client CPU µs", "server CPU µs",
                                              "wall vs py", "CPU vs py"))
    for n in names:
        ratio_wall = statistics.median(a / b for a, b in zip(wall[n], wall["redis-py"]))
        ratio_cpu = statistics.median(a / b for a, b in zip(cpu[n], cpu["redis-py"]))
        print("%-11s %12.1f %12.1f %12.1f %13.3fx %13.3fx" % (
            n, statistics.median(wall[n]), statistics.median(cpu[n]), statistics.median(srv[n]),
            ratio_wall, ratio_cpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
