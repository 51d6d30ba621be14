"use strict";
// Redlock against a real Redis with the real node-redlock: its events and
// its value, and that it behaves as node-redlock does.

const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const base = require("redlock");
const Redis = require("ioredis");
const lockscope = require("..");
const { Redlock, Emitter, value } = lockscope;
const { Server, waitFor, prefix, readStream, steps, freePort } = require("./helpers");

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

// setup returns an emitter writing to a stream of the test's own, a key
// prefix, and events(): the events written so far.
function setup(t) {
  const p = prefix(t);
  const em = new Emitter(r, { stream: p + "events", flushInterval: 10 });
  t.after(() => em.close());
  const events = async () => {
    await em.flush(5000);
    return (await readStream(r, p + "events")).events;
  };
  return { p, em, events };
}

const fast = { retryDelay: 10, retryJitter: 0 };

test("acquire and release: events, and a value that names the holder", async (t) => {
  const { p, em, events } = setup(t);
  const rl = new Redlock([r], { owner: "api/alice", emitter: em });
  const key = p + "job";
  const before = Date.now();
  const lock = await rl.acquire([key], 10000);
  const stored = await r.get(key);
  assert.equal(lock.value, stored);
  const v = value.parse(stored);
  assert.equal(v.owner, "api/alice");
  assert.equal(v.lease, lock.lease);
  assert.match(lock.lease, /^[0-9a-f]{16}$/);
  assert.equal(lock.owner, "api/alice");
  assert.ok(v.sinceMs >= before && v.sinceMs <= Date.now(), `since ${v.sinceMs}`);
  assert.ok(v.token.length === 22 && !stored.includes(v.token + v.token));
  const pttl = await r.pttl(key);
  assert.ok(pttl > 9000 && pttl <= 10000, `PTTL ${pttl}`);
  assert.ok(lock instanceof base.Lock && lock instanceof lockscope.Lock);
  assert.ok(lock.expiration > Date.now() + 9000 && lock.expiration < v.sinceMs + 10000);
  await lock.release();
  assert.equal(await r.exists(key), 0);

  const got = await events();
  assert.deepEqual(steps(got, "key", "owner", "lease", "ttl", "attempts", "reason"), [
    ["acquired", key, "api/alice", lock.lease, 10000, 1, ""],
    ["released", key, "api/alice", lock.lease, 0, 0, ""],
  ]);
  // The acquisition's time is the value's since.
  assert.equal(got[0].ts, BigInt(v.sinceMs) * 1000000n);
  assert.ok(got[0].wait > 0 && got[0].wait < 5e9);
  assert.ok(got[1].hold > 0 && got[1].hold < 5e9);
  assert.ok(rl instanceof base.default);
});

test("a wait: one waiting event naming the holder, then acquired", async (t) => {
  const { p, em, events } = setup(t);
  const key = p + "k";
  const holder = new Redlock([r], { owner: "holder", emitter: em });
  const waiter = new Redlock([r], { owner: "waiter", emitter: em, retryCount: 500, ...fast });
  const held = await holder.acquire([key], 10000);
  const acquiring = waiter.acquire([key], 10000);
  await waitFor("the waiting event", async () => (await events()).some((e) => e.type === "waiting"));
  await new Promise((resolve) => setTimeout(resolve, 50)); // the waiter keeps retrying
  await held.release();
  const lock = await acquiring;
  await lock.release();
  const got = await events();
  assert.deepEqual(steps(got, "owner", "holder", "reason"), [
    ["acquired", "holder", "", ""],
    ["waiting", "waiter", "holder", ""],
    ["released", "holder", "", ""],
    ["acquired", "waiter", "", ""],
    ["released", "waiter", "", ""],
  ]);
  const [, waiting, , acquired] = got;
  assert.equal(waiting.lease, lock.lease); // the lease the call holds once it acquires
  assert.equal(waiting.attempts, 1);
  assert.equal(waiting.wait, 500 * 10 * 1e6); // the most it will wait: its 500 retries' delays
  assert.ok(acquired.attempts > 2, `attempts ${acquired.attempts}`);
  assert.ok(acquired.wait >= 50e6, `wait ${acquired.wait}`);
});

