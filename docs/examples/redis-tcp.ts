import { RedisLocks } from "edgelock";

const locks = new RedisLocks({ url: "rediss://default:" + process.env.REDIS_PASSWORD + "@cache.example:6380" });
await locks.request("nightly", { waitMs: 10_000 }, async (lock) => work(lock.fencingToken));

interface Env { REDIS_URL: string; REDIS_PASSWORD: string }

// In a Worker, with the npm package (this repository's Worker takes
// redis:// nodes in its configuration too: see docs/worker.md):
export default {
  async fetch(req: Request, env: Env): Promise<Response> {
    const locks = new RedisLocks({ url: env.REDIS_URL, token: env.REDIS_PASSWORD });
    try {
      const lock = await locks.tryAcquire("job");
      if (!lock) return new Response("busy", { status: 409 });
      try { return new Response(String(lock.fencingToken)); } finally { await lock.release(); }
    } finally { await locks.close(); }
  },
};
