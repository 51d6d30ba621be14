"use strict";
// Lock values: what a lockscope lock stores under its key.
//
// A lock taken through this package stores the value the Go library writes
// (lock/value.go), "ls1|<token>|<lease>|<fence>|<since ms>|<owner>", instead
// of node-redlock's 32 random hex digits. node-redlock's scripts compare the
// value byte for byte, so they work unchanged; and whoever reads the key (a
// Go lock.Client refused by it, `lockscope inspect`, a restarted collector,
// the passive watcher) learns who holds it without any event. The
// 22-character token part is the secret; the lease id is public and links
// the hold's events.

const crypto = require("node:crypto");
const os = require("node:os");
const path = require("node:path");

const MAGIC = "ls1|";

/** newLease returns {secret, lease} for a fresh hold: the 22-character
 * secret token and the public lease id (16 hex digits). */
function newLease() {
  // The bytes come from a pool filled by the CSPRNG 256 leases at a time
  // (as the uuid package does): one call into it per lease cost more than
  // the rest of the lock's bookkeeping.
  if (poolAt + 24 > pool.length) {
    crypto.randomFillSync(pool);
    poolAt = 0;
  }
  const r = pool.subarray(poolAt, (poolAt += 24));
  return { secret: r.toString("base64url", 0, 16), lease: r.toString("hex", 16, 24) };
}

const pool = Buffer.alloc(24 * 256);
let poolAt = pool.length;

/** make returns the value "ls1|<secret>|<lease>|<fence>|<sinceMs>|<owner>",
 * as Go's lock.Value.String. */
function make(secret, lease, sinceMs, owner, fence = 0) {
  return MAGIC + secret + "|" + lease + "|" + fence + "|" + sinceMs + "|" + owner;
}

/** parse parses a value written by lockscope (this package, the Go library,
 * the Python package); it returns null for any other value (another
 * library's token). value is a string or a Buffer. */
function parse(value) {
  if (value === null || value === undefined) return null;
  const s = Buffer.isBuffer(value) ? value.toString("latin1") : Buffer.from(String(value), "utf8").toString("latin1");
  if (!s.startsWith(MAGIC)) return null;
  const parts = [];
  let rest = s.slice(MAGIC.length);
  for (let i = 0; i < 4; i++) {
    const j = rest.indexOf("|");
    if (j < 0) return null;
    parts.push(rest.slice(0, j));
    rest = rest.slice(j + 1);
  }
  if (!parts[0] || !parts[1] || !/^[-+]?[0-9]+$/.test(parts[2]) || !/^[-+]?[0-9]+$/.test(parts[3])) return null;
  const owner = Buffer.from(rest, "latin1");
  return {
    token: parts[0],
    lease: parts[1],
    fence: Number(parts[2]),
    sinceMs: Number(parts[3]),
    owner: require("node:buffer").isUtf8(owner) ? owner.toString("utf8") : owner,
  };
}

/** fingerprint returns the hex SHA-1 of a lock value (what a forced release
 * quotes). */
function fingerprint(value) {
  return crypto.createHash("sha1").update(Buffer.isBuffer(value) ? value : Buffer.from(String(value), "utf8")).digest("hex");
}

// 100 ns intervals from 1582-10-15 (the UUID epoch) to 1970 and to 2015.
const UUID_1970 = 0x01b21dd213814000n;
const UUID_2015 = UUID_1970 + 1420070400n * 10000000n;

function mixed(s) {
  const kinds = new Set();
  for (const c of s) {
    if (c >= "A" && c <= "Z") kinds.add(0);
    else if (c >= "a" && c <= "z") kinds.add(1);
    else if (c >= "0" && c <= "9") kinds.add(2);
    else kinds.add(3);
  }
  return kinds.size >= 2;
}

// token16 reports whether s is the base64 (urlsafe: unpadded base64url) of 16
// bytes, with the unused bits zero as encoders write them, and of more than
// one kind of character (as Go's lock.ForeignKind).
function token16(s, urlsafe) {
  const re = urlsafe ? /^[A-Za-z0-9_-]{22}$/ : /^[A-Za-z0-9+/]{22}==$/;
  if (!re.test(s)) return false;
  const b = Buffer.from(s, urlsafe ? "base64url" : "base64");
  const again = b.toString(urlsafe ? "base64url" : "base64");
  return b.length === 16 && again === s && mixed(s);
}

function uuid1(v) {
  if (v[12] !== "1" || !"89ab".includes(v[16])) return false;
  const t = BigInt("0x" + v.slice(13, 16) + v.slice(8, 12) + v.slice(0, 8));
  return t >= UUID_2015 && t < UUID_1970 + BigInt(Date.now() + 86400000) * 10000n;
}

/** foreignKind names the library whose lock token value is, by its shape, or
 * returns "" (as Go's lock.ForeignKind). */
function foreignKind(value) {
  const v = Buffer.isBuffer(value) ? value.toString("latin1") : String(value);
  if (v.length === 32 && /^[0-9a-f]{32}$/.test(v)) return uuid1(v) ? "redis-py" : "node-redlock";
  if (v.length === 24 && v.endsWith("==") && token16(v, false)) return "redsync";
  if (v.length >= 22 && token16(v.slice(0, 22), true)) return "redislock";
  return "";
}

/** holderName names the holder of a lock from its stored value: the owner
 * for a lockscope value; for another library's, its kind and the first 8 hex
 * digits of the value's fingerprint (as Go's lock.ForeignOwner), never the
 * value, which is that library's secret token. "" for no value. */
function holderName(value) {
  if (value === null || value === undefined) return "";
  const v = parse(value);
  if (v !== null) return v.owner;
  return (foreignKind(value) || "foreign") + " " + fingerprint(value).slice(0, 8);
}

/** defaultOwner returns "<program>/<host>/<pid>", the owner used when none is
 * set (as Go's lock.DefaultOwner): the program is the script node runs. */
function defaultOwner() {
  const prog = process.argv[1] ? path.basename(process.argv[1]) : path.basename(process.argv0 || "node");
  return `${prog}/${os.hostname() || "unknown"}/${process.pid}`;
}

module.exports = { MAGIC, newLease, make, parse, fingerprint, foreignKind, holderName, defaultOwner };
