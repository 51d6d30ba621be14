"use strict";
// Redlock: node-redlock's class, seen by lockscope.
//
// The same constructor, methods, settings, results and errors as
// node-redlock 5 (the errors are node-redlock's own classes, so instanceof
// works against what the user imports from node-redlock), plus two
// settings: owner (who the dashboard shows) and emitter (where the events
// go). Its operations run node-redlock's
// own scripts (this.scripts, custom ones included) with node-redlock's
// quorum, retry and drift rules, re-implemented here so that each attempt
// is seen: the first refused one names the holder and starts the wait.

const { AsyncLocalStorage } = require("node:async_hooks");
const { performance } = require("node:perf_hooks");
const ev = require("./event");
const value = require("./value");
const { Emitter, nowNs } = require("./emitter");

const HOLD = Symbol("lockscope.hold");
const MAX_HELD_LEASES = 16; // as the Go library

// The holds of the enclosing using() routines (innermost first): a wait
// lists their leases, the wait-for graph's edges by which the collector
// finds a deadlock.
const scopes = new AsyncLocalStorage();

function heldLeases() {
  const out = [];
  const now = Date.now();
  for (let s = scopes.getStore(); s && out.length < MAX_HELD_LEASES; s = s.outer) {
    const h = s.hold;
    if (h && !h.ended && h.expiresAt > now && !out.includes(h.lease)) out.push(h.lease);
  }
  return out;
}

/** Hold is one hold of a lock: its event keys, public lease, owner, since. */
class Hold {
  constructor(redlock, keys, lease, owner, at, atPerf, ttl) {
    this.redlock = redlock;
    this.keys = keys;
    this.lease = lease;
    this.owner = owner;
    this.since = at; // Unix ms, the value's since
    this.sincePerf = atPerf;
    this.expiresAt = at + ttl; // Unix ms: the key's TTL runs out no earlier
    this.ended = false;
    this.renewError = false; // the last renewal failed with an error
  }

  record(type, fields) {
    const em = this.redlock.emitter;
    const ts = nowNs();
    for (const key of this.keys) em.record({ type, key, owner: this.owner, lease: this.lease, ts, ...fields });
  }

  // end records that the hold ended (released or lost), once.
  end(type, reason = "") {
    if (this.ended) return;
    this.ended = true;
    this.record(type, { hold: Math.round((performance.now() - this.sincePerf) * 1e6), reason });
  }
}

// The emitters of Redlocks made without one: one per Redis client.
const defaults = new WeakMap();

function defaultEmitter(client) {
  let em = defaults.get(client);
  if (!em || em._closed) {
    em = new Emitter(client);
    defaults.set(client, em);
  }
  return em;
}

