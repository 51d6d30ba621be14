// What a CommonJS user of node-redlock writes, with the one line changed;
// checked by tsc (test/types.test.js), never run.
import Redis from "ioredis";
import Redlock, { Emitter, Event, ExecutionError, Lock, ResourceLockedError, event } from "lockscope";

async function main(): Promise<void> {
  const redis = new Redis();
  const emitter = new Emitter(redis, { flushInterval: 50, partitions: 2 });
  const redlock = new Redlock([redis], { retryCount: 10, retryDelay: 200, owner: "billing/worker-1", emitter });
  const lock: Lock = await redlock.acquire(["invoice:42"], 5000);
  const lease: string = lock.lease;
  const longer: Lock = await lock.extend(5000);
  await longer.release();
  const done: number = await redlock.using(["report:7"], 10000, { retryCount: -1 }, async (signal) => {
    if (signal.aborted) throw signal.error;
    return lease.length;
  });
  await redlock.using(["report:8"], 10000, async () => done);
  const who: string | null = await redlock.holder("invoice:42");
  try {
    await redlock.acquire(["invoice:42"], 5000, { retryCount: 0 });
  } catch (err) {
    if (err instanceof ExecutionError || err instanceof ResourceLockedError) console.log(who, err.message);
  }
  emitter.record({ type: "acquired", key: "k", ts: 1n, ttl: 1000 });
  const decoded = event.decode(event.fields({ type: "released", key: "k", ts: 1n, hold: 5 }));
  const ts: bigint = decoded[0].ts;
  const st = emitter.stats();
  console.log(ts, st.dropped + st.sent, redlock.owner, redlock.emitter === emitter);
  const counted: Event[] = [];
  const counting = new Redlock([redis], { emitter: { record: (e) => counted.push(e) } });
  void counting;
  await emitter.close();
  await redlock.quit();
}

void main;
