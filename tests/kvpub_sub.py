#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Subscriber side of test_kvpub: reads kvslab's KV event batches as a
vLLM-compatible router would (ZeroMQ SUB + msgpack, vLLM's replay protocol)
and checks them.

Usage: kvpub_sub.py PUB_ENDPOINT REPLAY_ENDPOINT TOPIC
Prints "ready" once subscribed; the publisher then sends the batches the
test expects (see EXPECTED).  Exit 0: all checked, 1: a mismatch,
77: zmq or msgpack cannot be imported.
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
# seq -> events, as msgspec encodes vLLM's tagged array_like structs
EXPECTED = {
    0: [["BlockStored", [BIG], None, [], 16, None, "GPU"],
        ["BlockStored", [2], BIG, [], 16, None, "GPU"]],
    1: [["BlockRemoved", [2], "GPU"]],
    2: [["AllBlocksCleared"]],
}


def fail(msg):
    print("FAIL: " + msg)
    sys.stdout.flush()
    sys.exit(1)


def check_batch(seq, payload):
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    if not isinstance(batch, list) or len(batch) != 3:
        fail("seq %d: batch is not [ts, events, data_parallel_rank]: %r" % (seq, batch))
    ts, events, dp = batch
    if not isinstance(ts, float) or abs(ts - time.time()) > 60:
        fail("seq %d: ts %r is not a float of about now" % (seq, ts))
    if dp != DP_RANK:
        fail("seq %d: data_parallel_rank %r, want %d" % (seq, dp, DP_RANK))
    if events != EXPECTED[seq]:
        fail("seq %d: events %r, want %r" % (seq, events, EXPECTED[seq]))


def main():
    pub_ep, replay_ep, topic = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(pub_ep)
    time.sleep(0.5)  # the subscription reaches the publisher
    print("ready")
    sys.stdout.flush()

    got = {}
    deadline = time.time() + 10
    while len(got) < len(EXPECTED) and time.time() < deadline:
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
        if seq not in EXPECTED or seq in got:
            fail("unexpected sequence number %d" % seq)
        check_batch(seq, payload)
        got[seq] = payload
    if sorted(got) != sorted(EXPECTED):
        fail("received sequence numbers %r, want %r" % (sorted(got), sorted(EXPECTED)))
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
    if replayed != [1, 2]:
        fail("replay from 1 gave %r, want [1, 2]" % replayed)

    # A start past the end: only the end marker.
    req.send_multipart([b"", (99).to_bytes(8, "big")])
    if not req.poll(5000):
        fail("replay from 99: no answer")
    frames = req.recv_multipart()
    if frames != [b"", (-1).to_bytes(8, "big", signed=True), b""]:
        fail("replay from 99 gave %r, want only the end marker" % frames)
    print("ok: %d batches, replay %r" % (len(got), replayed))
    sub.close(0)
    req.close(0)
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
