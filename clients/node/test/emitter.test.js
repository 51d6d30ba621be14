"use strict";
// The emitter against a real Redis: the Go emitter's semantics (batching,
// dropping, reporting drops, close() bounds, retention), from Node.

const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { spawn } = require("node:child_process");
const { Emitter, StreamSink, MemorySink, TimeoutError, RETENTION_AHEAD_KEEP } = require("../lib/emitter");
const ev = require("../lib/event");
const { Server, waitFor, prefix, readStream, steps, goldenEvents } = require("./helpers");

let server;
let r;
test.before(async () => {
  server = await Server.start();
  r = server.client();
});
test.after(async () => {
  r.disconnect();
  await server.close();
});

function nowNs() {
  return BigInt(Date.now()) * 1000000n;
}

test("writes every field of every event in one packed entry", async (t) => {
  const stream = prefix(t) + "events";
  const want = goldenEvents();
  const e = new Emitter(r, { stream, owner: "test" });
  for (const x of want) e.record(x);
  await e.close();
  const { entries, events } = await readStream(r, stream);
  assert.equal(entries.length, 1);
  assert.deepEqual(events, want);
  // The entry is what Go's emitter writes: v, n, batch and the extension.
  const names = entries[0][1].filter((_, i) => i % 2 === 0).map(String);
  assert.deepEqual(names, ["v", "n", "batch", "x"]);
  assert.deepEqual(e.stats(), { recorded: want.length, sent: want.length, dropped: 0, batches: 1, errors: 0 });
});

test("one XADD per batch of batchSize events", async (t) => {
  const stream = prefix(t) + "events";
  const e = new Emitter(r, { stream, batchSize: 100, flushInterval: 100 });
  const ts = nowNs();
  for (let i = 0; i < 1000; i++) e.record({ type: "acquired", key: "k" + i, ts: ts + BigInt(i) });
  // Ten full batches go out without waiting for the interval.
  await waitFor("ten entries", async () => (await r.xlen(stream)) === 10);
  await e.close();
  const { events } = await readStream(r, stream);
  assert.deepEqual(events.map((x) => x.key), Array.from({ length: 1000 }, (_, i) => "k" + i));
  assert.equal(e.stats().batches, 10);
});

test("flushes by interval, and flush() waits for the write", async (t) => {
  const stream = prefix(t) + "events";
  const e = new Emitter(r, { stream, flushInterval: 20 });
  e.record({ type: "acquired", key: "a", ts: nowNs() });
  await waitFor("the interval's write", async () => (await r.xlen(stream)) === 1);
  e.record({ type: "released", key: "a", ts: nowNs(), hold: 5 });
  e.record({ type: "acquired", key: "b", ts: nowNs() });
  await e.flush();
  const { events } = await readStream(r, stream);
  assert.deepEqual(steps(events, "key"), [["acquired", "a"], ["released", "a"], ["acquired", "b"]]);
  await e.close();
  await e.flush(); // after close: at once
});

