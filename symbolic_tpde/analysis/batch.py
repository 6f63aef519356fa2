"""Batched explicit Runge-Kutta integration of many trajectories of one ODE at once.

The right-hand side is a *batched* callable ``F(t, Y, *args) -> dY`` with ``Y`` of shape ``(N, n)`` and ``t`` of
shape ``(N,)`` (each trajectory carries its own time); ``args`` are per-trajectory arrays with leading axis
``N`` (for instance one parameter vector per row, as accepted by the generated ``CompiledRHS.batch``).  Only the
rows still running are evaluated: finished rows are dropped from the active set, so a batch where most rows
blow up or converge early costs what the survivors cost.

Both integrators are thin front ends of the package's one Runge-Kutta routine,
:func:`symbolic_tpde.numerics.rk.rk_solve` (tableaus as data, per-row step sizes):

* :func:`rk4_batch`: classical fixed-step RK4 (:data:`~symbolic_tpde.numerics.rk.RK4`, global error ``O(h^4)``);
* :func:`dopri5_batch`: Dormand-Prince 5(4) (:data:`~symbolic_tpde.numerics.rk.DOPRI5`; Dormand & Prince,
  J. Comput. Appl. Math. 6 (1980) 19-26; Hairer, Nørsett & Wanner, *Solving ODEs I*, Table 5.2), FSAL,
  *per-trajectory* step size ``h_i`` and error control with step rejection.  The error norm is the RMS over
  components of ``err / (atol + rtol max(|y|, |y_new|))`` and the step update is
  ``h <- h * clip(0.9 err^{-1/5}, 0.2, 10)`` (the standard controller, Hairer I §II.4).

Both accept a ``monitor(rows, t, Y, dY) -> int codes`` called on accepted states (``rows``: global row
indices): ``0`` = keep going, any other code
stops that row (see :data:`RUNNING`, :data:`DONE`, :data:`BLOWUP`, :data:`CONVERGED`, :data:`NONFINITE`,
:data:`MAXSTEPS`).  A row whose state leaves the finite floats is never propagated: it stops with code
``NONFINITE`` at the last finite state and time.

Dense output at common times ``t_eval``: Dormand-Prince's own 4th-order continuous extension (Shampine 1986)
for :func:`dopri5_batch`, the cubic Hermite interpolant through ``(y, f)`` at both step ends for
:func:`rk4_batch`; the end states are the integrator's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..numerics.rk import BLOWUP, CONVERGED, DONE, MAXSTEPS, NONFINITE, RUNNING, RKResult, rk_solve

__all__ = ["RUNNING", "DONE", "BLOWUP", "CONVERGED", "NONFINITE", "MAXSTEPS", "STATUS_NAMES", "BatchResult",
           "rk4_batch", "dopri5_batch", "trace_monitor"]

STATUS_NAMES = {RUNNING: "running", DONE: "ok", BLOWUP: "blowup", CONVERGED: "converged",
                NONFINITE: "nonfinite", MAXSTEPS: "maxsteps"}


@dataclass
class BatchResult(RKResult):
    """End states and bookkeeping of a batched integration (the fields of :class:`~symbolic_tpde.numerics.rk.
    RKResult`): ``t[i]``, ``y[i]`` the last accepted time and state of row ``i`` (``T`` unless the row was
    stopped); ``status[i]`` a code (``STATUS_NAMES``); ``n_steps``/``n_rejected`` per row; ``nfev`` = batched
    calls; ``t_eval``/``ys``: dense output ``(len(t_eval), N, n)``, NaN after a row stopped.
    """

    def status_names(self) -> list[str]:
        return [STATUS_NAMES[int(s)] for s in self.status]


def _adapt(monitor):
    if monitor is None:
        return None
    return lambda acc: monitor(acc.rows, acc.t1, acc.y1, acc.f1)


def _result(r) -> BatchResult:
    return BatchResult(r.t, r.y, r.status, r.n_steps, r.n_rejected, r.nfev, r.t_eval, r.ys, r.f, r.err)


def _as_float(Y0):
    Y = np.array(Y0, dtype=float, copy=True)
    if Y.ndim != 2:
        raise ValueError(f"Y0 must have shape (N, n), got {Y.shape}")
    return Y


def rk4_batch(F: Callable, t0: float, Y0, T, steps: int, *, args: Sequence = (), monitor: Callable | None = None,
              t_eval=None) -> BatchResult:
    """Classical RK4 with ``steps`` equal steps from ``t0`` to ``T`` (scalar or per row) for every row of ``Y0``."""
    args = [np.asarray(a, dtype=float) for a in args]
    return _result(rk_solve(F, t0, _as_float(Y0), T, method="rk4", steps=int(steps), args=args,
                            monitor=_adapt(monitor), t_eval=t_eval))


def dopri5_batch(F: Callable, t0: float, Y0, T, *, rtol: float = 1e-8, atol: float = 1e-10,
                 args: Sequence = (), monitor: Callable | None = None, t_eval=None, h0=None,
                 max_steps: int = 100_000, hmin_rel: float = 1e-14) -> BatchResult:
    """Dormand-Prince 5(4) with per-row step size, error control and rejection, from ``t0`` to ``T``.

    ``T`` may be a scalar or one horizon per row.  A row stops with ``MAXSTEPS`` after ``max_steps`` accepted
    steps and with ``NONFINITE`` if its step size falls below ``hmin_rel * max(1, |t|)`` (the error control
    cannot be satisfied: typically a singularity).
    """
    args = [np.asarray(a, dtype=float) for a in args]
    return _result(rk_solve(F, t0, _as_float(Y0), T, method="dopri5", rtol=rtol, atol=atol, args=args,
                            monitor=_adapt(monitor), t_eval=t_eval, h0=h0, max_steps=max_steps,
                            hmin_rel=hmin_rel))


def trace_monitor(d: int, offset: int, *, blowup_factor: float = 1e12, converge_tol: float | None = None,
                  base: np.ndarray | None = None) -> Callable:
    """A monitor for Gaussian states (``alpha`` then the upper triangle of ``Sigma``, from column ``offset``).

    Stops a row with ``BLOWUP`` when ``tr Sigma > blowup_factor * tr Sigma_0`` (``base`` = the starting traces,
    shape ``(N,)``; without it the absolute threshold ``blowup_factor`` is used) and with ``CONVERGED`` when
    ``||dSigma/dt||_max < converge_tol * max(tr Sigma, 1e-300)`` (relative rate below tolerance).
    """
    diag = [offset + i * d - i * (i - 1) // 2 for i in range(d)]
    sig_cols = np.arange(offset, offset + d * (d + 1) // 2)

    def monitor(rows, t, Y, dY):
        tr = Y[:, diag].sum(axis=1)
        codes = np.zeros(len(Y), dtype=int)
        thresh = blowup_factor if base is None else blowup_factor * np.asarray(base)[rows]
        codes[tr > thresh] = BLOWUP
        if converge_tol is not None:
            rate = np.max(np.abs(dY[:, sig_cols]), axis=1)
            codes[(codes == RUNNING) & (rate < converge_tol * np.maximum(tr, 1e-300))] = CONVERGED
        return codes

    return monitor
