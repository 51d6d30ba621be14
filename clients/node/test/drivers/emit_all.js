"use strict";
// Driver of the Go test TestNodeEventsDecodedByGo: writes to --stream the
// golden events (event/testdata/golden/events.json) once packed by the
// Emitter and once as one XADD per event, then the events of a few locks:
// a cycle (acquire, extend, release) on <prefix>cycle, a refused try of
// <prefix>go-held (which a Go lock holds), a hold of <prefix>node-held that
// is kept. Prints {cycle_lease, go_holder, kept_lease} as JSON.

const { parseArgs } = require("node:util");
const Redis = require("ioredis");
const { Redlock, Emitter, event } = require("../..");
const { goldenEvents } = require("../helpers");

async function main() {
  const { values: o } = parseArgs({ options: { redis: { type: "string" }, stream: { type: "string" }, prefix: { type: "string" } } });
  const redis = new Redis(o.redis);
  const golden = goldenEvents();
  const packed = new Emitter(redis, { stream: o.stream });
  for (const e of golden) packed.record(e);
  await packed.close();
  for (const e of golden) await redis.xadd(o.stream, "*", ...event.fields(e));

  const em = new Emitter(redis, { stream: o.stream, flushInterval: 10 });
  const cycle = new Redlock([redis], { owner: "node/cycle", emitter: em });
  let lock = await cycle.acquire([o.prefix + "cycle"], 10000);
  await em.flush();
  lock = await lock.extend(15000);
  await em.flush();
  await lock.release();
  await em.flush();
  const refused = new Redlock([redis], { owner: "node/refused", emitter: em, retryCount: 0 });
  await refused.acquire([o.prefix + "go-held"], 1000).catch(() => {});
  await em.flush();
  const kept = await new Redlock([redis], { owner: "node/holder", emitter: em }).acquire([o.prefix + "node-held"], 60000);
  await em.close();
  process.stdout.write(JSON.stringify({ cycle_lease: lock.lease, go_holder: await refused.holder(o.prefix + "go-held"), kept_lease: kept.lease }));
  await redis.quit();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
