"use strict";
// Driver of the Go tests (clients/node/*_test.go): one Node service taking
// node-redlock locks through lockscope's Redlock against --redis, events to
// lockscope:events. It prints what it does, one line each, as it happens.
//
//   hold --key K [--ttl-ms T]        takes K once; "holding <lease>"; releases
//                                    on the stdin line "release": "released"
//   wait --key K [--hold-ms H]       waits for K (retries without limit):
//                                    "acquired <lease> <attempts>", holds H ms,
//                                    "released"
//   using --key K [--ttl-ms T]       using(): "holding <lease>", renewed
//                                    automatically; once the signal aborts:
//                                    "lost <error>", then "using <outcome>"
//   deadlock --first A --second B --go G
//                                    using(A): "holding <lease>"; once the key G
//                                    exists, waits for B inside it: "acquired",
//                                    "released"

const { parseArgs } = require("node:util");
const Redis = require("ioredis");
const { Redlock, Emitter } = require("../..");

const { positionals, values: o } = parseArgs({
  allowPositionals: true,
  options: {
    redis: { type: "string" },
    owner: { type: "string" },
    key: { type: "string" },
    first: { type: "string" },
    second: { type: "string" },
    go: { type: "string" },
    "ttl-ms": { type: "string", default: "30000" },
    "hold-ms": { type: "string", default: "0" },
    "retry-delay": { type: "string", default: "20" },
  },
});

const say = (...words) => process.stdout.write(words.join(" ") + "\n");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const redis = new Redis(o.redis);
  const emitter = new Emitter(redis, { flushInterval: 10 });
  const retry = { retryDelay: Number(o["retry-delay"]), retryJitter: 0 };
  const redlock = new Redlock([redis], { owner: o.owner, emitter, retryCount: -1, ...retry });
  const ttl = Number(o["ttl-ms"]);
  switch (positionals[0]) {
    case "hold": {
      const lock = await redlock.acquire([o.key], ttl, { retryCount: 0 });
      say("holding", lock.lease);
      await new Promise((resolve) => {
        process.stdin.setEncoding("utf8");
        process.stdin.on("data", (d) => d.includes("release") && resolve());
        process.stdin.on("end", resolve);
      });
      process.stdin.destroy();
      await lock.release();
      say("released");
      break;
    }
    case "wait": {
      const lock = await redlock.acquire([o.key], ttl);
      say("acquired", lock.lease, lock.attempts.length);
      await sleep(Number(o["hold-ms"]));
      await lock.release();
      say("released");
      break;
    }
    case "using": {
      // A renewal a second after each, with two seconds to spare.
      const rl = new Redlock([redis], { owner: o.owner, emitter, retryCount: 2, ...retry, automaticExtensionThreshold: ttl - 1000 });
      let outcome;
      try {
        await rl.using([o.key], ttl, async (signal) => {
          say("holding", (await rl.holder(o.key)) === o.owner ? redlockLease(await redis.get(o.key)) : "?");
          while (!signal.aborted) await sleep(10);
          say("lost", signal.error && signal.error.name);
        });
        outcome = "resolved";
      } catch (err) {
        outcome = "rejected " + err.name;
      }
      say("using", outcome);
      break;
    }
    case "deadlock": {
      await redlock.using([o.first], 60000, async () => {
        say("holding", redlockLease(await redis.get(o.first)));
        while (!(await redis.exists(o.go))) await sleep(10);
        const lock = await redlock.acquire([o.second], 60000);
        say("acquired");
        await lock.release();
        say("released");
      });
      break;
    }
    default:
      throw new Error("unknown command " + positionals[0]);
  }
  await emitter.close();
  await redis.quit();
}

function redlockLease(v) {
  return require("../..").value.parse(v).lease;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
