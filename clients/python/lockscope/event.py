"""The lockscope wire format: event types, the two entry shapes, partitions.

This is the Python twin of the Go package ``event`` (docs/events.md): the
packed encoding is byte for byte what Go's ``event.Pack`` writes, and
``decode`` reads what Go's ``event.Decode`` reads, with the same limits.
"""

import functools

VERSION = 1
DEFAULT_STREAM = "lockscope:events"

# Limits of one entry (event/codec.go): a decoder rejects an entry over them.
MAX_BATCH_EVENTS = 10000
MAX_STRING_LEN = 1 << 16
MAX_BATCH_BYTES = 8 << 20
# The most bytes of events the emitter puts in one entry (an event longer
# than that goes alone), as the Go StreamSink: an XADD holds Redis some
# 3.7 ns per byte while the stream grows, so about 1 ms.
ENTRY_BYTES = 256 << 10
MAX_PARTITIONS = 1024

# Wire type codes, in the order of Go's event.Type.
TYPES = {
    "acquired": 1,
    "failed": 2,
    "released": 3,
    "renewed": 4,
    "renew_failed": 5,
    "lost": 6,
    "expired": 7,
    "forced": 8,
    "dropped": 9,
    "waiting": 10,
    "requested": 11,
    "fence_rejected": 12,
}
TYPE_NAMES = {code: name for name, code in TYPES.items()}

# Reasons the Go library uses (event/event.go).
REASON_TIMEOUT = "timeout"
REASON_CANCELED = "canceled"
REASON_ERROR = "error"
REASON_HELD = "held"
REASON_NOT_OWNER = "not_owner"

_STRINGS = ("key", "owner", "lease", "reason", "holder", "by")
_INTS = ("wait", "hold", "ttl", "attempts", "fence", "count")
_FLAG_DEGRADED = 0x01
_FLAG_PASSIVE = 0x02
_U64 = (1 << 64) - 1


class DecodeError(ValueError):
    """An entry the collector would count as malformed and skip."""


def _b(s):
    """Returns s as bytes: str is UTF-8 encoded, bytes pass through."""
    if isinstance(s, bytes):
        return s
    if isinstance(s, str):
        return s.encode("utf-8")
    if isinstance(s, (bytearray, memoryview)):
        return bytes(s)
    raise TypeError("expected str or bytes, got %s" % type(s).__name__)


def _text(b):
    """Returns decoded bytes as str when they are UTF-8, else as bytes."""
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return b


_HEX = frozenset("0123456789abcdefABCDEF")


def _id(v, n):
    """Converts a trace (n=16) or span (n=8) id given as an int or hex str."""
    if isinstance(v, int):
        return v.to_bytes(n, "big") if 0 <= v < 1 << (8 * n) else b""
    if isinstance(v, str):
        if len(v) != 2 * n or not all(c in _HEX for c in v):
            return b""
        return bytes.fromhex(v)
    return bytes(v) if v else b""


def _valid(b, n):
    """Returns b when it is a set id of n bytes, else b"" (W3C: all zeros is none)."""
    return b if len(b) == n and any(b) else b""


