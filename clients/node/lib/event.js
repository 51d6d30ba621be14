"use strict";
// The lockscope wire format: event types, the two entry shapes, partitions.
//
// This is the Node twin of the Go package event (docs/events.md) and of the
// Python lockscope.event: pack() writes byte for byte what Go's event.Pack
// writes, and decode() reads what Go's event.Decode reads, with the same
// limits.
//
// An event is a plain object in the wire's units: ts is Unix nanoseconds (a
// bigint: nanoseconds since 1970 pass 2^53); wait, hold and headroom are
// nanoseconds and ttl milliseconds (numbers); fence a number or a bigint;
// key, owner, lease, reason, holder and by are strings (UTF-8) or Buffers
// (a lock key is arbitrary bytes); traceId and spanId are 32 and 16 hex
// digits ("" or absent: none).

const VERSION = 1;
const DEFAULT_STREAM = "lockscope:events";

// Limits of one entry (event/codec.go): a decoder rejects an entry over them.
const MAX_BATCH_EVENTS = 10000;
const MAX_STRING_LEN = 1 << 16;
const MAX_BATCH_BYTES = 8 << 20;
// The most bytes of events the emitter puts in one entry (an event longer
// than that goes alone), as the Go StreamSink: about 1 ms of Redis's time.
const ENTRY_BYTES = 256 << 10;
const MAX_PARTITIONS = 1024;

// Wire type codes, in the order of Go's event.Type.
const TYPES = Object.freeze(Object.assign(Object.create(null), {
  acquired: 1,
  failed: 2,
  released: 3,
  renewed: 4,
  renew_failed: 5,
  lost: 6,
  expired: 7,
  forced: 8,
  dropped: 9,
  waiting: 10,
  requested: 11,
  fence_rejected: 12,
}));
const TYPE_NAMES = Object.freeze(Object.assign(Object.create(null), Object.fromEntries(Object.entries(TYPES).map(([n, c]) => [c, n]))));

// Reasons the Go library uses (event/event.go).
const REASON_TIMEOUT = "timeout";
const REASON_CANCELED = "canceled";
const REASON_ERROR = "error";
const REASON_HELD = "held";
const REASON_NOT_OWNER = "not_owner";

const STRINGS = ["key", "owner", "lease", "reason", "holder", "by"];
const FLAG_DEGRADED = 0x01;
const FLAG_PASSIVE = 0x02;
const U64 = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;
const TTL_MAX = (1n << 63n) / 1000000n; // ms that fit in int64 ns

/** DecodeError is an entry the collector would count as malformed and skip. */
class DecodeError extends Error {
  constructor(message) {
    super(message);
    this.name = "DecodeError";
  }
}

// --- writing --------------------------------------------------------------------------

/** Writer is a growable byte buffer. */
class Writer {
  constructor(size = 256) {
    this.buf = Buffer.allocUnsafe(size);
    this.len = 0;
  }

  ensure(n) {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const b = Buffer.allocUnsafe(size);
    this.buf.copy(b, 0, 0, this.len);
    this.buf = b;
  }

  byte(c) {
    this.ensure(1);
    this.buf[this.len++] = c;
  }

  // uvarint writes x >= 0, a number (exact up to 2^54: zigzag doubles 2^53) or a bigint.
  uvarint(x) {
    this.ensure(10);
    if (typeof x === "bigint") {
      while (x >= 0x80n) {
        this.buf[this.len++] = Number(x & 0x7fn) | 0x80;
        x >>= 7n;
      }
      this.buf[this.len++] = Number(x);
      return;
    }
    while (x >= 0x80) {
      this.buf[this.len++] = (x % 0x80) | 0x80;
      x = Math.floor(x / 0x80);
    }
    this.buf[this.len++] = x;
  }

  // varint writes a signed 64-bit integer zigzag-mapped, as Go's binary.AppendVarint.
  varint(x) {
    if (typeof x === "bigint") {
      if (x < I64_MIN || x > I64_MAX) throw new RangeError("lockscope: " + x + " overflows int64");
      this.uvarint(((x << 1n) ^ (x >> 63n)) & U64);
    } else if (Number.isSafeInteger(x)) {
      this.uvarint(x >= 0 ? x * 2 : -x * 2 - 1);
    } else {
      this.varint(BigInt(Math.trunc(x))); // a fraction is cut; NaN or Infinity throw here
    }
  }

