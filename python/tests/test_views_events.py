# SPDX-License-Identifier: MIT
"""Zero-copy views of the pool's buffers and the request table (numpy,
DLPack, the array interfaces), and the caches' KV event queues."""
import errno
import gc
import sys
import time

import numpy as np
import pytest

import kvslab
from kvslab import _kvslab


@pytest.fixture
def drv():
    with kvslab.Driver("host") as d:
        yield d


def test_kv_view_layout_matches_pool_buffer(drv):
    # llama-3-8b: 8 KV heads of 128, 2-byte elements, 32 layers.
    with kvslab.Pool(drv, "llama-3-8b", 16, 4096) as p:
        v = p.kv_view(3, "v")
        assert v.shape == (p.capacity, 8, 128)
        assert v.strides == (8 * 128 * 2, 128 * 2, 2)
        assert v.dtype == "float16" and v.device == "cpu"
        k = p.kv_view(3, "k")
        assert k.ptr != v.ptr
        locs = p.alloc(16)
        # Bytes written through set_kv-free numpy writes land at loc * stride.
        a = p.kv_array(3, "v")
        a[locs[5]] = 1.25
        assert a.ctypes.data == v.ptr
        assert np.all(np.asarray(p.kv_view(3, "v"))[locs[5]] == np.float16(1.25))
        # The K buffer of the same layer is another buffer: untouched there.
        assert not np.any(np.asarray(k)[locs[5]])
        del a, k, v
        gc.collect()
        p.free(locs)


def test_view_pins_the_pool_and_close_refuses(drv):
    p = kvslab.Pool(drv, "llama-3-8b", 16, 1024)
    v = p.kv_view(0)
    before = sys.getrefcount(p)
    a = np.asarray(v)
    with pytest.raises(kvslab.Error) as e:
        p.close()
    assert e.value.errno == errno.EBUSY
    assert p.available() > 0  # still open: nothing changed
    del a, v
    gc.collect()
    assert sys.getrefcount(p) == before - 1
    p.close()
    with pytest.raises(ValueError):
        p.kv_view(0)


def test_view_errors(drv):
    with kvslab.Pool(drv, "llama-3-8b", 16, 1024) as p:
        with pytest.raises(kvslab.Error) as e:
            p.kv_view(32)  # 32 layers: 0..31
        assert e.value.errno == errno.EINVAL
        with pytest.raises(ValueError):
            p.kv_view(0, "q")
        with pytest.raises(ValueError):
            p.kv_view(0, "k", "float32")  # 4 bytes over 2-byte elements
        with pytest.raises(ValueError):
            p.kv_view(0, "k", "complex")
        with pytest.raises(kvslab.Error):
            p.kv_view(0, "latent")  # an MHA model has no latent buffer
        v = p.kv_view(0, "k", "bfloat16")
        with pytest.raises(TypeError):  # numpy cannot express bfloat16
            np.asarray(v)
        assert not hasattr(v, "__cuda_array_interface__")  # host memory
        assert v.__dlpack_device__() == (1, 0)
        del v


def test_dlpack_capsule_unconsumed_is_freed(drv):
    with kvslab.Pool(drv, "llama-3-8b", 16, 1024) as p:
        v = p.kv_view(0)
        base = sys.getrefcount(v)
        cap = v.__dlpack__()
        assert sys.getrefcount(v) == base + 1  # the capsule holds the view
        del cap
        assert sys.getrefcount(v) == base
        del v


def test_torch_tensor_shares_memory(drv):
    torch = pytest.importorskip("torch", reason="torch (python3-torch) not installed: "
                                "the DLPack path to torch is not tested")
    with kvslab.Pool(drv, "llama-3-8b", 16, 1024) as p:
        locs = p.alloc(16)
        t = p.kv_tensor(2, "k", "bfloat16")
        assert t.dtype == torch.bfloat16 and tuple(t.shape) == (p.capacity, 8, 128)
        assert t.stride() == (8 * 128, 128, 1)
        t[int(locs[0])] = 2.5
        raw = np.asarray(p.kv_view(2, "k", "int16"))[locs[0]]
        assert np.all(raw.view(np.uint16) == 0x4020)  # bfloat16 2.5
        with pytest.raises(kvslab.Error):
            p.close()  # the tensor holds the view
        del t, raw
        gc.collect()
        p.free(locs)


def test_reqtab_device_view(drv):
    with kvslab.Reqtab(drv, 4, 32) as r:
        dv = r.device_view()
        assert dv.shape == (4, 32) and dv.dtype == "int32"
        slot = r.alloc(1)[0]
        r.write(slot, 2, [7, 8, 9])
        r.sync()
        row = np.asarray(dv)[slot]
        assert list(row[2:5]) == [7, 8, 9]
        assert not np.asarray(dv).flags.writeable
        with pytest.raises(BufferError):
            r.close()
        del dv, row
        gc.collect()


def test_radix_events_follow_the_tree(drv):
    with kvslab.Pool(drv, "tiny", 1, 4096) as p, kvslab.Radix(p, events=True) as r:
        key = np.arange(100, 106, dtype=np.int32)
        locs = p.alloc(6)
        assert r.insert(key, locs)[0] == 0
        ev = r.take_events()
        assert [e[0] for e in ev] == [kvslab.KV_STORED] * 6
        assert [e[3] for e in ev] == [(t,) for t in range(100, 106)]
        # A chain: each page's parent is the page before it.
        assert ev[0][2] == 0
        assert all(ev[i][2] == ev[i - 1][1] for i in range(1, 6))
        assert all(e[4] == kvslab.MEDIUM_GPU for e in ev)
        assert r.take_events() == []  # taken: the queue is empty
        got, _ = r.evict(6)
        assert got == 6
        removed = r.take_events()
        assert sorted(e[1] for e in removed) == sorted(e[1] for e in ev)
        assert all(e[0] == kvslab.KV_REMOVED and e[3] is None for e in removed)
        r.reset()
        assert r.take_events() == [(kvslab.KV_ALL_CLEARED, 0, 0, None, 0, 0)]


