"""Interaction energy of Gaussians, derived by completing the square (README Mathematics §5, Gaussian family).

The one lemma everything rests on (proved symbolically in :func:`complete_square`): for ``z ~ N(m, S)``,

    E[exp(½ zᵀ Q z + bᵀ z)] = det(I - S Q)^{-1/2} exp(½ hᵀ P⁻¹ h - ½ mᵀ S⁻¹ m),
    P = S⁻¹ - Q,  h = S⁻¹ m + b,

finite iff ``P ≻ 0``; the tilted density ``N(z; m, S) exp(½zᵀQz + bᵀz) / mass`` is ``N(P⁻¹h, P⁻¹)``.

Applications, with ``μ = N(α, Σ)`` and the kernel ``exp(<Ax, y>) = exp(yᵀAx)``:

* energy ``E(μ) = ½ E[exp(yᵀAx)]`` for independent ``x, y ~ μ``: ``z = (x, y)``, ``S = diag(Σ, Σ)``,
  ``Q = [[0, Aᵀ], [A, 0]]``, ``b = 0``; ``det(I - SQ) = det(I - ΣAᵀΣA) = det(I - BᵀB)``, ``B = Σ^{1/2}AΣ^{1/2}``,
  and ``P ≻ 0`` iff the eigenvalues ``±σ_k(B)`` of ``S^{1/2}QS^{1/2}`` are ``< 1``, i.e. ``‖B‖₂ < 1``;
* first variation ``Z_μ(x) = E_y[exp(yᵀ(Ax))]`` (``Q = 0``, ``b = Ax``): ``exp(αᵀAx + ½ xᵀAᵀΣAx)``;
* tilt ``Z_μ(x) N(x; α, Σ) = 2E · N(x; m̃, Σ̃)``, ``Σ̃ = (Σ⁻¹ - AᵀΣA)⁻¹``, ``m̃ = Σ̃(Σ⁻¹ + Aᵀ)α`` (``Q = AᵀΣA``,
  ``b = Aᵀα``), which gives the metric on affine fields in :mod:`symbolic_tpde.symbolic.metric`.

Everything is built on explicit matrices of ``Symbol``s (measured (README, Benchmarks): no ``MatrixSymbol.as_explicit``).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["gaussian_symbols", "gaussian_coords", "complete_square", "GaussianEnergy", "gaussian_energy",
           "gaussian_energy_joint", "first_variation_gaussian",
           "gaussian_tilt", "energy_finiteness_d1"]


def gaussian_symbols(d: int, prefix: str = "") -> tuple[sp.Matrix, sp.Matrix]:
    """Mean ``alpha_i`` and symmetric covariance ``Sigma_i_j`` (``i <= j``): without ``prefix`` exactly the
    symbols of the moment ODEs (:func:`symbolic_tpde.symbolic.moments.gaussian_symbols`, the one Gaussian
    layout), so a ``subs`` between an energy and a moment ODE acts; ``prefix`` gives a second, distinct set."""
    from .tilt import sym_matrix, sym_vector

    return sym_vector(f"{prefix}alpha", d), sym_matrix(f"{prefix}Sigma", d, symmetric=True)


def _inv(M: sp.Matrix) -> sp.Matrix:
    """Inverse as ``adj(M) / det(M)`` with the determinant factored once (compact for small symbolic ``M``)."""
    det = sp.factor(M.det(method="berkowitz"))
    return M.adjugate(method="berkowitz").applyfunc(lambda e: e / det)


def gaussian_coords(alpha: sp.Matrix, Sigma: sp.Matrix) -> tuple[sp.Symbol, ...]:
    """Ordered coordinates ``θ = (alpha_0.., Sigma_i_j for i <= j)`` (the layout of ``system.py``)."""
    d = alpha.shape[0]
    return tuple(alpha) + tuple(Sigma[i, j] for i in range(d) for j in range(i, d))


@dataclass(frozen=True)
class SquareCompletion:
    """``-½(z-m)ᵀS⁻¹(z-m) + ½zᵀQz + bᵀz = -½(z-c)ᵀP(z-c) + K`` with ``c = P⁻¹h``."""

    P: sp.Matrix
    h: sp.Matrix
    c: sp.Matrix
    K: sp.Expr
    log_mass: sp.Expr  # log E[exp(½zᵀQz + bᵀz)] = -½ log det(SP) + K
    residual: sp.Expr  # the identity, expanded at a symbolic z: must be 0


def complete_square(m: sp.Matrix, S: sp.Matrix, Q: sp.Matrix, b: sp.Matrix, check: bool = True) -> SquareCompletion:
    """Complete the square in the Gaussian exponent and return the pieces of the lemma above.

    With ``check=True`` the identity of quadratic forms is verified at a fresh symbolic ``z`` (the residual
    is simplified and must vanish); ``∫ exp(-½(z-c)ᵀP(z-c)) dz = (2π)^{k/2} det(P)^{-1/2}`` then gives
    ``mass = det(S)^{-1/2} det(P)^{-1/2} exp(K)``.
    """
    k = m.shape[0]
    Sinv = _inv(S)
    P = Sinv - Q
    h = Sinv * m + b
    c = _inv(P) * h
    K = (sp.Rational(1, 2) * (h.T * c)[0, 0] - sp.Rational(1, 2) * (m.T * Sinv * m)[0, 0])
    residual = sp.Integer(0)
    if check:
        # lhs - rhs is a quadratic polynomial in z.  Its z-quadratic part is -½S⁻¹ + ½Q + ½P = 0 identically;
        # its linear part is h - Pc and its constant part ½cᵀ(Pc - h): both vanish iff P c = h.
        z = sp.Matrix([sp.Dummy(f"z{i}", real=True) for i in range(k)])
        quad = (-sp.Rational(1, 2) * (z.T * Sinv * z)[0, 0] + sp.Rational(1, 2) * (z.T * Q * z)[0, 0]
                + sp.Rational(1, 2) * (z.T * P * z)[0, 0])
        lin = (P * c - h).applyfunc(lambda e: sp.cancel(sp.together(e)))
        residual = sp.expand(quad) + sum(abs(e) for e in lin)
    log_mass = -sp.Rational(1, 2) * sp.log((S * P).det()) + K
    return SquareCompletion(P=P, h=h, c=c, K=K, log_mass=log_mass, residual=residual)


@dataclass(frozen=True)
class GaussianEnergy:
    """Closed-form ``E(N(α, Σ))`` with its derivation artefacts."""

    d: int
    alpha: sp.Matrix
    Sigma: sp.Matrix
    A: sp.Matrix
    E: sp.Expr              # ½ det(I - ΣAᵀΣA)^{-1/2} exp(K)
    det_factor: sp.Expr     # det(I - ΣAᵀΣA): vanishes on the boundary ‖Σ^½AΣ^½‖ = 1
    exponent: sp.Expr       # K
    P: sp.Matrix            # joint precision S⁻¹ - Q, positive definite iff E < ∞
    residual: sp.Expr       # completing-the-square identity residual (0)


def gaussian_energy(A: sp.Matrix, alpha: sp.Matrix | None = None, Sigma: sp.Matrix | None = None) -> GaussianEnergy:
    """``E(N(α, Σ)) = ½ E[exp(yᵀAx)]``, integrating ``y`` then ``x`` (two ``d × d`` square completions).

    ``E_y[exp(yᵀAx)] = Z_μ(x) = exp(αᵀAx + ½xᵀAᵀΣAx)``; then ``E_x[Z_μ(x)]`` is the lemma with ``Q = AᵀΣA``,
    ``b = Aᵀα``: ``det(I - ΣAᵀΣA)^{-1/2} exp(K)``, ``K = ½ hᵀ(Σ⁻¹ - AᵀΣA)⁻¹h - ½ αᵀΣ⁻¹α``,
    ``h = (Σ⁻¹ + Aᵀ)α``.  :func:`gaussian_energy_joint` completes the square in ``z = (x, y)`` at once (an
    independent route; slower, 2d × 2d).
    """
    A = sp.Matrix(A)
    d = A.shape[0]
    if alpha is None or Sigma is None:
        alpha, Sigma = gaussian_symbols(d)
    sq = complete_square(alpha, Sigma, A.T * Sigma * A, A.T * alpha, check=True)
    det_factor = (sp.eye(d) - Sigma * A.T * Sigma * A).det()
    E = sp.Rational(1, 2) * det_factor ** sp.Rational(-1, 2) * sp.exp(sq.K)
    return GaussianEnergy(d, alpha, Sigma, A, E, det_factor, sq.K, sq.P, sq.residual)


def gaussian_energy_joint(A: sp.Matrix, alpha: sp.Matrix | None = None, Sigma: sp.Matrix | None = None,
                          check: bool = True) -> GaussianEnergy:
    """Same energy by completing the square in ``z = (x, y)``: ``S = diag(Σ, Σ)``, ``Q = [[0, Aᵀ], [A, 0]]``."""
    A = sp.Matrix(A)
    d = A.shape[0]
    if alpha is None or Sigma is None:
        alpha, Sigma = gaussian_symbols(d)
    S = sp.diag(Sigma, Sigma)
    Q = sp.zeros(2 * d, 2 * d)
    Q[:d, d:] = A.T
    Q[d:, :d] = A  # ½ zᵀQz = yᵀAx
    m = sp.Matrix.vstack(alpha, alpha)
    sq = complete_square(m, S, Q, sp.zeros(2 * d, 1), check=check)
    det_factor = (sp.eye(d) - Sigma * A.T * Sigma * A).det()
    E = sp.Rational(1, 2) * det_factor ** sp.Rational(-1, 2) * sp.exp(sq.K)
    return GaussianEnergy(d, alpha, Sigma, A, E, det_factor, sq.K, sq.P, sq.residual)


def first_variation_gaussian(A: sp.Matrix, alpha: sp.Matrix, Sigma: sp.Matrix, x: sp.Matrix) -> sp.Expr:
    """``Z_μ(x) = E_y[exp(yᵀ A x)]``, ``y ~ N(α, Σ)``, by the lemma with ``Q = 0``, ``b = Ax``."""
    d = A.shape[0]
    sq = complete_square(alpha, Sigma, sp.zeros(d, d), A * x, check=False)
    return sp.exp(sq.K)


def gaussian_tilt(A: sp.Matrix, alpha: sp.Matrix, Sigma: sp.Matrix) -> tuple[sp.Expr, sp.Matrix, sp.Matrix]:
    """``(log mass, m̃, Σ̃)`` of ``Z_μ(x) N(x; α, Σ)``, from the lemma with ``Q = AᵀΣA``, ``b = Aᵀα``."""
    sq = complete_square(alpha, Sigma, A.T * Sigma * A, A.T * alpha, check=False)
    return sq.log_mass, sq.c, _inv(sq.P)


def energy_finiteness_d1() -> dict[str, sp.Expr]:
    """``d = 1``: the joint precision ``P = [[1/s, -a], [-a, 1/s]]`` is positive definite iff ``a² s² < 1``.

    Returns the leading minors of ``P`` and ``det(I - SQ) = 1 - a²s²`` (the determinant factor of ``E``), so
    a caller can see that ``P ≻ 0 ⟺ |a| s < 1 ⟺ ‖Σ^½AΣ^½‖ < 1`` and that the factor goes through 0 at the
    boundary (``E ~ (1 - a²s²)^{-1/2} → ∞``).
    """
    a = sp.Symbol("a", real=True)
    s = sp.Symbol("s", positive=True)
    ge = gaussian_energy_joint(sp.Matrix([[a]]), sp.Matrix([sp.Symbol("alpha", real=True)]), sp.Matrix([[s]]))
    minors = [sp.simplify(ge.P[:k, :k].det()) for k in (1, 2)]
    return {"a": a, "s": s, "minor1": minors[0], "minor2": minors[1], "det_factor": sp.expand(ge.det_factor),
            "E": ge.E, "residual": ge.residual}