  string(s) {
    if (typeof s === "string") {
      // Short ASCII strings (keys, owners, leases) are copied here: a call
      // into Buffer's native write costs more than the copy.
      if (s.length < 128 && ascii(s)) {
        const n = s.length;
        this.ensure(n + 1);
        const b = this.buf;
        let j = this.len;
        b[j++] = n;
        for (let i = 0; i < n; i++) b[j++] = s.charCodeAt(i);
        this.len = j;
        return;
      }
      const n = Buffer.byteLength(s);
      this.uvarint(n);
      this.ensure(n);
      this.len += this.buf.write(s, this.len, "utf8");
    } else {
      this.uvarint(s.length);
      this.ensure(s.length);
      s.copy(this.buf, this.len);
      this.len += s.length;
    }
  }

  bytes() {
    return this.buf.subarray(0, this.len);
  }
}

function ascii(s) {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) >= 0x80) return false;
  return true;
}

function str(s) {
  return s === undefined || s === null ? "" : s;
}

function int(x) {
  return x === undefined || x === null ? 0 : x;
}

// tsDelta returns ts - prev (bigints) as a number when it is exact, else a bigint.
function tsDelta(ts, prev) {
  const d = BigInt(ts) - prev;
  return d >= -0x1fffffffffffffn && d <= 0x1fffffffffffffn ? Number(d) : d;
}

/** appendPacked appends the packed encoding of e to w (a Writer); prevTs is
 * the ts (bigint) of the previous event of the same batch (0n for the first).
 * It returns e's ts as a bigint. */
function appendPacked(w, e, prevTs) {
  const code = TYPES[e.type];
  if (code === undefined) throw new TypeError("lockscope: unknown event type " + JSON.stringify(e.type));
  w.byte(code);
  w.byte((e.degraded ? FLAG_DEGRADED : 0) | (e.passive ? FLAG_PASSIVE : 0));
  w.string(str(e.key));
  w.string(str(e.owner));
  w.string(str(e.lease));
  w.string(str(e.reason));
  w.string(str(e.holder));
  w.string(str(e.by));
  const ts = BigInt(int(e.ts));
  w.varint(tsDelta(ts, prevTs));
  w.varint(int(e.wait));
  w.varint(int(e.hold));
  w.varint(int(e.ttl));
  w.varint(int(e.attempts));
  w.varint(int(e.fence));
  w.varint(int(e.count));
  return ts;
}

// idBytes returns the id (hex string or Buffer) as n bytes, or null when it
// is not a set id of that length (W3C: all zeros is none).
function idBytes(v, n) {
  if (!v) return null;
  let b = v;
  if (typeof v === "string") {
    if (v.length !== 2 * n || !/^[0-9a-fA-F]*$/.test(v)) return null;
    b = Buffer.from(v, "hex");
  }
  if (b.length !== n) return null;
  for (const c of b) if (c !== 0) return b;
  return null;
}

/** hasExt reports whether e has optional fields, which a packed entry
 * carries in its extension. */
function hasExt(e) {
  return !!((e.traceId && idBytes(e.traceId, 16)) || (e.spanId && idBytes(e.spanId, 8)) || e.headroom > 0);
}

/** appendExt appends to w the extension record of event i of a batch, if e
 * has optional fields (as Go's event.AppendExt). */
function appendExt(w, i, e) {
  const t = e.traceId ? idBytes(e.traceId, 16) : null;
  const sp = e.spanId ? idBytes(e.spanId, 8) : null;
  const h = e.headroom > 0 ? e.headroom : 0;
  if (!t && !sp && !h) return;
  const items = new Writer(48);
  if (t) {
    items.byte(1);
    items.byte(16);
    items.ensure(16);
    t.copy(items.buf, items.len);
    items.len += 16;
  }
  if (sp) {
    items.byte(2);
    items.byte(8);
    items.ensure(8);
    sp.copy(items.buf, items.len);
    items.len += 8;
  }
  if (h) {
    const v = new Writer(10);
    v.uvarint(typeof h === "bigint" ? h : Math.trunc(h));
    items.byte(3);
    items.byte(v.len);
    items.ensure(v.len);
    v.buf.copy(items.buf, items.len, 0, v.len);
    items.len += v.len;
  }
  w.uvarint(i);
  w.uvarint(items.len);
  w.ensure(items.len);
  items.buf.copy(w.buf, w.len, 0, items.len);
  w.len += items.len;
}

