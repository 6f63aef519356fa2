"""The stiff switch of :func:`symbolic_tpde.gaussian.integrate.integrate_moments` (issue 30 item 2).

A softmax covariance collapsing onto rank one, ``Σ ≈ s·uuᵀ`` with ``uᵀAu → 0``, relaxes onto that manifold at the
rate ``s·|uᵀ(A + Aᵀ)Vu|`` (the Jacobian eigenvalue of the rank-one equation ``x' = (xᵀAx)Vx``; 2268 at
``t = 56`` of fuzz seed 7301 case 14) while the state moves at rates ``~10⁻³``: an explicit step is bounded by
stability.  The relaxation is intrinsic (log-eigenvalue coordinates keep the eigenvalue), so the run goes on
implicitly.  Here: the detector of that regime (:class:`StabilityBound`, a stop condition of the explicit run), the
forms of the continuation (:func:`stiff_form_for`: the matrix form in extended precision, in an eigenframe of ``Σ``,
with its exact Jacobian) and the frame's bookkeeping; the continuation itself is
:func:`symbolic_tpde.gaussian.integrate._continue_stiff`.  Measurements: ``docs/long_time.md``.
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import layout

#: :func:`symbolic_tpde.gaussian.integrate._stiffness_note` calls a stop stiff (and :class:`StabilityBound` a step
#: stability-bound) where the most negative real part of a Jacobian eigenvalue exceeds the state's own rate
#: ``‖f‖/‖y‖`` this many times (measured at the stop of fuzz seed 7301 case 14: 5e5)
STIFF_RATIO = 1e3


#: the stiff switch (:class:`StabilityBound`): an explicit step counts as stability-bound where ``h·|Re λ|`` reaches
#: this while ``|Re λ| ≥`` :data:`STIFF_RATIO` times the state's rate ``‖f‖/‖y‖``: the step is then within a
#: factor 60 of an explicit pair's stability limit ``≈ 6/|λ|``, which is at most ``0.006`` of the state's own time
#: scale ``1/rate``, far below what an 8th-order pair needs for accuracy there (``rtol^{1/8}``: 0.03 at 1e-12).
#: Measured on fuzz seed 7301 case 14: DOP853 holds ``h·|λ| ≈ 1.6`` at rtol 1e-12 but ``≈ 0.46`` at rtol 1e-13
#: (its stability interval is about ``[-6, 0]``; round-off in the error estimate keeps it below)
STIFF_STEP = 0.1
#: ... for this many accepted steps in a row (≥ ``STIFF_STEPS·STIFF_STEP`` = 50 e-folds of the fast mode: no transient)
STIFF_STEPS = 500
#: the Jacobian's spectrum is recomputed every this many accepted steps (it moves on the state's slow time scale)
STIFF_EVERY = 8
#: the stiff continuation's method: measured on case 14 from t = 92 at rtol 1e-12 with the exact Jacobian and the
#: extended-precision form (entrywise, before the eigenframe), LSODA reached T = 1000 in 28 s CPU, BDF t = 163 in
#: 60 s, Radau needed 13 s for t = 92 → 97
STIFF_METHOD = "LSODA"


#: :func:`~symbolic_tpde.gaussian.integrate._continue_stiff` takes a new eigenframe where a correlation
#: ``|Σ̃_ij|/sqrt(Σ̃_ii Σ̃_jj)`` of the rotated ``Σ̃`` reaches this: below it ``Σ̃_jj`` is within a factor
#: ``1/(1 - 0.5²) = 4/3`` of an eigenvalue, so the relative error control on the entry is one on the eigenvalue
REFRAME_CORRELATION = 0.5
#: a frame that lasted fewer accepted steps than this is kept for the rest of the run: a guard against renewing the
#: frame at every step where a visible axis drifts as fast as the run moves (a collapsing direction still above
#: ``rtol·λ_max``; seen when the switch was forced at the start of fuzz seed 3030 case 16, not in an unforced run)
REFRAME_MIN_STEPS = 20
#: the stiff continuation's default ``atol``, relative to the state's largest entry: in the eigenframe the entries
#: of a small eigen-direction are computed to relative accuracy (no cancellation against the large ones), so the
#: error control may follow them far below ``eps·‖Σ‖`` (measured on case 14 over t = 20 → 40: 7 224 evaluations,
#: ``λ₂`` to 1.7e-8 between rtol 1e-12 and 1e-13; at ``1e-14``, the package's default, 5e-7 and on a d = 2 case
#: ten times the evaluations)
STIFF_ATOL = 1e-20


def _frame_margin(keep, d: int):
    """``g(t, z)``: ``REFRAME_CORRELATION² - max Σ̃_ij²/|Σ̃_ii Σ̃_jj|`` over the pairs ``i < j`` of the axes
    ``keep`` of a rotated state ``z``: those whose eigenvalue at the frame's start is above ``rtol`` times the
    largest (:func:`_frame_axes`); a smaller one is invisible at the tolerance, normwise, and a collapsed one,
    whose axis drifts while its eigenvalue stays ~0, would otherwise ask for a new frame at every step."""
    keep = np.asarray(keep, int)
    pairs = np.triu_indices(len(keep), 1)
    i, j = keep[pairs[0]], keep[pairs[1]]

    def g(t, z):
        S = layout.unpack(np.asarray(z, float), d)[1]
        with np.errstate(all="ignore"):
            c = S[i, j] ** 2 / np.abs(S[i, i] * S[j, j])
        c = c[np.isfinite(c)]
        return np.array([REFRAME_CORRELATION ** 2 - float(np.max(c, initial=0.0))])

    return g


def _frame_axes(lam, rtol: float):
    """The axes of an eigenframe whose eigenvalue ``lam`` is above ``rtol`` times the largest."""
    return np.nonzero(lam > rtol * float(np.max(lam, initial=0.0)))[0]


def _from_frame(Q, z, d: int):
    """The layout state ``(Qα̃, QΣ̃Qᵀ)`` of a rotated state ``z``."""
    a, S = layout.unpack(np.asarray(z, float), d)
    return layout.pack(Q @ a, Q @ S @ Q.T)


class StabilityBound:
    """The ``"stiff-switch"`` stop of an explicit matrix-form run, as a :class:`StopCondition`'s ``g(t, y)``.

    Called once per accepted step (and at the start): with ``h`` the step just taken and, every
    :data:`STIFF_EVERY` steps, ``λ`` the most negative real part of an eigenvalue of the exact Jacobian ``jac`` and
    ``rate = ‖f(y)‖/‖y‖`` (max norms), a step is stability-bound where ``h·|λ| ≥`` :data:`STIFF_STEP` while
    ``|λ| ≥`` :data:`STIFF_RATIO`·``rate`` (:data:`STIFF_STEP`: the step is near the stability limit ``≈ 6/|λ|``,
    itself a small fraction of the state's own time scale, i.e. set by the fast decaying mode).  After
    :data:`STIFF_STEPS` such steps in a row (``≥ 50`` e-folds of that mode: no transient left) the value turns
    negative and stays so from that time on (the integrator's root finder lands on the step's end).  A call at an
    earlier time than the last one starts over (a new run over the same interval)."""

    def __init__(self, f, jac, steps: int | None = None):
        self.f, self.jac = f, jac
        self.steps = STIFF_STEPS if steps is None else steps
        self.t_prev, self.fired, self.streak, self.count = -math.inf, None, 0, 0
        self.lam, self.rate = math.nan, math.nan

    def __call__(self, t, y):
        t = float(t)
        if self.fired is not None and t >= self.fired:
            return np.array([-1.0])
        if t <= self.t_prev:
            if t < self.t_prev and self.fired is None:
                self.t_prev, self.streak, self.count = t, 0, 0
            return np.array([1.0])
        h, self.t_prev = t - self.t_prev, t
        if not math.isfinite(h):
            return np.array([1.0])                   # the run's start: no step yet
        if self.count % STIFF_EVERY == 0:
            self.lam, self.rate = _stiffness(self.f, self.jac, t, np.asarray(y, float))
        self.count += 1
        bound = self.lam < 0 and h * -self.lam >= STIFF_STEP and -self.lam >= STIFF_RATIO * self.rate
        self.streak = self.streak + 1 if bound else 0
        if self.streak >= self.steps:
            self.fired = t
            return np.array([-1.0])
        return np.array([1.0])


def _stiffness(f, jac, t, y) -> tuple[float, float]:
    """``(λ, rate)``: the most negative real part of an eigenvalue of ``jac(t, y)`` and ``‖f(t, y)‖/‖y‖`` (max
    norms); NaNs where either is not finite."""
    with np.errstate(all="ignore"):
        Jm = np.asarray(jac(t, y), float)
        fy = np.asarray(f(t, y), float)
    if not (np.all(np.isfinite(Jm)) and np.all(np.isfinite(fy))):
        return math.nan, math.nan
    scale = max(float(np.abs(y).max()), 1e-300)
    return float(np.linalg.eigvals(Jm).real.min()), float(np.abs(fy).max()) / scale


def stiff_form_for(ode, freeze_alpha: bool, fm, y0, method: str):
    """``(make, jac, detector)`` of the stiff continuation
    (:func:`~symbolic_tpde.gaussian.integrate._continue_stiff`), or ``None`` (an implicit ``method`` already,
    non-constant weights, a head with ``M = R + Rᵀ ≠ 0``: not built; a prototype with an extended-precision solve
    switched on fuzz seed 3030 case 19 (custom, d = 2, ``λ = -1.1e4`` beside a rate 9.8) and reached t = 2.15 in
    60 s where the explicit path stalls at 2.03, no help worth its code).  ``make(Q)``: the pair
    ``(g, jac)`` of the equation in the frame ``Q`` (:func:`.matrix_form.extended_matrix_rhs`,
    :func:`.matrix_form.matrix_jacobian`; the first checked against ``fm`` at ``y0`` to ``1e-10`` relative, as ``fm``
    is against the generated form, else ``None``); ``jac`` the exact Jacobian of ``fm`` (the run's matrix form);
    ``detector`` a fresh :class:`StabilityBound` on ``fm`` for the stop of the explicit run."""
    from ..numerics.ode.solve import wants_jacobian
    from .matrix_form import extended_matrix_rhs, frozen_alpha, matrix_jacobian

    if wants_jacobian(method) or not getattr(ode.schedule, "is_constant", False) or \
            getattr(ode.schedule, "func", None) is not None:
        return None
    w, d = ode.schedule(0.0), ode.d
    if extended_matrix_rhs(w, d) is None:
        return None
    jac = matrix_jacobian(w, d, freeze_alpha=freeze_alpha)
    g = extended_matrix_rhs(w, d)
    ref, new = np.asarray(fm(0.0, y0), float), np.asarray((frozen_alpha(g, d) if freeze_alpha else g)(0.0, y0))
    if not np.allclose(new, ref, rtol=1e-10, atol=1e-10 * max(1.0, float(np.abs(ref).max()))):
        return None

    def make(Q):
        g = extended_matrix_rhs(w, d, frame=Q)
        return (frozen_alpha(g, d) if freeze_alpha else g), matrix_jacobian(w, d, freeze_alpha=freeze_alpha, frame=Q)

    return make, jac, StabilityBound(fm, jac)
