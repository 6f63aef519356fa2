"""Sinkhorn attention on Gaussians is a Bures-Wasserstein gradient flow (README Mathematics §3, §5), ε = 1.

Claims checked here (symmetric ``A``, ``V = A``):

* the entropic plan of ``N(α, Σ)`` with itself for the cost ``-<Ax, y>`` is Gaussian with cross-covariance ``C``
  solving ``C = ΣAᵀ(Σ - CᵀΣ⁻¹C)``, closed form ``Cᵀ = ½A^{-ᵀ}(Σ^{-1/2}(I + 4Σ^{1/2}AᵀΣAΣ^{1/2})^{1/2}Σ^{1/2} - I)``;
  in ``d = 1``: ``c = (√(1 + 4a²s²) - 1)/(2a)``, the root of ``ac² + c - as² = 0`` that is the maximiser of
  ``ac + ½ log(1 - c²/s²)`` (the Gaussian entropic OT objective);
* the covariance ODE ``dΣ/dt = VCᵀ + CVᵀ`` equals the Bures-Wasserstein gradient flow
  ``dΣ/dt = -2(∇F Σ + Σ ∇F)`` of ``F(Σ) = ½[-tr(AC) + ½ log det Σ - ½ log det(Σ - CᵀΣ⁻¹C)]`` (``½ OT_ε(μ, μ)``
  restricted to covariances), where ``∇F`` is the symmetric gradient, ``dF = tr(∇F dΣ)``.

Routes: :func:`bw_identity_d1` is fully symbolic (``d = 1``; the residual simplifies to 0);
:func:`bw_identity_mp` recomputes ``C`` by the closed form in mpmath (checking the fixed-point residual) and
``∇F`` by 4th-order central differences of ``F(Σ)`` at 50 digits (``C`` recomputed at every perturbed ``Σ``,
so the envelope theorem is *not* assumed).  Stand-alone: this module does not depend on
``symbolic_tpde.symbolic.sinkhorn``.
"""

from __future__ import annotations

import mpmath
import sympy as sp

__all__ = ["cross_cov_d1", "F_d1", "bw_identity_d1", "cross_cov_mp", "fixed_point_residual_mp", "F_mp",
           "grad_F_mp", "bw_identity_mp"]


def cross_cov_d1(a: sp.Expr, s: sp.Expr) -> sp.Expr:
    """``c = (√(1 + 4a²s²) - 1)/(2a)`` (from the closed form with ``d = 1``)."""
    return (sp.sqrt(1 + 4 * a ** 2 * s ** 2) - 1) / (2 * a)


def F_d1(a: sp.Expr, s: sp.Expr) -> sp.Expr:
    """``F(s) = ½[-ac + ½ log s - ½ log(s - c²/s)]`` with ``c = c(s)``."""
    c = cross_cov_d1(a, s)
    return (-a * c + sp.log(s) / 2 - sp.log(s - c ** 2 / s) / 2) / 2


def bw_identity_d1() -> dict:
    """Symbolic ``d = 1`` proof: fixed point, optimality, and ``2ac = -4 s F'(s)`` (``V = A = a``)."""
    a = sp.Symbol("a", nonzero=True, real=True)
    s = sp.Symbol("s", positive=True)
    cs = sp.Symbol("c", real=True)
    c = cross_cov_d1(a, s)
    fixed = sp.simplify(sp.expand(c - s * a * (s - c ** 2 / s)))
    objective = a * cs + sp.log(1 - cs ** 2 / s ** 2) / 2  # -(Gaussian OT_ε objective) as a function of c
    stationarity = sp.simplify(sp.diff(objective, cs).subs(cs, c))
    ode = 2 * a * c                                   # V Cᵀ + C Vᵀ with V = A = a
    bw = -2 * (sp.diff(F_d1(a, s), s) * s + s * sp.diff(F_d1(a, s), s))
    residual = sp.simplify(sp.radsimp(sp.together(ode - bw)))
    return {"a": a, "s": s, "c": c, "fixed_point_residual": fixed, "stationarity": stationarity,
            "ode": ode, "bw": sp.simplify(bw), "residual": residual}


