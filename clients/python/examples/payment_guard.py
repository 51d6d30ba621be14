"""A double-submit guard for payments: a second submit of an order whose
payment is in flight is refused, not charged twice.

Two requests submit order 1001 at once (a double click); one charges it,
the other is refused and told which request is charging. On the dashboard,
key payment:order:1001 shows one acquisition and one refused try (reason
held, holder payments/req-N).

    python3 examples/payment_guard.py --redis redis://localhost:6379
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


class DuplicateSubmit(Exception):
    pass


def submit_payment(r, emitter, order_id, request_id, charge):
    lock = lockscope.Lock(r, "payment:order:%d" % order_id, timeout=60, owner="payments/" + request_id,
                          emitter=emitter)
    if not lock.acquire(blocking=False):
        raise DuplicateSubmit("order %d is being paid by %s" % (order_id, lock.holder()))
    try:
        charge(order_id)
    finally:
        lock.release()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", default="redis://localhost:6379")
    p.add_argument("--charge-seconds", type=float, default=1.0)
    args = p.parse_args(argv)
    r = redis.Redis.from_url(args.redis)
    charged, refused = [], []
    gate = threading.Barrier(2)

    def charge(order_id):
        say("charging order %d" % order_id)
        time.sleep(args.charge_seconds)
        charged.append(order_id)

    def request(request_id):
        gate.wait()  # both clicks at once
        try:
            submit_payment(r, emitter, 1001, request_id, charge)
        except DuplicateSubmit as e:
            refused.append(request_id)
            say("%s: refused: %s" % (request_id, e))

    with lockscope.Emitter(r) as emitter:
        threads = [threading.Thread(target=request, args=("req-%d" % i,)) for i in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    say("charged %d time(s), refused %d" % (len(charged), len(refused)))
    return 0 if (len(charged), len(refused)) == (1, 1) else 1


if __name__ == "__main__":
    sys.exit(main())
