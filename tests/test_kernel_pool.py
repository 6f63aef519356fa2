"""The particle kernels' persistent thread pool (templates/tpde_threads.h, ``fused.thread_pool``): the same bits
at every thread count, with and without the pool and across repeated calls; a forked child (pytest, the fork
start method of multiprocessing) runs the kernels on a pool of its own; two Python threads calling at once get
correct bits; every kernel library uses the one pool; idle workers block after their spin; the environment
variables.  The same for the row-block threads of the blocked path (``attend_numpy``, with the compiled row
pass when available: the large-dimension path), whose executor is kept for the process.  The attend calls are small (a few ms); no timing is asserted except that an idle process burns
no core (process CPU time over a sleep)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from symbolic_tpde.numerics.particles import fused, fused_flash, fused_rows
from symbolic_tpde.numerics.particles.attend import attend_numpy

HAVE = fused.available() is None and fused.thread_pool() is not None
needs_pool = pytest.mark.skipif(not HAVE, reason=str(fused.available()))
FLASH = HAVE and fused.simd_compiled(np.float64) in fused_flash.LANES
KW = dict(mode="softmax", shift=0.0, prefix=None, sink_logit=None, sink_value=None)


def case(seed, n, d, dt):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((n, d)) / np.sqrt(d)).astype(dt)
    k = rng.standard_normal((n, d)).astype(dt)
    v = rng.standard_normal((n, d)).astype(dt)
    return q, k, v, rng.uniform(-1, 1, n).astype(dt)


def kernels():
    """(name, f(q, k, v, bias, threads)): the fused kernel (d = 4) and, on vector builds, the flash kernel."""
    out = [("fused", lambda q, k, v, b, t: fused.attend_fused(q, k, v, key_bias=b, threads=t, **KW), 4)]
    if FLASH:
        out.append(("flash", lambda q, k, v, b, t: fused_flash.attend_flash(q, k, v, key_bias=b, threads=t, **KW), 24))
    return out


@pytest.fixture
def pool_settings():
    saved = fused.thread_pool()
    yield
    fused.thread_pool(pooled=saved["pooled"], spin_us=saved["spin_us"])


@needs_pool
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_same_bits_for_every_thread_count_pooled_or_not(dt, pool_settings):
    for name, f, d in kernels():
        q, k, v, b = case(1, 700, d, dt)
        ref = f(q, k, v, b, 1)
        # pooled, per call, pooled with workers that never spin (every call then creates its threads and
        # wakes the pool), pooled again
        for pooled, spin in ((True, 2000), (False, 2000), (True, 0), (True, 2000)):
            fused.thread_pool(pooled=pooled, spin_us=spin)
            for threads in (2, 3, 1, 2, 3, 2):
                assert np.array_equal(f(q, k, v, b, threads), ref), (name, pooled, spin, threads)
                assert fused.STATE.last_threads == threads, (name, pooled, spin, threads)
    info = fused.thread_pool(pooled=True)
    assert info["pooled"] and info["workers"] >= 2  # the pooled calls of 3 threads grew it to 2 workers


def _child(name, seed, threads):
    """In a forked child: the kernel's result and the child's pool before and after the call."""
    f, d = next((f, d) for n, f, d in kernels() if n == name)
    before = fused.thread_pool()["workers"]
    q, k, v, b = case(seed, 700, d, np.float32)
    out = f(q, k, v, b, threads)
    return before, fused.thread_pool()["workers"], out


@needs_pool
@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_forked_child_has_its_own_pool_and_the_same_bits(pool_settings):
    fused.thread_pool(pooled=True)
    ctx = multiprocessing.get_context("fork")
    for name, f, d in kernels():
        q, k, v, b = case(5, 700, d, np.float32)
        ref = f(q, k, v, b, 1)
        assert np.array_equal(f(q, k, v, b, 2), ref)  # the parent's worker is spinning now
        assert fused.thread_pool()["workers"] >= 1
        with ctx.Pool(1) as pool:  # a child that waited on the parent's workers would hang: the timeout fails it
            before, after, got = pool.apply_async(_child, (name, 5, 2)).get(timeout=120)
        assert before == 0 and after == 1, (name, before, after)
        assert np.array_equal(got, ref), name
        assert np.array_equal(f(q, k, v, b, 2), ref)  # the parent's pool still works


@needs_pool
def test_two_python_threads_calling_at_once(pool_settings):
    """Both threads in kernels at once (a pool held by one: the other creates threads per call); also one
    thread on each kernel library, which share the pool."""
    fused.thread_pool(pooled=True)
    ks = kernels()
    picks = [ks[-1], ks[-1]] + ([ks[0]] if len(ks) > 1 else [])  # two on the same library, one on another
    jobs = []
    for i, (name, f, d) in enumerate(picks):
        q, k, v, b = case(10 + i, 600, d, np.float64)
        jobs.append((f, (q, k, v, b), f(q, k, v, b, 1)))
    bad, start = [], threading.Barrier(len(jobs))

    def loop(f, args, ref):
        start.wait()
        for _ in range(25):
            if not np.array_equal(f(*args, 2), ref):
                bad.append(f)

    ts = [threading.Thread(target=loop, args=job) for job in jobs]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in ts) and not bad


@needs_pool
@pytest.mark.skipif(not FLASH, reason="no flash kernel in this build")
def test_every_kernel_library_uses_one_pool(pool_settings):
    q, k, v, b = case(3, 300, 24, np.float64)
    fused_flash.attend_flash(q, k, v, key_bias=b, threads=2, **KW)
    libs = [m.lib for m in fused.STATE.modules.values() if hasattr(m.lib, "tpde_pool_info")]
    assert len(libs) >= 2  # the probe (fused kernel) and the flash variant
    fused.thread_pool(spin_us=1234)
    assert all(lib.tpde_pool_info(1) == 1234 for lib in libs)  # each answers with the one pool's setting


@needs_pool
def test_idle_workers_block_after_their_spin(pool_settings):
    fused.thread_pool(pooled=True, spin_us=5000)
    name, f, d = kernels()[-1]
    q, k, v, b = case(4, 700, d, np.float64)
    for _ in range(3):
        f(q, k, v, b, 2)
    time.sleep(0.05)  # 10 spins long: every worker is blocked by now
    c0, t0 = time.process_time(), time.perf_counter()
    time.sleep(0.3)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert cpu < 0.1 * wall, (cpu, wall)  # a worker still spinning would burn ~wall


@needs_pool
def test_environment_variables_set_the_pool():
    code = "from symbolic_tpde.numerics.particles import fused; print(fused.thread_pool())"
    env = {**os.environ, "TPDE_POOL_SPIN_US": "17", "TPDE_POOL": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "'pooled': False" in out.stdout and "'spin_us': 17" in out.stdout, out.stdout + out.stderr
    env = {**os.environ, "TPDE_POOL_SPIN_US": "2ms"}
    env.pop("TPDE_POOL", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "'pooled': True" in out.stdout and "'spin_us': 2000" in out.stdout, out.stdout + out.stderr
    assert "TPDE_POOL_SPIN_US='2ms'" in out.stderr  # the warning names the variable and the default used


def rows_call(q, k, v, b, threads):
    """The large-dimension path: BLAS logits and the compiled row pass (numpy's passes without a compiler)."""
    rp = fused_rows.row_pass("softmax", q.dtype, key_bias=b, shift=0.0, prefix=None, sink_logit=None,
                             sink_value=None)
    return attend_numpy(q, k, v, key_bias=b, block=32, threads=threads, rows=rp)


def _rows_child(seed, threads):
    q, k, v, b = case(seed, 400, 40, np.float64)
    return rows_call(q, k, v, b, threads)


def test_row_block_threads_same_bits_after_fork_and_concurrently():
    """Blocks of 32 rows (13 blocks), threads 1, 2, 3: the same bits, repeated; a forked child (whose copy of the
    executor has no threads: without a new one its blocks would never run, and the timeout fails the test);
    two Python threads at once."""
    q, k, v, b = case(21, 400, 40, np.float64)
    ref = rows_call(q, k, v, b, 1)
    for threads in (2, 3, 2, 1, 3):
        assert np.array_equal(rows_call(q, k, v, b, threads), ref), threads
    if sys.platform == "linux":
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert np.array_equal(pool.apply_async(_rows_child, (21, 2)).get(timeout=120), ref)
    bad, start = [], threading.Barrier(2)

    def loop():
        start.wait()
        for _ in range(10):
            if not np.array_equal(rows_call(q, k, v, b, 2), ref):
                bad.append(1)

    ts = [threading.Thread(target=loop) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in ts) and not bad
