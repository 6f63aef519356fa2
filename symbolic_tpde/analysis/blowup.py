"""Finite-time blow-up: detect it, locate it, bound the error, never overflow.

Method (event detection + extrapolation of the growth law).  Let ``r(t) = w·y(t)`` be a positive linear size of
the state (for Gaussian states ``w`` picks ``tr Σ``; see :func:`trace_weights`).  Near a power-law singularity
``r ≈ c (T* - t)^{-p}``, the quotient ``q = r / (dr/dt) = (T* - t)/p`` is *affine* in ``t``.  The state is
integrated with ``scipy.integrate.solve_ivp`` (DOP853, tight tolerances) with events when ``r`` crosses
``r₀·L_k`` for growing levels ``L_k`` (default ``10³ … 10¹⁰``); at each crossing ``q_k`` is computed exactly
from the right-hand side (``dr/dt = w·f(t, y)``).  Consecutive pairs give ``p_k = -(t_{k+1}-t_k)/(q_{k+1}-q_k)``
and ``T_k = t_{k+1} + p_k q_{k+1}``.  For the softmax Riccati equation ``Σ = M/τ + N + O(τ)`` (``τ = T* - t``),
so ``p = 1`` and ``T_k - T* = O(τ_k τ_{k+1})``: far below round-off at the last levels.

Error bound reported (``blowup_time_error``): ``|T_K - T_{K-1}|`` (extrapolation spread; an over-estimate since
the sequence converges quadratically) ``+ |T*(rtol) - T*(100·rtol)|`` (integration error of a second run at a
100x looser tolerance; an over-estimate of the tight run's error for a convergent method).

Statuses: ``"ok"``, ``"blowup"``, ``"overflow"`` (below) and ``"stalled"`` (the step size collapsed before
``T`` without a blow-up signature: more than ``max_nfev`` evaluations; reported with its time).

A run is declared ``"blowup"`` only if the growth has the signature of a singularity: the last two exponents
``p_k`` agree within 10 %, ``0 < p < 20`` and ``T* - t`` at the last level is below ``1e-3 (T* - t₀)``.
Exponential growth (ℓ2, Sinkhorn: ``q → const``, so ``p_k → ∞``) fails this test: integration then continues
without the terminal event, and if ``r`` exceeds ``r₀·1e200`` before ``T`` the status is ``"overflow"``
(diverges without finite-time blow-up, stopped to stay finite) with its time.

Batched variant: :func:`batch_blowup_times` takes rows stopped by :func:`~.batch.trace_monitor` and continues
them by two more decades with :func:`~.batch.dopri5_batch` to get two ``(t, q)`` pairs per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy.integrate import solve_ivp

from ..errors import InputError


def trace_weights(d: int, with_alpha: bool = True) -> np.ndarray:
    """Weights ``w`` with ``w·y = tr Σ`` for the Gaussian state layout (alpha, then upper triangle of Sigma)."""
    off = d if with_alpha else 0
    w = np.zeros(off + d * (d + 1) // 2)
    for i in range(d):
        w[off + i * d - i * (i - 1) // 2] = 1.0
    return w


@dataclass
class BlowupResult:
    status: str                        # "ok" | "blowup" | "overflow"
    t: float                           # last time reached
    y: np.ndarray                      # state there
    blowup_time: float | None = None
    blowup_time_error: float | None = None
    exponent: float | None = None      # fitted p in r ~ (T* - t)^{-p}
    samples: list[tuple[float, float, float]] = field(default_factory=list)  # (t_k, r_k, q_k)
    message: str = ""


def extrapolate(ts: Sequence[float], qs: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """From samples ``(t_k, q_k)`` with ``q = (T* - t)/p``: per consecutive pair, ``(T_k, p_k)``."""
    ts = np.asarray(ts, float)
    qs = np.asarray(qs, float)
    dq = np.diff(qs)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = -np.diff(ts) / dq
    T = ts[1:] + p * qs[1:]
    return T, p


def _singularity_signature(ts, qs, t0: float) -> tuple[bool, float, float, float]:
    if len(ts) < 3:
        return False, np.nan, np.nan, np.nan
    T, p = extrapolate(ts, qs)
    pK, pK1 = p[-1], p[-2]
    ok = (np.isfinite(pK) and np.isfinite(pK1) and 0 < pK < 20 and abs(pK - pK1) <= 0.1 * abs(pK)
          and np.isfinite(T[-1]) and T[-1] > ts[-1] and (T[-1] - ts[-1]) <= 1e-3 * (T[-1] - t0))
    return bool(ok), float(T[-1]), float(abs(T[-1] - T[-2])), float(pK)


def gaussian_size(d: int) -> tuple[Callable, Callable]:
    """``r = tr Σ + |α|²`` and ``dr/dt = tr(dΣ/dt) + 2α·dα/dt`` for the Gaussian layout (covers linear
    attention, where the mean can blow up together with the covariance)."""
    w = trace_weights(d)

    def size(y):
        return float(w @ y + y[:d] @ y[:d])

    def dsize(y, fy):
        return float(w @ fy + 2 * y[:d] @ fy[:d])

    return size, dsize


def _size_pair(w):
    if isinstance(w, tuple):
        return w
    w = np.asarray(w, float)
    return (lambda y: float(w @ y)), (lambda y, fy: float(w @ fy))


def _run(f, t0, y0, T, w, levels, rtol, atol, breakpoints, terminal_blowup: bool, overflow: float):
    """Integrate ``y' = f(t, y)`` over segments, recording the level crossings of ``r = size(y)``."""
    size, dsize = _size_pair(w)
    r0 = size(y0)
    if not r0 > 0:
        raise InputError("Sigma0", "the monitored size w·y0 must be positive")
    thresholds = [r0 * L for L in levels]
    samples: list[tuple[float, float, float]] = []
    edges = [t0] + [b for b in breakpoints if t0 < b < T] + [T]
    y = np.asarray(y0, float)
    t = t0
    passed = 0
    for a, b in zip(edges[:-1], edges[1:]):
        events = []
        for k in range(passed, len(thresholds)):
            ev = (lambda tt, yy, th=thresholds[k]: size(yy) - th)
            ev.direction = 1
            ev.terminal = terminal_blowup and k == len(thresholds) - 1
            events.append(ev)
        ovf = (lambda tt, yy: size(yy) - r0 * overflow)
        ovf.terminal, ovf.direction = True, 1
        events.append(ovf)
        sol = solve_ivp(f, (a, b), y, method="DOP853", rtol=rtol, atol=atol, events=events)
        for k, (te, ye) in enumerate(zip(sol.t_events[:-1], sol.y_events[:-1])):
            if len(te):
                yk = ye[0]
                rk = size(yk)
                drk = dsize(yk, np.asarray(f(te[0], yk)))
                samples.append((float(te[0]), rk, rk / drk))
        passed = len(samples)
        t, y = float(sol.t[-1]), sol.y[:, -1]
        if sol.status == -1:
            return "failed", t, y, samples, sol.message
        if len(sol.t_events[-1]):
            return "overflow", t, y, samples, f"size exceeded {overflow:.0e} x its start"
        if sol.status == 1:
            return "stopped", t, y, samples, ""
    return "ok", t, y, samples, ""


