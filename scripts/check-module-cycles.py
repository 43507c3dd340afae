#!/usr/bin/env python3
"""Fail when modules under src/ import each other in a circle (issue 27, item 4).

Usage: python3 scripts/check-module-cycles.py [--allow FILE] [--all-edges]

Builds a graph whose nodes are modules (one per file: `x.rs`, or a directory's
`mod.rs`/`lib.rs`/`main.rs`) and whose edges are path references from one
module's production code to another, then prints every strongly connected
component (a set of modules that reach one another) with the edges that close
it, and exits 1 if there is one. Each crate is checked on its own: the library
(src/lib.rs) and each binary (src/bin/*/main.rs, src/bin/*.rs); a binary's
`edgelock::…` paths point into another crate and cannot close a cycle.

What counts as a reference from module M:
- every `use` path (`use crate::…`, `use super::…`, `use self::…`, and a path
  starting at one of M's child modules or at a name M imported), including
  `use` inside function bodies; a glob (`use x::*`) counts as a reference to
  module x itself;
- a `pub use` / `pub(crate) use` only when M's own code also uses the name it
  brings in: a pure re-export is a pass-through, not a dependency of M (it is
  followed when resolving other modules' paths, see below); a re-exporting glob
  (`pub use types::*`) never counts on its own;
- every path written in code that starts with `crate::`, `super::`, `self::`
  or one of M's child modules (`crate::core::backend::parse(..)`).
- `mod x;` declarations are not references.
- References between a module and one of its own ancestors (`super::…` up to a
  parent's items, a `mod.rs` calling into its children) are not edges: a
  directory module and its files are one unit whose parent is its entry
  point, and Rust's own visibility already ties them together. A cycle is
  therefore always between modules that are not nested in one another
  (siblings, cousins), possibly through their ancestors' and descendants'
  references: `a::x -> b` plus `b::y -> a` is the cycle `a::x -> b -> a`
  only when the edges say so; each edge is charged to the file that holds it.

How a path is resolved to the module it points at: walk the segments from the
crate root through declared modules; at the first segment that is not a child
module, if the module defines an item of that name (depth-0 `struct`, `enum`,
`fn`, `trait`, `type`, `const`, `static`, `mod {…}`, `macro_rules!`) the path
ends there; if the module imports that name (`use`, `pub use`, any
visibility) the path continues from the import's target (so `crate::core::
LockHandle` resolves through `core/mod.rs`'s `pub use types::*` to
`core::types`); else if one of the module's glob imports provides that name the
path continues there; else the path ends at the module reached so far
(conservative: an unknown name is charged to the module that was named).
Inline modules (`mod name { … }`) count as part of their file. Macros, `#[path]`
attributes and names brought in by `extern crate` are not followed.

What is left out: comments (doc comments included, so intra-doc links are not
references), string and char literals, and every item under `#[cfg(test)]`
(test modules, whether inline or in their own file, and test-only imports).

The allow-list (scripts/module-cycles-allowed.txt by default) holds edges
`a -> b`, one a line, `#` starts a comment; listed edges are removed before
cycles are looked for. An entry whose edge no longer exists, or no longer lies
on a cycle (the cycle was broken elsewhere), is reported as stale (delete it)
but does not fail the check. `--all-edges` prints the graph.
"""

import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SRC = os.path.join(ROOT, "src")
DEFAULT_ALLOW = os.path.join(ROOT, "scripts", "module-cycles-allowed.txt")

CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*(?:all\s*\(\s*)?test\b[^\]]*\]")
MOD_DECL = re.compile(r"(?:\bpub\s*(?:\([^)]*\))?\s*)?\bmod\s+(\w+)\s*([;{])")
ITEM_DEF = re.compile(
    r"\b(?:struct|enum|fn|trait|type|const|static|union|mod)\s+(\w+)|\bmacro_rules!\s*(\w+)"
)
USE_STMT = re.compile(r"(?<![\w:])(pub\s*(?:\([^)]*\))?\s*)?\buse\s+([^;]*);")
CODE_PATH = re.compile(r"(?<![\w:])((?:r#)?[a-z_]\w*)((?:\s*::\s*\w+)+)")


