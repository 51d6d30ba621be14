"""Driver of the Go lock-order tests: one Python service that takes
--first, then --second while holding it (nested with blocks, or with
--asyncio an asyncio lock and a task created while holding it), releases
both and prints "done". Nobody waits."""

import argparse
import asyncio

import redis
import redis.asyncio

import lockscope
import lockscope.asyncio


def take_sync(args):
    r = redis.Redis.from_url(args.redis)
    with lockscope.Emitter(r, flush_interval=0.01) as em:
        with lockscope.Lock(r, args.first, timeout=10, owner=args.owner, emitter=em):
            with lockscope.Lock(r, args.second, timeout=10, owner=args.owner, emitter=em):
                pass


async def take_async(args):
    r = redis.asyncio.Redis.from_url(args.redis)
    em = lockscope.Emitter(redis.Redis.from_url(args.redis), flush_interval=0.01)
    try:
        async with lockscope.asyncio.Lock(r, args.first, timeout=10, owner=args.owner, emitter=em):
            # A task created while holding the first lock holds it too (its
            # context is a copy): its acquisition lists the first lease.
            async def inner():
                async with lockscope.asyncio.Lock(r, args.second, timeout=10, owner=args.owner, emitter=em):
                    pass
            await asyncio.create_task(inner())
    finally:
        em.close()
        await r.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--redis", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--first", required=True)
    p.add_argument("--second", required=True)
    p.add_argument("--asyncio", action="store_true")
    args = p.parse_args()
    if args.asyncio:
        asyncio.run(take_async(args))
    else:
        take_sync(args)
    print("done", flush=True)


if __name__ == "__main__":
    main()
