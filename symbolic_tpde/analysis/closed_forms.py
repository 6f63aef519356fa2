"""Closed forms of the softmax covariance dynamics, derived and verified with SymPy, then lambdified.

Softmax Gaussian moment ODE (README Mathematics §3): ``dα/dt = V(α + ΣAα)``, ``dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ``.

``V = I`` (README Mathematics §4).  With ``S = A + Aᵀ`` the Riccati equation ``dΣ/dt = ΣSΣ`` is linearised by the
precision ``P = Σ⁻¹``: ``dP/dt = -P (dΣ/dt) P = -S``, hence ``P(t) = Σ₀⁻¹ - tS`` and ``Σ(t) = (Σ₀⁻¹ - tS)⁻¹``.
:func:`vi_solution` does not take this on trust: it builds ``Σ(t)`` with explicit symbols, differentiates
it and checks entrywise, by rational cancellation, that it solves the ODE and starts at ``Σ₀``.  The solution
exists while ``det P(t) > 0``; the blow-up time is the first positive root of ``det(Σ₀⁻¹ - tS)``.  Since
``det(Σ₀⁻¹ - tS) = det Σ₀⁻¹ · det(I - tΣ₀S)``, the roots are ``1/λ`` for the eigenvalues ``λ`` of ``Σ₀S``
(= those of ``Σ₀^{1/2}SΣ₀^{1/2}``); the polynomial identity is verified symbolically, and numerically
:func:`blowup_time_vi` takes the smallest positive root ``1/λ_max``.  If ``S ⪯ 0``,
``Σ(t) → Σ* = U(UᵀΣ₀⁻¹U)⁻¹Uᵀ`` (``U`` orthonormal basis of ``ker S``); :func:`vi_limit_d2` verifies this with
``sympy.limit`` for ``d = 2``, ``S = -c qqᵀ``.

``d = 1`` (README Mathematics §4).  ``ds/dt = 2vas²``, ``dα/dt = vα(1 + as)``; :func:`d1_solution` solves both with
``sympy.dsolve`` (initial conditions ``s(0) = s₀``, ``α(0) = α₀``), checks them with ``checkodesol`` and
solves ``1 - 2vas₀t = 0`` for the blow-up time (when ``vas₀ > 0``).

SymPy is imported here (analysis layer); results are cached per dimension.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable

import numpy as np


if TYPE_CHECKING:  # SymPy is imported by the functions that derive (analysis never imports it at load)
    import sympy as sp


def _sym_matrix(name: str, d: int, symmetric: bool) -> sp.Matrix:
    import sympy as sp

    def entry(i, j):
        if symmetric and i > j:
            i, j = j, i
        return sp.Symbol(f"{name}_{i}_{j}", real=True)

    return sp.Matrix(d, d, lambda i, j: entry(i, j))


@dataclass(frozen=True)
class ViSolution:
    """``Σ(t) = (P₀ - t(A + Aᵀ))⁻¹`` for ``V = I`` with its symbolic verification.

    ``verified_ode``: ``dΣ/dt - (ΣAΣ + ΣAᵀΣ)`` cancels to 0 entrywise; ``verified_initial``: ``Σ(0)P₀ = I``;
    ``verified_det``: ``det(P₀ - tS)·det Σ₀ = det(I - tΣ₀S)`` with ``Σ₀ = P₀⁻¹`` (blow-up at ``t = 1/λ(Σ₀S)``);
    ``det_coeffs``: lambdified coefficients of ``det(P₀ - tS)`` in powers of ``t`` (highest first), as a
    function of ``(P0, A)``.
    """

    d: int
    Sigma_t: sp.Matrix
    t: sp.Symbol
    P0: sp.Matrix
    A: sp.Matrix
    verified_ode: bool
    verified_initial: bool
    verified_det: bool
    det_coeffs: Callable


@lru_cache(maxsize=None)
def vi_solution(d: int) -> ViSolution:
    """Derive and verify the ``V = I`` softmax covariance solution in dimension ``d`` (cheap for ``d ≤ 3``)."""
    import sympy as sp
    t = sp.Symbol("t", real=True)
    P0 = _sym_matrix("P", d, symmetric=True)
    A = _sym_matrix("a", d, symmetric=False)
    S = A + A.T
    M = P0 - t * S
    detM = sp.expand(M.det(method="berkowitz"))
    adj = M.adjugate()
    Sigma = adj / detM
    # dΣ/dt = ΣAΣ + ΣAᵀΣ with Σ = adj/det, multiplied by det² (a polynomial identity, cheap to expand):
    #   det·d(adj)/dt - d(det)/dt·adj - adj (A + Aᵀ) adj = 0.
    poly = detM * adj.diff(t) - detM.diff(t) * adj - adj * S * adj
    ok_ode = all(sp.expand(e) == 0 for e in poly)
    ok_init = all(sp.expand(e) == 0 for e in (adj.subs(t, 0) * P0 - detM.subs(t, 0) * sp.eye(d)))
    # det(P0 - tS) det(Σ0) = det(I - tΣ0 S) with Σ0 = adj(P0)/det(P0), i.e. det(P0 - tS) det(P0)^(d-1)
    # = det(det(P0) I - t adj(P0) S):
    det0 = P0.det(method="berkowitz")
    lhs = detM * det0 ** (d - 1)
    rhs_det = (det0 * sp.eye(d) - t * P0.adjugate() * S).det(method="berkowitz")
    ok_det = sp.expand(lhs - rhs_det) == 0
    coeffs = sp.Poly(detM, t).all_coeffs()
    iu = [(i, j) for i in range(d) for j in range(i, d)]
    flat = [P0[i, j] for i, j in iu] + list(A)
    fn = sp.lambdify(flat, coeffs, modules="numpy")

    def det_coeffs(P0v: np.ndarray, Av: np.ndarray) -> np.ndarray:
        P0v = np.asarray(P0v, float)
        return np.array(fn(*[P0v[i, j] for i, j in iu], *np.asarray(Av, float).ravel()), dtype=float)

    return ViSolution(d, Sigma, t, P0, A, ok_ode, bool(ok_init), ok_det, det_coeffs)


def sigma_vi(t: float, Sigma0: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Evaluate the verified closed form ``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹`` (numpy linear solve)."""
    P = np.linalg.inv(Sigma0) - t * (A + A.T)
    return np.linalg.inv(P)


