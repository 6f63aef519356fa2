"""Finite-time blow-up: detect it, locate it, bound the error, never overflow.

The method (level crossings of a positive size ``r = size(y)``, the quotient ``q = r/(dr/dt) = (T* - t)/p``
affine near a power-law singularity, extrapolation ``T_k = t_{k+1} + p_k q_{k+1}``, the error bar = the
extrapolation spread ``|T_K - T_{K-1}|`` + the difference to a second run at 100x looser tolerance, the
statuses ``"ok"``, ``"blowup"``, ``"overflow"`` (exponential growth past ``r₀·overflow``, no singularity
signature) and ``"stalled"`` (more than ``max_nfev`` evaluations or a collapsed step size)) lives in
:mod:`symbolic_tpde.numerics.solve`, the package's one integrator entry point; its docstring carries the maths.
For the softmax Riccati equation ``Σ = M/τ + N + O(τ)`` (``τ = T* - t``), so ``p = 1`` and
``T_k - T* = O(τ_k τ_{k+1})``: far below round-off at the last levels.

This module keeps the historical front ends: :func:`integrate_blowup` (scipy's DOP853 through
:func:`~symbolic_tpde.numerics.solve.integrate`), :func:`extrapolate`, and :func:`batch_blowup_times` for rows
stopped by :func:`~.batch.trace_monitor`: they are continued by two more decades with the batched Dormand-Prince
routine (:mod:`symbolic_tpde.numerics.rk`) to get two ``(t, q)`` pairs per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from ..registry.layout import trace_weights
from ..numerics.solve import BlowupMonitor, as_monitor, extrapolate, integrate

__all__ = ["BlowupResult", "extrapolate", "integrate_blowup",
           "batch_blowup_times", "extrapolate_pairs"]


@dataclass
class BlowupResult:
    status: str                        # "ok" | "blowup" | "overflow" | "stalled" (a solve.Status)
    t: float                           # last time reached
    y: np.ndarray                      # state there
    blowup_time: float | None = None
    blowup_time_error: float | None = None
    exponent: float | None = None      # fitted p in r ~ (T* - t)^{-p}
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (t_k, r_k, q_k)
    message: str = ""


def integrate_blowup(f: Callable, y0, T: float, w, *, t0: float = 0.0, rtol: float = 1e-12,
                     atol: float | None = None, levels: Sequence[float] = tuple(10.0 ** np.arange(3, 11)),
                     breakpoints: Sequence[float] = (), overflow: float = 1e200,
                     error_run: bool = True, max_nfev: int = 500_000) -> BlowupResult:
    """Integrate ``y' = f(t, y)`` on ``[t0, T]``; report a finite-time blow-up of ``r = w·y`` with error bound.

    ``w``: weights of a linear size ``r = w·y`` or a pair ``(size(y), dsize(y, f(t, y)))`` such as
    :func:`gaussian_size`.  ``breakpoints``: times where the right-hand side jumps (layer boundaries); integration
    restarts there.  ``error_run``: also integrate at ``100·rtol`` to bound the integration error of the blow-up
    time.  ``max_nfev``: right-hand-side evaluations allowed per pass; beyond it the status is ``"stalled"``
    (state and time where the integrator gave up), never an endless loop.  Runs
    :func:`symbolic_tpde.numerics.solve.integrate` with ``method="DOP853"``.
    """
    y0 = np.asarray(y0, float)
    if not (np.isfinite(T) and T > t0):
        raise InputError("T", f"must be finite and > {t0}, got {T}")
    m = as_monitor(w)
    if not m.size(y0) > 0:
        raise InputError("Sigma0", "the monitored size w·y0 must be positive")
    mon = BlowupMonitor(m.size, m.dsize, tuple(levels), overflow, error_run)
    sol = integrate(f, y0, (t0, T), method="DOP853", rtol=rtol, atol=atol, breakpoints=breakpoints, blowup=mon,
                    max_nfev=max_nfev)
    return BlowupResult(sol.status, sol.t_end, sol.y_end, sol.blowup_time, sol.blowup_time_error, sol.exponent,
                        sol.samples, sol.message)


def batch_blowup_times(F: Callable, t: np.ndarray, Y: np.ndarray, w: np.ndarray, *, args: Sequence = (),
                       decades: float = 2.0, rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Refine blow-up times of rows stopped at a size threshold (batched).

    Continues each row from its own time with :func:`symbolic_tpde.numerics.rk.rk_solve` (Dormand-Prince) until
    ``r = w·y`` grows by ``10**decades`` and extrapolates from the two ``(t, q)`` pairs.  Returns ``(T*, p, err)``;
    ``err = |T* - t_last|`` bounds the extrapolation error conservatively (the true error is ``O(τ₁τ₂)``).
    """
    from ..numerics.rk import BLOWUP, rk_solve

    Y = np.asarray(Y, float)
    t = np.asarray(t, float)
    r1 = Y @ w
    q1 = r1 / (np.asarray(F(t, Y, *args)) @ w)
    target = r1 * 10.0 ** decades

    def mon(acc):
        return np.where(acc.y1 @ w > target[acc.rows], BLOWUP, 0)

    horizon = t + 10 * np.abs(q1) + 1e-300
    res = rk_solve(F, t, Y, horizon, rtol=rtol, atol=1e-300, args=args, max_steps=5000, monitor=mon)
    r2 = res.y @ w
    q2 = r2 / (np.asarray(F(res.t, res.y, *args)) @ w)
    T, p = extrapolate_pairs(t, q1, res.t, q2)
    return T, p, np.abs(T - res.t)


def extrapolate_pairs(t1, q1, t2, q2):
    """``(T*, p)`` from two samples per row (:func:`extrapolate` for ``K = 2``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = -(t2 - t1) / (q2 - q1)
    return t2 + p * q2, p