class Event:
    """One lock lifecycle step, in the wire's units.

    ts is Unix nanoseconds; wait and hold are nanoseconds; ttl is
    milliseconds (what the wire carries). String fields are str (UTF-8) or
    bytes (a lock key is arbitrary bytes).
    """

    __slots__ = ("type", "key", "owner", "lease", "ts", "wait", "hold", "ttl",
                 "attempts", "fence", "reason", "count", "holder", "by", "degraded", "passive",
                 "trace_id", "span_id", "headroom")

    def __init__(self, type, key="", owner="", lease="", ts=0, wait=0, hold=0, ttl=0,
                 attempts=0, fence=0, reason="", count=0, holder="", by="",
                 degraded=False, passive=False, trace_id=b"", span_id=b"", headroom=0):
        self.type = type
        self.key = key
        self.owner = owner
        self.lease = lease
        self.ts = ts
        self.wait = wait
        self.hold = hold
        self.ttl = ttl
        self.attempts = attempts
        self.fence = fence
        self.reason = reason
        self.count = count
        self.holder = holder
        self.by = by
        self.degraded = degraded
        self.passive = passive
        # Optional fields (docs/events.md): the caller's OpenTelemetry trace
        # and span ids (16 and 8 bytes; an int or hex str is converted; b""
        # none) and, for renewed, the TTL left when it landed (ns).
        self.trace_id = trace_id if isinstance(trace_id, bytes) else _id(trace_id, 16)
        self.span_id = span_id if isinstance(span_id, bytes) else _id(span_id, 8)
        self.headroom = headroom

    def _cmp(self):
        return (self.type,) + tuple(_b(getattr(self, f)) for f in _STRINGS) + (
            self.ts,) + tuple(getattr(self, f) for f in _INTS) + (bool(self.degraded), bool(self.passive)) + (
            _valid(self.trace_id, 16), _valid(self.span_id, 8), self.headroom)

    def __eq__(self, other):
        return isinstance(other, Event) and self._cmp() == other._cmp()

    def __hash__(self):
        return hash(self._cmp())

    def __repr__(self):
        parts = ["%s=%r" % (f, getattr(self, f)) for f in self.__slots__[1:]
                 if getattr(self, f) not in ("", b"", 0, False)]
        return "Event(%r%s)" % (self.type, "".join(", " + p for p in parts))

    def has_ext(self):
        """Reports whether e has optional fields, which a packed entry carries
        in its extension."""
        return bool(_valid(self.trace_id, 16) or _valid(self.span_id, 8) or self.headroom)

    def held_leases(self):
        """Returns the leases a waiting or acquired event's call already
        holds (its reason)."""
        if self.type not in ("waiting", "acquired") or not self.reason:
            return []
        return _b(self.reason).decode("utf-8", "replace").split(",")

    def too_large(self):
        """Reports whether a string field passes MAX_STRING_LEN."""
        return any(len(_b(getattr(self, f))) > MAX_STRING_LEN for f in _STRINGS)


# --- varints (Go's encoding/binary) -------------------------------------------------------


def _uvarint(out, x):
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)


def _varint(out, x):
    # zigzag, as binary.AppendVarint; x is a signed 64-bit integer
    _uvarint(out, ((x << 1) ^ (x >> 63)) & _U64)


def append_packed(out, e, prev_ts):
    """Appends the packed encoding of e to the bytearray out. prev_ts is the
    ts of the previous event of the same batch (0 for the first)."""
    code = TYPES.get(e.type)
    if code is None:
        raise ValueError("unknown event type %r" % (e.type,))
    out.append(code)
    out.append((_FLAG_DEGRADED if e.degraded else 0) | (_FLAG_PASSIVE if e.passive else 0))
    # The one-byte cases inline (most lengths and numbers: empty strings,
    # zeros, short keys): a function call per field was most of the cost.
    for s in (e.key, e.owner, e.lease, e.reason, e.holder, e.by):
        if s.__class__ is str:
            if not s:
                out.append(0)
                continue
            s = s.encode("utf-8")
        else:
            s = _b(s)
        n = len(s)
        if n < 0x80:
            out.append(n)
        else:
            _uvarint(out, n)
        out += s
    for x in (e.ts - prev_ts, e.wait, e.hold, e.ttl, e.attempts, e.fence, e.count):
        z = ((x << 1) ^ (x >> 63)) & _U64  # zigzag, as binary.AppendVarint
        if z < 0x80:
            out.append(z)
        else:
            _uvarint(out, z)


def append_ext(out, i, e):
    """Appends to the bytearray out the extension record of event i of a
    batch, if e has optional fields (as Go's event.AppendExt)."""
    items = bytearray()
    t, sp = _valid(e.trace_id, 16), _valid(e.span_id, 8)
    if t:
        items += b"\x01\x10" + t
    if sp:
        items += b"\x02\x08" + sp
    if e.headroom > 0:
        v = bytearray()
        _uvarint(v, e.headroom)
        items.append(3)
        items.append(len(v))
        items += v
    if items:
        _uvarint(out, i)
        _uvarint(out, len(items))
        out += items


