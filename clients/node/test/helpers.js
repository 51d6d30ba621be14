"use strict";
// Test helpers: a real redis-server on loopback, reading the event stream
// back, polling for a condition. A missing redis-server is a failure, never
// a skip.

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const Redis = require("ioredis");
const ev = require("../lib/event");

function which(cmd) {
  for (const dir of (process.env.PATH || "").split(path.delimiter)) {
    const p = path.join(dir, cmd);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return p;
    } catch {}
  }
  return null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitFor(what, cond, within = 10000) {
  const deadline = Date.now() + within;
  for (;;) {
    if (await cond()) return;
    if (Date.now() > deadline) throw new Error(`still waiting after ${within} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Server is one redis-server process on 127.0.0.1. */
class Server {
  static async start() {
    const s = new Server();
    s.binary = which("redis-server");
    if (!s.binary) throw new Error("redis-server not found in PATH: apt-get install -y --no-install-recommends redis-server (bash scripts/deps.sh)");
    s.dir = fs.mkdtempSync(path.join(os.tmpdir(), "lockscope-node-"));
    s.port = await freePort();
    await s.run();
    return s;
  }

  async run() {
    this.proc = spawn(this.binary, ["--port", String(this.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", this.dir], { stdio: "ignore" });
    this.exited = new Promise((r) => this.proc.once("exit", r));
    await waitFor(`redis-server on port ${this.port}`, () => ping(this.port), 10000);
  }

  get url() {
    return `redis://127.0.0.1:${this.port}`;
  }

  client(opts = {}) {
    const c = new Redis(this.port, "127.0.0.1", { lazyConnect: false, ...opts });
    c.on("error", () => {});
    return c;
  }

  async stop() {
    this.proc.kill("SIGTERM");
    await this.exited;
  }

  async startAgain() {
    await this.run();
  }

  async close() {
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill("SIGKILL");
      await this.exited;
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

function ping(port) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1");
    sock.setTimeout(1000);
    sock.once("connect", () => sock.write("PING\r\n"));
    sock.once("data", (d) => {
      sock.destroy();
      resolve(d.toString().startsWith("+PONG"));
    });
    sock.once("error", () => resolve(false));
    sock.once("timeout", () => {
      sock.destroy();
      resolve(false);
    });
  });
}

let prefixes = 0;

/** prefix returns a key prefix unique to the test. */
function prefix(t) {
  return `t:${t.name.replace(/\W+/g, "_").slice(0, 40)}:${process.pid}.${++prefixes}:`;
}

/** readStream returns the stream's entries and the events they decode to. */
async function readStream(r, stream) {
  const entries = await r.xrangeBuffer(stream, "-", "+");
  const events = [];
  for (const [, fields] of entries) events.push(...ev.decode(fields));
  return { entries, events };
}

/** steps returns [type, ...fields] rows, for comparing what matters. */
function steps(events, ...fields) {
  return events.map((e) => [e.type, ...fields.map((f) => e[f])]);
}

/** parseJSON parses JSON keeping integers beyond 2^53 exact (as bigints). */
function parseJSON(text) {
  let i = 0;
  const ws = () => {
    while (/\s/.test(text[i])) i++;
  };
  const value = () => {
    ws();
    const c = text[i];
    if (c === "{") {
      i++;
      const o = {};
      ws();
      if (text[i] === "}") return i++, o;
      for (;;) {
        ws();
        const k = value();
        ws();
        i++; // :
        o[k] = value();
        ws();
        if (text[i++] === "}") return o;
      }
    }
    if (c === "[") {
      i++;
      const a = [];
      ws();
      if (text[i] === "]") return i++, a;
      for (;;) {
        a.push(value());
        ws();
        if (text[i++] === "]") return a;
      }
    }
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      const s = JSON.parse(text.slice(i, j + 1));
      i = j + 1;
      return s;
    }
    const m = /^-?\d+(\.\d+)?([eE][-+]?\d+)?|^true|^false|^null/.exec(text.slice(i, i + 400));
    i += m[0].length;
    if (/^-?\d+$/.test(m[0])) {
      const n = BigInt(m[0]);
      return n >= -0x1fffffffffffffn && n <= 0x1fffffffffffffn ? Number(n) : n;
    }
    return JSON.parse(m[0]);
  };
  return value();
}

const GOLDEN = path.join(__dirname, "..", "..", "..", "event", "testdata", "golden");

/** goldenEvents returns the events of event/testdata/golden/events.json in
 * this package's form (as the decoder returns them). */
function goldenEvents() {
  const doc = parseJSON(fs.readFileSync(path.join(GOLDEN, "events.json"), "utf8"));
  return doc.events.map((g) => {
    const e = {
      type: g.type, key: g.key_hex !== undefined ? Buffer.from(g.key_hex, "hex") : g.key || "", owner: g.owner || "", lease: g.lease || "",
      ts: BigInt(g.ts || 0), wait: g.wait || 0, hold: g.hold || 0, ttl: g.ttl || 0, attempts: g.attempts || 0, fence: g.fence || 0,
      reason: g.reason || "", count: g.count || 0, holder: g.holder || "", by: g.by || "", degraded: !!g.degraded, passive: !!g.passive,
      traceId: g.trace_id || "", spanId: g.span_id || "", headroom: g.headroom || 0,
    };
    return e;
  });
}


module.exports = { Server, freePort, waitFor, prefix, readStream, steps, parseJSON, goldenEvents, GOLDEN, which };
