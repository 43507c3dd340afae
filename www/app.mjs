// The demo page: N simulated edge workers, each with its own edgelock client
// (like separate edge isolates), contend for one lock name on the backend the
// user picks. Everything the page shows is recorded in window.__edgelockDemo
// so that the browser test can check it (tests/www/www.test.mjs).
//
// The Durable Object lock service is reached by the URL and bearer token the
// user types in: the token is read from its password field when a run
// starts and kept only in that run's closure (never in __edgelockDemo, the
// log, the page URL or storage); it is sent only to that URL.

import { DurableObjectLocks, EtcdLocks, RedisLocks, Redlock } from "/pkg/index.browser.mjs";

const $ = (id) => document.getElementById(id);
const t0 = performance.now();
/** Page time in ms: one clock for every recorded interval. */
const now = () => performance.now() - t0;
const sleep = (ms, signal) => new Promise((resolve) => {
  if (signal?.aborted) return resolve();
  const timer = setTimeout(done, ms);
  function done() {
    clearTimeout(timer);
    signal?.removeEventListener("abort", done);
    resolve();
  }
  signal?.addEventListener("abort", done, { once: true });
});

// ---- recorded data (read by the test) --------------------------------------

const demo = {
  ready: false,
  config: null,
  run: null,          // { id, backend, lockName, ttlMs, startedAt }
  runs: [],
  holds: [],          // { run, worker, token, requestedAt, acquiredAt, endAt, releasedAt, lostAt, paused }
  lost: [],           // { run, worker, token, at, code, message }
  staleWrites: [],    // { run, worker, token, at, resourceToken, accepted }
  errors: [],         // { run, worker, at, code, message }
  events: [],
};
window.__edgelockDemo = demo;
const MAX_RECORDS = 20_000;
const push = (list, item) => {
  list.push(item);
  if (list.length > MAX_RECORDS) list.splice(0, list.length - MAX_RECORDS);
};

// ---- the protected resource: accepts a write only with the highest token seen

const resource = {
  maxToken: 0n,
  write(token) {
    if (token < this.maxToken) return false;
    this.maxToken = token;
    return true;
  },
};

// ---- per-worker network gate: "pause a holder" holds its HTTP requests ------

function makeGate() {
  let closed = false;
  let held = [];
  const gate = {
    get closed() { return closed; },
    close() { closed = true; },
    open() {
      closed = false;
      const waiting = held;
      held = [];
      // A thawed process sends what it had queued; the client may have given up on it already.
      for (const w of waiting) if (!w.init?.signal?.aborted) fetch(w.input, w.init).then(w.resolve, w.reject);
    },
    fetch(input, init) {
      if (!closed) return fetch(input, init);
      return new Promise((resolve, reject) => {
        const entry = { input, init, resolve, reject };
        held.push(entry);
        init?.signal?.addEventListener("abort", () => {
          held = held.filter((e) => e !== entry);
          reject(init.signal.reason ?? new DOMException("aborted", "AbortError"));
        }, { once: true });
      });
    },
  };
  return gate;
}

// ---- clients ----------------------------------------------------------------

const BACKENDS = {
  etcd: "etcd",
  "redis-upstash": "Redis (Upstash REST)",
  "redis-webdis": "Redis (Webdis)",
  redlock: "Redlock",
  "durable-object": "Durable Object lock service",
};

/**
 * Workers a backend runs at most. The lock service holds a waiting worker's
 * request open; over HTTP/1.1 (a local workerd) a browser opens about 6
 * connections per origin, and the holder's renewals and release need one.
 */
const MAX_WORKERS = { "durable-object": 5 };

function makeClient(run, worker) {
  const cfg = demo.config;
  const fetch = (input, init) => worker.gate.fetch(input, init);
  const redisPolling = { retryDelayMs: 40, retryJitterMs: 40 };
  switch (run.backend) {
    case "etcd":
      return new EtcdLocks({ endpoints: cfg.etcd, sessionTtlMs: run.ttlMs, requestTimeoutMs: 2000, fetch });
    case "redis-upstash":
      return new RedisLocks({ url: cfg.gateway[0], protocol: "upstash", token: cfg.token, ttlMs: run.ttlMs,
        requestTimeoutMs: 2000, ...redisPolling, fetch });
    case "redis-webdis":
      return new RedisLocks({ url: cfg.webdis[0], protocol: "webdis", ttlMs: run.ttlMs,
        requestTimeoutMs: 2000, ...redisPolling, fetch });
    case "redlock":
      return new Redlock({ nodes: cfg.webdis.map((url) => ({ url, protocol: "webdis" })), ttlMs: run.ttlMs,
        // Polling: with push, every release woke all six Redlock waiters for a
        // round on all five nodes and the page stalled (see the README).
        requestTimeoutMs: 500, retryCount: 20, ...redisPolling, maxSubscriptions: 0, fetch });
    case "durable-object":
      // A waiting acquire is held open by the service (its poll gets the wait on top of the timeout).
      return new DurableObjectLocks({ url: run.service.url, token: run.service.token(), ttlMs: run.ttlMs,
        requestTimeoutMs: 2000, fetch });
    default:
      throw new Error(`unknown backend ${run.backend}`);
  }
}

