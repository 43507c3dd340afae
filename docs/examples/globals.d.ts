// What the examples call but do not define: the user's own work and
// configuration. Type-checked together with every example by
// scripts/check-docs.sh (tsc --strict, against the packed package).
declare function writeReport(args: { fencingToken: bigint; signal: AbortSignal }): Promise<void>;
declare function work(fencingToken: bigint, signal?: AbortSignal): Promise<void>;
declare function writeWith(fencingToken: bigint): Promise<void>;
declare function render(slot: number, fencingToken: bigint): Promise<void>;
declare const UPSTASH_TOKEN: string;
declare const process: { env: Record<string, string | undefined> };
