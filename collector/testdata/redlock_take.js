// Takes N locks with node-redlock (redlock 4, as pinned in tools/foreign),
// leaves them held, and prints their keys: the collector's tests name their
// holders. Usage: node redlock_take.js PORT PREFIX N
const Redis = require('ioredis');
const Redlock = require('redlock');

async function main() {
  const [port, prefix, n] = process.argv.slice(2);
  const client = new Redis({ port: Number(port), host: '127.0.0.1', lazyConnect: false });
  const redlock = new Redlock([client], { retryCount: 0 });
  for (let i = 0; i < Number(n); i++) {
    await redlock.lock(`${prefix}${i}`, 60000);
  }
  await client.quit();
}

main().catch((err) => { console.error(err); process.exit(1); });
