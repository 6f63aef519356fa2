"""Interaction energy of the n-particle restriction and the gradient-flow identity, symbolically (README Mathematics §5).

``E_n(X) = (1/2n²) Σ_ij exp(<A x_i, x_j>)``, ``<A x, y> = yᵀ A x``; first variation ``Z_i = (1/n) Σ_j e_ij``;
twisted metric ``g_X(U, W) = (1/n) Σ_i Z_i <u_i, G w_i>``, ``G = -A V⁻¹`` (:mod:`.metric`).

Gradient-flow identity (proved in :func:`gradient_identity` for explicit ``n, d`` and in
``derivations/gradient_flow.py`` for general ``n, d``): for symmetric ``A`` and ``G`` SPD, the metric
gradient ``grad E = g⁻¹ ∂E`` equals ``-Γ``, ``Γ_i = Σ_j softmax_j(<A x_i, x_j>) V x_j``:

    ∂_{x_k} E = (1/2n²)[Σ_j e_kj Aᵀx_j + Σ_i e_ik A x_i] = (1/n²) Σ_j e_kj A x_j        (A = Aᵀ)
    (grad E)_k = (n/Z_k) G⁻¹ ∂_{x_k} E = -(1/(n Z_k)) V A⁻¹ A Σ_j e_kj x_j = -Γ_k.

Hence the softmax flow ``Ẋ = Γ = -grad E`` dissipates ``E``: ``dE/dt = g(grad E, Γ) = -g(Γ, Γ) ≤ 0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy as sp

from .metric import exact_matrix, particle_metric, particle_symbols, twisted_G

__all__ = ["ParticleEnergy", "particle_energy", "softmax_field", "gradient_identity", "general_gradient_lemma"]


@dataclass(frozen=True)
class ParticleEnergy:
    """Symbolic n-particle energy: ``X`` (n × d symbols), ``coords = vec X`` (row-major), ``E``, ``Z``, metric."""

    n: int
    d: int
    A: sp.Matrix
    V: sp.Matrix
    G: sp.Matrix
    X: sp.Matrix
    coords: tuple[sp.Symbol, ...]
    E: sp.Expr
    Z: tuple[sp.Expr, ...]
    g: sp.Matrix
    ginv: sp.Matrix

    def pair(self, i: int, j: int) -> sp.Expr:
        """``<A x_i, x_j> = x_jᵀ A x_i``."""
        return (self.X[j, :] * self.A * self.X[i, :].T)[0, 0]


def particle_energy(n: int, d: int, A: Any, V: Any, name: str = "x") -> ParticleEnergy:
    """Build ``E_n``, ``Z_i`` and the twisted metric for explicit ``n``, ``d`` (``G`` checked SPD)."""
    A = exact_matrix(A, "A", d)
    V = exact_matrix(V, "V", d)
    G = twisted_G(A, V)
    X = particle_symbols(n, d, name)
    e = [[sp.exp((X[j, :] * A * X[i, :].T)[0, 0]) for j in range(n)] for i in range(n)]
    E = sp.Add(*[e[i][j] for i in range(n) for j in range(n)]) / (2 * n * n)
    Z = tuple(sp.Add(*e[i]) / n for i in range(n))
    g, ginv = particle_metric(list(Z), G)
    return ParticleEnergy(n, d, A, V, G, X, tuple(X), E, Z, g, ginv)


def softmax_field(pe: ParticleEnergy) -> sp.Matrix:
    """``Γ_i = Σ_j e_ij V x_j / Σ_j e_ij`` as an ``n × d`` matrix of expressions."""
    rows = []
    for i in range(pe.n):
        w = [sp.exp(pe.pair(i, j)) for j in range(pe.n)]
        num = sum((w[j] * (pe.V * pe.X[j, :].T) for j in range(pe.n)), sp.zeros(pe.d, 1))
        rows.append((num / sp.Add(*w)).T)
    return sp.Matrix.vstack(*rows)


def gradient_identity(pe: ParticleEnergy) -> sp.Matrix:
    """``grad E + Γ`` (``n × d``), simplified entrywise: the zero matrix when ``A`` is symmetric.

    ``grad E = g⁻¹ ∂E`` with ``∂E`` from :func:`sympy.diff` of ``E_n`` (no hand-written gradient).
    """
    dE = sp.Matrix([sp.diff(pe.E, c) for c in pe.coords])
    grad = (pe.ginv * dE).reshape(pe.n, pe.d)
    return (grad + softmax_field(pe)).applyfunc(lambda e: sp.simplify(sp.together(e)))


def general_gradient_lemma() -> dict[str, Any]:
    """Any ``d``, with ``MatrixSymbol``s: ``∇_x exp(yᵀAx) = exp(yᵀAx) Aᵀy`` and ``∇_y = exp(yᵀAx) A x``.

    SymPy's matrix calculus gives the gradients of the bilinear form ``yᵀAx`` for symbolic dimension ``d``;
    the chain rule through ``exp`` multiplies by the kernel value.  Returns the two gradients.
    """
    dd = sp.Symbol("d", integer=True, positive=True)
    x = sp.MatrixSymbol("x", dd, 1)
    y = sp.MatrixSymbol("y", dd, 1)
    A = sp.MatrixSymbol("A", dd, dd)
    form = y.T * A * x
    return {"d": dd, "x": x, "y": y, "A": A, "grad_x": form.diff(x), "grad_y": form.diff(y)}
