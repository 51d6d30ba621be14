"""lockscope.Lock: redis-py's Lock, seen by lockscope."""

import time

import redis.lock
from redis.exceptions import LockError, LockNotOwnedError

from . import _core
from . import event as ev
from . import listen


class Lock(_core.Core, redis.lock.Lock):
    """A redis.lock.Lock that reports what it does to lockscope.

    Same arguments, return values and exceptions as redis-py's Lock, plus:

    - owner: who the dashboard shows as holder or waiter (default
      "<program>/<host>/<pid>");
    - emitter: the lockscope.Emitter events go to (default: the one
      set_default_emitter set, else one per Redis client, made on first
      use).

    It works with ``with``, and through ``r.lock(name, lock_class=lockscope.Lock)``.
    It emits ``waiting`` once per wait (with the holder it saw and the
    leases the calling thread holds, for deadlock detection), ``acquired``
    (with the wait and attempts), ``failed`` (reason held, timeout, error or
    canceled), ``released`` (reason not_owner when the lock was no longer
    its own), ``renewed`` for extend() and reacquire(), ``lost`` when those
    find the lock gone or another's, ``renew_failed`` on a Redis error.

    The lock's value is lockscope's (``ls1|<secret>|<lease>|0|<since>|<owner>``)
    instead of redis-py's uuid, so anyone reading the key learns who holds
    it; a token passed to acquire() is stored as it is.
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

    def acquire(self, sleep=None, blocking=None, blocking_timeout=None, token=None):
        """As redis.lock.Lock.acquire (the same loop), reporting the wait."""
        if sleep is None:
            sleep = self.sleep
        secret, fixed, lease = self._ls_call(token, lambda t: self.redis.get_encoder().encode(t))
        if blocking is None:
            blocking = self.blocking
        if blocking_timeout is None:
            blocking_timeout = self.blocking_timeout
        owner = self._ls_owner()
        start = time.time_ns()
        stop_trying_at = None
        if blocking_timeout is not None:
            stop_trying_at = time.monotonic() + blocking_timeout
        attempts = 0
        holder = ""
        try:
            while True:
                at = time.time_ns()
                tok = self._ls_attempt_token(secret, fixed, lease, owner, at)
                attempts += 1
                if self.do_acquire(tok):
                    self.local.token = tok
                    self._ls_acquired(tok, lease, owner, at, start, attempts)
                    return True
                if attempts == 1:
                    holder = self._ls_read_holder()
                if not blocking:
                    self._ls_failed(lease, owner, start, attempts, ev.REASON_HELD, holder)
                    return False
                next_try_at = time.monotonic() + sleep
                if stop_trying_at is not None and next_try_at > stop_trying_at:
                    self._ls_failed(lease, owner, start, attempts, ev.REASON_TIMEOUT, holder)
                    return False
                if attempts == 1:
                    budget = stop_trying_at - time.monotonic() if stop_trying_at is not None else None
                    self._ls_waiting(lease, owner, holder, budget)
                time.sleep(sleep)
        except Exception:
            self._ls_failed(lease, owner, start, attempts, ev.REASON_ERROR, holder)
            raise
        except BaseException:  # KeyboardInterrupt, SystemExit while waiting
            self._ls_failed(lease, owner, start, attempts, ev.REASON_CANCELED, holder)
            raise

    def listen(self, callback=None):
        """Hears operators' release requests to the hold this lock has now
        (the dashboard's "Ask to release", ``lockscope release KEY --ask``):
        within moments, whatever the timeout, not at the next extend. The
        application decides: finish or save its work and release(), or
        carry on. callback(request), if given, is called on the listener's
        thread for each request (a lockscope.ReleaseRequest: operator,
        reason, at, grace); wait_release_request() waits for one. The hold
        stops listening when it is released or found lost. One Pub/Sub
        connection per Redis client serves every hold that listens; none
        exists while none does. Raises LockError when the lock is not held.
        """
        self._ls_listen(callback, listen.Asked)

    def wait_release_request(self, timeout=None):
        """Waits up to timeout seconds (None: no bound) for a release
        request to the hold this lock has now, listening first if it does
        not yet. Returns the first request the hold heard, or None at the
        timeout or once the hold has ended."""
        h = self._ls_listen(None, listen.Asked)
        h.asked.event.wait(timeout)
        return h.asked.request

    def holder(self):
        """Names who holds the lock now (its owner, or another library's name
        for it, never its token), or None when it is free. One GET."""
        return _core.holder_of(self.redis.get(self.name)) or None

    def _ls_read_holder(self):
        """Names who holds the lock now (one GET); "" if unknown."""
        try:
            return _core.holder_of(self.redis.get(self.name))
        except Exception:
            return ""

    def release(self):
        """As redis.lock.Lock.release, reporting the release."""
        h = self._ls_hold()
        try:
            super().release()
        except LockNotOwnedError:
            self._ls_end(h, "released", ev.REASON_NOT_OWNER)
            raise
        except LockError:
            raise
        except BaseException:
            self._ls_forget(h)  # Redis unreachable: the lock expires at its TTL
            raise
        self._ls_end(h, "released")

    def do_extend(self, additional_time, replace_ttl):
        h = self._ls_hold()
        try:
            res = self.lockscope_lua_extend(
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

    def do_reacquire(self):
        h = self._ls_hold()
        ttl = int(self.timeout * 1000)
        try:
            res = self.lockscope_lua_reacquire(keys=[self.name], args=[self.local.token, ttl], client=self.redis)
        except Exception:
            self._ls_event(h, "renew_failed", reason=ev.REASON_ERROR)
            raise
        if not res:
            self._ls_end(h, "lost", ev.REASON_NOT_OWNER)
            raise LockNotOwnedError("Cannot reacquire a lock that's no longer owned")
        self._ls_renewed(h, ttl, int(res[1]))
        return True