def integrate_blowup(f: Callable, y0, T: float, w, *, t0: float = 0.0, rtol: float = 1e-12,
                     atol: float | None = None, levels: Sequence[float] = tuple(10.0 ** np.arange(3, 11)),
                     breakpoints: Sequence[float] = (), overflow: float = 1e200,
                     error_run: bool = True, max_nfev: int = 500_000) -> BlowupResult:
    """Integrate ``y' = f(t, y)`` on ``[t0, T]``; report a finite-time blow-up of ``r = w·y`` with error bound.

    ``w``: weights of a linear size ``r = w·y`` or a pair ``(size(y), dsize(y, f(t, y)))`` such as
    :func:`gaussian_size`.  ``breakpoints``: times where the right-hand side jumps (layer boundaries); integration restarts there.
    ``error_run``: also integrate at ``100·rtol`` to bound the integration error of the blow-up time.
    ``max_nfev``: total right-hand-side evaluations allowed; beyond it the status is ``"stalled"`` (state and
    time where the integrator gave up), never an endless loop.
    """
    y0 = np.asarray(y0, float)
    if not (np.isfinite(T) and T > t0):
        raise InputError("T", f"must be finite and > {t0}, got {T}")
    if atol is None:
        atol = 1e-14 * max(1.0, float(np.abs(y0).max()))
    f = _Counted(f, max_nfev)
    try:
        return _integrate(f, y0, T, w, t0, rtol, atol, levels, breakpoints, overflow, error_run)
    except _Stalled as exc:
        return BlowupResult("stalled", exc.t, exc.y, message=f"integrator stalled after {max_nfev} right-hand "
                            f"side evaluations at t = {exc.t:.6g} (step size collapsed; the right-hand side may "
                            "be ill-conditioned there, e.g. a nearly singular Σ)")


class _Stalled(RuntimeError):
    def __init__(self, t, y):
        self.t, self.y = float(t), np.array(y, float)