def pack_ext(events):
    """Returns the extension of a batch of events (b"" when none has
    optional fields)."""
    out = bytearray()
    for i, e in enumerate(events):
        if e.trace_id or e.span_id or e.headroom:
            append_ext(out, i, e)
    return bytes(out)


def pack(events):
    """Returns the packed batch of events (bytes), as Go's event.Pack."""
    out = bytearray()
    prev = 0
    for e in events:
        append_packed(out, e, prev)
        prev = e.ts
    return bytes(out)


def pack_entries(events, max_bytes=MAX_BATCH_BYTES):
    """Packs events into one or more entries, (n, batch, ext) triples,
    starting a new entry where one would pass max_bytes of batch (a
    decoder's limit by default; the emitter passes ENTRY_BYTES, as the Go
    StreamSink does) or MAX_BATCH_EVENTS events. ext is the entry's
    extension, b"" when no event has optional fields."""
    entries = []
    out, x = bytearray(), bytearray()
    first = 0
    prev = 0
    for i, e in enumerate(events):
        mark, xmark = len(out), len(x)
        append_packed(out, e, prev)
        ext = e.trace_id or e.span_id or e.headroom
        if ext:
            append_ext(x, i - first, e)
        if i > first and (len(out) > max_bytes or i - first == MAX_BATCH_EVENTS):
            entries.append((i - first, bytes(out[:mark]), bytes(x[:xmark])))
            out, x = bytearray(), bytearray()
            append_packed(out, e, 0)
            if ext:
                append_ext(x, 0, e)
            first = i
        prev = e.ts
    if events:
        entries.append((len(events) - first, bytes(out), bytes(x)))
    return entries


def packed_fields(n, batch, ext=b""):
    """Returns the fields of a packed entry, ready for XADD; an empty
    extension adds no field."""
    f = {"v": "1", "n": str(n), "batch": batch}
    if ext:
        f["x"] = ext
    return f


def fields(e):
    """Returns the fields of a single-event entry for e, ready for XADD, with
    zero-valued optional fields left out (as Go's event.AppendFields)."""
    if e.type not in TYPES:
        raise ValueError("unknown event type %r" % (e.type,))
    f = {"v": "1", "type": e.type, "key": _b(e.key)}
    if e.owner:
        f["owner"] = _b(e.owner)
    if e.lease:
        f["lease"] = _b(e.lease)
    f["ts"] = str(e.ts)
    for name in _INTS:
        v = getattr(e, name)
        if v:
            f[name] = str(v)
    for name in ("reason", "holder", "by"):
        v = getattr(e, name)
        if v:
            f[name] = _b(v)
    if e.degraded:
        f["degraded"] = "1"
    if e.passive:
        f["passive"] = "1"
    t, sp = _valid(e.trace_id, 16), _valid(e.span_id, 8)
    if t:
        f["trace_id"] = t.hex()
    if sp:
        f["span_id"] = sp.hex()
    if e.headroom:
        f["headroom"] = str(e.headroom)
    return f


# --- decoding ----------------------------------------------------------------------------


class _Reader:
    __slots__ = ("b", "i")

    def __init__(self, b):
        self.b = b
        self.i = 0

    def byte(self):
        if self.i >= len(self.b):
            raise DecodeError("truncated")
        c = self.b[self.i]
        self.i += 1
        return c

    def uvarint(self):
        x = 0
        for j in range(10):
            c = self.byte()
            if c < 0x80:
                if j == 9 and c > 1:
                    raise DecodeError("varint overflows 64 bits")
                return x | (c << (7 * j))
            x |= (c & 0x7F) << (7 * j)
        raise DecodeError("varint overflows 64 bits")

    def varint(self):
        ux = self.uvarint()
        x = ux >> 1
        if ux & 1:
            x = ~x
        return x

    def raw(self):
        """A length-prefixed string of bytes, as bytes."""
        n = self.uvarint()
        if n > MAX_STRING_LEN:
            raise DecodeError("string of %d bytes (max %d)" % (n, MAX_STRING_LEN))
        if len(self.b) - self.i < n:
            raise DecodeError("truncated")
        s = bytes(self.b[self.i:self.i + n])
        self.i += n
        return s

    def str(self):
        n = self.uvarint()
        if n > MAX_STRING_LEN:
            raise DecodeError("string of %d bytes (max %d)" % (n, MAX_STRING_LEN))
        if len(self.b) - self.i < n:
            raise DecodeError("truncated")
        s = self.b[self.i:self.i + n]
        self.i += n
        return _text(bytes(s))


