// Cloudflare Workers / workerd entry: Workers cannot fetch or compile wasm
// from bytes at run time; the module is imported (wrangler bundles `.wasm`
// imports as compiled WebAssembly.Module objects) and instantiated synchronously.
import wasmModule from "./edgelock_wasm_bg.wasm";
import { initSync } from "./edgelock_wasm.js";

initSync({ module: wasmModule });

export { EtcdLocks, RedisLocks, Redlock, LockError } from "./api.mjs";
