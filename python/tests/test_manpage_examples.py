# SPDX-License-Identifier: MIT
"""kvslab-python(7) shows what the code does: every Python program of the
page (an .EX block that begins with an import) is extracted and run, and
every shell line of it that starts with "$ " is run too, its output
compared with the lines the page shows under it (as tests/check-examples.sh
does for the C examples of the section-3 pages)."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
SRC = Path(os.environ.get("KVSLAB_TOP_SRCDIR") or TOP)
PAGE = SRC / "man" / "man7" / "kvslab-python.7"
EXAMPLE = SRC / "python" / "examples" / "replay.py"

# The roff escapes used in code, undone (as tests/check-examples.sh does).
_UNESCAPE = [("\\e", "\\"), ("\\-", "-"), ("\\(aq", "'"), ("\\(dq", '"'), ("\\(ti", "~"),
             ("\\(ha", "^"), ("\\&", ""), ("\\(rs", "\\")]


def _blocks():
    """The page's .EX blocks, unescaped, with the line each starts at."""
    out, cur, start = [], None, 0
    with open(PAGE, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if line.startswith(".EX"):
                cur, start = [], n + 1
            elif line.startswith(".EE"):
                out.append((start, cur))
                cur = None
            elif cur is not None:
                for a, b in _UNESCAPE:
                    line = line.replace(a, b)
                cur.append(line)
    return out


BLOCKS = _blocks()
PROGRAMS = [(s, "\n".join(b) + "\n") for s, b in BLOCKS
            if b and re.match(r"(import|from) ", b[0])]
# Shell lines: (line number, command, the output lines shown under it).
COMMANDS = []
for _s, _b in BLOCKS:
    for _i, _l in enumerate(_b):
        if _l.startswith("$ "):
            _shown = []
            for _o in _b[_i + 1:]:
                if _o.startswith("$ "):
                    break
                _shown.append(_o)
            COMMANDS.append((_s + _i, _l[2:], _shown))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_the_page_has_its_examples():
    # The package, sglang, vllm's block pool and hashes, and the synopsis.
    assert len(PROGRAMS) >= 5, [s for s, _ in PROGRAMS]
    text = "".join(p for _, p in PROGRAMS)
    for name in ("RadixCache", "TokenToKVPoolAllocator", "ReqToTokenPool", "BlockPool",
                 "RequestBlockHasher", "hash_block_tokens", "init_none_hash"):
        assert name + "(" in text, name
    assert any("examples/replay.py" in c for _, c, _ in COMMANDS)


@pytest.mark.parametrize("start,program", PROGRAMS,
                         ids=["line%d" % s for s, _ in PROGRAMS])
def test_program_runs(start, program, tmp_path):
    path = tmp_path / ("kvslab-python.7.line%d.py" % start)
    path.write_text(program)
    res = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path), env=_env())
    assert res.returncode == 0, "kvslab-python(7), example at line %d:\n%s%s" % (
        start, res.stdout, res.stderr)


def _command(cmd):
    """The page's command line, with this tree's paths: the example from the
    source tree with this interpreter (the package is on PYTHONPATH),
    kvslab-replay from the build tree."""
    words = shlex.split(cmd.split("|")[0])
    words = [w for w in words if not w.startswith("PYTHONPATH=")]
    if words[0] == "/usr/bin/python3":
        words[0] = sys.executable
    words = [str(EXAMPLE) if w == "python/examples/replay.py" else w for w in words]
    if words[0] == "tools/kvslab-replay":
        build = os.environ.get("KVSLAB_TOP_BUILDDIR")
        tool = Path(build) / "tools" / "kvslab-replay" if build else None
        if not tool or not os.access(tool, os.X_OK):
            pytest.skip("no tools/kvslab-replay (KVSLAB_TOP_BUILDDIR unset or not built)")
        words[0] = str(tool)
    return words


@pytest.mark.parametrize("line,cmd,shown", COMMANDS, ids=["line%d" % c[0] for c in COMMANDS])
def test_command_prints_what_the_page_shows(line, cmd, shown, tmp_path):
    argv = _command(cmd)
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=_env())
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout.splitlines()
    pipe = cmd.split("|")[1].split() if "|" in cmd else []
    if pipe:
        assert pipe[:2] == ["head", "-1"], "only | head -1 is understood: %s" % cmd
        out = out[:1]
    if shown:
        assert out == shown, "kvslab-python(7) line %d: %s" % (line, cmd)
