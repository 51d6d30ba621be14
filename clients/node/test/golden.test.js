"use strict";
// Cross-language golden files (event/testdata/golden): this package writes
// node.packed, node.ext and node.single.json, and decodes Go's and Python's
// files to the events of events.json; the Go side (event/golden_test.go)
// and the Python side (clients/python/tests/test_golden.py) decode Node's.
// Set LOCKSCOPE_UPDATE_GOLDEN=1 to rewrite the Node files.

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const ev = require("../lib/event");
const { GOLDEN, goldenEvents, parseJSON } = require("./helpers");

const UPDATE = process.env.LOCKSCOPE_UPDATE_GOLDEN === "1";

function read(name) {
  return fs.readFileSync(path.join(GOLDEN, name));
}

function writeOrCompare(name, got) {
  const p = path.join(GOLDEN, name);
  if (UPDATE) fs.writeFileSync(p, got);
  assert.ok(Buffer.compare(got, fs.readFileSync(p)) === 0, `${name} differs from what this package encodes (LOCKSCOPE_UPDATE_GOLDEN=1 if meant)`);
}

// singlesJSON is the JSON form of single-event entries, as the Python side
// writes it: field/value pairs in order, one entry per line, a value that is
// not UTF-8 as {"hex": ...}.
function singlesJSON(events) {
  const { isUtf8 } = require("node:buffer");
  const lines = events.map((e) => {
    const f = ev.fields(e);
    const pairs = [];
    for (let i = 0; i < f.length; i += 2) {
      let v = f[i + 1];
      if (Buffer.isBuffer(v)) v = isUtf8(v) ? v.toString("utf8") : { hex: v.toString("hex") };
      pairs.push([f[i], v]);
    }
    return JSON.stringify(pairs);
  });
  return Buffer.from("[\n" + lines.join(",\n") + "\n]\n", "utf8");
}

function readSingles(name) {
  return JSON.parse(read(name).toString("utf8")).map((pairs) => {
    const flat = [];
    for (const [k, v] of pairs) flat.push(k, typeof v === "object" ? Buffer.from(v.hex, "hex") : Buffer.from(v, "utf8"));
    return flat;
  });
}

test("the golden events hold every type", () => {
  const events = goldenEvents();
  assert.deepEqual(new Set(events.map((e) => e.type)), new Set(Object.keys(ev.TYPES)));
});

test("node encoding is golden", () => {
  const events = goldenEvents();
  writeOrCompare("node.packed", ev.pack(events));
  writeOrCompare("node.ext", ev.packExt(events));
  writeOrCompare("node.single.json", singlesJSON(events));
});

test("packed bytes are Go's and Python's, byte for byte", () => {
  const events = goldenEvents();
  for (const lang of ["go", "python"]) {
    assert.ok(ev.pack(events).equals(read(`${lang}.packed`)), `${lang}.packed`);
    assert.ok(ev.packExt(events).equals(read(`${lang}.ext`)), `${lang}.ext`);
  }
  assert.ok(read("go.ext").length > 0);
  const entries = ev.packEntries(events);
  assert.equal(entries.length, 1);
  assert.equal(entries[0].n, events.length);
  assert.ok(entries[0].batch.equals(read("go.packed")) && entries[0].ext.equals(read("go.ext")));
});

