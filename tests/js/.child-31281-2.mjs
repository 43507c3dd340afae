
      import { EtcdLocks } from "edgelock";
      const c = new EtcdLocks({ endpoints: [process.env.ETCD], prefix: "js", sessionTtlMs: 5000, requestTimeoutMs: 1000 });
      const lock = await c.resume(JSON.parse(process.env.HANDLE));
      await new Promise((r) => setTimeout(r, 6000));
      if (lock.signal.aborted) throw new Error("resumed lock was lost");
      console.log(lock.fencingToken.toString());
      await lock.release();
      await c.close();
    