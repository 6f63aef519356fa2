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


def test_shared_sample_makes_the_vi_blowup_map_symmetric():
    """Softmax, V = I, with a skew part: dΣ/dt = Σ(A + Aᵀ)Σ does not see the skew part and the Σ₀ sample is
    closed under the swap P, so T*(s₁, s₂) = T*(s₂, s₁) (analysis/sweep.py docstring) up to the reported
    error bounds of the blow-up times."""
    from symbolic_tpde.analysis.sweep import initial_sample

    spec = SweepSpec(n=3, smin=-0.5, smax=1.0, K=2, T=50.0, seed=3, skew=0.4)
    assert initial_sample(spec).shape == (4, 2, 2)
    res = run_sweep(spec)
    B = res.blowup_time.reshape(3, 3)
    E = np.nan_to_num(res.blowup_time_error.reshape(3, 3))
    assert np.array_equal(np.isnan(B), np.isnan(B.T))
    ok = ~np.isnan(B)
    assert ok.sum() >= 5
    assert np.all(np.abs(B - B.T)[ok] <= (E + E.T)[ok] + 1e-12)


def test_head_for_l2_has_the_same_cross_term():
    from symbolic_tpde.analysis.sweep import head_for

    A = np.array([[0.2, -0.3], [0.5, -0.1]])
    h = head_for("l2", A, np.eye(2))
    p = h.params
    assert np.allclose(2 / p["tau"] * p["K"].T @ p["Q"], A, rtol=0, atol=1e-15)   # README Math §3


SPEC = SweepSpec(n=3, smin=-1.0, smax=1.0, K=3, T=1e2, seed=5)


def test_sweep_phases_and_outputs(tmp_path):
    res = run_sweep(SPEC)
    for (s1, s2), ph, c in zip(res.points, res.phase, res.counts):
        assert PHASES[ph] == expected_phase(s1, s2)
        assert c.sum() == 2 * SPEC.K   # the shared sample, closed under the swap (symmetrise)
    bt = res.blowup_time[res.phase == PHASES.index("blow-up")]
    assert np.all(np.isfinite(bt)) and np.all(bt > 0)
    paths = save_sweep(res, tmp_path / "sw")
    assert all(p.exists() for p in paths)
    data = np.load(paths[0])
    assert np.array_equal(data["phase"], res.phase)
    assert len([ln for ln in paths[1].read_text().splitlines() if not ln.startswith('#')]) == 1 + SPEC.n**2


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
