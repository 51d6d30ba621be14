"use strict";
// The emitter: lock events to the lockscope stream, in packed batches.
//
// It behaves as the Go library's lock.Emitter and the Python
// lockscope.Emitter (docs/events.md, "How the Go emitter sends"): record()
// appends to an in-memory buffer and returns; one write at a time goes out
// in the background, a packed XADD ... MINID ~ of at most batchSize events,
// as soon as a batch is full, at most flushInterval after the first buffered
// event, on flush() and on close(). Memory is bounded by bufferSize events,
// buffered plus being written; when the buffer is full or a write fails,
// events are dropped, not retried, counted, and the next successful write
// starts with a `dropped` event carrying the count.

const ev = require("./event");
const { defaultOwner } = require("./value");

const DEFAULT_MAX_AGE = 15 * 60 * 1000; // ms of stream kept, on the stream's own clock
const DEFAULT_BATCH_SIZE = 2048;
const MAX_FLUSH_INTERVAL = 100;
const DEFAULT_BUFFER_SIZE = 16384;
const DEFAULT_WRITE_TIMEOUT = 1000;

class TimeoutError extends Error {
  constructor(message) {
    super(message);
    this.name = "TimeoutError";
  }
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new TimeoutError(`lockscope: ${what} did not finish within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

// The retention rule's constants (Go's event.RetentionClockEvery and
// RetentionAheadKeep): TIME is asked once a minute; after an ID in the
// future the newest 100 000 entries are kept.
const RETENTION_CLOCK_EVERY = 60_000;
const RETENTION_AHEAD_KEEP = 100_000;

function isCluster(client) {
  return !!client && (client.isCluster === true || typeof client.nodes === "function");
}

/**
 * StreamSink writes each batch as packed entries to the lockscope stream (or
 * its partitions): one entry per batch unless it passes ev.ENTRY_BYTES or a
 * decoder's limits. Each XADD trims the stream: with MAXLEN ~ maxLen if
 * maxLen is positive, else by age with the retention rule every writer of
 * the stream follows (docs/events.md, "Retention rule": Go's
 * event.Retention, Python's Retention): no entry ID is trusted, nor this
 * process's clock. maxAge 0: never trimmed. Each write is bounded by
 * writeTimeout ms.
 */
class StreamSink {
  constructor(client, { stream = ev.DEFAULT_STREAM, maxLen = 0, partitions = 0, maxAge = DEFAULT_MAX_AGE, writeTimeout = DEFAULT_WRITE_TIMEOUT } = {}) {
    this.client = client;
    this.streams = ev.streams(stream || ev.DEFAULT_STREAM, partitions);
    this.maxLen = maxLen > 0 ? maxLen : 0;
    this.maxAge = !this.maxLen && maxAge > 0 ? Math.floor(maxAge) : 0;
    this.writeTimeout = writeTimeout;
    this.newest = new Map(); // stream -> [ms, seq] of the newest entry ID Redis gave this sink
    this.offsetMs = 0; // Redis's clock minus this process's, from TIME
    this.synced = -Infinity; // performance.now() of the last TIME asked
  }

  /** nowMs is Redis's time by the last TIME and the local clock since. */
  nowMs() {
    return Date.now() + this.offsetMs;
  }

  /** syncClock asks Redis for its time (TIME) before the first write and
   * again at most every RETENTION_CLOCK_EVERY ms; a refusal (an ACL
   * without +time) leaves the local clock until it is asked again. */
  async syncClock() {
    if (!this.maxAge || performance.now() - this.synced < RETENTION_CLOCK_EVERY) return;
    this.synced = performance.now();
    const sent = Date.now();
    try {
      const [sec, usec] = await this.client.time();
      const received = Date.now();
      this.offsetMs = Number(sec) * 1000 + Number(usec) / 1000 - (sent + received) / 2;
    } catch {
      // the local clock stands in
    }
  }

  trim(stream) {
    if (this.maxLen) return ["MAXLEN", "~", String(this.maxLen)];
    if (!this.maxAge) return [];
    const now = this.nowMs();
    const [ms, seq] = this.newest.get(stream) || [0, 0];
    // After an ID in the future no age reaches the entries numbered after
    // it: keep the newest RETENTION_AHEAD_KEEP of them.
    if (ms > now && seq >= RETENTION_AHEAD_KEEP) return ["MINID", "~", `${ms}-${seq - RETENTION_AHEAD_KEEP}`];
    const cut = Math.floor(now) - this.maxAge;
    return cut > 0 ? ["MINID", "~", String(cut)] : [];
  }

  written(stream, id) {
    const [a, b = "0"] = String(id).split("-");
    const ms = parseInt(a, 10), seq = parseInt(b, 10);
    if (!Number.isFinite(ms) || !Number.isFinite(seq)) return;
    const [oms, oseq] = this.newest.get(stream) || [0, 0];
    if (ms > oms || (ms === oms && seq > oseq)) this.newest.set(stream, [ms, seq]);
  }

  async ready() {
    const c = this.client;
    if (isCluster(c) || c.status === "ready") return;
    if (c.status === "end") throw new Error("lockscope: the emitter's connection is closed");
    // A connection of our own that is (re)connecting: wait for it, within
    // the write's bound, rather than fail the write at once.
    await new Promise((resolve, reject) => {
      const done = (err) => {
        clearTimeout(timer);
        c.off("ready", onReady);
        c.off("end", onEnd);
        err ? reject(err) : resolve();
      };
      const onReady = () => done();
      const onEnd = () => done(new Error("lockscope: the emitter's connection is closed"));
      const timer = setTimeout(() => done(new TimeoutError(`lockscope: Redis not reachable within ${this.writeTimeout} ms`)), this.writeTimeout);
      c.on("ready", onReady);
      c.on("end", onEnd);
    });
  }

  async write(events) {
    if (events.length === 0) return;
    const n = this.streams.length;
    const entries = [];
    if (n === 1) {
      for (const e of ev.packEntries(events, ev.ENTRY_BYTES)) entries.push([this.streams[0], e]);
    } else {
      const parts = Array.from({ length: n }, () => []);
      for (const e of events) parts[ev.partitionOf(e.key, n)].push(e);
      parts.forEach((p, i) => {
        for (const e of ev.packEntries(p, ev.ENTRY_BYTES)) entries.push([this.streams[i], e]);
      });
    }
    const send = async () => {
      await this.ready();
      await this.syncClock();
      // Sent together (ioredis writes them back to back; a Cluster routes
      // each to its partition's master), answered together.
      const ids = await Promise.all(entries.map(([stream, { n, batch, ext }]) =>
        this.client.xadd(stream, ...this.trim(stream), "*", ...ev.packedFields(n, batch, ext))));
      entries.forEach(([stream], i) => this.written(stream, ids[i]));
    };
    await withTimeout(send(), this.writeTimeout, "write");
  }
}

/** MemorySink keeps every event written to it, for tests (yours and ours). */
class MemorySink {
  constructor() {
    this.events = [];
    this.writes = 0;
  }

  async write(events) {
    this.events.push(...events);
    this.writes++;
  }
}

// ownConnection returns a connection of the emitter's own to client's server
// (so that a large XADD never queues ahead of the application's commands,
// and a write fails at once when Redis is away instead of waiting in the
// offline queue), or null for a Cluster, which is used as it is.
function ownConnection(client, writeTimeout) {
  if (isCluster(client) || typeof client.duplicate !== "function") return null;
  const conn = client.duplicate({
    enableOfflineQueue: false,
    commandTimeout: writeTimeout,
    lazyConnect: false,
    keyPrefix: "",
    connectionName: "lockscope-emitter",
    maxRetriesPerRequest: 0,
  });
  conn.on("error", () => {}); // counted as write errors; ioredis reconnects by itself
  // The connection does not keep the process alive: a process whose work is
  // done exits, and the emitter flushes then (beforeExit).
  const unref = () => conn.stream && typeof conn.stream.unref === "function" && conn.stream.unref();
  conn.on("connect", unref);
  unref();
  return conn;
}

// The emitters to close when the process has nothing left to do.
const open = new Set();
let hooked = false;

function hookExit() {
  if (hooked) return;
  hooked = true;
  process.on("beforeExit", () => {
    for (const e of open) e.close(1000).catch(() => {});
  });
}

/**
 * Emitter batches lock events and writes them in the background.
 *
 * `new Emitter(redis)` writes packed batches to `lockscope:events` on the
 * server of redis (an ioredis Redis or Cluster). Options (0 or absent: the
 * default, as in Go's lock.EmitterOptions; durations in milliseconds):
 *
 * - stream: the stream key ("lockscope:events").
 * - partitions: spread events by lock key over this many streams
 *   (event.streams); collectors must read as many (`--partitions`).
 * - maxAge: keep the entries at most this many ms older than the newest, by
 *   the stream's own clock (XADD MINID ~; 15 minutes).
 * - maxLen: if positive, trim with MAXLEN ~ maxLen entries instead (an entry
 *   holds a batch); negative: never trim.
 * - batchSize: most events per write, and a write as soon as this many are
 *   buffered (2048); capped at bufferSize and at 9 999.
 * - flushInterval: the longest an event waits, in ms (100, the most).
 * - bufferSize: events held in memory, buffered or being written (16 384).
 * - writeTimeout: bound of one write, in ms (1000).
 * - owner: identity of the emitter's own `dropped` reports
 *   (program/host/pid).
 * - sink: an object whose async write(events) receives the batches, instead
 *   of the stream (MemorySink for tests).
 *
 * record() never blocks. A single-node client gets a connection of the
 * emitter's own, which does not keep the process alive: an emitter still
 * open when the process runs out of work is closed then (1 s bound). With a
 * Cluster the emitter sends through the client given: close the emitter
 * before you quit the client. close() flushes.
 */
class Emitter {
  constructor(client, opts = {}) {
    if (client && !opts.sink && typeof client.xadd !== "function" && typeof client.write === "function") {
      opts = { sink: client }; // new Emitter(null, {sink}) written as new Emitter(sink)
    }
    this._writeTimeout = opts.writeTimeout > 0 ? opts.writeTimeout : DEFAULT_WRITE_TIMEOUT;
    this._conn = null;
    let sink = opts.sink;
    if (!sink) {
      if (!client) throw new TypeError("lockscope: Emitter needs an ioredis client or a sink");
      let maxAge = opts.maxAge > 0 ? opts.maxAge : DEFAULT_MAX_AGE;
      if (opts.maxLen < 0) maxAge = 0; // never trimmed
      this._conn = ownConnection(client, this._writeTimeout);
      sink = new StreamSink(this._conn || client, {
        stream: opts.stream, maxLen: opts.maxLen, partitions: opts.partitions, maxAge, writeTimeout: this._writeTimeout,
      });
    }
    this._sink = sink;
    this.owner = opts.owner === undefined || opts.owner === null ? defaultOwner() : String(opts.owner);
    this._bufferSize = opts.bufferSize > 0 ? Math.floor(opts.bufferSize) : DEFAULT_BUFFER_SIZE;
    const batch = opts.batchSize > 0 ? Math.floor(opts.batchSize) : DEFAULT_BATCH_SIZE;
    this._batchSize = Math.min(batch, this._bufferSize, ev.MAX_BATCH_EVENTS - 1);
    this._interval = opts.flushInterval > 0 && opts.flushInterval <= MAX_FLUSH_INTERVAL ? opts.flushInterval : MAX_FLUSH_INTERVAL;

    this._buf = [];
    this._inflight = 0;
    this._closed = false;
    this._stop = 0; // Date.now() deadline of close(), once called
    this._closing = null; // close()'s promise
    this._flushes = []; // {resolve, reject} of flush() calls waiting for the next write
    this._recorded = this._sent = this._dropped = this._batches = this._errors = 0;
    this._unreported = 0;
    this._failing = false;
    this._writing = false;
    this._timer = null;
    this._retryAt = 0;
    this._idle = null; // resolves when the writer stops after close()
    if (this._conn) {
      open.add(this);
      hookExit();
    }
  }

  /** record buffers event e for the next batch. It never blocks: if the
   * buffer is full, the emitter is closed, or a string field is longer than
   * event.MAX_STRING_LEN, the event is dropped and counted. */
  record(e) {
    this._recorded++;
    if (this._closed || this._buf.length + this._inflight >= this._bufferSize || tooLarge(e)) {
      this._dropped++;
      this._unreported++;
      return;
    }
    this._buf.push(e);
    const n = this._buf.length;
    if (n === 1) this._arm();
    else if (n >= this._batchSize) this._kick();
  }

  /** flush writes every event recorded before the call and resolves once it
   * is written, at most timeout ms (absent: no bound). It rejects with the
   * write's error (those events are then dropped and counted) or a
   * TimeoutError. After close() it resolves at once: close() flushed. */
  flush(timeout) {
    if (this._stop) return Promise.resolve();
    const p = new Promise((resolve, reject) => this._flushes.push({ resolve, reject }));
    this._kick(true);
    return timeout > 0 ? withTimeout(p, timeout, "flush") : p;
  }

  /** close flushes what is buffered and stops, waiting at most timeout ms
   * (5000); past it, the events not yet written are dropped. Events recorded
   * after close() are dropped and counted. Idempotent; rejects with the final
   * write's error, or a TimeoutError. The emitter's own connection (not a
   * client you passed) is closed. */
  close(timeout = 5000) {
    if (this._closing) return this._closing;
    this._closed = true;
    this._stop = Date.now() + timeout;
    open.delete(this);
    this._closing = (async () => {
      const idle = new Promise((resolve) => (this._idle = resolve));
      this._kick(true);
      let err = null;
      try {
        err = await withTimeout(idle, timeout + 100, "close");
      } catch (e) {
        err = e;
      }
      if (this._conn) {
        const conn = this._conn;
        await withTimeout(conn.quit(), 1000, "quit").catch(() => conn.disconnect());
      }
      if (err) throw err;
    })();
    return this._closing;
  }

  /** stats returns the counters since the emitter was created. Once it is
   * closed, recorded == sent + dropped. */
  stats() {
    return { recorded: this._recorded, sent: this._sent, dropped: this._dropped, batches: this._batches, errors: this._errors };
  }

  // --- the writer ------------------------------------------------------------------------

  // _arm starts the interval clock of the oldest buffered event (or of the
  // next dropped report).
  _arm() {
    if (this._timer || this._writing) return;
    this._timer = setTimeout(() => {
      this._timer = null;
      this._kick(true);
    }, this._interval);
  }

  // _kick starts a write unless one is in flight (which looks again when it
  // ends); now: whatever is buffered, else only a full batch past the retry
  // pause that follows a failure.
  _kick(now = false) {
    if (this._writing) {
      if (now) this._again = true;
      return;
    }
    if (!now && Date.now() < this._retryAt) {
      this._arm();
      return;
    }
    if (this._timer) {
      clearTimeout(this._timer);
      this._timer = null;
    }
    this._run();
  }

  async _run() {
    this._writing = true;
    let err = null;
    for (;;) {
      this._again = false;
      const stop = this._stop;
      const flushes = this._flushes;
      this._flushes = [];
      const batch = this._buf;
      this._buf = [];
      this._inflight = batch.length;
      const report = this._unreported;
      // A write in flight keeps the process alive until it ends.
      const hold = this._conn ? setTimeout(() => {}, this._writeTimeout + 1000) : null;
      err = await this._flush(batch, report, stop);
      if (hold) clearTimeout(hold);
      if (err) this._retryAt = Date.now() + this._interval;
      for (const f of flushes) (err ? f.reject(err) : f.resolve());
      if (stop) {
        if (this._buf.length === 0 && this._flushes.length === 0) break;
        continue; // recorded while closing: written (or dropped past the deadline)
      }
      const n = this._buf.length;
      if (this._again || this._flushes.length || (n >= this._batchSize && Date.now() >= this._retryAt)) continue;
      break;
    }
    this._writing = false;
    if (this._stop) {
      // Anything still buffered was recorded too late to be written.
      this._dropped += this._buf.length;
      this._buf = [];
      if (this._idle) this._idle(err);
      return;
    }
    if (this._buf.length || this._unreported) this._arm();
  }

  // _flush writes batch in chunks of at most batchSize, the first led by a
  // dropped report when events were dropped since the last successful
  // write. After a failed chunk, or past close()'s deadline, the rest is
  // dropped without trying: the sink is failing, and memory stays bounded.
  // It returns the first error, or null.
  async _flush(batch, report, stop) {
    let err = null;
    let i = 0;
    while (i < batch.length || report > 0) {
      const size = this._batchSize - (report > 0 ? 1 : 0);
      const chunk = batch.slice(i, i + size);
      i += chunk.length;
      if (!err && stop && Date.now() >= stop) err = new TimeoutError("lockscope: close deadline passed before the write");
      if (!err) {
        let w = chunk;
        if (report > 0) w = [{ type: "dropped", key: "", owner: this.owner, ts: nowNs(), count: report }, ...chunk];
        err = await this._write(w, chunk.length, report);
      }
      if (err) {
        this._dropped += chunk.length;
        this._unreported += chunk.length;
      }
      this._inflight -= chunk.length;
      report = 0;
    }
    return err;
  }

  async _write(events, n, report) {
    try {
      await this._sink.write(events);
    } catch (e) {
      this._errors++;
      if (!this._failing) {
        this._failing = true;
        process.emitWarning(`lockscope emitter: write of ${events.length} events failed; dropping events until it recovers: ${e && e.message}`, "LockscopeWarning");
      }
      return e instanceof Error ? e : new Error(String(e));
    }
    this._batches++;
    this._sent += n;
    this._unreported -= report;
    this._failing = false;
    return null;
  }
}

function tooLarge(e) {
  for (const f of ["key", "owner", "lease", "reason", "holder", "by"]) {
    const s = e[f];
    if (!s) continue;
    // A string of n UTF-16 units is at most 3n bytes of UTF-8.
    if (typeof s === "string" ? s.length * 3 > ev.MAX_STRING_LEN && Buffer.byteLength(s) > ev.MAX_STRING_LEN : s.length > ev.MAX_STRING_LEN) return true;
  }
  return false;
}

/** nowNs returns the time in Unix nanoseconds (a bigint; the clock is
 * Date.now(), milliseconds). */
function nowNs() {
  return BigInt(Date.now()) * 1000000n;
}

module.exports = { Emitter, StreamSink, MemorySink, TimeoutError, nowNs, RETENTION_AHEAD_KEEP, DEFAULT_MAX_AGE, DEFAULT_BATCH_SIZE, DEFAULT_BUFFER_SIZE };
