"""Fit parameters of a Gaussian moment ODE to observed moments or token clouds, with an identifiability report.

Model: the moment ODE of a :class:`~symbolic_tpde.gaussian.GaussianODE` with constant weights; the chosen
directions ``θ`` (names of :mod:`symbolic_tpde.gaussian.sensitivities`: parameters such as ``h0_A`` or
``h0_V_0_1``, and initial data ``alpha0_i``/``Sigma0_i_j``) are fitted, everything else stays at the model's
values.  Observations at times ``t_k``: the mean ``α(t_k)`` and/or the upper triangle of ``Σ(t_k)``, stacked
into ``m``.  Noise: a covariance ``C`` of ``m``: given (known noise), or ``C = s² I`` with ``s²`` estimated from the
residuals (``s² = |L⁻¹r|²/(m - rank)``), or, for token clouds, their sampling error *propagated by the ODE*:
a cloud of ``n_k`` tokens at ``t_k`` is taken as a run started from ``n_k`` draws of ``N(α₀, Σ₀)``, whose
initial moments scatter with covariance ``C₀/n_k`` (``C₀`` the covariance of the per-token vectors
``z_i = (x_i, upper((x_i - x̄)(x_i - x̄)ᵀ))`` of the first cloud); to first order the moments at ``t_k`` then
scatter with ``Φ_k C₀ Φ_kᵀ / n_k``, ``Φ_k = ∂y(t_k)/∂y(0)`` the initial-data sensitivities (computed at the
current parameters: fit, recompute ``C``, refit).  The covariance of the tokens *at* ``t_k`` is not that
scatter (measured at d = 2: it under-states the variance of the mean five- to tenfold), since a particle
system is the PDE of its own empirical measure.  Blocks are independent across times (independent runs); the
overall scale ``s²`` is still estimated from the residuals (the non-Gaussian part of the empirical measure adds
an ``O(n^{-1/2})`` term of its own; where the softmax weights concentrate on few tokens it is not small:
measured at d = 2, n = 1000, |α| ≈ 7, the variance of ``Σ_00`` is ~13 times the propagated one, and intervals
for ``A`` and ``V`` fitted together are not calibrated; README, Fitting).  Tokens of *one* run followed through
time are correlated across times: intervals for such data ignore that correlation and are not calibrated.

Replicates (``replicates=R``, clouds): after the propagated fit, ``R`` particle runs at the fitted parameters
(same token counts, initial law ``N(α₀, Σ₀)``, times; :func:`replicate_moments`) give, per time, the sample
covariance ``Ĉ_k`` of their moments and their mean minus the ODE's moments, ``b_k`` (the finite-n bias of the
particle moments against the mean field, self-interaction included).  The fit is repeated on ``m_obs - b`` with
``C = blockdiag(Ĉ_k)·(R-1)/(R-q-2)·(1 + 1/R)`` (``q`` moments per time: the Hartlap factor makes the inverse of a
sample covariance unbiased; ``1/R`` is the variance of the estimated ``b``) and ``s² = 1``; this is repeated at
the new point (at most :data:`REPLICATE_ROUNDS` rounds, until the point moves by at most
:data:`REPLICATE_SHIFT` standard errors): a fixed point is an indirect-inference estimate (the particle system's
mean moments at ``θ̂`` match the data).  It replaces the error model, not the linearisation: where the fit is
weakly determined (standard errors comparable to the parameters) the confidence region spans regimes from near
mean field to one-token attention and no linearised interval is calibrated (measured: README, Fitting).

Effective sample size (clouds with softmax heads): per time the median over tokens of ``(Σ_j w_ij)²/Σ_j w_ij²``
for ``w_ij ∝ e^{<A x_i, x_j>}`` at the fitted ``A`` over the observed cloud, as a fraction of ``n``
(:func:`softmax_ess`): ``≈ e^{-|Ax|²_Σ}`` for a Gaussian cloud.  A regime diagnostic computed from the fit: when
the smallest over the times is below :data:`MEAN_FIELD_ESS` the result carries a ``warning`` naming those times
(far from mean field: on the reference problem t = 2 has 5-10 % at the planted values, and there the propagated
variance of ``Σ_00`` was measured 13x too small).  The threshold is measured: fitting ``A`` and ``V`` together on
a problem whose planted ESS stays at 45-63 % of n (numerics/fit_coverage.py), the intervals covered at the 95 %
level over the fits with smallest ESS >= 25 %, and about half as often below (:data:`EVIDENCE`).

Least squares: ``min_θ |L⁻¹(m(θ) - m_obs)|²`` (``C = LLᵀ``) by ``scipy.optimize.least_squares`` with the
Jacobian ``L⁻¹ ∂m/∂θ`` from the forward sensitivities (generated code, not differences).  Start
(``start="continuation"``, the default): horizon continuation.  On the shortest prefix of observation times
with at least as many observations after ``t = 0`` as parameters, then on one more time per stage, a
trust-region fit (first radius ``|θ|``) with proximal rows ``PROX·(θ - θ_stage start)`` (a short horizon
determines some directions poorly; the rows keep a stage from throwing them far) to tolerance ``1e-8``; its end
is the next stage's start; the last stage is the unpenalised fit on all times (the rows of a prefix are the
leading rows of ``L⁻¹r``, ``L`` lower triangular).  Early times are near the initial data, where the moments
depend nearly linearly on ``θ``.  Measured on the mean-field design of numerics/fit_coverage.py from
``(A, V) = (0, I)``: README, Fitting; ``start="given"``: one fit on all times from the start values (from
``(0, I)`` on that design it did not converge in 120-400 s).  Misfit check (noise given, propagated or from
replicates): ``|L⁻¹r|²`` above the :data:`MISFIT_QUANTILE` quantile of chi-square with ``m - rank`` degrees of
freedom adds a ``warning``.

Identifiability (computed from the problem, not from a list of known cases): the singular values ``s_i`` and
right singular vectors ``v_i`` of the whitened Jacobian ``J`` at the fit.  Directions with
``s_i ≤ NULL_REL · s_1`` are *null*: moving ``θ`` along them does not change the predicted observations to
first order (the sensitivities are accurate to ~``1e-9`` relative at the default tolerances, so ``1e-6``
separates a true null direction from a small singular value by three decades).  A parameter is identifiable
iff it has no component along the null directions (``|P_null e_k| ≤ 1e-6``); an unidentifiable parameter gets
*no* estimate (``nan``) and no interval, and the report lists the null directions as combinations of the
parameter names (e.g. with ``V = I`` and covariances alone, ``A_01 - A_10``: only ``A + Aᵀ`` is determined).
Confidence intervals (level ``level``, normal quantile): ``θ̂_k ± z √C_θ,kk`` with ``C_θ = s² Σ_i v_i v_iᵀ/s_i²``
over the non-null directions (the linearisation at the fit; ``s² = 1`` when the noise is known).
"""

