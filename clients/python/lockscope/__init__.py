"""lockscope for redis-py: locks whose waits, holds and deadlocks show on the
lockscope dashboard.

    import redis, lockscope

    r = redis.Redis()
    with lockscope.Lock(r, "lock:workflow:42", timeout=30, owner="editor/alice"):
        ...
    # or, unchanged call sites:
    lock = r.lock("lock:workflow:42", timeout=30, lock_class=lockscope.Lock)

Events go through an Emitter (one per Redis client unless you pass or set
one) in packed batches to the stream ``lockscope:events``, the format of
docs/events.md. ``lockscope.asyncio.Lock`` does the same for redis.asyncio.

A holder hears an operator's request to release (ask before force):

    with lockscope.Lock(r, "lock:workflow:42", timeout=30) as lk:
        lk.listen(lambda req: print(req.operator, "asks:", req.reason))
        ...
        if lk.wait_release_request(timeout=0):  # asked meanwhile?
            save_draft()
"""

from redis.exceptions import LockError, LockNotOwnedError

from . import event
from .emitter import Emitter, EmitterStats, MemorySink, StreamSink, default_emitter, set_default_emitter
from .event import DEFAULT_STREAM, Event
from .listen import ReleaseRequest
from .guard import FenceGuard, StaleFence, guard_key
from .lock import Lock
from .value import default_owner, holder_name

__all__ = [
    "DEFAULT_STREAM", "Emitter", "LockError", "LockNotOwnedError", "EmitterStats", "Event", "Lock", "MemorySink", "ReleaseRequest", "StreamSink",
    "default_emitter", "default_owner", "event", "holder_name", "set_default_emitter",
    "FenceGuard", "StaleFence", "guard_key",
]
__version__ = "0.1.0"