def _sym_sqrtm(M):
    """Principal square root of a symmetric positive definite mpmath matrix (eigendecomposition)."""
    E, Q = mpmath.eigsy(M)
    n = M.rows
    D = mpmath.diag([mpmath.sqrt(E[i]) for i in range(n)])
    return Q * D * Q.T


def cross_cov_mp(A, S):
    """``C`` from the closed form ``Cᵀ = ½A^{-ᵀ}(Σ^{-1/2}(I + 4Σ^{1/2}AᵀΣAΣ^{1/2})^{1/2}Σ^{1/2} - I)`` (mpmath)."""
    A, S = mpmath.matrix(A), mpmath.matrix(S)
    n = S.rows
    R = _sym_sqrtm(S)
    inner = mpmath.eye(n) + 4 * R * A.T * S * A * R
    inner = (inner + inner.T) / 2
    Ct = (A.T ** -1) * (R ** -1 * _sym_sqrtm(inner) * R - mpmath.eye(n)) / 2
    return Ct.T


def fixed_point_residual_mp(A, S, C) -> mpmath.mpf:
    """``max |C - ΣAᵀ(Σ - CᵀΣ⁻¹C)|``."""
    A, S = mpmath.matrix(A), mpmath.matrix(S)
    R = C - S * A.T * (S - C.T * S ** -1 * C)
    return max(abs(R[i, j]) for i in range(R.rows) for j in range(R.cols))


def F_mp(A, S) -> mpmath.mpf:
    """``F(Σ) = ½[-tr(AC) + ½ log det Σ - ½ log det(Σ - CᵀΣ⁻¹C)]`` with ``C = C(Σ)`` (mpmath)."""
    A, S = mpmath.matrix(A), mpmath.matrix(S)
    C = cross_cov_mp(A, S)
    AC = A * C
    tr = sum(AC[i, i] for i in range(S.rows))
    return (-tr + mpmath.log(mpmath.det(S)) / 2 - mpmath.log(mpmath.det(S - C.T * S ** -1 * C)) / 2) / 2


def grad_F_mp(A, S, h=None):
    """Symmetric gradient ``∇F`` (``dF = tr(∇F dΣ)``) by 4th-order central differences.

    Off-diagonal entries are perturbed symmetrically (``Σ_ij = Σ_ji += t``), so ``∂F/∂t = 2∇F_ij``.
    Error: truncation ``O(h⁴)`` plus round-off ``~10^{-dps}/h``; the default ``h = 10^{-dps/5}`` balances
    them near ``10^{-4 dps/5}``.
    """
    S = mpmath.matrix(S)
    n = S.rows
    h = mpmath.mpf(10) ** (-(mpmath.mp.dps // 5)) if h is None else mpmath.mpf(h)
    Gr = mpmath.matrix(n, n)
    for i in range(n):
        for j in range(i, n):
            def Fs(t):
                P = S.copy()
                P[i, j] += t
                if i != j:
                    P[j, i] += t
                return F_mp(A, P)
            der = (-Fs(2 * h) + 8 * Fs(h) - 8 * Fs(-h) + Fs(-2 * h)) / (12 * h)
            Gr[i, j] = Gr[j, i] = der if i == j else der / 2
    return Gr


def bw_identity_mp(A, S, dps: int = 50) -> dict:
    """High-precision check in any ``d``: returns the fixed-point residual, ``max|ODE - BW|`` and the ratio
    of norms (1 when the factor in the claim is right)."""
    with mpmath.workdps(dps):
        A, S = mpmath.matrix(A), mpmath.matrix(S)
        C = cross_cov_mp(A, S)
        ode = A * C.T + C * A.T
        Gr = grad_F_mp(A, S)
        bw = -2 * (Gr * S + S * Gr)
        err = max(abs(ode[i, j] - bw[i, j]) for i in range(S.rows) for j in range(S.cols))
        scale = max(abs(ode[i, j]) for i in range(S.rows) for j in range(S.cols))
        ratio = mpmath.norm(bw) / mpmath.norm(ode)
        return {"fixed_point_residual": fixed_point_residual_mp(A, S, C), "error": err, "scale": scale,
                "ratio": ratio, "C": C}
