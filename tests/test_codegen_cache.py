"""Content-hash cache: atomic entries, rebuilt when corrupt (with a warning), two processes building the same
entry at once."""

import hashlib
import multiprocessing as mp
import os

import numpy as np
import pytest

from symbolic_tpde.codegen import c_backend, compile as cmod
from symbolic_tpde.codegen.cache import Cache, CacheCorruptWarning, make_key
from symbolic_tpde.codegen.compile import compile_system, system_key

from test_codegen_numpy import softmax_fixture


def test_key_depends_on_content_backend_and_flags():
    k = make_key("abc", "numpy")
    assert k == make_key("abc", "numpy")
    assert len({k, make_key("abd", "numpy"), make_key("abc", "c"), make_key("abc", "numpy", ("-O3",))}) == 4
    assert system_key(softmax_fixture(2)) == system_key(softmax_fixture(2))
    assert system_key(softmax_fixture(2)) != system_key(softmax_fixture(3))


def test_text_roundtrip_and_corruption(tmp_path):
    cache = Cache(tmp_path)
    cache.put_text("k", ".py", "x = 1\n")
    assert cache.get_text("k", ".py") == "x = 1\n"
    p = cache.path("k", ".py")
    p.write_bytes(p.read_bytes()[:-2])  # truncate
    with pytest.warns(CacheCorruptWarning):
        assert cache.get_text("k", ".py") is None
    assert not list(tmp_path.glob(".tmp-*"))  # no temporary files left behind


def test_corrupt_numpy_source_is_rebuilt(tmp_path):
    cache = Cache(tmp_path)
    system = softmax_fixture(2)
    c1 = compile_system(system, "numpy", cache=cache)
    (path,) = [p for p in tmp_path.glob("*.py")]
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x5A  # garble one byte in the middle of the generated code
    path.write_bytes(bytes(raw))
    cmod._MEMO.clear()
    with pytest.warns(CacheCorruptWarning):
        c2 = compile_system(system, "numpy", cache=cache)
    assert c2.source == c1.source
    y, p = np.arange(5.0), np.linspace(-1, 1, 8)
    assert np.array_equal(c1.f(0.0, y, p), c2.f(0.0, y, p))
    assert Cache(tmp_path).get_text(path.stem, ".py") is not None  # rewritten, valid again


@pytest.mark.skipif(c_backend.availability() is not None, reason="no C compiler")
def test_corrupt_shared_object_is_rebuilt(tmp_path):
    cache = Cache(tmp_path)
    csrc = c_backend.c_source(softmax_fixture(2), "rhs")
    c_backend.build_module(csrc, "rhs", cache)
    (so,) = list(tmp_path.glob("*.so"))
    # truncated shared object, written as a new file: truncating in place would corrupt the copy this process
    # has already mapped (a bus error), which no cache can protect against
    bad = tmp_path / "bad.bin"
    bad.write_bytes(so.read_bytes()[:100])
    os.replace(bad, so)
    with pytest.warns(CacheCorruptWarning):
        mod = c_backend.build_module(csrc, "rhs", cache)
    out = np.empty(5)
    mod.lib.tpde_rhs(0.0, mod.ffi.from_buffer("double[]", np.ones(5)),
                     mod.ffi.from_buffer("double[]", np.ones(8)), mod.ffi.from_buffer("double[]", out))
    assert np.all(np.isfinite(out))


def _build_in_process(root, barrier, queue):
    from symbolic_tpde.codegen import c_backend
    from symbolic_tpde.codegen.cache import Cache

    from test_codegen_numpy import softmax_fixture

    system = softmax_fixture(2)
    csrc = c_backend.c_source(system, "rhs")
    barrier.wait(timeout=60)
    mod = c_backend.build_module(csrc, "rhs", Cache(root))
    so_path = mod.__file__
    out = np.empty(system.n_states)
    ffi = mod.ffi
    mod.lib.tpde_rhs(0.0, ffi.from_buffer("double[]", np.linspace(0, 1, 5)),
                     ffi.from_buffer("double[]", np.linspace(-1, 1, 8)), ffi.from_buffer("double[]", out))
    queue.put((so_path, hashlib.sha256(open(so_path, "rb").read()).hexdigest(), out.tolist()))


@pytest.mark.skipif(c_backend.availability() is not None, reason="no C compiler")
def test_two_processes_build_same_entry(tmp_path):
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    queue = ctx.Queue()
    procs = [ctx.Process(target=_build_in_process, args=(str(tmp_path), barrier, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert results[0][0] == results[1][0]          # same artefact path
    assert results[0][1] == results[1][1]          # same bytes
    assert results[0][2] == results[1][2]          # same numbers
    assert not list(tmp_path.glob(".tmp-*"))
