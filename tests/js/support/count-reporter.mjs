// A node:test reporter that writes, as JSON, how many tests (not suites) ran
// in each test file, by file name: scripts/test-js.sh gives it to the Deno
// and Bun phases (support/run-runtime.mjs --compare), which fail when a file
// ran a different number of tests there than under Node.
import path from "node:path";

export default async function* countReporter(source) {
  const counts = {};
  for await (const event of source) {
    if (event.type !== "test:pass" && event.type !== "test:fail") continue;
    const { data } = event;
    if (data.details?.type === "suite" || !data.file) continue;
    const file = path.basename(data.file);
    counts[file] = (counts[file] ?? 0) + 1;
  }
  yield `${JSON.stringify(counts)}\n`;
}
