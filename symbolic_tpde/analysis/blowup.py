"""Finite-time blow-up: detect it, locate it, bound the error, never overflow.

The method (level crossings of a positive size ``r = size(y)``, the quotient ``q = r/(dr/dt) = (T* - t)/p``
affine near a power-law singularity, extrapolation ``T_k = t_{k+1} + p_k q_{k+1}``, the error bar = the
extrapolation spread ``|T_K - T_{K-1}|`` + the difference to a second run at 100x looser tolerance, the
statuses ``"ok"``, ``"blowup"``, ``"overflow"`` (exponential growth past ``r₀·overflow``, no singularity
signature) and ``"stalled"`` (more than ``max_nfev`` evaluations or a collapsed step size)) lives in
:mod:`symbolic_tpde.numerics.ode.solve`, the package's one integrator entry point; its docstring carries the maths.
For the softmax Riccati equation ``Σ = M/τ + N + O(τ)`` (``τ = T* - t``), so ``p = 1`` and
``T_k - T* = O(τ_k τ_{k+1})``: far below round-off at the last levels.

This module keeps the front end :func:`integrate_blowup` (scipy's DOP853 through
:func:`~symbolic_tpde.numerics.ode.solve.integrate` with a :class:`~symbolic_tpde.numerics.ode.solve.BlowupMonitor`);
the Gaussian size ``tr Σ + |α|²`` is :func:`symbolic_tpde.registry.layout.gaussian_size`, and the rows of a
batch use the same monitor (:meth:`~symbolic_tpde.numerics.ode.solve.BlowupMonitor.rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from ..numerics.ode.solve import DEFAULT_LEVELS, BlowupMonitor, as_monitor, integrate

__all__ = ["BlowupResult", "integrate_blowup"]


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
                     atol: float | None = None, levels: Sequence[float] = DEFAULT_LEVELS,
                     breakpoints: Sequence[float] = (), overflow: float = 1e200,
                     error_run: bool = True, max_nfev: int = 500_000) -> BlowupResult:
    """Integrate ``y' = f(t, y)`` on ``[t0, T]``; report a finite-time blow-up of ``r = w·y`` with error bound.

    ``w``: weights of a linear size ``r = w·y`` or a pair ``(size(y), dsize(y, f(t, y)))`` such as
    :func:`symbolic_tpde.registry.layout.gaussian_size`.  ``breakpoints``: times where the right-hand side jumps (layer boundaries); integration
    restarts there.  ``error_run``: also integrate at ``100·rtol`` to bound the integration error of the blow-up
    time.  ``max_nfev``: right-hand-side evaluations allowed per pass; beyond it the status is ``"stalled"``
    (state and time where the integrator gave up), never an endless loop.  Runs
    :func:`symbolic_tpde.numerics.ode.solve.integrate` with ``method="DOP853"``.

    >>> import numpy as np
    >>> res = integrate_blowup(lambda t, y: y ** 2, [1.0], 2.0, [1.0])      # y = 1/(1 - t): T* = 1
    >>> res.status == "blowup", bool(abs(res.blowup_time - 1.0) < 1e-6)
    (True, True)
    """
    y0 = np.asarray(y0, float)
    if not (np.isfinite(T) and T > t0):
        raise InputError("T", f"must be finite and > {t0}, got {T}")
    m = as_monitor(w)
    if not m.size(y0) > 0:
        raise InputError("Sigma0", "the monitored size w·y0 must be positive")
    mon = BlowupMonitor(m.size, m.dsize, tuple(levels), overflow, error_run)
    sol = integrate(f, y0, (t0, T), method="DOP853", rtol=rtol, atol=atol, breakpoints=breakpoints, events=[mon],
                    max_nfev=max_nfev)
    return BlowupResult(sol.status, sol.t_end, sol.y_end, sol.blowup_time, sol.blowup_time_error, sol.exponent,
                        sol.samples, sol.message)