class _Counted:
    """Right-hand side wrapper that gives up after ``limit`` evaluations (per pass of the integrator)."""

    def __init__(self, f, limit):
        self.f, self.limit, self.n = f, limit, 0

    def __call__(self, t, y):
        self.n += 1
        if self.n > self.limit:
            raise _Stalled(t, y)
        return self.f(t, y)


def _integrate(f, y0, T, w, t0, rtol, atol, levels, breakpoints, overflow, error_run) -> BlowupResult:
    status, t, y, samples, msg = _run(f, t0, y0, T, w, levels, rtol, atol, breakpoints, True, overflow)
    if status == "failed" and len(samples) < 3:
        return BlowupResult("overflow", t, y, samples=samples, message=f"integrator failed: {msg}")
    if status in ("stopped", "failed"):
        # "failed": the step size underflowed at t (weak singularities, e.g. r ~ (T* - t)^(-1/2), reach the
        # top levels only closer to T* than the spacing of floats); use the levels passed so far.
        ts, rs, qs = zip(*samples)
        sig, Tst, spread, p = _singularity_signature(ts, qs, t0)
        if sig:
            err = spread
            if error_run:
                s2, *_rest = _run(f, t0, y0, T, w, levels, rtol * 100, atol * 100, breakpoints, True, overflow)
                smp2 = _rest[2][:len(samples)]
                if s2 in ("stopped", "failed") and len(smp2) >= 3:
                    T2, _ = extrapolate([s[0] for s in smp2], [s[2] for s in smp2])
                    err += abs(float(T2[-1]) - Tst)
                else:
                    err = max(err, abs(Tst - t))
            return BlowupResult("blowup", t, y, Tst, err, p, samples, "finite-time blow-up signature")
        # exponential growth: continue without the terminal blow-up event
        size = _size_pair(w)[0]
        status, t2, y2, smp_more, msg = _run(f, t, y, T, w, (), rtol, atol, breakpoints, False,
                                              overflow * size(y0) / size(y))
        if status == "overflow":
            return BlowupResult("overflow", t2, y2, samples=samples, message="diverges (no finite-time "
                                f"singularity signature); stopped at t = {t2:.6g} to stay finite")
        return BlowupResult("ok", t2, y2, samples=samples, message="large growth without blow-up signature")
    if status == "overflow":
        return BlowupResult("overflow", t, y, samples=samples, message=msg)
    return BlowupResult("ok", t, y, samples=samples)


def batch_blowup_times(F: Callable, t: np.ndarray, Y: np.ndarray, w: np.ndarray, *, args: Sequence = (),
                       decades: float = 2.0, rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Refine blow-up times of rows stopped at a size threshold (batched).

    Continues each row with :func:`~.batch.dopri5_batch` until ``r = w·y`` grows by ``10**decades`` and
    extrapolates from the two ``(t, q)`` pairs.  Returns ``(T*, p, err)``; ``err = |T* - t_last|`` bounds the
    extrapolation error conservatively (the true error is ``O(τ₁τ₂)``, see module docstring).
    """
    from .batch import BLOWUP

    Y = np.asarray(Y, float)
    t = np.asarray(t, float)
    r1 = Y @ w
    q1 = r1 / (np.asarray(F(t, Y, *args)) @ w)
    target = r1 * 10.0 ** decades

    def mon(rows, tt, YY, dY):
        return np.where(YY @ w > target[rows], BLOWUP, 0)

    horizon = t + 10 * np.abs(q1) + 1e-300
    res = _dopri_shifted(F, t, Y, horizon, args, rtol, mon)
    r2 = res.y @ w
    q2 = r2 / (np.asarray(F(res.t, res.y, *args)) @ w)
    T, p = extrapolate_pairs(t, q1, res.t, q2)
    return T, p, np.abs(T - res.t)


def extrapolate_pairs(t1, q1, t2, q2):
    with np.errstate(divide="ignore", invalid="ignore"):
        p = -(t2 - t1) / (q2 - q1)
    return t2 + p * q2, p


def _dopri_shifted(F, t, Y, horizon, args, rtol, mon):
    """Run rows from their own start times ``t`` (the batch integrator starts all rows at one ``t0``)."""
    from .batch import dopri5_batch

    def G(s, YY, t_start, *a):
        return F(t_start + s, YY, *a)

    return _Shift(dopri5_batch(G, 0.0, Y, horizon - t, rtol=rtol, atol=1e-300, args=[t, *args], max_steps=5000,
                               monitor=lambda rows, s, YY, dY: mon(rows, t[rows] + s, YY, dY)), t)


class _Shift:
    def __init__(self, res, t_start):
        self.y = res.y
        self.t = t_start + res.t
        self.status = res.status