test("Redis away: record() never blocks, drops are counted and reported once it is back", async (t) => {
  const own = await Server.start();
  t.after(() => own.close());
  const c = own.client();
  const stream = "lockscope:events";
  const e = new Emitter(c, { owner: "emitter-test", flushInterval: 20, bufferSize: 1000, batchSize: 100, writeTimeout: 200 });
  const ts = nowNs();
  for (let i = 0; i < 10; i++) e.record({ type: "acquired", key: "before", ts: ts + BigInt(i) });
  await e.flush(5000);

  await own.stop();
  const n = 100000;
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) e.record({ type: "released", key: "during", ts: ts + BigInt(i), hold: 1000000 });
  const took = Number(process.hrtime.bigint() - start) / 1e6;
  assert.ok(took < 30000, `recording ${n} events while Redis is down took ${took} ms`);
  await assert.rejects(e.flush(5000));
  await waitFor("every event recorded while Redis is down to be counted dropped", () => e.stats().dropped === n);
  let st = e.stats();
  assert.equal(st.recorded, n + 10);
  assert.equal(st.sent, 10);
  assert.ok(st.errors > 0);

  await own.startAgain();
  // The restarted server kept nothing (no persistence): the report comes first.
  await waitFor("a dropped report after Redis is back", async () => (await c.xlen(stream).catch(() => 0)) > 0, 15000);
  let { events } = await readStream(c, stream);
  assert.deepEqual(steps(events, "owner", "count"), [["dropped", "emitter-test", n]]);
  assert.ok(events[0].ts >= ts);

  e.record({ type: "acquired", key: "after", ts });
  await e.close();
  ({ events } = await readStream(c, stream));
  assert.deepEqual(events.map((x) => x.key), ["", "after"]); // reported once
  st = e.stats();
  assert.equal(st.recorded, st.sent + st.dropped);
  assert.equal(st.sent, 11);
  c.disconnect();
});

// BlockingSink holds every write until released: a slow Redis.
class BlockingSink extends MemorySink {
  constructor() {
    super();
    this.entered = 0;
    this.gate = new Promise((r) => (this.open = r));
  }

  async write(events) {
    this.entered++;
    await this.gate;
    await super.write(events);
  }
}

test("drops when the buffer is full, and reports the drops", async () => {
  const sink = new BlockingSink();
  const e = new Emitter(null, { sink, owner: "o", bufferSize: 100, batchSize: 10, flushInterval: 10 });
  for (let i = 0; i < 10; i++) e.record({ type: "acquired", key: "k", ts: BigInt(i + 1) });
  await waitFor("the first write to start", () => sink.entered === 1);
  for (let i = 0; i < 200; i++) e.record({ type: "acquired", key: "k", ts: BigInt(i + 100) });
  // 10 in flight + 90 buffered: the rest is dropped.
  assert.equal(e.stats().dropped, 110);
  sink.open();
  await e.close();
  const dropped = sink.events.filter((x) => x.type === "dropped");
  assert.deepEqual(dropped.map((x) => [x.owner, x.count]), [["o", 110]]);
  const st = e.stats();
  assert.deepEqual([st.recorded, st.sent, st.dropped], [210, 100, 110]);
});

test("a failed write rejects flush() and counts its events dropped", async () => {
  const sink = { write: async () => Promise.reject(new Error("boom")) };
  const e = new Emitter(null, { sink, flushInterval: 10 });
  e.record({ type: "acquired", key: "k", ts: 1n });
  await assert.rejects(e.flush(), /boom/);
  assert.deepEqual(e.stats(), { recorded: 1, sent: 0, dropped: 1, batches: 0, errors: 1 });
  await assert.rejects(e.close(1000), /boom/);
});

test("drops events with a string over MAX_STRING_LEN", async () => {
  const sink = new MemorySink();
  const e = new Emitter(null, { sink });
  e.record({ type: "acquired", key: "x".repeat(ev.MAX_STRING_LEN + 1), ts: 1n });
  e.record({ type: "acquired", key: "é".repeat(ev.MAX_STRING_LEN / 2 + 1), ts: 1n }); // 2 bytes each
  e.record({ type: "acquired", key: "k", owner: Buffer.alloc(ev.MAX_STRING_LEN + 1), ts: 1n });
  e.record({ type: "acquired", key: "é".repeat(ev.MAX_STRING_LEN / 2), ts: 1n }); // exactly the limit
  await e.close();
  assert.equal(e.stats().dropped, 3);
  assert.equal(sink.events.filter((x) => x.type === "acquired").length, 1);
});

test("close() is bounded, and drops what it could not write", async () => {
  const sink = { write: () => new Promise(() => {}) }; // never answers
  const e = new Emitter(null, { sink, flushInterval: 10 });
  e.record({ type: "acquired", key: "k", ts: 1n });
  const start = Date.now();
  await assert.rejects(e.close(200), TimeoutError);
  assert.ok(Date.now() - start < 5000, `close(200) took ${Date.now() - start} ms`);
  e.record({ type: "acquired", key: "late", ts: 1n });
  assert.equal(e.stats().dropped, 1); // the late one; the first is still in flight
});

