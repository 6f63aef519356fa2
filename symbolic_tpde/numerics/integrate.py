"""Particle integrators for ``dx_i/dt = Γ_{μ_t}(x_i)`` with time-dependent weights (README Mathematics §1-2).

:func:`simulate` evolves a cloud ``X0 (n, d)`` from ``t = 0`` to ``T`` under a schedule of weights
(:class:`~symbolic_tpde.model.Schedule`, a constant :class:`~symbolic_tpde.model.Weights`, or any callable
``t -> Weights``):

* ``method="euler"``: ``X_{k+1} = X_k + h Γ(t_k, X_k)`` (one "layer" per step, as in the literature);
* ``method="rk4"``: classical fourth-order Runge-Kutta;
* ``method="adaptive"``: :func:`symbolic_tpde.numerics.solve.integrate` on the flattened cloud with
  ``ivp_method`` (default ``"dopri5"``, the package's Dormand-Prince 5(4); any ``solve_ivp`` name also works)
  and ``rtol, atol``.

The fixed-step stages are those of the Butcher tableaus :data:`~symbolic_tpde.numerics.rk.EULER` and
:data:`~symbolic_tpde.numerics.rk.RK4` (:func:`~symbolic_tpde.numerics.rk.rk_stages`, in the particles' dtype).

Layers: the fixed-step methods split ``[0, T]`` at the layer breakpoints (``schedule.breakpoints(T)``) and
take equal steps of size ``<= T/steps`` inside each segment, so every step lies inside one layer; inside a
segment all stages use that layer's weights (a stage at the right end of a segment must not see the next
layer).  The adaptive method restarts at each breakpoint (the weights of a segment are those of its start).  For a callable schedule the weights
are read at each stage time.

Failure is never silent: each stage is checked for finiteness and an overflow raises
:class:`~symbolic_tpde.errors.BlowupError` with the last finite time and the step; a Sinkhorn head that does
not converge raises :class:`~symbolic_tpde.errors.ConvergenceError` naming the time.  A plain-text progress
bar is written to stderr when the run is expected to take more than ~2 s (or ``progress=True``).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import BlowupError, ConvergenceError, InputError
from ..spec.checks import positive_int, positive_number
from ..model import Schedule, Weights
from .fields import as_schedule, field
from . import rk
from .fields_core import as_points, work_dtype

METHODS = ("rk4", "euler", "adaptive")


@dataclass(frozen=True)
class ParticleRun:
    """Result of :func:`simulate`.

    ``X``: final cloud at time ``t``; ``times`` and ``trajectory`` (``(len(times), n, d)``) are filled only when
    ``save_every`` was given.  ``steps``: accepted steps; ``nfev``: field evaluations.
    """

    t: float
    X: np.ndarray
    times: np.ndarray | None
    trajectory: np.ndarray | None
    method: str
    steps: int
    nfev: int
    dtype: str


class _Progress:
    """Plain-text progress bar on stderr, shown when the run is expected to last more than ``after`` s."""

    def __init__(self, total: float, mode: bool | None, after: float = 2.0, stream=None):
        self.total, self.mode, self.after = total, mode, after
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.last = -1.0
        self.shown = False

    def update(self, t: float) -> None:
        if self.mode is False or self.total <= 0:
            return
        now = time.perf_counter()
        frac = min(1.0, t / self.total)
        if not self.shown:
            elapsed = now - self.start
            expected = elapsed / frac if frac > 0 else 0.0
            if not (self.mode is True or expected > self.after):
                return
            self.shown = True
        if now - self.last < 0.2 and frac < 1.0:
            return
        self.last = now
        bar = "#" * int(30 * frac)
        self.stream.write(f"\r[{bar:<30}] {100 * frac:5.1f}%  t = {t:.4g} / {self.total:.4g}  "
                          f"{now - self.start:.1f}s")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _check_args(T, steps, method, save_every, rtol, atol):
    if method not in METHODS:
        raise InputError("method", f"unknown method {method!r}; expected one of {list(METHODS)}")
    T = positive_number(T, "T", allow_zero=True)
    positive_int(steps, "steps", allow_none=True)
    positive_int(save_every, "save_every", allow_none=True)
    positive_number(rtol, "rtol")
    positive_number(atol, "atol")
    return T


def segments(schedule: Schedule, T: float) -> list[tuple[float, float]]:
    """``[0, T]`` cut at the layer breakpoints: consecutive ``(a, b)`` pairs."""
    pts = [0.0] + [float(t) for t in schedule.breakpoints(T)] + [T]
    return [(a, b) for a, b in zip(pts[:-1], pts[1:]) if b > a]


def simulate(X0, schedule: Schedule | Weights | Callable[[float], Weights], T: float, *, steps: int | None = None,
             method: str = "rk4", dtype=np.float64, save_every: int | None = None, progress: bool | None = None,
             rtol: float = 1e-7, atol: float = 1e-9, ivp_method: str = "dopri5", block: int | None = None,
             threads: int | None = None) -> ParticleRun:
    """Evolve the particles ``X0`` to time ``T`` (see the module docstring).

    ``steps``: number of fixed steps over ``[0, T]`` (default ``max(10, ceil(100 T))``); with layers, each
    segment gets ``ceil(length / (T/steps))`` steps, so the actual count (``run.steps``) may be slightly
    larger.  For ``adaptive`` it only defines the nominal grid on which ``save_every`` saves.
    ``save_every=k``: keep the state every ``k`` steps (and at ``0`` and ``T``).  ``dtype`` (float32/float64):
    fixed-step methods do all work in it; ``adaptive`` keeps the state in float64 and evaluates the field in
    ``dtype``.
    """
    T = _check_args(T, steps, method, save_every, rtol, atol)
    dt = work_dtype(X0, dtype)
    X = as_points(X0, dt, "X0").copy()
    sched = as_schedule(schedule)
    n_steps = int(steps) if steps is not None else max(10, math.ceil(100 * T))
    bar = _Progress(T, progress)
    cache: dict = {}
    try:
        if method == "adaptive":
            return _adaptive(X, sched, T, n_steps, save_every, rtol, atol, ivp_method, dt, bar, cache, block, threads)
        return _fixed(X, sched, T, n_steps, method, save_every, dt, bar, cache, block, threads)
    finally:
        bar.close()


def _eval(X, weights, t, where, cache, block, threads):
    if not np.isfinite(X).all():  # an intermediate stage state X + c h k overflowed
        raise BlowupError(t, where, "stage state overflowed")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            k = field(X, weights, block=block, threads=threads, cache=cache)
    except ConvergenceError as exc:
        raise ConvergenceError(f"{where} (t = {t:.6g})", exc.detail) from None
    if not np.isfinite(k).all():
        raise BlowupError(t, where, "velocity field overflowed")
    return k


def _fixed(X, sched, T, n_steps, method, save_every, dt, bar, cache, block, threads) -> ParticleRun:
    """Fixed steps of the :mod:`.rk` tableau ``method`` (Euler or RK4), in the particles' dtype."""
    tab = rk.tableau(method)
    h_max = T / n_steps if T > 0 else 0.0
    layered = sched.func is None
    times, traj = ([0.0], [X.copy()]) if save_every else (None, None)
    t, k_step, nfev = 0.0, 0, 0
    for a, b in segments(sched, T):
        m = max(1, math.ceil((b - a) / h_max - 1e-9))
        h = (b - a) / m
        w_seg = sched(a) if layered else None
        for j in range(m):
            t = a + j * h
            where = f"{method} step {k_step + 1}"

            def G(s, Y):
                return _eval(Y, w_seg if layered else sched(s), t, where, cache, block, threads)

            with np.errstate(over="ignore", invalid="ignore"):
                Xn, _ = rk.rk_stages(tab, G, t, X, h, G(t, X))
            nfev += tab.stages
            if not np.isfinite(Xn).all():
                raise BlowupError(t, where, "state overflowed")
            X = Xn
            k_step += 1
            t_now = a + (j + 1) * h
            if save_every and (k_step % save_every == 0):
                times.append(t_now)
                traj.append(X.copy())
            bar.update(t_now)
    if save_every and times[-1] != T:
        times.append(T)
        traj.append(X.copy())
    return ParticleRun(T, X, None if times is None else np.array(times),
                       None if traj is None else np.stack(traj), method, k_step, nfev, dt.name)


