"""The regular form of a moment ODE: it reaches a finite-time singularity of ``Σ`` without stiffness.

With ``r = tr Σ``, ``N = Σ/r`` and the rescaled time ``dt/ds = 1/(r₀ + r)`` (a Sundman transform),
``dN/ds`` and ``d(log r)/ds`` stay bounded for the quadratic (Riccati-type) moment equations, so a run goes on
to ``r = 10⁴⁰ r₀`` without the step-size collapse of the direct form (whose off-diagonal entries, differences of
``O(r²)`` terms, carry a round-off ``eps·r²`` that the componentwise error control cannot accept near ``T*``).
The blow-up law test (:func:`tail_estimate`) reads ``g = d(log r)/ds`` as a function of ``r``.  The remaining time
is ``T* - t = ∫_r^∞ dr'/(r' (r₀ + r') g(r'))``: with ``g ~ r^q`` it is finite iff ``q > -1``.  An algebraic
blow-up ``r ~ c(t)(T* - t)^{-p}`` with a slowly varying prefactor ``c`` has ``q → 1/p - 1`` (``q ≈ 0`` for the
quadratic moment equations, ``p = 1``, however slowly ``c`` settles: a drift of ``g`` by 0.5 % over 40 e-folds
is ``q ≈ -1e-4``); exponential growth ``r ~ e^{ct}`` has ``g = c/(r₀ + r)``, ``q = -1``.  ``q`` is measured
between the last two windows of 40 e-folds of ``r``; a blow-up is stated when ``q ≥`` :data:`Q_BLOWUP`
(``p ≤ 2``) and the remaining time after the run (``≈ 1/((1 + q) g r)``, ``r ≈ 10⁴⁰ r₀``) is added with a
100 % error (:func:`blowup_time` adds the integration error: truncation and round-off).

Used by :func:`.integrate.integrate_gaussian` when the direct run stalls (:func:`reach_singularity`) and by the
long-time classifier (:mod:`symbolic_tpde.analysis.verdict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..registry import layout

__all__ = ["RegularRun", "Continuation", "integrate_regular", "tail_estimate", "blowup_time", "reach_singularity"]

#: the regular form runs to ``r = R_MAX_FACTOR·r₀`` (with ``r ≤ R_ABS_MAX``: the quadratic right-hand side then
#: stays below 1e200, far from float64 overflow); the tail left after it is ``≈ T*/R_MAX_FACTOR``.
R_MAX_FACTOR = 1e40
R_ABS_MAX = 1e100
#: the slope ``q = d(log g)/d(log r)`` above which the growth is a finite-time blow-up (``r ~ (T* - t)^{-p}``,
#: ``p = 1/(1 + q) ≤ 2``); exponential growth has ``q = -1`` (module docstring)
Q_BLOWUP = -0.5
#: ``|q + 1|`` below which the growth is called exponential-type in the note
Q_EXPONENTIAL = 0.1
#: evaluations without progress in ``s`` after which a run stops as "stuck" (instead of spending its budget)
STUCK_EVALS = 20_000
#: explicit (DOP853) evaluations after which an unfinished run continues, from its last accepted step, with
#: LSODA (stiff/non-stiff switching, finite-difference Jacobian) on the rest of the same budget: a collapsed
#: direction of ``Σ`` decaying at a rate ``μ`` holds an explicit method to steps ``≈ 3/μ`` (its stability
#: limit, not its accuracy), e.g. 300 000 evaluations for ``T = 1e5`` at ``μ ≈ 1``; the implicit method
#: steps by accuracy (3 000 there).  Runs to a blow-up need ~1 000-3 000 and stay explicit.
STIFF_SWITCH_EVALS = 20_000


@dataclass
class RegularRun:
    """The regular-form run: ``t``, ``log_r`` (``log tr Σ``) along the accepted steps (``s``) and the end state;
    ``stop``: ``"T"`` (reached the horizon), ``"r_max"`` (reached ``R_MAX_FACTOR·r₀``), ``"tilt"`` (an
    existence condition of the tilt crossed 0), ``"precision"`` (the guard condition), ``"stuck"`` (the step
    size collapsed), or the integrator's status when it stopped otherwise; ``method``: the stepper(s) used
    (:data:`STIFF_SWITCH_EVALS`); ``switched_at``: where the run went on in its :class:`Continuation`."""

    s: np.ndarray
    t: np.ndarray
    log_r: np.ndarray
    Sigma_end: np.ndarray
    alpha_end: np.ndarray
    stop: str
    status: str
    nfev: int
    method: str = "DOP853"
    switched_at: float | None = None


@dataclass(frozen=True)
class Continuation:
    """A second right-hand side for the same run: where the stop ``switch(t, y) > 0`` (``y`` the Gaussian layout
    state) fails, the run goes on with ``f`` on a longer state, the layout followed by extra entries (the pair
    form: ``P = Σ⁻¹``, :func:`symbolic_tpde.gaussian.integrate.pair_form_for`), made from the layout state by
    ``lift``; ``conditions(t, z)`` (``z`` the longer state; ``None``: none) replace the run's conditions after
    the switch, in the same order (the precision guard first when the run has one); ``name`` says what the run
    went on with (its method and message).  :func:`integrate_regular` and :meth:`integrate` (the same switch in
    ``t``) read it."""

    f: Callable
    lift: Callable
    switch: Callable
    conditions: Callable | None = None
    name: str = "the pair form (Σ⁻¹ beside Σ)"

    def integrate(self, f, y0, t_span, *, stops, conditions=None, **kw):
        """``integrate(f, y0, t_span, events=stops(conditions), **kw)``
        (:func:`~symbolic_tpde.numerics.ode.solve.integrate`; ``stops`` makes the run's stop events from a
        condition function, e.g. :func:`~.integrate.tilt_stops`), continued in ``self.f`` with
        ``stops(self.conditions)`` where the switch fires: one :class:`~symbolic_tpde.numerics.ode.solve.Solution`
        on the layout (its rows cut to the layout), evaluations and wall clock (``max_seconds``, one deadline)
        counted over both runs."""
        from ..numerics.ode.solve import Deadline, Status, StopCondition, integrate

        kw["max_seconds"] = Deadline.of(kw.get("max_seconds"))
        n = len(np.asarray(y0))
        sw = StopCondition(self.switch, "switch", "switched at t = {t:.12g}", near_zero=0.0)
        sol = integrate(f, y0, t_span, events=[sw] + stops(conditions), **kw)
        if not (sol.status == Status.EVENT and sol.event.kind == "switch"):
            return sol
        t1 = float(sol.t_end)
        te = kw.pop("t_eval", None)
        k = len(sol.t) - 1 if te is None else int(np.searchsorted(te, t1, side="left"))
        if te is not None:
            kw["t_eval"] = np.asarray(te, float)[k:]
        kw["max_nfev"] = max(kw.get("max_nfev", 1_000_000) - sol.nfev, 1)
        rest = integrate(self.f, self.lift(sol.y_end), (t1, float(t_span[1])), events=stops(self.conditions),
                         **kw)
        rest.t = np.concatenate([np.asarray(sol.t)[:k], rest.t])
        rest.y = np.vstack([np.asarray(sol.y)[:k].reshape(-1, n), np.asarray(rest.y)[:, :n]])
        rest.y_end = np.asarray(rest.y_end)[:n]
        rest.nfev += sol.nfev
        rest.events = list(sol.events) + list(rest.events)
        rest.message = f"{rest.message} (from t = {t1:.10g} in {self.name})"
        return rest


def integrate_regular(f, d: int, alpha0, Sigma0, T: float, *, rtol: float = 1e-10, conditions=None,
                      freeze_alpha: bool = True, max_nfev: int = 1_000_000, max_seconds=None,
                      precision_guard: bool = False, roundoff_seed: int | None = None,
                      continuation: Continuation | None = None) -> RegularRun:
    """Integrate ``y' = f(t, y)`` (Gaussian layout) in the regular form of the module docstring until ``t = T``
    or ``tr Σ = R_MAX_FACTOR·tr Σ₀``.  ``freeze_alpha``: the mean stays 0 (the covariance equation alone,
    valid where it does not involve ``α``); otherwise ``α`` is integrated in ``s`` as it is.
    ``conditions(t, y)``: quantities that must stay > 0 (the first is the precision guard when
    ``precision_guard``).  ``roundoff_seed``: the right-hand side perturbed by a few ulps
    (:func:`~symbolic_tpde.numerics.ode.solve.roundoff_sample`), a sample of the run's round-off.
    ``continuation``: where its switch fires, the run goes on in its right-hand side (:class:`Continuation`; the
    extra entries of its state ride along in ``s`` as they are, ``dz/ds = (dt/ds)·dz/dt``), with the rest of the
    budget and the same deadline; ``switched_at`` says where."""
    from ..numerics.ode.solve import Deadline, Status, StopCondition, integrate, roundoff_sample

    Sigma0 = np.asarray(Sigma0, float)
    alpha0 = np.zeros(d) if freeze_alpha else np.asarray(alpha0, float)
    r0 = float(np.trace(Sigma0))
    n = layout.state_size(d)
    wS = layout.trace_weights(d, with_alpha=False)
    rho_max = min(math.log(r0) + math.log(R_MAX_FACTOR), math.log(R_ABS_MAX))
    N0 = layout.pack(np.zeros(d), Sigma0 / r0)[d:]
    z0 = np.concatenate([[0.0, math.log(r0)], alpha0, N0])

    def state(z):
        # numpy's exp: a trial step with an absurd log r gives r = 0 or inf (the integrator rejects the non-finite
        # derivative), never Python's OverflowError / ZeroDivisionError (fuzz: V entries ~1e75); entries after
        # the layout (a continuation's) as they are
        r = np.exp(np.float64(z[1]))
        return np.concatenate([z[2:2 + d], r * z[2 + d:2 + n], z[2 + n:]]), r

    def regular(f):
        def g(s, z):
            y, r = state(z)
            fy = np.asarray(f(z[0], y), float)
            tau = 1.0 / (r0 + r)
            FS = fy[d:n]
            trF = float(wS @ FS)
            dN = tau * (FS / r - z[2 + d:2 + n] * (trF / r))
            da = np.zeros(d) if freeze_alpha else tau * fy[:d]
            return np.concatenate([[tau, tau * trF / r], da, dN, tau * fy[n:]])

        return g if roundoff_seed is None else roundoff_sample(g, roundoff_seed)

    def stops(conditions, layout_only):
        def cond(s, z):
            base = [T - z[0], rho_max - z[1]]
            if conditions is not None:
                y, _ = state(z)
                base += list(np.atleast_1d(conditions(z[0], y[:n] if layout_only else y)))
            return np.asarray(base, float)
        return [StopCondition(cond, "regular-stop", "regular form stopped at s = {t:.12g}")]

    deadline = Deadline.of(max_seconds)
    # s needed: ~ (r0 + r̄)·T on bounded stretches, ~ 40 ln(10)/g at a blow-up; 1e300 is never reached
    common = dict(rtol=rtol, atol=1e-14, max_seconds=deadline, stuck_evals=STUCK_EVALS)

    def run(g, z, s0, events, budget):
        switch = min(budget, STIFF_SWITCH_EVALS)
        sol = integrate(g, z, (s0, 1e300), method="DOP853", max_nfev=switch, events=events, **common)
        if sol.status == Status.STALLED and sol.nfev > switch and budget > switch:   # budget share spent
            rest = integrate(g, sol.y[-1], (float(sol.t[-1]), 1e300), method="LSODA",
                             max_nfev=budget - sol.nfev, events=events, **common)
            rest.t, rest.y = np.concatenate([sol.t, rest.t[1:]]), np.vstack([sol.y, rest.y[1:]])
            rest.nfev += sol.nfev
            return rest, f"DOP853 for its first {sol.nfev} evaluations, then LSODA (stiff)"
        return sol, "DOP853"

    switched_at = None
    events = stops(conditions, True)
    if continuation is not None:
        events = [StopCondition(lambda s, z: continuation.switch(z[0], state(z)[0]), "switch",
                                "switched at s = {t:.12g}", near_zero=0.0)] + events
    with np.errstate(all="ignore"):   # once around the run, not per right-hand side (see state())
        sol, method = run(regular(f), z0, 0.0, events, max_nfev)
        if continuation is not None and sol.status == Status.EVENT and sol.event.kind == "switch":
            z1 = np.asarray(sol.y[-1], float)
            switched_at = float(z1[0])
            y1 = continuation.lift(state(z1)[0])
            z2 = np.concatenate([z1[:2 + n], np.asarray(y1, float)[n:]])
            rest, method2 = run(regular(continuation.f), z2, float(sol.t[-1]),
                                stops(continuation.conditions, False), max(max_nfev - sol.nfev, 1))
            m = 2 + n
            rest.t = np.concatenate([sol.t, rest.t[1:]])
            rest.y = np.vstack([np.asarray(sol.y)[:, :m], np.asarray(rest.y)[1:, :m]])
            rest.nfev += sol.nfev
            method = f"{method}; from t = {switched_at:.10g} {continuation.name}: {method2}"
            sol = rest
    stop = str(sol.status)
    if sol.status == Status.STALLED and sol.nfev <= max_nfev:
        stop = "stuck"
    for ev in getattr(sol, "events", []):
        if ev.kind == "regular-stop" and ev.index is not None:
            stop = {0: "T", 1: "r_max"}.get(ev.index, "precision" if precision_guard and ev.index == 2 else "tilt")
    ys = np.asarray(sol.y, float)
    y_end, _ = state(ys[-1])
    a_end, S_end = layout.unpack(y_end[:n], d)
    return RegularRun(np.asarray(sol.t, float), ys[:, 0], ys[:, 1], S_end, a_end, stop, str(sol.status),
                      int(sol.nfev), method, switched_at)


def tail_estimate(run: RegularRun) -> tuple[float | None, float | None, str]:
    """``(T*, tail uncertainty, note)`` from a run that reached ``r_max``; ``T* = None`` when the growth law
    of the last 80 e-folds of ``r`` is not a finite-time blow-up (module docstring; the note gives ``q``)."""
    s, rho = run.s, run.log_r
    top = rho[-1]
    if top - rho[0] < 80:
        return None, None, "log r rose by less than 80 e-folds"
    sa = np.interp(top - 40, rho, s)
    sb = np.interp(top - 80, rho, s)
    g1 = 40.0 / (s[-1] - sa)          # mean g over the last 40 e-folds (centre log r = top - 20)
    g2 = 40.0 / (sa - sb)             # and over the 40 before (centre top - 60)
    q = math.log(g1 / g2) / 40.0
    law = (f"d(log r)/ds = {g2:.4g} then {g1:.4g} over the last 80 e-folds: d(log g)/d(log r) = q = {q:.3g}")
    if q < Q_BLOWUP:
        kind = ("exponential-type growth (q = -1)" if abs(q + 1) <= Q_EXPONENTIAL else
                f"not a finite-time law with p = 1/(1 + q) ≤ {1 / (1 + Q_BLOWUP):g}")
        return None, None, f"{law}: {kind}"
    g_end = g1 * math.exp(20.0 * q)   # g extrapolated to the end (log r = top) along g ~ r^q
    tail = math.exp(-top) / ((1.0 + q) * g_end)
    return (float(run.t[-1] + tail), tail + 1e-16 * run.t[-1],
            f"{law}: blow-up r ~ (T* - t)^-p, p = {1 / (1 + q):.4g} (a slowly varying prefactor when p ≈ 1); "
            f"remaining time after the run {tail:.2g} (error 100 %)")


def blowup_time(run: RegularRun, rerun, rtol: float) -> tuple[float | None, float | None, str]:
    """``(T*, error bound, note)`` of a regular-form run that reached ``r_max``: the tail estimate of
    :func:`tail_estimate` plus the integration error, from the same run at a 10x looser tolerance
    (``rerun(10 rtol, max_nfev=…)``: truncation) and at the same tolerance with its right-hand side perturbed by a
    few ulps (``rerun(rtol, roundoff_seed=1, max_nfev=…)``: round-off; each within
    :data:`~symbolic_tpde.numerics.ode.solve.ERROR_RUN_BUDGET` times the run's evaluations), made one bound by
    :func:`~symbolic_tpde.numerics.ode.solve.sample_error`; ``T* = None`` when the blow-up law is not settled.

    Why the round-off sample (fuzz seed 8302, case 213: softmax, d = 3, V = I + skew): ``Σ`` passes cond 1e16
    on a stretch where ``tr F(N)`` is small, the remaining time depends on the small eigen-directions that
    ``N = Σ/tr Σ`` keeps only to ``eps·cond``, and the run's T* is round-off noise of spread ≈ 6e-12 at every
    rtol from 1e-9 to 1e-13 (independent 30-digit Taylor series: T* = 1.69410981149523905), while the gap to
    the 10x looser run happened to be 1e-12."""
    from ..numerics.ode.solve import ERROR_RUN_BUDGET, sample_error

    Tst, err, note = tail_estimate(run)
    if Tst is None:
        return None, None, note
    others, short = [], 0.0
    budget = ERROR_RUN_BUDGET * run.nfev + 10_000
    for again in (rerun(10 * rtol, max_nfev=budget), rerun(rtol, roundoff_seed=1, max_nfev=budget)):
        T2 = tail_estimate(again)[0] if again.stop == "r_max" else None
        others.append(T2)
        if T2 is None and len(again.t):
            # a rerun that stopped short (budget, wall clock, another law): its gap where it stopped, plus all of
            # the time the plain run still had to go from there (a wide bound, but not one that pretends)
            i = min(int(np.searchsorted(np.maximum.accumulate(run.log_r), again.log_r[-1])), len(run.t) - 1)
            short = max(short, abs(float(again.t[-1]) - float(run.t[i])) + (Tst - float(run.t[i])))
        elif T2 is None:
            short = max(short, Tst)
    integ = max(sample_error(Tst, others), short)
    how = ("9.9 x the spread of the times of this run, one at rtol = "
           f"{10 * rtol:g} and one with its right-hand side perturbed by a few ulps")
    if short:
        how += "; a rerun stopped short: its gap there plus the time left from there"
    return Tst, err + integ, (f"{note}; T* error bound {err + integ:.2g} = tail uncertainty {err:.1g} + "
                              f"integration error {integ:.1g} ({how})")


def reach_singularity(f, d: int, alpha0, Sigma0, T: float, *, rtol: float, freeze_alpha: bool,
                      conditions=None, max_seconds=None):
    """The regular form from ``t = 0`` for a direct run that stalled: ``(run, T*, error, note)`` when it
    reaches ``r_max`` with a settled blow-up law before ``T``; ``None`` otherwise (the stall stands).  ``rtol``
    is that of the direct run, floored at 1e-12 (the regular form's ``g`` needs no tighter)."""
    rtol = max(rtol, 1e-12)

    def go(tol, **kw):
        return integrate_regular(f, d, alpha0, Sigma0, T, rtol=tol, conditions=conditions,
                                 freeze_alpha=freeze_alpha, max_seconds=max_seconds, **kw)

    run = go(rtol)
    if run.stop != "r_max":
        return None
    Tst, err, note = blowup_time(run, go, rtol)
    if Tst is None or Tst > T:
        return None
    return run, Tst, err, note
