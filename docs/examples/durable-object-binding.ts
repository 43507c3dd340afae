import { DurableObjectLocks, lockServiceRouter } from "edgelock";

const locks = new DurableObjectLocks({ binding: "LOCKS", bindings: { LOCKS: lockServiceRouter(env.EDGELOCK_LOCKS) } });
