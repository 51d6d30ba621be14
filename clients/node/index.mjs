// The ES module face of index.js: `import Redlock from "lockscope"`, as
// `import Redlock from "redlock"`. Its Redlock and Lock extend node-redlock's
// ES module build, and its errors are that build's, so instanceof checks
// against `import { ExecutionError } from "redlock"` hold (the CommonJS
// build has classes of its own). What they share (the held leases of
// using() scopes, the default emitters) is one.
import { createRequire } from "node:module";
import Base, { Lock as BaseLock, ResourceLockedError, ExecutionError } from "redlock";

const require = createRequire(import.meta.url);
const cjs = require("./index.js");
const { Redlock, Lock } = require("./lib/redlock.js").define({ default: Base, Lock: BaseLock, ResourceLockedError, ExecutionError });

export default Redlock;
export { Redlock, Lock, ResourceLockedError, ExecutionError };
export const { Emitter, MemorySink, StreamSink, event, value } = cjs;
