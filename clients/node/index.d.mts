// The ES module face of index.d.ts (index.mjs): `import Redlock from "lockscope"`.
export * from "./index.js";
export { Redlock as default } from "./index.js";