def test_events_off_by_default(drv):
    with kvslab.Pool(drv, "tiny", 1, 4096) as p, kvslab.Radix(p) as r:
        with pytest.raises(ValueError):
            r.take_events()


def test_hcache_events_carry_whole_hashes(drv):
    with kvslab.Pool(drv, "tiny", 16, 4096) as p:
        hc = _kvslab.HCache(p, events=True)
        blocks = hc.alloc(2)
        h = [bytes([i]) * 32 for i in (1, 2)]
        hc.cache(blocks, h, None, 7)
        ev = hc.take_events()
        assert len(ev) == 1
        typ, hashes, parent, toks, bs, extra = ev[0]
        assert typ == kvslab.KV_STORED and hashes == h and parent is None
        assert bs == 16 and extra == 7
        hc.free(blocks)
        assert hc.evict(2) == 2
        ev = hc.take_events()
        assert {e[0] for e in ev} == {kvslab.KV_REMOVED}
        assert sorted(x for e in ev for x in e[1]) == sorted(h)
        hc.close()


def test_event_tuples_are_not_leaked(drv):
    with kvslab.Pool(drv, "tiny", 1, 1 << 16) as p, kvslab.Radix(p, events=True) as r:
        gc.collect()
        n0 = len(gc.get_objects())
        for i in range(200):
            key = np.arange(i * 10, i * 10 + 10, dtype=np.int32)
            r.insert(key, p.alloc(10))
            ev = r.take_events()
            assert len(ev) == 10 and sys.getrefcount(ev) == 2
        del ev
        gc.collect()
        assert len(gc.get_objects()) - n0 < 50


def _settle(h):
    # A deadline, not a count of polls: the copies run on the driver's queue.
    end = time.monotonic() + 120
    while time.monotonic() < end:
        h.poll()
        u = h.usage()
        if u["backups_pending"] == 0 and u["loads_pending"] == 0:
            return
        time.sleep(0.0005)
    raise AssertionError("copies never completed in 120 s")


@pytest.mark.parametrize("threaded", [False, True])
def test_hiradix_device_host_round_trip(drv, threaded):
    with kvslab.Pool(drv, "llama-3-8b", 16, 4096) as p, \
            kvslab.HiRadix(p, host_ratio=2, threaded=threaded, events=True) as h:
        key = np.arange(1000, 1064, dtype=np.int32)
        locs = p.alloc(64)
        # Bytes that must survive the trip to the host and back.
        for i, loc in enumerate(locs):
            p.kv_array(0, "k")[loc] = i
        assert h.insert(key, locs)[0] == 0
        _settle(h)
        assert h.usage()["host_tokens"] == 64
        assert h.evict_device(64) == 64
        assert h.usage()["device_tokens"] == 0
        dlen, host_hit, last_dev, last_node, last_host = h.match(key)
        assert (dlen, host_hit) == (0, 64)
        assert last_dev == h.root() and last_node == last_host
        assert h.load_back(last_node) == 64
        _settle(h)
        out = kvslab.int32_array(64)
        dlen, host_hit = h.match(key, out)[:2]
        assert (dlen, host_hit) == (64, 0)
        k = p.kv_array(0, "k")
        assert [float(k[loc][0][0]) for loc in out] == [float(np.float16(i)) for i in range(64)]
        del k
        media = {e[4] for e in h.take_events()}
        assert media == {kvslab.MEDIUM_GPU, kvslab.MEDIUM_CPU}
        h.validate()


def test_hiradix_store_serves_a_second_cache(drv, tmp_path):
    uri = "file://%s" % tmp_path
    key = np.arange(5000, 5256, dtype=np.int32)
    with kvslab.Pool(drv, "llama-3-8b", 16, 4096) as p:
        with kvslab.HiRadix(p, storage=uri, prefetch_policy="wait_complete",
                            prefetch_threshold=16) as h:
            h.insert(key, p.alloc(256))
            _settle(h)
            h.l3_wait()
        # A new cache over the same store finds the pages there.
        with kvslab.HiRadix(p, storage=uri, prefetch_policy="wait_complete",
                            prefetch_threshold=16) as h2:
            assert h2.match(key)[:2] == (0, 0)
            assert h2.prefetch(1, key) == 256
            end = time.monotonic() + 120
            while time.monotonic() < end:
                done, tokens = h2.prefetch_done(1)
                if done:
                    break
                time.sleep(0.0005)
            assert (done, tokens) == (True, 256)
            assert h2.match(key)[1] == 256  # now on the host


def test_hiradix_argument_errors(drv):
    with kvslab.Pool(drv, "tiny", 1, 4096) as p:
        with pytest.raises(ValueError):
            kvslab.HiRadix(p, write_policy="write_sometimes")
        with pytest.raises(kvslab.Error) as e:
            kvslab.HiRadix(p, storage="ftp://nowhere")
        assert e.value.errno == errno.EINVAL
        with kvslab.HiRadix(p) as h:
            with pytest.raises(ValueError):
                h.insert([1, 2, 3], [1, 2])
            with pytest.raises(ValueError):
                h.evict_device(-1)
        with pytest.raises(ValueError):
            h.match([1])
