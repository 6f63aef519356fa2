"""The Gaussian tilt: completing the square in the key ``y`` (README, Mathematics §3).

For ``μ = N(α, Σ)`` and ``log k(x, y) = xᵀBy + xᵀPx + yᵀRy + pᵀx + rᵀy`` the tilted measure
``k(x, y) N(y; α, Σ) dy`` (normalised) is the Gaussian ``N(m(x), S)``.  Nothing below types that result in:
the code writes the exponent

    E(y) = log k(x, y) - ½ (y - α)ᵀ Σ⁻¹ (y - α),

differentiates it twice in ``y`` (Hessian ``H``, constant in ``y`` and ``x``) and once at ``y = 0`` (shift
``g(x)``), and reads off precision ``-H`` and mean ``m(x) = (-H)⁻¹ g(x)`` (the stationary point of a concave
quadratic).  What comes out, for the record, is ``-H = Σ⁻¹ - (R + Rᵀ)`` and ``g = Σ⁻¹α + Bᵀx + r``; the
tilted measure exists iff ``Σ⁻¹ - (R + Rᵀ) ≻ 0`` (``Σ⁻¹ - 2R ≻ 0`` for symmetric ``R``), recorded as an
assumption of every result.  ``P`` and ``p`` drop out (they do not depend on ``y``): the engine shows it.

Two forms:

* :func:`tilt_matrix` -- general ``d`` with ``MatrixSymbol``s, using SymPy's matrix calculus (``diff`` with
  respect to a ``MatrixSymbol`` vector).  Exact symbolic; comparison with closed forms is done by
  ``doit``-level cancellation, and re-checked entrywise for explicit ``d`` by the tests.
* :func:`tilt_explicit` -- concrete ``d``, every entry a ``Symbol``.  ``Σ⁻¹`` is never inverted: the exponent is
  written with an independent symmetric precision ``Λ``; the code checks that ``-H = Λ - H₀`` and
  ``g = Λα + g₀`` (``H₀, g₀`` free of ``Λ``), then uses ``ΣΛ = I``:
  ``(Λ - H₀)⁻¹ = Σ N⁻¹ Σ`` with ``N = Σ - ΣH₀Σ`` (check: ``(Λ - H₀)ΣN⁻¹Σ = (I - H₀Σ)(Σ(I - H₀Σ))⁻¹Σ = I``), so
  ``m(x) = Σ N⁻¹ u(x)``, ``u(x) = α + Σ g₀(x)``, and ``S = Σ N⁻¹ Σ``.  ``N`` is symmetric, and positive
  definite exactly under the existence assumption, so it is solved by a symbolic ``LDLᵀ`` elimination
  *without pivoting*, whose pivots (ratios of leading principal minors of ``N``) are then all ``> 0``: no
  spurious division by zero in generated code, ``O(d³)`` expression nodes (sharing sub-expressions).
  Alternatives kept for comparison (``method=``): ``"adjugate"`` (cofactors of a generic matrix,
  ``det N > 0``; size grows like ``d!``) and ``"lu"`` (SymPy ``LUsolve``).  When ``H₀ = 0`` (softmax)
  ``m(x) = u(x)`` and no division occurs at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import sympy as sp

from .kernels import ExpQuadKernel

HALF = sp.Rational(1, 2)


@dataclass(frozen=True)
class Tilt:
    """``E[y | x] = m0 + M x`` under ``k(x, y) N(y; α, Σ)``; tilted covariance ``S``; conditions."""

    m0: object
    M: object
    S: object
    precision: object  # -H, the tilted precision (matrix form) or N = Σ(-H)Σ (explicit form)
    assumptions: tuple[str, ...]
    steps: dict = field(default_factory=dict)  # intermediate objects, for printing / derivation scripts


# --------------------------------------------------------------------------------------------------------
# matrix form (general d)
# --------------------------------------------------------------------------------------------------------

def symmetric_subs(expr, *mats):
    """Replace ``Xᵀ`` by ``X`` for the symmetric ``MatrixSymbol``s given (e.g. ``Σ``), then ``doit``."""
    return expr.xreplace({m.T: m for m in mats}).doit()


def tilt_matrix(kernel: ExpQuadKernel, alpha: sp.MatrixSymbol, Sigma: sp.MatrixSymbol) -> Tilt:
    """General-``d`` tilt by matrix calculus.  ``alpha`` is ``d×1``, ``Sigma`` ``d×d`` (symmetric)."""
    d = Sigma.shape[0]
    x = sp.MatrixSymbol("x", d, 1)
    y = sp.MatrixSymbol("y", d, 1)
    E = kernel.log_kernel(x, y) - HALF * (y - alpha).T * Sigma.I * (y - alpha)
    grad = E.diff(y)
    H = symmetric_subs(grad.diff(y), Sigma)
    g = symmetric_subs(grad.subs(y, sp.ZeroMatrix(d, 1)), Sigma)
    if H.has(x) or H.has(y):
        raise ValueError("the y-Hessian of the exponent depends on x or y: not an exponential-quadratic kernel")
    g0 = g.subs(x, sp.ZeroMatrix(d, 1)).doit()
    G = g.diff(x).T.doit()  # coefficient of x in g (SymPy's d(Cx)/dx is Cᵀ)
    prec = (-H).doit()
    cov = prec.I.doit()
    m0 = (cov * g0).doit()
    M = (cov * G).doit()
    assumptions = (f"tilt exists: {sp.sstr(prec)} is positive definite",)
    return Tilt(m0=m0, M=M, S=cov, precision=prec, assumptions=assumptions,
                steps={"exponent": E, "H": H, "g": g, "x": x, "y": y})


# --------------------------------------------------------------------------------------------------------
# explicit form (concrete d)
# --------------------------------------------------------------------------------------------------------

def sym_matrix(name: str, d: int, symmetric: bool = False, **assumptions) -> sp.Matrix:
    """``d×d`` matrix of Symbols ``name_i_j``; symmetric ones are built from the upper triangle."""
    def entry(i: int, j: int) -> sp.Symbol:
        if symmetric and i > j:
            i, j = j, i
        return sp.Symbol(f"{name}_{i}_{j}", real=True, **assumptions)
    return sp.Matrix(d, d, entry)


def sym_vector(name: str, d: int) -> sp.Matrix:
    return sp.Matrix([sp.Symbol(f"{name}_{i}", real=True) for i in range(d)])


@lru_cache(maxsize=None)
def generic_adjugate(d: int) -> tuple[sp.Matrix, sp.Matrix, sp.Expr]:
    """``(T, adj T, det T)`` for a ``d×d`` matrix of fresh symbols (polynomials, computed once per ``d``)."""
    T = sp.Matrix(d, d, lambda i, j: sp.Dummy(f"T{i}{j}"))
    if d == 1:
        return T, sp.Matrix([[1]]), T[0, 0]
    return T, T.adjugate(method="berkowitz").applyfunc(sp.expand), sp.expand(T.det(method="berkowitz"))


def solve_by_adjugate(T: sp.Matrix, rhs: sp.Matrix) -> tuple[sp.Matrix, sp.Expr]:
    """``(adj(T) rhs, det T)``: ``T⁻¹ rhs = adj(T) rhs / det T`` with the cofactors of a generic matrix and the
    actual (unexpanded) entries substituted -- no symbolic pivoting, no expansion of the entries."""
    d = T.shape[0]
    G, adj, det = generic_adjugate(d)
    rep = {G[i, j]: T[i, j] for i in range(d) for j in range(d)}
    return adj.xreplace(rep) * rhs, det.xreplace(rep)


def solve_by_lu(T: sp.Matrix, rhs: sp.Matrix) -> sp.Matrix:
    """``T⁻¹ rhs`` by SymPy's LU solve (kept for the benchmark)."""
    return T.LUsolve(rhs)