/** pack returns the packed batch of events (a Buffer), as Go's event.Pack. */
function pack(events) {
  const w = new Writer(64 * events.length + 64);
  let prev = 0n;
  for (const e of events) prev = appendPacked(w, e, prev);
  return Buffer.from(w.bytes());
}

/** packExt returns the extension of a batch of events (an empty Buffer when
 * none has optional fields). */
function packExt(events) {
  const w = new Writer(64);
  events.forEach((e, i) => appendExt(w, i, e));
  return Buffer.from(w.bytes());
}

/** packEntries packs events into one or more entries, {n, batch, ext},
 * starting a new entry where one would pass maxBytes of batch (a decoder's
 * limit by default; the emitter passes ENTRY_BYTES, as the Go StreamSink
 * does) or MAX_BATCH_EVENTS events. ext is empty when no event of the entry
 * has optional fields. */
function packEntries(events, maxBytes = MAX_BATCH_BYTES) {
  const entries = [];
  let w = new Writer(Math.min(64 * events.length + 64, maxBytes + 1024));
  let x = new Writer(64);
  let first = 0;
  let prev = 0n;
  for (let i = 0; i < events.length; i++) {
    const e = events[i];
    const mark = w.len;
    const xmark = x.len;
    prev = appendPacked(w, e, prev);
    const ext = hasExt(e);
    if (ext) appendExt(x, i - first, e);
    if (i > first && (w.len > maxBytes || i - first === MAX_BATCH_EVENTS)) {
      entries.push({ n: i - first, batch: Buffer.from(w.buf.subarray(0, mark)), ext: Buffer.from(x.buf.subarray(0, xmark)) });
      w = new Writer(Math.min(64 * (events.length - i) + 64, maxBytes + 1024));
      x = new Writer(64);
      prev = appendPacked(w, e, 0n);
      if (ext) appendExt(x, 0, e);
      first = i;
    }
  }
  if (events.length > 0) entries.push({ n: events.length - first, batch: Buffer.from(w.bytes()), ext: Buffer.from(x.bytes()) });
  return entries;
}

/** packedFields returns the field/value list of a packed entry, ready for
 * XADD; an empty extension adds no field. */
function packedFields(n, batch, ext) {
  const f = ["v", "1", "n", String(n), "batch", batch];
  if (ext && ext.length > 0) f.push("x", ext);
  return f;
}

// intString writes an integer in decimal, exactly (a number past 2^53 too).
function intString(v) {
  return typeof v === "bigint" ? v.toString() : BigInt(Math.trunc(v)).toString();
}

/** fields returns the field/value list of a single-event entry for e, ready
 * for XADD, with zero-valued optional fields left out (as Go's
 * event.AppendFields). Values are strings or Buffers. */
function fields(e) {
  if (TYPES[e.type] === undefined) throw new TypeError("lockscope: unknown event type " + JSON.stringify(e.type));
  const f = ["v", "1", "type", e.type, "key", str(e.key)];
  if (str(e.owner).length) f.push("owner", e.owner);
  if (str(e.lease).length) f.push("lease", e.lease);
  f.push("ts", String(int(e.ts)));
  for (const name of ["wait", "hold", "ttl", "attempts", "fence", "count"]) {
    const v = int(e[name]);
    if (v !== 0 && v !== 0n) f.push(name, intString(v));
  }
  for (const name of ["reason", "holder", "by"]) {
    if (str(e[name]).length) f.push(name, e[name]);
  }
  if (e.degraded) f.push("degraded", "1");
  if (e.passive) f.push("passive", "1");
  const t = e.traceId ? idBytes(e.traceId, 16) : null;
  if (t) f.push("trace_id", t.toString("hex"));
  const sp = e.spanId ? idBytes(e.spanId, 8) : null;
  if (sp) f.push("span_id", sp.toString("hex"));
  if (e.headroom > 0) f.push("headroom", intString(e.headroom));
  return f;
}

// --- reading --------------------------------------------------------------------------

const { isUtf8 } = require("node:buffer");

