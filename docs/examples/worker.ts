import { Redlock } from "edgelock";

interface Env { REDIS_URLS: string; REDIS_TOKEN: string }

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const redlock = new Redlock({
      nodes: env.REDIS_URLS.split(",").map((url) => ({ url, token: env.REDIS_TOKEN })),
      ttlMs: 10_000,
    });
    try {
      return await redlock.request("cron:rollup", { ifAvailable: true }, async (lock) =>
        lock ? new Response(`ran with token ${lock.fencingToken}`) : new Response("busy", { status: 409 }));
    } finally {
      await redlock.close();
    }
  },
};