def blowup_time_vi(Sigma0: np.ndarray, A: np.ndarray, *, use_polynomial: bool | None = None) -> float:
    """First positive root of ``det(Σ₀⁻¹ - t(A + Aᵀ))``, i.e. ``1/λ_max(Σ₀(A + Aᵀ))``; ``inf`` if none.

    For ``d ≤ 3`` (default) the root is taken from the symbolically derived polynomial coefficients
    (:func:`vi_solution`), refined by Newton's method on the determinant (``d = 3`` on request: its
    symbolic verification takes ~15 s); otherwise from the generalised
    symmetric eigenproblem ``S v = λ Σ₀⁻¹ v`` (same roots, as verified symbolically for ``d ≤ 3``).
    """
    Sigma0 = np.asarray(Sigma0, float)
    A = np.asarray(A, float)
    d = Sigma0.shape[0]
    S = A + A.T
    P0 = np.linalg.inv(Sigma0)
    if use_polynomial is None:
        use_polynomial = d <= 2
    if use_polynomial:
        roots = np.roots(vi_solution(d).det_coeffs(P0, A))
        real = roots[np.abs(roots.imag) <= 1e-9 * np.maximum(1.0, np.abs(roots))].real
        pos = real[real > 0]
        if pos.size == 0:
            return float("inf")
        r = float(pos.min())
        for _ in range(3):  # Newton on det(P0 - tS): d/dt det = -det(M) tr(M^{-1} S)
            M = P0 - r * S
            try:
                corr = 1.0 / np.trace(np.linalg.solve(M, S))
            except np.linalg.LinAlgError:
                break
            if not np.isfinite(corr):
                break
            r = r + corr * 1.0 if abs(corr) < 1e-3 * r else r
        return r
    from scipy.linalg import eigh

    lam = eigh(S, P0, eigvals_only=True)
    lmax = float(lam.max())
    return 1.0 / lmax if lmax > 0 else float("inf")


