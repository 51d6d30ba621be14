"use strict";
// index.d.ts and index.d.mts, checked with tsc against what a user of
// node-redlock writes (test/types/use.cts and use.mts), in CommonJS and as
// an ES module. TypeScript is a devDependency: a missing tsc fails.

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { execFileSync } = require("node:child_process");

test("the TypeScript types check", () => {
  const tsc = path.join(__dirname, "..", "node_modules", "typescript", "bin", "tsc");
  assert.ok(fs.existsSync(tsc), `${tsc} is missing: run npm ci in clients/node (bash scripts/deps.sh)`);
  try {
    execFileSync(process.execPath, [tsc, "-p", path.join(__dirname, "types")], { encoding: "utf8", stdio: "pipe" });
  } catch (err) {
    assert.fail(`tsc: ${err.stdout}${err.stderr}`);
  }
});