// text returns decoded bytes as a string when they are UTF-8, else as a Buffer.
function text(b) {
  return isUtf8(b) ? b.toString("utf8") : Buffer.from(b);
}

function small(x) {
  return x >= -0x1fffffffffffffn && x <= 0x1fffffffffffffn ? Number(x) : x;
}

class Reader {
  constructor(b) {
    this.b = b;
    this.i = 0;
  }

  byte() {
    if (this.i >= this.b.length) throw new DecodeError("truncated");
    return this.b[this.i++];
  }

  // uvarint returns a bigint, as Go's binary.Uvarint (at most 10 bytes, 64 bits).
  uvarint() {
    let x = 0n;
    for (let j = 0; j < 10; j++) {
      const c = this.byte();
      if (c < 0x80) {
        if (j === 9 && c > 1) throw new DecodeError("varint overflows 64 bits");
        return x | (BigInt(c) << BigInt(7 * j));
      }
      x |= BigInt(c & 0x7f) << BigInt(7 * j);
    }
    throw new DecodeError("varint overflows 64 bits");
  }

  varint() {
    const ux = this.uvarint();
    let x = ux >> 1n;
    if (ux & 1n) x = ~x;
    return x;
  }

  raw() {
    const n = this.uvarint();
    if (n > BigInt(MAX_STRING_LEN)) throw new DecodeError(`string of ${n} bytes (max ${MAX_STRING_LEN})`);
    if (BigInt(this.b.length - this.i) < n) throw new DecodeError("truncated");
    const s = this.b.subarray(this.i, this.i + Number(n));
    this.i += Number(n);
    return s;
  }
}

function wrap64(x) {
  return BigInt.asIntN(64, x);
}

function buf(v) {
  if (Buffer.isBuffer(v)) return v;
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  return Buffer.from(String(v), "utf8");
}

/** applyExt sets the optional fields of a batch's events from its
 * extension; it throws DecodeError as Go's event.DecodeBatchExt rejects. */
function applyExt(events, ext) {
  const r = new Reader(buf(ext));
  let next = 0;
  while (r.i < r.b.length) {
    const i = r.uvarint();
    const n = r.uvarint();
    if (i < BigInt(next) || i >= BigInt(events.length)) throw new DecodeError("extension: record out of order or beyond the batch");
    if (n > BigInt(r.b.length - r.i)) throw new DecodeError("extension: truncated");
    const rec = new Reader(r.b.subarray(r.i, r.i + Number(n)));
    r.i += Number(n);
    next = Number(i) + 1;
    const e = events[Number(i)];
    while (rec.i < rec.b.length) {
      const tag = rec.uvarint();
      const v = rec.raw();
      if (tag === 1n && v.length === 16) {
        if (idBytes(v, 16)) e.traceId = v.toString("hex");
      } else if (tag === 2n && v.length === 8) {
        if (idBytes(v, 8)) e.spanId = v.toString("hex");
      } else if (tag === 3n) {
        const x = new Reader(v);
        let h;
        try {
          h = x.uvarint();
        } catch {
          continue;
        }
        if (x.i === v.length && h < 1n << 63n) e.headroom = small(h);
      }
    }
  }
}

function emptyEvent(type) {
  return {
    type, key: "", owner: "", lease: "", ts: 0n, wait: 0, hold: 0, ttl: 0, attempts: 0, fence: 0,
    reason: "", count: 0, holder: "", by: "", degraded: false, passive: false, traceId: "", spanId: "", headroom: 0,
  };
}

/** decodeBatch returns the n events of a packed batch; it throws
 * DecodeError as Go's event.DecodeBatch rejects (the whole batch or
 * nothing). */