def blank(text):
    """Replace comments and string/char literals with spaces, keeping newlines."""
    out, i, n = [], 0, len(text)

    def keep_lines(chunk):
        return "".join("\n" if c == "\n" else " " for c in chunk)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(keep_lines(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_lines(text[i:j]))
            i = j
        elif re.match(r'b?r(#*)"', text[i:i + 260]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append(keep_lines(text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(keep_lines(text[i:j + 1]))
            i = j + 1
        elif c == "'" and i + 2 < n and (text[i + 1] == "\\" or text[i + 2] == "'"):
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            out.append(keep_lines(text[i:j + 1]))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def item_end(text, start):
    """Index just past the item starting at `start`: its `;` or its `{…}` block."""
    depth, i = 0, start
    while i < len(text):
        c = text[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth == 0:
            return i + 1
        elif c == "{" and depth == 0:
            return block_end(text, i)
        i += 1
    return len(text)


def block_end(text, open_brace):
    depth = 0
    for i in range(open_brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def strip_cfg_test(text):
    """Blank every item under #[cfg(test)] (the attribute, later attributes, the item)."""
    while True:
        m = CFG_TEST.search(text)
        if not m:
            return text
        i = m.end()
        while True:  # further attributes on the same item
            a = re.compile(r"\s*#\s*\[").match(text, i)
            if not a:
                break
            i = text.index("]", a.end()) + 1
        end = item_end(text, i)
        text = text[:m.start()] + "".join("\n" if c == "\n" else " " for c in text[m.start():end]) + text[end:]


def depth0_defs(text):
    """Names of items defined outside any block (fn bodies, impls) of this file."""
    names, depth, last = set(), 0, 0
    chunks = []
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                chunks.append(text[last:i + 1])
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                last = i
    chunks.append(text[last:])
    for chunk in chunks:
        for m in ITEM_DEF.finditer(chunk):
            names.add(m.group(1) or m.group(2))
    return names


def parse_use_tree(s):
    """`a::{b, c::d as e, f::*}` -> [(['a','b'], 'b'), (['a','c','d'], 'e'), (['a','f'], '*')]."""
    toks = re.findall(r"::|[{},*]|\w+", s)
    pos = 0

    def tree(prefix):
        nonlocal pos
        segs = list(prefix)
        out = []
        while pos < len(toks):
            t = toks[pos]
            if t == "::":
                pos += 1
            elif t == "{":
                pos += 1
                while pos < len(toks) and toks[pos] != "}":
                    out += tree(segs)
                    if pos < len(toks) and toks[pos] == ",":
                        pos += 1
                pos += 1
                return out
            elif t == "*":
                pos += 1
                return out + [(segs, "*")]
            elif t in (",", "}"):
                break
            elif t == "as":
                alias = toks[pos + 1]
                pos += 2
                return out + [(segs, alias)]
            else:
                segs = segs + [t]
                pos += 1
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        return out + ([(segs, segs[-1])] if segs else [])

    return tree([])


class Module:
    def __init__(self, path, file, parent):
        self.path = path  # tuple of segments from the crate root, () for the root
        self.file = file
        self.parent = parent
        self.children = {}
        self.text = ""
        self.defs = set()
        self.uses = []  # (segments, alias or '*', is_pub, line)

    @property
    def name(self):
        return "crate" + "".join("::" + s for s in self.path)


def child_file(parent_file, name):
    d, base = os.path.split(parent_file)
    if base not in ("mod.rs", "lib.rs", "main.rs"):
        d = os.path.join(d, base[:-3])
    for cand in (os.path.join(d, name + ".rs"), os.path.join(d, name, "mod.rs")):
        if os.path.exists(cand):
            return cand
    return None


def load_crate(root_file):
    modules = {}

    def load(path, file, parent):
        m = Module(path, file, parent)
        modules[path] = m
        with open(file, encoding="utf-8") as f:
            m.text = strip_cfg_test(blank(f.read()))
        m.defs = depth0_defs(m.text)
        for d in MOD_DECL.finditer(m.text):
            if d.group(2) == ";":
                cf = child_file(file, d.group(1))
                if cf:
                    m.children[d.group(1)] = load(path + (d.group(1),), cf, m)
        for u in USE_STMT.finditer(m.text):
            line = m.text.count("\n", 0, u.start()) + 1
            for segs, alias in parse_use_tree(u.group(2)):
                m.uses.append((segs, alias, bool(u.group(1)), line))
        return m

    load((), root_file, None)
    return modules


class Resolver:
    def __init__(self, modules):
        self.modules = modules

    def absolute(self, mod, segs):
        """A path as written in `mod` -> segments from the crate root, or None (extern)."""
        if not segs:
            return None
        if segs[0] == "crate":
            return list(segs[1:])
        if segs[0] == "self":
            return list(mod.path) + list(segs[1:])
        if segs[0] == "super":
            m, rest = mod, list(segs)
            while rest and rest[0] == "super":
                m = m.parent or m
                rest = rest[1:]
            return list(m.path) + rest
        if segs[0] in mod.children:
            return list(mod.path) + list(segs)
        for usegs, alias, _, _ in mod.uses:
            if alias == segs[0] and usegs[:1] != [segs[0]]:
                base = self.absolute(mod, usegs)
                return None if base is None else base + list(segs[1:])
        return None

    def resolve(self, segs, depth=0):
        """Segments from the crate root -> the module holding what they name."""
        cur = self.modules[()]
        for i, seg in enumerate(segs):
            if seg in cur.children:
                cur = cur.children[seg]
                continue
            if depth > 20 or seg in cur.defs:
                return cur
            for usegs, alias, _, _ in cur.uses:
                if alias == seg:
                    target = self.absolute(cur, usegs)
                    if target is not None and target != list(cur.path) + [seg]:
                        return self.resolve(target + list(segs[i + 1:]), depth + 1)
            for usegs, alias, _, _ in cur.uses:
                if alias == "*":
                    base = self.absolute(cur, usegs)
                    if base is not None and self.provides(base, seg, depth + 1):
                        return self.resolve(base + list(segs[i:]), depth + 1)
            return cur
        return cur

    def provides(self, base, seg, depth):
        m = self.resolve(base, depth)
        if tuple(base) != m.path or depth > 20:
            return False
        return seg in m.children or seg in m.defs or any(a == seg for _, a, _, _ in m.uses)


def related(a, b):
    """True when one module is the other or contains it (see the docstring)."""
    n = min(len(a.path), len(b.path))
    return a.path[:n] == b.path[:n]


def used_in_body(mod, name):
    body = USE_STMT.sub(lambda u: "".join("\n" if c == "\n" else " " for c in u.group(0)), mod.text)
    return re.search(r"(?<![\w])" + re.escape(name) + r"(?!\w)", body) is not None


def crate_edges(modules, crate_label):
    """{(from, to): 'file:line'} for one crate."""
    res = Resolver(modules)
    edges = {}

    def add(mod, segs, line):
        target = res.absolute(mod, segs)
        if target is None:
            return
        to = res.resolve(target)
        if not related(mod, to):
            key = (crate_label + mod.name[5:] if crate_label else mod.name,
                   crate_label + to.name[5:] if crate_label else to.name)
            edges.setdefault(key, "%s:%d" % (os.path.relpath(mod.file, ROOT), line))

    for mod in modules.values():
        for segs, alias, is_pub, line in mod.uses:
            if alias == "*":
                if not is_pub:
                    add(mod, segs, line)
            elif not is_pub or used_in_body(mod, alias):
                add(mod, segs, line)
        body = USE_STMT.sub(lambda u: "".join("\n" if c == "\n" else " " for c in u.group(0)), mod.text)
        for p in CODE_PATH.finditer(body):
            first = p.group(1)
            if first in ("crate", "super", "self") or first in mod.children:
                segs = [first] + [s for s in re.split(r"\s*::\s*", p.group(2)) if s]
                add(mod, segs, body.count("\n", 0, p.start()) + 1)
    return edges


def strongly_connected(nodes, succ):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def shortest_cycle(start, members, succ):
    """A shortest cycle through `start` inside one component (BFS)."""
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ.get(v, ())):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return None


def cycles_of(comp, succ):
    """The distinct shortest cycles through each module of a component."""
    seen, out = set(), []
    for start in comp:
        cycle = shortest_cycle(start, set(comp), succ)
        if cycle is None:
            continue
        ring = cycle[:-1]
        key = tuple(ring[ring.index(min(ring)):] + ring[:ring.index(min(ring))])
        if key not in seen:
            seen.add(key)
            out.append(list(key) + [key[0]])
    return out


def reaches(succ, start, goal):
    seen, todo = {start}, [start]
    while todo:
        v = todo.pop()
        if v == goal:
            return True
        for w in succ.get(v, ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return False


def crates():
    yield "", os.path.join(SRC, "lib.rs")
    bindir = os.path.join(SRC, "bin")
    if os.path.isdir(bindir):
        for entry in sorted(os.listdir(bindir)):
            full = os.path.join(bindir, entry)
            if entry.endswith(".rs"):
                yield "bin " + entry[:-3] + ": crate", full
            elif os.path.exists(os.path.join(full, "main.rs")):
                yield "bin " + entry + ": crate", os.path.join(full, "main.rs")


def read_allow(path):
    allowed = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if line:
                    a, _, b = (s.strip() for s in line.partition("->"))
                    allowed[(a, b)] = n
    return allowed


def main(argv):
    allow_path = DEFAULT_ALLOW
    if "--allow" in argv:
        allow_path = argv[argv.index("--allow") + 1]
    edges = {}
    for label, root in crates():
        edges.update(crate_edges(load_crate(root), label))
    if "--all-edges" in argv:
        for (a, b), where in sorted(edges.items()):
            print("%s -> %s  (%s)" % (a, b, where))
    allowed = read_allow(allow_path)
    full = {}
    for (a, b) in edges:
        full.setdefault(a, set()).add(b)
    for (a, b), n in sorted(allowed.items(), key=lambda kv: kv[1]):
        if (a, b) not in edges or not reaches(full, b, a):
            print("stale allow-list entry (no cycle through it any more: delete it): %s:%d: %s -> %s"
                  % (os.path.relpath(allow_path, ROOT), n, a, b), file=sys.stderr)
    succ = {}
    for (a, b) in edges:
        if (a, b) not in allowed:
            succ.setdefault(a, set()).add(b)
    nodes = set(succ) | {b for s in succ.values() for b in s}
    comps = strongly_connected(nodes, succ)
    for comp in comps:
        print("modules in one cycle: " + ", ".join(comp))
        for cycle in cycles_of(comp, succ):
            print("  cycle: " + " -> ".join(cycle))
            for a, b in zip(cycle, cycle[1:]):
                print("    %s -> %s  (%s)" % (a, b, edges[(a, b)]))
    if comps:
        print("%d set(s) of modules in a cycle under src/; break them (or, for one being fixed elsewhere, list the "
              "edge in %s)" % (len(comps), os.path.relpath(allow_path, ROOT)), file=sys.stderr)
        return 1
    print("no module cycles under src/ (%d edges between modules, %d allowed by %s)"
          % (len(edges), len(allowed), os.path.relpath(allow_path, ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
