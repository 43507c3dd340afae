// The public declarations type-check a realistic example under strict
// settings (and reject the misuse marked @ts-expect-error in it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

const here = import.meta.dirname ?? new URL(".", import.meta.url).pathname;

test("tsc --noEmit accepts types-check/example.ts against the installed package", () => {
  const tsc = join(here, "node_modules/typescript/bin/tsc");
  const r = spawnSync(process.execPath, [tsc, "--noEmit", "-p", join(here, "types-check")], { encoding: "utf8" });
  assert.equal(r.status, 0, `tsc failed:\n${r.stdout}${r.stderr}`);
});