function decodeBatch(batch, n) {
  batch = buf(batch);
  if (n > MAX_BATCH_EVENTS || batch.length > MAX_BATCH_BYTES) {
    throw new DecodeError(`entry too large: ${n} events in ${batch.length} bytes`);
  }
  const r = new Reader(batch);
  const out = [];
  let prev = 0n;
  for (let i = 0; i < n; i++) {
    const code = r.byte();
    const flags = r.byte();
    const e = emptyEvent(TYPE_NAMES[code] || code);
    e.degraded = !!(flags & FLAG_DEGRADED);
    e.passive = !!(flags & FLAG_PASSIVE);
    for (const name of STRINGS) e[name] = text(r.raw());
    e.ts = wrap64(prev + r.varint());
    const ints = {};
    for (const name of ["wait", "hold", "ttl", "attempts", "fence", "count"]) ints[name] = r.varint();
    if (ints.ttl > TTL_MAX) throw new DecodeError(`event ${i} of ${n}: ttl overflows`);
    for (const name of ["wait", "hold", "ttl", "attempts", "count"]) {
      if (ints[name] < 0n) throw new DecodeError(`event ${i} of ${n}: negative duration or count`);
    }
    if (TYPE_NAMES[code] === undefined) throw new DecodeError(`event ${i} of ${n}: unknown type ${code}`);
    for (const name in ints) e[name] = small(ints[name]);
    prev = e.ts;
    out.push(e);
  }
  if (r.i !== batch.length) throw new DecodeError(`${batch.length - r.i} trailing bytes after ${n} events`);
  return out;
}

function parseInt64(v, name) {
  const s = buf(v).toString("latin1");
  if (!/^[-+]?[0-9]+$/.test(s)) throw new DecodeError(`field ${JSON.stringify(name)}: ${JSON.stringify(s.slice(0, 32))} is not an integer`);
  const x = BigInt(s);
  if (x < I64_MIN || x > I64_MAX) throw new DecodeError(`field ${JSON.stringify(name)}: ${JSON.stringify(s.slice(0, 32))} overflows 64 bits`);
  return x;
}

// entryMap turns an entry (an object of field to value, a Map, or a flat
// [field, value, ...] list as ioredis's xrange returns it) into a Map of
// field name to Buffer.
function entryMap(entry) {
  const m = new Map();
  if (Array.isArray(entry)) {
    for (let i = 0; i + 1 < entry.length; i += 2) m.set(buf(entry[i]).toString("utf8"), buf(entry[i + 1]));
  } else if (entry instanceof Map) {
    for (const [k, v] of entry) m.set(buf(k).toString("utf8"), buf(v));
  } else {
    for (const k of Object.keys(entry)) m.set(k, buf(entry[k]));
  }
  return m;
}

/** decode decodes one stream entry into a list of events. entry is an
 * object of field to value, a Map, or the flat [field, value, ...] list
 * ioredis returns (xrangeBuffer for binary keys). Unknown fields are
 * ignored; a bad entry throws DecodeError. */
function decode(entry) {
  const f = entryMap(entry);
  if (!f.has("v")) throw new DecodeError("no 'v' field");
  const v = parseInt64(f.get("v"), "v");
  if (v < 1n) throw new DecodeError(`bad version ${v}`);
  if (v > BigInt(VERSION)) throw new DecodeError(`unsupported schema version ${v} (this decoder reads up to ${VERSION})`);
  if (f.has("batch")) {
    const n = parseInt64(f.get("n") || Buffer.alloc(0), "n");
    if (n < 0n) throw new DecodeError(`bad batch count ${n}`);
    const ext = f.get("x") || Buffer.alloc(0);
    if (ext.length > MAX_BATCH_BYTES) throw new DecodeError(`entry too large: extension of ${ext.length} bytes`);
    if (n > BigInt(MAX_BATCH_EVENTS)) throw new DecodeError(`entry too large: ${n} events`);
    const events = decodeBatch(f.get("batch"), Number(n));
    if (ext.length) applyExt(events, ext);
    return events;
  }
  if (!f.has("type")) throw new DecodeError("no 'type' field");
  const t = f.get("type").toString("utf8");
  if (TYPES[t] === undefined) {
    throw new DecodeError(`unknown event type ${JSON.stringify(t.slice(0, 32))}`);
  }
  if (!f.has("key")) throw new DecodeError("no 'key' field");
  const e = emptyEvent(t);
  for (const name of STRINGS) {
    if (!f.has(name)) continue;
    const b = f.get(name);
    if (b.length > MAX_STRING_LEN) throw new DecodeError(`field of ${b.length} bytes (max ${MAX_STRING_LEN})`);
    e[name] = text(b);
  }
  if (f.has("ts")) e.ts = parseInt64(f.get("ts"), "ts");
  for (const name of ["fence", "count"]) if (f.has(name)) e[name] = small(parseInt64(f.get(name), name));
  for (const [name, limit] of [["wait", I64_MAX], ["hold", I64_MAX], ["ttl", TTL_MAX - 1n], ["attempts", I64_MAX]]) {
    if (!f.has(name)) continue;
    const x = parseInt64(f.get(name), name);
    if (x < 0n || x > limit) throw new DecodeError(`field ${JSON.stringify(name)}: ${x} is not a non-negative duration`);
    e[name] = small(x);
  }
  const flag = (name) => f.has(name) && ["1", "true"].includes(f.get(name).toString("latin1"));
  e.degraded = flag("degraded");
  e.passive = flag("passive");
  // Trace ids are advisory: one that does not parse is left out.
  const tid = f.has("trace_id") ? idBytes(f.get("trace_id").toString("latin1"), 16) : null;
  e.traceId = tid ? tid.toString("hex") : "";
  const sid = f.has("span_id") ? idBytes(f.get("span_id").toString("latin1"), 8) : null;
  e.spanId = sid ? sid.toString("hex") : "";
  if (f.has("headroom")) {
    const h = parseInt64(f.get("headroom"), "headroom");
    if (h < 0n) throw new DecodeError(`field 'headroom': ${h} is not a non-negative duration`);
    e.headroom = small(h);
  }
  if (e.ts <= 0n) throw new DecodeError("missing or non-positive 'ts'");
  return [e];
}

