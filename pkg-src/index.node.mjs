// Node entry: the wasm is read from disk next to this file and instantiated
// synchronously, so the module has no top-level await and `require("edgelock")`
// works too (Node >= 20.19 / 22.12 load ES modules from require()).
import { readFileSync } from "node:fs";
import { initSync } from "./edgelock_wasm.js";

initSync({ module: readFileSync(new URL("./edgelock_wasm_bg.wasm", import.meta.url)) });

export { EtcdLocks, RedisLocks, Redlock, LockError } from "./api.mjs";