from __future__ import annotations

import re

from dataclasses import dataclass

import numpy as np

from ..errors import ConvergenceError, InputError
from ..registry import layout
from ..weights import check_gaussian

#: the measured coverage of the 95% intervals from clouds, by error model and whether V is fitted (README,
#: Fitting).  "reference": d = 2, planted contracting A, expanding V, n = 1000 tokens, one independent run per
#: time, 5 times on [0, 2] (|α| reaches ~7: ESS 5-10% of n at t = 2 at the planted values; tests/test_fit.py,
#: _particle_fit and _replicate_coverage, R = 20); "mean-field": the same A with a decaying rotation V (ESS
#: 45-63% of n at the planted values; numerics/fit_coverage.py, start at the planted values).  A and V fitted
#: together: calibrated where the fit's smallest ESS over the times is >= MEAN_FIELD_ESS, not below (the
#: warning of `fit`); binomial sds from the per-seed scatter (misses cluster within a seed)
EVIDENCE = {
    ("propagated", False): "intervals measured for A with V known: coverage 37/40 (95% level, reference problem "
                           "d = 2, n = 1000; binomial sd 1.4)",
    ("propagated", True): "A and V together: coverage measured 2895/3032 (95.5%; calibrated 2880 +- 12 binomial, "
                          "+- 20 from the per-seed scatter) over the fits with min ESS >= 25% of n on the mean-field "
                          "problem (d = 2, n = 1000, seeds 0-399); NOT calibrated below: 78/168 there, 245/320 on "
                          "the reference problem (min ESS at the fit <= 9.5%); fits started at the planted values. From "
                          "(A, V) = (0, I) by horizon continuation (seeds 0-99): 98/100 reached the same minimum, "
                          "720/744 inside over its un-warned fits (calibrated 707 +- 5.9); the 2 others warned",
    ("replicates", False): "intervals measured for A with V known: coverage 37/40 with 20 replicates (95% level, "
                           "reference problem d = 2, n = 1000; binomial sd 1.4; the finite-n bias of A_00 removed, "
                           "one miss at z = 5.0 where the fit settled at ESS 0.7% of n at t = 2)",
    ("replicates", True): "A and V together with 20 replicates: coverage measured 348/360 (96.7%; calibrated 342 "
                          "+- 4.1 binomial) over the fits with min ESS >= 25% of n on the mean-field problem "
                          "(seeds 0-47); NOT calibrated below: 15/24 there, 33/48 on the reference problem "
                          "(binomial sd 1.5 around 45.6, ESS at t = 2 of 0.1-0.9% of n at the fit in 5 of 6 runs)",
    ("propagated", None): "A alone 37/40; A and V together 2895/3032 at min ESS >= 25%, NOT calibrated below",
    ("replicates", None): "A alone 37/40; A and V together 348/360 at min ESS >= 25%, NOT calibrated below",
}

#: replicate rounds at most: each simulates the runs at the current point, corrects, refits; stop when the point
#: moved by at most REPLICATE_SHIFT standard errors (module docstring, Replicates)
REPLICATE_ROUNDS, REPLICATE_SHIFT = 3, 0.2