def _adaptive(X, sched, T, n_steps, save_every, rtol, atol, ivp_method, dt, bar, cache, block, threads):
    """The flattened cloud through :func:`.solve.integrate` (own Dormand-Prince by default), restarting at the
    layer breakpoints.  A non-finite field makes the step fail (rejection); the step size then collapses at
    the blow-up and :class:`BlowupError` is raised with the last accepted time."""
    from .solve import Status, integrate

    n, d = X.shape
    layered = sched.func is None
    edges = [a for a, _ in segments(sched, T)] + [T]
    where = f"adaptive ({ivp_method})"

    def fun(s, yy):
        Y = yy.reshape(n, d)
        if not np.isfinite(Y).all():
            return np.full(yy.shape, np.nan)
        w = sched(s) if not layered else sched(edges[max(0, np.searchsorted(edges, s, side="right") - 1)])
        try:
            k = _eval(Y.astype(dt, copy=False), w, s, where, cache, block, threads)
        except BlowupError:
            return np.full(yy.shape, np.nan)
        return k.astype(np.float64, copy=False).ravel()

    t_eval = None
    if save_every:
        t_eval = np.unique(np.concatenate([np.linspace(0.0, T, n_steps // save_every + 1), edges]))
    sol = integrate(fun, X.astype(np.float64).ravel(), (0.0, T), method=ivp_method, rtol=rtol, atol=atol,
                    t_eval=t_eval, breakpoints=edges[1:-1], progress=lambda t, _T: bar.update(t))
    if sol.status != Status.OK:
        raise BlowupError(sol.t_end, where, sol.message)
    Xf = sol.y_end.reshape(n, d).copy()
    return ParticleRun(T, Xf, sol.t.copy() if save_every else None,
                       sol.y.reshape(-1, n, d).copy() if save_every else None, "adaptive", sol.n_steps, sol.nfev,
                       dt.name)