// ---- workers ------------------------------------------------------------------

/** Lane segments for the timeline: { kind, start, end|null, token } */
function lane(worker) {
  return worker.segments;
}
function begin(worker, kind, token) {
  const t = now();
  const last = worker.segments.at(-1);
  if (last && last.end === null) last.end = t;
  worker.segments.push({ kind, start: t, end: null, token });
  if (worker.segments.length > 400) worker.segments.splice(0, worker.segments.length - 400);
  worker.state = kind;
}
function idle(worker) {
  const last = worker.segments.at(-1);
  if (last && last.end === null) last.end = now();
  worker.state = "idle";
}
function mark(worker, kind, token) {
  worker.marks.push({ kind, at: now(), token });
  if (worker.marks.length > 100) worker.marks.shift();
}

function logEvent(kind, text) {
  const e = { kind, at: now(), text };
  push(demo.events, e);
  const li = document.createElement("li");
  li.className = kind;
  const time = document.createElement("span");
  time.className = "t";
  time.textContent = (e.at / 1000).toFixed(1) + "s";
  li.append(time, document.createTextNode(text));
  const log = $("log");
  log.prepend(li);
  while (log.children.length > 80) log.lastChild.remove();
}

async function workerLoop(run, worker) {
  while (!run.abort.signal.aborted && worker.index < run.targetWorkers()) {
    worker.client ??= makeClient(run, worker);
    begin(worker, "wait");
    const requestedAt = now();
    let lock;
    try {
      lock = await worker.client.acquire(run.lockName, { signal: run.abort.signal });
    } catch (e) {
      idle(worker);
      if (run.abort.signal.aborted) break;
      push(demo.errors, { run: run.id, worker: worker.index, at: now(), code: e?.code ?? "ERROR", message: String(e?.message ?? e) });
      logEvent("warn", `W${worker.index + 1}: ${e?.code ?? "error"} – ${e?.message ?? e}`);
      if (run.service && !run.service.hinted) {
        run.service.hinted = true;
        logEvent("info", "Lock service: check the URL (…/lock), the token, and that the Worker lists this page's origin in EDGELOCK_CORS_ORIGINS");
      }
      if (e?.code === "CLOSED") worker.client = null;
      await sleep(300, run.abort.signal);
      continue;
    }
    const hold = {
      run: run.id, worker: worker.index, token: lock.fencingToken.toString(),
      requestedAt, acquiredAt: now(), endAt: null, releasedAt: null, lostAt: null, paused: false,
    };
    run.noteAcquired(hold);
    push(demo.holds, hold);
    begin(worker, "hold", hold.token);
    resource.write(lock.fencingToken);

    if (run.pauseNext) {
      run.pauseNext = false;
      worker.pauseRequested = true;
    }
    worker.wake = new AbortController();
    if (!worker.pauseRequested) {
      await sleep(run.holdMs(), AbortSignal.any([lock.signal, run.abort.signal, worker.wake.signal]));
    }
    if (worker.pauseRequested) {
      await frozenHolder(run, worker, lock, hold);
    } else if (lock.signal.aborted) {
      lostLock(run, worker, lock, hold);
    } else {
      hold.endAt = now();
      run.lastEnd = Math.max(run.lastEnd, hold.endAt);
      begin(worker, "release", hold.token);
      try {
        await lock.release();
      } catch (e) {
        logEvent("warn", `W${worker.index + 1}: release failed (${e?.code}); the lease expires on its own`);
      }
      hold.releasedAt = now();
    }
    idle(worker);
    // A short, random rest so that the releasing worker does not always queue first again.
    await sleep(Math.random() * Math.max(20, run.holdMs()), run.abort.signal);
  }
  idle(worker);
  if (worker.client) {
    worker.gate.open();
    await worker.client.close().catch(() => {});
    worker.client = null;
  }
}