for (const lang of ["go", "python"]) {
  test(`decodes ${lang}.packed with and without its extension`, () => {
    const want = goldenEvents();
    const got = ev.decode(["v", "1", "n", String(want.length), "batch", read(`${lang}.packed`), "x", read(`${lang}.ext`)]);
    assert.deepEqual(got, want);
    assert.ok(Buffer.isBuffer(got[3].key) && got[3].key.equals(Buffer.from("fffe6b", "hex")));
    assert.equal(got[0].traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert.equal(got[4].headroom, 19750000000);
    assert.equal(got[8].fence, 9223372036854775807n);
    // Without the extension: the same events, without their optional fields.
    const bare = ev.decode({ v: "1", n: String(want.length), batch: read(`${lang}.packed`) });
    assert.deepEqual(bare.map((e) => [e.traceId, e.spanId, e.headroom]), want.map(() => ["", "", 0]));
    bare.forEach((e, i) => Object.assign(e, { traceId: want[i].traceId, spanId: want[i].spanId, headroom: want[i].headroom }));
    assert.deepEqual(bare, want);
  });

  test(`decodes ${lang}.single.json field for field`, () => {
    const want = goldenEvents();
    const entries = readSingles(`${lang}.single.json`);
    assert.deepEqual(entries.map((f) => ev.decode(f)[0]), want);
    // The same fields, in the same order, with the same bytes, as Node writes them.
    want.forEach((e, i) => {
      const mine = ev.fields(e).map((v, j) => (j % 2 === 0 || Buffer.isBuffer(v) ? v : Buffer.from(v, "utf8")));
      assert.deepEqual(mine, entries[i], `entry ${i}`);
    });
  });
}

test("node.single.json is python.single.json", () => {
  // Both write compact JSON without escaping what needs none (Go's
  // encoder escapes <, > and &): the same events, the same text.
  assert.ok(read("node.single.json").equals(read("python.single.json")));
});

test("partitions match Go's", () => {
  const doc = parseJSON(read("go.partitions.json").toString("utf8"));
  for (const [n, want] of Object.entries(doc.streams)) assert.deepEqual(ev.streams("lockscope:events", Number(n)), want, `streams(${n})`);
  assert.equal(doc.keys.length, 20);
  for (const k of doc.keys) assert.equal(ev.partitionOf(Buffer.from(k.key_hex, "hex"), k.n), k.partition, JSON.stringify(k));
});

test("the docs' example bytes", () => {
  // docs/events.md, "Packed batch entry": an acquired then a released event, 83 bytes.
  const b = ev.pack([
    { type: "acquired", key: "job:42", owner: "api/h1/7", lease: "L1", ts: 1700000000000000000n, wait: 1500000, ttl: 30000, attempts: 2, fence: 5 },
    { type: "released", key: "job:42", owner: "api/h1/7", lease: "L1", ts: 1700000000250000000n, hold: 250000000 },
  ]);
  assert.equal(b.length, 83);
  assert.equal(b.toString("hex"),
    "0100066a6f623a3432086170692f68312f37024c31000000" + "8080d0e2c6bfce972f" + "c08db701" + "00" + "e0d403" + "040a00" +
    "0300066a6f623a3432086170692f68312f37024c31000000" + "80cab5ee01" + "0080cab5ee0100000000");
  // The extension example: event 2 with a trace id, a span id and 300 ns of headroom.
  const x = ev.packExt([{ type: "renewed" }, { type: "renewed" }, { type: "renewed", traceId: "aa0000000000000000000000000000bb", spanId: "00000000000000cc", headroom: 300 }]);
  assert.equal(x.toString("hex"), "0220" + "0110aa0000000000000000000000000000bb" + "020800000000000000cc" + "0302ac02");
});

test("extension rules as Go's", () => {
  const base = [{ type: "renewed", key: "k", ts: 1n }, { type: "renewed", key: "k", ts: 2n }];
  const entry = (x) => ({ v: "1", n: "2", batch: ev.pack(base), x: Buffer.from(x) });
  // Unknown tags and known tags of another length are skipped.
  const got = ev.decode(entry([1, 12, 7, 2, 0xab, 0xcd, 1, 3, 1, 2, 3, 3, 1, 5]));
  assert.deepEqual([got[1].traceId, got[1].headroom], ["", 5]);
  for (const bad of [[2, 0], [1, 0, 0, 0], [0, 5, 1]]) { // beyond, out of order, cut short
    assert.throws(() => ev.decode(entry(bad)), (e) => e instanceof ev.DecodeError && /extension/.test(e.message), JSON.stringify(bad));
  }
  // Bad trace ids in single entries are left out, the event kept.
  const f = ev.fields({ type: "acquired", key: "k", ts: 1n });
  const e = ev.decode([...f, "trace_id", "00000000000000000000000000000000", "span_id", "xyz", "headroom", "7"])[0];
  assert.deepEqual([e.traceId, e.spanId, e.headroom], ["", "", 7]);
  assert.throws(() => ev.decode([...f, "headroom", "-1"]), /headroom/);
});

const rejects = [
  [{ type: "acquired", key: "k", ts: "1" }, /no 'v'/],
  [{ v: "99", type: "acquired", key: "k", ts: "1" }, /unsupported schema version/],
  [{ v: "x" }, /not an integer/],
  [{ v: "1", type: "exploded", key: "k", ts: "1" }, /unknown event type/],
  [{ v: "1", type: "constructor", key: "k", ts: "1" }, /unknown event type/],
  [{ v: "1", type: "acquired", ts: "1" }, /no 'key'/],
  [{ v: "1", type: "acquired", key: "k" }, /non-positive 'ts'/],
  [{ v: "1", type: "acquired", key: "k", ts: "1", fence: "NaN" }, /not an integer/],
  [{ v: "1", type: "acquired", key: "k", ts: "1", wait: "-5" }, /non-negative/],
  [{ v: "1", type: "acquired", key: "k", ts: "1", ttl: "9223372036854" }, /non-negative/],
  [{ v: "1", type: "acquired", key: "k", ts: "99999999999999999999" }, /overflows/],
  [{ v: "1", type: "acquired", key: "x".repeat(ev.MAX_STRING_LEN + 1), ts: "1" }, /max 65536/],
  [{ v: "1", n: "1", batch: Buffer.concat([Buffer.from([1, 0]), Buffer.alloc(9, 0xff), Buffer.from([2])]) }, /overflows/],
  [{ v: "1", n: "10001", batch: "" }, /too large/],
  [{ v: "1", n: "-1", batch: "" }, /bad batch count/],
];
for (const [entry, message] of rejects) {
  test(`decode rejects ${JSON.stringify(entry).slice(0, 60)} as Go does`, () => {
    assert.throws(() => ev.decode(entry), (e) => e instanceof ev.DecodeError && message.test(e.message));
  });
}

test("decode rejects truncated and miscounted batches", () => {
  const events = goldenEvents();
  const good = ev.pack(events);
  const n = events.length;
  for (const [batch, count] of [[good.subarray(0, good.length - 3), n], [good, n + 1], [good, n - 1]]) {
    assert.throws(() => ev.decode({ v: "1", n: String(count), batch }), ev.DecodeError);
  }
  const badType = Buffer.concat([Buffer.from([99]), ev.pack(events.slice(0, 1)).subarray(1)]);
  assert.throws(() => ev.decode({ v: "1", n: "1", batch: badType }), /unknown type 99/);
  const negative = ev.pack([{ type: "released", key: "k", ts: 1n, hold: -1 }]);
  assert.throws(() => ev.decode({ v: "1", n: "1", batch: negative }), /negative/);
});

test("packEntries splits at the decoder's limits and the emitter's", () => {
  const events = Array.from({ length: ev.MAX_BATCH_EVENTS + 5 }, (_, i) => ({ type: "acquired", key: "k" + i, ts: BigInt(i + 1) }));
  const decodeAll = (entries) => entries.flatMap(({ n, batch, ext }) => ev.decode(ev.packedFields(n, batch, ext)));
  const norm = (es) => es.map((e) => [e.type, e.key, e.ts, e.traceId || "", e.headroom || 0]);
  let entries = ev.packEntries(events);
  assert.deepEqual(entries.map((e) => e.n), [ev.MAX_BATCH_EVENTS, 5]);
  assert.deepEqual(norm(decodeAll(entries)), norm(events));
  // The extension splits with its batch; indexes restart in each entry.
  events[0].headroom = 1;
  events[events.length - 1].traceId = "01".repeat(16);
  entries = ev.packEntries(events);
  assert.deepEqual(entries.map((e) => e.ext.length > 0), [true, true]);
  assert.deepEqual(norm(decodeAll(entries)), norm(events));
  const big = Array.from({ length: 150 }, () => ({ type: "released", key: "x".repeat(60000), ts: 1n })); // 9 MB
  entries = ev.packEntries(big);
  assert.deepEqual(entries.map((e) => e.n), [139, 11]);
  assert.ok(entries.every((e) => e.batch.length <= ev.MAX_BATCH_BYTES));
  // The emitter's bound: four of these events to an entry of at most ENTRY_BYTES.
  entries = ev.packEntries(big, ev.ENTRY_BYTES);
  assert.deepEqual(entries.map((e) => e.n), [...Array(37).fill(4), 2]);
  assert.ok(entries.every((e) => e.batch.length <= ev.ENTRY_BYTES));
  assert.equal(decodeAll(entries).length, 150);
});

test("integers beyond 2^53 round trip exactly", () => {
  const e = { type: "renewed", key: "k", ts: 1700000000000000123n, fence: -9223372036854775808n, hold: 2 ** 60 };
  const [got] = ev.decode(ev.packedFields(1, ev.pack([e]), ev.packExt([e])));
  assert.equal(got.ts, 1700000000000000123n);
  assert.equal(got.fence, -9223372036854775808n);
  assert.equal(got.hold, 1152921504606846976n);
  const [single] = ev.decode(ev.fields(e));
  assert.deepEqual([single.ts, single.fence, single.hold], [got.ts, got.fence, got.hold]);
});
