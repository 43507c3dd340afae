// Helpers for the ZooKeeper tests (tests/js/zookeeper.test.mjs and
// tests/worker/zookeeper.test.mjs): the real Apache Curator 5.4 driven line by
// line, as the Rust tests drive it through the devtools' CuratorPeer.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";

/**
 * Curator in its own JVM (one session), started from `testenv --curator`'s
 * `curator_command` against `env.zookeeper_connect`; one command line at a
 * time (tools/devtools/java/CuratorPeer.java lists them): `send(line)`
 * resolves with the answer line, `close()` ends the JVM. The peer is pushed
 * onto `peers` (to close in an `after`).
 */
export async function startCurator(env, sessionMs, peers = []) {
  const [bin, ...args] = env.curator_command;
  const child = spawn(bin, [...args, env.zookeeper_connect, String(sessionMs)], { stdio: ["pipe", "pipe", "pipe"] });
  let buffered = "";
  const waiting = [];
  const lines = [];
  let log = "";
  child.stderr.on("data", (d) => {
    log = (log + d).slice(-4000);
  });
  child.stdout.on("data", (d) => {
    buffered += d;
    for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      const w = waiting.shift();
      if (w) w(line);
      else lines.push(line);
    }
  });
  const next = (what, ms = 60_000) =>
    new Promise((resolve, reject) => {
      if (lines.length > 0) return resolve(lines.shift());
      const timer = setTimeout(() => reject(new Error(`CuratorPeer: no answer to ${what}; log:\n${log}`)), ms);
      waiting.push((line) => {
        clearTimeout(timer);
        resolve(line);
      });
    });
  const ready = await next("start");
  assert.match(ready, /^READY [0-9a-f]+$/, log);
  const peer = {
    send(line) {
      child.stdin.write(`${line}\n`);
      return next(line);
    },
    async close() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.stdin.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
  peers.push(peer);
  return peer;
}
