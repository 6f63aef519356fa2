"""Energy, first variation, twisted metric, gradient-flow and dissipation identities (README Mathematics §5)."""

import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.errors import BlowupError, InputError
from symbolic_tpde.numerics.particles import energy as en
from symbolic_tpde.symbolic import gaussian_energy as ge
from symbolic_tpde.symbolic import metric as me
from symbolic_tpde.symbolic.energy import gradient_identity, particle_energy


def spd_pair(rng, d):
    """Symmetric A and SPD V sharing eigenvectors, so that G = -A V⁻¹ is SPD."""
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    g, v = rng.uniform(0.5, 1.5, d), rng.uniform(0.5, 1.5, d)
    return -(Q * (g * v)) @ Q.T, (Q * v) @ Q.T


def test_euclidean_gradient_matches_central_differences():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(4, 3))
    A = rng.normal(size=(3, 3)) * 0.5  # any A, not only symmetric
    g = en.euclidean_gradient(X, A)
    h = 1e-6
    fd = np.zeros_like(X)
    for i in range(4):
        for a in range(3):
            P, M = X.copy(), X.copy()
            P[i, a] += h
            M[i, a] -= h
            fd[i, a] = (en.energy(P, A) - en.energy(M, A)) / (2 * h)
    # central differences: truncation h²|E'''| ~ 1e-12, round-off eps/h ~ 1e-10
    assert np.max(np.abs(g - fd)) < 1e-8


def test_gradient_identity_numeric_general_V():
    rng = np.random.default_rng(2)
    A, V = spd_pair(rng, 3)
    X = rng.normal(size=(50, 3))
    F = en.softmax_field(X, A, V)
    assert np.max(np.abs(en.riemannian_gradient(X, A, V) + F)) < 1e-12 * np.max(np.abs(F))  # round-off
    # the particle simulator's field (used by en.softmax_field) equals the direct formula
    assert np.max(np.abs(en.softmax_field_direct(X, A, V) - F)) < 1e-13 * np.max(np.abs(F))


def test_gradient_identity_fails_for_nonsymmetric_A():
    # negative control: with A ≠ Aᵀ (and G still SPD) grad E ≠ -Γ
    V = np.array([[1.0, 0.3], [-0.3, 1.0]])
    A = -np.eye(2) @ V  # G = -AV⁻¹ = I, A not symmetric
    X = np.random.default_rng(3).normal(size=(5, 2))
    assert np.max(np.abs(en.riemannian_gradient(X, A, V) + en.softmax_field(X, A, V))) > 1e-3
    with pytest.raises(InputError) as exc:
        en.check_gradient_structure(A, V)
    assert exc.value.field == "A"


@pytest.mark.parametrize("n,d", [(1, 1), (2, 1), (3, 1), (2, 2)])
def test_gradient_identity_symbolic_small_cases(n, d):
    A = sp.Matrix([[-2, sp.Rational(1, 2)], [sp.Rational(1, 2), -1]])[:d, :d]
    V = sp.Matrix([[3, 0], [0, 1]])[:d, :d]
    A = A * V if d == 1 else -sp.diag(2, 1) * V  # G = -A V⁻¹ = diag(2, 1) (or 2·...) SPD, A symmetric
    diff = gradient_identity(particle_energy(n, d, A, V))
    assert diff.is_zero_matrix


def test_twisted_G_errors_name_fields():
    with pytest.raises(InputError) as e1:
        en.twisted_G(np.eye(2), np.eye(2))  # G = -I
    assert e1.value.field == "A/V" and "positive definite" in e1.value.problem
    with pytest.raises(InputError) as e2:
        en.twisted_G(-np.eye(2), [[1.0, 1.0], [1.0, 1.0]])
    assert e2.value.field == "V"
    with pytest.raises(InputError) as e3:
        en.twisted_G([[-1.0, 0.5], [0.0, -1.0]], np.eye(2))
    assert e3.value.field == "A/V" and "symmetric" in e3.value.problem
    with pytest.raises(InputError) as e4:
        me.twisted_G([[1, 0], [0, -1]], [[1, 0], [0, 1]])
    assert e4.value.field == "A/V"
    with pytest.raises(InputError):
        en.twisted_G([[np.nan]], [[1.0]])
    assert me.twisted_G([[-1]], [[sp.Rational(1, 2)]]) == sp.Matrix([[2]])


