"""Batched explicit Runge-Kutta integration of many trajectories of one ODE at once.

The right-hand side is a *batched* callable ``F(t, Y, *args) -> dY`` with ``Y`` of shape ``(N, n)`` and ``t`` of
shape ``(N,)`` (each trajectory carries its own time); ``args`` are per-trajectory arrays with leading axis
``N`` (for instance one parameter vector per row, as accepted by the generated ``CompiledRHS.batch``).  Only the
rows still running are evaluated: finished rows are dropped from the active set, so a batch where most rows
blow up or converge early costs what the survivors cost.

Two integrators:

* :func:`rk4_batch`: classical fixed-step RK4 (order 4, global error ``O(h^4)``);
* :func:`dopri5_batch`: Dormand-Prince 5(4) (Dormand & Prince, J. Comput. Appl. Math. 6 (1980) 19-26; the
  tableau of Hairer, Nørsett & Wanner, *Solving ODEs I*, Table 5.2), local extrapolation, first-same-as-last,
  *per-trajectory* step size ``h_i`` and error control with step rejection.  The error norm is the RMS over
  components of ``err / (atol + rtol max(|y|, |y_new|))`` and the step update is
  ``h <- h * clip(0.9 err^{-1/5}, 0.2, 10)`` (the standard controller, Hairer I §II.4).

Both accept a ``monitor(rows, t, Y, dY) -> int codes`` called on accepted states (``rows``: global row
indices): ``0`` = keep going, any other code
stops that row (see :data:`RUNNING`, :data:`DONE`, :data:`BLOWUP`, :data:`CONVERGED`, :data:`NONFINITE`,
:data:`MAXSTEPS`).  A row whose state leaves the finite floats is never propagated: it stops with code
``NONFINITE`` at the last finite state and time.

Dense output at common times ``t_eval`` uses cubic Hermite interpolation from ``(y, f)`` at both ends of each
accepted step (third-order accurate; meant for plots, the end states are the integrator's own).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

RUNNING, DONE, BLOWUP, CONVERGED, NONFINITE, MAXSTEPS = 0, 1, 2, 3, 4, 5
STATUS_NAMES = {RUNNING: "running", DONE: "ok", BLOWUP: "blowup", CONVERGED: "converged",
                NONFINITE: "nonfinite", MAXSTEPS: "maxsteps"}

# Dormand-Prince 5(4) tableau (Hairer-Nørsett-Wanner I, Table 5.2).
_C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0])
_A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
]
_B5 = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0])
_B4 = np.array([5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40])
_E = _B5 - _B4


@dataclass
class BatchResult:
    """End states and bookkeeping of a batched integration.

    ``t[i]``, ``y[i]``: the last accepted time and state of row ``i`` (``T`` unless the row was stopped);
    ``status[i]``: a code (``STATUS_NAMES``); ``n_steps``/``n_rejected`` per row; ``nfev`` = batched calls;
    ``t_eval``/``ys``: dense output ``(len(t_eval), N, n)``, NaN after a row stopped.
    """

    t: np.ndarray
    y: np.ndarray
    status: np.ndarray
    n_steps: np.ndarray
    n_rejected: np.ndarray
    nfev: int
    t_eval: np.ndarray | None = None
    ys: np.ndarray | None = None
    f: np.ndarray | None = field(default=None, repr=False)

    def status_names(self) -> list[str]:
        return [STATUS_NAMES[int(s)] for s in self.status]


def _as_batch(Y0: np.ndarray) -> np.ndarray:
    Y = np.array(Y0, dtype=float, copy=True)
    if Y.ndim != 2:
        raise ValueError(f"Y0 must have shape (N, n), got {Y.shape}")
    return Y


def _split_args(args: Sequence[np.ndarray], N: int) -> list[np.ndarray]:
    out = []
    for a in args:
        a = np.asarray(a, dtype=float)
        if a.shape[0] != N:
            raise ValueError(f"per-trajectory argument has leading size {a.shape[0]}, expected {N}")
        out.append(a)
    return out


def _hermite(t0, t1, y0, y1, f0, f1, tq):
    """Cubic Hermite interpolant on [t0, t1] (rows), evaluated at tq (rows)."""
    h = (t1 - t0)[:, None]
    s = ((tq - t0) / np.where(t1 > t0, t1 - t0, 1.0))[:, None]
    h00 = (1 + 2 * s) * (1 - s) ** 2
    h10 = s * (1 - s) ** 2
    h01 = s * s * (3 - 2 * s)
    h11 = s * s * (s - 1)
    return h00 * y0 + h10 * h * f0 + h01 * y1 + h11 * h * f1


class _Recorder:
    """Fills ``ys[k, i]`` for every ``t_eval[k]`` crossed by row ``i`` during an accepted step."""

    def __init__(self, t_eval, Y0, t0: float):
        self.t_eval = None if t_eval is None else np.asarray(t_eval, dtype=float)
        if self.t_eval is not None:
            if np.any(np.diff(self.t_eval) < 0):
                raise ValueError("t_eval must be non-decreasing")
            N, n = Y0.shape
            self.ys = np.full((len(self.t_eval), N, n), np.nan)
            self.ys[self.t_eval == t0] = Y0
            self.next = np.full(N, np.searchsorted(self.t_eval, t0, side="right"))

    def step(self, idx, t0, t1, y0, y1, f0, f1):
        if self.t_eval is None:
            return
        nt = len(self.t_eval)
        while True:
            k = self.next[idx]
            valid = k < nt
            tk = self.t_eval[np.minimum(k, nt - 1)]
            sel = valid & (tk <= t1)
            if not np.any(sel):
                return
            rows = np.nonzero(sel)[0]
            vals = _hermite(t0[rows], t1[rows], y0[rows], y1[rows], f0[rows], f1[rows], tk[rows])
            self.ys[k[rows], idx[rows]] = vals
            self.next[idx[rows]] += 1


def rk4_batch(F: Callable, t0: float, Y0, T, steps: int, *, args: Sequence = (), monitor: Callable | None = None,
              t_eval=None) -> BatchResult:
    """Classical RK4 with ``steps`` equal steps from ``t0`` to ``T`` (scalar or per row) for every row of ``Y0``."""
    Y = _as_batch(Y0)
    N, n = Y.shape
    args = _split_args(args, N)
    Tarr = np.broadcast_to(np.asarray(T, dtype=float), (N,)).copy()
    t = np.full(N, float(t0))
    h_all = (Tarr - t0) / steps
    status = np.zeros(N, dtype=int)
    nsteps = np.zeros(N, dtype=int)
    rec = _Recorder(t_eval, Y, float(t0))
    idx = np.arange(N)
    nfev = 1
    f = np.asarray(F(t, Y, *args), dtype=float)
    for step in range(steps):
        if idx.size == 0:
            break
        y, tt, h = Y[idx], t[idx], h_all[idx][:, None]
        a = [x[idx] for x in args]
        k1 = f[idx]
        k2 = F(tt + h[:, 0] / 2, y + h / 2 * k1, *a)
        k3 = F(tt + h[:, 0] / 2, y + h / 2 * k2, *a)
        k4 = F(tt + h[:, 0], y + h * k3, *a)
        ynew = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        tnew = t0 + (step + 1) * h_all[idx] if step + 1 < steps else Tarr[idx]
        fnew = np.asarray(F(tnew, ynew, *a), dtype=float)
        nfev += 4
        bad = ~np.all(np.isfinite(ynew), axis=1) | ~np.all(np.isfinite(fnew), axis=1)
        good = ~bad
        rec.step(idx[good], tt[good], tnew[good], y[good], ynew[good], k1[good], fnew[good])
        status[idx[bad]] = NONFINITE
        gi = idx[good]
        Y[gi], t[gi], f[gi] = ynew[good], tnew[good], fnew[good]
        nsteps[gi] += 1
        if monitor is not None and gi.size:
            codes = np.asarray(monitor(gi, t[gi], Y[gi], f[gi]), dtype=int)
            status[gi] = codes
        idx = idx[status[idx] == RUNNING]
    status[idx] = DONE
    return BatchResult(t, Y, status, nsteps, np.zeros(N, dtype=int), nfev,
                       rec.t_eval, getattr(rec, "ys", None), f)


def _initial_step(F, t, y, f, args, T, rtol, atol):
    """Hairer I §II.4 starting step heuristic, vectorised over rows (order 5)."""
    scale = atol + rtol * np.abs(y)
    d0 = np.sqrt(np.mean((y / scale) ** 2, axis=1))
    d1 = np.sqrt(np.mean((f / scale) ** 2, axis=1))
    h0 = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / np.maximum(d1, 1e-300))
    h0 = np.minimum(h0, T - t)
    f1 = F(t + h0, y + h0[:, None] * f, *args)
    d2 = np.sqrt(np.mean(((f1 - f) / scale) ** 2, axis=1)) / np.maximum(h0, 1e-300)
    dm = np.maximum(d1, d2)
    h1 = np.where(dm <= 1e-15, np.maximum(1e-6, h0 * 1e-3), (0.01 / np.maximum(dm, 1e-300)) ** (1 / 5))
    h = np.minimum(100 * h0, h1)
    h = np.where(np.isfinite(h) & (h > 0), h, 1e-6)
    return np.minimum(h, T - t)


def dopri5_batch(F: Callable, t0: float, Y0, T, *, rtol: float = 1e-8, atol: float = 1e-10,
                 args: Sequence = (), monitor: Callable | None = None, t_eval=None, h0=None,
                 max_steps: int = 100_000, hmin_rel: float = 1e-14) -> BatchResult:
    """Dormand-Prince 5(4) with per-row step size, error control and rejection, from ``t0`` to ``T``.

    ``T`` may be a scalar or one horizon per row.  A row stops with ``MAXSTEPS`` after ``max_steps`` accepted
    steps and with ``NONFINITE`` if its step size falls below ``hmin_rel * max(1, |t|)`` (the error control
    cannot be satisfied: typically a singularity).
    """
    Y = _as_batch(Y0)
    N, n = Y.shape
    args = _split_args(args, N)
    Tarr = np.broadcast_to(np.asarray(T, dtype=float), (N,)).copy()
    t = np.full(N, float(t0))
    status = np.zeros(N, dtype=int)
    nsteps = np.zeros(N, dtype=int)
    nrej = np.zeros(N, dtype=int)
    f = np.asarray(F(t, Y, *args), dtype=float)
    nfev = 1
    bad0 = ~np.all(np.isfinite(f), axis=1)
    status[bad0] = NONFINITE
    if h0 is None:
        h = _initial_step(F, t, Y, f, args, Tarr, rtol, atol)
        nfev += 1
    else:
        h = np.minimum(np.broadcast_to(np.asarray(h0, dtype=float), (N,)).copy(), Tarr - t)
    rec = _Recorder(t_eval, Y, float(t0))
    status[(status == RUNNING) & (Tarr <= t)] = DONE
    idx = np.nonzero(status == RUNNING)[0]
    while idx.size:
        y, tt, hh = Y[idx], t[idx], h[idx]
        a = [x[idx] for x in args]
        K = [f[idx]]
        for s in range(1, 7):
            ys = y + hh[:, None] * sum(coef * K[j] for j, coef in enumerate(_A[s]) if coef != 0.0)
            K.append(np.asarray(F(tt + _C[s] * hh, ys, *a), dtype=float))
            if s == 6:
                ynew = ys  # FSAL: the 7th stage point is the 5th-order solution
        nfev += 6
        err_vec = hh[:, None] * sum(e * k for e, k in zip(_E, K) if e != 0.0)
        scale = atol + rtol * np.maximum(np.abs(y), np.abs(ynew))
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.sqrt(np.mean((err_vec / scale) ** 2, axis=1))
        finite = np.all(np.isfinite(ynew), axis=1) & np.all(np.isfinite(K[6]), axis=1) & np.isfinite(err)
        accept = finite & (err <= 1.0)
        with np.errstate(divide="ignore"):
            fac = np.where(err > 0, 0.9 * err ** -0.2, 10.0)
        fac = np.clip(np.where(finite, fac, 0.2), 0.2, 10.0)
        fac = np.where(accept, fac, np.minimum(fac, 1.0))
        # accepted rows
        ai = np.nonzero(accept)[0]
        gi = idx[ai]
        tnew = np.where(hh[ai] >= Tarr[gi] - tt[ai], Tarr[gi], tt[ai] + hh[ai])
        rec.step(gi, tt[ai], tnew, y[ai], ynew[ai], K[0][ai], K[6][ai])
        Y[gi], t[gi], f[gi] = ynew[ai], tnew, K[6][ai]
        nsteps[gi] += 1
        nrej[idx[~accept]] += 1
        hnew = hh * fac
        h[idx] = np.minimum(hnew, Tarr[idx] - t[idx])
        if monitor is not None and gi.size:
            status[gi] = np.asarray(monitor(gi, t[gi], Y[gi], f[gi]), dtype=int)
        finished = gi[(t[gi] >= Tarr[gi]) & (status[gi] == RUNNING)]
        status[finished] = DONE
        status[gi[(nsteps[gi] >= max_steps) & (status[gi] == RUNNING)]] = MAXSTEPS
        tiny = hnew < hmin_rel * np.maximum(1.0, np.abs(t[idx]))
        stuck = idx[tiny & (status[idx] == RUNNING)]
        status[stuck] = NONFINITE
        idx = idx[status[idx] == RUNNING]
    return BatchResult(t, Y, status, nsteps, nrej, nfev, rec.t_eval, getattr(rec, "ys", None), f)


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
