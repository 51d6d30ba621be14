"use strict";
// lockscope for Node: node-redlock's Redlock and an ioredis emitter that
// make waits, waiters, failures and deadlocks visible on lockscope's
// dashboard. `const Redlock = require("lockscope").default` (or
// `import Redlock from "lockscope"`) in place of node-redlock's.

const { Redlock, Lock, ResourceLockedError, ExecutionError } = require("./lib/redlock");
const { Emitter, MemorySink, StreamSink } = require("./lib/emitter");
const event = require("./lib/event");
const value = require("./lib/value");

module.exports = { default: Redlock, Redlock, Lock, ResourceLockedError, ExecutionError, Emitter, MemorySink, StreamSink, event, value };