def test_energy_overflow_is_reported():
    with pytest.raises(BlowupError):
        en.energy(np.array([[30.0], [30.0]]), np.eye(1))


def test_metric_matrix_and_form_agree():
    rng = np.random.default_rng(4)
    A, V = spd_pair(rng, 2)
    X, U, W = rng.normal(size=(3, 4, 2))
    assert np.isclose(en.metric(X, A, V, U, W), U.ravel() @ en.metric_matrix(X, A, V) @ W.ravel(), rtol=1e-13)


def test_dissipation_identity_rk4_order_and_tight_run():
    rng = np.random.default_rng(5)
    A, V = spd_pair(rng, 2)
    X0 = rng.normal(size=(5, 2))
    steps = [8, 16, 32, 64]
    defects = [abs(en.rk4_energy_defect(X0, A, V, 1.0, s)) for s in steps]
    slope = np.polyfit(np.log([1 / s for s in steps]), np.log(defects), 1)[0]
    assert 3.7 < slope < 4.3  # classical RK4: global error O(h^4)
    # dE/dt = -g(Γ, Γ) ≤ 0 pointwise
    assert en.dissipation(X0, A, V) > 0


def test_gaussian_energy_symbolic_numeric_quadrature():
    A = sp.Matrix([[-1, sp.Rational(1, 3)], [sp.Rational(1, 3), -sp.Rational(1, 2)]])
    g = ge.gaussian_energy(A)
    assert g.residual == 0
    f = sp.lambdify(ge.gaussian_coords(g.alpha, g.Sigma), g.E)
    a, S = np.array([0.3, -0.2]), np.array([[0.5, 0.1], [0.1, 0.3]])
    An = np.array(A, float)
    closed = en.gaussian_energy(a, S, An)
    assert np.isclose(f(0.3, -0.2, 0.5, 0.1, 0.3), closed, rtol=1e-14)
    # independent route: 16-node tensor Gauss-Hermite in (x, y) ∈ R⁴, converged to ~1e-15 (12 nodes: ~1e-11)
    assert np.isclose(en.gaussian_energy_quadrature(a, S, An, nodes=16), closed, rtol=1e-12)


def test_gaussian_energy_finiteness_d1():
    r = ge.energy_finiteness_d1()
    a, s = r["a"], r["s"]
    assert r["residual"] == 0
    assert sp.simplify(r["minor2"] - (1 - a ** 2 * s ** 2) / s ** 2) == 0  # P ≻ 0 ⟺ a²s² < 1
    assert sp.expand(r["det_factor"] - (1 - a ** 2 * s ** 2)) == 0


def test_gaussian_energy_diverges_beyond_boundary():
    import mpmath

    # d = 1, a = 1: after the y-integral the x-integrand is exp(αax + ½a²s x²) N(x; α, s); its x² coefficient
    # (a²s² - 1)/(2s) changes sign at a s = 1.  Truncated integrals over [-L, L] converge below, grow above.
    def truncated(s, L):
        f = lambda x: mpmath.exp(0.1 * x + 0.5 * s * x * x - (x - 0.1) ** 2 / (2 * s)) / mpmath.sqrt(2 * mpmath.pi * s)
        return mpmath.quad(f, [-L, 0, L])
    below = [truncated(0.9, L) for L in (20, 40)]
    above = [truncated(1.1, L) for L in (20, 40)]
    assert abs(below[1] - below[0]) < 1e-12
    assert above[1] > 1e3 * above[0]
    assert np.isclose(float(below[1]) / 2, en.gaussian_energy([0.1], [[0.9]], [[1.0]]), rtol=1e-12)
    with pytest.raises(InputError):
        en.gaussian_energy([0.0], [[1.1]], [[1.0]])
    # the determinant factor goes through 0 at the boundary Σ = t Σ0, t* = 1/‖Σ0^½AΣ0^½‖
    A = np.array([[-1.0, 0.2], [0.2, -0.4]])
    S0 = np.array([[0.5, 0.1], [0.1, 0.3]])
    tstar = 1 / en.gaussian_energy_condition(S0, A)
    dets = [np.linalg.det(np.eye(2) - t * S0 @ A.T @ (t * S0) @ A) for t in (0.99 * tstar, tstar, 1.01 * tstar)]
    assert dets[0] > 0 and abs(dets[1]) < 1e-12 and dets[2] < 0


