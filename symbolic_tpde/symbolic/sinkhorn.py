"""Sinkhorn attention on Gaussians: the entropic plan's cross-covariance (README, Mathematics §2-3).

The entropic plan of ``μ = N(α, Σ)`` with itself for the cost ``-<Ax, y>`` (``ε = 1``) is
``dπ = exp(f(x) + g(y) + <Ax, y>) dμ(x) dμ(y)`` with both marginals ``μ``.  Seek ``π`` Gaussian with joint
covariance ``[[Σ, C], [Cᵀ, Σ]]`` (``C = Cov_π(x, y)``).  Derivation carried out by the code:

1. ``log dπ/d(μ⊗μ)`` = ``log π - log μ(x) - log μ(y)``.  Its mixed ``x, y`` part comes only from ``log π``:
   ``-xᵀ Π_xy y`` with ``Π = [[Σ, C], [Cᵀ, Σ]]⁻¹``.  ``f(x) + g(y)`` has no mixed part, so the density-ratio
   form holds iff ``Π_xy = -Aᵀ`` (``<Ax, y> = xᵀAᵀy``).
2. Block inversion (``sympy.block_collapse``, Schur complement) gives ``Π_xy = -Σ⁻¹C(Σ - CᵀΣ⁻¹C)⁻¹``;
   multiplying by ``Σ`` on the left and by the Schur complement on the right yields the fixed-point condition
   ``C = ΣAᵀ(Σ - CᵀΣ⁻¹C)``   (:func:`condition_matrix`; entrywise for ``d = 1, 2`` by :func:`condition_explicit`).
3. Closed form (claimed in README Mathematics, *checked* here): ``Cᵀ = ½A^{-ᵀ}((I + 4AᵀΣAΣ)^{1/2} - I)``, principal
   square root.  Because ``(X^{1/2} - I)(X^{1/2} + I) = X - I`` and functions of ``X`` commute, with
   ``X = I + 4AᵀΣAΣ``:  ``Cᵀ = 2ΣAΣ(I + X^{1/2})⁻¹``  -- **no A⁻¹**, valid for singular ``A`` too (``X`` is
   similar to ``I + 4Σ^{1/2}AᵀΣAΣ^{1/2} ⪰ I``, so ``I + X^{1/2}`` is always invertible).  This is the form used.
   Checked: symbolically in ``d = 1``; at 50 digits (mpmath) in ``d = 2, 3`` for both forms and the condition.
4. The field ``V E_π[y | x] = V(α + CᵀΣ⁻¹(x - α))`` is affine, so ``dα/dt = Vα`` and
   ``dΣ/dt = VCᵀ + CVᵀ``.  For ``ε ≠ 1`` the exponent is divided by ``ε``: ``A → A/ε``.

Entrywise form: exact for ``d = 1`` and ``d = 2`` (2×2 principal root ``(X + √det X I)/√(tr X + 2√det X)``,
valid for ``X`` with positive eigenvalues); ``d ≥ 3`` raises :class:`MatrixSqrtRequired`.
"""

from __future__ import annotations

import sympy as sp

from .tilt import generic_adjugate


class MatrixSqrtRequired(NotImplementedError):
    """The entrywise Sinkhorn ODE for ``d >= 3`` needs a matrix square root with no closed form here."""

    def __init__(self, d: int):
        self.d = d
        super().__init__(f"Sinkhorn entrywise form for d = {d}: the cross-covariance needs the principal square "
                         "root of the d x d matrix I + 4 A^T Sigma A Sigma, which has an exact entrywise "
                         "form only for d <= 2; use a numeric matrix-square-root path (or the matrix form)")


# --------------------------------------------------------------------------------------------------------
# general d: the first-order condition from the block inverse
# --------------------------------------------------------------------------------------------------------