test("partitions: each key's events go to its stream", async (t) => {
  const base = prefix(t) + "events";
  const streams = ev.streams(base, 3);
  const e = new Emitter(r, { stream: base, partitions: 3 });
  const keys = ["workflow:123", "lock:payment:9f2c", "cron:nightly", "a", "b", "c", "d"];
  for (const k of keys) e.record({ type: "acquired", key: k, ts: nowNs() });
  await e.close();
  for (const [p, s] of streams.entries()) {
    const { events } = await readStream(r, s);
    assert.deepEqual(events.map((x) => x.key), keys.filter((k) => ev.partitionOf(k, 3) === p), s);
  }
});

test("maxLen trims by length", async (t) => {
  const stream = prefix(t) + "events";
  const e = new Emitter(r, { stream, maxLen: 10, batchSize: 1 });
  for (let i = 0; i < 500; i++) {
    e.record({ type: "acquired", key: "k", ts: BigInt(i + 1) });
    if (i % 50 === 0) await e.flush(5000);
  }
  await e.close();
  assert.ok((await r.xlen(stream)) < 200); // MAXLEN ~ trims whole nodes (100 entries each)
});

// fillOldAndRecent writes 300 entries two hours old and 300 one minute old,
// by the IDs' times (the stream's own clock), as other clients would have.
async function fillOldAndRecent(stream) {
  const [sec, usec] = await r.time();
  const nowMs = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
  const p = r.pipeline();
  for (let i = 0; i < 300; i++) p.xadd(stream, `${nowMs - 2 * 3600000}-${i}`, "other", "old");
  for (let i = 0; i < 300; i++) p.xadd(stream, `${nowMs - 60000}-${i}`, "other", "recent");
  await p.exec();
}

async function kinds(stream) {
  const out = { old: 0, recent: 0, ours: 0 };
  for (const [, f] of await r.xrange(stream, "-", "+")) out[f[0] === "other" ? f[1] : "ours"]++;
  return out;
}

test("by default the stream keeps fifteen minutes, by the stream's clock", async (t) => {
  const stream = prefix(t) + "events";
  await fillOldAndRecent(stream);
  const e = new Emitter(r, { stream, batchSize: 1 });
  for (let i = 0; i < 3; i++) { // the first write learns the stream's clock, the next ones trim
    e.record({ type: "acquired", key: "k", ts: BigInt(i + 1) });
    await e.flush(5000);
  }
  await e.close();
  const k = await kinds(stream);
  // MINID ~ trims whole nodes (up to 100 entries): at most one node of old
  // entries may stay, every recent one stays.
  assert.ok(k.old < 100, JSON.stringify(k));
  assert.equal(k.recent, 300);
  assert.equal(k.ours, 3);
});

// The retention rule trusts no entry ID (docs/events.md, "Retention
// rule"): a writer's ID 20 minutes in the future makes Redis number every
// later entry after it, and an emitter that trimmed by its newest ID would
// cut everyone's last 15 minutes.
test("an entry ID in the future trims nobody's recent entries", async (t) => {
  const stream = prefix(t) + "events";
  await fillOldAndRecent(stream);
  const [sec] = await r.time();
  await r.xadd(stream, `${Number(sec) * 1000 + 20 * 60000}-0`, "other", "future");
  const e = new Emitter(r, { stream, batchSize: 1 });
  for (let i = 0; i < 3; i++) {
    e.record({ type: "acquired", key: "k", ts: BigInt(i + 1) });
    await e.flush(5000);
  }
  await e.close();
  const k = await kinds(stream);
  assert.ok(k.old < 100, JSON.stringify(k));
  assert.equal(k.recent, 300, JSON.stringify(k));
  assert.equal(k.ours, 3);
});