function delay(settings) {
  const ms = Math.max(0, settings.retryDelay + Math.floor((Math.random() * 2 - 1) * settings.retryJitter));
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// define returns lockscope's Redlock and Lock built on a node-redlock
// module (its CommonJS or its ES module build: each has classes of its own,
// and a user's instanceof checks the ones of the build they import).
function define(base) {
  const BaseRedlock = base.default;
  const { Lock: BaseLock, ResourceLockedError, ExecutionError } = base;

  /** Lock is node-redlock's Lock, with the hold's public lease id and owner. */
  class Lock extends BaseLock {
    constructor(redlock, resources, val, attempts, expiration, hold) {
      super(redlock, resources, val, attempts, expiration);
      this[HOLD] = hold || null;
    }

    /** lease is the public id of this hold, which its events carry and the
     * stored value names ("" for a lock this package did not take). */
    get lease() {
      return this[HOLD] ? this[HOLD].lease : "";
    }

    /** owner is who holds it, as the dashboard shows. */
    get owner() {
      return this[HOLD] ? this[HOLD].owner : "";
    }
  }

  class Redlock extends BaseRedlock {
    /**
     * new Redlock(clients, settings, scripts): as node-redlock's, plus the
     * settings owner (default "<program>/<host>/<pid>") and emitter (default:
     * one Emitter per first client, made on first use, writing to
     * lockscope:events on that client's server).
     */
    constructor(clients, settings = {}, scripts = {}) {
      super(clients, settings, scripts);
      const s = settings || {};
      this.owner = s.owner === undefined || s.owner === null ? value.defaultOwner() : String(s.owner);
      this._emitter = s.emitter || null;
      const first = this.clients.values().next().value;
      this._first = first;
      this._prefix = (first && first.options && first.options.keyPrefix) || "";
    }

    /** emitter is where this Redlock's events go. */
    get emitter() {
      return this._emitter || defaultEmitter(this._first);
    }

    async quit() {
      for (const c of this.clients) {
        const em = defaults.get(c);
        if (em && em !== this._emitter) {
          defaults.delete(c);
          await em.close(1000).catch(() => {});
        }
      }
      return super.quit();
    }

    /** holder names who holds resource now (its owner, or another library's
     * name for it, never its token), or null when it is free. One GET on the
     * first client. */
    async holder(resource) {
      const v = await this._first.getBuffer(resource);
      return v === null ? null : value.holderName(v);
    }

    async acquire(resources, duration, settings) {
      if (Math.floor(duration) !== duration) {
        throw new Error("Duration must be an integer value in milliseconds.");
      }
      const s = settings ? { ...this.settings, ...settings } : this.settings;
      const outer = heldLeases(); // the caller's context, before any await
      const owner = this.owner;
      const { secret, lease } = value.newLease();
      const keys = resources.map((r) => this._prefix + r);
      const t0 = performance.now();
      const maxAttempts = s.retryCount === -1 ? Infinity : s.retryCount + 1;
      const attempts = [];
      let blocked = -1; // the resource found held, whose holder the wait is for
      let holder = "";
      let waited = false;
      const sinceStart = () => Math.round((performance.now() - t0) * 1e6);
      const failed = (reason) => {
        this.emitter.record({ type: "failed", key: keys[Math.max(blocked, 0)], owner, lease, ts: nowNs(), wait: sinceStart(), attempts: attempts.length, reason, holder });
      };
      try {
        for (;;) {
          const at = Date.now();
          const atPerf = performance.now();
          const val = value.make(secret, lease, at, owner);
          const r = await this._lsAttempt(this.scripts.acquireScript, resources, [val, duration]);
          attempts.push(r.stats);
          if (r.vote === "for") {
            const h = new Hold(this, keys, lease, owner, at, atPerf, duration);
            // Add 2 milliseconds to the drift to account for Redis expires
            // precision, plus the allowed drift factor (node-redlock's rule),
            // from the attempt that set the keys.
            const drift = Math.round(((settings && settings.driftFactor) ?? this.settings.driftFactor) * duration) + 2;
            const lock = new Lock(this, resources, val, attempts, at + duration - drift, h);
            // The event's time is the value's since: a collector rebuilding
            // from the value and one that saw the event agree.
            const ts = BigInt(at) * 1000000n;
            const wait = sinceStart();
            for (const key of keys) this.emitter.record({ type: "acquired", key, owner, lease, ts, wait, ttl: duration, attempts: attempts.length, reason: outer.join(",") });
            return lock;
          }
          if (this.clients.size > 1) this._lsUndo(r.stats, resources, val);
          if (r.locked && blocked < 0) [blocked, holder] = await this._lsHolder(resources);
          if (attempts.length >= maxAttempts) {
            // A retry budget that ran out is a timeout; a single try refused
            // is "held"; Redis failing the last attempt is an error.
            failed(!r.locked ? ev.REASON_ERROR : attempts.length === 1 ? ev.REASON_HELD : ev.REASON_TIMEOUT);
            throw new ExecutionError("The operation was unable to achieve a quorum during its retry window.", attempts);
          }
          if (r.locked && !waited) {
            waited = true;
            const budget = maxAttempts === Infinity ? 0 : (maxAttempts - attempts.length) * (s.retryDelay + s.retryJitter) * 1e6;
            this.emitter.record({ type: "waiting", key: keys[blocked], owner, lease, ts: nowNs(), wait: budget, attempts: 1, holder, reason: outer.join(",") });
          }
          await delay(s);
        }
      } catch (err) {
        if (!(err instanceof ExecutionError)) failed(ev.REASON_ERROR);
        throw err;
      }
    }

    async release(lock, settings) {
      // Immediately invalidate the lock.
      lock.expiration = 0;
      const h = lock[HOLD];
      let seen = false;
      const onAttempt = (r) => {
        if (seen || !h || !(r.vote === "for" || r.locked)) return;
        seen = true;
        h.end("released", r.vote === "for" ? "" : ev.REASON_NOT_OWNER);
      };
      try {
        return await this._lsExecute(this.scripts.releaseScript, lock.resources, [lock.value], settings, onAttempt);
      } catch (err) {
        // Redis unreachable: the lock expires at its TTL, which the collector
        // sees.
        if (h && !seen) h.ended = true;
        throw err;
      }
    }

    async extend(existing, duration, settings) {
      if (Math.floor(duration) !== duration) {
        throw new Error("Duration must be an integer value in milliseconds.");
      }
      const h = existing[HOLD];
      // The lock has already expired.
      if (existing.expiration < Date.now()) {
        if (h) h.end("lost", h.renewError ? ev.REASON_ERROR : ev.REASON_NOT_OWNER);
        throw new ExecutionError("Cannot extend an already-expired lock.", []);
      }
      let seen = false;
      let at = Date.now();
      const onAttempt = (r) => {
        if (r.vote === "for") at = r.at;
        if (seen || !h || h.ended) return;
        if (r.vote === "for") {
          seen = true;
          const headroom = Math.max(0, h.expiresAt - r.at) * 1e6;
          h.expiresAt = r.at + duration;
          h.renewError = false;
          h.record("renewed", { ttl: duration, headroom });
        } else if (r.locked) {
          seen = true;
          h.end("lost", ev.REASON_NOT_OWNER);
        }
      };
      let attempts;
      try {
        ({ attempts } = await this._lsExecute(this.scripts.extendScript, existing.resources, [existing.value, duration], settings, onAttempt));
      } catch (err) {
        if (h && !seen && !h.ended) {
          h.renewError = true;
          h.record("renew_failed", { reason: ev.REASON_ERROR });
        }
        throw err;
      }
      // Invalidate the existing lock.
      existing.expiration = 0;
      const drift = Math.round(((settings && settings.driftFactor) ?? this.settings.driftFactor) * duration) + 2;
      return new Lock(this, existing.resources, existing.value, attempts, at + duration - drift, h);
    }

    // using is node-redlock's, its routine run with the lock counted as held
    // by the calls it makes (their waits list its lease).
    async using(resources, duration, settingsOrRoutine, optionalRoutine) {
      if (Math.floor(duration) !== duration) {
        throw new Error("Duration must be an integer value in milliseconds.");
      }
      const settings = settingsOrRoutine && typeof settingsOrRoutine !== "function" ? { ...this.settings, ...settingsOrRoutine } : this.settings;
      const routine = optionalRoutine ?? settingsOrRoutine;
      if (typeof routine !== "function") {
        throw new Error("INVARIANT: routine is not a function.");
      }
      if (settings.automaticExtensionThreshold > duration - 100) {
        throw new Error("A lock `duration` must be at least 100ms greater than the `automaticExtensionThreshold` setting.");
      }
      // The routine learns of a failure to extend the lock, and its
      // expiration, through the signal; the error is at signal.error.
      const controller = new AbortController();
      const signal = controller.signal;
      const outer = scopes.getStore();
      let timeout;
      let extension;
      let lock;
      const queue = () => {
        timeout = setTimeout(() => (extension = extend()), lock.expiration - Date.now() - settings.automaticExtensionThreshold);
      };
      const extend = async () => {
        timeout = undefined;
        try {
          lock = await lock.extend(duration);
          queue();
        } catch (error) {
          if (!(error instanceof Error)) {
            throw new Error(`Unexpected thrown ${typeof error}: ${error}.`);
          }
          if (lock.expiration > Date.now()) {
            return (extension = extend());
          }
          signal.error = error;
          controller.abort();
        }
      };
      lock = await this.acquire(resources, duration, settings);
      queue();
      try {
        return await scopes.run({ hold: lock[HOLD], outer }, () => routine(signal));
      } finally {
        if (timeout) {
          clearTimeout(timeout);
          timeout = undefined;
        }
        // Wait for an in-flight extension to finish.
        if (extension) {
          await extension.catch(() => {});
        }
        await lock.release();
      }
    }

    // --- node-redlock's execution, attempt by attempt ------------------------------------------

    // _lsExecute runs script on all clients until a quorum is for it, at most
    // retryCount + 1 times, as node-redlock's _execute; onAttempt(result) sees
    // each attempt.
    async _lsExecute(script, keys, args, _settings, onAttempt) {
      const settings = _settings ? { ...this.settings, ..._settings } : this.settings;
      // A retryCount of -1 is Infinity (node-redlock's convention).
      const maxAttempts = settings.retryCount === -1 ? Infinity : settings.retryCount + 1;
      const attempts = [];
      for (;;) {
        const r = await this._lsAttempt(script, keys, args);
        attempts.push(r.stats);
        onAttempt(r);
        if (r.vote === "for") return { attempts };
        if (attempts.length < maxAttempts) {
          await delay(settings);
        } else {
          throw new ExecutionError("The operation was unable to achieve a quorum during its retry window.", attempts);
        }
      }
    }

    // _lsAttempt runs script once on every client and resolves as soon as a
    // quorum is for or against it: {vote, stats (resolved once every vote is
    // in), locked (a vote against was a resource held), at (Unix ms when it
    // was sent)}.
    _lsAttempt(script, keys, args) {
      const at = Date.now();
      return new Promise((resolve) => {
        const stats = {
          membershipSize: this.clients.size,
          quorumSize: Math.floor(this.clients.size / 2) + 1,
          votesFor: new Set(),
          votesAgainst: new Map(),
        };
        let done;
        const statsPromise = new Promise((r) => (done = () => r(stats)));
        let locked = false;
        let decided = false;
        const onResult = (res) => {
          if (res.vote === "for") {
            stats.votesFor.add(res.client);
          } else {
            stats.votesAgainst.set(res.client, res.error);
            if (res.error instanceof ResourceLockedError) locked = true;
          }
          if (!decided && stats.votesFor.size === stats.quorumSize) {
            decided = true;
            resolve({ vote: "for", stats: statsPromise, locked, at });
          }
          if (!decided && stats.votesAgainst.size === stats.quorumSize) {
            decided = true;
            resolve({ vote: "against", stats: statsPromise, locked, at });
          }
          if (stats.votesFor.size + stats.votesAgainst.size === stats.membershipSize) done();
        };
        for (const client of this.clients) {
          this._lsAttemptOnClient(client, script, keys, args).then(onResult, (error) => {
            // Unexpected: crash rather than go on undefined (as node-redlock).
            throw error;
          });
        }
      });
    }

    async _lsAttemptOnClient(client, script, keys, args) {
      try {
        const result = await this._lsEval(client, script, keys, args);
        // One or more of the resources was already locked.
        if (result !== keys.length) {
          throw new ResourceLockedError(`The operation was applied to: ${result} of the ${keys.length} requested resources.`);
        }
        return { vote: "for", client, value: result };
      } catch (error) {
        if (!(error instanceof Error)) {
          throw new Error(`Unexpected type ${typeof error} thrown with value: ${error}`);
        }
        // Emit the error on the redlock instance for observability.
        this.emit("error", error);
        return { vote: "against", client, error };
      }
    }

    // _lsEval runs script by its hash, by its text if the server lacks it.
    async _lsEval(client, script, keys, args) {
      let result;
      try {
        result = await client.evalsha(script.hash, keys.length, [...keys, ...args]);
      } catch (error) {
        if (!(error instanceof Error) || !error.message.startsWith("NOSCRIPT")) throw error;
        result = await client.eval(script.value, keys.length, [...keys, ...args]);
      }
      if (typeof result !== "number") {
        throw new Error(`Unexpected result of type ${typeof result} returned from redis.`);
      }
      return result;
    }

    // _lsUndo releases, once every vote of a failed acquire attempt is in, what
    // the attempt set on a minority of clients: each attempt stores a value of
    // its own (its since), which the next attempt cannot reuse.
    _lsUndo(statsPromise, resources, val) {
      statsPromise.then((st) => {
        for (const c of st.votesFor) this._lsEval(c, this.scripts.releaseScript, resources, [val]).catch(() => {});
      });
    }

    // _lsHolder finds the first of resources that is held and names its
    // holder: [index, name], [0, ""] when none is (or Redis does not answer).
    async _lsHolder(resources) {
      try {
        const vals = await Promise.all(resources.map((r) => this._first.getBuffer(r)));
        const i = vals.findIndex((v) => v !== null);
        return i < 0 ? [0, ""] : [i, value.holderName(vals[i])];
      } catch {
        return [0, ""];
      }
    }
  }

  return { Redlock, Lock, ResourceLockedError, ExecutionError };
}

module.exports = { define, heldLeases, ...define(require("redlock")) };
