# SPDX-License-Identifier: MIT
"""python/examples/replay.py: its port of kvslab-replay's generator makes the
same trace as the tool (the tool's header line, compared for several option
sets), and the example, run at a small size, serves every request, finds
that the slab maps less on average than the static pool, and draws its plot
when matplotlib is installed."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "replay.py"


def _load():
    spec = importlib.util.spec_from_file_location("kvslab_replay_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


replay = _load()


def _tool():
    """tools/kvslab-replay of the build tree (make check exports its path)."""
    build = os.environ.get("KVSLAB_TOP_BUILDDIR")
    if not build:
        pytest.skip("KVSLAB_TOP_BUILDDIR is not set: cannot find tools/kvslab-replay "
                    "(run through tests/check-python.sh or make check)")
    tool = Path(build) / "tools" / "kvslab-replay"
    if not os.access(tool, os.X_OK):
        pytest.skip("no %s: build the tools first" % tool)
    return tool


# Option sets (kvslab-replay's names): every generator option moves at
# least once, rate 0 (all at once) and a Zipf pool of one prefix included.
OPTION_SETS = [
    {"requests": 200},
    {"requests": 150, "seed": 7, "shared-ratio": 0.3, "prefixes": 5, "input-mean": 4000,
     "rate": 0},
    {"requests": 300, "seed": 12345678901234, "input-max": 4096, "input-mean": 1024,
     "output-mean": 64, "output-max": 512, "rate": 9.5},
    {"requests": 120, "shared-ratio": 1, "prefixes": 1, "input-mean": 700, "input-max": 1500},
    {"requests": 100, "shared-ratio": 0, "seed": 3},
]


@pytest.mark.parametrize("opts", OPTION_SETS, ids=lambda o: ",".join(
    "%s=%s" % kv for kv in o.items()))
def test_generator_header_equals_kvslab_replay(opts):
    tool = _tool()
    args = []
    for k, v in opts.items():
        args += ["--" + k, str(v)]
    # The smallest run that prints the header: one static strategy, no plot.
    res = subprocess.run([str(tool), "-s", "static:1", "-M", "1G"] + args,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    want = res.stdout.splitlines()[0]
    assert want.startswith("trace: built-in generator, %d requests" % opts["requests"])
    kw = {k.replace("-", "_"): v for k, v in opts.items()}
    got = replay.header(replay.generate(**kw))
    assert got == want


def test_generator_defaults_are_the_tools():
    # The example's defaults are kvslab-replay's (the tool's --rate is 2).
    assert replay.GEN_DEFAULTS == dict(seed=1, requests=2000, rate=2.0, input_mean=2048,
                                       input_max=16384, output_mean=256, output_max=2048,
                                       shared_ratio=0.5, prefixes=16)


def test_generator_requests_are_consistent():
    reqs = replay.generate(requests=50, seed=5)
    assert len(reqs) == 50
    last = 0.0
    for r in reqs:
        assert r.arrival_ms >= last
        last = r.arrival_ms
        assert 1 <= r.input_len <= 16384 and 1 <= r.output_len <= 2048
        assert len(r.blocks) == (r.input_len + 511) // 512
        toks = r.input_tokens()
        assert len(toks) == r.input_len
        assert int(toks[0]) == r.blocks[0] * 512
    # The same seed gives the same requests; another seed others.
    again = replay.generate(requests=50, seed=5)
    assert [(r.arrival_ms, r.input_len, r.output_len, r.blocks) for r in reqs] == \
        [(r.arrival_ms, r.input_len, r.output_len, r.blocks) for r in again]
    other = replay.generate(requests=50, seed=6)
    assert [r.blocks for r in reqs] != [r.blocks for r in other]


@pytest.mark.parametrize("bad", [dict(input_mean=5000, input_max=4000),
                                 dict(output_mean=0), dict(shared_ratio=1.5),
                                 dict(rate=float("nan")), dict(requests=0)])
def test_generator_rejects_what_the_tool_rejects(bad):
    with pytest.raises(ValueError):
        replay.generate(**bad)


def _run_example(tmp_path, *extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    res = subprocess.run([sys.executable, str(EXAMPLE), "--requests", "150",
                          "--plot", str(tmp_path / "replay.png")] + list(extra),
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                         env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _rows(out):
    """pool -> (capacity, mean GiB, peak GiB, hit, done, preempted, rejected, drv calls)."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(static|slab)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)"
                     r"\s+(\d+)\s+(\d+)\s", line)
        if m:
            g = m.groups()
            rows[g[0]] = (int(g[1]), float(g[2]), float(g[3]), float(g[4]), int(g[5]),
                          int(g[6]), int(g[7]), int(g[8]))
    return rows


def test_example_slab_maps_less_than_static(tmp_path):
    out = _run_example(tmp_path, "--no-plot")
    assert out.splitlines()[0] == replay.header(replay.generate(requests=150))
    rows = _rows(out)
    assert set(rows) == {"static", "slab"}, out
    st, sl = rows["static"], rows["slab"]
    assert st[0] == sl[0] == (8 << 30) // 131072          # llama-3-8b in 8G
    # Every request served or, longer than the whole pool, rejected, by both.
    assert st[4] == sl[4] > 0 and st[6] == sl[6] and st[4] + st[6] == 150
    assert st[1] == st[2] == 8.0                          # static: all of it, always
    assert sl[1] < st[1], out                             # the slab maps less on average
    assert sl[2] <= st[2]
    assert 0 < st[3] < 1 and 0 < sl[3] < 1                # some prefix hits
    assert sl[7] > 0 and st[7] > 0                        # driver calls
    assert "verdict: the slab maps" in out
    assert not (tmp_path / "replay.png").exists()


def test_example_plot(tmp_path):
    out = _run_example(tmp_path)
    png = tmp_path / "replay.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert "plot: skipped" in out and not png.exists()
        pytest.skip("matplotlib is not installed (python3-matplotlib): the plot was skipped, "
                    "as the example said")
    assert "plot: %s" % png in out
    assert png.stat().st_size > 1000
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_example_without_matplotlib_says_it_skipped_the_plot(tmp_path):
    # As on a machine without python3-matplotlib: its import fails.
    code = ("import runpy, sys; sys.modules['matplotlib'] = None; "
            "sys.argv = [%r, '--requests', '40', '--plot', %r]; "
            "runpy.run_path(%r, run_name='__main__')" % (
                str(EXAMPLE), str(tmp_path / "replay.png"), str(EXAMPLE)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=str(tmp_path), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "plot: skipped, matplotlib is not available" in res.stdout
    assert not (tmp_path / "replay.png").exists()
