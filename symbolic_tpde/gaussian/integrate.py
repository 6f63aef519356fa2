"""Integration of a :class:`~symbolic_tpde.gaussian.GaussianODE` on the package's one integrator.

:func:`integrate_gaussian` runs :func:`symbolic_tpde.numerics.ode.solve.integrate` with the layer breakpoints of
the schedule and the Gaussian layer's own stops, handed to the generic integrator as event objects
(:func:`gaussian_events`): the size monitor ``r = tr Σ + |α|²``
(:func:`~symbolic_tpde.registry.layout.gaussian_size`) and, when the ODE object provides
``condition_values(t, y)``, the existence conditions of the Gaussian tilt (quantities that must stay > 0; a
crossing stops the run, reported with status :data:`TILT_CEASED`).
The blow-up time is the extrapolated one of :mod:`symbolic_tpde.numerics.ode.solve` (growth law
``r ~ (T* - t)^{-p}``, error bar = extrapolation spread + the integration error from a 100x looser run and a
round-off sample, both over the whole run also where it switched to the matrix form); the same function serves
``GaussianODE.integrate`` and the ``tpde gaussian`` command, so both report the same numbers.
When the direct run stalls (its step size collapses, e.g. near a blow-up whose off-diagonal round-off
``eps·‖Σ‖²`` the componentwise error control cannot accept), the run is repeated in the regular form of
:mod:`.regular` (Sundman time), which reaches the singularity: status ``"blowup"`` with its ``T*`` and error
bound, the rows of the direct run before the stall, and the regular form's end state (``tr Σ ≈ 10⁴⁰ tr Σ₀``)
as the stopping row (:func:`integrate_moments`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import InputError
from ..values import value_eq
from ..numerics.ode.solve import ERROR_RUN_BUDGET, BlowupMonitor, Event, Solution, Status, StopCondition, sample_error
from ..registry import layout
from ..inputs.checks import positive_number
from ..weights import check_gaussian
from .regular import STUCK_EVALS, reach_singularity

#: status of a run stopped where the Gaussian tilt ceased to exist (the name of its stop event)
TILT_CEASED = "tilt-ceased"


@dataclass(frozen=True)
class GaussianSolution:
    """``t (K,)``, ``alpha (K, d)``, ``Sigma (K, d, d)``, packed ``y (K, n)``; ``status`` a
    :class:`~symbolic_tpde.numerics.ode.solve.Status` (``== "ok"``, ``"blowup"``, ``"stalled"``, ``"overflow"``,
    ``"time-limit"``) or :data:`TILT_CEASED`.  After a blow-up the last row is the state at the top detection level
    (``r ≈ 10¹⁰ r₀``) and ``blowup_time ± blowup_time_error`` the extrapolated singular time."""

    t: np.ndarray
    alpha: np.ndarray
    Sigma: np.ndarray
    status: str
    blowup_time: float | None
    message: str
    backend: str
    blowup_time_error: float | None = None
    exponent: float | None = None
    events: list = field(default_factory=list)
    y: np.ndarray | None = None
    nfev: int = 0

    __eq__ = value_eq          # by value, arrays entry by entry (symbolic_tpde.values)


def gaussian_events(ode, blowup: bool = True) -> list:
    """The Gaussian layer's stops as events for :func:`~symbolic_tpde.numerics.ode.solve.integrate`: the blow-up
    monitor of :func:`~symbolic_tpde.registry.layout.gaussian_size` and the tilt-existence conditions ``ode.condition_values`` (if any)."""
    events = [BlowupMonitor(*layout.gaussian_size(ode.d))] if blowup else []
    cond = getattr(ode, "condition_values", None)
    return events + tilt_stops(cond)


def tilt_stops(cond) -> list:
    """The tilt-existence conditions ``cond(t, y)`` (``None``: none) as the Gaussian layer's stop event."""
    return [] if cond is None else [StopCondition(cond, TILT_CEASED, "the tilt ceased to exist at t = {t:.12g}")]


def reported_status(sol):
    """A :class:`~symbolic_tpde.numerics.ode.solve.Solution`'s status as the Gaussian layer reports it: the
    integrator's ``EVENT`` is the Gaussian stop that fired (:data:`TILT_CEASED`)."""
    return sol.event.kind if sol.status == Status.EVENT else sol.status


