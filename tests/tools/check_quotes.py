#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/tools/check_quotes.py - the outputs of kvslab-replay that the
README and the man pages quote are the outputs the tool prints.

A quote is marked where it stands: in Markdown by a comment line
``<!-- check-quotes: ARGS -->`` before an indented block, in roff by a
comment line ``.\\" check-quotes: ARGS`` before an ``.EX`` block.  ARGS
are kvslab-replay's arguments; a word that names a file of the traces
folder (conversation_trace.jsonl) is replaced by its path, and a quote
whose trace is missing is skipped.  Each command runs once (with
--no-progress); the block's lines are then compared with its output:

- a verdict line ("verdict NAME: ...", wrapped lines joined) with the
  output's verdict line of NAME, number by number, except the times
  (a number followed by "ms host" or "us");
- a table (a header of known column names, an optional line of units,
  then rows that begin with a strategy's name) with the output's table
  that has those columns, column by column, except the times (drv ms,
  host ms, the latency percentiles, cache req/s);
- any other line must appear in the output as it is, blanks squeezed.

Usage: check_quotes.py TOOL TRACES_DIR FILE...  Exit status 0 when every
quote agrees, 1 with each disagreement named, 77 when no quote could run.
"""
import re
import shlex
import subprocess
import sys

# Column names of the report's tables, longest first when they share a word.
COLUMNS = [
    "alloc p50/p99 us", "match p50/p99 us", "held/floor mn/p99/max", "est. GPU ms",
    "peak mapd", "mean mapd", "peak live", "mean live", "frag pk", "frag mn", "cached mn",
    "drv calls", "drv ms", "cache req/s", "end MiB", "need mn", "need pk", "floor mn",
    "mapped mn", "mapped pk", "host ms", "share %", "set_access", "intfrag", "capacity",
    "strategy", "page", "cache", "hit", "done", "preempt", "rejected", "reserve",
    "unreserve", "create", "release", "map", "unmap",
]
# Columns that time the host: they change from run to run.
TIMES = {"drv ms", "host ms", "alloc p50/p99 us", "match p50/p99 us", "cache req/s"}
# Driver call counts and what is computed from them: within a part in 10^4
# (the same replay has been seen to make one call more on another machine).
CALLS = {"drv calls", "reserve", "unreserve", "create", "release", "map", "unmap",
         "set_access", "est. GPU ms"}
CALLS_TOL = 1e-4


def same(quoted, printed, calls):
    """Whether @printed is what @quoted says: equal, or for @calls close."""
    if quoted == printed:
        return True
    if not calls:
        return False
    try:
        q, p = float(quoted), float(printed)
    except ValueError:
        return False
    return abs(q - p) <= CALLS_TOL * max(abs(q), abs(p))
NUM = re.compile(r"-?\d+(?:\.\d+)?")


def header_columns(line):
    """The column names of a header line, or None when it is not one."""
    cols, rest = [], line.strip()
    if not rest.startswith("strategy"):
        return None
    while rest:
        for c in COLUMNS:
            if rest.startswith(c) and (len(rest) == len(c) or rest[len(c)] == " "):
                cols.append(c)
                rest = rest[len(c):].lstrip()
                break
        else:
            return None
    return cols


def unroff(line):
    for a, b in (("\\-", "-"), ("\\~", " "), ("\\e", "\\"), ("\\(aq", "'"), ("\\&", ""),
                 ("\\fB", ""), ("\\fR", ""), ("\\fI", ""), ("\\fP", "")):
        line = line.replace(a, b)
    return line


def quotes(path):
    """(line number, ARGS, block lines) for every marked quote of @path."""
    out, lines = [], open(path, encoding="utf-8").read().split("\n")
    roff = not path.endswith(".md")
    mark = re.compile(r'^\.\\" check-quotes:(.*)$' if roff else r"^<!-- check-quotes:(.*?) ?-->$")
    i = 0
    while i < len(lines):
        m = mark.match(lines[i])
        i += 1
        if not m:
            continue
        start, block = i, []
        if roff:
            while i < len(lines) and lines[i] != ".EX":
                i += 1
            i += 1
            while i < len(lines) and lines[i] != ".EE":
                block.append(unroff(lines[i]))
                i += 1
        else:
            while i < len(lines) and not lines[i].strip():
                i += 1
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i][4:])
                i += 1
        out.append((start, m.group(1).strip(), block))
    return out


def joined(block):
    """Lines with wrapped verdict lines joined."""
    out = []
    for line in block:
        if out and out[-1].startswith("verdict ") and line.strip() and \
                not line.startswith("verdict ") and not line.startswith("strategy"):
            out[-1] += " " + line.strip()
        else:
            out.append(line.rstrip())
    return out


def verdict_numbers(line):
    """The numbers of a verdict line but the times, as printed, each with
    whether it is a count of driver calls or an estimate from them."""
    nums = []
    for m in NUM.finditer(line):
        after = line[m.end():m.end() + 20]
        if after.startswith(" ms host") or after.startswith(" us"):
            continue
        # Part of a name (slab:16, static:1, a100): not a figure.
        before = line[m.start() - 1] if m.start() else " "
        if before == ":" or before.isalpha():
            continue
        calls = after.startswith(" driver calls") or after.startswith(")") and \
            "driver calls (" in line[max(0, m.start() - 40):m.start()] or \
            after.startswith(" ms GPU driver time")
        nums.append((m.group(), calls))
    return nums


def verdicts_agree(quoted, printed):
    q, p = verdict_numbers(quoted), verdict_numbers(printed)
    return len(q) == len(p) and all(same(a, b, ca or cb) for (a, ca), (b, cb) in zip(q, p))


def tables(text):
    """{tuple of columns: {strategy: [values]}} of a report."""
    res, cols = {}, None
    for line in text.split("\n"):
        h = header_columns(line)
        if h:
            cols = tuple(h)
            res[cols] = {}
            continue
        words = line.split()
        if cols and words and len(words) == len(cols) and not words[0].endswith("MiB"):
            res[cols][words[0]] = words
        elif not line.strip():
            cols = None
    return res


def find_table(out_tables, cols):
    for oc, rows in out_tables.items():
        if all(c in oc for c in cols):
            return oc, rows
    return None, None


def check(where, block, out):
    errs = []
    out_lines = out.split("\n")
    out_tables = tables(out)
    cols = None
    squeeze = lambda s: " ".join(s.split())
    for line in joined(block):
        if not line.strip():
            cols = None
            continue
        h = header_columns(line)
        if h:
            cols = h
            oc, rows = find_table(out_tables, cols)
            if oc is None:
                errs.append(f"{where}: no table with the columns {cols} in the output")
                cols = None
            continue
        words = line.split()
        if cols and len(words) == len(cols) and words[0] in rows:
            got = rows[words[0]]
            for c, v in zip(cols, words):
                if c in TIMES:
                    continue
                g = got[oc.index(c)]
                if not same(v, g, c in CALLS):
                    errs.append(f"{where}: {words[0]} {c}: quoted {v}, the tool prints {g}")
            continue
        if cols and all(w.endswith("MiB") or w in ("tokens", "mean", "") for w in words):
            continue                    # the units line
        if line.startswith("verdict "):
            key = re.match(r"verdict \S+:", line + ":").group()
            o = [x for x in out_lines if x.startswith(key)]
            if not o:
                errs.append(f"{where}: no line '{key}' in the output")
            elif not verdicts_agree(line, o[0]):
                errs.append(f"{where}: {key} quoted {[n for n, _ in verdict_numbers(line)]}, "
                            f"the tool prints {[n for n, _ in verdict_numbers(o[0])]}")
            continue
        if squeeze(line) not in squeeze(out):
            errs.append(f"{where}: '{line.strip()}' is not in the output")
    return errs


def main():
    tool, traces, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    runs, errs, ran, skipped = {}, [], 0, 0
    for path in files:
        for lineno, args, block in quotes(path):
            where = f"{path}:{lineno}"
            argv = shlex.split(args)
            missing = False
            for k, a in enumerate(argv):
                if re.match(r"^[\w.-]+\.(jsonl|csv)$", a) and not a.startswith("-"):
                    try:
                        open(f"{traces}/{a}").close()
                        argv[k] = f"{traces}/{a}"
                    except OSError:
                        missing = True
            if missing:
                print(f"{where}: skipped: a trace of '{args}' is not in {traces}")
                skipped += 1
                continue
            key = tuple(argv)
            if key not in runs:
                p = subprocess.run([tool, "--no-progress"] + argv, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
                runs[key] = p.stdout
                print(f"ran kvslab-replay {args}: exit {p.returncode}")
            e = check(where, block, runs[key])
            errs += e
            ran += 1
            if not e:
                print(f"{where}: agrees ({len([b for b in block if b.strip()])} lines)")
    for e in errs:
        print(e)
    if errs:
        return 1
    return 0 if ran else 77


if __name__ == "__main__":
    sys.exit(main())