#: ESS fraction (at the fit, smallest over the times) below which `fit` warns that its intervals are not
#: calibrated: measured on the mean-field problem of numerics/fit_coverage.py (EVIDENCE), A and V fitted together
MEAN_FIELD_ESS = 0.25

#: chi-square quantile of the whitened residual |L⁻¹r|² (m - rank degrees of freedom) above which `fit` warns that
#: the stated noise does not explain the residuals (a false alarm in 0.1% of fits when the noise model holds and
#: the fit is linear near its minimum); not applied when the noise is unknown (C = s² I has no scale to test)
MISFIT_QUANTILE = 0.999

#: weights of the proximal rows of continuation stages, tried in turn while the end point fails the misfit test
#: (the lowest cost is kept): with 3 a parameter change of 1 costs as much as three standard deviations of the
#: whitened data, so a short horizon that determines a direction poorly does not throw it far (measured: without
#: them a mean-field seed ended its t <= 1 stage at A_10 = 12.5, then at ESS 0.1%; README, Fitting)
PROX = (3.0, 10.0, 0.3)

#: right-hand-side evaluations of one model run in a fit, at most: a trial point where the integrator stalls
#: (near a blow-up) is treated as not reaching the last time instead of costing a minute (measured: one trial
#: step of a continuation stage, 58 s, ended "stalled"); an accepted run on [0, 2] takes a few hundred
RUN_NFEV = 50_000

#: relative singular value at or below which a direction is reported as not identifiable (module docstring)
NULL_REL = 1e-6

#: the work budget of one fit, in right-hand-side evaluations of the sensitivity system summed over every model
#: run (:func:`fit_budget`): ``FIT_RUN_NFEV · max(1, t_K/2)`` per run (an accepted run on [0, 2] takes a few
#: hundred, RUN_NFEV's note) times ``FIT_RUNS · (P + 1) · (K + 2)`` runs (P fitted numbers, K observation times:
#: a continuation stage per time plus two passes, each a trust-region solve whose iterations grow with P).
#: Measured on the fits of tests/test_fit.py: at most 71 130 evaluations (P = 8, K = 4: budget 5.4e5); a fuzz
#: fit of random clouds (P = 2, K = 3) wandered to stiff parameters and used 1.35e6 evaluations (25 s, about 50 us
#: each with the integrator's overhead) before the budget; now it stops at 1.5e5 with status "step-budget"
FIT_RUN_NFEV, FIT_RUNS = 500, 20


class FitBudgetReached(Exception):
    """The fit used its work budget (:func:`fit_budget`) before the optimiser converged: no estimate.
    ``used`` and ``budget`` in right-hand-side evaluations; ``formula`` says how the budget was derived."""

    def __init__(self, used: int, budget: int, formula: str):
        self.used, self.budget, self.formula = used, budget, formula
        super().__init__(f"work budget of {budget} right-hand-side evaluations ({formula}) used up ({used}) "
                         "before the optimiser converged: no estimate")


def fit_budget(n_params: int, times) -> tuple[int, str]:
    """The work budget of a fit of ``n_params`` numbers to observations at ``times`` (:data:`FIT_RUN_NFEV`):
    ``(evaluations, formula)``."""
    K, tK = len(times), float(times[-1])
    per_run = FIT_RUN_NFEV * max(1.0, tK / 2)
    budget = int(per_run * FIT_RUNS * (n_params + 1) * (K + 2))
    return budget, (f"{FIT_RUN_NFEV} x max(1, t_K/2 = {tK / 2:.3g}) per run x {FIT_RUNS} x (P + 1 = {n_params + 1}) "
                    f"x (K + 2 = {K + 2}) runs")


@dataclass(frozen=True)
class FitResult:
    """``names``; ``estimate`` (``nan`` where not identifiable), ``stderr``, ``lower``/``upper`` (``level``);
    ``identifiable`` per name; ``rank`` of the whitened Jacobian, its ``singular_values``; ``null_directions``
    (rows, unit vectors over ``names``); ``cost`` = ½|residual|²; ``n_obs``; ``noise`` (how ``C`` was set);
    ``scale`` = ``s²`` (1 for known noise; ≫ 1 flags a misfit or unmodelled noise); ``converged`` and ``message`` of the optimiser (not converged: the numbers are not a minimum); ``point`` the optimiser's end point (all names, a point of the null set
    when the rank is deficient: not an estimate)."""

    names: tuple[str, ...]
    estimate: np.ndarray
    stderr: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float
    identifiable: np.ndarray
    rank: int
    singular_values: np.ndarray
    null_directions: np.ndarray
    cost: float
    n_obs: int
    noise: str
    scale: float
    converged: bool
    message: str
    point: np.ndarray
    replicates: int = 0
    bias: np.ndarray | None = None
    ess: np.ndarray | None = None
    warning: str | None = None

    def describe_null(self, tol: float = 1e-3) -> list[str]:
        """Each null direction as text, ``0.707 h0_A_0_1 - 0.707 h0_A_1_0`` (coefficients above ``tol``)."""
        out = []
        for v in self.null_directions:
            v = v * np.sign(v[np.argmax(np.abs(v))])
            out.append(" ".join(f"{c:+.3g} {n}" for c, n in zip(v, self.names) if abs(c) > tol).lstrip("+"))
        return out

    def report(self) -> dict:
        return {"names": list(self.names), "estimate": _nan_none(self.estimate), "stderr": _nan_none(self.stderr),
                "lower": _nan_none(self.lower), "upper": _nan_none(self.upper), "level": self.level,
                "identifiable": [bool(b) for b in self.identifiable], "rank": self.rank,
                "n_params": len(self.names), "singular_values": [float(s) for s in self.singular_values],
                "null_directions": self.describe_null(), "cost": self.cost, "n_obs": self.n_obs,
                "noise": self.noise, "scale": self.scale, "converged": self.converged, "optimiser": self.message,
                "replicates": self.replicates,
                "bias_correction": None if self.bias is None else [_nan_none(b) for b in self.bias],
                "ess_fraction": None if self.ess is None else _nan_none(self.ess), "warning": self.warning}