def apply_ext(events, ext):
    """Sets the optional fields of a batch's events from its extension;
    raises DecodeError as Go's event.DecodeBatchExt rejects."""
    r = _Reader(memoryview(_b(ext)))
    nxt = 0
    while r.i < len(r.b):
        i = r.uvarint()
        n = r.uvarint()
        if i < nxt or i >= len(events):
            raise DecodeError("extension: record out of order or beyond the batch")
        if n > len(r.b) - r.i:
            raise DecodeError("extension: truncated")
        rec = _Reader(r.b[r.i:r.i + n])
        r.i += n
        nxt = i + 1
        e = events[i]
        while rec.i < len(rec.b):
            tag = rec.uvarint()
            v = rec.raw()
            if tag == 1 and len(v) == 16:
                e.trace_id = v
            elif tag == 2 and len(v) == 8:
                e.span_id = v
            elif tag == 3:
                x = _Reader(v)
                try:
                    h = x.uvarint()
                except DecodeError:
                    continue
                if x.i == len(v) and h < 1 << 63:
                    e.headroom = h


def _wrap64(x):
    """Wraps x to a signed 64-bit integer, as Go's int64 arithmetic does."""
    x &= _U64
    return x - (1 << 64) if x >= 1 << 63 else x


def decode_batch(batch, n):
    """Returns the n events of a packed batch; raises DecodeError as Go's
    event.DecodeBatch rejects (the whole batch or nothing)."""
    if n > MAX_BATCH_EVENTS or len(batch) > MAX_BATCH_BYTES:
        raise DecodeError("entry too large: %d events in %d bytes" % (n, len(batch)))
    r = _Reader(memoryview(_b(batch)))
    out = []
    prev = 0
    for i in range(n):
        code = r.byte()
        flags = r.byte()
        e = Event(TYPE_NAMES.get(code, code))
        e.degraded = bool(flags & _FLAG_DEGRADED)
        e.passive = bool(flags & _FLAG_PASSIVE)
        e.key, e.owner, e.lease, e.reason, e.holder, e.by = (r.str() for _ in range(6))
        e.ts = _wrap64(prev + r.varint())
        e.wait, e.hold, e.ttl, e.attempts, e.fence, e.count = (r.varint() for _ in range(6))
        if e.ttl > (1 << 63) // 1000000:
            raise DecodeError("event %d of %d: ttl overflows" % (i, n))
        if min(e.wait, e.hold, e.ttl, e.attempts, e.count) < 0:
            raise DecodeError("event %d of %d: negative duration or count" % (i, n))
        if code not in TYPE_NAMES:
            raise DecodeError("event %d of %d: unknown type %d" % (i, n, code))
        prev = e.ts
        out.append(e)
    if r.i != len(r.b):
        raise DecodeError("%d trailing bytes after %d events" % (len(r.b) - r.i, n))
    return out


def _int(s, name):
    s = _b(s).decode("ascii", "replace")
    digits = s[1:] if s[:1] in ("-", "+") else s
    if not (digits.isascii() and digits.isdigit()):
        raise DecodeError("field %r: %.32r is not an integer" % (name, s))
    v = int(s)
    if not -(1 << 63) <= v < 1 << 63:
        raise DecodeError("field %r: %.32r overflows 64 bits" % (name, s))
    return v


