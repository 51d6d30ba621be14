"use strict";
// The application ACL of docs/acl.md, applied verbatim, is enough for a
// Node application once it allows EXISTS (node-redlock's acquire script
// checks each resource with it), and that addition is needed.

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const Redis = require("ioredis");
const base = require("redlock");
const { Redlock, Emitter, MemorySink } = require("..");
const { Server, readStream, steps } = require("./helpers");

function appLine() {
  const doc = fs.readFileSync(path.join(__dirname, "..", "..", "..", "docs", "acl.md"), "utf8");
  const m = /^ACL SETUSER app .*$/m.exec(doc);
  assert.ok(m, "docs/acl.md has no application line");
  return m[0];
}

async function asApp(t, extra) {
  const server = await Server.start();
  t.after(() => server.close());
  const admin = server.client();
  t.after(() => admin.disconnect());
  await admin.call(...appLine().split(" "), ...extra);
  await admin.script("FLUSH"); // as after a restart: every script is sent again
  const app = new Redis(server.port, "127.0.0.1", { username: "app", password: "app-password" });
  app.on("error", () => {});
  t.after(() => app.disconnect());
  return { admin, app };
}

test("a Node application with the docs' app ACL and +exists", async (t) => {
  const { admin, app } = await asApp(t, ["+exists"]);
  const em = new Emitter(app);
  const rl = new Redlock([app], { owner: "node-acl", emitter: em, retryCount: 0 });
  const lock = await rl.acquire(["app:node-acl"], 10000);
  await assert.rejects(new Redlock([app], { owner: "other", emitter: em, retryCount: 0 }).acquire(["app:node-acl"], 1000), base.ExecutionError);
  const longer = await lock.extend(10000);
  await longer.release();
  await em.close();
  assert.deepEqual(em.stats().errors, 0);
  const { events } = await readStream(admin, "lockscope:events");
  assert.deepEqual(steps(events, "owner", "holder"), [
    ["acquired", "node-acl", ""], ["failed", "other", "node-acl"], ["renewed", "node-acl", ""], ["released", "node-acl", ""]]);
});

test("without +exists node-redlock cannot run its acquire script", async (t) => {
  const { app } = await asApp(t, []);
  const em = new Emitter(null, { sink: new MemorySink() });
  const rl = new Redlock([app], { emitter: em, retryCount: 0 });
  const errors = [];
  rl.on("error", (e) => errors.push(e));
  await assert.rejects(rl.acquire(["app:node-acl"], 1000), base.ExecutionError);
  assert.match(String(errors[0]), /can't run this command/); // EXISTS, at line 4 of the script
  await em.close();
});
