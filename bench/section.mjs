// Writes one `## Title` section of BENCHMARKS.md (replacing it if present,
// else appending it), for the benchmarks that run after bench/run.mjs has
// written the rest of the file.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import path from "node:path";
import { repoRoot } from "../tests/js/testenv.mjs";

export function writeSection(title, section) {
  const mdPath = path.join(repoRoot, "BENCHMARKS.md");
  const md = existsSync(mdPath) ? readFileSync(mdPath, "utf8") : "";
  const heading = `## ${title}\n`;
  const start = md.indexOf(heading);
  let out;
  if (start < 0) {
    out = md.trimEnd() + "\n\n" + section;
  } else {
    const next = md.indexOf("\n## ", start + 1);
    out = md.slice(0, start) + section + (next < 0 ? "" : md.slice(next + 1));
  }
  writeFileSync(mdPath, out);
}

/** The q-quantile of `xs` (NaN for none). */
export function quantile(xs, q) {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
}
