"""lockscope.asyncio.Lock: redis.asyncio's Lock, seen by lockscope."""

import asyncio
import time

import redis.asyncio.lock
from redis.exceptions import LockError, LockNotOwnedError

from . import _core
from . import event as ev
from . import listen


class Lock(_core.Core, redis.asyncio.lock.Lock):
    """A redis.asyncio.lock.Lock that reports what it does to lockscope, as
    lockscope.Lock does for the sync one (see there). Use it with
    ``async with``, or through ``r.lock(name, lock_class=lockscope.asyncio.Lock)``.

    Events go through a lockscope.Emitter, whose thread writes with a sync
    connection of its own: recording never waits on the event loop. The
    leases a waiting call lists are those its asyncio task holds.
    """

    lockscope_lua_extend = None
    lockscope_lua_reacquire = None

    def __init__(self, redis, name, timeout=None, sleep=0.1, blocking=True, blocking_timeout=None,
                 thread_local=True, owner=None, emitter=None, **kwargs):
        super().__init__(redis, name, timeout=timeout, sleep=sleep, blocking=blocking,
                         blocking_timeout=blocking_timeout, thread_local=thread_local, **kwargs)
        self.local.lockscope_hold = None
        self._ls_setup(owner, emitter)

    def register_scripts(self):
        super().register_scripts()
        cls = self.__class__
        if cls.lockscope_lua_extend is None:
            cls.lockscope_lua_extend = self.redis.register_script(_core.LUA_EXTEND)
        if cls.lockscope_lua_reacquire is None:
            cls.lockscope_lua_reacquire = self.redis.register_script(_core.LUA_REACQUIRE)

    def _encode(self, token):
        get = getattr(self.redis, "get_encoder", None) or self.redis.connection_pool.get_encoder
        return get().encode(token)

    async def acquire(self, blocking=None, blocking_timeout=None, token=None):
        """As redis.asyncio.lock.Lock.acquire (the same loop), reporting the wait."""
        loop = asyncio.get_running_loop()
        sleep = self.sleep
        secret, fixed, lease = self._ls_call(token, self._encode)
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        owner = self._ls_owner()
        start = time.time_ns()
        stop_trying_at = None
        if blocking_timeout is not None:
            stop_trying_at = loop.time() + blocking_timeout
        attempts = 0
        holder = ""
        try:
            while True:
                at = time.time_ns()
                tok = self._ls_attempt_token(secret, fixed, lease, owner, at)
                attempts += 1
                if await self.do_acquire(tok):
                    self.local.token = tok
                    self._ls_acquired(tok, lease, owner, at, start, attempts)
                    return True
                if attempts == 1:
                    holder = await self._ls_read_holder()
                if not blocking:
                    self._ls_failed(lease, owner, start, attempts, ev.REASON_HELD, holder)
                    return False
                next_try_at = loop.time() + sleep
                if stop_trying_at is not None and next_try_at > stop_trying_at:
                    self._ls_failed(lease, owner, start, attempts, ev.REASON_TIMEOUT, holder)
                    return False
                if attempts == 1:
                    budget = stop_trying_at - loop.time() if stop_trying_at is not None else None
                    self._ls_waiting(lease, owner, holder, budget)
                await asyncio.sleep(sleep)
        except asyncio.CancelledError:
            self._ls_failed(lease, owner, start, attempts, ev.REASON_CANCELED, holder)
            raise
        except Exception:
            self._ls_failed(lease, owner, start, attempts, ev.REASON_ERROR, holder)
            raise
        except BaseException:
            self._ls_failed(lease, owner, start, attempts, ev.REASON_CANCELED, holder)
            raise

    def listen(self, callback=None):
        """Hears operators' release requests to the hold this lock has now,
        as lockscope.Lock.listen does; call it from the event loop the lock
        runs on. callback(request) runs on that loop (a coroutine function's
        coroutine as a task); wait_release_request() awaits one. The
        listener's thread reads Redis with a sync connection of its own:
        nothing waits on the loop. Raises LockError when the lock is not
        held."""
        loop = asyncio.get_running_loop()
        self._ls_listen(callback, lambda: listen.AsyncAsked(loop))

    async def wait_release_request(self, timeout=None):
        """Waits up to timeout seconds (None: no bound) for a release
        request to the hold this lock has now, listening first if it does
        not yet. Returns the first request the hold heard, or None at the
        timeout or once the hold has ended."""
        loop = asyncio.get_running_loop()
        h = self._ls_listen(None, lambda: listen.AsyncAsked(loop))
        try:
            await asyncio.wait_for(h.asked.event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return h.asked.request

    async def holder(self):
        """Names who holds the lock now (its owner, or another library's name
        for it, never its token), or None when it is free. One GET."""
        return _core.holder_of(await self.redis.get(self.name)) or None

    async def _ls_read_holder(self):
        try:
            return _core.holder_of(await self.redis.get(self.name))
        except Exception:
            return ""

    def release(self):
        """As redis.asyncio.lock.Lock.release (LockError at once if not
        held; otherwise an awaitable), reporting the release."""
        h = self._ls_hold()
        return self._ls_release(super().release(), h)

    async def _ls_release(self, released, h):
        try:
            await released
        except LockNotOwnedError:
            self._ls_end(h, "released", ev.REASON_NOT_OWNER)
            raise
        except LockError:
            raise
        except BaseException:
            self._ls_forget(h)
            raise
        self._ls_end(h, "released")

    async def do_extend(self, additional_time, replace_ttl):
        h = self._ls_hold()
        try:
            res = await self.lockscope_lua_extend(
                keys=[self.name],
                args=[self.local.token, int(additional_time * 1000), "1" if replace_ttl else "0"],
                client=self.redis)
        except Exception:
            self._ls_event(h, "renew_failed", reason=ev.REASON_ERROR)
            raise
        if not res:
            self._ls_end(h, "lost", ev.REASON_NOT_OWNER)
            raise LockNotOwnedError("Cannot extend a lock that's no longer owned")
        self._ls_renewed(h, int(res[0]), int(res[1]))
        return True

    async def do_reacquire(self):
        h = self._ls_hold()
        ttl = int(self.timeout * 1000)
        try:
            res = await self.lockscope_lua_reacquire(keys=[self.name], args=[self.local.token, ttl], client=self.redis)
        except Exception:
            self._ls_event(h, "renew_failed", reason=ev.REASON_ERROR)
            raise
        if not res:
            self._ls_end(h, "lost", ev.REASON_NOT_OWNER)
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned")
        self._ls_renewed(h, ttl, int(res[1]))
        return True
