// The built Worker (build/, scripts/build-worker.sh) in workerd through
// Miniflare (from tests/worker/node_modules), for the reliability tool's
// Durable Object and D1 variants and the Rust tests of the durable-object
// backend (tools/devtools/src/workerd.rs spawns it):
//   node workerd-host.mjs '{"persistDir":…,"fencedUrl":…,"token":…}'
// binds the lock service's `LockObject` (EDGELOCK_LOCKS, SQLite-backed) and a
// D1 database (EDGELOCK_D1), both persisted under persistDir (a second host on
// the same dir continues the same locks), the job coordinator on the d1
// backend writing to fencedUrl, the API token `token`; listens on loopback
// and prints `{"url":"http://127.0.0.1:<port>"}` once ready. Stops (disposing
// Miniflare) on SIGTERM/SIGINT or when stdin closes.

import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(root, 'tests', 'worker', 'package.json'));
const { Miniflare } = require('miniflare');

const opts = JSON.parse(process.argv[2] ?? '{}');
const buildDir = path.join(root, 'build');
const script = path.join(buildDir, 'index.js');
if (!existsSync(script)) {
  console.error(`${script} is missing: run scripts/build-worker.sh first`);
  process.exit(2);
}

const mf = new Miniflare({
  cf: false,
  host: '127.0.0.1',
  port: opts.port ?? 0,
  durableObjectsPersist: opts.persistDir,
  d1Persist: opts.persistDir,
  modules: true,
  scriptPath: script,
  modulesRoot: buildDir,
  modulesRules: [{ type: 'CompiledWasm', include: ['**/*.wasm'] }],
  // workerd 1.20260426 accepts compatibility dates up to its own.
  compatibilityDate: '2026-04-20',
  bindings: {
    EDGELOCK_API_TOKEN: opts.token,
    EDGELOCK_BACKEND: 'd1',
    ...(opts.fencedUrl ? { EDGELOCK_FENCED_URL: opts.fencedUrl } : {}),
    EDGELOCK_JOB_MS: String(opts.jobMs ?? 20),
  },
  durableObjects: { EDGELOCK_LOCKS: { className: 'LockObject', useSQLite: true } },
  d1Databases: { EDGELOCK_D1: 'edgelock-reliability-d1' },
});

const url = await mf.ready;
process.stdout.write(`${JSON.stringify({ url: url.origin })}\n`);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  try {
    await mf.dispose();
  } finally {
    process.exit(0);
  }
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
