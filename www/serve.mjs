#!/usr/bin/env node
// Dev server of the www/ demo page, loopback only.
//
//   node www/serve.mjs [--port N] [--redis N] [--exit-on-eof]
//
// Starts the local backends through the devtools `testenv` (etcd with CORS,
// N redis-server nodes, each behind webdis and an Upstash-compatible gateway),
// then serves www/ at / and the built npm package pkg/ at /pkg/. Prints one
// JSON line {"url":…} on stdout when ready; stops everything on SIGINT/SIGTERM
// (and, with --exit-on-eof, when stdin closes: for tests that spawn it).
//
// Endpoints besides the static files:
//   GET  /config.json            backend URLs and the gateway token for the page
//   GET  /dev/redis              [{index, port, stopped}] of the Redis nodes
//   POST /dev/redis/<i>/stop     SIGSTOP that redis-server (requests to it hang)
//   POST /dev/redis/<i>/start    SIGCONT it
// The dev endpoints want the header `x-edgelock-dev: 1` (a cross-origin page
// cannot send it without a CORS preflight, which is never granted) and a
// loopback Host header (no DNS rebinding).

import { createServer } from 'node:http';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestenv } from '../tests/js/testenv.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, '..');
const roots = { www: here, pkg: path.join(repoRoot, 'pkg') };

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.ts': 'text/plain; charset=utf-8',
};

function parseArgs(argv) {
  const opts = { port: 0, redis: 5, exitOnEof: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v < 0) throw new Error(`${a} needs a whole number`);
      return v;
    };
    if (a === '--port') opts.port = next();
    else if (a === '--redis') opts.redis = Math.max(3, next());
    else if (a === '--exit-on-eof') opts.exitOnEof = true;
    else throw new Error(`unknown argument ${a} (known: --port N, --redis N, --exit-on-eof)`);
  }
  return opts;
}

function send(res, status, body, type = 'text/plain; charset=utf-8') {
  res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' });
  res.end(body);
}

function sendJson(res, status, value) {
  send(res, status, JSON.stringify(value), MIME['.json']);
}

/** Maps a URL path to a file inside www/ or pkg/, or null (never outside them). */
function resolveStatic(urlPath) {
  let rel = decodeURIComponent(urlPath);
  let root = roots.www;
  if (rel === '/pkg' || rel.startsWith('/pkg/')) {
    root = roots.pkg;
    rel = rel.slice('/pkg'.length);
  }
  if (rel === '' || rel.endsWith('/')) rel += 'index.html';
  const file = path.resolve(root, '.' + rel);
  if (file !== root && !file.startsWith(root + path.sep)) return null;
  if (root === roots.www && path.basename(file) === 'serve.mjs') return null;
  return file;
}

async function serveStatic(req, res, urlPath) {
  const file = resolveStatic(urlPath);
  if (file === null) return send(res, 404, 'not found\n');
  try {
    const info = await stat(file);
    if (!info.isFile()) return send(res, 404, 'not found\n');
    const body = await readFile(file);
    res.writeHead(200, {
      'content-type': MIME[path.extname(file)] ?? 'application/octet-stream',
      'content-length': body.length,
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  } catch {
    send(res, 404, file.startsWith(roots.pkg) ? 'not found (build pkg/ with scripts/build-pkg.sh)\n' : 'not found\n');
  }
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const env = await startTestenv({ etcd: 1, redis: opts.redis, webdis: true, gateway: true });
  const nodes = env.redis.map((r, index) => ({ index, pid: r.pid, port: r.port, stopped: false }));

  const signalNode = (node, stop) => {
    process.kill(node.pid, stop ? 'SIGSTOP' : 'SIGCONT');
    node.stopped = stop;
  };
  const nodeStates = () => nodes.map(({ index, port, stopped }) => ({ index, port, stopped }));

  let port = 0;
  const server = createServer(async (req, res) => {
    try {
      const url = new URL(req.url ?? '/', 'http://127.0.0.1');
      if (url.pathname.startsWith('/dev/')) {
        const host = req.headers.host ?? '';
        if (host !== `127.0.0.1:${port}` && host !== `localhost:${port}`) return send(res, 403, 'bad host\n');
        if (req.headers['x-edgelock-dev'] !== '1') return send(res, 403, 'missing x-edgelock-dev header\n');
        if (url.pathname === '/dev/redis' && req.method === 'GET') return sendJson(res, 200, nodeStates());
        const m = /^\/dev\/redis\/(\d+)\/(stop|start)$/.exec(url.pathname);
        if (m && req.method === 'POST') {
          const node = nodes[Number(m[1])];
          if (node === undefined) return send(res, 404, 'no such node\n');
          signalNode(node, m[2] === 'stop');
          return sendJson(res, 200, nodeStates());
        }
        return send(res, 404, 'not found\n');
      }
      if (req.method !== 'GET' && req.method !== 'HEAD') return send(res, 405, 'method not allowed\n');
      if (url.pathname === '/config.json') {
        return sendJson(res, 200, {
          etcd: env.etcd_urls,
          webdis: env.webdis_urls,
          gateway: env.gateway_urls,
          // A throwaway token of this local gateway: the page needs it to talk to it.
          token: env.token,
          redisNodes: nodeStates(),
        });
      }
      return await serveStatic(req, res, url.pathname);
    } catch (e) {
      send(res, 500, `error: ${e instanceof Error ? e.message : String(e)}\n`);
    }
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, '127.0.0.1', resolve);
  });
  port = server.address().port;

  let stopping = false;
  const shutdown = async (code = 0) => {
    if (stopping) return;
    stopping = true;
    // Paused servers cannot exit: wake them up before testenv stops them.
    for (const node of nodes) if (node.stopped) try { signalNode(node, false); } catch { /* gone */ }
    server.closeAllConnections?.();
    server.close();
    await env.stop();
    process.exit(code);
  };
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => shutdown(0));
  if (opts.exitOnEof) {
    process.stdin.on('end', () => shutdown(0));
    process.stdin.on('error', () => shutdown(0));
    process.stdin.resume();
  }

  process.stdout.write(JSON.stringify({ url: `http://127.0.0.1:${port}/`, etcd: env.etcd_urls, redis: nodes.length }) + '\n');
  process.stderr.write(`edgelock demo page: http://127.0.0.1:${port}/  (etcd + ${nodes.length} Redis nodes on loopback; Ctrl-C stops)\n`);
}

main().catch((e) => {
  process.stderr.write(`serve.mjs: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
