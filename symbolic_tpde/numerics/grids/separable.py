"""Sub-quadratic velocity of the 2-D grid solver for exponential-quadratic heads (softmax, ℓ2, custom).

The direct velocity (:func:`.euclidean.weighted_field`) costs O(cells²): every query cell against every massive
cell.  For a head whose weight is ``exp(q(x)·y + β(y))`` with ``q`` linear in the query point ``x`` and keys ``y``
on the grid's tensor product ``y_ab = (y1_a, y2_b)`` (softmax: ``q = A x``, ``β = log m``; ℓ2: ``q = (2/τ) KᵀQ x``,
``β = -|K y|²/τ + log m``; custom: ``q = Bᵀ x``, ``β = yᵀRy + r·y + log m``), the attention average

    Γ(x) = Σ_ab w_ab(q) y_ab / Σ_ab w_ab(q),    w_ab(q) = exp(q1 y1_a + q2 y2_b + β_ab)

is computed as follows.  Coordinates are centred (``δ1 = y1 - ȳ1``, ``δ2 = y2 - ȳ2``, ``R2 = max|δ2|``; factors
common to all keys of one query cancel in the ratio).  The query coordinate ``q2`` is cut into intervals of
half-width ``h = ρ/R2`` (``ρ = RHO = 1``); on the interval with centre ``c`` (``u = q2 - c``, ``|u| ≤ h``)

    Σ_b w_ab ∝ e^{q1 δ1_a} e^{s_a} H_a(u),   H_a(u) = Σ_b G_ab e^{u δ2_b},   G_ab = e^{β_ab + c δ2_b - s_a}

with ``s_a = max_b (β_ab + c δ2_b)`` (so ``0 < G ≤ 1``, no overflow whatever the dynamic range over the box).
``H_a`` and ``Σ_b G_ab δ2_b e^{u δ2_b}`` are computed exactly (BLAS products) at the ``n`` Chebyshev nodes of
the interval and interpolated (barycentric formula) at each query's ``u``; the sum over ``a`` is then exact.
Cost: per interval ``O(N1 N2 n)``, per query ``O(N1 n)``: ``O(N^3)`` for ``N²`` cells instead of ``O(N^4)``.

Error bound (computed by :func:`error_bound`, returned with every evaluation).  Interpolating ``e^{λu}`` at ``n``
Chebyshev points of ``[-h, h]`` errs by at most ``h^n max|f^(n)| / (2^{n-1} n!) ≤ (|λ|h)^n e^{|λ|h} / (2^{n-1} n!)``,
and ``e^{λu} ≥ e^{-|λ|h}``, so each term's relative error is at most ``ε_n = ρ^n e^{2ρ} / (2^{n-1} n!)`` (``|λ| =
|δ2_b| ≤ R2``).  Interpolation is linear and every ``G_ab e^{uδ2_b}`` is positive, so ``H_a`` inherits the same
relative error; the numerators carry ``|δ_k|`` factors, so their absolute error is at most ``ε R_k`` times the
denominator, and ``|Γ̃_k - Γ_k| ≤ 2 ε R_k / (1 - ε)``.  Rounding adds, per node value, the linear bound
``(N1 + N2 + 4) u`` (u the unit roundoff, sums of positive terms), amplified by the Lebesgue constant of the
Chebyshev nodes (``≤ 2/π log n + 1``) and by ``e^{2ρ}`` (the ratio of the largest to the smallest ``e^{uδ}`` on
the interval): ``ε = ε_n + (2/π log n + 1) e^{2ρ} (N1 + N2 + 4) u``.  The node count is the smallest ``n`` with
``ε ≤ tol`` (``tol`` relative); a ``tol`` below the rounding term (about 1e-12 at 256² cells: a linear worst
case, far above what the sums actually lose) takes the nodes that bring ``ε_n`` down to that term and reports
the larger bound.  At ρ = 1, ``ε_n`` is 1.4e-6, 4.0e-9, 7.5e-12, 2.9e-13 at 8, 10, 12, 13 nodes.

Empty cells: rows and columns of the key grid without mass are cut off (exact: their weight is 0); the
query cells are the caller's (the massive cells and their stencil halo).  No mass is dropped, so the only
error is the interpolation's, bounded above.  The direct sum stays the reference path and serves every other
kind.  No SymPy here.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import InputError

__all__ = ["error_bound", "nodes_for", "separable_average", "covers", "weighted_field", "RHO", "KINDS",
           "MAX_NODES", "MIN_CELLS", "DEFAULT_TOL"]

#: ``(interval half-width in q2) × (key half-width in y2)``: each term's exponent varies by at most ρ per interval.
RHO = 1.0
MAX_NODES = 24
#: Default relative tolerance of :func:`.euclidean.solve_grid`'s separable velocity (13 nodes at 256²).
DEFAULT_TOL = 1e-12
#: Grids with fewer cells than this keep the direct sum (cheap there, and exact to round-off).
MIN_CELLS = 32 * 32
#: The kinds whose weight is exp(q(x)·y + β(y)) with the cell centres as values.
KINDS = ("softmax", "l2", "custom")


def _rounding(n: int, n1: int, n2: int, rho: float) -> float:
    lebesgue = 2 / math.pi * math.log(max(n, 1)) + 1
    return lebesgue * math.exp(2 * rho) * (n1 + n2 + 4) * np.finfo(float).eps / 2


def error_bound(n: int, n1: int = 0, n2: int = 0, rho: float = RHO) -> float:
    """Relative error bound ``ε`` of the interpolated key sums with ``n`` nodes for ``n1 × n2`` keys (module
    docstring): the interpolation remainder plus the rounding term."""
    return rho ** n * math.exp(2 * rho) / (2 ** (n - 1) * math.factorial(n)) + _rounding(n, n1, n2, rho)


def nodes_for(tol: float, n1: int = 0, n2: int = 0) -> int:
    """The smallest node count whose interpolation remainder is at most ``tol`` less the rounding term, or at
    most the rounding term when ``tol`` lies below it (more nodes cannot go lower: the bound then exceeds
    ``tol`` and is reported as it is); at most ``MAX_NODES``."""
    if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
        raise InputError("velocity_tol", f"must be a positive number, got {tol!r}")
    for n in range(2, MAX_NODES + 1):
        rnd = _rounding(n, n1, n2, RHO)
        if error_bound(n, n1, n2) - rnd <= max(tol - rnd, rnd):
            return n
    return MAX_NODES


def separable_average(Q: np.ndarray, y1: np.ndarray, y2: np.ndarray, logw: np.ndarray, tol: float):
    """``(Γ (nq, 2), bound (2,))``: ``Γ(q) = Σ w y / Σ w`` with ``w_ab = exp(q·(y1_a, y2_b) + logw_ab)``
    (``logw = -inf`` where there is no key) at the rows of ``Q (nq, 2)``, and the bound on ``|Γ̃_k - Γ_k|``."""
    from ..particles.attend import _blas_enter, _blas_exit

    _blas_enter()  # one BLAS thread: OpenBLAS's threaded gemm sums in another order (bits would vary) and was
    try:           # slower here (0.8-3.6x instead of 13x at 128², PERF_NOTES)
        return _separable_average(np.asarray(Q, dtype=float), y1, y2, logw, tol)
    finally:
        _blas_exit()


def _separable_average(Q, y1, y2, logw, tol):
    finite = np.isfinite(logw)
    rows, cols = np.flatnonzero(finite.any(axis=1)), np.flatnonzero(finite.any(axis=0))
    if rows.size == 0:
        raise InputError("masses", "no cell carries mass")
    cols = np.arange(cols[0], cols[-1] + 1)
    y1, y2, logw = y1[rows], y2[cols], logw[np.ix_(rows, cols)]
    c1, c2 = (y1.max() + y1.min()) / 2, (y2.max() + y2.min()) / 2
    d1, d2 = y1 - c1, y2 - c2
    R1, R2 = float(np.abs(d1).max()), float(np.abs(d2).max())
    n1, n2 = len(rows), len(cols)
    n = nodes_for(tol, n1, n2) if R2 > 0 else 1
    eps = error_bound(n, n1, n2) if R2 > 0 else 0.0
    h = RHO / R2 if R2 > 0 else 1.0
    k = np.arange(n)
    u_nodes = h * np.cos((2 * k + 1) * np.pi / (2 * n))
    bary = (-1.0) ** k * np.sin((2 * k + 1) * np.pi / (2 * n))
    E = np.exp(d2[:, None] * u_nodes[None, :])               # (n2, n): e^{u_k δ2_b}
    ED = np.concatenate([E, E * d2[:, None]], axis=1)         # with the y2 numerator's δ2_b factor
    q1, q2 = Q[:, 0], Q[:, 1]
    lo = float(q2.min())
    idx = np.floor((q2 - lo) / (2 * h)).astype(np.int64)
    out = np.empty((Q.shape[0], 2))
    order = np.argsort(idx, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(idx[order]) != 0])
    ends = np.r_[starts[1:], len(order)]
    for s0, s1 in zip(starts, ends):
        sel = order[s0:s1]
        c = lo + (idx[sel[0]] + 0.5) * 2 * h
        L = logw + c * d2[None, :]
        s = L.max(axis=1)
        G = np.exp(L - s[:, None])                             # 0 < G <= 1 (0 where no key)
        H = G @ ED                                             # (n1, 2n): node values of H_a and its δ2 sum
        u = q2[sel] - c
        diff = u[:, None] - u_nodes[None, :]
        hit = diff == 0
        with np.errstate(divide="ignore", invalid="ignore"):
            Wb = bary[None, :] / diff
        if hit.any():                                          # a query exactly at a node: that node's value
            r = hit.any(axis=1)
            Wb[r] = hit[r].astype(float)
        Wb /= Wb.sum(axis=1, keepdims=True)
        Hq = Wb @ H[:, :n].T                                   # (nI, n1) interpolated H_a(u)
        H2q = Wb @ H[:, n:].T
        ex = q1[sel, None] * d1[None, :] + s[None, :]
        P = np.exp(ex - ex.max(axis=1, keepdims=True))
        D = np.einsum("ia,ia->i", P, Hq)
        out[sel, 0] = c1 + (P * Hq) @ d1 / D
        out[sel, 1] = c2 + np.einsum("ia,ia->i", P, H2q) / D
    bound = np.array([2 * eps * R1, 2 * eps * R2]) / (1 - eps)
    return out, bound


def covers(weights, grid) -> bool:
    """Whether every head of ``weights`` is one of :data:`KINDS` on a 2-D grid of at least :data:`MIN_CELLS`."""
    return grid.d == 2 and int(np.prod(grid.shape)) >= MIN_CELLS and all(h.kind in KINDS for h in weights.heads)


def _head_terms(head, Y: np.ndarray, logm: np.ndarray):
    """``(M, logw)`` of one head: the query map ``q = x Mᵀ`` ... as ``Xq @ M`` and the key log-weights on the grid
    (``Y (N1, N2, 2)`` the cell centres, ``logm`` the log masses)."""
    p = head.effective
    if head.kind == "softmax":
        return p["A"].T, logm
    if head.kind == "l2":
        K = p["K"]
        k = Y @ K.T
        return (2.0 / p["tau"]) * p["Q"].T @ K, logm - np.einsum("abi,abi->ab", k, k) / p["tau"]
    if head.kind == "custom":
        return p["B"], logm + np.einsum("abi,abi->ab", Y @ p["R"].T, Y) + Y @ p["r"]
    raise ValueError(f"kind {head.kind!r} is not separable")


def weighted_field(Xq: np.ndarray, grid, m: np.ndarray, weights, tol: float):
    """The velocity of :func:`.euclidean.weighted_field` at the rows of ``Xq`` for the measure with masses
    ``m (N1, N2)`` at the centres of ``grid``, through :func:`separable_average` per head; returns
    ``(u (nq, 2), bound)`` with ``bound`` the largest absolute error per component the heads' bounds allow
    (each head's bound times its ``|V|`` rows, summed over heads)."""
    e1, e2 = grid.edges
    y1, y2 = (e1[1:] + e1[:-1]) / 2, (e2[1:] + e2[:-1]) / 2
    Y = np.stack(np.meshgrid(y1, y2, indexing="ij"), axis=-1)
    with np.errstate(divide="ignore"):
        logm = np.log(np.asarray(m, dtype=float))
    Xq = np.ascontiguousarray(Xq, dtype=float)
    out = np.zeros_like(Xq)
    bound = np.zeros(2)
    for head in weights.heads:
        M, logw = _head_terms(head, Y, logm)
        avg, b = separable_average(Xq @ M, y1, y2, logw, tol)
        V = head.effective["V"]
        out += avg @ V.T
        bound += np.abs(V) @ b
    if weights.ffn is not None:
        out += Xq @ weights.ffn.W.T + weights.ffn.c
    return out, bound
