"""Log-domain, row-blocked Sinkhorn for the Sinkhorn-attention particle field (README Mathematics §2).

The entropic plan of the empirical measure ``μ = (1/n) Σ δ_{x_i}`` with itself for the cost ``-<A x, y>`` and
regularisation ``ε`` is ``π_ij = P_ij / n`` with

    ``P_ij = exp(L_ij + f_i + g_j)``,   ``L_ij = <A x_i, x_j> / ε = x_jᵀ A x_i / ε``,

where the potentials ``f, g`` make every row *and* every column of ``P`` sum to 1 (marginals ``1/n`` of
``π``).  Sinkhorn's iteration in the log domain alternates

    ``f_i = -log Σ_j exp(L_ij + g_j)``   (rows exact),   ``g_j = -log Σ_i exp(L_ij + f_i)``   (columns exact).

Each half-step is a blocked log-sum-exp over row blocks (memory ``O(n · block)``, never the ``n x n``
matrix).  Stopping rule: after a row update the rows sum to 1 up to round-off, and the column sums are
``c_j = exp(g_j + lse_i(L_ij + f_i))``; we stop when ``max_j |c_j - 1| < tol`` and *keep that* ``g``, so
the reported marginal error is the true one of the plan that is used.  Non-convergence within ``max_iter``
raises :class:`ConvergenceError` (or is returned in :class:`SinkhornInfo` with ``converged=False`` when the
caller asks for the info instead).  The field is then ``Γ(x_i) = V Σ_j P_ij x_j``: a softmax with key bias
``g_j``, evaluated by :func:`fields_core.attend`.

Tolerance floor: a marginal error below ``64·eps(dtype)`` cannot be certified by sums of ``n`` terms in that
dtype, so the effective tolerance is ``max(tol, 64·eps)`` (1.4e-14 in float64, 7.6e-6 in float32) and is
reported in the info.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ConvergenceError
from ...inputs.checks import positive_int, positive_number
from .attend import _blas_enter, _blas_exit, _check_block, as_matrix, as_points
from ..linalg import logsumexp_rows


@dataclass(frozen=True)
class SinkhornInfo:
    """Outcome of a Sinkhorn solve: potentials ``f, g`` (``P_ij = exp(L_ij + f_i + g_j)``) and diagnostics."""

    converged: bool
    iterations: int
    marginal_error: float  # max_j |Σ_i P_ij - 1| with rows exact (up to round-off)
    tol: float  # effective tolerance (after the dtype floor)
    f: np.ndarray
    g: np.ndarray
    overflow: bool = False  # the logits or potentials left the floats: the state is too large (a blow-up)


def lse_rows(q: np.ndarray, k: np.ndarray, bias: np.ndarray, block: int) -> np.ndarray:
    """``out_i = log Σ_j exp(q_i·k_j + bias_j)``, stable (row maximum subtracted), over row blocks."""
    n_q = q.shape[0]
    kT = np.ascontiguousarray(k.T)
    out = np.empty(n_q, dtype=q.dtype)
    _blas_enter()  # single-threaded BLAS in this thread (see fields_core)
    try:
        for lo in range(0, n_q, block):
            L = q[lo:lo + block] @ kT
            L += bias
            out[lo:lo + block] = logsumexp_rows(L)
    finally:
        _blas_exit()
    return out


def _validate(epsilon: float, tol: float, max_iter: int) -> None:
    positive_number(epsilon, "epsilon")
    positive_number(tol, "tol")
    positive_int(max_iter, "max_iter")


def sinkhorn_potentials(X: np.ndarray, A: np.ndarray, epsilon: float = 1.0, *, tol: float = 1e-9,
                        max_iter: int = 10_000, g0: np.ndarray | None = None, block: int | None = None,
                        dtype=None) -> SinkhornInfo:
    """Solve for the potentials of the self-transport plan of the cloud ``X`` (module docstring).

    ``g0`` warm-starts the column potential (e.g. from the previous time step); the result never depends
    on it beyond the tolerance.  Returns a :class:`SinkhornInfo`; never raises on non-convergence.
    """
    X = as_points(X, dtype)
    n, d = X.shape
    dt = X.dtype
    A = as_matrix(A, (d, d), dt, "A")
    _validate(float(epsilon), float(tol), max_iter)
    block = _check_block(block, n, d)
    tol_eff = max(float(tol), 64 * float(np.finfo(dt).eps))
    q = (X @ A.T) / dt.type(epsilon)  # row i: (A x_i)ᵀ / ε, so L = q Xᵀ
    g = np.zeros(n, dtype=dt) if g0 is None or np.shape(g0) != (n,) else np.array(g0, dtype=dt)
    if not np.isfinite(g).all():
        g = np.zeros(n, dtype=dt)
    err = np.inf
    f = g
    if not np.isfinite(q).all():             # the state overflowed: no iteration can help
        return SinkhornInfo(False, 0, np.inf, tol_eff, np.full(n, np.nan, dt), g, overflow=True)
    for it in range(1, int(max_iter) + 1):
        with np.errstate(over="ignore", invalid="ignore"):
            f = -lse_rows(q, X, g, block)        # rows of P sum to 1
            lse_col = lse_rows(X, q, f, block)   # log Σ_i exp(L_ij + f_i)
        if not (np.isfinite(f).all() and np.isfinite(lse_col).all()):
            return SinkhornInfo(False, it, np.inf, tol_eff, f, g, overflow=True)
        err = float(np.max(np.abs(np.expm1(g + lse_col))))
        if err < tol_eff:
            return SinkhornInfo(True, it, err, tol_eff, f, g)
        g = -lse_col                         # columns of P sum to 1
    return SinkhornInfo(False, int(max_iter), err, tol_eff, f, g)


def sinkhorn_plan(X: np.ndarray, A: np.ndarray, epsilon: float = 1.0, **kwargs) -> tuple[np.ndarray, SinkhornInfo]:
    """Dense ``P`` (``n x n``, rows and columns summing to 1; plan ``π = P / n``) for small ``n``, and the info.

    Intended for tests and diagnostics; the field itself never forms this matrix.
    """
    info = sinkhorn_potentials(X, A, epsilon, **kwargs)
    X = as_points(X, kwargs.get("dtype"))
    A = np.asarray(A, dtype=X.dtype)
    L = (X @ A.T) @ X.T / X.dtype.type(epsilon)
    return np.exp(L + info.f[:, None] + info.g[None, :]), info


def raise_if_not_converged(info: SinkhornInfo, where: str = "sinkhorn") -> None:
    """:class:`ConvergenceError` when the iteration ran out of steps; an overflow is not a convergence
    problem (the caller's field is non-finite, which the integrators report as a blow-up with its time)."""
    if not info.converged and not info.overflow:
        raise ConvergenceError(where, f"marginal error {info.marginal_error:.3g} > tol {info.tol:.3g} after "
                                      f"{info.iterations} iterations (raise max_iter or epsilon)")
