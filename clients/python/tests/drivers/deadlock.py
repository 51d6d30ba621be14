"""Driver of the Go deadlock tests: one Python service that takes --first,
waits until the key --go exists, then waits at most --wait seconds for
--second while holding --first. Prints "holding <lease>" once it holds
--first, then "acquired" or "gave up"."""

import argparse
import time

import redis

import lockscope


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--redis", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--first", required=True)
    p.add_argument("--second", required=True)
    p.add_argument("--go", required=True)
    p.add_argument("--wait", type=float, required=True)
    args = p.parse_args()
    r = redis.Redis.from_url(args.redis)
    with lockscope.Emitter(r, flush_interval=0.01) as em:
        with lockscope.Lock(r, args.first, timeout=60, owner=args.owner, emitter=em):
            print("holding", lockscope.value.parse(r.get(args.first)).lease, flush=True)
            while not r.exists(args.go):
                time.sleep(0.01)
            second = lockscope.Lock(r, args.second, timeout=60, owner=args.owner, emitter=em, sleep=0.02,
                                    blocking_timeout=args.wait)
            if second.acquire():
                print("acquired", flush=True)
                second.release()
            else:
                print("gave up", flush=True)


if __name__ == "__main__":
    main()