#: largest magnitude of an observed moment (and of a noise entry): the scenario bound
#: (:data:`symbolic_tpde.inputs.checks.MAX_ENTRY`); with it a point where the moment ODE does not reach the last
#: time (residuals filled with 1e150) always costs more than any reachable point, so the optimiser rejects it
MAX_OBS = 1e75
#: largest token coordinate of an observed cloud (its covariance then stays below MAX_OBS)
MAX_TOKEN = 1e37
#: observed Σ must be symmetric to this relative tolerance (round-off of a sample covariance is ~1e-16)
SYM_RTOL = 1e-10


def _check_observed(a, name):
    """Every entry finite and of magnitude ≤ :data:`MAX_OBS` (the lower triangle of Σ included)."""
    if not np.isfinite(a).all():
        raise InputError(name, "every entry must be finite (the lower triangle of Σ included)")
    if a.size and float(np.abs(a).max()) > MAX_OBS:
        raise InputError(name, f"an entry of magnitude {float(np.abs(a).max()):.3g} exceeds {MAX_OBS:.0e}")


def _nan_none(a):
    return [None if not np.isfinite(x) else float(x) for x in a]


def cloud_moments(clouds):
    """``(alpha (K, d), Sigma (K, d, d), C0, ns)`` from token clouds (``(K, n, d)`` or a list of ``(n_k, d)``):
    sample means and covariances (``1/(n-1)``), the covariance ``C₀`` of the per-token vectors ``z_i`` of the
    first cloud (module docstring) and the token counts."""
    clouds = [np.asarray(c, float) for c in clouds]
    if not clouds or any(c.ndim != 2 or c.shape[1] != clouds[0].shape[1] or c.shape[0] < 3 for c in clouds):
        raise InputError("clouds", "expected K clouds of shape (n, d) with a common d and n >= 3 tokens")
    if not all(np.isfinite(c).all() for c in clouds):
        raise InputError("clouds", "token positions must be finite")
    big = max(float(np.abs(c).max()) for c in clouds)
    if big > MAX_TOKEN:
        raise InputError("clouds", f"a token coordinate of magnitude {big:.3g} exceeds {MAX_TOKEN:.3g} (its "
                         f"covariance would exceed the bound {MAX_OBS:.0e} on observations)")
    d = clouds[0].shape[1]
    iu = np.triu_indices(d)
    al = np.array([c.mean(0) for c in clouds])
    Sg = np.array([np.cov(c, rowvar=False).reshape(d, d) for c in clouds])
    X = clouds[0] - al[0]
    Z = np.concatenate([clouds[0], (X[:, :, None] * X[:, None, :])[:, iu[0], iu[1]]], axis=1)
    return al, Sg, np.atleast_2d(np.cov(Z, rowvar=False)), np.array([len(c) for c in clouds])


