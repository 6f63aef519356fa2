"""The ``"numeric-matrix"`` backend: Sinkhorn heads at ``d >= 3`` by their numeric closed form.

The Gaussian cross-covariance of the entropic self-plan needs a matrix square root, which has no entrywise
closed form above ``d = 2``.  Numerically (eigen-decompositions only, ``A`` need not be invertible):
``Cᵀ = 2 Σ A_ε Σ^{1/2} (S + I)^{-1} Σ^{1/2}``, ``A_ε = A/ε``, ``S = (I + 4M)^{1/2}``,
``M = Σ^{1/2} A_εᵀ Σ A_ε Σ^{1/2}`` -- the paper's ``Cᵀ = ½ A^{-ᵀ}(Σ^{-1/2}(I + 4M)^{1/2}Σ^{1/2} - I)``
(Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §3) rewritten with ``S - I = 4M(S + I)^{-1}``.  A Sinkhorn
head contributes ``Vα`` to ``dα/dt`` and ``VCᵀ + CVᵀ`` to ``dΣ/dt``.

Head contributions add, so a weights set with Sinkhorn heads and other heads is the sum of this numeric part
and the generated right-hand side of the other heads (and FFN), derived and compiled as usual: the backend
has the same ``f(t, y, p)``, ``jac``, ``batch`` signatures as the generated backends (:mod:`symbolic_tpde.codegen.compile`).  Parameter vector:
the other heads' parameters first (their system's layout), then per Sinkhorn head ``A`` (row-major), ``V``,
``epsilon``, then the feed-forward ``W`` (row-major) and ``c`` when there is one (``Wα + c`` and
``WΣ + ΣWᵀ``).
"""

from __future__ import annotations

import numpy as np

from ...codegen.warm import ParamLayout
from ...registry import layout
from ..linalg import sqrtm_psd


def sinkhorn_cross_cov(A: np.ndarray, Sigma: np.ndarray, epsilon: float = 1.0) -> np.ndarray:
    """``Cᵀ`` of the Gaussian entropic self-plan (module docstring), by eigen-decompositions only.

    Scale-free: with ``Σ = sΣ̂`` (``s = tr Σ``), ``M = s²M̂`` and ``√(I + 4M) + I = s(√(s⁻²I + 4M̂) + s⁻¹I)``, so
    ``Cᵀ = s·2Σ̂A_εR̂(√(s⁻²I + 4M̂) + s⁻¹I)⁻¹R̂`` (``R̂ = Σ̂^{1/2}``, ``M̂ = R̂A_εᵀΣ̂A_εR̂``): no product of four
    ``Σ`` factors, which would overflow from ``tr Σ ~ 1e77``."""
    Sigma = np.asarray(Sigma, dtype=float)
    s = float(np.trace(Sigma))
    if not (np.isfinite(s) and s > 0):
        s = 1.0
    Sh = Sigma / s
    Ae = np.asarray(A, dtype=float) / epsilon
    R = sqrtm_psd(Sh)
    M = R @ Ae.T @ Sh @ Ae @ R
    M = 0.5 * (M + M.T)
    w, U = np.linalg.eigh(M)
    u = 1.0 / s
    inv = (U / (np.sqrt(u * u + 4.0 * np.clip(w, 0.0, None)) + u)) @ U.T
    return s * (2.0 * Sh @ Ae @ R @ inv @ R)


