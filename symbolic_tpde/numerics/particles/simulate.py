"""Particle integrators for ``dx_i/dt = Γ_{μ_t}(x_i)`` with time-dependent weights (README Mathematics §1-2).

:func:`simulate` evolves a cloud ``X0 (n, d)`` from ``t = 0`` to ``T`` under a schedule of weights
(:class:`~symbolic_tpde.weights.Schedule`, a constant :class:`~symbolic_tpde.weights.Weights`, or any callable
``t -> Weights``):

* ``method="dopri5"`` (the default without ``steps``, and ``tpde particles`` without ``--steps``):
  error-controlled steps of the embedded Dormand-Prince 5(4) pair :data:`~symbolic_tpde.numerics.ode.rk.DOPRI5`,
  in the particles' dtype, at ``rtol``/``atol`` or, when they are not given, at the tolerance :func:`auto_tolerance`
  (``10⁻³ n^{-1/2}``: a thousandth of the Monte-Carlo standard error of the moments, so the time
  discretisation is invisible next to the sampling error); ``run.error_estimate`` is the sum over accepted
  steps of the embedded local error estimate (max over particles, state units), a bound on the global
  error when the flow does not expand;
* ``method="rk4"`` (the default when ``steps`` is given): classical fourth-order Runge-Kutta on a fixed grid
  of ``steps`` steps;
* ``method="euler"``: ``X_{k+1} = X_k + h Γ(t_k, X_k)`` (one "layer" per step, as in the literature; a fixed
  grid, default ``max(10, ceil(100 T))`` steps);
* ``method="ivp"``: the package's general integrator :func:`symbolic_tpde.numerics.ode.solve.integrate` on the
  flattened cloud in float64 with ``ivp_method`` (default ``"dopri5"``, the package's Dormand-Prince 5(4);
  any ``solve_ivp`` name also works, e.g. ``"DOP853"``) and ``rtol, atol`` (default ``1e-7, 1e-9``).

Old spellings keep working with a :class:`DeprecationWarning` that says what runs: ``method="rk4"`` without
``steps`` (it always ran error-controlled Dormand-Prince 5(4): say ``"dopri5"``) and ``method="adaptive"``
(say ``"ivp"``).

Output times: ``t_eval`` (increasing times in ``[0, T]``, the vocabulary of the moment ODE) fills
``run.times = t_eval`` and ``run.trajectory``: for ``dopri5`` by the pair's dense output inside a step, for
the fixed-step methods by cutting the grid at those times (each segment keeps steps of size ``<= T/steps``,
so the saved states are the integrator's own values), for ``ivp`` by its ``t_eval``.  ``save_every=k``
(fixed-step methods: every ``k`` steps; the others: every ``k`` steps of the nominal grid) is the older
way to ask for frames.

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
not converge raises :class:`~symbolic_tpde.errors.ConvergenceError` naming the time.  Nothing is printed
unless asked: ``progress=True`` writes a plain-text progress bar to stderr, ``progress=None`` only when the
run is expected to take more than ~2 s (what ``tpde particles`` passes).

>>> import numpy as np, symbolic_tpde as st
>>> w = st.make_weights([st.make_head("softmax", A=np.eye(2), V=-np.eye(2))])
>>> run = simulate(np.random.default_rng(0).normal(size=(64, 2)), w, 1.0, t_eval=[0.0, 0.5, 1.0])
>>> run.method, run.times.tolist(), run.trajectory.shape
('dopri5', [0.0, 0.5, 1.0], (3, 64, 2))
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import BlowupError, ConvergenceError, InputError
from ...values import value_eq
from ...inputs.checks import positive_int, positive_number
from ...weights import Schedule, Weights
from .fields import as_schedule, field
from ..ode import rk
from .attend import as_points, work_dtype

METHODS = ("dopri5", "rk4", "euler", "ivp")
#: old method names: what they run and what to say instead (a DeprecationWarning says so)
DEPRECATED = {"adaptive": ("ivp", "method='adaptive' is deprecated: it runs the general integrator "
                           "(symbolic_tpde.numerics.ode.solve.integrate) with ivp_method and rtol/atol; say "
                           "method='ivp'")}


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

    __eq__ = value_eq                  # by value, arrays entry by entry (symbolic_tpde.values)


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


def _method(method: str, steps) -> str:
    """The method that runs, warning for an old spelling (module docstring)."""
    import warnings

    if method is None:
        return "dopri5" if steps is None else "rk4"
    if method == "rk4" and steps is None:
        warnings.warn("method='rk4' without steps runs error-controlled Dormand-Prince 5(4), not RK4: say "
                      "method='dopri5' (or give steps= for fixed RK4 steps)", DeprecationWarning, stacklevel=3)
        return "dopri5"
    if method in DEPRECATED:
        new, msg = DEPRECATED[method]
        warnings.warn(msg, DeprecationWarning, stacklevel=3)
        return new
    if method not in METHODS:
        raise InputError("method", f"unknown method {method!r}; expected one of {list(METHODS)}")
    return method


def check_times(t_eval, T: float):
    """``t_eval`` as a float array of non-decreasing times in ``[0, T]`` (``None`` stays ``None``)."""
    if t_eval is None:
        return None
    try:
        tq = np.asarray(t_eval, dtype=float)
    except (TypeError, ValueError):
        raise InputError("t_eval", "must be a list of numbers") from None
    if tq.ndim != 1 or not np.all(np.isfinite(tq)) or np.any(np.diff(tq) < 0) or \
            (tq.size and (tq[0] < 0 or tq[-1] > T)):
        raise InputError("t_eval", f"must be non-decreasing finite times within [0, T = {T:g}]")
    return tq


def _check_args(T, steps, method, save_every, rtol, atol):
    T = positive_number(T, "T", allow_zero=True)
    positive_int(steps, "steps", allow_none=True)
    positive_int(save_every, "save_every", allow_none=True)
    for v, name in ((rtol, "rtol"), (atol, "atol")):
        if v is not None:
            positive_number(v, name)
    return T


def segments(schedule: Schedule, T: float) -> list[tuple[float, float]]:
    """``[0, T]`` cut at the layer breakpoints: consecutive ``(a, b)`` pairs."""
    pts = [0.0] + [float(t) for t in schedule.breakpoints(T)] + [T]
    return [(a, b) for a, b in zip(pts[:-1], pts[1:]) if b > a]


def simulate(X0, schedule: Schedule | Weights | Callable[[float], Weights], T: float, *, t_eval=None,
             method: str | None = None, steps: int | None = None, dtype=np.float64, save_every: int | None = None,
             progress: bool | None = False, rtol: float | None = None, atol: float | None = None,
             ivp_method: str = "dopri5", block: int | None = None, threads: int | None = None,
             max_seconds: float | None = None) -> ParticleRun:
    """Evolve the particles ``X0`` to time ``T`` (see the module docstring).

    ``t_eval``: times at which to keep the state (``run.times``, ``run.trajectory``).  ``method``: default
    ``"dopri5"``, or ``"rk4"`` when ``steps`` is given (fixed steps are RK4's).  ``steps``: number of
    fixed steps over ``[0, T]`` for ``rk4``/``euler`` (default ``max(10, ceil(100 T))``); with layers (or
    ``t_eval``) each segment gets ``ceil(length / (T/steps))`` steps, so the actual count (``run.steps``) may
    be slightly larger; for ``dopri5`` and ``ivp`` it only defines the nominal grid on which ``save_every``
    saves.  ``save_every=k``: keep the state every ``k`` steps (and at ``0`` and ``T``).  ``dtype``
    (float32/float64): ``dopri5``/``rk4``/``euler`` do all work in it; ``ivp`` keeps the state in float64 and
    evaluates the field in ``dtype``.  ``rtol``/``atol``: ``dopri5`` (default :func:`auto_tolerance`) and
    ``ivp`` (default ``1e-7``/``1e-9``).  ``progress``: ``False`` (default) nothing printed, ``True`` a bar on
    stderr, ``None`` a bar when the run is expected to last more than ~2 s.  ``max_seconds``: wall-clock cap
    (``None``: none; module docstring, Bounded work).

    >>> import numpy as np
    >>> from symbolic_tpde import make_head, make_weights
    >>> w = make_weights([make_head("softmax", A=np.zeros((2, 2)), V=-np.eye(2))])   # the mean decays as e^{-t}
    >>> run = simulate(np.array([[1.0, 0.0], [0.0, 1.0]]), w, 1.0, method="rk4", steps=100)
    >>> run.method, bool(np.allclose(run.X.mean(axis=0), 0.5 * np.exp(-1.0), rtol=0, atol=1e-9))
    ('rk4', True)
    """
    from ..ode.solve import Deadline

    method = _method(method, steps)
    T = _check_args(T, steps, method, save_every, rtol, atol)
    tq = check_times(t_eval, T)
    if tq is not None and save_every is not None:
        raise InputError("save_every", "give either t_eval or save_every, not both")
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
        if method == "ivp":
            return _adaptive(X, sched, T, n_steps, save_every, 1e-7 if rtol is None else rtol,
                             1e-9 if atol is None else atol, ivp_method, dt, bar, cache, block, threads, dl, tq)
        return _stepped(X, sched, T, n_steps, save_every, dt, bar, cache, block, threads, dl,
                        None if method == "dopri5" else method, tq, (rtol, atol))
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


def _stepped(X, sched, T, n_steps, save_every, dt, bar, cache, block, threads, dl, method, tq=None,
             tols=(None, None)) -> ParticleRun:
    """The built-in particle methods on :class:`.rk.RKSolver` (the package's one stepping routine and step
    controller), the whole cloud as one row in its own dtype (the error norm is accumulated in float64), a
    new solver (first stage) at each layer breakpoint.  ``method`` ``"euler"``/``"rk4"``: fixed steps of size
    ``<= T/n_steps`` per segment, saved every ``save_every`` steps; ``None``: Dormand-Prince 5(4) at
    :func:`auto_tolerance`, the step size carried over breakpoints, saved on the nominal grid by its dense
    output, ``error_estimate`` = Σ over accepted steps of ``max |embedded local error|``.  ``tq``: the
    ``t_eval`` times (dense output for ``None``; cut points of the grid for the fixed-step methods)."""
    adaptive = method is None
    name = "dopri5" if adaptive else method
    tab = rk.DOPRI5 if adaptive else rk.tableau(method)
    n, d = X.shape
    tol = auto_tolerance(n, dt) if adaptive else None
    rtol, atol = (tol if v is None else float(v) for v in tols) if adaptive else (None, None)
    h_max = T / n_steps if T > 0 else 0.0
    layered = sched.func is None
    grid = None
    if save_every and adaptive:
        grid = [k * T / n_steps for k in range(0, n_steps + 1, save_every)]
        if grid[-1] != T:
            grid.append(T)
    elif tq is not None and adaptive:
        grid = list(tq)
    times, traj = ([0.0], [X.copy()]) if save_every and grid is None else (None, None)
    if grid is not None or tq is not None:
        times, traj = [], []
    pending = [] if tq is None or adaptive else list(tq)     # fixed steps: times still to record
    while pending and pending[0] <= 0:
        times.append(pending.pop(0))
        traj.append(X.copy())
    gi = 0
    while grid is not None and gi < len(grid) and grid[gi] <= 0:
        times.append(grid[gi])
        traj.append(X.copy())
        gi += 1
    k_step, nrej, nfev, err_sum, h = 0, 0, 0, 0.0, None
    segs = segments(sched, T)
    if pending:                 # fixed steps with t_eval: the grid is cut at the requested times
        cuts = sorted({a for a, _ in segs} | {T} | {float(t) for t in pending if 0 < t < T})
        segs = list(zip(cuts[:-1], cuts[1:]))
    for a, b in segs:
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
                        rhs_at_ends=False, **({} if rtol is None else dict(rtol=rtol, atol=atol)))
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
                kw = dict(error_estimate=err_sum, tolerance=rtol, rejected=nrej + int(s.n_rejected[0])) \
                    if adaptive else {}
                return _stopped(t, acc.y1[0].reshape(n, d), times, traj, name, k_step, nfev + s.nfev, dt, **kw)
        if s.status(0) != rk.Status.OK:
            raise BlowupError(float(s.t[0]), f"{name} step {k_step + 1}", "step size underflow: the error control "
                              "cannot be met (the state or field overflows)" if adaptive else "state overflowed")
        X, h = s.Y[0].reshape(n, d), (float(s.h[0]) if adaptive and s.n_steps[0] else None)
        nrej, nfev = nrej + int(s.n_rejected[0]), nfev + s.nfev
        while pending and pending[0] <= b:
            times.append(pending.pop(0))
            traj.append(X.copy())
    if grid is not None and gi < len(grid):  # T = 0
        times += grid[gi:]
        traj += [X.copy()] * (len(grid) - gi)
    elif save_every and times[-1] != T:
        times.append(T)
        traj.append(X.copy())
    kw = dict(error_estimate=err_sum, tolerance=rtol, rejected=nrej) if adaptive else {}
    return ParticleRun(T, X, None if times is None else np.array(times),
                       None if traj is None else np.stack(traj), name, k_step, nfev, dt.name, **kw)


def _adaptive(X, sched, T, n_steps, save_every, rtol, atol, ivp_method, dt, bar, cache, block, threads, dl,
              tq=None):
    """The flattened cloud through :func:`.solve.integrate` (own Dormand-Prince by default), restarting at the
    layer breakpoints.  A non-finite field makes the step fail (rejection); the step size then collapses at
    the blow-up and :class:`BlowupError` is raised with the last accepted time."""
    from ..ode.solve import Status, integrate

    n, d = X.shape
    layered = sched.func is None
    edges = [a for a, _ in segments(sched, T)] + [T]
    where = f"ivp ({ivp_method})"

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

    t_eval = tq
    if save_every:
        t_eval = np.unique(np.concatenate([np.linspace(0.0, T, n_steps // save_every + 1), edges]))
    keep = save_every or tq is not None
    sol = integrate(fun, X.astype(np.float64).ravel(), (0.0, T), method=ivp_method, rtol=rtol, atol=atol,
                    t_eval=t_eval, breakpoints=edges[1:-1], progress=lambda t, _T: bar.update(t), max_seconds=dl)
    if sol.status == Status.TIME_LIMIT:
        times = list(sol.t) if keep else None
        traj = list(sol.y.reshape(-1, n, d)) if keep else None
        return _stopped(sol.t_end, sol.y_end.reshape(n, d).copy(), times, traj, "ivp", sol.n_steps, sol.nfev,
                        dt)
    if sol.status != Status.OK:
        raise BlowupError(sol.t_end, where, sol.message)
    Xf = sol.y_end.reshape(n, d).copy()
    return ParticleRun(T, Xf, sol.t.copy() if keep else None,
                       sol.y.reshape(-1, n, d).copy() if keep else None, "ivp", sol.n_steps, sol.nfev,
                       dt.name)
