import { D1Locks, d1Binding } from "edgelock";
import type { D1DatabaseLike } from "edgelock";

interface Env { DB: D1DatabaseLike }

export default {
  async fetch(req: Request, env: Env): Promise<Response> {
    // [docs:d1]
    const locks = new D1Locks({ binding: "DB", bindings: { DB: d1Binding(env.DB) } });
    await locks.request("nightly", async (lock) => writeWith(lock.fencingToken));
    // [/docs:d1]
    await locks.close();
    return new Response("done");
  },
};