function lostLock(run, worker, lock, hold) {
  const reason = lock.signal.reason;
  hold.endAt = hold.lostAt = now();
  run.lastEnd = Math.max(run.lastEnd, hold.endAt);
  const entry = { run: run.id, worker: worker.index, token: hold.token, at: hold.lostAt,
    code: reason?.code ?? "LOST", message: String(reason?.message ?? reason) };
  push(demo.lost, entry);
  mark(worker, "lost", hold.token);
  begin(worker, "lost", hold.token);
  logEvent("lost", `W${worker.index + 1} LOST the lock (token ${hold.token}): ${entry.message}`);
}

/**
 * "Pause a holder": its HTTP requests hang (no renewals reach the backend) and
 * its own work stops. The edgelock client still runs its timers, so it aborts
 * lock.signal when its validity estimate runs out. After a pause longer than
 * the TTL the worker resumes and tries its write with the stale token.
 */
async function frozenHolder(run, worker, lock, hold) {
  worker.pauseRequested = false;
  hold.paused = true;
  worker.gate.close();
  begin(worker, "paused", hold.token);
  logEvent("info", `W${worker.index + 1} paused while holding token ${hold.token}: its renewals stop`);
  run.pausing = true;
  updatePauseButton();
  const pauseMs = run.ttlMs * 2 + 1500;
  const pausedAt = now();
  await sleep(run.ttlMs * 3 + 5000, AbortSignal.any([lock.signal, run.abort.signal]));
  if (lock.signal.aborted) {
    lostLock(run, worker, lock, hold);
  } else {
    hold.endAt = now();
    logEvent("warn", `W${worker.index + 1}: no loss detected while paused`);
  }
  await sleep(Math.max(0, pausedAt + pauseMs - now()), run.abort.signal);
  if (!run.abort.signal.aborted) {
    const token = lock.fencingToken;
    const accepted = resource.write(token);
    const entry = { run: run.id, worker: worker.index, token: token.toString(), at: now(),
      resourceToken: resource.maxToken.toString(), accepted };
    push(demo.staleWrites, entry);
    mark(worker, accepted ? "write" : "stale", entry.token);
    logEvent(accepted ? "warn" : "lost", accepted
      ? `W${worker.index + 1} resumed and wrote with token ${entry.token} (nobody else held it meanwhile)`
      : `W${worker.index + 1} resumed and tried to write with token ${entry.token}: rejected, the resource has seen ${entry.resourceToken}`);
  }
  // The thawed worker starts over with a fresh client.
  worker.gate.open();
  const old = worker.client;
  worker.client = null;
  await old?.close().catch(() => {});
  run.pausing = false;
  updatePauseButton();
}

// ---- runs ---------------------------------------------------------------------

let current = null;

function readControls() {
  const num = (id, min, max, dflt) => {
    const v = Math.round(Number($(id).value));
    return Number.isFinite(v) ? Math.min(max, Math.max(min, v)) : dflt;
  };
  return {
    backend: $("backend").value,
    workers: num("workers", 1, 12, 6),
    ttlMs: num("ttl", 1000, 30_000, 2000),
    holdMs: num("hold", 0, 5000, 150),
  };
}

/**
 * The lock service's URL and token from their fields, or null (with the
 * reason logged) when they are missing or the URL is not http(s). The token
 * is returned inside a closure: nothing that is recorded or logged holds it.
 */
function readService() {
  const url = $("do-url").value.trim().replace(/\/+$/, "");
  const token = $("do-token").value;
  let parsed = null;
  try { parsed = new URL(url); } catch { /* below */ }
  // No query, fragment or user info: the URL is shown in the log, the token goes in a header.
  if (!parsed || !/^https?:$/.test(parsed.protocol) || parsed.search || parsed.hash || parsed.username || parsed.password) {
    logEvent("warn", "Enter the lock service URL: http(s)://<worker>/lock");
    return null;
  }
  if (token.length === 0) {
    logEvent("warn", "Enter the lock service's bearer token");
    return null;
  }
  return { url, token: () => token, hinted: false };
}

