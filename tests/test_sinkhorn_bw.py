"""Sinkhorn attention on Gaussians = Bures-Wasserstein gradient flow of F (symmetric A, V = A)."""

import mpmath
import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.symbolic import sinkhorn_bw as sb


def test_d1_symbolic():
    r = sb.bw_identity_d1()
    assert r["fixed_point_residual"] == 0 and r["stationarity"] == 0 and r["residual"] == 0
    # negative control: the factor matters (-(F'Σ + ΣF') is off by 2)
    a, s = r["a"], r["s"]
    wrong = r["ode"] - r["bw"] / 2
    assert sp.N(wrong.subs({a: 2, s: 1})) != 0


@pytest.mark.parametrize("d", [2, 3])
def test_high_precision_fd(d):
    rng = np.random.default_rng(40 + d)
    Q = rng.normal(size=(d, d))
    S = Q @ Q.T / d + 0.5 * np.eye(d)
    B = rng.normal(size=(d, d))
    r = sb.bw_identity_mp(((B + B.T) / 2).tolist(), S.tolist(), dps=50)
    assert r["fixed_point_residual"] < mpmath.mpf(10) ** -44       # 50-digit arithmetic, d³ operations
    assert r["error"] / r["scale"] < mpmath.mpf(10) ** -30           # FD: h⁴ = 1e-40, round-off 1e-40
    assert abs(r["ratio"] - 1) < mpmath.mpf(10) ** -30


def test_closed_form_matches_fixed_point_iteration_d1():
    # independent route for C: iterate c ← a(s² - c²) damped... solve the quadratic by mpmath.findroot
    with mpmath.workdps(50):
        a, s = mpmath.mpf(-0.7), mpmath.mpf(1.3)
        c = mpmath.findroot(lambda c: c - a * (s * s - c * c), 0)
        C = sb.cross_cov_mp([[a]], [[s]])
        assert abs(C[0, 0] - c) < mpmath.mpf(10) ** -45


def test_closed_form_matches_inverse_free_form_of_symbolic_sinkhorn():
    # cross-check with the Sinkhorn helper's A⁻¹-free form Cᵀ = 2ΣAΣ(I + X^{1/2})⁻¹ (a different formula)
    sk = pytest.importorskip("symbolic_tpde.symbolic.sinkhorn")
    with mpmath.workdps(50):
        S = mpmath.matrix([[0.8, 0.2], [0.2, 0.5]])
        A = mpmath.matrix([[0.7, -0.3], [-0.3, -0.4]])
        Ct = sk.mp_cross_covariance(S, A, form="inverse_free")
        C = sb.cross_cov_mp(A, S)
        assert mpmath.mnorm(C.T - Ct, 1) < mpmath.mpf(10) ** -45
