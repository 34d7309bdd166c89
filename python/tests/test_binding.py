# SPDX-License-Identifier: MIT
"""The binding's manners: handles owned and closed, errors as OSError with
the library's errno, sizes as strings, stats as dicts, buffers without
copies, reference counts of what comes back."""
import array
import errno
import gc
import sys

import numpy as np
import pytest

import kvslab


def test_import_and_version():
    assert kvslab.version().count(".") == 2
    assert issubclass(kvslab.Error, OSError)


@pytest.mark.parametrize("text,want", [
    ("8G", 8 << 30), ("1.5G", 3 << 29), ("512MiB", 512 << 20), ("64k", 64 << 10),
    ("4096", 4096), (123, 123), ("2 GB", 2 << 30),
])
def test_parse_size(text, want):
    assert kvslab.parse_size(text) == want


@pytest.mark.parametrize("bad", ["", "G", "8X", "-1G", "nanG", "1.2.3G"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        kvslab.parse_size(bad)
    with pytest.raises(TypeError):
        kvslab.parse_size(True)


def test_driver_context_and_close():
    with kvslab.Driver("host", granularity="64K") as d:
        assert d.name == "host"
        assert d.granularity == 64 << 10
        assert not d.closed
        st = d.stats()
        assert isinstance(st, dict) and "map_calls" in st
    assert d.closed
    d.close()  # idempotent
    with pytest.raises(ValueError):
        d.stats()


def test_driver_error_carries_errno():
    with pytest.raises(kvslab.Error) as ei:
        kvslab.Driver("no-such-backend")
    assert ei.value.errno in (errno.ENOENT, errno.ENODEV, errno.EINVAL)
    assert "kvs_drv_open" in str(ei.value)


def test_pool_alloc_free_and_errors():
    with kvslab.Driver("host", granularity="64K") as d, \
            kvslab.Pool(d, "tiny", page_size=1, max_tokens=4096) as p:
        cap = p.capacity
        assert cap >= 4096 and p.available() == cap
        locs = p.alloc(100)
        assert locs.dtype == np.int32 and len(set(locs.tolist())) == 100
        assert sys.getrefcount(locs) == 2  # ours and the call's argument
        assert p.available() == cap - 100
        # All or nothing: too many changes nothing.
        with pytest.raises(kvslab.Error) as ei:
            p.alloc(cap)
        assert ei.value.errno == errno.ENOMEM
        assert p.available() == cap - 100
        # Any int32 buffer, or a list, frees.
        p.free(locs[:50])
        p.free(array.array("i", locs[50:90].tolist()))
        p.free(locs[90:].tolist())
        assert p.available() == cap
        with pytest.raises(kvslab.Error) as ei:
            p.free([0])  # not allocated
        assert ei.value.errno == errno.EINVAL
        with pytest.raises(TypeError):
            p.free(np.zeros(4, dtype=np.int16))  # wrong width: no silent cast
        st = p.stats()
        assert isinstance(st, dict) and st["objects"] == 0
    with pytest.raises(ValueError):
        p.available()


def test_pool_keeps_driver_alive():
    d = kvslab.Driver("host", granularity="64K")
    p = kvslab.Pool(d, "tiny", max_tokens=1024)
    rc = sys.getrefcount(d)
    del d
    gc.collect()
    assert p.driver.name == "host"  # the pool holds its driver
    assert sys.getrefcount(p.driver) == rc - 1 + 1
    p.close()


def test_radix_over_pool_frees_into_it():
    with kvslab.Driver("host", granularity="64K") as d, \
            kvslab.Pool(d, "tiny", page_size=1, max_tokens=4096) as p, \
            kvslab.Radix(p) as r:
        cap = p.capacity
        key = list(range(100, 140))
        locs = p.alloc(40)
        prefix, node = r.insert(key, locs)
        assert prefix == 0 and node
        out = kvslab.int32_array(50)
        n, last = r.match(key + [1, 2, 3], out)
        assert n == 40 and last == node
        assert out[:40].tolist() == locs.tolist()
        assert r.tokens() == 40 and r.evictable() == 40 and r.protected() == 0
        r.lock(node)
        assert r.protected() == 40
        got, freed = r.evict_locations(40)
        assert got == 0 and len(freed) == 0  # locked: nothing to evict
        r.unlock(node)
        got, freed = r.evict_locations(40)
        assert got == 40 and len(freed) == 0  # the pool took them back
        assert p.available() == cap
        r.validate()
        st = r.stats()
        assert isinstance(st, dict)


def test_radix_without_pool_returns_evicted():
    with kvslab.Radix(None, page_size=1) as r:
        r.insert([1, 2, 3, 4], [10, 11, 12, 13])
        r.insert([1, 2, 9], [10, 11, 20])
        got, freed = r.evict_locations(100)
        assert got == 5
        assert sorted(freed.tolist()) == [10, 11, 12, 13, 20]
        assert r.tokens() == 0


def test_radix_argument_errors():
    with kvslab.Radix(None) as r:
        with pytest.raises(ValueError):
            r.insert([1, 2, 3], [1])  # fewer locations than tokens
        with pytest.raises(OverflowError):
            r.insert([1 << 40], [1])
        with pytest.raises(TypeError):
            r.match(object())
        with pytest.raises(TypeError):
            kvslab.Radix(pool=42)


def test_gil_released_threads_share_a_cache():
    import threading
    with kvslab.Radix(None) as r:
        errs = []

        def work(base):
            try:
                for i in range(200):
                    k = [base, i, i + 1]
                    loc = base * 100000 + i * 3
                    r.insert(k, [loc, loc + 1, loc + 2])
                    r.match(k)
            except Exception as e:  # pragma: no cover - reported below
                errs.append(e)
        ts = [threading.Thread(target=work, args=(b,)) for b in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs
        r.validate()
        assert r.tokens() == 4 * (1 + 200 * 2)  # each base shared by its keys


def test_reqtab_view_without_copy():
    with kvslab.Driver("host", granularity="64K") as d:
        t = kvslab.Reqtab(d, 4, 32)
        view = t.table()
        assert view.shape == (4, 32) and view.dtype == np.int32
        assert not view.flags.writeable
        slots = t.alloc(2)
        assert slots == [0, 1] and t.available() == 2
        assert t.alloc(3) is None  # short: None, nothing taken
        t.write(slots[1], 3, [7, 8, 9])
        assert view[1, 3:6].tolist() == [7, 8, 9]  # the same memory
        with pytest.raises(kvslab.Error):
            t.write(2, 0, [1])  # a free slot
        with pytest.raises(kvslab.Error) as ei:
            t.write(slots[0], 31, [1, 2])  # past max_context
        assert ei.value.errno == errno.ERANGE
        with pytest.raises(BufferError):
            t.close()  # a view is alive
        t.sync()
        del view
        t.close()
        with pytest.raises(ValueError):
            t.alloc(1)


def test_pool_slab_settings_and_give_back():
    with kvslab.Driver("host", granularity="64K") as d:
        # A static pool maps everything at create and never gives back.
        with kvslab.Pool(d, "tiny", 1, 1 << 20, slab_flags=kvslab.SLAB_F_STATIC) as p:
            st = p.stats()
            assert st["bytes_mapped"] >= p.capacity * 2  # tiny: 2 bytes a token
            mapped = st["bytes_mapped"]
            assert p.reclaim() == 0
            p.shrink()
            assert p.stats()["bytes_mapped"] == mapped
        # A slab pool keeps max_empty empty slabs; shrink() gives them back.
        with kvslab.Pool(d, "tiny", 1, 1 << 20, min_empty=0, max_empty=64,
                         decay_ms=0) as p:
            locs = p.alloc(200000)
            p.free(locs)
            before = p.stats()["bytes_mapped"]
            assert before > 0 and p.stats()["slabs_empty"] > 0
            assert p.shrink() is None
            assert p.stats()["bytes_mapped"] < before
        with pytest.raises(kvslab.Error):
            kvslab.Pool(d, "tiny", 1, 1 << 20, min_empty=8, max_empty=2)


def test_owner_close_refuses_while_dependents_are_open():
    d = kvslab.Driver("host")
    p = kvslab.Pool(d, "tiny", 1, 4096)
    t = kvslab.Reqtab(d, 2, 8)
    r = kvslab.Radix(p)
    for owner, errs in ((d, "pools or request tables"), (p, "caches")):
        with pytest.raises(kvslab.Error) as e:
            owner.close()
        assert e.value.errno == errno.EBUSY and errs in str(e.value)
    assert not d.closed and p.available() > 0  # nothing changed
    r.close()
    p.close()           # its cache is closed now
    with pytest.raises(kvslab.Error):
        d.close()       # the table is still open
    t.close()
    d.close()
    assert d.closed
    # Dependents collected without close() release their owner too.
    d = kvslab.Driver("host")
    p = kvslab.Pool(d, "tiny", 1, 4096)
    kvslab.Radix(p)     # dropped at once
    del p
    gc.collect()
    d.close()


def test_int64_buffers_cross_converted():
    """SGLang's indices are int64: taken and given back as int64 buffers,
    range-checked, the library seeing int32."""
    with kvslab.Driver("host") as d, kvslab.Pool(d, "tiny", 1, 4096) as p, \
            kvslab.Radix(p) as r:
        locs = np.zeros(8, dtype=np.int64)
        p.alloc_into(locs)
        assert len(set(locs.tolist())) == 8 and locs.min() >= 0
        key = np.arange(50, 58, dtype=np.int64)
        assert r.insert(key, locs)[0] == 0
        out = np.full(8, -1, dtype=np.int64)
        got, node = r.match(key, out)
        assert got == 8 and out.tolist() == locs.tolist()
        with pytest.raises(OverflowError):
            r.match(np.array([1 << 40], dtype=np.int64))
        with pytest.raises(OverflowError):
            p.free(np.array([-1 << 33], dtype=np.int64))
        with pytest.raises(TypeError):
            p.free(np.zeros(2, dtype=np.int16))
        assert p.available() == p.capacity - 8  # nothing freed by the refusals
