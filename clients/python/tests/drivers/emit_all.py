"""Driver of the Go test TestPythonEventsDecodedByGo: writes, on one stream,
the golden events as one packed entry (through an Emitter) and as single
entries (one XADD each), then the events of real lock calls; prints what the
Go side checks them against, as JSON."""

import argparse
import json
import sys

import redis

import lockscope
from lockscope import event as ev


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--redis", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--golden", required=True)
    p.add_argument("--prefix", required=True)
    args = p.parse_args()
    r = redis.Redis.from_url(args.redis)
    with open(args.golden, encoding="utf-8") as f:
        golden = json.load(f)["events"]
    events = []
    for g in golden:
        if "key_hex" in g:
            g["key"] = bytes.fromhex(g.pop("key_hex"))
        events.append(ev.Event(**g))

    em = lockscope.Emitter(r, args.stream, batch_size=len(events))
    for e in events:
        em.record(e)
    em.flush(timeout=10)
    for e in events:
        r.xadd(args.stream, ev.fields(e))

    out = {}
    lk = lockscope.Lock(r, args.prefix + "cycle", timeout=10, owner="py/cycle", emitter=em)
    lk.acquire()
    lk.extend(5)
    lk.reacquire()
    out["cycle_lease"] = lockscope.value.parse(r.get(args.prefix + "cycle")).lease
    lk.release()
    # Refused by a lock the Go side holds: the holder is named from its value.
    go_held = lockscope.Lock(r, args.prefix + "go-held", owner="py/refused", emitter=em)
    if go_held.acquire(blocking=False):
        sys.exit("took a lock the Go side holds")
    out["go_holder"] = go_held.holder()
    # Held when this process exits, for the Go side to inspect.
    kept = lockscope.Lock(r, args.prefix + "py-held", timeout=60, owner="py/holder", emitter=em)
    kept.acquire()
    out["kept_lease"] = lockscope.value.parse(r.get(args.prefix + "py-held")).lease
    em.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