def solve_by_ldl(N: sp.Matrix, rhs: sp.Matrix) -> tuple[sp.Matrix, list]:
    """``N⁻¹ rhs`` for symmetric ``N`` by ``N = L D Lᵀ`` without pivoting; returns ``(solution, pivots D)``.

    For ``N ≻ 0`` the pivots are ``D_j = det N[:j+1, :j+1] / det N[:j, :j] > 0`` (LDLᵀ of an SPD matrix is
    backward stable without pivoting).  Entries are combined without expansion, so common factors stay shared.
    """
    n = N.shape[0]
    L = [[sp.S.Zero] * n for _ in range(n)]
    D: list = [sp.S.Zero] * n
    # differences are written as sums of negated products: ``a - Add(...)`` would make SymPy distribute the
    # -1 over the whole Add (a copy of the sub-expression, no sharing, and most of the derivation time)
    for j in range(n):
        D[j] = sp.Add(N[j, j], *[-(L[j][k] ** 2 * D[k]) for k in range(j)])
        for i in range(j + 1, n):
            L[i][j] = sp.Add(N[i, j], *[-(L[i][k] * L[j][k] * D[k]) for k in range(j)]) / D[j]
    cols = []
    for c in range(rhs.shape[1]):
        z = [sp.S.Zero] * n
        for i in range(n):                                   # L z = b
            z[i] = sp.Add(rhs[i, c], *[-(L[i][k] * z[k]) for k in range(i)])
        w = [z[i] / D[i] for i in range(n)]                  # D w = z
        sol = [sp.S.Zero] * n
        for i in reversed(range(n)):                         # Lᵀ s = w
            sol[i] = sp.Add(w[i], *[-(L[k][i] * sol[k]) for k in range(i + 1, n)])
        cols.append(sol)
    return sp.Matrix(n, rhs.shape[1], lambda i, c: cols[c][i]), D


