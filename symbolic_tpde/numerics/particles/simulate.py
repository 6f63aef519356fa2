"""Particle integrators for ``dx_i/dt = Γ_{μ_t}(x_i)`` with time-dependent weights (README Mathematics §1-2).

:func:`simulate` evolves a cloud ``X0 (n, d)`` from ``t = 0`` to ``T`` under a schedule of weights
(:class:`~symbolic_tpde.weights.Schedule`, a constant :class:`~symbolic_tpde.weights.Weights`, or any callable
``t -> Weights``):

* ``method="rk4"`` with ``steps=None`` (the default, and ``tpde particles`` without ``--steps``):
  error-controlled steps of the embedded Dormand-Prince 5(4) pair :data:`~symbolic_tpde.numerics.ode.rk.DOPRI5`
  (reported as method ``"dopri5"``), in the particles' dtype, at the tolerance :func:`auto_tolerance`
  (``10⁻³ n^{-1/2}``: a thousandth of the Monte-Carlo standard error of the moments, so the time
  discretisation is invisible next to the sampling error); ``run.error_estimate`` is the sum over accepted
  steps of the embedded local error estimate (max over particles, state units), a bound on the global
  error when the flow does not expand;
* ``method="rk4"`` with ``steps=K``: classical fourth-order Runge-Kutta on a fixed grid;
* ``method="euler"``: ``X_{k+1} = X_k + h Γ(t_k, X_k)`` (one "layer" per step, as in the literature; always a
  fixed grid, default ``max(10, ceil(100 T))`` steps);
* ``method="adaptive"``: :func:`symbolic_tpde.numerics.ode.solve.integrate` on the flattened cloud with
  ``ivp_method`` (default ``"dopri5"``, the package's Dormand-Prince 5(4); any ``solve_ivp`` name also works)
  and ``rtol, atol``.

The first three step through :class:`~symbolic_tpde.numerics.ode.rk.RKSolver`, the package's one stepping
routine and step-size controller (tableaus :data:`~symbolic_tpde.numerics.ode.rk.EULER`,
:data:`~symbolic_tpde.numerics.ode.rk.RK4`, :data:`~symbolic_tpde.numerics.ode.rk.DOPRI5`), with the cloud as one row
in its own dtype (float32 stays float32; the error norm is accumulated in float64).

Layers: the fixed-step methods split ``[0, T]`` at the layer breakpoints (``schedule.breakpoints(T)``) and
take equal steps of size ``<= T/steps`` inside each segment, so every step lies inside one layer; inside a
segment all stages use that layer's weights (a stage at the right end of a segment must not see the next
layer).  The adaptive method restarts at each breakpoint (the weights of a segment are those of its start).  For a callable schedule the weights
are read at each stage time.

Bounded work: ``max_seconds`` caps the wall-clock time with the integrator's one mechanism,
:class:`symbolic_tpde.numerics.ode.solve.Deadline`, checked once per step (per rhs evaluation for ``adaptive``);
when it expires the run returns early with ``status == "time-limit"`` and ``t`` the last completed time (the
state there exact, and appended to a saved trajectory).

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

from ...errors import BlowupError, ConvergenceError, InputError
from ...inputs.checks import positive_int, positive_number
from ...weights import Schedule, Weights
from .fields import as_schedule, field
from ..ode import rk
from .attend import as_points, work_dtype

METHODS = ("rk4", "euler", "adaptive")


@dataclass(frozen=True)
class ParticleRun:
    """Result of :func:`simulate`.

    ``X``: final cloud at time ``t``; ``times`` and ``trajectory`` (``(len(times), n, d)``) are filled only when
    ``save_every`` was given.  ``steps``: accepted steps; ``nfev``: field evaluations.  ``status``: ``"ok"``
    (``t = T``) or ``"time-limit"`` (the wall-clock cap stopped the run at ``t < T``).
    """

    t: float
    X: np.ndarray
    times: np.ndarray | None
    trajectory: np.ndarray | None
    method: str
    steps: int
    nfev: int
    dtype: str
    error_estimate: float | None = None   # error-controlled default: Σ over steps of max |local error|
    tolerance: float | None = None        # error-controlled default: the rtol = atol used
    rejected: int = 0
    status: str = "ok"


class _Progress:
    """Plain-text progress bar on stderr, shown when the run is expected to last more than ``after`` s."""

    def __init__(self, total: float, mode: bool | None, after: float = 2.0, stream=None):
        self.total, self.mode, self.after = total, mode, after
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.last = -1.0
        self.shown = False

    def restart(self) -> None:
        """Restart the clock of the estimate (after the first field evaluation, which may include a one-off
        kernel build) unless the bar is already showing."""
        if not self.shown and self.last < 0:
            self.start = time.perf_counter()

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
             threads: int | None = None, max_seconds: float | None = None) -> ParticleRun:
    """Evolve the particles ``X0`` to time ``T`` (see the module docstring).

    ``steps``: number of fixed steps over ``[0, T]``; ``None`` (default) with ``method="rk4"`` means error-
    controlled Dormand-Prince 5(4) at :func:`auto_tolerance` (module docstring); for ``euler`` the default
    grid is ``max(10, ceil(100 T))`` steps.  With layers, each
    segment gets ``ceil(length / (T/steps))`` steps, so the actual count (``run.steps``) may be slightly
    larger.  For ``adaptive`` it only defines the nominal grid on which ``save_every`` saves.
    ``save_every=k``: keep the state every ``k`` steps (and at ``0`` and ``T``).  ``dtype`` (float32/float64):
    fixed-step methods do all work in it; ``adaptive`` keeps the state in float64 and evaluates the field in
    ``dtype``.  ``max_seconds``: wall-clock cap (``None``: none; module docstring, Bounded work).
    """
    from ..ode.solve import Deadline

    T = _check_args(T, steps, method, save_every, rtol, atol)
    if max_seconds is not None:
        positive_number(max_seconds, "max_seconds")
    dt = work_dtype(X0, dtype)
    X = as_points(X0, dt, "X0").copy()
    sched = as_schedule(schedule)
    n_steps = int(steps) if steps is not None else max(10, math.ceil(100 * T))
    bar = _Progress(T, progress)
    cache: dict = {}
    dl = Deadline(max_seconds)
    try:
        if method == "rk4" and steps is None:
            return _stepped(X, sched, T, n_steps, save_every, dt, bar, cache, block, threads, dl, None)
        if method == "adaptive":
            return _adaptive(X, sched, T, n_steps, save_every, rtol, atol, ivp_method, dt, bar, cache, block,
                             threads, dl)
        return _stepped(X, sched, T, n_steps, save_every, dt, bar, cache, block, threads, dl, method)
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


def _stopped(t, X, times, traj, method, steps, nfev, dt, **kw) -> ParticleRun:
    """The run stopped by its wall-clock cap at ``t``: the state there closes a saved trajectory."""
    if times is not None and times[-1] != t:
        times.append(t)
        traj.append(X.copy())
    return ParticleRun(t, X, None if times is None else np.array(times), None if traj is None else np.stack(traj),
                       method, steps, nfev, dt.name, status="time-limit", **kw)


#: Error-controlled default: the tolerance is this fraction of the Monte-Carlo scale ``n^{-1/2}``.
MC_FRACTION = 1e-3


def auto_tolerance(n: int, dtype=np.float64) -> float:
    """``rtol = atol`` of the error-controlled default: ``MC_FRACTION · n^{-1/2}``.

    The moments of ``n`` samples carry a Monte-Carlo standard error ``~ σ n^{-1/2}`` (README Mathematics §1,
    the empirical measure); the error norm is the RMS over all coordinates, which bounds the error of the
    empirical mean and, times ``2 max|x|``, of the covariance.  A thousandth of the sampling error keeps the
    time discretisation invisible.  Floors: ``1e-10`` in float64 (round-off of ~10⁴ steps), ``100 ε₃₂ ≈ 1.2e-5``
    in float32 (below that the error estimate is round-off).
    """
    floor = 1e-10 if np.dtype(dtype) == np.float64 else 100 * float(np.finfo(np.float32).eps)
    return max(MC_FRACTION / math.sqrt(max(1, n)), floor)


def _stepped(X, sched, T, n_steps, save_every, dt, bar, cache, block, threads, dl, method) -> ParticleRun:
    """The built-in particle methods on :class:`.rk.RKSolver` (the package's one stepping routine and step
    controller), the whole cloud as one row in its own dtype (the error norm is accumulated in float64), a
    new solver (first stage) at each layer breakpoint.  ``method`` ``"euler"``/``"rk4"``: fixed steps of size
    ``<= T/n_steps`` per segment, saved every ``save_every`` steps; ``None``: Dormand-Prince 5(4) at
    :func:`auto_tolerance`, the step size carried over breakpoints, saved on the nominal grid by its dense
    output, ``error_estimate`` = Σ over accepted steps of ``max |embedded local error|``."""
    adaptive = method is None
    name = "dopri5" if adaptive else method
    tab = rk.DOPRI5 if adaptive else rk.tableau(method)
    n, d = X.shape
    tol = auto_tolerance(n, dt) if adaptive else None
    h_max = T / n_steps if T > 0 else 0.0
    layered = sched.func is None
    grid = None
    if save_every and adaptive:
        grid = [k * T / n_steps for k in range(0, n_steps + 1, save_every)]
        if grid[-1] != T:
            grid.append(T)
    times, traj = ([0.0], [X.copy()]) if save_every else (None, None)
    gi, k_step, nrej, nfev, err_sum, h = 1, 0, 0, 0, 0.0, None
    for a, b in segments(sched, T):
        w_seg = sched(a) if layered else None

        def F(s, Y):
            t = float(s[0])
            try:
                k = _eval(Y.reshape(n, d), w_seg if layered else sched(t), t, f"{name} step {k_step + 1}", cache,
                          block, threads)
            except BlowupError:  # a non-finite value: the solver rejects the step or stops the row
                return np.full(Y.shape, np.nan, Y.dtype)
            return k.reshape(1, -1)

        steps = None if adaptive else max(1, math.ceil((b - a) / h_max - 1e-9))
        s = rk.RKSolver(F, a, X.reshape(1, -1), b, method=tab, h0=h, steps=steps, max_steps=2**62, hmin_rel=1e-12,
                        rhs_at_ends=False, **({} if tol is None else dict(rtol=tol, atol=tol)))
        while s.status(0) == rk.Status.RUNNING:
            acc = s.step()
            if not acc.rows.size:
                continue
            k_step += 1
            if k_step == 1:  # the first evaluation may have built the fused kernel: not part of the estimate
                bar.restart()
            t = float(acc.t1[0])
            if grid is not None:
                while gi < len(grid) and grid[gi] <= t + 1e-12 * max(1.0, T):
                    y = acc.y1 if grid[gi] >= t else acc.at(tab, [grid[gi]])
                    traj.append(y[0].reshape(n, d).astype(dt))
                    times.append(grid[gi])
                    gi += 1
            elif save_every and k_step % save_every == 0:
                times.append(t)
                traj.append(acc.y1[0].reshape(n, d).copy())
            if adaptive:
                err_sum += float(np.max(np.abs(acc.h[0] * rk._combine(tab.e, acc.K[:, 0]))))
            bar.update(t)
            if t < T and dl.expired():
                kw = dict(error_estimate=err_sum, tolerance=tol, rejected=nrej + int(s.n_rejected[0])) if adaptive \
                    else {}
                return _stopped(t, acc.y1[0].reshape(n, d), times, traj, name, k_step, nfev + s.nfev, dt, **kw)
        if s.status(0) != rk.Status.OK:
            raise BlowupError(float(s.t[0]), f"{name} step {k_step + 1}", "step size underflow: the error control "
                              "cannot be met (the state or field overflows)" if adaptive else "state overflowed")
        X, h = s.Y[0].reshape(n, d), (float(s.h[0]) if adaptive and s.n_steps[0] else None)
        nrej, nfev = nrej + int(s.n_rejected[0]), nfev + s.nfev
    if grid is not None and gi < len(grid):  # T = 0
        times += grid[gi:]
        traj += [X.copy()] * (len(grid) - gi)
    elif save_every and times[-1] != T:
        times.append(T)
        traj.append(X.copy())
    kw = dict(error_estimate=err_sum, tolerance=tol, rejected=nrej) if adaptive else {}
    return ParticleRun(T, X, None if times is None else np.array(times),
                       None if traj is None else np.stack(traj), name, k_step, nfev, dt.name, **kw)


def _adaptive(X, sched, T, n_steps, save_every, rtol, atol, ivp_method, dt, bar, cache, block, threads, dl):
    """The flattened cloud through :func:`.solve.integrate` (own Dormand-Prince by default), restarting at the
    layer breakpoints.  A non-finite field makes the step fail (rejection); the step size then collapses at
    the blow-up and :class:`BlowupError` is raised with the last accepted time."""
    from ..ode.solve import Status, integrate

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
                    t_eval=t_eval, breakpoints=edges[1:-1], progress=lambda t, _T: bar.update(t), max_seconds=dl)
    if sol.status == Status.TIME_LIMIT:
        times = list(sol.t) if save_every else None
        traj = list(sol.y.reshape(-1, n, d)) if save_every else None
        return _stopped(sol.t_end, sol.y_end.reshape(n, d).copy(), times, traj, "adaptive", sol.n_steps, sol.nfev,
                        dt)
    if sol.status != Status.OK:
        raise BlowupError(sol.t_end, where, sol.message)
    Xf = sol.y_end.reshape(n, d).copy()
    return ParticleRun(T, Xf, sol.t.copy() if save_every else None,
                       sol.y.reshape(-1, n, d).copy() if save_every else None, "adaptive", sol.n_steps, sol.nfev,
                       dt.name)