test("a retry budget that runs out is a timeout, and a single try refused is held", async (t) => {
  const { p, em, events } = setup(t);
  const key = p + "k";
  const holder = new Redlock([r], { owner: "holder", emitter: em });
  const waiter = new Redlock([r], { owner: "waiter", emitter: em, ...fast });
  await holder.acquire([key], 10000);
  await assert.rejects(waiter.acquire([key], 10000, { retryCount: 3 }), (err) => err instanceof base.ExecutionError && /quorum/.test(err.message) && err.attempts.length === 4);
  await assert.rejects(waiter.acquire([key], 10000, { retryCount: 0 }), base.ExecutionError);
  assert.equal(await waiter.holder(key), "holder");
  assert.equal(await waiter.holder(p + "free"), null);
  const got = (await events()).slice(1);
  assert.deepEqual(steps(got, "key", "owner", "holder", "reason", "attempts"), [
    ["waiting", key, "waiter", "holder", "", 1],
    ["failed", key, "waiter", "holder", "timeout", 4],
    ["failed", key, "waiter", "holder", "held", 1],
  ]);
  assert.equal(got[0].lease, got[1].lease);
  assert.notEqual(got[1].lease, got[2].lease);
  assert.ok(got[1].wait >= 30e6, `wait ${got[1].wait}`);
});

test("another library's holder is named as Go names it, never by its value", async (t) => {
  const { p, em, events } = setup(t);
  const key = p + "k";
  const plain = new base.default([r]);
  const theirs = await plain.acquire([key], 10000);
  assert.match(theirs.value, /^[0-9a-f]{32}$/);
  const rl = new Redlock([r], { owner: "w", emitter: em, retryCount: 0 });
  await assert.rejects(rl.acquire([key], 1000), base.ExecutionError);
  const name = "node-redlock " + crypto.createHash("sha1").update(theirs.value).digest("hex").slice(0, 8);
  assert.equal(await rl.holder(key), name);
  const got = await events();
  assert.deepEqual(steps(got, "holder", "reason"), [["failed", name, "held"]]);
  // Our Redlock releases a plain node-redlock lock as node-redlock does, silently.
  await rl.release(theirs);
  assert.equal(await r.exists(key), 0);
  assert.equal((await events()).length, 1);
});

test("Redis unreachable: failed with reason error, errors emitted as node-redlock does", async (t) => {
  const { p, em, events } = setup(t);
  const dead = new Redis(await freePort(), "127.0.0.1", { enableOfflineQueue: false, retryStrategy: () => null, lazyConnect: true });
  dead.on("error", () => {});
  const rl = new Redlock([dead], { owner: "w", emitter: em, retryCount: 1, ...fast });
  const errors = [];
  rl.on("error", (e) => errors.push(e));
  await assert.rejects(rl.acquire([p + "k"], 1000), base.ExecutionError);
  assert.equal(errors.length, 2);
  assert.ok(!(errors[0] instanceof base.ResourceLockedError));
  const got = await events();
  assert.deepEqual(steps(got, "key", "owner", "reason", "attempts", "holder"), [["failed", p + "k", "w", "error", 2, ""]]);
  dead.disconnect();
});

test("extend: renewed with its TTL and the headroom that was left", async (t) => {
  const { p, em, events } = setup(t);
  const key = p + "k";
  const rl = new Redlock([r], { owner: "o", emitter: em });
  const lock = await rl.acquire([key], 5000);
  await new Promise((resolve) => setTimeout(resolve, 20));
  const longer = await lock.extend(8000);
  assert.equal(longer.lease, lock.lease);
  assert.equal(longer.value, lock.value);
  assert.equal(lock.expiration, 0); // node-redlock invalidates the old one
  const pttl = await r.pttl(key);
  assert.ok(pttl > 7000 && pttl <= 8000, `PTTL ${pttl}`);
  await longer.release();
  const got = await events();
  assert.deepEqual(steps(got, "lease", "ttl"), [["acquired", lock.lease, 5000], ["renewed", lock.lease, 8000], ["released", lock.lease, 0]]);
  const h = got[1].headroom;
  assert.ok(h > 0 && h <= 4980e6, `headroom ${h} ns: want the 5 s TTL less the 20 ms waited, at least`);
});

