// Takes a Redisson lock with node-redisson (pinned in tools/foreign),
// waiting for it if it is held, prints "acquired <unix ms>", and holds it
// (its watchdog renewing it) until killed. Usage:
//   node redisson_lock.js PORT KEY WATCHDOG_MS
const { Redisson } = require('node-redisson');

async function main() {
  const [port, key, watchdog] = process.argv.slice(2);
  const redisson = new Redisson({
    redis: { options: { host: '127.0.0.1', port: Number(port) } },
    lockWatchdogTimeout: BigInt(watchdog),
  });
  const lock = redisson.getLock(key);
  process.stdout.write('waiting\n');
  await lock.lock();
  process.stdout.write(`acquired ${Date.now()}\n`);
  setInterval(() => {}, 1 << 30);
}

main().catch((err) => { console.error(err); process.exit(1); });
