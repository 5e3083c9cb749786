#!/usr/bin/env python3
"""Reports Rust functions longer than a limit (issue 31: "no function over 100 lines outside
tests").

A function's length is counted from the line of its `fn` keyword to the line of its closing
brace, both included (attributes and doc comments above it do not count). Nested functions count
on their own and inside the function that holds them. Test code is not checked: files under a
`tests/` directory, files named `tests*.rs`, items marked `#[cfg(test)]` (a `mod tests { .. }`
block, or a `mod name;` whose file is then skipped whole) and functions marked `#[test]`.
Functions written inside `macro_rules!` bodies count like any other.

The scan works on the text with comments, string literals and character literals blanked out
(newlines kept), so braces and the word `fn` inside them are not seen. It is not a parser: it
looks for `fn <name>`, takes the first `{` outside parentheses and brackets as the body (a `;`
first means a declaration without one) and matches braces from there.

Usage: .ci/long_functions.py [--max LINES] [--top N] [PATH ...]
  PATH     files or directories to check (default: the repository: crates/, bench/, fuzz/)
  --max    the most lines a function may have (default 100)
  --top    also list the N longest functions checked, whatever their length

Exit status: 0 when no function is over the limit, 1 when some are (each listed as
`path:line: fn name: N lines`, longest first), 2 on a usage error.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIRS = ["crates", "bench", "fuzz"]
SKIP_DIRS = {"target", ".git", "tests", "node_modules"}

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CFG_TEST = re.compile(r"#\[cfg\((?:all\()?\s*test\b[^\]]*\]")
TEST_ATTR = re.compile(r"#\[(?:[a-z_]+::)?test\b[^\]]*\]")


def blank(src):
    """The source with comments and the insides of string and character literals replaced by
    spaces; newlines stay, so offsets and line numbers are those of the source."""
    out = list(src)
    n = len(src)
    i = 0

    def wipe(a, b):
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        nxt = src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif c in "rb" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'(?:br|r|b)(#*)"', src[i:])
            if m and (m.group(0).startswith("r") or m.group(0).startswith("br")):
                hashes = m.group(1)
                start = i + len(m.group(0))
                end = src.find('"' + hashes, start)
                end = n if end < 0 else end + 1 + len(hashes)
                wipe(start, end - 1 - len(hashes))
                i = end
            elif src.startswith('b"', i):
                i = skip_string(src, i + 1, wipe)
            elif src.startswith("b'", i):
                i = skip_char(src, i + 1, wipe)
            else:
                i += 1
        elif c == '"':
            i = skip_string(src, i, wipe)
        elif c == "'":
            i = skip_char(src, i, wipe)
        else:
            i += 1
    return "".join(out)


def skip_string(src, i, wipe):
    """Skips the string literal whose opening quote is at `i`; returns the offset after it."""
    j = i + 1
    n = len(src)
    while j < n and src[j] != '"':
        j += 2 if src[j] == "\\" else 1
    wipe(i + 1, j)
    return j + 1


def skip_char(src, i, wipe):
    """At a quote: skips a character literal ('x', '\\n', '\\u{..}'); a lifetime ('a) is left."""
    n = len(src)
    if i + 1 < n and src[i + 1] == "\\":
        j = i + 2
        while j < n and src[j] != "'":
            j += 1
        wipe(i + 1, j)
        return j + 1
    if i + 2 < n and src[i + 2] == "'":
        wipe(i + 1, i + 2)
        return i + 3
    return i + 1


def match_brace(text, i):
    """The offset of the brace closing the one at `i` (or the end of the text)."""
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n - 1


def test_spans(text):
    """Offsets [start, end) of items marked `#[cfg(test)]` or `#[test]`, and the names of the
    file modules declared under `#[cfg(test)]` (`mod name;`)."""
    spans, files = [], []
    for m in list(CFG_TEST.finditer(text)) + list(TEST_ATTR.finditer(text)):
        j = m.end()
        # The item starts after any further attributes; it ends at its body's closing brace
        # or, for a declaration, at its semicolon.
        while True:
            k = j
            while k < len(text) and text[k].isspace():
                k += 1
            if text.startswith("#[", k):
                depth, k = 0, k + 1
                while k < len(text):
                    if text[k] == "[":
                        depth += 1
                    elif text[k] == "]":
                        depth -= 1
                        if depth == 0:
                            break
                    k += 1
                j = k + 1
            else:
                j = k
                break
        decl = re.match(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", text[j:])
        if decl and m.re is CFG_TEST:
            files.append(decl.group(1))
            continue
        k = j
        paren = 0
        while k < len(text):
            c = text[k]
            if c in "([":
                paren += 1
            elif c in ")]":
                paren -= 1
            elif c == ";" and paren == 0:
                break
            elif c == "{" and paren == 0:
                k = match_brace(text, k)
                break
            k += 1
        spans.append((m.start(), k + 1))
    return spans, files


def functions(text):
    """(name, first line, last line, offset) of every function with a body."""
    found = []
    line_starts = [0]
    for k, c in enumerate(text):
        if c == "\n":
            line_starts.append(k + 1)

    def line_of(off):
        lo, hi = 0, len(line_starts)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if line_starts[mid] <= off:
                lo = mid
            else:
                hi = mid
        return lo + 1

    for m in re.finditer(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)", text):
        k = m.end()
        paren = 0
        body = None
        while k < len(text):
            c = text[k]
            if c in "([":
                paren += 1
            elif c in ")]":
                paren -= 1
            elif c == ";" and paren == 0:
                break
            elif c == "{" and paren == 0:
                body = k
                break
            k += 1
        if body is None:
            continue
        end = match_brace(text, body)
        found.append((m.group(1), line_of(m.start()), line_of(end), m.start()))
    return found


def rust_files(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for dirpath, dirnames, filenames in os.walk(p):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for f in sorted(filenames):
                if f.endswith(".rs"):
                    yield os.path.join(dirpath, f)


def check_file(path, skipped_files):
    name = os.path.basename(path)
    if name.startswith("tests") or path in skipped_files:
        return []
    with open(path, encoding="utf-8") as f:
        text = blank(f.read())
    spans, test_mods = test_spans(text)
    here = os.path.dirname(path)
    stem = os.path.splitext(name)[0]
    # `mod x;` in a.rs names a/x.rs (or a/x/mod.rs); in lib.rs, main.rs or mod.rs, x.rs beside it.
    base = here if stem in ("lib", "main", "mod") else os.path.join(here, stem)
    for mod in test_mods:
        skipped_files.add(os.path.join(base, mod + ".rs"))
        skipped_files.add(os.path.join(base, mod, "mod.rs"))
    out = []
    for fname, first, last, off in functions(text):
        if any(a <= off < b for a, b in spans):
            continue
        out.append((last - first + 1, path, first, fname))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--max", type=int, default=100)
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    paths = args.paths or [os.path.join(ROOT, d) for d in DEFAULT_DIRS]
    paths = [os.path.normpath(p) for p in paths if os.path.exists(p)]
    if not paths:
        print("long_functions: nothing to check", file=sys.stderr)
        return 2
    # Files are visited parent before child (sorted walk, a module's file before its
    # directory), so a `#[cfg(test)] mod x;` is seen before x.rs.
    skipped = set()
    found = []
    count = 0
    for path in rust_files(paths):
        fns = check_file(path, skipped)
        count += len(fns)
        found.extend(fns)
    found.sort(key=lambda f: (-f[0], f[1], f[2]))

    def rel(p):
        r = os.path.relpath(p, ROOT)
        return p if r.startswith("..") else r

    over = [f for f in found if f[0] > args.max]
    for lines, path, line, name in over:
        print(f"{rel(path)}:{line}: fn {name}: {lines} lines (over {args.max})")
    if args.top:
        print(f"-- the {args.top} longest functions checked:")
        for lines, path, line, name in found[: args.top]:
            print(f"{rel(path)}:{line}: fn {name}: {lines} lines")
    if over:
        print(f"long_functions: {len(over)} of {count} functions over {args.max} lines")
        return 1
    print(f"long_functions: none of {count} functions over {args.max} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