function startRun() {
  const c = readControls();
  let service = null;
  if (c.backend === "durable-object") {
    service = readService();
    if (!service) {
      $("status").textContent = "idle · lock service URL and token needed";
      return;
    }
  }
  const maxWorkers = MAX_WORKERS[c.backend] ?? Infinity;
  const id = demo.runs.length + 1;
  const run = {
    id, backend: c.backend, ttlMs: c.ttlMs, service,
    lockName: `demo-${Date.now().toString(36)}-${id}`,
    startedAt: now(),
    abort: new AbortController(),
    workers: [],
    loops: [],
    pauseNext: false,
    pausing: false,
    lastEnd: -Infinity,
    acquisitions: 0, waitSum: 0, handoffs: 0, handoffSum: 0, lastToken: null, lostCount: 0,
    targetWorkers: () => Math.min(readControls().workers, maxWorkers),
    holdMs: () => readControls().holdMs,
    noteAcquired(hold) {
      this.acquisitions++;
      this.waitSum += hold.acquiredAt - hold.requestedAt;
      // A handoff: this worker was already waiting when the previous hold ended.
      if (Number.isFinite(this.lastEnd) && hold.requestedAt <= this.lastEnd) {
        this.handoffs++;
        this.handoffSum += hold.acquiredAt - this.lastEnd;
      }
      this.lastToken = hold.token;
      logEvent("ok", `W${hold.worker + 1} holds token ${hold.token} after ${Math.round(hold.acquiredAt - hold.requestedAt)} ms`);
    },
  };
  resource.maxToken = 0n;
  demo.run = { id, backend: run.backend, lockName: run.lockName, ttlMs: run.ttlMs, startedAt: run.startedAt,
    ...(service ? { serviceUrl: service.url } : {}) };
  demo.runs.push(demo.run);
  current = run;
  const where = service ? ` at ${service.url}` : "";
  logEvent("info", `run ${id}: ${run.targetWorkers()} workers on ${BACKENDS[run.backend]}${where}, lock “${run.lockName}”, TTL ${run.ttlMs} ms`);
  if (c.workers > maxWorkers) logEvent("info", `${BACKENDS[run.backend]}: at most ${maxWorkers} workers (each waiting one holds a request open)`);
  ensureWorkers(run);
  updateUi();
}

/** Starts loops for workers added by the control (removed ones stop after their current cycle). */
function ensureWorkers(run) {
  const n = run.targetWorkers();
  for (let i = 0; i < n; i++) {
    let worker = run.workers[i];
    if (worker && worker.running) continue;
    if (!worker) {
      worker = { index: i, segments: [], marks: [], state: "idle", client: null, gate: makeGate(), pauseRequested: false, wake: null, running: false };
      run.workers[i] = worker;
    }
    worker.running = true;
    run.loops.push(workerLoop(run, worker).catch((e) => {
      logEvent("warn", `W${i + 1} stopped: ${e?.message ?? e}`);
    }).finally(() => { worker.running = false; }));
  }
}

async function stopRun() {
  const run = current;
  if (!run) return;
  current = null;
  run.abort.abort();
  run.stopping = true;
  updateUi();
  await Promise.allSettled(run.loops);
  run.stopped = true;
  run.stoppedAt = now();
  const record = demo.runs.find((r) => r.id === run.id);
  if (record) record.stoppedAt = run.stoppedAt;
  logEvent("info", `run ${run.id} stopped`);
  lastRun = run;
  updateUi();
}
let lastRun = null;

function pauseHolder() {
  const run = current;
  if (!run || run.pausing || run.pauseNext) return;
  const holder = run.workers.find((w) => w.state === "hold");
  if (holder) {
    holder.pauseRequested = true;
    holder.wake?.abort();
  } else {
    run.pauseNext = true; // between holds: the next worker to acquire is paused
  }
  run.pausing = true;
  updatePauseButton();
}

// ---- Redis node controls (dev endpoint of www/serve.mjs) ------------------------

async function nodeCommand(index, action) {
  const res = await fetch(`/dev/redis/${index}/${action}`, { method: "POST", headers: { "x-edgelock-dev": "1" } });
  if (!res.ok) throw new Error(`${res.status} ${await res.text()}`);
  demo.config.redisNodes = await res.json();
  logEvent(action === "stop" ? "warn" : "info", `Redis node ${index + 1} ${action === "stop" ? "stopped (SIGSTOP)" : "running again (SIGCONT)"}`);
  renderNodes();
}

function renderNodes() {
  const box = $("node-buttons");
  box.replaceChildren();
  for (const node of demo.config.redisNodes) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "node" + (node.stopped ? " stopped" : "");
    b.dataset.node = String(node.index);
    b.textContent = `${node.stopped ? "Start" : "Stop"} node ${node.index + 1}`;
    b.setAttribute("aria-pressed", String(node.stopped));
    b.addEventListener("click", () => nodeCommand(node.index, node.stopped ? "start" : "stop").catch((e) => logEvent("warn", `node ${node.index + 1}: ${e.message}`)));
    box.append(b);
  }
}

