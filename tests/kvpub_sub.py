#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Subscriber side of test_kvpub: reads kvslab's KV event batches as a
vLLM-compatible router would (ZeroMQ SUB + msgpack, vLLM's replay protocol)
and checks them.

Usage: kvpub_sub.py PUB_ENDPOINT REPLAY_ENDPOINT TOPIC [map|array
       [seq|topic [REPLAY_MAX]]]
Prints "ready" once subscribed; the publisher then sends the batches the
test expects (see expected()), with each event encoded as a map of named
fields (map, the default: vLLM since its PR #42892) or as a positional
array (array: vLLM's array_like events before it).  Replay answers are
framed as (seq, payload) (seq, the default: vLLM before its PR #45177) or
(topic, seq, payload) (topic: vLLM since), at most REPLAY_MAX batches
each (default: no cap expected); a malformed request gets no answer.
Exit 0: all checked, 1: a mismatch, 77: zmq or msgpack cannot be imported.
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


def stored(h, parent, tokens, medium="GPU", lora=(None, None)):
    return ("BlockStored", STORED, [[h], parent, tokens, 16, lora[0], medium, lora[1]])


def removed(h):
    return ("BlockRemoved", REMOVED, [[h], "GPU"])


CLEARED = ("AllBlocksCleared", (), [])

# seq -> events
EVENTS = {
    # The second: extra key 7, vLLM's test LoRA (lora_cb of test_kvpub.c).
    0: [stored(BIG, None, TOK0), stored(2, BIG, TOK1, lora=(42, "test_lora"))],
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
    framing = sys.argv[5] if len(sys.argv) > 5 else "seq"
    if framing not in ("seq", "topic"):
        fail("replay framing %r, want seq or topic" % framing)
    cap = int(sys.argv[6]) if len(sys.argv) > 6 else None
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

    # Replay from seq 1, as vLLM's subscriber asks for missed batches, on a
    # DEALER (vLLM's PR #45177): ask again from the next while an answer is
    # cut at the cap.
    req = ctx.socket(zmq.DEALER)
    req.connect(replay_ep)

    def answer(frames):
        """(seq, payload) of one replay message, its framing checked."""
        if framing == "topic":
            if len(frames) != 4 or frames[0] != b"":
                fail("replay: frames %r, want ('', topic, seq, payload)" % frames)
            seq = int.from_bytes(frames[2], "big", signed=True)
            # The end marker's topic frame is empty.
            if frames[1] != (b"" if seq == -1 else topic):
                fail("replay: topic %r for seq %d" % (frames[1], seq))
            frames = frames[:1] + frames[2:]
        if len(frames) != 3 or frames[0] != b"" or len(frames[1]) != 8:
            fail("replay: frames %r, want ('', seq, payload)" % frames)
        return int.from_bytes(frames[1], "big", signed=True), frames[2]

    def replay(start):
        out = []
        req.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            if not req.poll(5000):
                fail("replay from %d: no answer" % start)
            seq, payload = answer(req.recv_multipart())
            if seq == -1:
                if payload != b"":
                    fail("replay: end marker with a payload")
                return out
            if payload != got.get(seq):
                fail("replay: seq %d differs from what was published" % seq)
            out.append(seq)

    # Malformed requests first (a start of 7 bytes; a delimiter that is not
    # empty): no answer, so the first answer is the well-formed one's.
    req.send_multipart([b"", (1).to_bytes(8, "big")[1:]])
    req.send_multipart([b"x", (0).to_bytes(8, "big")])
    answers = []
    start = 1
    while True:
        part = replay(start)
        if not part:
            break
        if cap is not None and len(part) > cap:
            fail("replay from %d: %d batches, more than the cap %d" % (start, len(part), cap))
        answers.append(part)
        start = part[-1] + 1
    replayed = [seq for part in answers for seq in part]
    if replayed != [1, 2, 3]:
        fail("replay from 1 gave %r, want [1, 2, 3]" % answers)
    if cap is not None and answers[0] != [1, 2, 3][:cap]:
        fail("replay from 1 gave first %r, want the cap's %d" % (answers[0], cap))

    # A start past the end: only the end marker.
    if replay(99):
        fail("replay from 99 gave batches")
    print("ok: %s, %s framing, %d batches, replay %r" % (fmt, framing, len(got), answers))
    sub.close(0)
    req.close(0)
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