def decode(entry):
    """Decodes one stream entry (a dict of field to value, str or bytes keys
    and values, as redis-py returns it) into a list of events. Unknown
    fields are ignored; a bad entry raises DecodeError."""
    f = {_b(k).decode("utf-8", "replace"): _b(v) if not isinstance(v, int) else str(v).encode()
         for k, v in entry.items()}
    if "v" not in f:
        raise DecodeError("no 'v' field")
    v = _int(f["v"], "v")
    if v < 1:
        raise DecodeError("bad version %d" % v)
    if v > VERSION:
        raise DecodeError("unsupported schema version %d (this decoder reads up to %d)" % (v, VERSION))
    if "batch" in f:
        n = _int(f.get("n", b""), "n")
        if n < 0:
            raise DecodeError("bad batch count %d" % n)
        ext = f.get("x", b"")
        if len(ext) > MAX_BATCH_BYTES:
            raise DecodeError("entry too large: extension of %d bytes" % len(ext))
        events = decode_batch(f["batch"], n)
        if ext:
            apply_ext(events, ext)
        return events
    if "type" not in f:
        raise DecodeError("no 'type' field")
    t = f["type"].decode("utf-8", "replace")
    if t not in TYPES:
        raise DecodeError("unknown event type %.32r" % t)
    if "key" not in f:
        raise DecodeError("no 'key' field")
    e = Event(t)
    for name in _STRINGS:
        if name in f:
            if len(f[name]) > MAX_STRING_LEN:
                raise DecodeError("field of %d bytes (max %d)" % (len(f[name]), MAX_STRING_LEN))
            setattr(e, name, _text(f[name]))
    for name in ("ts", "fence", "count"):
        if name in f:
            setattr(e, name, _int(f[name], name))
    for name, limit in (("wait", 1 << 63), ("hold", 1 << 63), ("ttl", (1 << 63) // 1000000), ("attempts", 1 << 63)):
        if name in f:
            x = _int(f[name], name)
            if x < 0 or x >= limit:
                raise DecodeError("field %r: %d is not a non-negative duration" % (name, x))
            setattr(e, name, x)
    e.degraded = f.get("degraded") in (b"1", b"true")
    e.passive = f.get("passive") in (b"1", b"true")
    # Trace ids are advisory: one that does not parse is left out.
    e.trace_id = _valid(_id(f.get("trace_id", b"").decode("ascii", "replace"), 16), 16)
    e.span_id = _valid(_id(f.get("span_id", b"").decode("ascii", "replace"), 8), 8)
    if "headroom" in f:
        e.headroom = _int(f["headroom"], "headroom")
        if e.headroom < 0:
            raise DecodeError("field 'headroom': %d is not a non-negative duration" % e.headroom)
    if e.ts <= 0:
        raise DecodeError("missing or non-positive 'ts'")
    return [e]


# --- partitions (event/partition.go) ----------------------------------------------------


def partition_of(key, n):
    """Returns the partition of lock key's events among n: FNV-1a 32 of the
    key's bytes, mod n."""
    if n <= 1:
        return 0
    n = min(n, MAX_PARTITIONS)
    h = 2166136261
    for c in _b(key):
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h % n


def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
        table.append(crc)
    return table


_CRC16 = _crc16_table()


def _crc16(b):
    """CRC-16/XMODEM, as Redis Cluster uses."""
    crc = 0
    for c in b:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ c]
    return crc


def slot(key):
    """Returns the Redis Cluster hash slot of key (honouring a hash tag)."""
    b = _b(key)
    i = b.find(b"{")
    if i >= 0:
        j = b.find(b"}", i + 1)
        if j > i + 1:
            b = b[i + 1:j]
    return _crc16(b) % 16384


def streams(base=DEFAULT_STREAM, n=1):
    """Returns the stream keys of n partitions of base, as Go's event.Streams."""
    return list(_streams(base or DEFAULT_STREAM, n))


@functools.lru_cache(maxsize=64)
def _streams(base, n):
    if n <= 1:
        return (base,)
    n = min(n, MAX_PARTITIONS)
    out = []
    for p in range(n):
        lo, hi = p * 16384 // n, (p + 1) * 16384 // n
        s = 0
        while True:
            tag = "p%d.%d" % (p, s)
            if lo <= slot(tag) < hi:
                break
            s += 1
        out.append("%s:{%s}" % (base, tag))
    return tuple(out)
