#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Strict checker of the Prometheus text exposition format 0.0.4 as
kvs_metrics_write() writes it (tests/ops/test_metrics.c, test_ctl.c).

Reads FILE (or stdin); every line must be a # HELP, a # TYPE or a sample,
each metric's HELP then TYPE come once and before its samples, which
follow them contiguously; counters end in _total and gauges do not; label
values use only the three escapes; no series repeats.  Prometheus's naming
conventions too: the only label is "object" (never "instance", which the
server sets itself), no word twice in a row (kvslab_slab_slab_maps), base
units only (bytes, seconds; no ns, ms, KiB ...) and as the name's last word
(before _total), a _ratio gauge within 0..1.  When promtool is on the PATH,
`promtool check metrics` must find nothing either.  Prints one line a
sample, "NAME<TAB>INSTANCE-AS-HEX or -<TAB>VALUE", and exits 0; on the
first fault prints "line N: why" to stderr and exits 1.  Uses
prometheus_client's parser as a second opinion when it is installed.
"""
import math
import re
import shutil
import subprocess
import sys

NAME = r'[a-zA-Z_:][a-zA-Z0-9_:]*'
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*'
HELP_RE = re.compile(r'^# HELP (' + NAME + r') ((?:[^\\\n]|\\\\|\\n)*)$')
TYPE_RE = re.compile(r'^# TYPE (' + NAME + r') (counter|gauge|histogram|summary|untyped)$')
SAMPLE_RE = re.compile(r'^(' + NAME + r')(?:\{(' + LABEL + r')="((?:[^"\\\n]|\\\\|\\"|\\n)*)"\})? (\S+)$')


def unescape(s):
    return re.sub(r'\\(.)', lambda m: '\n' if m.group(1) == 'n' else m.group(1), s)


def fail(n, why):
    sys.stderr.write('line %d: %s\n' % (n, why))
    sys.exit(1)


# Units a name may not use (not base units), and the base units, which end it.
NOT_BASE = {'ns', 'us', 'ms', 'nanoseconds', 'microseconds', 'milliseconds', 'minutes',
            'hours', 'kb', 'mb', 'gb', 'kib', 'mib', 'gib', 'percent', 'perc', 'pct'}
BASE_LAST = {'bytes', 'seconds', 'ratio'}


def name_rules(n, name, kind):
    words = name.split('_')
    if kind == 'counter':
        words = words[:-1]
    for a, b in zip(words, words[1:]):
        if a == b:
            fail(n, 'stutter in %s: %s_%s' % (name, a, b))
    for i, w in enumerate(words):
        if w in NOT_BASE:
            fail(n, '%s: %s is not a base unit (bytes, seconds)' % (name, w))
        if w in BASE_LAST and i != len(words) - 1:
            fail(n, '%s: the unit %s must be the last word%s' %
                 (name, w, ' before _total' if kind == 'counter' else ''))
    if words[-1] == 'ratio' and kind != 'gauge':
        fail(n, '%s: a ratio is a gauge' % name)


def promtool(text):
    tool = shutil.which('promtool')
    if not tool:
        return
    p = subprocess.run([tool, 'check', 'metrics'], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0 or p.stdout.strip():
        fail(0, 'promtool check metrics: %s' % p.stdout.decode(errors='replace').strip())


def main():
    data = open(sys.argv[1], 'rb').read() if len(sys.argv) > 1 else sys.stdin.buffer.read()
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError:
        fail(0, 'not UTF-8')
    if text and not text.endswith('\n'):
        fail(0, 'the text does not end with a newline')
    helped, typed, seen, out = set(), {}, set(), []
    current = None
    for n, line in enumerate(text.split('\n')[:-1], 1):
        if line.startswith('#'):
            m = HELP_RE.match(line)
            if m:
                if m.group(1) in helped:
                    fail(n, 'second HELP for ' + m.group(1))
                helped.add(m.group(1))
                current = ('help', m.group(1))
                continue
            m = TYPE_RE.match(line)
            if m:
                name, kind = m.group(1), m.group(2)
                if name in typed:
                    fail(n, 'second TYPE for ' + name)
                if current != ('help', name):
                    fail(n, 'TYPE not right after its HELP: ' + name)
                if kind not in ('counter', 'gauge'):
                    fail(n, 'unexpected type ' + kind)
                if (kind == 'counter') != name.endswith('_total'):
                    fail(n, '%s %s: counters, and only counters, end in _total' % (kind, name))
                name_rules(n, name, kind)
                typed[name] = kind
                current = ('type', name)
                continue
            fail(n, 'a comment that is neither HELP nor TYPE: %r' % line)
        m = SAMPLE_RE.match(line)
        if not m:
            fail(n, 'not a sample line: %r' % line)
        name, lname, lval, value = m.groups()
        if name not in typed:
            fail(n, 'sample before its TYPE: ' + name)
        if current != ('type', name):
            fail(n, 'sample away from its family: ' + name)
        if lname is not None and lname != 'object':
            fail(n, 'unexpected label %s (the only one is object)' % lname)
        try:
            v = float(value)
        except ValueError:
            fail(n, 'bad value %r' % value)
        if math.isnan(v) or (typed[name] == 'counter' and v < 0):
            fail(n, 'bad value %r for a %s' % (value, typed[name]))
        if name.endswith('_ratio') and not 0 <= v <= 1:
            fail(n, 'a ratio out of 0..1: %r' % value)
        inst = None if lval is None else unescape(lval)
        key = (name, inst)
        if key in seen:
            fail(n, 'series repeated: %s %r' % key)
        seen.add(key)
        out.append('%s\t%s\t%s' % (name, '-' if inst is None else inst.encode().hex(), value))
    if helped != set(typed):
        fail(0, 'HELP without TYPE: %s' % sorted(helped - set(typed)))
    try:
        from prometheus_client.parser import text_string_to_metric_families
        count = sum(len(f.samples) for f in text_string_to_metric_families(text))
        if count != len(out):
            fail(0, 'prometheus_client counts %d samples, we %d' % (count, len(out)))
    except ImportError:
        pass
    promtool(text)
    sys.stdout.write(''.join(s + '\n' for s in out))


main()
