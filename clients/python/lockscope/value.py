"""Lock values: what a lockscope lock stores under its key.

A lock taken through this package stores the value the Go library writes
(lock/value.go), ``ls1|<token>|<lease>|<fence>|<since ms>|<owner>``, as the
redis-py lock token. redis-py compares tokens byte for byte, so it works
unchanged; and whoever reads the key (a Go lock.Client refused by it,
``lockscope inspect``, a restarted collector, the passive watcher) learns
who holds it without any event. The 22-character token part is the secret;
the lease id is public and links the hold's events.
"""

import base64
import hashlib
import os
import socket
import sys
import time

MAGIC = b"ls1|"


def new_lease():
    """Returns (secret, lease) for a fresh hold: the 22-character secret token
    (bytes) and the public lease id (str, 16 hex digits)."""
    r = os.urandom(24)
    return base64.urlsafe_b64encode(r[:16]).rstrip(b"="), r[16:].hex()


def make(secret, lease, since_ms, owner, fence=0):
    """Returns the value ``ls1|<secret>|<lease>|<fence>|<since_ms>|<owner>``
    (bytes), as Go's lock.Value.String."""
    if isinstance(owner, str):
        owner = owner.encode("utf-8")
    return b"".join((MAGIC, secret, b"|", lease.encode("ascii"), b"|", str(fence).encode("ascii"), b"|",
                     str(since_ms).encode("ascii"), b"|", owner))


class Value:
    """A parsed lockscope lock value."""

    __slots__ = ("token", "lease", "fence", "since_ms", "owner")

    def __init__(self, token, lease, fence, since_ms, owner):
        self.token, self.lease, self.fence, self.since_ms, self.owner = token, lease, fence, since_ms, owner


def parse(value):
    """Parses a value written by lockscope (this package or the Go library);
    returns None for any other value (another library's token)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not value.startswith(MAGIC):
        return None
    parts = value[len(MAGIC):].split(b"|", 4)
    if len(parts) != 5 or not parts[0] or not parts[1]:
        return None
    try:
        fence, since = int(parts[2]), int(parts[3])
    except ValueError:
        return None
    owner = parts[4]
    try:
        owner = owner.decode("utf-8")
    except UnicodeDecodeError:
        pass
    return Value(parts[0].decode("ascii", "replace"), parts[1].decode("ascii", "replace"), fence, since, owner)


def fingerprint(value):
    """Returns the hex SHA-1 of a lock value (what a forced release quotes)."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    return hashlib.sha1(value).hexdigest()


_URL_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")

# 100 ns intervals from 1582-10-15 (the UUID epoch) to 1970 and to 2015.
_UUID_1970 = 0x01B21DD213814000
_UUID_2015 = _UUID_1970 + 1420070400 * 10_000_000


def _token16(s, urlsafe):
    """Whether s is the base64 (urlsafe: unpadded base64url) of 16 bytes,
    with the unused bits zero as encoders write them, and of more than one
    kind of character (as Go's lock.ForeignKind)."""
    try:
        if urlsafe:
            if not all(c in _URL_ALPHABET for c in s):
                return False
            b = base64.urlsafe_b64decode(s + b"=" * (-len(s) % 4))
            again = base64.urlsafe_b64encode(b).rstrip(b"=")
        else:
            b = base64.b64decode(s, validate=True)
            again = base64.b64encode(b)
    except ValueError:
        return False
    return len(b) == 16 and again == s and _mixed(s)


def _mixed(s):
    kinds = set()
    for c in s:
        if 65 <= c <= 90:
            kinds.add("upper")
        elif 97 <= c <= 122:
            kinds.add("lower")
        elif 48 <= c <= 57:
            kinds.add("digit")
        else:
            kinds.add("other")
    return len(kinds) >= 2


def _uuid1(v):
    """Whether 32 hex digits are a version 1 UUID timestamped from 2015 to a
    day from now (redis-py's uuid1().hex)."""
    if v[12:13] != b"1" or v[16:17] not in (b"8", b"9", b"a", b"b"):
        return False
    t = int(v[13:16] + v[8:12] + v[0:8], 16)
    return _UUID_2015 <= t < _UUID_1970 + int((time.time() + 86400) * 10_000_000)


def _kind(v):
    if len(v) == 32 and all(c in b"0123456789abcdef" for c in v):
        return "redis-py" if _uuid1(v) else "node-redlock"
    if len(v) == 24 and v.endswith(b"==") and _token16(v, False):
        return "redsync"
    if len(v) >= 22 and _token16(v[:22], True):
        return "redislock"
    return "foreign"


def holder_name(value):
    """Names the holder of a lock from its stored value: the owner for a
    lockscope value; for another library's, its kind and the first 8 hex
    digits of the value's fingerprint (as Go's lock.ForeignOwner), never
    the value, which is that library's secret token."""
    if value is None:
        return ""
    if isinstance(value, str):
        value = value.encode("utf-8")
    v = parse(value)
    if v is not None:
        return v.owner
    return _kind(value) + " " + fingerprint(value)[:8]


def default_owner():
    """Returns "<program>/<host>/<pid>", the owner used when none is set (as
    Go's lock.DefaultOwner)."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    host = socket.gethostname() or "unknown"
    return "%s/%s/%d" % (prog, host, os.getpid())
