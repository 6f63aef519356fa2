"""Long-time cases with known answers through the one classifier (README Mathematics §4), identities, growth bounds."""

import numpy as np
import pytest

from symbolic_tpde.analysis import closed_forms as cf
from symbolic_tpde.analysis.clustering import (growth_bound_ratio, lyapunov_identity, rate_slope,
                                               volume_identity)
from symbolic_tpde.analysis.verdict import classify_long_time
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.weights import make_head, make_weights

S0 = np.array([[1.0, 0.3], [0.3, 0.6]])


def ode(kind="softmax", V=np.eye(2), **kw):
    return GaussianODE.from_weights(make_weights([make_head(kind, V=V, **kw)]))


def test_collapse_spd_V_negative_definite_A():
    """The one classifier (analysis.verdict) on a case with a known answer: SPD V, A + Aᵀ ≺ 0 (Lyapunov
    theorem: rank ≤ dim ker(A + Aᵀ) = 0), so Σ → 0."""
    rng = np.random.default_rng(3)
    B = rng.normal(size=(2, 2))
    V = B @ B.T + 0.2 * np.eye(2)
    A = -np.array([[1.0, 0.2], [0.2, 0.5]])
    v = classify_long_time(ode(A=A, V=V), S0, T=1e4)
    assert v.outcome == "rank" and v.rank == 0, v.label


@pytest.mark.parametrize("kind", ["l2", "sinkhorn"])
def test_diverge_without_blowup(kind):
    A = np.array([[1.0, 0.3], [0.1, 0.8]])
    kw = dict(Q=A, K=np.eye(2), tau=1.0) if kind == "l2" else dict(A=A)
    v = classify_long_time(ode(kind, **kw), S0, T=20.0)
    assert v.outcome == "diverge" and v.blowup_time is None, v.label


def test_rate_is_one_over_t():
    from scipy.integrate import solve_ivp

    A = np.diag([0.0, -0.5])
    o = ode(A=A)
    ts = np.logspace(2, 5, 7)
    sol = solve_ivp(o.rhs, (0, ts[-1]), np.r_[0, 0, S0[0], S0[1, 1]], method="DOP853", rtol=1e-11,
                    atol=1e-15, t_eval=ts)
    Sig = np.array([[[y[2], y[3]], [y[3], y[4]]] for y in sol.y.T])
    slope = rate_slope(ts, Sig, cf.sigma_star_vi(S0, A)[0])
    assert -1.05 < slope < -0.95


def test_volume_and_lyapunov_identities():
    rng = np.random.default_rng(9)
    A = np.array([[-0.6, 0.4], [-0.1, -0.3]])
    V = np.array([[0.9, 0.2], [0.2, 0.5]])  # SPD
    f = ode(A=A, V=V).rhs
    lhs, rhs = volume_identity(f, rng.normal(size=2), S0, A, V, 5.0)
    # both sides from one DOP853 run at rtol 1e-11: agreement to ~1e-9 absolute on O(1) values
    assert abs(lhs - rhs) < 1e-8 * max(1, abs(lhs))
    dL, integral, max_increase = lyapunov_identity(f, rng.normal(size=2), S0, A, V, 5.0)
    assert abs(dL - integral) < 1e-8 * max(1, abs(dL))
    assert dL < 0 and max_increase <= 1e-12  # A + Aᵀ ≺ 0: tr(V⁻¹Σ) is non-increasing
    Vn = np.array([[0.3, 1.0], [-0.7, 0.2]])  # non-symmetric V: volume identity still holds
    lhs, rhs = volume_identity(ode(A=A, V=Vn).rhs, np.zeros(2), S0, A, Vn, 3.0)
    assert abs(lhs - rhs) < 1e-8 * max(1, abs(lhs))


def test_growth_bounds_l2_sinkhorn():
    A = np.array([[1.0, 0.3], [0.1, 0.8]])
    V = np.array([[1.0, 0.4], [-0.2, 0.7]])
    rate = 2 * np.linalg.norm(V, 2)
    assert growth_bound_ratio(ode("sinkhorn", V=V, A=A).rhs, np.zeros(2), S0, rate, 4.0) <= 1.0
    Q, K = np.array([[1.0, 0.5], [0.0, 1.2]]), np.array([[-0.8, 0.1], [0.3, -1.0]])
    rate_l2 = 2 * np.linalg.norm(V, 2) * np.linalg.cond(K) * np.linalg.norm(np.linalg.solve(K, Q), 2)  # ‖V‖cond(K)‖K⁻¹Q‖
    r = growth_bound_ratio(ode("l2", V=V, Q=Q, K=K, tau=0.7).rhs, np.zeros(2), S0, rate_l2, 4.0)
    assert r <= 1.0
    # the bound is not vacuous: with half the rate it fails for Sinkhorn (growth is genuinely exponential)
    assert growth_bound_ratio(ode("sinkhorn", V=np.eye(2), A=A).rhs, np.zeros(2), S0, 0.5, 4.0) > 1.0