test("extend finding the lock gone is lost; extending an expired one too", async (t) => {
  const { p, em, events } = setup(t);
  const rl = new Redlock([r], { owner: "o", emitter: em, retryCount: 0 });
  const lock = await rl.acquire([p + "a"], 10000);
  await r.del(p + "a");
  await assert.rejects(lock.extend(10000), base.ExecutionError);
  await assert.rejects(lock.release(), base.ExecutionError); // nothing more to tell
  const short = await rl.acquire([p + "b"], 200);
  await waitFor("the lock's validity to pass", () => Date.now() > short.expiration);
  await assert.rejects(short.extend(1000), /already-expired/);
  const got = await events();
  assert.deepEqual(steps(got, "key", "reason"), [
    ["acquired", p + "a", ""],
    ["lost", p + "a", "not_owner"],
    ["acquired", p + "b", ""],
    ["lost", p + "b", "not_owner"],
  ]);
  assert.ok(got[1].hold > 0);
});

test("release finding another holder is released, not_owner", async (t) => {
  const { p, em, events } = setup(t);
  const rl = new Redlock([r], { owner: "o", emitter: em, retryCount: 0 });
  const lock = await rl.acquire([p + "k"], 10000);
  await r.set(p + "k", "someone else");
  await assert.rejects(lock.release(), base.ExecutionError);
  assert.equal(await r.get(p + "k"), "someone else");
  assert.deepEqual(steps(await events(), "reason"), [["acquired", ""], ["released", "not_owner"]]);
});

test("using: auto-extension renews, the routine's result is returned, the lock released", async (t) => {
  const { p, em, events } = setup(t);
  // A renewal every 300 ms, each with 1.7 s to spare.
  const rl = new Redlock([r], { owner: "o", emitter: em, automaticExtensionThreshold: 1700 });
  const key = p + "k";
  const got = await rl.using([key], 2000, async (signal) => {
    await waitFor("two renewals", async () => (await events()).filter((e) => e.type === "renewed").length >= 2);
    assert.equal(signal.aborted, false);
    return "done";
  });
  assert.equal(got, "done");
  assert.equal(await r.exists(key), 0);
  const evs = await events();
  const types = evs.map((e) => e.type);
  assert.equal(types[0], "acquired");
  assert.equal(types[types.length - 1], "released");
  const renewals = evs.filter((e) => e.type === "renewed");
  assert.ok(renewals.length >= 2 && types.slice(1, -1).every((x) => x === "renewed"), types.join(" "));
  for (const e of renewals) {
    assert.equal(e.ttl, 2000);
    // Renewed about 1.7 s before node-redlock thinks it expires (2 s less the drift).
    assert.ok(e.headroom > 0 && e.headroom <= 2000e6, `headroom ${e.headroom}`);
  }
  assert.equal(new Set(evs.map((e) => e.lease)).size, 1);
});

test("a wait inside using() lists the lease it holds; concurrent scopes stay apart", async (t) => {
  const { p, em, events } = setup(t);
  const other = new Redlock([r], { owner: "other", emitter: em });
  await other.acquire([p + "x"], 10000);
  await other.acquire([p + "y"], 10000);
  const rl = new Redlock([r], { owner: "o", emitter: em, retryCount: 2, ...fast });
  const leases = {};
  const scope = (mine, wants) => rl.using([mine], 10000, async () => {
    leases[mine] = value.parse(await r.get(mine)).lease;
    await assert.rejects(rl.acquire([wants], 1000), base.ExecutionError);
  });
  await Promise.all([scope(p + "a", p + "x"), scope(p + "b", p + "y")]);
  await assert.rejects(rl.acquire([p + "x"], 1000), base.ExecutionError); // outside any scope
  const waits = (await events()).filter((e) => e.type === "waiting").map((e) => [e.key, e.reason]);
  assert.deepEqual(waits, [[p + "x", leases[p + "a"]], [p + "y", leases[p + "b"]], [p + "x", ""]]);
});