def test_gaussian_affine_metric_vs_quadrature():
    rng = np.random.default_rng(6)
    A, V = spd_pair(rng, 2)
    A = A * 0.3
    G = en.twisted_G(A, V)
    a, S = np.array([0.2, -0.1]), np.array([[0.6, 0.1], [0.1, 0.4]])
    b, J, b2, J2 = rng.normal(size=2), rng.normal(size=(2, 2)), rng.normal(size=2), rng.normal(size=(2, 2))
    closed = en.gaussian_affine_metric(a, S, A, V, b, J, b2, J2)
    # tensor Gauss-Hermite over (x, y) of e^{yᵀAx} <b + Jx, G(b' + J'x)>: no square completion
    t, w = np.polynomial.hermite.hermgauss(14)
    L = np.linalg.cholesky(S)
    T = np.stack([g.ravel() for g in np.meshgrid(t, t, t, t, indexing="ij")], 1)
    W = np.prod(np.meshgrid(w, w, w, w, indexing="ij"), 0).ravel() / np.pi ** 2
    x = a + np.sqrt(2) * T[:, :2] @ L.T
    y = a + np.sqrt(2) * T[:, 2:] @ L.T
    vals = np.exp(np.einsum("ka,ab,kb->k", y, A, x)) * np.einsum("ka,ab,kb->k", b + x @ J.T, G, b2 + x @ J2.T)
    assert np.isclose(W @ vals, closed, rtol=1e-10)  # 14-node GH on an entire integrand: ~1e-13


def test_gaussian_coordinate_metric_two_routes():
    # symbolic κ-minimisation vs numeric constrained least squares
    A = sp.Matrix([[-1, sp.Rational(1, 3)], [sp.Rational(1, 3), -sp.Rational(1, 2)]])
    for d in (1,):
        al, S = ge.gaussian_symbols(d)
        g = me.gaussian_coordinate_metric(A[:d, :d], sp.eye(d), al, S)
        num = en.gaussian_coordinate_metric([0.3], [[0.5]], np.array(A[:d, :d], float), np.eye(d))
        assert np.allclose(np.array(sp.lambdify(ge.gaussian_coords(al, S), g)(0.3, 0.5), float), num, rtol=1e-12)


def test_joint_precision_definite_iff_norm_below_one():
    # general d: P = S⁻¹ - Q ≻ 0 ⟺ I - S^½QS^½ ≻ 0, and S^½QS^½ = [[0, Bᵀ], [B, 0]] has eigenvalues ±σ_k(B)
    rng = np.random.default_rng(8)
    for d in (2, 3):
        Q0 = rng.normal(size=(d, d))
        S0 = Q0 @ Q0.T + 0.3 * np.eye(d)
        A = rng.normal(size=(d, d))
        t_star = 1 / en.gaussian_energy_condition(S0, A)  # Σ = tΣ0: ‖Σ^½AΣ^½‖ = t‖Σ0^½AΣ0^½‖
        for t in (0.9 * t_star, 1.1 * t_star):
            S = t * S0
            Si = np.linalg.inv(S)
            P = np.block([[Si, -A.T], [-A, Si]])
            definite = np.linalg.eigvalsh(P).min() > 0
            assert definite == (en.gaussian_energy_condition(S, A) < 1)
            assert definite == (t < t_star)


def test_gaussian_affine_metric_symbolic_equals_numeric():
    A = sp.Matrix([[-1, sp.Rational(1, 4)], [sp.Rational(1, 4), -sp.Rational(1, 2)]])
    V = sp.eye(2)
    al, S = ge.gaussian_symbols(2)
    b = sp.Matrix([1, -2])
    J = sp.Matrix([[0, 1], [sp.Rational(1, 2), 3]])
    J2 = sp.Matrix([[1, 0], [-1, 1]])
    expr = me.gaussian_affine_metric(A, V, al, S, b, J, b, J2)
    val = sp.lambdify(ge.gaussian_coords(al, S), expr)(0.2, -0.1, 0.6, 0.1, 0.4)
    num = en.gaussian_affine_metric([0.2, -0.1], [[0.6, 0.1], [0.1, 0.4]], np.array(A, float), np.eye(2),
                                    np.array(b, float).ravel(), np.array(J, float), np.array(b, float).ravel(),
                                    np.array(J2, float))
    assert np.isclose(val, num, rtol=1e-13)