def condition_matrix(d=None):
    """Derive ``C = ΣAᵀ(Σ - CᵀΣ⁻¹C)`` for general ``d``.  Returns a dict of the steps (SymPy objects)."""
    d = d if d is not None else sp.Symbol("d", integer=True, positive=True)
    Sigma = sp.MatrixSymbol("Sigma", d, d)
    C = sp.MatrixSymbol("C", d, d)
    A = sp.MatrixSymbol("A", d, d)
    joint = sp.BlockMatrix([[Sigma, C], [C.T, Sigma]])
    Pi = sp.block_collapse(joint.I)
    Pi_xy = Pi.blocks[0, 1]
    schur = (Pi.blocks[1, 1]).I.doit()           # Π_yy = (Σ - CᵀΣ⁻¹C)⁻¹  ->  Schur complement
    # Π_xy = -Aᵀ  <=>  Σ (-Π_xy) schur = Σ Aᵀ schur;  the left side must collapse to C
    lhs = (Sigma * (-Pi_xy) * schur).doit()
    rhs = Sigma * A.T * schur
    return {"Sigma": Sigma, "C": C, "A": A, "precision": Pi, "Pi_xy": Pi_xy, "schur": schur,
            "lhs": lhs, "rhs": rhs, "collapsed": lhs == C}


def closed_form_matrix(d=None, a_inverse_free: bool = True):
    """``Cᵀ`` in matrix form: ``2ΣAΣ(I + X^{1/2})⁻¹`` (default) or ``½A^{-ᵀ}(X^{1/2} - I)``, ``X = I + 4AᵀΣAΣ``."""
    d = d if d is not None else sp.Symbol("d", integer=True, positive=True)
    Sigma = sp.MatrixSymbol("Sigma", d, d)
    A = sp.MatrixSymbol("A", d, d)
    I = sp.Identity(d)
    X = I + 4 * A.T * Sigma * A * Sigma
    root = sp.MatPow(X, sp.S.Half)
    if a_inverse_free:
        return 2 * Sigma * A * Sigma * (I + root).I
    return sp.Rational(1, 2) * A.T.I * (root - I)


# --------------------------------------------------------------------------------------------------------
# explicit d: condition from the joint precision, closed form, check
# --------------------------------------------------------------------------------------------------------

def condition_explicit(Sigma: sp.Matrix, C: sp.Matrix, A: sp.Matrix) -> sp.Matrix:
    """Residual ``Π_xy + Aᵀ`` with ``Π`` the inverse of the explicit joint covariance (zero iff ``π`` has the
    entropic density-ratio form).  Mixed Hessian of ``-½ zᵀΠz`` taken by differentiation, not by indexing."""
    d = Sigma.shape[0]
    joint = sp.Matrix(sp.BlockMatrix([[Sigma, C], [C.T, Sigma]]))
    Pi = joint.inv(method="LU")
    z = sp.Matrix([sp.Symbol(f"_z{i}") for i in range(2 * d)])
    quad = -sp.Rational(1, 2) * (z.T * Pi * z)[0, 0]
    mixed = sp.Matrix(d, d, lambda i, j: sp.diff(quad, z[i], z[d + j]))  # = -Π_xy (Π symmetric)
    return -mixed + A.T


def sqrtm_explicit(X: sp.Matrix) -> sp.Matrix:
    """Principal square root of a ``1×1`` or ``2×2`` matrix with positive eigenvalues (exact expressions).

    ``2×2``: ``(X + s I)/t`` with ``s = √det X``, ``t = √(tr X + 2s)`` (Cayley-Hamilton: its square is
    ``(X² + 2sX + s²I)/t² = ((tr X + 2s) X)/t² = X``; positive eigenvalues make it the principal root).
    """
    d = X.shape[0]
    if d == 1:
        return sp.Matrix([[sp.sqrt(X[0, 0])]])
    if d == 2:
        s = sp.sqrt(X.det())
        t = sp.sqrt(X.trace() + 2 * s)
        return (X + s * sp.eye(2)) / t
    raise MatrixSqrtRequired(d)