def sigma_star_vi(Sigma0: np.ndarray, A: np.ndarray, rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """``Σ* = U(UᵀΣ₀⁻¹U)⁻¹Uᵀ`` with ``U`` an orthonormal basis of ``ker(A + Aᵀ)`` (eigenvalues ``≤ rtol·‖S‖``).

    Returns ``(Σ*, U)``.  Only meaningful when ``A + Aᵀ ⪯ 0`` (README Mathematics §4); raises ``ValueError`` otherwise.
    """
    S = np.asarray(A, float) + np.asarray(A, float).T
    w, Q = np.linalg.eigh(S)
    scale = max(float(np.abs(w).max()), 1e-300)
    if w.max() > rtol * scale:
        raise ValueError("A + Aᵀ has a positive eigenvalue: no limit (finite-time blow-up)")
    U = Q[:, np.abs(w) <= rtol * scale]
    if U.shape[1] == 0:
        return np.zeros_like(S), U
    if S.shape[0] > 16:
        P0 = np.linalg.inv(Sigma0)
        return U @ np.linalg.solve(U.T @ P0 @ U, U.T), U
    # d <= 16: the products in 40-digit arithmetic, then rounded: the float64 route loses cond(Σ₀)·eps (2e-10
    # relative for eigenvalues 2 and 1e-6), the rounded 40-digit value is right to the last bits
    import mpmath as mp

    with mp.workdps(40):
        Um = mp.matrix(U.tolist())
        M = Um.T * mp.inverse(mp.matrix(np.asarray(Sigma0, float).tolist())) * Um
        L = Um * mp.inverse(M) * Um.T
        return np.array([[float(L[i, j]) for j in range(L.cols)] for i in range(L.rows)]), U


@lru_cache(maxsize=None)
def vi_limit_d2() -> bool:
    """Verify ``lim_{t→∞} (P₀ + t c qqᵀ)⁻¹ = U(UᵀP₀U)⁻¹Uᵀ`` for ``d = 2``, ``c > 0``, ``U = q^⊥/|q|``."""
    import sympy as sp
    t = sp.Symbol("t", positive=True)
    c = sp.Symbol("c", positive=True)
    q1, q2 = sp.symbols("q1 q2", real=True)
    P0 = _sym_matrix("P", 2, symmetric=True)
    q = sp.Matrix([q1, q2])
    M = P0 + t * c * q * q.T
    Sig = M.adjugate() / sp.expand(M.det())
    lim = Sig.applyfunc(lambda e: sp.limit(sp.together(e), t, sp.oo))
    U = sp.Matrix([-q2, q1]) / sp.sqrt(q1**2 + q2**2)
    star = U * (U.T * P0 * U).inv() * U.T
    return all(sp.simplify(e) == 0 for e in (lim - star))


@dataclass(frozen=True)
class D1Solution:
    """``d = 1`` softmax: ``s(t)``, ``α(t)`` from ``dsolve`` and the blow-up time, with checks."""

    s: sp.Expr
    alpha: sp.Expr
    blowup: sp.Expr
    verified: bool
    s_num: Callable
    alpha_num: Callable
    blowup_num: Callable


@lru_cache(maxsize=None)
def d1_solution() -> D1Solution:
    import sympy as sp
    t = sp.Symbol("t", real=True)
    v, a, s0, al0 = sp.symbols("v a s0 alpha0", real=True)
    s0p = sp.Symbol("s0", positive=True)
    s = sp.Function("s")
    al = sp.Function("alpha")
    ode_s = sp.Eq(s(t).diff(t), 2 * v * a * s(t) ** 2)
    sol_s = sp.dsolve(ode_s, s(t), ics={s(0): s0p})
    s_expr = sp.simplify(sol_s.rhs)
    ok_s = sp.checkodesol(ode_s, sol_s)[0]
    ode_a = sp.Eq(al(t).diff(t), v * al(t) * (1 + a * s_expr))
    sol_a = sp.dsolve(ode_a, al(t), ics={al(0): al0})
    a_expr = sol_a.rhs
    ok_a = sp.checkodesol(ode_a, sol_a)[0]
    den = sp.denom(sp.together(s_expr))
    roots = sp.solve(sp.Eq(den, 0), t)
    if len(roots) != 1:
        raise RuntimeError(f"unexpected blow-up roots {roots}")
    tb = sp.simplify(roots[0])
    s_expr = s_expr.subs(s0p, s0)
    a_expr = a_expr.subs(s0p, s0)
    tb = tb.subs(s0p, s0)
    args = (t, v, a, s0, al0)
    a_raw = sp.lambdify(args, a_expr, "numpy")

    def alpha_num(t_, v_, a_, s0_, al0_):
        # dsolve writes α with sqrt(2vas₀t - 1) (imaginary before blow-up); evaluate in complex arithmetic
        # and return the real part, which is the real solution for t < T*.
        val = np.asarray(a_raw(np.asarray(t_, complex), complex(v_), complex(a_), complex(s0_), complex(al0_)))
        return val.real

    return D1Solution(s_expr, a_expr, tb, bool(ok_s and ok_a),
                      sp.lambdify(args, s_expr, "numpy"), alpha_num, sp.lambdify((v, a, s0), tb, "numpy"))


def blowup_time_d1(v: float, a: float, s0: float) -> float:
    """Blow-up time of the d = 1 softmax covariance from :func:`d1_solution`; ``inf`` when ``vas₀ ≤ 0``."""
    if v * a * s0 <= 0:
        return float("inf")
    return float(d1_solution().blowup_num(v, a, s0))


# ----------------------------------------------------------------------- the covariance velocity in matrix form
# the matrix form of the affine field lives with the Gaussian ODEs (the integrator of ``tpde gaussian`` uses it)
from ..gaussian.matrix_form import affine_field, covariance_velocity, head_form, quadratic_form  # noqa: E402,F401
