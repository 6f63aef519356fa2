"""Butcher tableaus run by the one batched RK routine (symbolic_tpde.numerics.ode.rk): orders, dense output,
per-row step control, dtype.

Test problem with a closed form: y' = y cos t, y(t) = y0 exp(sin t) (smooth, non-autonomous, so the c_i of
each tableau matter)."""

import numpy as np
import pytest

from symbolic_tpde.numerics.ode import rk

T = 2.0
Y0 = np.array([[1.0], [0.5], [2.0]])


def F(t, Y):
    return Y * np.cos(t)[:, None]


def exact(t):
    return Y0 * np.exp(np.sin(t))


def slope(steps, errs):
    return np.polyfit(np.log(1.0 / np.asarray(steps)), np.log(errs), 1)[0]


@pytest.mark.parametrize("method,order,steps", [("euler", 1, (100, 200, 400)), ("rk4", 4, (10, 20, 40)),
                                                ("bs32", 3, (20, 40, 80)), ("dopri5", 5, (5, 10, 20))])
def test_fixed_step_convergence_order(method, order, steps):
    """Global error O(h^p): the log-log slope is p up to the next term of the error expansion, O(h) relative
    (measured 1.00, 4.03, 3.05, 5.3); ±0.35 leaves room for that pre-asymptotic term."""
    errs = [np.abs(rk.rk_solve(F, 0.0, Y0, T, method=method, steps=s).y - exact(T)).max() for s in steps]
    assert abs(slope(steps, errs) - order) < 0.35, errs
    assert rk.tableau(method).order == order


def test_dopri5_dense_output_is_its_own_continuous_extension():
    """Shampine's interpolant: local error O(h^5) inside each step, so interior errors fall like h^5
    (measured slope 5.8 on 5/10/20 steps), much faster than a Hermite cubic (local O(h^4): RK4's dense
    output, slope ~4); and at rtol 1e-10 the interior error is of the order of the tolerance (measured 2.5e-9:
    the interpolant's error constant times the accepted step, with |y| ≤ 2e)."""
    te = np.linspace(0.0, T, 41)[1:-1]
    ref = Y0[None] * np.exp(np.sin(te))[:, None, None]
    errs = {}
    for m in ("dopri5", "rk4"):
        errs[m] = [np.abs(rk.rk_solve(F, 0.0, Y0, T, method=m, steps=s, t_eval=te).ys - ref).max()
                   for s in (5, 10, 20)]
    assert slope((5, 10, 20), errs["dopri5"]) > 4.5, errs
    assert errs["dopri5"][-1] < 1e-2 * errs["rk4"][-1]
    r = rk.rk_solve(F, 0.0, Y0, T, rtol=1e-10, atol=1e-12, t_eval=te)
    assert np.abs(r.ys - ref).max() < 1e-8
    # θ = 1 reproduces the step end (b_i(1) = b_i), up to round-off of the polynomial evaluation
    P1 = rk.DOPRI5.P.sum(axis=1)
    assert np.abs(P1 - rk.DOPRI5.b).max() < 1e-15


def test_batch_rows_equal_single_row_runs():
    """Each row has its own step size and error control: a batch run equals the rows run alone (same
    arithmetic per row, so agreement to a few ulps; step counts identical) and the step counts differ
    across rows (stiffness differs with the rate k_i)."""
    k = np.array([0.5, 3.0, 12.0])
    G = lambda t, Y, kk: -kk[:, None] * Y * (1 + 0.5 * np.sin(t)[:, None])  # noqa: E731
    Y = np.ones((3, 2)) * [[1.0, 2.0]]
    res = rk.rk_solve(G, 0.0, Y, 3.0, rtol=1e-9, atol=1e-12, args=(k,))
    assert len(set(res.n_steps.tolist())) == 3
    for i in range(3):
        one = rk.rk_solve(G, 0.0, Y[i:i + 1], 3.0, rtol=1e-9, atol=1e-12, args=(k[i:i + 1],))
        assert one.n_steps[0] == res.n_steps[i] and one.n_rejected[0] == res.n_rejected[i]
        np.testing.assert_allclose(one.y[0], res.y[i], rtol=1e-14, atol=1e-300)


def test_rejections_and_tolerance_met():
    """A too-large first step (h0 = 1) is rejected and the controller recovers; the end error at rtol 1e-8
    stays within a few times rtol·|y| (the global error of a tolerance-proportional method, amplified by
    at most the length of the interval)."""
    r = rk.rk_solve(F, 0.0, Y0, T, rtol=1e-8, atol=1e-12, h0=1.0)
    assert r.n_rejected.sum() > 0 and np.all(r.status == rk.Status.OK)
    assert np.abs(r.y - exact(T)).max() < 1e-7 * np.abs(exact(T)).max()


def test_float32_rows_keep_their_dtype():
    """Stages are computed in the state's dtype: float32 in, float32 out, with RK4's error at h = 0.1 (~1e-6)
    plus float32 round-off (~20 steps x 4 stages x 6e-8 x |y| ≤ 5)."""
    r = rk.rk_solve(F, 0.0, Y0.astype(np.float32), T, method="rk4", steps=20)
    assert r.y.dtype == np.float32
    assert np.abs(r.y - exact(T)).max() < 1e-4


def test_nonfinite_row_stops_alone():
    G = lambda t, Y, flag: np.where((t[:, None] > 0.5) & (flag[:, None] == 1.0), np.nan, -Y)  # noqa: E731
    r = rk.rk_solve(G, 0.0, np.array([[1.0], [2.0]]), 2.0, args=(np.array([0.0, 1.0]),))
    assert r.status.tolist() == [rk.Status.OK, rk.Status.NONFINITE] and np.isfinite(r.y).all() and r.t[1] < 2.0
    # without an error estimate the fixed-step mode is required
    with pytest.raises(ValueError):
        rk.RKSolver(F, 0.0, Y0, T, method="rk4")
