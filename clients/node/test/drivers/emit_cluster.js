"use strict";
// Driver of the Go test TestNodeOnCluster: an ioredis Cluster from --seeds
// (host:port,...), an Emitter writing --count events of keys k0, k1, ... to
// --partitions partitions of --stream, and a Redlock cycle on each of
// --locks (comma-separated). Prints the Emitter's stats as JSON.

const { parseArgs } = require("node:util");
const { Cluster } = require("ioredis");
const { Redlock, Emitter } = require("../..");

async function main() {
  const { values: o } = parseArgs({ options: {
    seeds: { type: "string" }, stream: { type: "string" }, partitions: { type: "string" }, count: { type: "string" }, locks: { type: "string" },
  } });
  const cluster = new Cluster(o.seeds.split(",").map((a) => ({ host: a.split(":")[0], port: Number(a.split(":")[1]) })));
  const em = new Emitter(cluster, { stream: o.stream, partitions: Number(o.partitions), flushInterval: 10 });
  const ts = BigInt(Date.now()) * 1000000n;
  for (let i = 0; i < Number(o.count); i++) em.record({ type: "acquired", key: "k" + i, owner: "node/cluster", ts: ts + BigInt(i) });
  await em.flush(10000);
  const redlock = new Redlock([cluster], { owner: "node/cluster", emitter: em });
  for (const key of o.locks.split(",")) {
    const lock = await redlock.acquire([key], 10000);
    await lock.release();
  }
  await em.close(10000);
  process.stdout.write(JSON.stringify(em.stats()));
  await cluster.quit();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
