"""The one Gaussian state layout: ``y = (α_0, …, α_{d-1}, Σ_00, Σ_01, …, Σ_0,d-1, Σ_11, …)``.

The mean first, then the upper triangle of the covariance row by row.  Every flat Gaussian state in the package
(moment ODEs, generated code, batched integrators, blow-up monitors, the Gaussian energy) uses this layout and
these names; the SymPy symbols are built from :func:`state_names` by
:func:`symbolic_tpde.symbolic.moments.gaussian_symbols` (real symbols ``alpha_i``, ``Sigma_i_j``, ``i <= j``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

__all__ = ["state_size", "state_names", "state_index", "diag_positions", "pack", "unpack", "trace_weights",
           "gaussian_size", "symmetric_rows"]


def state_size(d: int) -> int:
    return d + d * (d + 1) // 2


def state_index(d: int) -> list[tuple[str, tuple[int, ...]]]:
    """``[("alpha", (i,)), …, ("Sigma", (i, j)) for i <= j]`` in layout order."""
    out: list[tuple[str, tuple[int, ...]]] = [("alpha", (i,)) for i in range(d)]
    out += [("Sigma", (i, j)) for i in range(d) for j in range(i, d)]
    return out


def state_names(d: int) -> list[str]:
    """Symbol names in layout order: ``alpha_0 … alpha_{d-1}``, ``Sigma_0_0, Sigma_0_1, …``."""
    return [f"{n}_{'_'.join(map(str, ix))}" for n, ix in state_index(d)]


def symmetric_rows(tail, d: int) -> list[list]:
    """The covariance part of a state (its packed upper triangle ``tail``, in layout order) as a symmetric
    ``d × d`` nested list; any entries (SymPy expressions, strings): the symbolic counterpart of :func:`unpack`."""
    rows: list[list] = [[None] * d for _ in range(d)]
    for (_, (i, j)), v in zip(state_index(d)[d:], tail, strict=True):
        rows[i][j] = rows[j][i] = v
    return rows


@lru_cache(maxsize=None)
def _triu(d: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(d)``, made once per ``d`` (pack/unpack sit on right-hand-side hot paths); read-only."""
    iu = np.triu_indices(d)
    for a in iu:
        a.flags.writeable = False
    return iu


def diag_positions(d: int, with_alpha: bool = True) -> np.ndarray:
    """Positions of ``Σ_ii`` in the flat state (or in the packed triangle alone when ``with_alpha=False``)."""
    iu = _triu(d)
    return np.nonzero(iu[0] == iu[1])[0] + (d if with_alpha else 0)


def trace_weights(d: int, with_alpha: bool = True) -> np.ndarray:
    """``w`` with ``w · y = tr Σ``."""
    w = np.zeros(state_size(d) if with_alpha else d * (d + 1) // 2)
    w[diag_positions(d, with_alpha)] = 1.0
    return w


def pack(alpha, Sigma) -> np.ndarray:
    """Flat state from ``alpha (..., d)`` and ``Sigma (..., d, d)`` (leading batch axes allowed)."""
    a = np.asarray(alpha, dtype=float)
    S = np.asarray(Sigma, dtype=float)
    d = a.shape[-1] if a.ndim else 1
    if a.ndim == 0:
        a = a.reshape(1)
    if S.shape[-2:] != (d, d):
        raise ValueError(f"Sigma: expected shape (..., {d}, {d}), got {S.shape}")
    iu = _triu(d)
    lead = np.broadcast_shapes(a.shape[:-1], S.shape[:-2])
    a = np.broadcast_to(a, lead + (d,))
    tri = np.broadcast_to(S[..., iu[0], iu[1]], lead + (len(iu[0]),))
    return np.concatenate([a, tri], axis=-1)


def unpack(y, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack`; works on a leading batch axis too (``y`` of shape ``(..., n)``)."""
    y = np.asarray(y, dtype=float)
    n = state_size(d)
    if y.shape[-1] != n:
        raise ValueError(f"state of length {y.shape[-1]} does not match d = {d} (expected {n})")
    alpha = y[..., :d].copy()
    Sigma = np.zeros(y.shape[:-1] + (d, d))
    iu = _triu(d)
    Sigma[..., iu[0], iu[1]] = y[..., d:]
    Sigma[..., iu[1], iu[0]] = y[..., d:]
    return alpha, Sigma


def gaussian_size(d: int) -> tuple[Callable, Callable]:
    """``r = tr Σ + |α|²`` and ``dr/dt = tr(dΣ/dt) + 2α·dα/dt`` for the Gaussian layout (covers linear
    attention, where the mean can blow up together with the covariance); one state ``(n,)`` or rows ``(m, n)``
    (the batched blow-up monitor, :meth:`symbolic_tpde.numerics.ode.solve.BlowupMonitor.rows`)."""
    w = trace_weights(d)

    def size(y):
        return y @ w + np.sum(y[..., :d] ** 2, axis=-1)

    def dsize(y, fy):
        return fy @ w + 2 * np.sum(y[..., :d] * fy[..., :d], axis=-1)

    return size, dsize
