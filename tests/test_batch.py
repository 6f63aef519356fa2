"""The batched path of the one Runge-Kutta routine (symbolic_tpde.numerics.ode.rk.rk_solve: RK4 / Dormand-Prince
rows, per-row step size) against solve_ivp, orders, per-row control and termination."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from symbolic_tpde.registry.layout import gaussian_size
from symbolic_tpde.numerics.ode.rk import Status, rk_solve
from symbolic_tpde.numerics.ode.solve import BlowupMonitor


def softmax_batch(A, V):
    """Hand-written reference (README Mathematics §3): dα = V(α + ΣAα), dΣ = VΣAΣ + (.)ᵀ, d = 2, layout (α, Σ00, Σ01, Σ11).

    A, V: (N, 2, 2) per-row parameters passed as batch args.
    """
    def F(t, Y, Af, Vf):
        Aa, Vv = Af.reshape(-1, 2, 2), Vf.reshape(-1, 2, 2)
        a = Y[:, :2]
        S = np.stack([np.stack([Y[:, 2], Y[:, 3]], -1), np.stack([Y[:, 3], Y[:, 4]], -1)], 1)
        ad = np.einsum("nij,nj->ni", Vv, a + np.einsum("nij,njk,nk->ni", S, Aa, a))
        M = Vv @ S @ Aa @ S
        Sd = M + M.transpose(0, 2, 1)
        return np.concatenate([ad, Sd[:, 0, :], Sd[:, 1, 1:]], axis=1)

    return F, A.reshape(len(A), 4), V.reshape(len(V), 4)


def random_rows(rng, N, scale=0.4):
    G = rng.normal(size=(N, 2, 2))
    S0 = G @ G.transpose(0, 2, 1) + 0.2 * np.eye(2)
    A = -scale * (np.eye(2) + 0.3 * rng.normal(size=(N, 2, 2)))
    V = np.eye(2) + 0.3 * rng.normal(size=(N, 2, 2))
    Y0 = np.concatenate([rng.normal(size=(N, 2)), S0[:, 0, :], S0[:, 1, 1:]], axis=1)
    return Y0, A, V


def test_dopri5_matches_solve_ivp_per_row():
    rng = np.random.default_rng(11)
    Y0, A, V = random_rows(rng, 40)
    F, Af, Vf = softmax_batch(A, V)
    res = rk_solve(F, 0.0, Y0, 3.0, rtol=1e-10, atol=1e-12, args=(Af, Vf), t_eval=[1.0, 2.0, 3.0])
    assert np.all(res.status == Status.OK)
    worst = 0.0
    for i in range(0, 40, 5):
        sol = solve_ivp(lambda t, y: F(np.array([t]), y[None], Af[i:i + 1], Vf[i:i + 1])[0], (0, 3), Y0[i],
                        method="DOP853", rtol=1e-13, atol=1e-14, t_eval=[1.0, 2.0, 3.0])
        scale = np.abs(sol.y[:, -1]).max()
        worst = max(worst, np.abs(sol.y[:, -1] - res.y[i]).max() / scale)
        # dense output: Shampine's 4th-order interpolant, looser than the step ends (stated tolerance)
        assert np.abs(sol.y.T - res.ys[:, i]).max() / scale < 1e-5
    # global error of a 5th-order method run at rtol 1e-10: a few 1e-10 after amplification over t = 3
    assert worst < 1e-8
    # each row has its own step size: step counts differ across rows
    assert len(set(res.n_steps.tolist())) > 1


def test_dopri5_rejects_steps_and_meets_tolerance_scaling():
    """Error vs rtol: tighter tolerance, smaller error (log-log slope of error vs rtol in (0.5, 1.3))."""
    rng = np.random.default_rng(12)
    Y0, A, V = random_rows(rng, 20, scale=1.5)
    F, Af, Vf = softmax_batch(A, V)
    ref = rk_solve(F, 0.0, Y0, 2.0, rtol=1e-13, atol=1e-15, args=(Af, Vf)).y
    rtols = np.array([1e-5, 1e-7, 1e-9])
    errs = []
    for rt in rtols:
        r = rk_solve(F, 0.0, Y0, 2.0, rtol=rt, atol=rt * 1e-2, args=(Af, Vf), h0=0.5)
        errs.append(np.max(np.abs(r.y - ref) / np.abs(ref).max(axis=1, keepdims=True)))
        if rt == 1e-5:
            assert r.n_rejected.sum() > 0  # h0 = 0.5 is too large for some rows: rejections happen
    slope = np.polyfit(np.log(rtols), np.log(errs), 1)[0]
    assert 0.5 < slope < 1.3, (errs, slope)


def test_rk4_fourth_order():
    rng = np.random.default_rng(13)
    Y0, A, V = random_rows(rng, 10)
    F, Af, Vf = softmax_batch(A, V)
    ref = rk_solve(F, 0.0, Y0, 1.0, rtol=1e-13, atol=1e-15, args=(Af, Vf)).y
    steps = np.array([40, 80, 160, 320])
    errs = [np.abs(rk_solve(F, 0.0, Y0, 1.0, method="rk4", steps=int(n), args=(Af, Vf)).y - ref).max() for n in steps]
    slope = np.polyfit(np.log(1.0 / steps), np.log(errs), 1)[0]
    assert 3.7 < slope < 4.3, (errs, slope)


def test_per_row_blowup_monitor_and_nonfinite():
    """The one blow-up monitor on the rows of a batch (solve.BlowupMonitor.rows): rows 0..2 (A + Aᵀ ≻ 0, V = I)
    blow up at the closed form T* = 1/λmax(Σ0^{1/2}(A+Aᵀ)Σ0^{1/2}) = 1/(2 λmax(Σ0)) (hand-written here), found
    to 1e-9 relative (the extrapolation error O(τ_K τ_{K-1}) is far below round-off at the top level, the
    rest is the rtol 1e-12 integration error) and inside the reported spread + 1e-9; rows 3..5 (A ≺ 0)
    reach T."""
    N = 6
    A = np.array([np.eye(2)] * 3 + [-np.eye(2)] * 3)
    V = np.array([np.eye(2)] * N)
    S0 = np.array([[0.5, 0.1], [0.1, 0.4]])
    Y0 = np.tile(np.concatenate([[0, 0], S0[0], S0[1, 1:]]), (N, 1))
    F, Af, Vf = softmax_batch(A, V)
    bm = BlowupMonitor(*gaussian_size(2)).rows(Y0)
    r = rk_solve(F, 0.0, Y0, 50.0, args=(Af, Vf), monitor=bm, rtol=1e-12, atol=1e-14)
    assert np.all(r.status[:3] == Status.BLOWUP) and np.all(r.status[3:] == Status.OK)
    assert np.all(np.isfinite(r.y))
    Tstar = 1 / (2 * np.linalg.eigvalsh(S0).max())
    assert np.all(r.t[:3] < Tstar) and np.all(np.abs(bm.blowup_time[:3] / Tstar - 1) < 1e-9), bm.blowup_time
    assert np.all(np.abs(bm.blowup_time[:3] - Tstar) <= bm.spread[:3] + 1e-9 * Tstar)
    assert np.all(np.abs(bm.exponent[:3] - 1) < 0.1) and np.all(np.isnan(bm.blowup_time[3:]))

    def G(t, Y, flag):  # the flagged row produces NaN once t > 0.5
        out = -Y.copy()
        out[(flag == 1.0) & (t > 0.5)] = np.nan
        return out

    Y = np.ones((3, 2))
    r2 = rk_solve(G, 0.0, Y, 2.0, args=(np.array([0.0, 1.0, 0.0]),))
    assert r2.status.tolist() == [Status.OK, Status.NONFINITE, Status.OK]
    assert np.all(np.isfinite(r2.y)) and r2.t[1] < 2.0


def test_generated_rhs_batch_agrees_with_reference():
    pytest.importorskip("symbolic_tpde.gaussian")
    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.weights import make_head, make_weights

    rng = np.random.default_rng(14)
    Y0, A, V = random_rows(rng, 30)
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=A[0], V=V[0])]), backend="numpy")
    p = ode.params(0.0)
    F, Af, Vf = softmax_batch(A[:1].repeat(30, 0), V[:1].repeat(30, 0))
    gen = rk_solve(lambda t, Y: ode.compiled.batch(t, Y, p), 0.0, Y0, 2.0, rtol=1e-10, atol=1e-12)
    ref = rk_solve(F, 0.0, Y0, 2.0, rtol=1e-10, atol=1e-12, args=(Af, Vf))
    assert np.abs(gen.y - ref.y).max() < 1e-8 * np.abs(ref.y).max()
