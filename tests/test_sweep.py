"""Phase-diagram sweep: known phases on the grid, local pool = serial, Dask LocalCluster (loopback) = local."""

import numpy as np
import pytest

from symbolic_tpde.analysis.sweep import PHASES, SweepSpec, run_sweep, save_sweep


def expected_phase(s1, s2):
    """V = I (README Mathematics §4): any positive eigenvalue of A + Aᵀ -> blow-up; both negative -> collapse; one zero
    and one negative -> rank 1; both zero -> Σ constant (full rank)."""
    if max(s1, s2) > 0:
        return "blow-up"
    if s1 == 0 and s2 == 0:
        return "full rank"
    if s1 == 0 or s2 == 0:
        return "low rank"
    return "collapse"


SPEC = SweepSpec(n=3, smin=-1.0, smax=1.0, K=3, T=1e2, seed=5)


def test_sweep_phases_and_outputs(tmp_path):
    res = run_sweep(SPEC)
    for (s1, s2), ph, c in zip(res.points, res.phase, res.counts):
        assert PHASES[ph] == expected_phase(s1, s2)
        assert c.sum() == SPEC.K
    bt = res.blowup_time[res.phase == PHASES.index("blow-up")]
    assert np.all(np.isfinite(bt)) and np.all(bt > 0)
    paths = save_sweep(res, tmp_path / "sw")
    assert all(p.exists() for p in paths)
    data = np.load(paths[0])
    assert np.array_equal(data["phase"], res.phase)
    assert len(paths[1].read_text().splitlines()) == 1 + SPEC.n**2


@pytest.mark.slow
def test_local_pool_equals_serial():
    a = run_sweep(SPEC)
    b = run_sweep(SPEC, workers=2)
    assert np.array_equal(a.counts, b.counts)
    assert np.array_equal(np.isnan(a.blowup_time), np.isnan(b.blowup_time))
    assert np.allclose(a.blowup_time, b.blowup_time, equal_nan=True, rtol=0, atol=0)


@pytest.mark.slow
def test_dask_localcluster_equals_local():
    distributed = pytest.importorskip("dask.distributed")
    local = run_sweep(SPEC)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        dist = run_sweep(SPEC, scheduler=cluster.scheduler_address)
    assert np.array_equal(local.counts, dist.counts)
    assert np.allclose(local.blowup_time, dist.blowup_time, equal_nan=True, rtol=0, atol=0)
