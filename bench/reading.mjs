// The "Reading" section of BENCHMARKS.md: the figures come from this run; the
// explanations come from how each library works (its requests per operation,
// how its waiters wait), which the tables above show.
const r2 = (x) => (Number.isFinite(x) ? x.toFixed(2) : "–");
const r1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "–");
const r0 = (x) => (Number.isFinite(x) ? String(Math.round(x)) : "–");
const pct = (x) => (Number.isFinite(x) ? `${(x * 100).toFixed(1)} %` : "–");

function cmp(edge, peer, higherIsBetter = true) {
  const q = edge / peer;
  if (!Number.isFinite(q)) return "not comparable";
  const better = higherIsBetter ? q >= 1 : q <= 1;
  return `${r2(q)}× (${better ? "edgelock ahead" : "edgelock behind"})`;
}

export function reading(res) {
  const u = res.uncontended, h = res.handoff, c = res.contended, fp = res.footprint;
  const lines = [];
  const get = (o, id) => o[id] ?? {};
  const ue = get(u, "edgelock-etcd"), ue3 = get(u, "etcd3");
  const ur = get(u, "edgelock-redis"), uu = get(u, "upstash-lock");
  const url = get(u, "edgelock-redlock"), unr = get(u, "node-redlock");
  const perReq = (x) => x.p50 / x.requestsPerOp;

  lines.push("**The three ratios that matter most** (edgelock ÷ peer, same backend, same run):", "",
    `1. Uncontended ops/s vs etcd3: ${cmp(ue.opsPerSec, ue3.opsPerSec)} — ${r0(ue.opsPerSec)} vs ${r0(ue3.opsPerSec)} ops/s, p50 ${r2(ue.p50)} vs ${r2(ue3.p50)} ms.`,
    `2. Handoff p50 vs node-redlock (edgelock Redlock over 3 gateways vs redlock@5 over 3× ioredis): ${cmp(get(h, "edgelock-redlock").p50, get(h, "node-redlock").p50, false)} — ${r1(get(h, "edgelock-redlock").p50)} vs ${r1(get(h, "node-redlock").p50)} ms` +
      ` (edgelock single-node RedisLocks ${r1(get(h, "edgelock-redis").p50)} ms, edgelock etcd ${r1(get(h, "edgelock-etcd").p50)} ms).`,
    `3. Uncontended ops/s vs @upstash/lock (same gateway, same HTTP path): ${cmp(ur.opsPerSec, uu.opsPerSec)} — ${r0(ur.opsPerSec)} vs ${r0(uu.opsPerSec)} ops/s, p50 ${r2(ur.p50)} vs ${r2(uu.p50)} ms.`, "");

  lines.push("**What limits each.**", "",
    `- *etcd, uncontended.* edgelock needs ${r2(ue.requestsPerOp)} etcd calls per acquire+release (one txn that puts its queue key on the client's long-lived session lease and reads the queue head, then a delete); etcd3's \`Lock\` needs ${r2(ue3.requestsPerOp)} (a fresh lease per lock: grant, put-if-absent txn, revoke, plus the lease's keep-alive stream). ` +
      `edgelock makes fewer calls but each costs more: about ${r2(perReq(ue))} ms per call at p50 against ${r2(perReq(ue3))} ms for etcd3. edgelock speaks HTTP/1.1 + JSON to etcd's grpc-gateway (which translates every JSON call into a gRPC call), through \`fetch\` (undici) and the wasm machine; etcd3 keeps one HTTP/2 channel with protobuf. ` +
      "That per-request overhead is the price of running over plain `fetch` (browsers, Workers); it is what keeps this ratio near 1 although edgelock makes half the calls.",
    `- *Handoff.* edgelock's etcd waiter watches the holder's key and is granted in about one round trip after the delete (p50 ${r1(get(h, "edgelock-etcd").p50)} ms); etcd3 has no waiting acquire, so its row depends on the bench's 50 ms retry loop (p50 ${r1(get(h, "etcd3").p50)} ms). ` +
      `edgelock's Redis waiters do not poll: a waiting acquire opens one subscription stream per node on the lock's release channel (Upstash REST \`POST /subscribe/…\` as server-sent events, Webdis \`GET /SUBSCRIBE/…\`) and the release script publishes on it, so the waiter attempts as soon as the message arrives: ` +
      `${r2(get(h, "edgelock-redis").waiterRequestsAfterRelease)} requests between the release and the grant on one node, ${r2(get(h, "edgelock-redlock").waiterRequestsAfterRelease)} on Redlock's 3 (one attempt round), and a handoff p50 of ${r1(get(h, "edgelock-redis").p50)} ms (Upstash REST), ${r1(get(h, "edgelock-redis-webdis").p50)} ms (Webdis), ${r1(get(h, "edgelock-redlock").p50)} ms (Redlock 3× Upstash REST) from Node. ` +
      `The Redis peers poll: redis-semaphore every 10 ms over TCP (p50 ${r1(get(h, "redis-semaphore").p50)} ms), @upstash/lock every 100 ms (p50 ${r1(get(h, "upstash-lock").p50)} ms), redlock@5 every 200 ± 100 ms (p50 ${r1(get(h, "node-redlock").p50)} ms). ` +
      `A poller's p50 is about half its interval plus a round trip, and it pays for it with a poll every interval for the whole wait (redis-semaphore: ${r1(get(h, "redis-semaphore").waiterRequestsWholeWait)} commands per 50–150 ms wait; edgelock: ${r1(get(h, "edgelock-redis").waiterRequestsWholeWait)} requests, of which ${r1(get(h, "edgelock-redis").waiterStreamsWholeWait)} the stream).`,
    `- *@upstash/lock.* Both send ${r2(ur.requestsPerOp)} vs ${r2(uu.requestsPerOp)} HTTP requests per acquire+release (acquire, then a compare-and-delete script) to the same gateway, so the gap is per-request client overhead: edgelock's calls go through the wasm state machine and the JS/wasm boundary, and its acquire is a Lua script (INCR of the fencing counter, then SET NX PX) where @upstash/lock sends a bare SET; @upstash/lock is a thin wrapper over \`@upstash/redis\`. ` +
      `@upstash/lock offers no fencing token, no auto-extend and no abortable wait in exchange.`,
    `- *Redlock.* edgelock Redlock fans out to 3 nodes in parallel: ${r2(url.requestsPerOp)} HTTP requests per op (${r2(url.requestsPerOp / 3)} rounds of 3: the attempt and the release; strict fencing's raise round is skipped when every node answered at the token, the steady state) against ${r2(unr.requestsPerOp)} Redis commands for redlock@5 over TCP. ` +
      `Its uncontended rate is ${r2(url.opsPerSec / unr.opsPerSec)}× redlock@5's: TCP with RESP and no HTTP layer is the ceiling no HTTP client reaches (redis-semaphore over TCP: ${r0(get(u, "redis-semaphore").opsPerSec)} ops/s on one node). This gap is the cost of HTTP, not of the algorithm.`, "");

  const ce = get(c, "edgelock-etcd"), cnr = get(c, "node-redlock"), cer = get(c, "edgelock-redis"), crs = get(c, "redis-semaphore");
  lines.push("**Contention.** " +
    `Polling locks over TCP post the highest totals (redis-semaphore ${r0(crs.perSec)}/s, redlock@5 ${r0(cnr.perSec)}/s) because the client that just released re-acquires at once while the others sleep in their retry delay: their slowest client got ${pct(crs.slowestShare)} and ${pct(cnr.slowestShare)} of the acquisitions (fair: ${pct(1 / res.config.contendedClients)}) and waited up to ${r0(crs.maxWait)} / ${r0(cnr.maxWait)} ms. ` +
    `edgelock's etcd locks queue waiters by create revision, so they are served in order: ${r0(ce.perSec)} acquisitions/s with the slowest client at ${pct(ce.slowestShare)} and a max wait of ${r0(ce.maxWait)} ms — lower throughput (every handoff is a delete, a watch event and a check over HTTP) but fair. ` +
    `edgelock RedisLocks by default wakes every subscribed waiter on each release and each of them attempts, one wins: ${r0(cer.perSec)} acquisitions/s at ${r2(cer.requestsPerAcquisition)} HTTP requests per acquisition, the slowest client at ${pct(cer.slowestShare)}${cer.slowestShare === 0 ? " (at least one client never got the lock in the whole run)" : ""}` +
    (c["edgelock-redis-fair"] ? `; with \`fair: true\` a release wakes only the queue head: ${r0(c["edgelock-redis-fair"].perSec)} acquisitions/s at ${r2(c["edgelock-redis-fair"].requestsPerAcquisition)} requests per acquisition, the slowest client at ${pct(c["edgelock-redis-fair"].slowestShare)}.` : ` (no \`fair: true\` row in this run: ${res.skipped?.["edgelock-redis-fair"] ?? "not run"}).`) +
    (c["edgelock-redlock"] ? ` edgelock Redlock: every release publishes on each of the 3 nodes and a waiter attempts on each message it gets (a round on all 3 nodes): ${r0(c["edgelock-redlock"].perSec)} acquisitions/s at ${r2(c["edgelock-redlock"].requestsPerAcquisition)} HTTP requests per acquisition, the slowest client at ${pct(c["edgelock-redlock"].slowestShare)} (redlock@5: ${r2(cnr.requestsPerAcquisition)} Redis commands per acquisition).` : ""), "");

  const broken = [];
  for (const [id, r] of Object.entries(c)) if (r.overlaps || r.lostUpdates) broken.push(`${res.libs[id].label} (${r.overlaps} overlaps, ${r.lostUpdates} lost updates)`);
  for (const [id, r] of Object.entries(h)) if (r.exclusionViolations) broken.push(`${res.libs[id].label} (${r.exclusionViolations} early handoffs)`);
  const errs = [...Object.entries(u), ...Object.entries(h), ...Object.entries(c)].filter(([, r]) => r.errors).map(([id]) => res.libs[id].label);
  lines.push("**Exclusion.** " + (broken.length ? `Mutual exclusion was LOST by ${broken.join("; ")}.` : "Every library, edgelock included, kept mutual exclusion in every scenario of this run (no TTL expired during a critical section: the tests hold locks for far less than their TTL, so this checks the acquire/release logic, not behaviour under pauses or partitions).") +
    (errs.length ? ` Errors were counted for: ${[...new Set(errs)].join(", ")} (see the tables).` : ""), "");

  const load = fp.loadMsMedian;
  lines.push("**Footprint.** " +
    `The wasm is ${r0(fp.wasmRaw / 1024)} KiB raw, ${r0(fp.wasmGzip / 1024)} KiB gzipped; the package has no dependencies (${r0(fp.packageUnpacked / 1024)} KiB unpacked, one package for etcd, Redis and Redlock) whereas the peers install ${Object.entries(fp.peerInstall).map(([k, v]) => `${k} ${r0(v.bytes / 1024)} KiB`).join(", ")}. ` +
    `Loading edgelock in a fresh Node process takes ${r1(load["edgelock (import package)"])} ms (of which wasm instantiation ${r1(load["edgelock (wasm initSync only)"])} ms) against ${r1(load.etcd3)} ms for etcd3 and ${r1(load["redlock@5 + ioredis"])} ms for redlock@5 + ioredis.`, "");

  const ne = get(u, "native-etcd"), nr = get(u, "native-redis"), nl = get(u, "native-redlock");
  if (Number.isFinite(ne.opsPerSec)) {
    lines.push("**Native Rust driver.** " +
      `The blocking Rust client on the same servers (run right after the Node rows): etcd ${r0(ne.opsPerSec)} ops/s (p50 ${r2(ne.p50)} ms; ${r2(ne.opsPerSec / ue3.opsPerSec)}× etcd3), Redis ${r0(nr.opsPerSec)} ops/s (p50 ${r2(nr.p50)} ms; ${r2(nr.opsPerSec / uu.opsPerSec)}× @upstash/lock), Redlock ${r0(nl.opsPerSec)} ops/s (p50 ${r2(nl.p50)} ms; ${r2(nl.opsPerSec / unr.opsPerSec)}× redlock@5). ` +
      "It runs the same core state machine as the npm package, without `fetch` and the JS/wasm boundary; the difference between its rows and the Node rows is the share of the per-request cost that belongs to the Node transport (\`fetch\`, JS/wasm calls) rather than to the protocol. " +
      `Its handoffs take the same push path without the Node transport: etcd ${r1(get(h, "native-etcd").p50)} ms, Redis ${r1(get(h, "native-redis").p50)} ms (Upstash REST) and ${r1(get(h, "native-redis-webdis").p50)} ms (Webdis), Redlock ${r1(get(h, "native-redlock").p50)} ms (3× Upstash REST) and ${r1(get(h, "native-redlock-webdis").p50)} ms (3× Webdis) at p50 (requests per handoff in table B).`, "");
  } else {
    lines.push("**Native Rust driver.** No rows in this run" + (res.nativeError ? ` (it failed: ${res.nativeError.split("\n")[0]})` : "") + ".", "");
  }
  lines.push("**Not measured here.** Behaviour under failures (pauses, partitions, clock jumps) is covered by the test suites, not by this benchmark; the contended and handoff figures use each library's default retry settings, which set the Redis peers' numbers (they poll).");
  return lines;
}
