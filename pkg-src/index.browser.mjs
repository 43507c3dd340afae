// Browser / Deno / default entry: the wasm is fetched from next to this file
// (bundlers understand `new URL(..., import.meta.url)`) and instantiated with
// top-level await before the API is usable.
import init from "./edgelock_wasm.js";

await init({ module_or_path: new URL("./edgelock_wasm_bg.wasm", import.meta.url) });

export { EtcdLocks, RedisLocks, Redlock, LockError } from "./api.mjs";