test("an acquire inside using() lists the lease it holds on its acquired event (lock order)", async (t) => {
  const { p, em, events } = setup(t);
  const rl = new Redlock([r], { owner: "o", emitter: em });
  let outer = "";
  await rl.using([p + "order:1"], 10000, async () => {
    outer = value.parse(await r.get(p + "order:1")).lease;
    const inner = await rl.acquire([p + "inventory:1"], 10000);
    await inner.release();
  });
  const plain = await rl.acquire([p + "inventory:2"], 10000); // outside any scope
  await plain.release();
  const acquired = (await events()).filter((e) => e.type === "acquired").map((e) => [e.key, e.reason]);
  assert.deepEqual(acquired, [[p + "order:1", ""], [p + "inventory:1", outer], [p + "inventory:2", ""]]);
});

test("using() losing its lock: lost, the signal aborted with the error", async (t) => {
  const { p, em, events } = setup(t);
  const rl = new Redlock([r], { owner: "o", emitter: em, retryCount: 2, ...fast, automaticExtensionThreshold: 300 });
  const key = p + "k";
  let sig;
  const run = rl.using([key], 600, async (signal) => {
    sig = signal;
    await r.set(key, "taken over", "PX", 10000);
    await waitFor("the signal", () => signal.aborted);
    return "finished";
  });
  // The release at the end finds another's value: node-redlock's error.
  await assert.rejects(run, base.ExecutionError);
  assert.ok(sig.error instanceof base.ExecutionError, String(sig.error));
  assert.equal(await r.get(key), "taken over");
  assert.deepEqual(steps(await events(), "reason"), [["acquired", ""], ["lost", "not_owner"]]);
});

test("several resources: one lease on every key; the wait is for the one held", async (t) => {
  const { p, em, events } = setup(t);
  const other = new Redlock([r], { owner: "other", emitter: em });
  const theirs = await other.acquire([p + "b"], 10000);
  const rl = new Redlock([r], { owner: "o", emitter: em, retryCount: 1000, ...fast });
  const acquiring = rl.acquire([p + "a", p + "b"], 10000);
  await waitFor("the waiting event", async () => (await events()).some((e) => e.type === "waiting"));
  await theirs.release();
  const lock = await acquiring;
  assert.equal(value.parse(await r.get(p + "a")).lease, lock.lease);
  assert.equal(await r.get(p + "b"), lock.value);
  await lock.release();
  assert.deepEqual(steps((await events()).slice(1), "key", "owner", "holder"), [
    ["waiting", p + "b", "o", "other"],
    ["released", p + "b", "other", ""],
    ["acquired", p + "a", "o", ""],
    ["acquired", p + "b", "o", ""],
    ["released", p + "a", "o", ""],
    ["released", p + "b", "o", ""],
  ]);
});

test("without an emitter: one per client, to lockscope:events on its server, closed by quit()", async () => {
  const own = await Server.start();
  try {
    const c = own.client();
    const rl = new Redlock([c], { owner: "defaults" });
    const again = new Redlock([c]);
    assert.equal(rl.emitter, again.emitter);
    assert.match(again.owner, new RegExp(`/${process.pid}$`));
    const lock = await rl.acquire(["k"], 1000);
    await lock.release();
    const em = rl.emitter;
    await rl.quit();
    assert.equal(em._closed, true);
    const check = own.client();
    const { events } = await readStream(check, "lockscope:events");
    assert.deepEqual(steps(events, "key", "owner"), [["acquired", "k", "defaults"], ["released", "k", "defaults"]]);
    check.disconnect();
  } finally {
    await own.close();
  }
});

test("the ES module: the one-line change of import", async () => {
  const mod = await import("lockscope");
  const esmBase = await import("redlock");
  assert.equal(Object.getPrototypeOf(mod.default), esmBase.default);
  assert.equal(mod.Emitter, Emitter);
  assert.equal(mod.ExecutionError, esmBase.ExecutionError);
  assert.equal(require("lockscope").default, Redlock);
  // An ES module user's instanceof, against the errors of what it imports.
  const rl = new mod.default([r], { emitter: new Emitter(null, { sink: new lockscope.MemorySink() }), retryCount: 0 });
  const held = await rl.acquire(["esm:k"], 10000);
  assert.ok(held instanceof esmBase.Lock);
  await assert.rejects(rl.acquire(["esm:k"], 1000), (err) => err instanceof esmBase.ExecutionError);
  await held.release();
});