def fit(ode, times, directions, *, alpha=None, Sigma=None, clouds=None, alpha0=None, Sigma0=None, noise=None,
        level: float = 0.95, rtol: float = 1e-10, max_nfev: int = 200, replicates: int = 0,
        seed=None, start: str = "continuation", max_seconds: float | None = None) -> FitResult:
    """Least-squares fit of ``directions`` of ``ode`` to observations at ``times`` (module docstring).

    Observations: ``alpha (K, d)`` and/or ``Sigma (K, d, d)``, or ``clouds`` (K token clouds; both moments are
    used and the noise comes from the clouds).  ``alpha0``/``Sigma0``: the initial Gaussian (start values of
    fitted initial entries); from the first cloud when ``clouds`` are given and ``times[0] == 0``.  ``noise``:
    the covariance ``C`` of the stacked observations, or a vector of standard deviations (``None``: unknown,
    estimated from the residuals).  ``replicates=R`` (clouds only): after the fit, ``R`` particle runs at the
    fitted parameters give the noise and a bias correction, and the fit is repeated (module docstring,
    Replicates); ``seed`` seeds their initial draws.  ``start``: ``"continuation"`` (horizon continuation from the
    start values, module docstring) or ``"given"`` (one least-squares run on all times from the start values).
    ``max_seconds``: a wall-clock cap, checked before every evaluation of the model; when reached
    :class:`~symbolic_tpde.numerics.ode.solve.TimeLimitReached` is raised.  Every fit has a work budget derived
    from its size (:func:`fit_budget`: the fitted numbers, the observation times and the last time); when the
    model runs have used it, :class:`FitBudgetReached` is raised (no estimate)."""
    from scipy.optimize import least_squares
    from scipy.stats import chi2 as scipy_chi2, norm

    from scipy.linalg import solve_triangular

    from ..gaussian.sensitivities import integrate_sensitivities, sensitivity_model
    from ..numerics.ode.solve import Deadline

    if start not in ("continuation", "given"):
        raise InputError("start", f"must be 'continuation' or 'given', got {start!r}")
    try:
        deadline = Deadline(max_seconds)
    except ValueError as exc:
        raise InputError("max_seconds", str(exc)) from None
    if ode.schedule.func is not None or len(getattr(ode.schedule, "weights", ())) > 1:
        raise InputError("model", "fitting uses constant weights (one layer); a layered model is not supported")
    times = np.asarray(times, float)
    if times.ndim != 1 or times.size == 0 or np.any(np.diff(times) <= 0) or times[0] < 0:
        raise InputError("times", "must be increasing times >= 0")
    K, d = times.size, ode.d
    use_a, use_S = alpha is not None, Sigma is not None
    if clouds is not None:
        if use_a or use_S or noise is not None:
            raise InputError("clouds", "give either clouds or moments (alpha/Sigma with noise), not both")
        alpha, Sigma, C0, ns = cloud_moments(clouds)
        if len(ns) != K:
            raise InputError("clouds", f"{len(ns)} clouds for {K} times")
        use_a = use_S = True
        how = ("clouds: initial sampling error propagated by the ODE (per time, independent runs), scale s² "
               "estimated from the residuals")
        if alpha0 is None and Sigma0 is None:
            if times[0] != 0:
                raise InputError("alpha0", "not given and the first cloud is not at t = 0")
            alpha0, Sigma0 = alpha[0], Sigma[0]
    if not (use_a or use_S):
        raise InputError("observations", "give alpha and/or Sigma (or clouds)")
    q = d + d * (d + 1) // 2                      # moments per cloud
    if replicates and clouds is None:
        raise InputError("replicates", "replicate particle runs apply to token clouds (clouds=) only")
    if isinstance(replicates, bool) or not isinstance(replicates, (int, np.integer)) or (
            replicates and replicates < q + 3):
        raise InputError("replicates", f"must be 0 or an integer >= {q + 3} (the {q} moments of a cloud need "
                         f"at least {q + 3} runs for an invertible covariance estimate), got {replicates!r}")
    if alpha0 is None or Sigma0 is None:
        raise InputError("alpha0", "the initial Gaussian (alpha0, Sigma0) is required")
    iu = np.triu_indices(d)
    obs = []
    if use_a:
        alpha = np.asarray(alpha, float)
        if alpha.shape != (K, d):
            raise InputError("alpha", f"expected shape ({K}, {d}), got {alpha.shape}")
    if use_S:
        Sigma = np.asarray(Sigma, float)
        if Sigma.shape != (K, d, d):
            raise InputError("Sigma", f"expected shape ({K}, {d}, {d}), got {Sigma.shape}")
        _check_observed(Sigma, "Sigma")
        asym = np.abs(Sigma - Sigma.transpose(0, 2, 1))
        tol = SYM_RTOL * (np.abs(Sigma) + np.abs(Sigma.transpose(0, 2, 1)))
        if np.any(asym > tol):
            k, i, j = np.argwhere(asym > tol)[0]
            raise InputError("Sigma", f"observed covariance at time index {k} is not symmetric: entry ({i}, {j}) = "
                             f"{Sigma[k, i, j]:.6g} but ({j}, {i}) = {Sigma[k, j, i]:.6g}")
    if use_a:
        _check_observed(alpha, "alpha")
    for k in range(K):
        obs += ([alpha[k]] if use_a else []) + ([Sigma[k][iu]] if use_S else [])
    obs = np.concatenate(obs)
    if not np.isfinite(obs).all():
        raise InputError("observations", "must be finite")
    m = obs.size
    if clouds is None:
        if noise is None:
            C, how = np.eye(m), "unknown: C = s² I, s² estimated from the residuals"
        else:
            C = np.asarray(noise, float)
            _check_observed(C, "noise")
            C = np.diag(C ** 2) if C.ndim == 1 else C
            how = "given"
            if C.shape != (m, m):
                raise InputError("noise", f"expected {m} standard deviations or an ({m}, {m}) covariance")
        L = _cholesky(C)
    noise_known = clouds is not None or noise is not None     # else C = s² I: no scale for the misfit test

    def misfit(chi2, dof):
        """The 0.999 chi-square quantile of the misfit test when ``chi2`` exceeds it (module docstring)."""
        if not noise_known or dof <= 0:
            return None
        q = float(scipy_chi2.ppf(MISFIT_QUANTILE, dof))
        return q if chi2 > q else None

    crhs, names, S0 = sensitivity_model(ode, directions)
    if clouds is not None:
        # the evidence for the intervals of this error model (README, Fitting; tests/test_fit.py, slow)
        fitted = {m.group(1) for m in (re.match(r"h\d+_([AV])_", nm) for nm in names) if m}
        case = {frozenset("A"): False, frozenset("AV"): True}.get(frozenset(fitted))
        model = "replicates" if replicates else "propagated"
        if replicates:
            how = (f"clouds: {replicates} replicate particle runs at the fit (same n, initial law, times): "
                   "their moment covariance as C (s² = 1) and their mean minus the ODE as a bias correction")
        how += "; " + (EVIDENCE[model, case] if case is not None else
                       "coverage of the intervals not measured for this choice of parameters (measured on the "
                       f"reference problem: {EVIDENCE[model, None]})")
    p_base = ode.params(0.0).copy()
    pidx = {s.name: i for i, s in enumerate(ode.system.params)}
    snames = layout.state_names(d)
    y0_base = layout.pack(*check_gaussian(alpha0, Sigma0, d))
    slots = []
    for nm in names:
        if nm in pidx:
            slots.append(("p", pidx[nm]))
        else:
            head, _, rest = nm.partition("0_")
            slots.append(("y", snames.index(f"{head}_{rest}")))
    theta0 = np.array([p_base[i] if w == "p" else y0_base[i] for w, i in slots])
    budget, formula = fit_budget(theta0.size, times)
    used = [0]                  # right-hand-side evaluations of every model run so far (the work budget)
    sel = ([np.arange(d)] if use_a else []) + ([d + np.arange(len(iu[0]))] if use_S else [])
    sel = np.concatenate(sel)
    cache: dict = {}

    def at(theta):
        """The parameter vector and the initial state at ``theta``."""
        p, y0 = p_base.copy(), y0_base.copy()
        for (w, i), v in zip(slots, theta):
            (p if w == "p" else y0)[i] = v
        return p, y0

    def run(theta, dirs, k=K):
        """The sensitivity run at ``theta`` to ``times[k-1]`` (``None`` when it does not reach it)."""
        deadline.check()
        left = budget - used[0]
        if left <= 0:
            raise FitBudgetReached(used[0], budget, formula)
        p, y0 = at(theta)
        cap = min(RUN_NFEV, left)
        try:
            sol = integrate_sensitivities(ode, *layout.unpack(y0, d), float(times[k - 1]), dirs, rtol=rtol,
                                          t_eval=times[:k], params=p, max_nfev=cap)
        except InputError:
            return None
        used[0] += int(sol.nfev)
        if sol.status == "stalled" and cap < RUN_NFEV:     # stopped by the budget, not by the run's own cap
            raise FitBudgetReached(used[0], budget, formula)
        return sol if sol.status == "ok" and len(sol.t) == k else None

    def evaluate(theta, k=K):
        """Whitened residual and Jacobian on the first ``k`` times: the leading rows of ``L⁻¹r`` (``L`` lower
        triangular: they involve only the first ``k`` times, whitened by the marginal covariance of those)."""
        key = (theta.tobytes(), k)
        if key not in cache:
            sol = run(theta, directions, k)
            cache.clear()
            j = k * sel.size
            cache[key] = None if sol is None else (
                solve_triangular(Lw[0][:j, :j], np.concatenate([sol.y[i][sel] for i in range(k)]) - obs[:j],
                                 lower=True),
                solve_triangular(Lw[0][:j, :j], np.concatenate([sol.S[i][:, sel].T for i in range(k)]),
                                 lower=True))
        return cache[key]

    anchor = [None]          # continuation stages: rows prox·(θ - θ at the stage's start) (module docstring)

    def fun(theta, k=K):
        r = evaluate(theta, k)
        r = np.full(k * sel.size, 1e150) if r is None else r[0]
        return r if anchor[0] is None else np.concatenate([r, anchor[0][1] * (theta - anchor[0][0])])

    def jac(theta, k=K):
        r = evaluate(theta, k)
        J = np.zeros((k * sel.size, theta.size)) if r is None else r[1]
        return J if anchor[0] is None else np.vstack([J, anchor[0][1] * np.eye(theta.size)])

    def propagated(theta):
        """Block-diagonal ``Φ_k C₀ Φ_kᵀ/n_k`` at ``theta`` (module docstring)."""
        from scipy.linalg import block_diag

        sol = run(theta, ["alpha0", "Sigma0"])
        if sol is None:
            raise InputError("model", f"the moment ODE does not reach t = {times[-1]} from these parameters")
        return block_diag(*[sol.S[k].T @ C0 @ sol.S[k] / ns[k] for k in range(K)])

    Lw = [_cholesky(propagated(theta0)) if clouds is not None else L]
    passes = 2 if clouds is not None else 1
    if evaluate(theta0) is None:
        raise InputError("model", "the moment ODE does not reach the last observation time from the start values "
                         "(blow-up or ceased tilt)")
    def solve(x, k=K, method=None, tol=1e-14):
        method = method or ("lm" if k * sel.size >= theta0.size else "trf")
        return least_squares(fun, x, jac=jac, args=(k,), method=method, xtol=tol, ftol=tol, gtol=tol,
                             max_nfev=max_nfev)

    def attempt(prox):
        """Continuation stages with proximal weight ``prox`` (none with ``start="given"``), then the passes."""
        x, Lw[0] = theta0, Lw0
        cache.clear()
        if start == "continuation":
            # horizon continuation (module docstring): the shortest prefix of times with at least as many
            # observations after t = 0 as parameters, then one more time per stage; the last is the full fit
            first = next((k for k in range(1, K + 1)
                          if np.count_nonzero(times[:k] > 0) * sel.size >= theta0.size), K)
            for k in range(first, K):
                # trust region (first radius |x|, 1 at x = 0): the undamped first step of LM on a short horizon
                # with noisy data jumps to |V| ~ 100 (measured); a stage only has to reach the next one's basin
                anchor[0] = (x.copy(), prox)
                x_new = solve(x, k, "trf", 1e-8).x
                anchor[0] = None
                cache.clear()
                if evaluate(x_new) is not None:    # step rejection: a stage point from which the moment ODE
                    x = x_new                      # does not reach the last time is not taken (stay at x)
                cache.clear()
                if clouds is not None:      # re-weight at the stage's point where the ODE gives a covariance
                    try:
                        Lw[0] = _cholesky(propagated(x))
                    except InputError:
                        pass
                    cache.clear()
        for it in range(passes):
            if it:
                try:
                    Lw[0] = _cholesky(propagated(x))
                except InputError:          # no covariance there: keep the previous weighting (stated nowhere
                    pass                    # else: the intervals use the weighting of the last reachable point)
                cache.clear()
            res = solve(x)
            x = res.x
        return res, Lw[0]

    Lw0 = Lw[0]
    tried = []
    for prox in PROX if start == "continuation" else (None,):
        tried.append(attempt(prox))
        if misfit(2 * tried[-1][0].cost, m - theta0.size) is None:
            break           # unknown noise: no test; else a restart only while the misfit test fails
    res, Lw[0] = min(tried, key=lambda t: t[0].cost)
    cache.clear()
    x = res.x
    from scipy.linalg import block_diag

    bias, obs_raw, shift = None, obs, np.inf
    for it in range(REPLICATE_ROUNDS if replicates else 0):
        if shift <= REPLICATE_SHIFT:
            break
        p, y0 = at(x)
        M = replicate_moments(_weights_at(ode, p), *layout.unpack(y0, d), times, ns, replicates,
                              np.random.default_rng(seed))      # same draws each round (common random numbers)
        sol = run(x, directions)
        if sol is None:
            raise ConvergenceError("fit", f"the moment ODE does not reach t = {times[-1]} at the current fit "
                                   "(replicate round): no estimate")
        bias = M.mean(0) - np.array([sol.y[k][sel] for k in range(K)])
        # Hartlap factor (R-1)/(R-q-2): the inverse of a sample covariance of R runs over-states the precision
        # by that factor on average; (1 + 1/R): the variance the estimated bias correction adds
        R = replicates
        scale = (R - 1) / (R - q - 2) * (1 + 1 / R)
        Lw[0] = _cholesky(block_diag(*[np.cov(M[:, k], rowvar=False) * scale for k in range(K)]))
        obs = obs_raw - bias.ravel()
        cache.clear()
        res = solve(x)
        _, Jr = evaluate(res.x)
        with np.errstate(divide="ignore", invalid="ignore"):      # a null direction: shift nan, next round
            shift = float(np.max(np.abs(res.x - x) / np.sqrt(np.diag(np.linalg.pinv(Jr.T @ Jr)))))
        x = res.x
    ev = evaluate(res.x)
    if ev is None:      # cannot be reached by an accepted step from a reachable start; stated, not a TypeError
        raise ConvergenceError("fit", f"the optimiser ended where the moment ODE does not reach t = {times[-1]}: "
                               "no estimate")
    r, J = ev
    U, s, Vt = np.linalg.svd(J, full_matrices=True)
    s_full = np.zeros(theta0.size)
    s_full[:s.size] = s
    null = s_full <= NULL_REL * max(s_full[0], np.finfo(float).tiny)
    rank = int((~null).sum())
    Vn = Vt[null]
    identifiable = np.linalg.norm(Vn, axis=0) <= 1e-6 if Vn.size else np.ones(theta0.size, bool)
    s2 = 1.0
    if not (how.startswith("given") or replicates):
        if m <= rank:
            raise InputError("observations", f"{m} observations cannot estimate the noise of {rank} identifiable "
                             "combinations; give noise=")
        s2 = float(r @ r) / (m - rank)
    Vr = Vt[~null]
    cov = s2 * (Vr.T / s_full[~null] ** 2) @ Vr
    se = np.where(identifiable, np.sqrt(np.clip(np.diag(cov), 0, None)), np.nan)
    est = np.where(identifiable, res.x, np.nan)
    z = float(norm.ppf(0.5 + level / 2))
    ess = warning = None
    if clouds is not None and ode.structure is not None:
        ess = softmax_ess(clouds, _weights_at(ode, at(res.x)[0]))
        low = [f"{t:g}" for t, e in zip(times, ess if ess is not None else ()) if e < MEAN_FIELD_ESS]
        if low:
            warning = (f"softmax weights concentrated at the fit: ESS {np.min(ess):.1%} of n (< {MEAN_FIELD_ESS:.0%})"
                       f" at t = {', '.join(low)}: far from the mean-field moment ODE there; intervals of A and V "
                       "fitted together measured NOT calibrated in this regime (README, Fitting)")
    dof, chi2 = m - rank, float(r @ r)
    if (q999 := misfit(chi2, dof)) is not None:
        text = (f"the stated noise does not explain the residuals: |L⁻¹r|² = {chi2:.3g} (s² = {chi2 / dof:.3g}) "
                f"is above the {MISFIT_QUANTILE} quantile {q999:.3g} of chi-square with {dof} degrees of freedom "
                "(a misfit, a local minimum, or noise the model does not state); the intervals are not calibrated")
        warning = text if warning is None else f"{warning}; {text}"
    return FitResult(tuple(names), est, se, est - z * se, est + z * se, level, identifiable, rank, s_full, Vn,
                     float(0.5 * r @ r), m, how, s2, bool(res.status > 0), str(res.message), res.x,
                     replicates, bias, ess, warning)


