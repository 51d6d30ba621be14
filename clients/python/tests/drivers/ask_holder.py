"""Driver of the Go ask tests: a Python holder of --key (TTL --ttl seconds)
that listens for release requests. Prints "listening <lease>", then, for
each request it hears, "heard <operator>|<reason>|<grace>|<seconds since
listening>". With --release it releases on the first request and prints
"released"; otherwise it ignores them and holds until it is killed."""

import argparse
import threading
import time

import redis

import lockscope


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--redis", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--ttl", type=float, default=30)
    p.add_argument("--release", action="store_true")
    args = p.parse_args()
    r = redis.Redis.from_url(args.redis)
    with lockscope.Emitter(r, flush_interval=0.01) as em:
        lk = lockscope.Lock(r, args.key, timeout=args.ttl, owner=args.owner, emitter=em)
        assert lk.acquire(blocking=False)
        start = time.monotonic()
        heard = threading.Event()

        def on_request(req):
            print("heard %s|%s|%s|%.3f" % (req.operator, req.reason, req.grace, time.monotonic() - start), flush=True)
            heard.set()

        lk.listen(on_request)
        print("listening", lockscope.value.parse(r.get(args.key)).lease, flush=True)
        if args.release:
            lk.wait_release_request()
            heard.wait()  # the callback runs on the listener's thread: its line comes first
            lk.release()
            print("released", flush=True)
            return
        threading.Event().wait()  # ignore requests until the test kills it


if __name__ == "__main__":
    main()
