"""The one processes × threads policy (symbolic_tpde/numerics/threads.py, issue 12 item 5)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import pytest

from symbolic_tpde.numerics import threads as T


@pytest.mark.parametrize("tasks,requested", [(None, None), (1, None), (100, None), (100, 1), (100, 64), (3, 2)])
def test_pool_plan_never_oversubscribes(tasks, requested):
    cores = T.usable_cores()
    w, t = T.pool_plan(tasks, requested)
    assert 1 <= w <= cores and t >= 1 and w * t <= cores
    if requested is not None:
        assert w <= requested
    if tasks is not None:
        assert w <= tasks


def test_limit_threads_bounds_kernels_and_restores(monkeypatch):
    from symbolic_tpde.numerics.particles import fused

    monkeypatch.setattr(T, "usable_cores", lambda: 8)
    assert fused.default_threads(1 << 30) == 8
    with T.limit_threads(2):
        assert fused.default_threads(1 << 30) == 2 and T.kernel_threads() == 2
        with T.limit_threads(4):  # nested: the tighter limit stays
            assert T.kernel_threads() == 2
    assert T.kernel_threads() == 8
    assert fused.default_threads(10) == 1  # small calls stay in the calling thread


def _worker_report(_):
    from threadpoolctl import threadpool_info

    return T.kernel_threads(), sorted({p["num_threads"] for p in threadpool_info()})


def test_worker_initializer_limits_each_worker():
    pytest.importorskip("threadpoolctl")
    with ProcessPoolExecutor(max_workers=2, initializer=T.worker_initializer, initargs=(1,)) as ex:
        for kern, blas in ex.map(_worker_report, range(2)):
            assert kern == 1 and all(n == 1 for n in blas)
