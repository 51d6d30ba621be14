"use strict";
// The package installs from a tarball (npm pack) with its one dependency
// and its peer, from npm's cache where it can (--prefer-offline: npm ci
// caches the tarballs but not always the registry's metadata, which
// resolving "redlock@<version>" needs), and works where it was installed,
// from CommonJS and an ES module.

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { execFileSync } = require("node:child_process");

const here = path.join(__dirname, "..");
const pkg = require("../package.json");

function npm(args, cwd) {
  try {
    return execFileSync("npm", args, { cwd, encoding: "utf8", stdio: "pipe", env: { ...process.env, npm_config_loglevel: "error" } });
  } catch (err) {
    assert.fail(`npm ${args.join(" ")}: ${err.stdout}${err.stderr}`);
  }
}

test("installs from its tarball and imports from there", (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "lockscope-pack-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const [packed] = JSON.parse(npm(["pack", "--json", "--pack-destination", dir], here));
  const files = packed.files.map((f) => f.path).sort();
  assert.deepEqual(files, ["README.md", "index.d.mts", "index.d.ts", "index.js", "index.mjs", "lib/emitter.js", "lib/event.js", "lib/redlock.js", "lib/value.js", "package.json"]);
  assert.deepEqual(Object.keys(pkg.dependencies), ["ioredis"]);
  assert.deepEqual(Object.keys(pkg.peerDependencies), ["redlock"]);

  const app = path.join(dir, "app");
  fs.mkdirSync(app);
  fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", private: true }));
  const redlock = JSON.parse(fs.readFileSync(path.join(here, "node_modules", "redlock", "package.json"), "utf8")).version;
  npm(["install", "--prefer-offline", "--no-audit", "--no-fund", path.join(dir, packed.filename), "redlock@" + redlock.replace(/^v/, "")], app);
  const cjs = execFileSync(process.execPath, ["-e", 'const l = require("lockscope"); console.log(require.resolve("lockscope"), typeof l.default, typeof l.Emitter, l.default === l.Redlock)'], { cwd: app, encoding: "utf8" });
  assert.equal(cjs, `${path.join(app, "node_modules", "lockscope", "index.js")} function function true\n`);
  // Each module system gets classes that extend, and errors that are, its
  // own build of node-redlock: instanceof holds against what the user imports.
  const esm = execFileSync(process.execPath, ["--input-type=module", "-e", 'import Redlock, { Emitter, ExecutionError } from "lockscope"; import Base, * as base from "redlock"; console.log(Object.getPrototypeOf(Redlock) === Base, ExecutionError === base.ExecutionError, typeof Emitter)'], { cwd: app, encoding: "utf8" });
  assert.equal(esm, "true true function\n");
  const both = execFileSync(process.execPath, ["-e", 'const l = require("lockscope"), b = require("redlock"); console.log(Object.getPrototypeOf(l.default) === b.default, l.ExecutionError === b.ExecutionError, new l.Lock(null, [], "", [], 0) instanceof b.Lock)'], { cwd: app, encoding: "utf8" });
  assert.equal(both, "true true true\n");
});
