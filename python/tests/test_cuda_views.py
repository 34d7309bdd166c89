# SPDX-License-Identifier: MIT
"""The views on a real GPU: a pool on the cuda driver seen by torch through
DLPack and __cuda_array_interface__, bytes checked both ways, and the request
table's device copy.  Skipped, saying why, without a GPU, torch with CUDA,
or a cuda driver that opens (the libcuda test double is not a GPU for torch)."""
import gc

import pytest

import kvslab

torch = pytest.importorskip("torch", reason="torch (python3-torch) not installed")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device: the GPU views are not tested", allow_module_level=True)


@pytest.fixture
def cuda():
    try:
        d = kvslab.Driver("cuda")
    except kvslab.Error as e:
        pytest.skip("the cuda driver does not open: %s" % e)
    with d:
        yield d


def test_kv_tensor_is_the_pools_memory(cuda):
    with kvslab.Pool(cuda, "llama-3-8b", 16, 65536) as p:
        locs = p.alloc(64)
        t = p.kv_tensor(5, "v", "bfloat16")
        assert t.is_cuda and t.dtype == torch.bfloat16
        assert tuple(t.shape) == (p.capacity, 8, 128)
        idx = torch.as_tensor(locs.astype("int64"), device="cuda")
        src = torch.arange(64 * 8 * 128, device="cuda", dtype=torch.float32)
        src = src.reshape(64, 8, 128).to(torch.bfloat16)
        t[idx] = src  # a kernel writes the rows the pool allocated
        torch.cuda.synchronize()
        # The same bytes through the CUDA array interface (float16 view of
        # the same memory: compare raw 16-bit patterns).
        raw = torch.as_tensor(p.kv_view(5, "v", "int16"), device="cuda")
        assert torch.equal(raw[idx], src.view(torch.int16))
        # Another layer's buffer is elsewhere.
        assert p.kv_view(4, "v").ptr != p.kv_view(5, "v").ptr
        del t, raw
        gc.collect()
        p.free(locs)


def test_reqtab_device_tensor(cuda):
    with kvslab.Reqtab(cuda, 8, 256) as r:
        slot = r.alloc(1)[0]
        r.write(slot, 10, list(range(100, 120)))
        r.sync()
        dt = r.device_tensor()
        assert dt.is_cuda and dt.dtype == torch.int32 and tuple(dt.shape) == (8, 256)
        assert dt[slot, 10:30].tolist() == list(range(100, 120))
        del dt
        gc.collect()