def gaussian_rhs(ode, T: float):
    """``f(t, y)`` of the moment ODE with the parameter vector fixed per layer (looked up by time; inside a
    segment :func:`~symbolic_tpde.numerics.ode.solve.integrate` evaluates at the left limit of its end)."""
    if getattr(ode.schedule, "func", None) is not None:
        return ode.rhs
    f = ode.compiled.f
    bps = [float(b) for b in ode.schedule.breakpoints(T)]
    ps = [ode.params(e) for e in [0.0] + bps]
    if len(ps) == 1:
        p = ps[0]
        return lambda t, y: f(t, y, p)
    return lambda t, y: f(t, y, ps[bisect_right(bps, t)])


def integrate_gaussian(ode, alpha0, Sigma0, T: float, *, method: str = "DOP853", rtol: float = 1e-12,
                       atol: float | None = None, t_eval=None, blowup: bool = True, progress=None,
                       max_nfev: int = 1_000_000, max_seconds: float | None = None) -> GaussianSolution:
    """Integrate the moment ODE of ``ode`` on ``[0, T]`` from ``N(alpha0, Sigma0)``.

    ``method``: ``"DOP853"`` (default; scipy's 8th-order pair, dense output of order 7), any other
    ``solve_ivp`` name (``"LSODA"``, ``"BDF"``, ...; those that want one get the generated Jacobian) or the
    package's own ``"dopri5"``/``"rk4"``/``"euler"``.  ``atol`` default ``1e-14 max(1, |y0|_∞)``.
    ``t_eval``: output times (dense output inside steps, the integrator's own values at step ends).
    ``blowup``: monitor ``tr Σ + |α|²`` for a finite-time singularity (:mod:`symbolic_tpde.numerics.ode.solve`).
    ``progress(t, T)``: called after each accepted step.  Caps (status, never a hang): ``max_nfev`` rhs
    evaluations (``"stalled"``) and ``max_seconds`` of wall-clock time (``"time-limit"`` at the last accepted
    time; ``None``: no cap)."""
    alpha0, Sigma0 = check_gaussian(alpha0, Sigma0, ode.d)
    if not (math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be finite and >= 0, got {T}")
    if t_eval is not None:
        t_eval = np.asarray(t_eval, dtype=float)
        if t_eval.ndim != 1 or np.any(np.diff(t_eval) < 0) or (t_eval.size and (t_eval[0] < 0 or t_eval[-1] > T)):
            raise InputError("t_eval", "must be increasing times within [0, T]")
    if max_seconds is not None:
        positive_number(max_seconds, "max_seconds")
    y0 = layout.pack(alpha0, Sigma0)
    try:
        sol = integrate_moments(ode, gaussian_rhs(ode, T), y0, T, freeze_alpha=False, method=method, rtol=rtol,
                                atol=atol, t_eval=t_eval, blowup=blowup, progress=progress, max_nfev=max_nfev,
                                max_seconds=max_seconds, jac=ode.jac)
    except ValueError as exc:
        raise InputError("method", str(exc)) from None
    alpha, Sigma = layout.unpack(sol.y, ode.d)
    return GaussianSolution(sol.t, alpha, Sigma, sol.status, sol.blowup_time, sol.message, ode.backend,
                            sol.blowup_time_error, sol.exponent, sol.events, sol.y, sol.nfev)


#: the generated right-hand side is left for the matrix form (:mod:`.matrix_form`) where ``cond(Σ)·eps`` exceeds
#: ``rtol`` times this: the entrywise cofactor form loses about ``100·cond(Σ)·eps`` relative accuracy (measured:
#: 2e-9 at cond Σ ≈ 1e5), so the switch happens before its noise reaches the error control
PRECISION_SWITCH = 1e-2


def _cond(S) -> float:
    lam = np.linalg.eigvalsh(0.5 * (S + S.T))
    return float(lam[-1] / lam[0]) if lam[0] > 0 else math.inf


def matrix_form_for(ode, f, y0, freeze_alpha: bool):
    """``(g, tilt)``: the inverse-free matrix form of ``ode``'s moment equation (:func:`.matrix_form.matrix_rhs`,
    built and checked by :func:`.matrix_form.checked_matrix_rhs`) on the Gaussian layout (``α`` frozen when ``freeze_alpha``), checked against the generated ``f`` at ``y0`` to
    ``1e-10`` relative (both are float64 evaluations of one formula at the start), and its scale-free tilt
    conditions (:func:`.matrix_form.tilt_margins`, ``None``: none); ``None`` (layers, a time-dependent schedule,
    kinds without a quadratic log-kernel, a disagreement)."""
    from .matrix_form import checked_matrix_rhs

    if not getattr(ode.schedule, "is_constant", False) or getattr(ode.schedule, "func", None) is not None:
        return None
    got = checked_matrix_rhs(ode.schedule(0.0), ode.d, f, [y0], freeze_alpha=freeze_alpha)
    if got is None or not got[3]:
        return None
    return got[0], got[2]


def _switched_run_times(ode, f, fm, tilt_m, y0, T, stops, extra, method, rtol, atol, bps, jac, deadline,
                        max_nfev) -> tuple[list, int]:
    """``([T* at 100x looser tolerances, T* with the right-hand sides perturbed by a few ulps], evaluations)`` of
    the whole switched run (generated form to the precision switch, then the matrix form ``fm``), the error runs
    of :func:`~symbolic_tpde.numerics.ode.solve.integrate` (module docstring there) made from ``t = 0``; a time
    is ``None`` where that run does not reach a blow-up."""
    from ..numerics.ode.solve import integrate, roundoff_sample

    mon = BlowupMonitor(*layout.gaussian_size(ode.d), error_run=False)
    a_tol = 1e-14 * max(1.0, float(np.abs(np.asarray(y0, float)).max(initial=0.0))) if atol is None else atol
    times, nfev = [], 0
    for tols, g0, g1 in ((dict(rtol=100 * rtol, atol=100 * a_tol), f, fm),
                         (dict(rtol=rtol, atol=a_tol), roundoff_sample(f, 1), roundoff_sample(fm, 1))):
        common = dict(method=method, jac=jac, max_seconds=deadline, stuck_evals=STUCK_EVALS, max_nfev=max_nfev,
                      **tols)
        run = integrate(g0, y0, (0.0, float(T)), breakpoints=bps,
                        events=[mon] + [e for e in stops + extra if not isinstance(e, BlowupMonitor)], **common)
        nfev += run.nfev
        if run.status == Status.EVENT and run.event.kind == "precision-switch":
            t1 = float(run.t_end)
            run = integrate(g1, run.y_end, (t1, float(T)), breakpoints=[b for b in bps if b > t1],
                            events=[mon] + tilt_stops(tilt_m), **common)
            nfev += run.nfev
        times.append(run.blowup_time if run.status == Status.BLOWUP else None)
    return times, nfev


def _precision_note(y, d: int, rtol: float) -> str:
    c = _cond(layout.unpack(np.asarray(y, float), d)[1])
    return (f"cond Σ = {c:.3g}, cond Σ·eps = {c * np.finfo(float).eps:.2g} "
            f"{'>' if c * np.finfo(float).eps > rtol else '<='} rtol = {rtol:g}")


def _continue_in_affine_form(ode, sol, f, T, freeze_alpha, blowup, method, rtol, atol, t_eval, bps, max_nfev,
                             progress, jac, deadline, y0=None):
    """``(sol, f)``: ``sol`` continued from its last finite state in :func:`.matrix_form.affine_rhs` (when the
    weights have one and it is finite there), else unchanged.  The continuation keeps the run's overflow stop
    (size ``r₀·overflow`` with ``r₀`` the size at ``y0``, the start of the whole run): a monitor started afresh
    at the continued state would move it up by that state's size (from ``1e200 r₀`` to ``1e302 r₀`` for an ℓ2
    run whose generated form overflows at ``tr Σ ≈ 1e102``), past where the right-hand side itself overflows."""
    from ..numerics.ode.solve import integrate
    from .matrix_form import affine_rhs, frozen_alpha

    d = ode.d
    fa = affine_rhs(ode.schedule(0.0), d)
    if fa is None:
        return sol, f
    fa = frozen_alpha(fa, d) if freeze_alpha else fa
    t1, y1 = float(sol.t_end), np.asarray(sol.y_end, float)
    with np.errstate(all="ignore"):
        if not np.all(np.isfinite(fa(t1, y1))):
            return sol, f
    te = None if t_eval is None else np.asarray(t_eval, float)
    k = len(sol.t) if te is None else int(np.searchsorted(te, t1, side="right"))
    events = gaussian_events(ode, blowup)[:1 if blowup else 0]
    if events and y0 is not None:
        mon = events[0]
        events = [replace(mon, overflow=mon.overflow * mon.size(np.asarray(y0, float)) / mon.size(y1))]
    rest = integrate(fa, y1, (t1, float(T)), method=method, rtol=rtol, atol=atol,
                     t_eval=None if te is None else te[k:], breakpoints=[b for b in bps if b > t1],
                     events=events, max_nfev=max(max_nfev - sol.nfev, 1),
                     progress=progress, jac=jac, max_seconds=deadline, stuck_evals=STUCK_EVALS)
    rest.t = np.concatenate([np.asarray(sol.t)[:k], np.asarray(rest.t)])
    rest.y = np.vstack([np.asarray(sol.y)[:k].reshape(-1, len(y1)), np.asarray(rest.y).reshape(-1, len(y1))])
    rest.nfev += sol.nfev
    rest.n_steps += sol.n_steps
    rest.events = list(sol.events) + list(rest.events)
    tr = float(np.trace(layout.unpack(y1, d)[1]))
    rest.message = (f"{rest.message} (the generated right-hand side stopped being finite at t = {t1:.10g}, "
                    f"tr Σ = {tr:.3g}; the run went on in the matrix form of the affine field)")
    return rest, fa


def integrate_moments(ode, f, y0, T: float, *, freeze_alpha: bool, method: str = "DOP853", rtol: float = 1e-12,
                      atol=None, t_eval=None, blowup: bool = True, progress=None, max_nfev: int = 1_000_000,
                      max_seconds=None, jac=None) -> Solution:
    """``f`` (the moment right-hand side on the Gaussian layout; ``freeze_alpha``: ``α`` stays 0) on ``[0, T]``
    from ``y0`` with the Gaussian layer's stops; its status as the Gaussian layer reports it
    (:func:`reported_status`).  A stall (after :data:`~.regular.STUCK_EVALS` evaluations without progress, or the
    budget) is followed, when ``blowup``, by the regular form (module docstring); the stall stands when that
    does not reach a settled blow-up before ``T``.  ``jac``: the Jacobian of ``f`` for the methods that want one."""
    from ..numerics.ode.solve import Deadline, integrate

    d = ode.d
    deadline = Deadline.of(max_seconds)
    cond = getattr(ode, "condition_values", None)
    bps = ode.schedule.breakpoints(T)
    got = matrix_form_for(ode, f, y0, freeze_alpha)
    fm, tilt_m = got if got is not None else (None, None)
    room = math.log(PRECISION_SWITCH * rtol / np.finfo(float).eps)
    stops = gaussian_events(ode, blowup)
    if fm is not None and math.log(_cond(layout.unpack(np.asarray(y0, float), d)[1])) >= room:
        # ill-conditioned from the start: the matrix form throughout, with its scale-free tilt conditions
        f, fm, cond = fm, None, tilt_m
        stops = gaussian_events(ode, blowup)[:1 if blowup else 0] + tilt_stops(tilt_m)
    extra = [] if fm is None else [StopCondition(
        lambda t, y: np.array([room - math.log(_cond(layout.unpack(np.asarray(y, float), d)[1]))]),
        "precision-switch", "cond Σ·eps reached rtol/100 at t = {t:.12g}", near_zero=0.0)]
    sol = integrate(f, y0, (0.0, float(T)), method=method, rtol=rtol, atol=atol, t_eval=t_eval,
                    breakpoints=bps, events=stops + extra,
                    max_nfev=max_nfev, progress=progress, jac=jac, max_seconds=deadline,
                    stuck_evals=STUCK_EVALS)
    if sol.status == Status.EVENT and sol.event.kind == "precision-switch":
        # the generated entrywise form is about to lose its precision: the same run goes on in matrix form
        t1, y1 = float(sol.t_end), np.asarray(sol.y_end, float)
        te = None if t_eval is None else np.asarray(t_eval, float)
        k = len(sol.t) - 1 if te is None else int(np.searchsorted(te, t1, side="left"))
        # its blow-up error runs are made below over the whole run, not from the switch
        quiet = [BlowupMonitor(*layout.gaussian_size(d), error_run=False)] if blowup else []
        rest = integrate(fm, y1, (t1, float(T)), method=method, rtol=rtol, atol=atol,
                         t_eval=None if te is None else te[k:], breakpoints=[b for b in bps if b > t1],
                         events=quiet + tilt_stops(tilt_m),
                         max_nfev=max(max_nfev - sol.nfev, 1),
                         progress=progress, jac=jac, max_seconds=deadline, stuck_evals=STUCK_EVALS)
        first_t, first_y = np.asarray(sol.t)[:k], np.asarray(sol.y)[:k]
        rest.t = np.concatenate([first_t, np.asarray(rest.t)])
        rest.y = np.vstack([first_y.reshape(-1, len(y1)), np.asarray(rest.y).reshape(-1, len(y1))])
        rest.nfev += sol.nfev
        rest.n_steps += sol.n_steps
        rest.events = list(sol.events) + list(rest.events)
        rest.message = (f"{rest.message} (the generated right-hand side was replaced by the inverse-free matrix "
                        f"form at t = {t1:.10g}, where cond Σ·eps reached {PRECISION_SWITCH:g}·rtol)")
        if blowup and rest.status == Status.BLOWUP:
            # integrate's error runs would start at the switch; the stretch before it (with cond Σ ≥ 45 the
            # switch comes early in nearly every blow-up) is counted by repeating the whole run
            times, n = _switched_run_times(ode, f, fm, tilt_m, y0, T, stops, extra, method, rtol, atol, bps, jac,
                                           deadline, min(max_nfev, ERROR_RUN_BUDGET * rest.nfev + 10_000))
            rest.nfev += n
            whole = sample_error(rest.blowup_time, times)
            if any(x is None for x in times):
                whole = max(whole, abs(rest.blowup_time - rest.t_end))
            rest.blowup_time_error += whole
        sol, f, cond = rest, fm, tilt_m
    if (sol.status == Status.STALLED and any(e.kind == "nonfinite" for e in sol.events) and sol.y_end is not None
            and np.all(np.isfinite(sol.y_end)) and ode.schedule.is_constant):
        # the rhs stopped being finite at a finite state (the generated Sinkhorn form overflows from tr Σ ~ 1e77):
        # the same run goes on in the matrix form of affine_field (scale-free), to the solver's overflow stop
        sol, f = _continue_in_affine_form(ode, sol, f, T, freeze_alpha, blowup, method, rtol, atol, t_eval, bps,
                                          max_nfev, progress, jac, deadline, y0=y0)
    sol.status = reported_status(sol)
    if sol.status == Status.TIME_LIMIT and sol.y_end is not None and np.all(np.isfinite(sol.y_end)):
        # why a run is slow: where cond Σ·eps exceeds rtol the entries no longer carry the small eigenvalues
        sol.message = f"{sol.message}; at the stop {_precision_note(sol.y_end, d, rtol)}"
    if not (blowup and sol.status == Status.STALLED):
        return sol
    sol.message = f"{sol.message}; at the stall {_precision_note(sol.y_end, d, rtol)}"
    a0, S0 = layout.unpack(np.asarray(y0, float), d)
    got = reach_singularity(f, d, a0, S0, T, rtol=rtol, freeze_alpha=freeze_alpha, conditions=cond,
                            max_seconds=deadline)
    if got is None:
        return sol
    run, Tst, err, note = got
    keep = np.asarray(sol.t) < sol.t_end              # the direct run's rows before its stall
    t_stop = float(run.t[-1])
    y_stop = layout.pack(run.alpha_end, run.Sigma_end)
    msg = (f"finite-time blow-up: the direct run stalled at t = {sol.t_end:.10g} ({sol.message}); the regular "
           f"form (Sundman time) reached tr Σ = {math.exp(run.log_r[-1]):.3g} at t = {t_stop:.15g}: {note}")
    return Solution(np.append(np.asarray(sol.t)[keep], t_stop), np.vstack([np.asarray(sol.y)[keep], y_stop]),
                    Status.BLOWUP, msg, blowup_time=Tst, blowup_time_error=err, exponent=1.0,
                    events=list(sol.events) + [Event("blowup", Tst, 1.0)], nfev=sol.nfev + run.nfev,
                    n_steps=sol.n_steps, method=sol.method, t_end=t_stop, y_end=y_stop, samples=sol.samples)