test("after an ID in the future the newest entries numbered after it are what is kept", () => {
  const sink = new StreamSink(r, { stream: "s" });
  const future = Date.now() + 3600000;
  sink.written("s", `${future}-${RETENTION_AHEAD_KEEP - 1}`);
  assert.deepEqual(sink.trim("s").slice(0, 2), ["MINID", "~"]);
  assert.ok(!sink.trim("s")[2].includes("-"), "fewer than the kept entries after it: trims by age");
  sink.written("s", `${future}-${RETENTION_AHEAD_KEEP + 41}`);
  assert.deepEqual(sink.trim("s"), ["MINID", "~", `${future}-41`]);
  sink.written("s", `${future}-5`); // an older ID does not move it back
  assert.deepEqual(sink.trim("s"), ["MINID", "~", `${future}-41`]);
});

test("partitions trim by age, each on its own", async (t) => {
  const base = prefix(t) + "events";
  const streams = ev.streams(base, 2);
  for (const s of streams) await fillOldAndRecent(s);
  const keys = new Map();
  for (let i = 0; keys.size < 2; i++) if (!keys.has(ev.partitionOf("k" + i, 2))) keys.set(ev.partitionOf("k" + i, 2), "k" + i);
  const e = new Emitter(r, { stream: base, partitions: 2 });
  for (let i = 0; i < 3; i++) { // one write to both partitions each time
    for (const k of keys.values()) e.record({ type: "acquired", key: k, ts: BigInt(i + 1) });
    await e.flush(5000);
  }
  await e.close();
  for (const s of streams) {
    const k = await kinds(s);
    assert.ok(k.old < 100, s + " " + JSON.stringify(k));
    assert.equal(k.recent, 300, s);
    assert.equal(k.ours, 3, s);
  }
});

test("a negative maxLen never trims", async (t) => {
  const stream = prefix(t) + "events";
  await fillOldAndRecent(stream);
  const e = new Emitter(r, { stream, maxLen: -1, batchSize: 1 });
  for (let i = 0; i < 3; i++) {
    e.record({ type: "acquired", key: "k", ts: BigInt(i + 1) });
    await e.flush(5000);
  }
  await e.close();
  assert.equal(await r.xlen(stream), 603);
});

test("the emitter's own connection, without the client's key prefix", async (t) => {
  const p = prefix(t);
  const c = server.client({ keyPrefix: "app:" });
  const e = new Emitter(c, { stream: p + "events" });
  e.record({ type: "acquired", key: "k", ts: nowNs() });
  await e.close();
  assert.equal(await r.xlen(p + "events"), 1);
  const clients = await r.client("LIST");
  assert.doesNotMatch(clients, /name=lockscope-emitter/); // closed with the emitter
  c.disconnect();
});

test("a process that forgets close() still exits, and its events are written", async (t) => {
  const stream = prefix(t) + "events";
  const script = `
    const Redis = require("ioredis");
    const { Emitter } = require(${JSON.stringify(path.join(__dirname, "..", "lib", "emitter"))});
    const c = new Redis(${server.port}, "127.0.0.1");
    const e = new Emitter(c, { stream: ${JSON.stringify(stream)} });
    c.ping().then(() => {
      for (let i = 0; i < 5; i++) e.record({ type: "acquired", key: "k" + i, ts: BigInt(Date.now()) * 1000000n });
      return c.quit(); // the application's work is done; the emitter is not closed
    });
  `;
  const child = spawn(process.execPath, ["-e", script], { cwd: path.join(__dirname, ".."), stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const code = await new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), 20000);
    child.on("exit", (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
  assert.equal(code, 0, "the process did not exit by itself: " + stderr);
  const { events } = await readStream(r, stream);
  assert.deepEqual(events.map((x) => x.key), ["k0", "k1", "k2", "k3", "k4"]);
});
