import { RedisLocks } from "edgelock"; // in a <script type="module">, via your bundler or an import map

const locks = new RedisLocks({ url: "https://eu1-example.upstash.io", token: UPSTASH_TOKEN });
const lock = await locks.tryAcquire("editor:doc-42", { ttlMs: 30_000 });
if (lock === null) console.log("someone else is editing");
else await lock.release();