// ---- UI -----------------------------------------------------------------------

function updatePauseButton() {
  const run = current;
  const b = $("pause");
  b.disabled = !run || run.pausing || run.pauseNext;
  b.textContent = run?.pausing ? "Holder paused…" : "Pause a holder";
}

function updateUi() {
  const running = current !== null;
  $("start").textContent = running ? "Stop" : "Start";
  $("start").classList.toggle("danger", running);
  $("nodes").hidden = $("backend").value !== "redlock";
  $("service").hidden = $("backend").value !== "durable-object";
  const run = current ?? lastRun;
  $("status").textContent = running
    ? `running · ${BACKENDS[current.backend]}`
    : run ? `stopped · ${BACKENDS[run.backend]}` : "idle · press Start";
  $("status").classList.toggle("live", running);
  updatePauseButton();
}

function fmtMs(v) {
  if (!Number.isFinite(v)) return "–";
  return v >= 1000 ? (v / 1000).toFixed(2) + " s" : Math.round(v) + " ms";
}

function updateCounters() {
  const run = current ?? lastRun;
  if (!run) return;
  const lost = demo.lost.filter((l) => l.run === run.id).length;
  $("c-acq").textContent = String(run.acquisitions);
  $("c-wait").textContent = run.acquisitions ? fmtMs(run.waitSum / run.acquisitions) : "–";
  $("c-handoff").textContent = run.handoffs ? fmtMs(run.handoffSum / run.handoffs) : "–";
  $("c-token").textContent = run.lastToken ?? "–";
  $("c-lost").textContent = String(lost);
  $("c-lost").parentElement.classList.toggle("bad", lost > 0);
}

// ---- timeline (canvas) -----------------------------------------------------------

const COLORS = {
  wait: "#e6e9ef", hold: "#2f6fde", release: "#9dbdf2", paused: "#f0a43a", lost: "#f6caca", red: "#c62828",
  text: "#1d2330", muted: "#6b7385", grid: "#eef0f4", lane: "#f7f8fa",
};