def _weights_at(ode, p):
    """The weights of ``ode`` with the flat parameter vector ``p`` (heads given by ``A``/``V``-type blocks and an
    FFN; a structured head's ``Q``, ``K``, ``WO`` blocks are filled the same way)."""
    from ..weights import make_head, make_weights

    w = ode.weights(0.0)
    heads = [dict(h.params) for h in w.heads]
    ffn = None if w.ffn is None else {"W": w.ffn.W, "c": w.ffn.c}
    for blk in ode.compiled.param_layout:
        val = p[blk.offset:blk.offset + blk.size].reshape(blk.shape)
        val = float(val) if val.ndim == 0 else val
        if blk.key[0] == "heads":
            heads[blk.key[1]][blk.key[2]] = val
        elif blk.key[0] == "ffn":
            ffn[blk.key[1]] = val
        else:
            raise InputError("replicates", f"cannot rebuild weights for the parameter block {blk.key}")
    return make_weights([make_head(h.kind, w.d, **prm) for h, prm in zip(w.heads, heads)], ffn=ffn, sink=w.sink)


def replicate_moments(weights, alpha0, Sigma0, times, ns, R: int, rng) -> np.ndarray:
    """``(R, K, q)``: the stacked moments ``(x̄, upper(Σ̂))`` at ``times`` of ``R`` particle runs with constant
    ``weights`` from ``n_k`` draws of ``N(alpha0, Sigma0)`` (error-controlled :func:`simulate`).  Times with one
    token count share one run per replicate (followed through time): only the per-time marginals are used."""
    from ..numerics.particles.simulate import simulate

    d = len(alpha0)
    M = np.empty((R, len(times), layout.state_size(d)))
    for r in range(R):
        for n in np.unique(ns):
            X, t = rng.multivariate_normal(alpha0, Sigma0, size=int(n)), 0.0
            for k in np.flatnonzero(ns == n):
                if times[k] > t:
                    X, t = simulate(X, weights, float(times[k] - t), progress=False).X, float(times[k])
                M[r, k] = layout.pack(X.mean(0), np.cov(X, rowvar=False).reshape(d, d))
    return M


