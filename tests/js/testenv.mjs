// Helpers for Node tests: find the edgelock-devtools binaries and start a
// test environment (`testenv`) with real etcd / redis-server / webdis /
// Upstash gateways.
//
// Binaries are located, in order:
//   1. EDGELOCK_TESTENV_BIN / UPSTASH_GATEWAY_BIN (absolute paths);
//   2. the newest of $CARGO_TARGET_DIR/{debug,release}/<name> (CARGO_TARGET_DIR
//      defaults to <repo>/target; a relative one is taken from the repo root);
//   3. otherwise `cargo build -p edgelock-devtools --bins` is run once from the
//      repo root and step 2 is repeated (set EDGELOCK_DEVTOOLS_NO_BUILD=1 to
//      forbid building and fail instead).
//
// Usage:
//   import { startTestenv } from './testenv.mjs';
//   const env = await startTestenv({ redis: 3, gateway: true, webdis: true, etcd: 1 });
//   env.gateway_urls, env.webdis_urls, env.etcd_urls, env.redis[i].port, env.token
//   (startTestenv({ zookeeper: true, curator: true }): env.zookeeper_connect,
//   env.curator_command)
//   await env.stop();

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const ENV_VARS = { testenv: 'EDGELOCK_TESTENV_BIN', 'upstash-gateway': 'UPSTASH_GATEWAY_BIN' };

function newestBuilt(name) {
  const targetDir = path.resolve(repoRoot, process.env.CARGO_TARGET_DIR || 'target');
  const candidates = ['debug', 'release']
    .map((profile) => path.join(targetDir, profile, name))
    .filter((p) => existsSync(p))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  return candidates[0];
}

let built = false;

/** Absolute path of a devtools binary (`testenv` or `upstash-gateway`). */
export function findDevtoolsBin(name) {
  const fromEnv = process.env[ENV_VARS[name]];
  if (fromEnv) {
    if (!existsSync(fromEnv)) throw new Error(`${ENV_VARS[name]}=${fromEnv} does not exist`);
    return fromEnv;
  }
  let found = newestBuilt(name);
  if (!found && !built && !process.env.EDGELOCK_DEVTOOLS_NO_BUILD) {
    built = true;
    const r = spawnSync('cargo', ['build', '--quiet', '-p', 'edgelock-devtools', '--bins'], {
      cwd: repoRoot,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (r.status !== 0) throw new Error(`cargo build -p edgelock-devtools failed (${r.status ?? r.error})`);
    found = newestBuilt(name);
  }
  if (!found) {
    throw new Error(`${name} not found: build it with \`cargo build -p edgelock-devtools --bins\` or set ${ENV_VARS[name]}`);
  }
  return found;
}

/**
 * Spawns `bin args...` and resolves with the parsed first stdout line.
 * Rejects (and kills the child) if it exits first or `timeoutMs` passes.
 */
export function spawnWithJsonLine(bin, args, { env = process.env, timeoutMs = 60_000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ['pipe', 'pipe', 'pipe'], env });
    let out = '';
    let err = '';
    let done = false;
    const finish = (fn, v) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      fn(v);
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      finish(reject, new Error(`${path.basename(bin)} not ready after ${timeoutMs} ms; stderr:\n${err}`));
    }, timeoutMs);
    child.stderr.on('data', (d) => {
      if (err.length < 64 * 1024) err += d;
    });
    child.stdout.on('data', (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl >= 0) {
        try {
          finish(resolve, { child, info: JSON.parse(out.slice(0, nl)) });
        } catch (e) {
          child.kill('SIGKILL');
          finish(reject, new Error(`bad JSON line from ${path.basename(bin)}: ${out.slice(0, nl)}`));
        }
      }
    });
    child.on('error', (e) => finish(reject, e));
    child.on('exit', (code, sig) =>
      finish(reject, new Error(`${path.basename(bin)} exited (${code ?? sig}) before it was ready; stderr:\n${err}`)),
    );
  });
}

/** Closes the child's stdin, waits up to `graceMs`, then SIGKILLs it. */
export function stopChild(child, graceMs = 10_000) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve(child.exitCode);
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
    child.stdin.end();
  });
}

/**
 * Starts `testenv` and resolves with its JSON description plus `stop()`.
 * Options: etcd (members), redis (nodes), webdis, gateway (booleans), token
 * (gateway bearer token; generated and returned as `token` if omitted),
 * noAuth, cors (etcd CORS, default true), leaseCheckpoint, zookeeper (a
 * standalone ZooKeeper: `zookeeper_connect`), curator (also the command
 * starting a Curator peer: `curator_command`), timeoutMs.
 * If the test process dies, testenv sees stdin close and stops by itself.
 */
export async function startTestenv(opts = {}) {
  const args = [];
  if (opts.etcd) args.push('--etcd', String(opts.etcd));
  if (opts.redis) args.push('--redis', String(opts.redis));
  if (opts.webdis) args.push('--webdis');
  if (opts.gateway) args.push('--gateway');
  if (opts.noAuth) args.push('--no-auth');
  if (opts.cors === false) args.push('--no-cors');
  if (opts.leaseCheckpoint) args.push('--lease-checkpoint');
  if (opts.zookeeper) args.push('--zookeeper');
  if (opts.curator) args.push('--curator');
  // The token goes through the environment, not argv (visible in `ps`).
  const env = { ...process.env };
  delete env.EDGELOCK_TESTENV_TOKEN;
  if (opts.token) env.EDGELOCK_TESTENV_TOKEN = opts.token;
  const { child, info } = await spawnWithJsonLine(findDevtoolsBin('testenv'), args, {
    env,
    timeoutMs: opts.timeoutMs ?? 120_000,
  });
  // A forgotten stop() must not keep the test process alive.
  child.unref();
  child.stdout.unref?.();
  child.stderr.unref?.();
  child.stdin.unref?.();
  return {
    ...info,
    token: opts.noAuth ? '' : (opts.token ?? info.token),
    process: child,
    stop: () => stopChild(child),
  };
}