/** heldLeases returns the leases a waiting or acquired event's call holds
 * (its reason). */
function heldLeases(e) {
  if ((e.type !== "waiting" && e.type !== "acquired") || !e.reason) return [];
  return buf(e.reason).toString("utf8").split(",");
}

// --- partitions (event/partition.go) ------------------------------------------------------

/** partitionOf returns the partition of lock key's events among n: FNV-1a
 * 32 of the key's bytes, mod n. */
function partitionOf(key, n) {
  if (n <= 1) return 0;
  n = Math.min(n, MAX_PARTITIONS);
  let h = 2166136261;
  for (const c of buf(key)) h = Math.imul(h ^ c, 16777619) >>> 0;
  return h % n;
}

const CRC16 = (() => {
  const t = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let j = 0; j < 8; j++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    t[i] = crc;
  }
  return t;
})();

/** slot returns the Redis Cluster hash slot of key (honouring a hash tag). */
function slot(key) {
  let b = buf(key);
  const i = b.indexOf(0x7b); // {
  if (i >= 0) {
    const j = b.indexOf(0x7d, i + 1); // }
    if (j > i + 1) b = b.subarray(i + 1, j);
  }
  let crc = 0;
  for (const c of b) crc = ((crc << 8) & 0xffff) ^ CRC16[(crc >> 8) ^ c];
  return crc % 16384;
}

const streamsCache = new Map();

/** streams returns the stream keys of n partitions of base, as Go's
 * event.Streams. */
function streams(base = DEFAULT_STREAM, n = 1) {
  base = base || DEFAULT_STREAM;
  if (n <= 1) return [base];
  n = Math.min(n, MAX_PARTITIONS);
  const k = base + "\0" + n;
  let out = streamsCache.get(k);
  if (!out) {
    out = [];
    for (let p = 0; p < n; p++) {
      const lo = Math.floor((p * 16384) / n);
      const hi = Math.floor(((p + 1) * 16384) / n);
      let tag;
      for (let s = 0; ; s++) {
        tag = `p${p}.${s}`;
        const sl = slot(tag);
        if (sl >= lo && sl < hi) break;
      }
      out.push(`${base}:{${tag}}`);
    }
    if (streamsCache.size < 64) streamsCache.set(k, out);
  }
  return out.slice();
}

module.exports = {
  VERSION, DEFAULT_STREAM, MAX_BATCH_EVENTS, MAX_STRING_LEN, MAX_BATCH_BYTES, ENTRY_BYTES, MAX_PARTITIONS,
  TYPES, TYPE_NAMES, REASON_TIMEOUT, REASON_CANCELED, REASON_ERROR, REASON_HELD, REASON_NOT_OWNER,
  DecodeError, Writer, appendPacked, appendExt, hasExt, pack, packExt, packEntries, packedFields, fields,
  decode, decodeBatch, applyExt, heldLeases, partitionOf, slot, streams,
};