def cross_covariance_explicit(Sigma: sp.Matrix, A: sp.Matrix) -> sp.Matrix:
    """``Cᵀ = 2ΣAΣ(I + (I + 4AᵀΣAΣ)^{1/2})⁻¹`` entrywise, ``d <= 2`` (A⁻¹-free form, module docstring)."""
    d = Sigma.shape[0]
    if d > 2:
        raise MatrixSqrtRequired(d)
    X = sp.eye(d) + 4 * A.T * Sigma * A * Sigma
    Y = sp.eye(d) + sqrtm_explicit(X)
    G, adj, det = generic_adjugate(d)
    rep = {G[i, j]: Y[i, j] for i in range(d) for j in range(d)}
    return 2 * Sigma * A * Sigma * adj.xreplace(rep) / det.xreplace(rep)


def check_closed_form_d1() -> sp.Expr:
    """Symbolic check in ``d = 1``: the residual ``c - a(s² - c²)`` of the condition (``Σ = s``) at the
    closed form, simplified.  Returns the simplified residual (0 when the check passes)."""
    s = sp.Symbol("s", positive=True)
    a = sp.Symbol("a", real=True, nonzero=True)
    c = cross_covariance_explicit(sp.Matrix([[s]]), sp.Matrix([[a]]))[0, 0]
    cond = condition_explicit(sp.Matrix([[s]]), sp.Matrix([[c]]), sp.Matrix([[a]]))[0, 0]
    return sp.simplify(sp.radsimp(sp.together(cond)))


# --------------------------------------------------------------------------------------------------------
# high precision (mpmath)
# --------------------------------------------------------------------------------------------------------

def mp_cross_covariance(Sigma, A, form: str = "inverse_free"):
    """``Cᵀ`` as an mpmath matrix (current ``mp.dps``), from ``Sigma``, ``A`` (mpmath matrices).

    ``form``: ``"inverse_free"`` (``2ΣAΣ(I + X^{1/2})⁻¹``), ``"a_inverse"`` (``½A^{-ᵀ}(X^{1/2} - I)``) or
    ``"symmetric"`` (``½A^{-ᵀ}(Σ^{-1/2}(I + 4Σ^{1/2}AᵀΣAΣ^{1/2})^{1/2}Σ^{1/2} - I)``, the paper's form).
    """
    import mpmath as mp

    d = Sigma.rows
    I = mp.eye(d)
    if form == "inverse_free":
        X = I + 4 * A.T * Sigma * A * Sigma
        return 2 * Sigma * A * Sigma * mp.inverse(I + mp.sqrtm(X))
    if form == "a_inverse":
        X = I + 4 * A.T * Sigma * A * Sigma
        return mp.inverse(A.T) * (mp.sqrtm(X) - I) / 2
    if form == "symmetric":
        r = mp.sqrtm(Sigma)
        inner = mp.sqrtm(I + 4 * r * A.T * Sigma * A * r)
        return mp.inverse(A.T) * (mp.inverse(r) * inner * r - I) / 2
    raise ValueError(form)


def mp_condition_residuals(Sigma, A, Ct) -> tuple:
    """Max-abs residuals (mpf) of (i) ``C - ΣAᵀ(Σ - CᵀΣ⁻¹C)`` and (ii) ``Π_xy + Aᵀ`` with ``Π`` the numerically
    inverted joint covariance (an independent route), for ``C = Ctᵀ``; plus the smallest eigenvalue of the
    joint covariance (must be > 0 for a genuine plan)."""
    import mpmath as mp

    d = Sigma.rows
    C = Ct.T
    Si = mp.inverse(Sigma)
    r1 = C - Sigma * A.T * (Sigma - C.T * Si * C)
    joint = mp.matrix(2 * d, 2 * d)
    for i in range(d):
        for j in range(d):
            joint[i, j] = Sigma[i, j]
            joint[d + i, d + j] = Sigma[i, j]
            joint[i, d + j] = C[i, j]
            joint[d + i, j] = C[j, i]
    Pi = mp.inverse(joint)
    r2 = mp.matrix(d, d)
    for i in range(d):
        for j in range(d):
            r2[i, j] = Pi[i, d + j] + A[j, i]
    ev = mp.eigsy(joint, eigvals_only=True)
    amax = lambda M: max(abs(M[i, j]) for i in range(M.rows) for j in range(M.cols))  # noqa: E731
    return amax(r1), amax(r2), min(ev)
