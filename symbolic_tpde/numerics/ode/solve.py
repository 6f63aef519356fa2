"""One entry point for every time loop: :func:`integrate` → :class:`Solution` with a :class:`Status`.

Steppers.  ``method`` ``"euler"``, ``"rk4"`` (fixed step: ``h=`` or ``steps=``), ``"bs32"``, ``"dopri5"``
(adaptive) run on the package's own Runge-Kutta routine (:mod:`.rk`); any ``scipy.integrate.solve_ivp``
method name (``"RK45"``, ``"RK23"``, ``"DOP853"``, ``"LSODA"``, ``"BDF"``, ``"Radau"``) runs scipy's
``OdeSolver`` step by step.  Either way this module sees one accepted step at a time with its dense output
(:mod:`.rk`'s tableau interpolant, or scipy's ``dense_output()``), so events, monitors and outputs are the
same code for all methods.

Breakpoints (layer boundaries): the integration restarts at each one; on a segment ``[a, b]`` the
right-hand side is evaluated at ``min(t, b⁻)`` (``b⁻`` the float just below ``b``), i.e. as its left limit,
so a rhs that jumps at ``b`` never sees the next layer inside the segment (a 1-ulp shift in ``t`` otherwise).

Events are objects handed in by the caller (``events=``); this module knows nothing of what they mean:

* a :class:`BlowupMonitor` (at most one) watches a positive size for a finite-time singularity (below);
* a :class:`StopCondition` names quantities that must stay > 0 (e.g. the Gaussian layer's tilt pivots) and
  stops the run with status ``EVENT`` when one crosses 0 (``Solution.event`` is the :class:`Event`, its
  ``kind`` the condition's name, the message the condition's).

Blow-up (the package's one criterion, :class:`BlowupMonitor`).  Let ``r(t) = size(y(t)) > 0``.
Near a power-law singularity ``r ≈ c (T* - t)^{-p}`` the quotient ``q = r / (dr/dt) = (T* - t)/p`` is affine in
``t``.  Crossings of ``r = r₀ L_k`` (levels ``L_k``, default ``10³ … 10¹⁰``) are located on the dense output
(Brent's method) and ``q_k = r_k / dsize(y_k, f(t_k, y_k))`` is computed there from the rhs.  Origin of the
levels: the first, ``10³ r₀``, puts the samples in the singular regime ``τ ≪ T*`` (at ``r = 10³ r₀``, ``τ ≈ 10⁻³ T*`` for
``p = 1``, so the ``O(τ)`` correction to ``q`` is ~10⁻³ relative); the last, ``10¹⁰ r₀``, makes the
extrapolation error ``O(τ_k τ_{k+1}) ≈ 10⁻¹⁹ T*²`` negligible next to round-off while ``Σ`` keeps
``cond ≲ 10¹⁰ cond Σ₀``, i.e. about six significant digits of its small eigenvalues in float64.  Consecutive pairs
give ``p_k = -(t_{k+1} - t_k)/(q_{k+1} - q_k)`` and ``T_k = t_{k+1} + p_k q_{k+1}`` (:func:`extrapolate`).  For
the softmax Riccati equation ``Σ = M/τ + N + O(τ)`` (``τ = T* - t``), ``p = 1`` and ``T_k - T* = O(τ_k τ_{k+1})``
(arXiv 2501.18322, the Gaussian moment ODEs).  After the top level the run is declared ``BLOWUP`` if
the last two exponents agree within 10 %, ``0 < p < 20`` and ``T* - t ≤ 1e-3 (T* - t₀)``.  Error bar:
``|T_K - T_{K-1}|`` (extrapolation spread, an over-estimate of a quadratically converging sequence)
plus the integration error, from two more runs: one at 100x looser tolerances (its gap over-estimates the
truncation error of the tight run for a convergent method) and one at the same tolerances with the right-hand
side perturbed by a few ulps (:func:`roundoff_sample`: where the dynamics amplify round-off, e.g. a covariance
of condition 1e16 on the way, the run's error is round-off noise that the looser run's gap can miss by
chance); :func:`sample_error` makes the three times one bound (a gap of the looser run alone counts 5.7x; each
extra run costs about one run).  Exponential growth (``q → const``, ``p_k → ∞``) fails the test:
the run continues, and ``OVERFLOW`` is reported (with its time) if ``r`` exceeds ``r₀·overflow``
(default ``1e200``).  A step-size collapse after ≥ 3 levels with the signature (weak singularities such as
``(T* - t)^{-1/2}``) is also ``BLOWUP``.

Other statuses (:class:`~.rk.Status`, the package's one vocabulary).  ``EVENT``: a component of a
:class:`StopCondition` crossed 0; its time is the root of the component along the dense output, to round-off.
If instead the rhs became non-finite there first (the step size collapsed on non-finite trial values, or the
step size collapsed as the ODE became singular) with a component within ``near_zero`` (default ``1e-3``) of
its start scale of 0, the time reached is reported as that event.  ``STALLED``: more than ``max_nfev`` evaluations, or the step size collapsed without a
blow-up signature; a non-finite rhs is an :class:`Event` ``"nonfinite"`` with its time, never silent NaNs.

Bounded work.  Two caps, both reported as a status with the time reached, never a hang: ``max_nfev``
right-hand side evaluations (``STALLED``) and ``max_seconds`` of wall-clock time (``TIME_LIMIT``; a
:class:`Deadline`, checked before every rhs evaluation, so the overshoot is at most one evaluation; the
error-bar runs share the same deadline).  :class:`Deadline` is the package's one wall-clock cap:
the particle loops of :mod:`.integrate` check the same object once per step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ...values import value_eq
from . import rk
from .rk import Status

OWN_METHODS = tuple(rk.TABLEAUS)
SCIPY_METHODS = ("RK45", "RK23", "DOP853", "LSODA", "BDF", "Radau")
DEFAULT_LEVELS = tuple(10.0 ** np.arange(3, 11))   # origin: module docstring, Blow-up


def wants_jacobian(method: str) -> bool:
    """Whether ``method`` uses a Jacobian, asked of the method itself: a tableau says whether it is implicit;
    a scipy ``OdeSolver`` class whether its constructor takes ``jac``."""
    if method in OWN_METHODS:
        return rk.tableau(method).implicit
    import inspect

    import scipy.integrate as si

    return "jac" in inspect.signature(getattr(si, method)).parameters


@dataclass(frozen=True)
class Event:
    """``kind``: ``"level"`` (size crossed level ``index``, ``value`` = size), ``"blowup"``, the name of a
    :class:`StopCondition` (``index`` = its component), ``"overflow"``, ``"nonfinite"``, ``"stalled"``,
    ``"time-limit"``."""

    kind: str
    time: float
    value: float | None = None
    index: int | None = None


@dataclass(frozen=True)
class BlowupMonitor:
    """Size ``r = size(y) > 0`` with its derivative ``dsize(y, f(t, y))``, levels, overflow factor, and
    whether to make the error-bar runs (module docstring).  :meth:`rows` applies the same criterion
    to the rows of a batched :func:`.rk.rk_solve` (``size``/``dsize`` must then accept ``(m, n)`` arrays)."""

    size: Callable
    dsize: Callable
    levels: tuple = DEFAULT_LEVELS
    overflow: float = 1e200
    error_run: bool = True

    def rows(self, Y0, t0=0.0) -> RowBlowup:
        return RowBlowup(self, Y0, t0)


class RowBlowup:
    """:class:`BlowupMonitor` on the rows of a batch: the ``monitor`` of :func:`.rk.rk_solve`.

    A row's sample ``(t, r, q)`` is taken at the end of the first accepted step past each level (``q = r/(dr/dt)``
    from the step's own ``f``, no root finding: ``q = (T* - t)/p`` holds at any point of the trajectory, so
    :func:`singularity_signature` applies unchanged; a step that passes several levels gives one sample).  After
    the top level the signature stops the row with ``BLOWUP``; ``r ≥ r₀·overflow`` stops it with ``OVERFLOW``.
    :meth:`settle` applies the signature to rows whose step size collapsed (``NONFINITE``), as :func:`integrate`
    does.  Per row: ``blowup_time``, ``spread`` (extrapolation), ``exponent`` (NaN where no blow-up)."""

    def __init__(self, mon: BlowupMonitor, Y0, t0=0.0):
        self.mon = mon
        r0 = np.asarray(mon.size(np.asarray(Y0)), float)
        if not np.all(r0 > 0):
            raise ValueError("the monitored size of every row of Y0 must be positive")
        N = len(r0)
        self.thresholds = r0[:, None] * np.asarray(mon.levels, float)[None, :]
        self.r_overflow = r0 * mon.overflow
        self.t0 = np.broadcast_to(np.asarray(t0, float), (N,))
        self.k = np.zeros(N, dtype=int)
        self.samples: list[list] = [[] for _ in range(N)]
        self.blowup_time, self.spread, self.exponent = (np.full(N, np.nan) for _ in range(3))

    def _signature(self, i: int) -> bool:
        if len(self.samples[i]) < 3:
            return False
        ts, _, qs = zip(*self.samples[i])
        sig, Tst, spread, p = singularity_signature(ts, qs, self.t0[i])
        if sig:
            self.blowup_time[i], self.spread[i], self.exponent[i] = Tst, spread, p
        return sig

    def __call__(self, acc):
        rows, L = acc.rows, self.thresholds.shape[1]
        r = np.asarray(self.mon.size(acc.y1), float)
        out = np.full(len(rows), None, dtype=object)
        k = self.k[rows]
        hit = np.nonzero((k < L) & (r >= self.thresholds[rows, np.minimum(k, L - 1)]))[0]
        if hit.size:
            q = r[hit] / np.asarray(self.mon.dsize(acc.y1[hit], acc.f1[hit]), float)
            for j, qj in zip(hit.tolist(), q.tolist()):
                i = rows[j]
                self.samples[i].append((float(acc.t1[j]), float(r[j]), qj))
                self.k[i] = np.searchsorted(self.thresholds[i], r[j], side="right")
                if self.k[i] == L and self._signature(i):
                    out[j] = Status.BLOWUP
        out[(r >= self.r_overflow[rows]) & (out == None)] = Status.OVERFLOW  # noqa: E711
        return out

    def settle(self, status: np.ndarray) -> np.ndarray:
        """``status`` with ``NONFINITE`` rows that carry the singularity signature turned into ``BLOWUP``."""
        status = status.copy()
        for i in np.nonzero(status == Status.NONFINITE)[0]:
            if self._signature(i):
                status[i] = Status.BLOWUP
        return status


@dataclass(frozen=True)
class StopCondition:
    """A terminal event: ``g(t, y)`` are quantities that must stay > 0; the run stops (status ``EVENT``) when one
    crosses 0.  ``name`` becomes the :class:`Event` kind; ``message`` is formatted with the time ``t``.
    ``near_zero``: when the integration fails (step size collapse, non-finite rhs) with a component within
    ``near_zero`` times its start scale of 0, the failure is this event (the ODE is singular where it fires)."""

    g: Callable
    name: str
    message: str = "a stop condition failed at t = {t:.12g}"
    near_zero: float = 1e-3


@dataclass
class Solution:
    """``t (K,)``, ``y (K, n)``: every accepted step (or the ``t_eval`` points reached, plus the stopping point
    when the run stopped early); ``t_end``/``y_end``: where the run ended (state at the top level after a
    blow-up, at the event for the other early stops); ``samples``: ``(t_k, r_k, q_k)`` at the levels."""

    t: np.ndarray
    y: np.ndarray
    status: Status
    message: str
    event: Event | None = None          # the terminal event when status is EVENT
    blowup_time: float | None = None
    blowup_time_error: float | None = None
    exponent: float | None = None
    events: list = field(default_factory=list)
    nfev: int = 0
    n_steps: int = 0
    method: str = "dopri5"
    t_end: float = 0.0
    y_end: np.ndarray | None = None
    samples: list = field(default_factory=list)

    __eq__ = value_eq          # by value, arrays entry by entry (symbolic_tpde.values)


def extrapolate(ts: Sequence[float], qs: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """From samples ``(t_k, q_k)`` with ``q = (T* - t)/p``: per consecutive pair, ``(T_k, p_k)``."""
    ts, qs = np.asarray(ts, float), np.asarray(qs, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = -np.diff(ts) / np.diff(qs)
    return ts[1:] + p * qs[1:], p


def singularity_signature(ts, qs, t0: float) -> tuple[bool, float, float, float]:
    """``(is blow-up, T*, extrapolation spread, p)`` from the level samples (module docstring)."""
    if len(ts) < 3:
        return False, np.nan, np.nan, np.nan
    T, p = extrapolate(ts, qs)
    pK, pK1 = p[-1], p[-2]
    ok = (np.isfinite(pK) and np.isfinite(pK1) and 0 < pK < 20 and abs(pK - pK1) <= 0.1 * abs(pK)
          and np.isfinite(T[-1]) and T[-1] > ts[-1] and (T[-1] - ts[-1]) <= 1e-3 * (T[-1] - t0))
    with np.errstate(invalid="ignore"):  # exponential growth: T_k may be ±inf (then ok is False)
        return bool(ok), float(T[-1]), float(abs(T[-1] - T[-2])), float(pK)


#: relative size of the pseudo-random perturbation of the right-hand side in a round-off sample run
#: (:func:`roundoff_sample`): a few ulps, the size of the rounding of one evaluation.  Measured on fuzz case 213
#: of seed 8302 (softmax, d = 3, V = I + skew; regular form at rtol 1e-12, 8 seeds per size): the standard
#: deviation of T* is 1.1e-11, 1.5e-11, 1.7e-11 for sizes eps, 16 eps, 256 eps, i.e. nearly independent of the
#: size: the run's own round-off, amplified by the dynamics, sets it (unperturbed runs at rtol 1e-9 ... 1e-13
#: scatter by the same 1e-11 around the 30-digit reference)
ROUNDOFF_NOISE = 4 * float(np.finfo(float).eps)
#: Student's t quantile (two-sided 99 %, 2 degrees of freedom) that turns the sample standard deviation of three
#: blow-up times into an error bound (:func:`sample_error`).  99 %, not 95 %: three samples estimate a spread
#: poorly (measured, case 213 above: the plain run and its two reruns within 1.5e-12 of each other where the
#: standard deviation over 9 runs is 7.5e-12), and the heavy tail of t with 2 degrees of freedom says so
T99_2DOF = 9.925
#: an error-bar run may use this many times the evaluations of the run it checks (plus 10 000); beyond, its time
#: is missing and the bound falls back on the distance to the last state reached
ERROR_RUN_BUDGET = 4


def roundoff_sample(f: Callable, seed: int, size: float = ROUNDOFF_NOISE) -> Callable:
    """``f`` with each component of its value multiplied by its own ``1 + size·u_i(y)``, ``u_i ∈ [-1, 1)`` a
    deterministic hash of the bits of ``y``, ``i`` and ``seed`` (the same state gives the same value, as a stepper
    needs; one factor for all components would only re-time an autonomous orbit): a run that differs from the
    plain one by round-off-sized errors, i.e. one more sample of the round-off part of its result."""
    mix = (int(seed) * 0x9E3779B97F4A7C15) % 2 ** 64
    golden, lcg = np.uint64(0x9E3779B97F4A7C15), np.uint64(6364136223846793005)

    def g(t, y, *args):
        v = np.asarray(f(t, y, *args), float)
        bits = np.frombuffer(np.ascontiguousarray(y, dtype=float).tobytes(), dtype=np.uint64)
        key = np.uint64(int(bits.sum(dtype=np.uint64)) ^ mix)
        h = (np.arange(v.size, dtype=np.uint64) * golden + key) * lcg          # wraps modulo 2⁶⁴
        h = (h ^ (h >> np.uint64(29))) * lcg
        u = (h >> np.uint64(11)).astype(float) / 2.0 ** 52 - 1.0
        return v * (1.0 + size * u.reshape(v.shape))
    return g


def sample_error(T_main: float, others) -> float:
    """Error bound of ``T_main`` from runs that differ from it by tolerance or round-off (``others``: their
    times): :data:`T99_2DOF` times the sample standard deviation of the three times (a 99 % bound where they
    are independent normal samples of one error; a tolerance gap ``g`` alone, the other two equal, gives
    ``5.7 g``).  ``others`` with fewer than two times: the largest gap (the caller widens it)."""
    xs = [float(T_main)] + [float(x) for x in others if x is not None and math.isfinite(x)]
    if len(xs) < 3:
        return max((abs(x - xs[0]) for x in xs[1:]), default=0.0)
    return T99_2DOF * float(np.std(xs, ddof=1))


def as_monitor(blowup) -> BlowupMonitor:
    """A :class:`BlowupMonitor`, a pair ``(size, dsize)`` or weights ``w`` of ``r = w·y``."""
    if isinstance(blowup, BlowupMonitor):
        return blowup
    if isinstance(blowup, tuple) and len(blowup) == 2 and callable(blowup[0]):
        return BlowupMonitor(*blowup)
    w = np.asarray(blowup, float)
    return BlowupMonitor(lambda y: y @ w, lambda y, fy: fy @ w)


class Deadline:
    """A wall-clock cap of ``seconds`` from construction (``time.monotonic``); ``None`` means no cap.

    :meth:`expired` is the one test every time loop of the package makes (module docstring, Bounded work)."""

    def __init__(self, seconds: float | None):
        if seconds is not None and not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
                                        and math.isfinite(seconds) and seconds > 0):
            raise ValueError(f"max_seconds must be a finite number > 0 or None, got {seconds!r}")
        self.seconds = None if seconds is None else float(seconds)
        self.end = None if seconds is None else time.monotonic() + float(seconds)

    @classmethod
    def of(cls, limit) -> Deadline:
        """``limit``: a :class:`Deadline` (shared, e.g. by the error-bar run), seconds, or ``None``."""
        return limit if isinstance(limit, Deadline) else cls(limit)

    def expired(self) -> bool:
        return self.end is not None and time.monotonic() >= self.end

    def left(self) -> float | None:
        """Seconds left (at least 1 ms, so that a cap made of it is valid and expires at once); ``None``: no cap."""
        return None if self.end is None else max(self.end - time.monotonic(), 1e-3)

    def share(self, fraction: float) -> Deadline:
        """A cap at ``fraction`` (``0 < fraction <= 1``) of the time left, within this one (itself at 1): a stage
        of a multi-stage computation that leaves the rest to the stages after it."""
        return self if self.end is None or fraction >= 1 else Deadline(fraction * self.left())

    def check(self) -> None:
        """Raise :class:`TimeLimitReached` once expired (for loops that are not :func:`integrate`'s)."""
        if self.expired():
            raise TimeLimitReached(self.describe())

    def describe(self) -> str:
        return f"wall-clock limit of {self.seconds:g} s reached"


class _Stalled(Exception):
    pass


class TimeLimitReached(Exception):
    """A :class:`Deadline` expired inside a loop; :func:`integrate` turns it into status ``TIME_LIMIT``."""


class _NonFinite(ArithmeticError):
    def __init__(self, t):
        self.t = float(t)


#: ``stuck_evals`` evaluations in a row without ``t`` moving by this (relative to ``|t|``) are a collapsed step size: a run
#: stopped there would have moved ``t`` by at most ``STUCK_PROGRESS·max_nfev/stuck_evals`` (relative) with its
#: whole budget, while a healthy approach to a blow-up passes ``T* - t = 10⁻⁶ … 10⁻¹⁰ T*`` in a few hundred
#: steps
STUCK_PROGRESS = 1e-7


class _Rhs:
    """Counts evaluations (``_Stalled`` past ``limit``, or after ``stuck`` evaluations in a row without ``t``
    moving by a relative :data:`STUCK_PROGRESS`; :class:`TimeLimitReached` once ``deadline`` expired), notes
    the time of the last non-finite value and, for the implicit scipy methods, raises ``_NonFinite`` on it
    (they cannot reject such a step)."""

    def __init__(self, f, limit, raise_nonfinite, deadline, stuck=None):
        self.f, self.limit, self.raise_nonfinite, self.deadline = f, limit, raise_nonfinite, deadline
        self.n, self.bad_t = 0, None
        self.stuck, self.t_ref, self.n_still = stuck, math.nan, 0

    def __call__(self, t, y):
        self.n += 1
        if self.n > self.limit:
            raise _Stalled(f"integrator stalled after {self.limit} right-hand side evaluations")
        if self.stuck is not None:
            # relative to |t| itself, not to max(1, |t|): a run on a short time scale (ℓ2 with V = 1e50: an e-fold
            # of growth every 2.5e-51) moves t by far less than 1e-7 in 20 000 healthy evaluations
            if abs(t - self.t_ref) <= STUCK_PROGRESS * abs(self.t_ref):
                self.n_still += 1
                if self.n_still > self.stuck:
                    raise _Stalled(f"integrator stalled: {self.stuck} right-hand side evaluations without t moving "
                                   f"by a relative {STUCK_PROGRESS:g}")
            else:
                self.t_ref, self.n_still = float(t), 0
        self.deadline.check()
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            out = np.asarray(self.f(t, y), dtype=float)
        if not np.isfinite(out).all():
            self.bad_t = float(t)
            if self.raise_nonfinite:
                raise _NonFinite(t)
        return out


class _OwnStepper:
    def __init__(self, f, a, b, y, method, rtol, atol, steps):
        self.tab = rk.tableau(method)
        F = lambda t, Y: f(t[0], Y[0])[None]  # noqa: E731  (one row)
        self.s = rk.RKSolver(F, a, np.asarray(y, float)[None], b, method=self.tab, rtol=rtol, atol=atol,
                             steps=steps, max_steps=10**12)

    @property
    def t(self):
        return float(self.s.t[0])

    @property
    def y(self):
        return self.s.Y[0].copy()

    def step(self):
        """``(t0, t1, y1, interp)`` of the next accepted step, ``None`` at the end, ``"failed"`` on collapse."""
        while self.s.status(0) == Status.RUNNING:
            acc = self.s.step()
            if acc.rows.size:
                return acc.t0[0], acc.t1[0], acc.y1[0].copy(), (lambda tq, acc=acc: acc.at(self.tab, [tq])[0])
        return None if self.s.status(0) == Status.OK else "failed"


class _ScipyStepper:
    def __init__(self, f, a, b, y, method, rtol, atol, jac):
        import scipy.integrate as si

        kw = {"jac": jac} if (jac is not None and wants_jacobian(method)) else {}
        self.s = getattr(si, method)(f, a, np.asarray(y, float), b, rtol=rtol, atol=atol, **kw)

    t = property(lambda self: float(self.s.t))
    y = property(lambda self: np.array(self.s.y, float))

    def step(self):
        if self.s.status == "finished":
            return None
        t0 = float(self.s.t)
        # A stage that lands where the right-hand side is not finite (overshooting a blow-up, a generated form
        # overflowing in its intermediates) is already recorded by _Rhs (``bad_t``: the ``nonfinite`` event);
        # scipy's explicit pairs reject that step (its error norm is NaN, not < 1) and retry at h/5, but first
        # weigh the stages (``inf·0``) and warn "invalid value encountered in dot".  The package's own stepper
        # (rk.RKSolver) takes its steps under the same errstate.  For the implicit methods _Rhs raises _NonFinite
        # on such a value before scipy uses it.
        with np.errstate(over="ignore", invalid="ignore"):
            self.s.step()
        if self.s.status == "failed":
            return "failed"
        return t0, float(self.s.t), np.array(self.s.y, float), self.s.dense_output()


def _values(cond: StopCondition, t, y) -> np.ndarray:
    return np.asarray(cond.g(t, y), float).ravel()


def _root(g, a, b):
    """Root of ``g`` in ``[a, b]`` to round-off (Brent); ``b`` if the signs do not bracket one."""
    from scipy.optimize import brentq

    ga, gb = g(a), g(b)
    if not (ga < 0 <= gb or ga > 0 >= gb) or a == b:
        return b
    return float(brentq(g, a, b, xtol=1e-300, rtol=4 * np.finfo(float).eps))


def integrate(f: Callable, y0, t_span, *, method: str = "dopri5", rtol: float = 1e-10, atol: float | None = None,
              t_eval=None, breakpoints: Sequence[float] = (), events: Sequence = (),
              max_nfev: int = 1_000_000, progress: Callable | None = None, h: float | None = None,
              steps: int | None = None, jac: Callable | None = None, max_seconds=None,
              stuck_evals: int | None = None) -> Solution:
    """Integrate ``y' = f(t, y)`` on ``t_span = (t0, T)`` (module docstring).

    ``atol`` default ``1e-14 max(1, |y0|_∞)``; ``h``/``steps`` for the fixed-step methods (default 100
    steps per unit time, at least 10); ``events``: :class:`BlowupMonitor` (at most one) and
    :class:`StopCondition` objects; ``jac`` is used by the methods that want it (:func:`wants_jacobian`);
    ``progress(t, T)`` is
    called after each accepted step; ``max_seconds`` (seconds, a :class:`Deadline`, or ``None``: no cap) the
    wall-clock cap, status ``TIME_LIMIT`` at the last accepted time when it is reached (the clock starts
    here, after the one-off import of scipy's steppers).  ``stuck_evals``: stop (``STALLED``) after that many
    evaluations in a row without ``t`` moving by a relative :data:`STUCK_PROGRESS` (a collapsed step size) instead of
    spending the whole ``max_nfev`` budget there (``None``: no such stop)."""
    if method in SCIPY_METHODS:
        import scipy.integrate  # noqa: F401  (a one-off import is not integration time)
    deadline = Deadline.of(max_seconds)
    if method not in OWN_METHODS + SCIPY_METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {list(OWN_METHODS + SCIPY_METHODS)}")
    y0 = np.asarray(y0, dtype=float).ravel()
    t0, T = (float(x) for x in t_span)
    if not (math.isfinite(t0) and math.isfinite(T) and T >= t0):
        raise ValueError(f"t_span must be finite and increasing, got {t_span}")
    if atol is None:
        atol = 1e-14 * max(1.0, float(np.abs(y0).max(initial=0.0)))
    if t_eval is not None:
        t_eval = np.asarray(t_eval, dtype=float)
        if t_eval.ndim != 1 or np.any(np.diff(t_eval) < 0) or (t_eval.size and (t_eval[0] < t0 or t_eval[-1] > T)):
            raise ValueError("t_eval must be increasing times within t_span")
    mons = [e for e in events if isinstance(e, BlowupMonitor)]
    conds = [e for e in events if isinstance(e, StopCondition)]
    if len(mons) > 1 or len(mons) + len(conds) != len(events):
        raise ValueError("events: at most one BlowupMonitor, and StopCondition objects")
    mon = mons[0] if mons else None
    kw = dict(method=method, rtol=rtol, atol=atol, breakpoints=breakpoints, conditions=conds,
              max_nfev=max_nfev, h=h, steps=steps, jac=jac, deadline=deadline, stuck=stuck_evals)
    sol = _Run(f, y0, t0, T, mon, t_eval=t_eval, progress=progress, **kw).run()
    if sol.status == Status.BLOWUP and mon.error_run:
        k = len(sol.samples)
        others = []
        # each error run gets ERROR_RUN_BUDGET times the plain run's evaluations: a perturbed run that loses the
        # signature (measured: V = I, A + Aᵀ = I, the sensitivity system) must not spend the whole budget
        kw = dict(kw, max_nfev=min(max_nfev, ERROR_RUN_BUDGET * sol.nfev + 10_000))
        for g, opts in ((f, dict(kw, rtol=100 * rtol, atol=100 * atol)), (roundoff_sample(f, 1), kw)):
            s2 = _Run(g, y0, t0, T, mon, t_eval=None, progress=None, **opts).run()
            sol.nfev += s2.nfev
            smp2 = s2.samples[:k]
            if s2.status == Status.BLOWUP and len(smp2) >= 3:
                T2, _ = extrapolate([s[0] for s in smp2], [s[2] for s in smp2])
                others.append(float(T2[-1]))
        if len(others) == 2:
            sol.blowup_time_error += sample_error(sol.blowup_time, others)
        else:
            sol.blowup_time_error = max(sol.blowup_time_error + sample_error(sol.blowup_time, others),
                                        abs(sol.blowup_time - sol.t_end))
    return sol


class _Run:
    """One pass of :func:`integrate` (the error-bar run is a second pass)."""

    def __init__(self, f, y0, t0, T, mon, *, method, rtol, atol, t_eval, breakpoints, conditions, max_nfev,
                 progress, h, steps, jac, deadline, stuck=None):
        self.rhs = _Rhs(f, max_nfev, wants_jacobian(method), deadline, stuck)
        self.deadline = deadline
        self.y0, self.t0, self.T, self.mon = y0, t0, T, mon
        self.method, self.rtol, self.atol, self.jac = method, rtol, atol, jac
        self.t_eval, self.conditions, self.progress, self.max_nfev = t_eval, conditions, progress, max_nfev
        self.edges = [t0] + sorted(float(b) for b in breakpoints if t0 < b < T) + [T]
        self.h_max = None
        if method in ("euler", "rk4"):
            self.h_max = float(h) if h is not None else (T - t0) / (steps or max(10, math.ceil(100 * (T - t0))))
        self.ts, self.ys, self.events, self.samples = [], [], [], []
        self.n_steps = 0

    # -- output ------------------------------------------------------------------------------------------
    def _out(self, t0, t1, y1, interp, closed=True):
        if self.t_eval is None:
            self.ts.append(t1)
            self.ys.append(y1)
            return
        te = self.t_eval[(self.t_eval > t0) & ((self.t_eval <= t1) if closed else (self.t_eval < t1))]
        for tq in te:
            self.ts.append(float(tq))
            self.ys.append(y1 if tq == t1 else np.asarray(interp(tq), float))

    def _finish(self, status, message, t, y, **kw):
        if self.t_eval is not None and status != Status.OK and not (self.ts and self.ts[-1] == t):
            self.ts.append(t)
            self.ys.append(y)
        n = self.y0.size
        return Solution(np.array(self.ts, float), np.array(self.ys, float).reshape(-1, n), status, message,
                        events=self.events, nfev=self.rhs.n, n_steps=self.n_steps, method=self.method, t_end=t,
                        y_end=np.array(y, float), samples=self.samples, **kw)

    def _stepper(self, f, a, b, y):
        if self.method in OWN_METHODS:
            steps = None
            if self.h_max is not None:
                steps = max(1, math.ceil((b - a) / self.h_max - 1e-9))
            return _OwnStepper(f, a, b, y, self.method, self.rtol, self.atol, steps)
        return _ScipyStepper(f, a, b, y, self.method, self.rtol, self.atol, self.jac)

    # -- the loop ----------------------------------------------------------------------------------------
    def run(self) -> Solution:
        y, t = self.y0.copy(), self.t0
        if self.t_eval is None:
            self.ts, self.ys = [t], [y.copy()]
        else:
            for tq in self.t_eval[self.t_eval == t]:
                self.ts.append(t)
                self.ys.append(y.copy())
        mon = self.mon
        if mon is not None:
            r0 = mon.size(y)
            if not r0 > 0:
                raise ValueError("the monitored size of y0 must be positive")
            self.thresholds = [r0 * L for L in mon.levels]
            self.r_overflow = r0 * mon.overflow
        self.k_next = 0
        self.c_scale = []
        for cond in self.conditions:
            c = _values(cond, t, y)
            if c.size and np.min(c) <= 0:
                return self._stop(cond, t, y, int(np.argmin(c)), float(np.min(c)))
            self.c_scale.append(max(1.0, float(np.max(np.abs(c), initial=0.0))))
        try:
            for a, b in zip(self.edges[:-1], self.edges[1:]):
                if b <= a:
                    continue
                res = self._segment(a, b, y)
                if isinstance(res, Solution):
                    return res
                y, t = res, b
        except _Stalled as exc:
            return self._stalled(str(exc))
        except TimeLimitReached:
            return self._time_limit()
        if mon is not None and self.k_next == len(self.thresholds) and self.samples:
            return self._finish(Status.OK, "large growth without blow-up signature", t, y)
        return self._finish(Status.OK, "integrated to T", t, y)

    def _stalled(self, why):
        cur = getattr(self, "cur", None)
        t, y = self.seg_start if cur is None else (cur.t, cur.y)
        self.events.append(Event("stalled", t))
        return self._finish(Status.STALLED, f"{why} at t = {t:.6g} (step size collapsed; the right-hand side may "
                            "be ill-conditioned there)", t, y)

    def _time_limit(self):
        """The wall-clock cap expired: stop at the last accepted step (its state is exact, not interpolated)."""
        cur = getattr(self, "cur", None)
        t, y = self.seg_start if cur is None else (cur.t, cur.y)
        if self.t_eval is None and self.ts[-1] != t:
            self.ts.append(t)
            self.ys.append(y)
        self.events.append(Event("time-limit", t))
        return self._finish(Status.TIME_LIMIT, f"{self.deadline.describe()} at t = {t:.6g} (before T = "
                            f"{self.T:.6g}); raise the limit to finish", t, y)

    def _segment(self, a, b, y):
        rhs = self.rhs
        if b < self.T:
            b_left = float(np.nextafter(b, -np.inf))
            f = lambda t, yy: rhs(min(t, b_left), yy)  # noqa: E731  (left limit at the breakpoint)
        else:
            f = rhs
        self.cur, self.seg_start = None, (a, y)
        self.cur = st = self._stepper(f, a, b, y)
        while True:
            try:
                step = st.step()
            except _NonFinite as exc:
                return self._failed(exc.t)
            if step is None:
                return st.y
            if isinstance(step, str):
                return self._failed(rhs.bad_t if (rhs.bad_t is not None and rhs.bad_t >= st.t) else None)
            self.n_steps += 1
            t0, t1, y1, interp = step
            stop = self._events(f, t0, t1, y1, interp)
            if stop is not None:
                return stop
            self._out(t0, t1, y1, interp)
            if self.progress is not None:
                self.progress(t1, self.T)

    def _stop(self, cond, t, y, j, value=None, detail=None):
        """The run ends at the :class:`StopCondition` ``cond`` (component ``j``) at ``(t, y)``."""
        ev = Event(cond.name, t, value, j)
        self.events.append(ev)
        msg = cond.message.format(t=t) + ("" if detail is None else f" (condition {j} {detail})")
        sol = self._finish(Status.EVENT, msg, t, y)
        sol.event = ev
        return sol

    def _events(self, f, t0, t1, y1, interp):
        """Stop conditions, level crossings and overflow inside the accepted step ``[t0, t1]``."""
        t_stop, stop_kind, j = math.inf, None, None
        for cond in self.conditions:
            c1 = _values(cond, t1, y1)
            for jj in np.nonzero(c1 <= 0)[0]:
                tc = _root(lambda s: float(_values(cond, s, interp(s))[jj]), t0, t1)
                if tc < t_stop:
                    t_stop, stop_kind, j = tc, cond, int(jj)
        mon = self.mon
        if mon is not None:
            if mon.size(y1) >= self.r_overflow:
                to = _root(lambda s: mon.size(interp(s)) - self.r_overflow, t0, t1)
                if to < t_stop:
                    t_stop, stop_kind = to, "overflow"
            while self.k_next < len(self.thresholds) and mon.size(y1) >= self.thresholds[self.k_next]:
                th = self.thresholds[self.k_next]
                tk = _root(lambda s: mon.size(interp(s)) - th, t0, t1)
                if tk > t_stop:
                    break
                yk = y1 if tk == t1 else np.asarray(interp(tk), float)
                rk_ = mon.size(yk)
                qk = rk_ / mon.dsize(yk, f(tk, yk))
                self.samples.append((tk, rk_, qk))
                self.events.append(Event("level", tk, rk_, self.k_next))
                self.k_next += 1
                if self.k_next == len(self.thresholds):
                    ts, _, qs = zip(*self.samples)
                    sig, Tst, spread, p = singularity_signature(ts, qs, self.t0)
                    if sig:
                        self._out(t0, tk, yk, interp, closed=False)
                        self.events.append(Event("blowup", Tst, p))
                        return self._finish(Status.BLOWUP, "finite-time blow-up signature", tk, yk,
                                            blowup_time=Tst, blowup_time_error=spread, exponent=p)
        if stop_kind is None:
            return None
        ys = np.asarray(interp(t_stop), float) if t_stop < t1 else y1
        self._out(t0, t_stop, ys, interp, closed=False)
        if stop_kind != "overflow":
            return self._stop(stop_kind, t_stop, ys, j, detail="crossed 0")
        self.events.append(Event("overflow", t_stop, mon.size(ys)))
        return self._finish(Status.OVERFLOW, "diverges (no finite-time singularity signature); stopped at "
                            f"t = {t_stop:.6g} to stay finite", t_stop, ys)

    def _failed(self, t_bad):
        """The step size collapsed (or an implicit method met a non-finite rhs) at the current time."""
        t, y = self.cur.t, self.cur.y
        if t_bad is not None:
            self.events.append(Event("nonfinite", t_bad))
        if self.mon is not None and len(self.samples) >= 3:
            ts, _, qs = zip(*self.samples)
            sig, Tst, spread, p = singularity_signature(ts, qs, self.t0)
            if sig:
                self.events.append(Event("blowup", Tst, p))
                return self._finish(Status.BLOWUP, "finite-time blow-up signature (step size collapsed "
                                    f"at t = {t:.6g})", t, y, blowup_time=Tst, blowup_time_error=spread, exponent=p)
        for cond, scale in zip(self.conditions, self.c_scale):
            # an ODE that is singular where the condition fails (e.g. the tilted covariance blows up as the
            # tilt ceases to exist) collapses the step size there, before or as the condition reaches 0
            c = _values(cond, t, y)
            if c.size and np.min(c) <= cond.near_zero * scale:
                j = int(np.argmin(c))
                where = "stopped being finite" if t_bad is not None else "became singular (step size collapsed)"
                return self._stop(cond, t, y, j, float(c[j]), f"= {c[j]:.3g}, ~0, where the right-hand side "
                                  f"{where}")
        why = ("the right-hand side became non-finite" if t_bad is not None else "the step size collapsed")
        return self._finish(Status.STALLED, f"integrator stopped at t = {t:.6g}: {why}" +
                            (f" (at t = {t_bad:.6g})" if t_bad is not None else ""), t, y)
