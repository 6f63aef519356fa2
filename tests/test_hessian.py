"""Christoffel symbols and Riemannian Hessian vs finite differences along integrated geodesics."""

import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.numerics.particles import energy as en
from symbolic_tpde.symbolic.hessian import curve_second_derivative, gaussian_hessian, particle_hessian

A2 = sp.Matrix([[-1, sp.Rational(1, 4)], [sp.Rational(1, 4), -sp.Rational(1, 2)]])


def _case(n, d, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(scale=0.8, size=(n, d)), rng.normal(size=(n, d))


@pytest.mark.parametrize("n,d", [(2, 1), (2, 2), (3, 2)])
def test_symbolic_hessian_vs_closed_form_and_geodesic(n, d):
    A = A2[:d, :d]
    V = sp.Matrix([[2, 0], [0, 1]])[:d, :d]
    A = A * V if d == 1 else sp.Matrix([[-2, 0], [0, -sp.Rational(1, 2)]]) * V  # G SPD, A symmetric
    ph = particle_hessian(n, d, A, V)
    X, U = _case(n, d, 10 + n + d)
    An, Vn = np.array(A, float), np.array(V, float)
    H = np.array(sp.lambdify(ph.coords, ph.H)(*X.ravel()), float)
    sym = U.ravel() @ H @ U.ravel()
    # route 2: Koszul closed form in numpy (no Christoffel symbols), round-off level agreement
    assert np.isclose(sym, en.hessian_form(X, An, Vn, U), rtol=1e-11, atol=1e-13)
    # route 3: second derivative of E along the integrated geodesic (Lagrangian equations, DOP853 1e-13)
    geo, est = en.hessian_along_geodesic(X, U, An, Vn)
    assert abs(sym - geo) < max(10 * est, 1e-9)
    assert est < 1e-5 * max(1, abs(sym))  # the check is sharp enough to fail on a wrong Christoffel term


def test_geodesic_check_detects_missing_christoffel_term():
    X, U = _case(2, 2, 3)
    A = -np.eye(2)
    ph = particle_hessian(2, 2, [[-1, 0], [0, -1]], [[1, 0], [0, 1]])
    subs = dict(zip(ph.coords, X.ravel()))
    d2 = float((sp.Matrix(U.ravel()).T * ph.D2E.subs(subs) * sp.Matrix(U.ravel()))[0, 0])
    geo, est = en.hessian_along_geodesic(X, U, A, np.eye(2))
    assert abs(d2 - geo) > 1e3 * est  # plain D²E is not the second derivative along geodesics here


def test_critical_point_christoffel_term_vanishes():
    ph = particle_hessian(2, 2, [[-1, 0], [0, -1]], [[1, 0], [0, 1]])
    zero = {c: 0 for c in ph.coords}
    assert all(sp.simplify(g.subs(zero)) == 0 for g in ph.dE)       # X = 0 is critical
    assert (ph.H.subs(zero) - ph.D2E.subs(zero)).applyfunc(sp.simplify).is_zero_matrix
    U = [1, 2, 1, 2]
    W = [sp.Symbol(f"w{k}") for k in range(4)]                       # arbitrary acceleration of the curve
    total, d2, first = curve_second_derivative(ph.pe.E, ph.coords, zero, U, W)
    assert first == 0 and sp.simplify(total - d2) == 0
    assert d2 == -5  # (1+1)²(1+4)/4: (Σu)ᵀA(Σu)/n² = -|v|² for U = (v, v): E(δ_{sv}) = ½e^{-s²|v|²}


def test_single_particle_closed_form():
    # n = 1, d = 1: Hess E(δ_x) = e^{ax²}(a + a²x²) (G = 1 when V = -a); negative iff |x| < 1 for a = -1
    ph = particle_hessian(1, 1, [[-1]], [[1]])
    x = ph.coords[0]
    assert sp.simplify(ph.H[0, 0] - sp.exp(-x ** 2) * (x ** 2 - 1)) == 0


def test_gaussian_hessian_d1_vs_geodesic():
    gh = gaussian_hessian([[-1]], [[1]])
    h = gh.numeric("math")
    for theta, U in [([0.4, 0.6], [0.3, -0.5]), ([-0.2, 0.3], [1.0, 0.2])]:
        geo, est = en.gaussian_hessian_along_geodesic([theta[0]], [[theta[1]]], [[-1.0]], [[1.0]], U)
        assert abs(float(h(theta, U)) - geo) < max(10 * est, 1e-9)


@pytest.mark.slow
def test_gaussian_hessian_d2_vs_geodesic():
    A = [[-1, sp.Rational(1, 3)], [sp.Rational(1, 3), -sp.Rational(1, 2)]]
    gh = gaussian_hessian(A, [[1, 0], [0, 1]])  # ~30 s to stage and lambdify
    h = gh.numeric("math")
    a, S = [0.3, -0.2], np.array([[0.5, 0.1], [0.1, 0.3]])
    U = [0.3, -0.5, 0.2, 0.7, -0.1]
    geo, est = en.gaussian_hessian_along_geodesic(a, S, np.array(A, float), np.eye(2), U)
    assert abs(float(h([0.3, -0.2, 0.5, 0.1, 0.3], U)) - geo) < max(10 * est, 1e-9)