function drawTimeline() {
  const canvas = $("timeline");
  const run = current ?? lastRun;
  const lanes = Math.max(run ? run.workers.length : 0, run ? run.targetWorkers() : readControls().workers, 1);
  const cssWidth = canvas.clientWidth;
  const narrow = cssWidth < 560;
  const laneH = narrow ? 24 : 30;
  const gap = 12; // room for the token labels of holds too short to contain them
  const top = 12;
  const axisH = 20;
  const cssHeight = top + lanes * (laneH + gap) + axisH;
  const dpr = window.devicePixelRatio || 1;
  if (canvas.height !== Math.round(cssHeight * dpr) || canvas.width !== Math.round(cssWidth * dpr)) {
    canvas.width = Math.round(cssWidth * dpr);
    canvas.height = Math.round(cssHeight * dpr);
    canvas.style.height = cssHeight + "px";
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssWidth, cssHeight);

  const labelW = narrow ? 30 : 44;
  const plotW = cssWidth - labelW - 8;
  const windowMs = narrow ? 6000 : 12000;
  const tEnd = run?.stopped ? run.stoppedAt : now();
  const tStart = tEnd - windowMs;
  const x = (t) => labelW + ((t - tStart) / windowMs) * plotW;
  const font = (size, weight = 500) => `${weight} ${size}px ui-sans-serif, system-ui, -apple-system, "Segoe UI", Roboto, sans-serif`;

  // time grid, one line a second
  ctx.font = font(11, 400);
  ctx.fillStyle = COLORS.muted;
  ctx.textBaseline = "alphabetic";
  for (let s = Math.max(0, Math.ceil(tStart / 1000)); s * 1000 <= tEnd; s++) {
    const gx = x(s * 1000);
    ctx.fillStyle = COLORS.grid;
    ctx.fillRect(gx, top, 1, lanes * (laneH + gap) - gap);
    if (s % (narrow ? 2 : 1) === 0) {
      ctx.fillStyle = COLORS.muted;
      ctx.fillText(`${s}s`, gx - 6, cssHeight - 5);
    }
  }

  for (let i = 0; i < lanes; i++) {
    const y = top + i * (laneH + gap);
    ctx.fillStyle = COLORS.lane;
    ctx.fillRect(labelW, y, plotW, laneH);
    ctx.fillStyle = COLORS.text;
    ctx.font = font(narrow ? 11 : 12, 600);
    ctx.textBaseline = "middle";
    ctx.fillText(`W${i + 1}`, 4, y + laneH / 2);
    const worker = run?.workers[i];
    if (!worker) continue;
    let labelEnd = -Infinity; // right edge of the last label drawn above this lane
    for (const seg of lane(worker)) {
      const end = seg.end ?? tEnd;
      if (end < tStart) continue;
      const x0 = Math.max(labelW, x(seg.start));
      const x1 = Math.min(labelW + plotW, x(end));
      if (x1 - x0 < 0.5) continue;
      const inset = seg.kind === "wait" ? 8 : 2;
      ctx.fillStyle = COLORS[seg.kind] ?? COLORS.wait;
      ctx.fillRect(x0, y + inset, x1 - x0, laneH - 2 * inset);
      if (seg.token && (seg.kind === "hold" || seg.kind === "paused")) {
        ctx.font = font(narrow ? 10 : 11, 700);
        const label = `#${seg.token}`;
        const w = ctx.measureText(label).width;
        if (x1 - x0 > w + 6) {
          ctx.fillStyle = seg.kind === "hold" ? "#fff" : COLORS.text;
          ctx.fillText(label, x0 + 4, y + laneH / 2 + 0.5);
        } else {
          // too short to hold its label: put it above the bar, unless it would cover the previous one
          ctx.font = font(10, 700);
          const lw = ctx.measureText(label).width;
          if (x0 > labelEnd + 3) {
            ctx.fillStyle = COLORS.text;
            ctx.textBaseline = "alphabetic";
            ctx.fillText(label, x0, y - 2);
            ctx.textBaseline = "middle";
            labelEnd = x0 + lw;
          }
        }
      }
    }
    for (const m of worker.marks) {
      if (m.at < tStart) continue;
      const mx = x(m.at);
      const cy = y + laneH / 2;
      ctx.fillStyle = m.kind === "write" ? COLORS.hold : COLORS.red;
      ctx.font = font(narrow ? 12 : 14, 800);
      ctx.textBaseline = "middle";
      const text = m.kind === "lost" ? `lost #${m.token}`
        : m.kind === "stale" ? `stale write #${m.token} rejected` : `late write #${m.token}`;
      if (m.kind === "lost") {
        ctx.fillText("✕", mx - 5, cy);
      } else {
        ctx.beginPath();
        ctx.moveTo(mx, cy - 7); ctx.lineTo(mx + 7, cy); ctx.lineTo(mx, cy + 7); ctx.lineTo(mx - 7, cy);
        ctx.fill();
      }
      ctx.font = font(11, 700);
      // the label goes to the left of the mark when it would run off the plot
      const tw = ctx.measureText(text).width;
      const tx = mx + 10 + tw > labelW + plotW ? mx - 10 - tw : mx + 10;
      ctx.fillText(text, tx, cy);
    }
  }
}

function frame() {
  drawTimeline();
  updateCounters();
  requestAnimationFrame(frame);
}

// ---- boot -------------------------------------------------------------------------

async function boot() {
  const res = await fetch("/config.json", { cache: "no-store" });
  demo.config = await res.json();
  renderNodes();
  $("start").addEventListener("click", () => (current ? stopRun() : startRun()));
  $("pause").addEventListener("click", pauseHolder);
  $("backend").addEventListener("change", async () => {
    updateUi();
    if (current) { await stopRun(); startRun(); }
  });
  $("ttl").addEventListener("change", async () => {
    if (current) { await stopRun(); startRun(); }
  });
  $("workers").addEventListener("change", () => { if (current) ensureWorkers(current); });
  // Paused Redis nodes outlive the page otherwise.
  window.addEventListener("pagehide", () => {
    for (const n of demo.config.redisNodes) {
      if (n.stopped) fetch(`/dev/redis/${n.index}/start`, { method: "POST", headers: { "x-edgelock-dev": "1" }, keepalive: true });
    }
  });
  updateUi();
  demo.ready = true;
  requestAnimationFrame(frame);
  const params = new URLSearchParams(location.search);
  if (params.has("autostart")) startRun();
}

boot().catch((e) => {
  $("status").textContent = `failed to start: ${e?.message ?? e}`;
  demo.bootError = String(e?.message ?? e);
});
