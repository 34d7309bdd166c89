#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Subscriber side of test_kvpub: reads kvslab's KV event batches as a
vLLM-compatible router would (ZeroMQ SUB + msgpack, vLLM's replay protocol)
and checks them.

Usage: kvpub_sub.py PUB_ENDPOINT REPLAY_ENDPOINT TOPIC [map|array]
Prints "ready" once subscribed; the publisher then sends the batches the
test expects (see expected()), with each event encoded as a map of named
fields (map, the default: vLLM since its PR #42892) or as a positional
array (array: vLLM's array_like events before it).  Exit 0: all checked,
1: a mismatch, 77: zmq or msgpack cannot be imported.
"""
import sys
import time

try:
    import msgpack
    import zmq
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

BIG = 0xFFFFFFFFFFFFFFF0
DP_RANK = 3
# The token ids test_kvpub.c gives its stored events (tok() there).
TOK0 = [100 + j for j in range(16)]
TOK1 = [-5 + j for j in range(15)] + [2**31 - 1]
TOK2 = [-(2**31)] + [70000 + j for j in range(15)]

# Each event's fields in vLLM's declared order, tag first; None: nil.
STORED = ("block_hashes", "parent_block_hash", "token_ids", "block_size",
          "lora_id", "medium", "lora_name")
REMOVED = ("block_hashes", "medium")


def stored(h, parent, tokens, medium="GPU"):
    return ("BlockStored", STORED, [[h], parent, tokens, 16, None, medium, None])


def removed(h):
    return ("BlockRemoved", REMOVED, [[h], "GPU"])


CLEARED = ("AllBlocksCleared", (), [])

# seq -> events
EVENTS = {
    0: [stored(BIG, None, TOK0), stored(2, BIG, TOK1)],
    1: [removed(2)],
    2: [CLEARED],
    3: [stored(3, 2, TOK2), stored(4, 3, [], "CPU")],
}


def expected(fmt):
    """The events as msgspec encodes vLLM's tagged structs: a map whose
    first key, "type", holds the tag (map), or an array of the tag and the
    fields (array)."""
    out = {}
    for seq, evs in EVENTS.items():
        out[seq] = []
        for tag, names, values in evs:
            if fmt == "map":
                out[seq].append([("type", tag)] + list(zip(names, values)))
            else:
                out[seq].append([tag] + values)
    return out


def fail(msg):
    print("FAIL: " + msg)
    sys.stdout.flush()
    sys.exit(1)


def check_batch(seq, payload, fmt, want):
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    if not isinstance(batch, list) or len(batch) != 3:
        fail("seq %d: batch is not [ts, events, data_parallel_rank]: %r" % (seq, batch))
    ts, events, dp = batch
    if not isinstance(ts, float) or abs(ts - time.time()) > 60:
        fail("seq %d: ts %r is not a float of about now" % (seq, ts))
    if dp != DP_RANK:
        fail("seq %d: data_parallel_rank %r, want %d" % (seq, dp, DP_RANK))
    if fmt == "map":
        # Keys in order, as msgspec writes them (a dict keeps the order).
        if not all(isinstance(ev, dict) for ev in events):
            fail("seq %d: events %r are not all maps" % (seq, events))
        events = [list(ev.items()) for ev in events]
    if events != want[seq]:
        fail("seq %d: events %r, want %r" % (seq, events, want[seq]))


def main():
    pub_ep, replay_ep, topic = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    fmt = sys.argv[4] if len(sys.argv) > 4 else "map"
    if fmt not in ("map", "array"):
        fail("format %r, want map or array" % fmt)
    want = expected(fmt)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(pub_ep)
    time.sleep(0.5)  # the subscription reaches the publisher
    print("ready")
    sys.stdout.flush()

    got = {}
    deadline = time.time() + 10
    while len(got) < len(want) and time.time() < deadline:
        if not sub.poll(100):
            continue
        frames = sub.recv_multipart()
        if len(frames) != 3:
            fail("message of %d frames, want (topic, seq, payload)" % len(frames))
        t, seqb, payload = frames
        if t != topic:
            fail("topic %r, want %r" % (t, topic))
        if len(seqb) != 8:
            fail("sequence number of %d bytes, want 8" % len(seqb))
        seq = int.from_bytes(seqb, "big")
        if seq not in want or seq in got:
            fail("unexpected sequence number %d" % seq)
        check_batch(seq, payload, fmt, want)
        got[seq] = payload
    if sorted(got) != sorted(want):
        fail("received sequence numbers %r, want %r" % (sorted(got), sorted(want)))
    if list(got) != sorted(got):
        fail("batches out of order: %r" % list(got))

    # Replay from seq 1, as vLLM's subscriber asks for missed batches.
    req = ctx.socket(zmq.DEALER)
    req.connect(replay_ep)
    req.send_multipart([b"", (1).to_bytes(8, "big")])
    replayed = []
    while True:
        if not req.poll(5000):
            fail("replay: no answer")
        frames = req.recv_multipart()
        if len(frames) != 3 or frames[0] != b"":
            fail("replay: frames %r, want ('', seq, payload)" % frames)
        seq = int.from_bytes(frames[1], "big", signed=True)
        if seq == -1:
            if frames[2] != b"":
                fail("replay: end marker with a payload")
            break
        replayed.append(seq)
        if frames[2] != got.get(seq):
            fail("replay: seq %d differs from what was published" % seq)
    if replayed != [1, 2, 3]:
        fail("replay from 1 gave %r, want [1, 2, 3]" % replayed)

    # A start past the end: only the end marker.
    req.send_multipart([b"", (99).to_bytes(8, "big")])
    if not req.poll(5000):
        fail("replay from 99: no answer")
    frames = req.recv_multipart()
    if frames != [b"", (-1).to_bytes(8, "big", signed=True), b""]:
        fail("replay from 99 gave %r, want only the end marker" % frames)
    print("ok: %s, %d batches, replay %r" % (fmt, len(got), replayed))
    sub.close(0)
    req.close(0)
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
