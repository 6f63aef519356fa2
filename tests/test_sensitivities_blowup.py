"""∂T*/∂A: forward sensitivities at the blow-up levels vs the closed form for softmax with V = I, the closed
form vs a hand-written mpmath reference, and a repeated top eigenvalue reported as non-differentiable."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from symbolic_tpde import make_head, make_weights
from symbolic_tpde.analysis.blowup_sensitivity import blowup_gradient_vi, blowup_time_gradient
from symbolic_tpde.gaussian import GaussianODE


def _problem(d):
    rng = np.random.default_rng(d)
    A = 0.5 * rng.normal(size=(d, d)) + 0.3 * np.eye(d)
    return A, 0.8 * np.eye(d) + 0.1 * np.ones((d, d))


def _tstar_mp(A, S0):
    """Reference, written independently of the closed form: the first zero of det(Σ₀⁻¹ - t(A + Aᵀ)) (the
    precision P = Σ⁻¹ obeys dP/dt = -(A + Aᵀ) exactly for V = I), by mpmath at the working precision,
    started from the float root and checked to be the first sign change on a grid."""
    P0 = mp.inverse(mp.matrix(S0.tolist()))
    B = A + A.T

    def det(t):
        return mp.det(P0 - t * B)
    Bf = np.array(B.tolist(), dtype=float)
    t0 = 1 / max(np.linalg.eigvals(S0 @ Bf).real)      # a float starting point (eigenvalues of Σ₀B)
    root = mp.findroot(det, mp.mpf(t0))
    grid = [root * k / 40 for k in range(1, 40)]
    assert all(mp.sign(det(g)) == mp.sign(det(0)) for g in grid)  # no earlier zero
    return root


def test_closed_form_against_mpmath_differences():
    A, S0 = _problem(3)
    cf = blowup_gradient_vi(A, S0)
    with mp.workdps(50):
        Am = mp.matrix(A.tolist())
        T0 = _tstar_mp(Am, S0)
        assert abs(T0 - cf.blowup_time) < 1e-13
        h = mp.mpf("1e-20")
        for i, j in [(0, 0), (0, 2), (2, 1)]:
            E = mp.zeros(3, 3)
            E[i, j] = h
            ref = (_tstar_mp(Am + E, S0) - _tstar_mp(Am - E, S0)) / (2 * h)   # error ~h² ≈ 1e-40
            assert abs(float(ref) - cf.gradient[i, j]) < 1e-13 * max(1, abs(float(ref)))   # float64 eigh


def _numeric(d, A, S0):
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", d, A=A, V=np.eye(d))]), backend="numpy")
    return blowup_time_gradient(ode, np.full(d, 0.1), S0, 50.0, ["h0_A"])


@pytest.mark.parametrize("d", [pytest.param(2, marks=pytest.mark.slow), 3])
def test_sensitivity_route_matches_closed_form(d):
    """Agreement to 1e-8 (the issue's bar); the reported error bar covers the actual error."""
    A, S0 = _problem(d)
    cf = blowup_gradient_vi(A, S0)
    r = _numeric(d, A, S0)
    assert r.differentiable and r.rank_ratio < 1e-8
    assert abs(r.blowup_time - cf.blowup_time) <= r.blowup_time_error + 1e-12
    err = np.abs(r.gradient - cf.gradient.ravel())
    assert err.max() <= 1e-8 * max(1.0, np.abs(cf.gradient).max())
    assert np.all(err <= r.gradient_error + 1e-13)
    assert r.names[0] == "h0_A_0_0"


def test_repeated_top_eigenvalue_is_not_a_number():
    """A + Aᵀ = I, Σ₀ = I: every eigenvalue of M is top.  The closed form gives one-sided derivatives (checked
    against one-sided differences of T* = 1/λ_max, exact for these directions up to O(h)), the sensitivity
    route reports non-differentiable and no gradient."""
    d = 2
    A = np.array([[0.5, 0.3], [-0.3, 0.5]])
    S0 = np.eye(d)
    cf = blowup_gradient_vi(A, S0)
    assert cf.gradient is None and cf.multiplicity == 2
    h = 1e-7
    for i, j in [(0, 0), (0, 1), (1, 1)]:
        E = np.zeros((d, d))
        E[i, j] = h
        up = (blowup_gradient_vi(A + E, S0).blowup_time - cf.blowup_time) / h
        down = (cf.blowup_time - blowup_gradient_vi(A - E, S0).blowup_time) / h
        assert abs(up - cf.right[i, j]) < 1e-5 and abs(down - cf.left[i, j]) < 1e-5   # O(h) + eps/h
    assert cf.right[0, 1] != cf.left[0, 1]       # a kink: no two-sided derivative
    r = _numeric(d, A, S0)
    assert not r.differentiable and r.gradient is None and "not differentiable" in r.method


# ------------------------------------------------------------------ the tilt-ceasing time t_c (event sensitivity)
def _custom(B, R, V, d):
    return GaussianODE.from_weights(make_weights([make_head("custom", B=np.asarray(B, float), R=np.asarray(R, float),
                                                            V=np.asarray(V, float))]), backend="numpy")


def test_tilt_time_gradient_d1_against_the_closed_form():
    """d = 1 custom head (tests/test_tilt_edges.py): t_c = (1/s₀ - 2r + 2r ln(2rs₀))/(2vb); its derivatives in
    b, r, v, s₀ by SymPy (an independent reference).  Tolerance: the reported error estimate, itself checked
    to be below 1e-8 relative (levels 1e-3, 1e-4 of g(0): level values off by ~1e-7 and ~1e-9, O(L²); after
    Richardson measured ~1e-12; the estimate |R - E_finest| is the conservative ~1e-9)."""
    import sympy as sp

    from symbolic_tpde.analysis.blowup_sensitivity import tilt_time_gradient

    b, r, v, s0 = -1.0, 0.5, -1.0, 0.5
    B_, R_, V_, S_ = sp.symbols("b r v s0")
    tc = (1 / S_ - 2 * R_ + 2 * R_ * sp.log(2 * R_ * S_)) / (2 * V_ * B_)
    at = {B_: b, R_: r, V_: v, S_: s0}
    ref = np.array([float(sp.diff(tc, x).subs(at)) for x in (B_, R_, V_, S_)])
    g = tilt_time_gradient(_custom([[b]], [[r]], [[v]], 1), [0.0], [[s0]], 2.0,
                           ["h0_B_0_0", "h0_R_0_0", "h0_V_0_0", "Sigma0_0_0"])
    assert g.event == "tilt-ceased" and g.differentiable
    assert g.blowup_time == pytest.approx(float(tc.subs(at)), rel=1e-9)
    assert np.all(g.gradient_error <= 1e-8 * np.abs(ref))
    assert np.all(np.abs(g.gradient - ref) <= g.gradient_error + 1e-12 * np.abs(ref))


def test_tilt_time_gradient_d2_against_central_differences():
    """d = 2 custom head (non-symmetric B, R with one positive direction, general V, α₀ ≠ 0): dt_c/dθ vs
    central differences of the integrated event time (h = 1e-5: truncation O(h²) ~ 1e-10; event-time error
    ≲ 1e-13, so a CD noise floor 2·1e-13/(2h) = 1e-8 absolute), to 1e-6 relative + 1e-8 + the reported
    estimate.  (α₀ does not enter the covariance ODE of this head: its derivative is 0, CD gives ~1e-11.)"""
    from symbolic_tpde.analysis.blowup_sensitivity import tilt_time_gradient

    B = np.array([[-1.0, 0.3], [0.2, -0.6]])
    R = np.array([[0.5, 0.1], [0.0, -0.2]])
    V = np.array([[-1.0, 0.2], [0.1, -0.8]])
    a0, S0 = np.array([0.2, -0.1]), np.array([[0.5, 0.05], [0.05, 0.3]])
    names = ["h0_B_0_1", "h0_R_0_0", "h0_V_1_1", "Sigma0_0_0", "alpha0_0"]
    g = tilt_time_gradient(_custom(B, R, V, 2), a0, S0, 5.0, names)
    assert g.differentiable

    def t_c(B=B, R=R, V=V, a0=a0, S0=S0):
        sol = _custom(B, R, V, 2).integrate(a0, S0, 5.0)
        assert sol.status == "tilt-ceased"
        return float(sol.t[-1])

    h = 1e-5
    E = np.zeros((2, 2))
    E00 = E.copy()
    E00[0, 0] = 1
    E01 = E.copy()
    E01[0, 1] = 1
    E11 = E.copy()
    E11[1, 1] = 1
    cd = [(t_c(B=B + h * E01) - t_c(B=B - h * E01)) / (2 * h), (t_c(R=R + h * E00) - t_c(R=R - h * E00)) / (2 * h),
          (t_c(V=V + h * E11) - t_c(V=V - h * E11)) / (2 * h), (t_c(S0=S0 + h * E00) - t_c(S0=S0 - h * E00)) / (2 * h),
          (t_c(a0=a0 + h * E00[0]) - t_c(a0=a0 - h * E00[0])) / (2 * h)]
    assert np.all(np.abs(g.gradient - cd) <= 1e-6 * np.abs(cd) + 1e-8 + g.gradient_error), (g.gradient, cd)
