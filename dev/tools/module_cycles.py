#!/usr/bin/env python3
"""Finds import cycles between the files of each crate of the dev cluster: the `dev` crate (dev/src) and the crates
beside it (every dev/*/src with a lib.rs, e.g. dev/memory-apiserver/src); the library only, as the programs in
src/bin are crates of their own. Each crate is checked alone: its `crate::` paths resolve within it, and a path into
another crate (`dev`'s `crate::apiserver::…`, which names the memory-apiserver crate it re-exports) is no edge, since
Cargo already refuses a cycle between crates. For each crate it builds the module tree from lib.rs and its `mod`
declarations (foo.rs or foo/mod.rs,
inline `mod x { }` blocks belonging to their file), then reads every path a file names: `use` trees and paths in
code that start with `crate::`, `super::`, `self::`, a child module or a name the file imported. A path is resolved
to the file that defines what it names, following `use` and `pub use` imports of the module it passes through (so
`crate::Store` in memory-apiserver counts as a dependency on store.rs, not on the lib.rs that re-exports it). The
file-level graph's strongly connected components with more than one file (Tarjan) are printed, each with the
references that make it, and the script exits 1 when a crate has one, 0 when none has, so that CI can run it.
Comments and string literals are ignored, except strings that are a `crate::`, `super::` or `self::` path (serde's
`with = "..."`). Usage: `python3 dev/tools/module_cycles.py [SRC_DIR...]` (default: every crate of dev/).
"""

import os
import re
import sys

KEYWORDS_START = {"crate", "super", "self"}
PATH_STRING = re.compile(r"^(crate|super|self)(::[A-Za-z_][A-Za-z0-9_]*)+$")


def strip(src):
    """Blanks out comments, string and char literals, keeping newlines so that line numbers stay right."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
            continue
        m = re.compile(r'b?r(#*)"').match(src, i)
        if m and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        if c == '"' or (c == "b" and src.startswith('b"', i) and not (i and (src[i - 1].isalnum() or src[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            body = src[i + 1 : j - 1]
            if PATH_STRING.match(body):
                out.append(body)  # `#[serde(with = "crate::hosts::seconds")]` and the like name a module
                i = j
                continue
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
            continue
        if c == "'":
            m = re.compile(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'").match(src, i)
            if m:
                out.append("' '")
                i = m.end()
                continue
        out.append(c)
        i += 1
    return "".join(out)


TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|::|\S")


def tokens(text):
    """(token, line) pairs."""
    result = []
    for lineno, line in enumerate(text.split("\n"), 1):
        for m in TOKEN.finditer(line):
            result.append((m.group(0), lineno))
    return result


class Module:
    def __init__(self, path, file, parent):
        self.path = path  # tuple of names, () for the crate root
        self.file = file  # the file that holds the module's items
        self.parent = parent
        self.children = {}  # name -> Module
        self.imports = {}  # name -> (segments, context Module, line); "*" globs are not names
        self.globs = []  # (segments, context Module)


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # file -> list of (scope Module, tokens in that scope) built by load()
        self.root = self.load(os.path.join(src, "lib.rs"), (), None)

    def module_file(self, parent_file, parent_is_dir_owner, parent_path, name):
        base = os.path.dirname(parent_file) if parent_is_dir_owner else os.path.splitext(parent_file)[0]
        for candidate in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
            if os.path.exists(candidate):
                return candidate
        return None

    def load(self, file, path, parent):
        module = Module(path, file, parent)
        toks = tokens(strip(open(file, encoding="utf-8").read()))
        owner = os.path.basename(file) in ("mod.rs", "lib.rs")
        # Walks the tokens, splitting them by inline module, and declaring file modules.
        scopes = []  # (Module, brace depth at which it closes)
        current = module
        depth = 0
        per_scope = {id(module): (module, [])}
        i = 0
        while i < len(toks):
            tok, line = toks[i]
            if tok == "mod" and i + 2 < len(toks) and re.match(r"[A-Za-z_]", toks[i + 1][0]):
                name, after = toks[i + 1][0], toks[i + 2][0]
                if after == ";":
                    if current is module:
                        child_file = self.module_file(file, owner, path, name)
                        if child_file:
                            module.children[name] = self.load(child_file, path + (name,), module)
                    i += 3
                    continue
                if after == "{":
                    inline = Module(current.path + (name,), file, current)
                    current.children[name] = inline
                    depth += 1
                    scopes.append((current, depth))
                    current = inline
                    per_scope[id(inline)] = (inline, [])
                    i += 3
                    continue
            if tok == "{":
                depth += 1
            elif tok == "}":
                if scopes and scopes[-1][1] == depth:
                    current = scopes.pop()[0]
                depth -= 1
            per_scope[id(current)][1].append((tok, line))
            i += 1
        self.files[file] = list(per_scope.values())
        return module


def parse_use_tree(toks, i, prefix, out):
    """Parses a use tree at toks[i]; appends (segments, alias or None, is_glob) to out; returns the index after it."""
    segs = list(prefix)
    while i < len(toks):
        tok = toks[i][0]
        if tok == "{":
            i += 1
            while i < len(toks) and toks[i][0] != "}":
                i = parse_use_tree(toks, i, segs, out)
                if i < len(toks) and toks[i][0] == ",":
                    i += 1
            return i + 1
        if tok == "*":
            out.append((segs, None, True))
            return i + 1
        if tok == "::":
            i += 1
            continue
        if re.match(r"[A-Za-z_]", tok):
            segs = segs + [tok]
            i += 1
            if i < len(toks) and toks[i][0] == "::":
                continue
            alias = None
            if i + 1 < len(toks) and toks[i][0] == "as":
                alias = toks[i + 1][0]
                i += 2
            out.append((segs, alias, False))
            return i
        return i
    return i


def collect(crate):
    """Fills each module's imports and returns the paths each scope names: list of (Module, segments, line, kind)."""
    refs = []
    for file, scopes in crate.files.items():
        for module, toks in scopes:
            i = 0
            while i < len(toks):
                tok, line = toks[i]
                if tok == "use" and (i == 0 or toks[i - 1][0] != "::"):
                    trees = []
                    end = parse_use_tree(toks, i + 1, [], trees)
                    for segs, alias, glob in trees:
                        if not segs:
                            continue
                        if segs[-1] == "self":
                            segs = segs[:-1]
                            name = alias or (segs[-1] if segs else None)
                        else:
                            name = alias or segs[-1]
                        if glob:
                            module.globs.append((segs, module))
                            refs.append((module, segs, line, "glob"))
                        else:
                            if name and name != "_":
                                module.imports[name] = (segs, module, line)
                            refs.append((module, segs, line, "use"))
                    i = end
                    continue
                if re.match(r"[A-Za-z_]", tok) and i + 1 < len(toks) and toks[i + 1][0] == "::" and (
                    i == 0 or toks[i - 1][0] != "::"
                ):
                    segs = [tok]
                    j = i + 1
                    while j + 1 < len(toks) and toks[j][0] == "::" and re.match(r"[A-Za-z_]", toks[j + 1][0]):
                        segs.append(toks[j + 1][0])
                        j += 2
                    refs.append((module, segs, line, "path"))
                    i = j
                    continue
                i += 1
    return refs


