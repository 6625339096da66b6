#!/usr/bin/env python3
"""Resolves the agent's code order (agent.order: function names without their hashes, one per line, `#` comments)
into the symbols of a binary linked with its symbols (`nm`), for lld's --symbol-ordering-file.

Usage: resolve.py ORDER BINARY > RESOLVED

The names are kept without the hashes that Rust's legacy mangling appends (`::h0123456789abcdef`), because those
change with every toolchain and dependency version: each name stands for every symbol of the binary that bears it
(a generic's instantiations share a name). Prints to stderr how many names were found, so that a stale order shows.
"""

import subprocess
import sys


def symbols(binary):
    """(mangled, demangled) for every function symbol defined in `binary`."""
    def names(*flags):
        out = subprocess.run(["nm", "--defined-only", *flags, binary], capture_output=True, text=True, check=True)
        rows = []
        for line in out.stdout.splitlines():
            parts = line.split(" ", 2)
            rows.append((parts[1], parts[2]) if len(parts) == 3 else (None, None))
        return rows

    mangled, demangled = names(), names("--demangle")
    if len(mangled) != len(demangled):
        sys.exit("nm listed the symbols of %s twice differently" % binary)
    return [(m[1], d[1]) for m, d in zip(mangled, demangled) if m[0] in ("t", "T", "w", "W")]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    order = [l.strip() for l in open(sys.argv[1], encoding="utf-8")]
    order = [l for l in order if l and not l.startswith("#")]
    by_name = {}
    for mangled, demangled in symbols(sys.argv[2]):
        by_name.setdefault(demangled, []).append(mangled)
    found, out, seen = 0, [], set()
    for name in order:
        hits = by_name.get(name, [])
        found += bool(hits)
        for symbol in hits:
            if symbol not in seen:
                seen.add(symbol)
                out.append(symbol)
    sys.stdout.write("".join(s + "\n" for s in out))
    print("agent order: %d of %d names found in %s, %d symbols" % (found, len(order), sys.argv[2], len(out)),
          file=sys.stderr)


if __name__ == "__main__":
    main()