def tilt_explicit(kernel: ExpQuadKernel, alpha: sp.Matrix, Sigma: sp.Matrix, x: sp.Matrix,
                  method: str = "ldl", with_covariance: bool = False) -> Tilt:
    """Concrete-``d`` tilt.  ``kernel`` has explicit blocks; ``x`` is the column of query symbols.

    ``method``: ``"ldl"`` (default), ``"adjugate"`` or ``"lu"`` (see the module docstring).  The tilted
    covariance ``S`` is only formed when ``with_covariance`` (the moment ODE needs ``m0`` and ``M`` only)."""
    d = Sigma.shape[0]
    y = sym_vector("_y", d)
    Lam = sym_matrix("_Lambda", d, symmetric=True)
    E = kernel.log_kernel(x, y) - HALF * ((y - alpha).T * Lam * (y - alpha))[0, 0]
    grad = [sp.diff(E, yi) for yi in y]
    at0 = {yi: 0 for yi in y}
    H = sp.Matrix(d, d, lambda i, j: sp.diff(grad[i], y[j]))
    g = sp.Matrix([gi.xreplace(at0) for gi in grad])
    if any(e.has(*y) or e.has(*x) for e in H):
        raise ValueError("the y-Hessian of the exponent depends on x or y: not an exponential-quadratic kernel")
    lam0 = {s: 0 for s in Lam.free_symbols}
    H0 = H.xreplace(lam0)
    g0 = g.xreplace(lam0)
    # the Λ-dependence must be exactly -Λ in H and Λα in g (checked, not assumed)
    if sp.expand(H - H0 + Lam) != sp.zeros(d, d) or sp.expand(g - g0 - Lam * alpha) != sp.zeros(d, 1):
        raise AssertionError("unexpected precision dependence in the tilt exponent")
    # ΣΛ = I:  (Λ - H0)⁻¹ = Σ N⁻¹ Σ with N = Σ - Σ H0 Σ (symmetric),  Σ g = α + Σ g0 =: u
    u = alpha + Sigma * g0
    x0 = {xi: 0 for xi in x}
    u0 = u.xreplace(x0)
    U = u.jacobian(list(x))
    if any(e.has(*x) for e in U):
        raise ValueError("the tilted mean is not affine in x")
    trivial = H0 == sp.zeros(d, d)
    N = Sigma if trivial else Sigma + Sigma * (-H0) * Sigma
    rhs = sp.Matrix.hstack(u0, U, Sigma) if with_covariance else sp.Matrix.hstack(u0, U)
    det, pivots = sp.S.One, []
    if trivial:                                              # softmax: Σ N⁻¹ = I
        sol = rhs
    elif method == "ldl":
        Ninv_rhs, pivots = solve_by_ldl(N, rhs)
        sol = Sigma * Ninv_rhs
        det = sp.Mul(*pivots)
    elif method == "adjugate":
        adj_rhs, det = solve_by_adjugate(N, rhs)
        sol = Sigma * adj_rhs / det
        pivots = [det]
    elif method == "lu":
        sol = Sigma * solve_by_lu(N, rhs)
    else:
        raise ValueError(f"unknown method {method!r}")
    m0, M = sol[:, 0], sol[:, 1:1 + len(x)]
    S = sol[:, 1 + len(x):] if with_covariance else None
    assumptions = ("none (R = 0: the tilt exists for every SPD Sigma)" if trivial else
                   "tilt exists: Sigma^-1 - (R + R^T) positive definite, i.e. N = Sigma - Sigma (R + R^T) Sigma "
                   "positive definite along the path (all LDL^T pivots of N > 0)",)
    return Tilt(m0=m0, M=M, S=S, precision=N, assumptions=assumptions,
                steps={"exponent": E, "H": H, "g": g, "H0": H0, "g0": g0, "N": N, "u": u, "det": det,
                       "pivots": tuple(pivots),
                       "Lambda": Lam, "y": y})