def softmax_ess(clouds, weights, block: int = 512):
    """Per cloud: the median over its tokens ``x_i`` of the effective sample size ``(Σ_j w_ij)²/Σ_j w_ij²`` of
    the softmax weights ``w_ij ∝ e^{<A x_i, x_j>}`` over the cloud, as a fraction of ``n`` (the smallest over
    softmax heads); ``None`` without a softmax head.  ``1``: every token weighs alike (mean-field regime);
    ``1/n``: each query sees one token."""
    As = [h.effective["A"] for h in weights.heads if h.kind == "softmax"]
    if not As:
        return None
    out = []
    for X in clouds:
        X = np.asarray(X, float)
        frac = 1.0
        for A in As:
            ess = []
            for i in range(0, len(X), block):
                Lg = X[i:i + block] @ A.T @ X.T
                W = np.exp(Lg - Lg.max(1, keepdims=True))
                ess.append(W.sum(1) ** 2 / (W ** 2).sum(1))
            frac = min(frac, float(np.median(np.concatenate(ess))) / len(X))
        out.append(frac)
    return np.array(out)


def _cholesky(C):
    try:
        return np.linalg.cholesky(C)
    except np.linalg.LinAlgError:
        raise InputError("noise", "the observation covariance is not positive definite (too few tokens for "
                         "the number of moments?)") from None