class NumericMatrixRHS:
    """``f(t, y, p)`` = generated rhs of the other heads (``rest``, a CompiledRHS or None) + Sinkhorn heads.

    The same shape as the generated backends' :class:`~symbolic_tpde.codegen.warm.CompiledRHS`: ``f``,
    ``batch``, ``jac``, ``n_states``, ``n_params``, ``system`` (the other heads' system, or ``None``),
    ``param_layout`` (blocks filled from the weights by :func:`symbolic_tpde.gaussian.pack_params`: the other
    heads' blocks under their indices among all ``heads``, then per Sinkhorn head ``("effective", h, name)``
    for ``A``, ``V``, ``epsilon``, then ``("ffn", "W")``, ``("ffn", "c")``).  ``heads``: indices of the Sinkhorn
    heads among all heads; ``others``: indices of the heads of ``rest``.
    """

    backend = "numeric-matrix"
    key = None       # no generated code: nothing for the warm cache

    def __init__(self, d: int, heads: tuple[int, ...], rest=None, others: tuple[int, ...] = (), ffn: bool = False):
        self.d, self.n_sinkhorn, self.rest, self.ffn = d, len(heads), rest, ffn
        self.n_states = layout.state_size(d)
        self.n_rest = 0 if rest is None else rest.n_params
        Block = ParamLayout.Block
        blocks = [] if rest is None else [
            Block(("heads", others[b.key[1]], *b.key[2:]) if b.key[0] == "heads" else b.key, b.shape, b.offset)
            for b in rest.param_layout]
        k = self.n_rest
        for h in heads:
            for name, shape in (("A", (d, d)), ("V", (d, d)), ("epsilon", ())):
                blocks.append(Block(("effective", h, name), shape, k))
                k += blocks[-1].size
        if ffn:
            blocks += [Block(("ffn", "W"), (d, d), k), Block(("ffn", "c"), (d,), k + d * d)]
            k += d * d + d
        self.param_layout, self.n_params = tuple(blocks), k
        self.system = None if rest is None else rest.system
        self.source = "numeric closed form (eigen-decompositions); see symbolic_tpde/numerics/ode/numeric_matrix.py"

    def __repr__(self) -> str:
        return (f"NumericMatrixRHS(d={self.d}, sinkhorn heads={self.n_sinkhorn}, other heads="
                f"{'none' if self.rest is None else self.rest!r}, ffn={self.ffn})")

    def _split(self, p):
        p = np.asarray(p, dtype=float)
        if p.shape[-1] != self.n_params:
            raise ValueError(f"expected p of size {self.n_params}, got {p.shape[-1]}")
        d, k = self.d, self.n_rest
        heads = []
        for _ in range(self.n_sinkhorn):
            A = p[k:k + d * d].reshape(d, d)
            V = p[k + d * d:k + 2 * d * d].reshape(d, d)
            heads.append((A, V, float(p[k + 2 * d * d])))
            k += 2 * d * d + 1
        ffn = (p[k:k + d * d].reshape(d, d), p[k + d * d:k + d * d + d]) if self.ffn else None
        return p[:self.n_rest], heads, ffn

    def f(self, t, y, p) -> np.ndarray:
        prest, heads, ffn = self._split(p)
        y = np.asarray(y, dtype=float)
        alpha, Sigma = layout.unpack(y, self.d)
        da = np.zeros(self.d)
        dS = np.zeros((self.d, self.d))
        for A, V, eps in heads:
            VCt = V @ sinkhorn_cross_cov(A, Sigma, eps)
            da += V @ alpha
            dS += VCt + VCt.T
        if ffn is not None:
            W, c = ffn
            WS = W @ Sigma
            da += W @ alpha + c
            dS += WS + WS.T
        out = layout.pack(da, dS)
        if self.rest is not None:
            out = out + self.rest.f(t, y, prest)
        return out

    __call__ = f

    def jac(self, t, y, p) -> np.ndarray:
        """Central differences, step ``h = ε^{1/3} max(1, |y_j|)`` (error ``O(h²)`` ≈ 1e-10 relative)."""
        y = np.asarray(y, dtype=float)
        n = y.shape[0]
        out = np.empty((n, n))
        for j in range(n):
            h = np.finfo(float).eps ** (1 / 3) * max(1.0, abs(y[j]))
            e = np.zeros(n)
            e[j] = h
            out[:, j] = (self.f(t, y + e, p) - self.f(t, y - e, p)) / (2 * h)
        return out

    def batch(self, t, Y, P) -> np.ndarray:
        """Row loop (the matrix square roots are per state)."""
        Y = np.asarray(Y, dtype=float)
        P = np.asarray(P, dtype=float)
        tt = np.asarray(t, dtype=float)
        lead = np.broadcast_shapes(Y.shape[:-1], P.shape[:-1], tt.shape)
        Yb = np.broadcast_to(Y, lead + (self.n_states,)).reshape(-1, self.n_states)
        Pb = np.broadcast_to(P, lead + (self.n_params,)).reshape(-1, self.n_params)
        Tb = np.broadcast_to(tt, lead).reshape(-1)
        out = np.array([self.f(Tb[i], Yb[i], Pb[i]) for i in range(Yb.shape[0])]).reshape(lead + (self.n_states,))
        return out
