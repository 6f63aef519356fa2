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
Where ``cond Σ·eps`` reaches :data:`PRECISION_SWITCH`·``rtol`` the generated entrywise right-hand side is left for
the inverse-free matrix form (:mod:`.matrix_form`); for heads with ``M = R + Rᵀ ≠ 0`` (ℓ2, custom), where then the
matrix form's own solve with ``I - ΣM`` reaches the same bound and ``P - M`` is better conditioned, the run goes on
in the square-root form ``Σ = LLᵀ`` of :func:`.matrix_form.root_rhs` (:data:`ROOT_FORM`; its switch also where
``cond Σ·eps`` reaches the bound: at once), else in the pair form ``(Σ, P = Σ⁻¹)`` of :func:`.matrix_form.pair_rhs`
(``J = V(P - M)⁻¹Bᵀ`` to ``eps``): an
exponentially growing, anisotropic ``Σ`` (measured: ``cond Σ`` to 6e11, fuzz seed 9430 case 260) is followed to
``T`` with ``Σ`` normwise to ~1e-11 of a 30-digit reference, where the matrix form's step collapsed (``J`` carried
``cond(I - ΣM)·eps`` of relative noise, 1e-6 at cond 1e10).  Why not a rescaled error norm: a normwise error
weight ``rtol·sqrt(Σ_ii Σ_jj)`` on the matrix form was measured to collapse the same way (the noise is in ``J``
itself, not in small entries), and loosening ``rtol`` to that noise lost ``Σ``'s positive definiteness.
Where an explicit matrix-form run is stiff (a softmax ``Σ`` collapsing onto rank one relaxes onto that manifold at
rates ``~10³`` while the state moves at ``~10⁻³``: its steps stay at the stability bound,
:class:`.stiff.StabilityBound`), the run goes on with :data:`STIFF_METHOD`, the exact Jacobian and the right-hand
side in extended precision, in the eigenframe of ``Σ`` (:func:`_continue_stiff`; measured: fuzz seed 7301 case 14
reaches ``T = 1000`` in 14 s where it stalled at ``t = 56``, ``Σ`` within ``1e-7`` of an extended-precision
reference at ``t = 20, 40`` and ``4e-7`` at ``T``).
When the direct run stalls (its step size collapses, e.g. near a blow-up whose off-diagonal round-off
``eps·‖Σ‖²`` the componentwise error control cannot accept), the run is repeated in the regular form of
:mod:`.regular` (Sundman time), which reaches the singularity: status ``"blowup"`` with its ``T*`` and error
bound, the rows of the direct run before the stall, and the regular form's end state (``tr Σ ≈ 10⁴⁰ tr Σ₀``)
as the stopping row (:func:`integrate_moments`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..values import value_eq
from ..numerics.ode.solve import ERROR_RUN_BUDGET, BlowupMonitor, Event, Solution, Status, StopCondition, sample_error
from ..registry import layout
from ..inputs.checks import positive_number
from ..weights import check_gaussian
from .regular import STUCK_EVALS, reach_singularity
from .stiff import (REFRAME_MIN_STEPS, STIFF_ATOL, STIFF_METHOD, STIFF_RATIO, STIFF_STEP, _frame_axes,
                    _frame_margin, _from_frame, stiff_form_for)

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


#: the generated right-hand side is also left for the matrix form where an entry of ``Σ`` reaches this: it multiplies
#: entries of ``Σ`` (cofactors, determinants; measured: the d = 2 ℓ2 form is garbage, its step stuck, from
#: ``tr Σ ≈ 1e77``, i.e. products of four entries), so up to degree 10 its products stay below float64's 1.8e308;
#: the matrix form is scale-free (one solve with ``I - ΣM``, ``J`` bounded) up to the overflow stop
MAGNITUDE_SWITCH = 1e30

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


def pair_form_for(ode, freeze_alpha: bool, rtol: float):
    """``(g, lift, stop)``: the pair form (:func:`.matrix_form.pair_rhs`, ``α`` frozen when ``freeze_alpha``) of
    ``ode``'s constant weights, its lift from a layout state, and the :class:`StopCondition` ``"pair-switch"``
    that ends a matrix-form run where ``J``'s solve has lost the precision (``cond(I - ΣM)·eps`` reached
    :data:`PRECISION_SWITCH`·``rtol``, the criterion of the first switch) while ``P - M`` is better conditioned;
    ``None`` without a head with ``M ≠ 0`` (softmax: ``J = VΣA`` needs no solve) or for non-constant weights."""
    from .matrix_form import frozen_alpha, pair_rhs

    if not getattr(ode.schedule, "is_constant", False) or getattr(ode.schedule, "func", None) is not None:
        return None
    got = pair_rhs(ode.schedule(0.0), ode.d)
    if got is None:
        return None
    g, lift, kappas = got
    room = math.log(PRECISION_SWITCH * rtol / np.finfo(float).eps)

    def margin(t, y):
        k_sigma, k_p = kappas(y)
        return np.array([room - math.log(k_sigma) if k_p < k_sigma else 1.0])

    stop = StopCondition(margin, "pair-switch", "cond(I - ΣM)·eps reached rtol/100 at t = {t:.12g}", near_zero=0.0)
    return (frozen_alpha(g, ode.d) if freeze_alpha else g), lift, stop


#: heads with ``M = R + Rᵀ ≠ 0`` leave the matrix form for the square-root form (:func:`root_form_for`) instead of
#: the pair form, where ``cond Σ·eps`` or ``cond(I - ΣM)·eps`` reaches :data:`PRECISION_SWITCH`·``rtol`` (i.e. at
#: once where the matrix form started for the precision of ``Σ``).  Measured (``--covariance-only``, cap 60 s):
#: fuzz seed 3030 case 16 reaches T = 10 in 1.8 s (stalled at t = 4.807 after 45 s before), case 25 T = 10 in
#: 9.5 s (time limit at t = 5.57 in the pair form), seed 9430 case 260 T = 10 as before (1.5 s, Σ within 2e-12
#: normwise), the pair form's own test case in 1613 evaluations against 2372; the small eigenvalue of case 16 at
#: t = 4.807 as ``σ_min(L)²`` to 2e-8 of a 30-digit reference (8.0e-11 beside 4.0e7).  ``False``: the pair form
#: as before (kept for comparison; ``tests/test_long_time.py`` runs both)
ROOT_FORM = True


def root_form_for(ode, freeze_alpha: bool, rtol: float):
    """``(g, lift, to_layout, margins, switch)``: the square-root form (:func:`.matrix_form.root_rhs`, ``α`` frozen
    when ``freeze_alpha``) of ``ode``'s constant weights, its lift from a layout state, the layout of its states,
    its tilt margins, and the :class:`StopCondition` ``"pair-switch"`` that ends a matrix-form run where its
    entries of ``Σ`` or its solve with ``I - ΣM`` have lost the precision (``cond Σ·eps`` or ``cond(I - ΣM)·eps``
    reached :data:`PRECISION_SWITCH`·``rtol``, the criterion of the first switch: the float64 entries of ``Σ`` then
    hold its small eigenvalues to ``eps·cond Σ`` only, ``L`` to ``eps·cond L = eps·sqrt(cond Σ)``); ``None``
    without a head with ``M ≠ 0`` or for non-constant weights."""
    from .matrix_form import frozen_alpha, quadratic_form, root_rhs

    if not getattr(ode.schedule, "is_constant", False) or getattr(ode.schedule, "func", None) is not None:
        return None
    w, d = ode.schedule(0.0), ode.d
    got = root_rhs(w, d)
    Ms = [M for M in (q[1] + q[1].T for q in map(quadratic_form, w.heads)) if np.abs(M).max() > 0]
    if got is None or not Ms:
        return None
    g, lift, to_layout, margins = got
    room = math.log(PRECISION_SWITCH * rtol / np.finfo(float).eps)
    eye = np.eye(d)

    def margin(t, y):
        S = layout.unpack(np.asarray(y, float), d)[1]
        return np.array([room - math.log(max([_cond(S)] + [np.linalg.cond(eye - S @ M) for M in Ms]))])

    switch = StopCondition(margin, "pair-switch", "cond Σ·eps or cond(I - ΣM)·eps reached rtol/100 at t = {t:.12g}",
                           near_zero=0.0)
    return (frozen_alpha(g, d) if freeze_alpha else g), lift, to_layout, margins, switch


def _joined(sol, rest, k: int, n: int):
    """``rest`` (a run continued from ``sol``'s end, its states cut to the first ``n`` entries) after the first
    ``k`` rows of ``sol``: one :class:`Solution` with both runs' evaluations, steps and events."""
    rest.t = np.concatenate([np.asarray(sol.t)[:k], np.asarray(rest.t)])
    rest.y = np.vstack([np.asarray(sol.y)[:k].reshape(-1, n), np.asarray(rest.y)[..., :n].reshape(-1, n)])
    rest.y_end = None if rest.y_end is None else np.asarray(rest.y_end)[:n]
    rest.nfev += sol.nfev
    rest.n_steps += sol.n_steps
    rest.events = list(sol.events) + list(rest.events)
    return rest


def _kept_monitor(d: int, y0, y1, n: int | None = None, error_run: bool = False) -> BlowupMonitor:
    """The blow-up monitor of a run continued at ``y1`` in another form (matrix, pair or affine form), quiet unless
    ``error_run`` (the error runs of a precision-switched run are made over the whole run,
    :func:`_switched_run_times`): its levels from ``y1`` (a blow-up's samples come after a switch), its overflow
    stop the whole run's, ``r₀·overflow`` with ``r₀`` the size at ``y0`` (started afresh it would move up by the
    size at the switch, past where the right-hand side itself overflows); it reads the layout part, the first
    ``n`` entries, of a longer state (the pair form)."""
    size, dsize = layout.gaussian_size(d)
    m = layout.state_size(d) if n is None else n
    r0, r1 = (float(size(np.asarray(y, float)[:m])) for y in (y0, y1))
    return BlowupMonitor(lambda z: size(z[..., :m]), lambda z, fz: dsize(z[..., :m], fz[..., :m]),
                         overflow=BlowupMonitor.overflow * r0 / r1, error_run=error_run)


def _continued(ode, sol, g, z1, T, blowup, method, rtol, atol, t_eval, bps, max_nfev, progress, jac, tilt_m,
               deadline, y0, root=None):
    """``sol`` continued from its end ``(t_end, z1)`` by ``g`` (the pair or the stiff form; ``z1`` its state, whose
    first entries are the layout ``(α, Σ)``): the run's kept monitor (:func:`_kept_monitor`) and tilt conditions
    read the layout part, the rows keep it; one :class:`Solution` of both runs (:func:`_joined`).
    ``root``: ``(to_layout, margins, extra stops)`` of the square-root form (:func:`root_form_for`), whose state
    ``(α, L)`` is not a layout: its monitor reads ``|α|² + ‖L‖_F² = tr Σ + |α|²``, its tilt conditions are
    ``margins``, its rows are written back as ``(α, LLᵀ)``."""
    from ..numerics.ode.solve import integrate

    d, n = ode.d, layout.state_size(ode.d)
    t1, y1 = float(sol.t_end), np.asarray(sol.y_end, float)
    te = None if t_eval is None else np.asarray(t_eval, float)
    k = len(sol.t) - 1 if te is None else int(np.searchsorted(te, t1, side="left"))
    if root is None:
        events = [_kept_monitor(d, y0, y1, n)] if blowup else []
        if tilt_m is not None:
            events += tilt_stops(lambda t, z: tilt_m(t, np.asarray(z)[:n]))
    else:
        _, root_margins, root_stops = root
        size = layout.gaussian_size(d)[0]
        events = [BlowupMonitor(lambda z: np.sum(z ** 2, axis=-1), lambda z, fz: 2 * np.sum(z * fz, axis=-1),
                                overflow=BlowupMonitor.overflow * float(size(np.asarray(y0, float))) /
                                float(size(y1)), error_run=False)] if blowup else []
        events += (tilt_stops(root_margins) if tilt_m is not None else []) + list(root_stops)
    rest = integrate(g, z1, (t1, float(T)), method=method, rtol=rtol, atol=atol,
                     t_eval=None if te is None else te[k:], breakpoints=[b for b in bps if b > t1], events=events,
                     max_nfev=max_nfev, progress=progress, jac=jac, max_seconds=deadline, stuck_evals=STUCK_EVALS)
    if root is not None:
        rest.y = root[0](np.asarray(rest.y).reshape(-1, len(z1)))
        rest.y_end = None if rest.y_end is None else root[0](np.asarray(rest.y_end, float))
    return _joined(sol, rest, k, n)


def _continue_in_pair_form(ode, sol, pair, T, blowup, method, rtol, atol, t_eval, bps, max_nfev, progress, jac,
                           tilt_m, deadline, y0):
    """``(run, note)``: ``sol`` (ended by the ``"pair-switch"`` stop) continued from its end in the square-root form
    ``Σ = LLᵀ`` where ``pair`` carries it (:data:`ROOT_FORM`, :func:`root_form_for`), else in the pair form
    ``(Σ, P = Σ⁻¹)`` (:func:`pair_form_for`), by :func:`_continued`, and the sentence that says so for the run's
    message."""
    if len(pair) > 3:
        g, lift, to_layout, margins, _ = pair[3]
        run = _continued(ode, sol, g, lift(np.asarray(sol.y_end, float)), T, blowup, method, rtol, atol, t_eval,
                         bps, max(max_nfev - sol.nfev, 1), progress, None, tilt_m, deadline, y0,
                         root=(to_layout, margins, []))
        return run, (f"from t = {float(sol.t_end):.10g}, where cond Σ·eps or cond(I - ΣM)·eps reached "
                     f"{PRECISION_SWITCH:g}·rtol, the run went on in the square-root form Σ = LLᵀ, dL/dt = JL, "
                     "J = VL(I - LᵀML)⁻¹LᵀBᵀ")
    g, lift = pair[:2]
    run = _continued(ode, sol, g, lift(np.asarray(sol.y_end, float)), T, blowup, method, rtol, atol, t_eval, bps,
                     max(max_nfev - sol.nfev, 1), progress, None, tilt_m, deadline, y0)
    return run, (f"from t = {float(sol.t_end):.10g}, where cond(I - ΣM)·eps reached {PRECISION_SWITCH:g}·rtol, "
                 "the run went on with Σ⁻¹ beside Σ, J = V(Σ⁻¹ - M)⁻¹Bᵀ")


def _continue_stiff(ode, sol, stiff, T, blowup, rtol, atol, t_eval, bps, max_nfev, progress, deadline, y0):
    """``(run, note)``: ``sol`` (ended by the ``"stiff-switch"`` stop of :func:`stiff_form_for`) continued from its
    end with :data:`STIFF_METHOD` and the exact Jacobian, in the eigenframe of ``Σ``: the state ``(Qᵀα, QᵀΣQ)``
    with ``Q`` the eigenvectors of ``Σ`` at the switch, the equation evaluated with the rotated matrices in
    extended precision (:func:`.matrix_form.extended_matrix_rhs`), so that each eigen-direction's entries carry
    their own scale and the error control is relative per direction (entrywise, the small eigenvalue ``λ₂`` of a
    rank-one collapse is a difference of entries ``~λ₁`` and is controlled only to ``rtol·λ₁/λ₂``, measured to
    lose ``4e-6`` of it over 20 time units at ``rtol = 1e-13``); a new frame (``"reframe"``) where a correlation
    between two axes reaches :data:`.stiff.REFRAME_CORRELATION`.  ``atol`` default
    :data:`.stiff.STIFF_ATOL`·``max(1, |y|_∞)`` (entries of the collapsed directions are computed to relative
    accuracy, so they are not noise).  The rows are rotated back; the run keeps the whole run's monitor
    (:func:`_kept_monitor`; ``tr Σ + |α|²`` is rotation invariant).
    An evaluation budget of its own (``max_nfev``: the explicit run's evaluations went to a stability bound)."""
    from ..numerics.ode.solve import integrate

    make, _, det = stiff
    d, n = ode.d, layout.state_size(ode.d)
    t1, y1 = float(sol.t_end), np.asarray(sol.y_end, float)
    te = None if t_eval is None else np.asarray(t_eval, float)
    a, S = layout.unpack(y1, d)
    lam, Q = np.linalg.eigh(0.5 * (S + S.T))
    z = layout.pack(Q.T @ a, np.diag(np.maximum(lam, 0.0)))
    events = [_kept_monitor(d, y0, y1)] if blowup else []
    a_tol = STIFF_ATOL * max(1.0, float(np.abs(z).max())) if atol is None else atol
    run, frames, used, watch = sol, 0, 0, True
    while True:
        g, jac = make(Q)
        reframe = StopCondition(_frame_margin(_frame_axes(lam, rtol) if watch else [], d), "reframe",
                                "a correlation reached the reframe bound at t = {t:.12g}", near_zero=0.0)
        k = len(run.t) - 1 if te is None else int(np.searchsorted(te, t1, side="left"))
        rest = integrate(g, z, (t1, float(T)), method=STIFF_METHOD, rtol=rtol, atol=a_tol,
                         t_eval=None if te is None else te[k:], breakpoints=[b for b in bps if b > t1],
                         events=events + [reframe], max_nfev=max(max_nfev - used, 1), progress=progress, jac=jac,
                         max_seconds=deadline, stuck_evals=STUCK_EVALS)
        used += rest.nfev
        z_end = None if rest.y_end is None else np.asarray(rest.y_end, float)
        rest.y = np.array([_from_frame(Q, y, d) for y in np.asarray(rest.y).reshape(-1, n)]).reshape(-1, n)
        rest.y_end = None if z_end is None else _from_frame(Q, z_end, d)
        run = _joined(run, rest, k, n)
        if not (rest.status == Status.EVENT and rest.event.kind == "reframe"):
            break
        t1, frames = float(rest.t_end), frames + 1
        # a frame that lasted only a few steps: an axis drifts as fast as the run moves (a collapsing direction
        # still above rtol·λ_max); the rest of the run keeps the next frame instead of renewing it at every step
        watch = rest.n_steps >= REFRAME_MIN_STEPS
        a, S = layout.unpack(z_end, d)
        lam, W = np.linalg.eigh(0.5 * (S + S.T))
        Q, z = Q @ W, layout.pack(W.T @ a, np.diag(np.maximum(lam, 0.0)))
    run.method = STIFF_METHOD
    kept = "" if watch else f", the last kept from t = {t1:.10g} (frames lasted < {REFRAME_MIN_STEPS} steps)"
    return run, (f"from t = {float(sol.t_end):.10g}, where {det.steps} explicit steps in a row were stability-bound "
                 f"(step·|Re λ| >= {STIFF_STEP:g} with λ = {det.lam:.4g}, the state's rate {det.rate:.2g}), the run "
                 f"went on with {STIFF_METHOD} (implicit BDF where stiff), the exact Jacobian and the right-hand side "
                 f"in extended precision, in the eigenframe of Σ ({frames} new frames{kept})")


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


def _stiffness_note(f, sol) -> str:
    """Why a run that stopped at a finite state was slow, when it was stiffness: ``"; stiff there: …"`` when the
    Jacobian of ``f`` at the stop (central differences at two steps that must agree, ``4n`` evaluations) has an
    eigenvalue ``λ`` with ``-Re λ`` more than :data:`STIFF_RATIO` times the state's own rate ``‖f(y)‖/‖y‖`` (an
    explicit step is then bounded by stability, ``h ≲ 3/|λ|``, not by accuracy: the solution goes on, at ``~|λ|``
    steps per unit time); ``""`` otherwise."""
    y = np.asarray(sol.y_end, float)
    if not np.all(np.isfinite(y)):
        return ""
    scale = max(float(np.abs(y).max()), 1e-300)

    def most_negative(rel):
        Jac = np.empty((y.size, y.size))
        for j in range(y.size):
            dj = rel * max(abs(y[j]), 1e-6 * scale)
            e = np.zeros_like(y)
            e[j] = dj
            Jac[:, j] = (np.asarray(f(sol.t_end, y + e), float) - np.asarray(f(sol.t_end, y - e), float)) / (2 * dj)
        return float(np.linalg.eigvals(Jac).real.min()) if np.all(np.isfinite(Jac)) else math.nan

    try:
        with np.errstate(all="ignore"):
            fy = np.asarray(f(sol.t_end, y), float)
            lam, lam2 = most_negative(1e-6), most_negative(1e-4)
    except (np.linalg.LinAlgError, ArithmeticError, ValueError):
        return ""           # a neighbour of the stop where the right-hand side does not exist: no diagnosis
    rate = float(np.abs(fy).max()) / scale
    # two difference steps must agree: a right-hand side that is round-off noise there has no Jacobian to report
    if not (np.all(np.isfinite(fy)) and lam < 0 and abs(lam - lam2) <= 0.1 * abs(lam)) or -lam < STIFF_RATIO * rate:
        return ""
    return (f"; stiff there: a Jacobian eigenvalue with real part {lam:.3g} against the state's rate {rate:.2g} "
            f"bounds an explicit step to about {3 / -lam:.2g} (stability, not accuracy)")


def _precision_note(y, d: int, rtol: float) -> str:
    c = _cond(layout.unpack(np.asarray(y, float), d)[1])
    return (f"cond Σ = {c:.3g}, cond Σ·eps = {c * np.finfo(float).eps:.2g} "
            f"{'>' if c * np.finfo(float).eps > rtol else '<='} rtol = {rtol:g}")


def _continue_in_affine_form(ode, sol, f, T, freeze_alpha, blowup, method, rtol, atol, t_eval, bps, max_nfev,
                             progress, jac, deadline, y0):
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
    # its own error runs (from the continuation: the generated form is not finite before it), the run's overflow stop
    events = [_kept_monitor(d, y0, y1, error_run=True)] if blowup else []
    rest = integrate(fa, y1, (t1, float(T)), method=method, rtol=rtol, atol=atol,
                     t_eval=None if te is None else te[k:], breakpoints=[b for b in bps if b > t1],
                     events=events, max_nfev=max(max_nfev - sol.nfev, 1),
                     progress=progress, jac=jac, max_seconds=deadline, stuck_evals=STUCK_EVALS)
    rest = _joined(sol, rest, k, len(y1))
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
    does not reach a settled blow-up before ``T``.  ``jac``: the Jacobian of ``f`` for the methods that want one.
    The precision switches (generated form → matrix form → pair form) and the stiff switch (matrix form →
    implicit, in the eigenframe) are in the module docstring; each is named with its time in the message."""
    from ..numerics.ode.solve import Deadline, integrate

    d = ode.d
    deadline = Deadline.of(max_seconds)
    cond = getattr(ode, "condition_values", None)
    bps = ode.schedule.breakpoints(T)
    got = matrix_form_for(ode, f, y0, freeze_alpha)
    fm, tilt_m = got if got is not None else (None, None)
    room = math.log(PRECISION_SWITCH * rtol / np.finfo(float).eps)
    stops = gaussian_events(ode, blowup)
    pair = None if fm is None else pair_form_for(ode, freeze_alpha, rtol)
    root = None if fm is None or not ROOT_FORM else root_form_for(ode, freeze_alpha, rtol)
    if root is not None:      # the switch and its continuation: the square-root form where ROOT_FORM
        pair = (None, None, root[4], root)
    pair_stop = [] if pair is None else [pair[2]]
    stiff = None if fm is None or tilt_m is not None else stiff_form_for(ode, freeze_alpha, fm, y0, method)
    stiff_stop = [] if stiff is None else [StopCondition(stiff[2], "stiff-switch", "explicit steps stability-bound "
                                                         "at t = {t:.12g}", near_zero=0.0)]
    big = math.log(MAGNITUDE_SWITCH)

    def margins(t, y):
        S = layout.unpack(np.asarray(y, float), d)[1]
        return np.array([room - math.log(_cond(S)), big - math.log(max(float(np.abs(S).max()), 1e-300))])

    if fm is not None and np.min(margins(0.0, y0)) <= 0:
        # ill-conditioned (or large) from the start: the matrix form throughout, with its scale-free tilt conditions
        f, fm, cond = fm, None, tilt_m
        stops = gaussian_events(ode, blowup)[:1 if blowup else 0] + tilt_stops(tilt_m) + pair_stop + stiff_stop
    extra = [] if fm is None else [StopCondition(
        margins, "precision-switch", "cond Σ·eps reached rtol/100 or |Σ| reached 1e30 at t = {t:.12g}",
        near_zero=0.0)]
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
        quiet = [_kept_monitor(d, y0, y1)] if blowup else []
        rest = integrate(fm, y1, (t1, float(T)), method=method, rtol=rtol, atol=atol,
                         t_eval=None if te is None else te[k:], breakpoints=[b for b in bps if b > t1],
                         events=quiet + tilt_stops(tilt_m) + pair_stop + stiff_stop,
                         max_nfev=max(max_nfev - sol.nfev, 1),
                         progress=progress, jac=jac, max_seconds=deadline, stuck_evals=STUCK_EVALS)
        note = ""
        if rest.status == Status.EVENT and rest.event.kind == "pair-switch":
            rest, note = _continue_in_pair_form(ode, rest, pair, T, blowup, method, rtol, atol,
                                                None if te is None else te[k:], [b for b in bps if b > t1],
                                                max(max_nfev - sol.nfev, 1), progress, jac, tilt_m, deadline, y0)
            note = f"; {note}"
        elif rest.status == Status.EVENT and rest.event.kind == "stiff-switch":
            rest, note = _continue_stiff(ode, rest, stiff, T, blowup, rtol, atol, None if te is None else te[k:],
                                         [b for b in bps if b > t1], max_nfev, progress, deadline, y0)
            note = f"; {note}"
        rest = _joined(sol, rest, k, len(y1))
        rest.message = (f"{rest.message} (the generated right-hand side was replaced by the inverse-free matrix "
                        f"form at t = {t1:.10g}, where "
                        + (f"cond Σ·eps reached {PRECISION_SWITCH:g}·rtol" if sol.event.index == 0 else
                           f"|Σ| reached {MAGNITUDE_SWITCH:g}, beyond which its products of Σ entries overflow")
                        + f"{note})")
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
    elif sol.status == Status.EVENT and sol.event.kind == "pair-switch":
        # ill-conditioned from the start, in matrix form until its solve lost the precision
        sol, note = _continue_in_pair_form(ode, sol, pair, T, blowup, method, rtol, atol, t_eval, bps, max_nfev,
                                           progress, jac, tilt_m, deadline, y0)
        sol.message = f"{sol.message} ({note})"
    elif sol.status == Status.EVENT and sol.event.kind == "stiff-switch":
        # ill-conditioned from the start, in matrix form until its explicit steps were stability-bound
        sol, note = _continue_stiff(ode, sol, stiff, T, blowup, rtol, atol, t_eval, bps, max_nfev, progress,
                                    deadline, y0)
        sol.message = f"{sol.message} ({note})"
    if (sol.status == Status.STALLED and any(e.kind == "nonfinite" for e in sol.events) and sol.y_end is not None
            and np.all(np.isfinite(sol.y_end)) and ode.schedule.is_constant):
        # the rhs stopped being finite at a finite state (the generated Sinkhorn form overflows from tr Σ ~ 1e77):
        # the same run goes on in the matrix form of affine_field (scale-free), to the solver's overflow stop
        sol, f = _continue_in_affine_form(ode, sol, f, T, freeze_alpha, blowup, method, rtol, atol, t_eval, bps,
                                          max_nfev, progress, jac, deadline, y0=y0)
    sol.status = reported_status(sol)
    if sol.status == Status.TIME_LIMIT and sol.y_end is not None and np.all(np.isfinite(sol.y_end)):
        # why a run is slow: where cond Σ·eps exceeds rtol the entries no longer carry the small eigenvalues
        sol.message = f"{sol.message}; at the stop {_precision_note(sol.y_end, d, rtol)}{_stiffness_note(f, sol)}"
    if not (blowup and sol.status == Status.STALLED):
        return sol
    sol.message = f"{sol.message}; at the stall {_precision_note(sol.y_end, d, rtol)}{_stiffness_note(f, sol)}"
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
