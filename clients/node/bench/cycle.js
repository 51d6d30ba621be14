"use strict";
// The cost of lockscope's instrumentation per lock cycle (acquire + release,
// uncontended, each caller on a key of its own, a 10 s TTL) in Node,
// against plain node-redlock on the same Redis.
//
// Variants, each a Redlock on one ioredis client:
//
//   redlock      node-redlock 5's Redlock
//   no-emitter   lockscope's Redlock whose events go nowhere (record() does
//                nothing): the lock's own bookkeeping
//   emitter      lockscope's Redlock with a real Emitter writing packed
//                batches to a stream on the same Redis (MAXLEN ~ 1000)
//
// Every round runs each variant at each number of concurrent callers (async
// loops sharing the client) for about --cycles cycles, in an order that
// rotates from round to round, so that load from elsewhere on the machine
// hits all alike. Per variant and callers it prints the median over rounds
// of cycles per second, of this process's CPU time per cycle
// (process.cpuUsage: the emitter's work included) and of redis-server's
// (INFO cpu), and the medians of the per-round ratios to redlock.
//
//   node clients/node/bench/cycle.js --redis redis://127.0.0.1:6399 --rounds 15 --cycles 4000

const fs = require("node:fs");
const path = require("node:path");
const { parseArgs } = require("node:util");
const Redis = require("ioredis");
const Base = require("redlock").default;
const { Redlock, Emitter } = require("..");

const { values: o } = parseArgs({
  options: {
    redis: { type: "string", default: "redis://127.0.0.1:6379" },
    rounds: { type: "string", default: "15" },
    cycles: { type: "string", default: "4000" },
    callers: { type: "string", default: "1,16" },
    warmup: { type: "string", default: "200" },
  },
});

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function serverCPU(r) {
  const info = await r.info("cpu");
  const get = (k) => Number(new RegExp(`^${k}:([0-9.]+)`, "m").exec(info)[1]);
  return get("used_cpu_user") + get("used_cpu_sys");
}

function cpuNow() {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

async function pass(rl, key, callers, perCaller) {
  const one = async (i) => {
    for (let n = 0; n < perCaller; n++) {
      const lock = await rl.acquire([key + ":" + i], 10000);
      await lock.release();
    }
  };
  await Promise.all(Array.from({ length: callers }, (_, i) => one(i)));
}

async function main() {
  const r = new Redis(o.redis);
  const em = new Emitter(r, { stream: "lockscope:bench", maxLen: 1000 });
  const discard = { record() {} };
  const settings = { retryCount: 0 };
  const variants = {
    redlock: new Base([r], settings),
    "no-emitter": new Redlock([r], { ...settings, owner: "bench", emitter: discard }),
    emitter: new Redlock([r], { ...settings, owner: "bench", emitter: em }),
  };
  const names = Object.keys(variants);
  const callersList = o.callers.split(",").map(Number);
  for (const name of names) await pass(variants[name], "bench:" + name, 1, Number(o.warmup)); // connections, scripts
  await em.flush(10000);
  const rows = {}; // "name/callers" -> {rate: [], cpu: [], srv: []}
  for (const name of names) for (const c of callersList) rows[name + "/" + c] = { rate: [], cpu: [], srv: [] };
  for (let round = 0; round < Number(o.rounds); round++) {
    const order = names.slice(round % names.length).concat(names.slice(0, round % names.length));
    for (const c of callersList) {
      for (const name of order) {
        const perCaller = Math.max(1, Math.round(Number(o.cycles) / c));
        const cycles = perCaller * c;
        const s0 = await serverCPU(r);
        const c0 = cpuNow();
        const w0 = process.hrtime.bigint();
        await pass(variants[name], "bench:" + name, c, perCaller);
        if (name === "emitter") await em.flush(10000); // its writes belong to its cycles
        const wall = Number(process.hrtime.bigint() - w0) / 1e9;
        const c1 = cpuNow();
        const s1 = await serverCPU(r);
        const row = rows[name + "/" + c];
        row.rate.push(cycles / wall);
        row.cpu.push(((c1 - c0) / cycles) * 1e6);
        row.srv.push(((s1 - s0) / cycles) * 1e6);
      }
    }
  }
  await em.close();
  const st = em.stats();
  const version = (m) => JSON.parse(fs.readFileSync(path.join(__dirname, "..", "node_modules", m, "package.json"), "utf8")).version;
  console.log(`node ${process.version}, redlock ${version("redlock")}, ioredis ${version("ioredis")}, ${o.rounds} rounds x ~${o.cycles} cycles; emitter: ${st.recorded} recorded, ${st.sent} sent in ${st.batches} writes, ${st.dropped} dropped`);
  console.log(["variant".padEnd(11), "callers", "cycles/s".padStart(10), "client CPU µs".padStart(14), "server CPU µs".padStart(14), "rate vs redlock".padStart(16), "CPU vs redlock".padStart(15)].join(" "));
  for (const c of callersList) {
    for (const name of names) {
      const row = rows[name + "/" + c];
      const base = rows["redlock/" + c];
      const rateRatio = median(row.rate.map((x, i) => x / base.rate[i]));
      const cpuRatio = median(row.cpu.map((x, i) => x / base.cpu[i]));
      console.log([name.padEnd(11), String(c).padStart(7), median(row.rate).toFixed(0).padStart(10), median(row.cpu).toFixed(1).padStart(14),
        median(row.srv).toFixed(1).padStart(14), (rateRatio.toFixed(3) + "x").padStart(16), (cpuRatio.toFixed(3) + "x").padStart(15)].join(" "));
    }
  }
  await r.quit();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
