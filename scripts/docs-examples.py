#!/usr/bin/env python3
"""The code blocks of README.md, docs/ and pkg-src/README.md that mirror a checked example file.

A block is tied to its file by a marker line right above its opening fence:

    <!-- example: docs/examples/node-quickstart.ts -->          (the whole file)
    <!-- example: examples/docs_rust.rs#quickstart -->          (a region of it)

A region is the lines between `// [docs:NAME]` and `// [/docs:NAME]` in the
file, without their common indentation. The files themselves are compiled
elsewhere (tsc --strict by scripts/check-docs.sh, `cargo build --examples`),
so a block that equals its file is known to compile.

It also checks that every relative link of README.md and docs/ names a file
that exists, and an anchor that is one of that file's headings.

    docs-examples.py check   fails (exit 1) naming every block that differs
    docs-examples.py fix     rewrites the blocks from their files
    docs-examples.py list    prints the example files the documents use
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- example: (?P<file>[^#\s]+)(?:#(?P<region>[\w-]+))? -->$")


def documents():
    yield ROOT / "README.md"
    yield ROOT / "pkg-src" / "README.md"
    yield from sorted((ROOT / "docs").rglob("*.md"))


def region_text(path, region):
    lines = path.read_text().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if region is None:
        return lines
    begin = [i for i, l in enumerate(lines) if l.strip() == f"// [docs:{region}]"]
    end = [i for i, l in enumerate(lines) if l.strip() == f"// [/docs:{region}]"]
    if len(begin) != 1 or len(end) != 1 or end[0] <= begin[0]:
        raise ValueError(f"{path.relative_to(ROOT)}: region {region!r} must be marked once")
    body = lines[begin[0] + 1 : end[0]]
    indent = min((len(l) - len(l.lstrip(" ")) for l in body if l.strip()), default=0)
    return [l[indent:] for l in body]


def blocks(doc_lines):
    """(marker index, fence start index, fence end index, file, region) per marked block."""
    for i, line in enumerate(doc_lines):
        m = MARKER.match(line)
        if not m:
            continue
        start = i + 1
        if start >= len(doc_lines) or not doc_lines[start].startswith("```"):
            raise ValueError(f"line {i + 1}: an example marker must stand right above a code fence")
        end = next((j for j in range(start + 1, len(doc_lines)) if doc_lines[j] == "```"), None)
        if end is None:
            raise ValueError(f"line {i + 1}: the code block is not closed")
        yield i, start, end, m.group("file"), m.group("region")


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def slug(heading):
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    found, code = set(), False
    for line in path.read_text().split("\n"):
        if line.startswith("```"):
            code = not code
        elif not code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def broken_links(doc):
    if doc.name == "README.md" and doc.parent.name == "pkg-src":
        return []  # read on npm, where relative links do not resolve
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    broken = []
    for m in LINK.finditer(text):
        target = m.group("target")
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(f"{doc.relative_to(ROOT)}: link to a missing file: {target}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{doc.relative_to(ROOT)}: link to a missing heading: {target}")
    return broken


def main(mode):
    failures, used = [], set()
    for doc in documents():
        lines = doc.read_text().split("\n")
        rel = doc.relative_to(ROOT)
        failures.extend(broken_links(doc))
        try:
            found = list(blocks(lines))
        except ValueError as e:
            failures.append(f"{rel}: {e}")
            continue
        for _, start, end, file, region in reversed(found):
            used.add(file)
            try:
                want = region_text(ROOT / file, region)
            except (OSError, ValueError) as e:
                failures.append(f"{rel}:{start}: {e}")
                continue
            if lines[start + 1 : end] == want:
                continue
            if mode == "fix":
                lines[start + 1 : end] = want
            else:
                where = file + (f"#{region}" if region else "")
                failures.append(f"{rel}:{start + 1}: the code block differs from {where} (scripts/docs-examples.py fix rewrites it)")
        if mode == "fix":
            doc.write_text("\n".join(lines))
    if mode == "list":
        print("\n".join(sorted(used)))
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("check", "fix", "list"):
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
