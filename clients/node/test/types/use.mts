// The same from an ES module.
import { Redis, Cluster } from "ioredis";
import Redlock, { Emitter, MemorySink } from "lockscope";

const cluster = new Cluster([{ host: "127.0.0.1", port: 7000 }]);
const redlock = new Redlock([new Redis(), cluster], { owner: "api" });
const lock = await redlock.acquire(["a", "b"], 1000);
console.log(lock.owner, lock.resources);
const sink = new MemorySink();
const em = new Emitter(null, { sink });
em.record({ type: "waiting", key: Buffer.from([0xff]), ts: 5n, holder: "x", reason: "l1,l2" });
await em.flush(1000);
console.log(sink.events.length);