def find_child(module, name):
    return module.children.get(name)


def resolve(crate, segs, context, seen=None):
    """The Module and the item name (or None) a path names, seen from context; None when outside the crate."""
    seen = set() if seen is None else seen
    key = (tuple(segs), id(context))
    if key in seen:
        return None
    seen.add(key)
    if not segs:
        return (context, None)
    first, rest = segs[0], list(segs[1:])
    if first == "crate":
        module = crate.root
    elif first == "self":
        module = context
    elif first == "super":
        module = context.parent
        while rest and rest[0] == "super":
            module = module.parent if module else None
            rest = rest[1:]
        if module is None:
            return None
    elif find_child(context, first):
        module = find_child(context, first)
    elif first in context.imports:
        target, ctx, _ = context.imports[first]
        resolved = resolve(crate, target, ctx, seen)
        if resolved is None:
            return None
        module, item = resolved
        if item is not None:
            return (module, item)
    else:
        return None
    while rest:
        name = rest[0]
        child = find_child(module, name)
        if child is not None:
            module, rest = child, rest[1:]
            continue
        if name in module.imports:
            target, ctx, _ = module.imports[name]
            resolved = resolve(crate, target + rest[1:], ctx, seen)
            if resolved is not None:
                return resolved
        return (module, name)
    return (module, None)


def graph(crate):
    refs = collect(crate)
    edges = {file: {} for file in crate.files}  # file -> {target file: [lines]}
    for module, segs, line, kind in refs:
        if kind == "path" and segs[0] not in KEYWORDS_START and not find_child(module, segs[0]) and segs[0] not in module.imports:
            continue
        resolved = resolve(crate, segs, module)
        if resolved is None:
            continue
        target, item = resolved
        if item is None and kind == "use":
            continue  # importing a module's name is no dependency by itself; its uses through the name are
        if target.file != module.file:
            edges[module.file].setdefault(target.file, []).append((line, "::".join(segs)))
    return edges


def tarjan(nodes, succ):
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # Iterative, so that deep graphs do not hit Python's recursion limit.
        work = [(v, iter(sorted(succ[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                result.append(component)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return result


def dev_crates():
    """dev/src and every dev/*/src that holds a lib.rs, sorted so that the output is stable."""
    dev = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    sources = [os.path.join(dev, "src")]
    for name in sorted(os.listdir(dev)):
        src = os.path.join(dev, name, "src")
        if os.path.isfile(os.path.join(src, "lib.rs")):
            sources.append(src)
    return sources


def check(src):
    """Prints the cycles between the files of the crate whose sources are in src; returns how many there are."""
    src = os.path.normpath(src)
    crate = Crate(src)
    edges = graph(crate)
    components = [sorted(c) for c in tarjan(edges.keys(), edges) if len(c) > 1]
    components.sort()
    rel = lambda f: os.path.relpath(f, src)
    for component in components:
        members = set(component)
        print(f"cycle of {len(component)} files: {', '.join(rel(f) for f in component)}")
        for f in component:
            for target in sorted(edges[f]):
                if target in members:
                    uses = edges[f][target]
                    shown = ", ".join(f"{line}: {path}" for line, path in uses[:4])
                    more = f" (+{len(uses) - 4} more)" if len(uses) > 4 else ""
                    print(f"  {rel(f)} -> {rel(target)}  [{shown}{more}]")
        print()
    if components:
        print(f"{len(components)} cycle(s) between the files of {src}")
        return len(components)
    print(f"no cycle between the {len(crate.files)} files of {src}")
    return 0


def main():
    sources = sys.argv[1:] or dev_crates()
    cycles = sum(check(src) for src in sources)
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
