// What the examples call but do not define: the user's own work and
// configuration. Type-checked together with every example by
// scripts/check-docs.sh (tsc --strict, against the packed package).
declare function writeReport(args: { fencingToken: bigint; signal: AbortSignal }): Promise<void>;
declare function work(fencingToken: bigint, signal?: AbortSignal): Promise<void>;
declare function writeWith(fencingToken: bigint): Promise<void>;
declare function render(slot: number, fencingToken: bigint): Promise<void>;
declare const UPSTASH_TOKEN: string;
declare const process: { env: Record<string, string | undefined> };
/** A Worker's bindings and secrets, as the Worker examples name them. */
declare const env: {
  EDGELOCK_LOCKS: import("edgelock").DurableObjectNamespaceLike;
  DB: import("edgelock").D1DatabaseLike;
  UPSTASH_TOKEN: string;
};
