"""Mean-field limit, measured: n-particle systems against their limit (README Mathematics §6), plus shared statistics.

Claim (README Mathematics §6): for compactly supported (or Gaussian) initial data the particle system converges to the
Transformer PDE as ``n → ∞``; empirical moments of ``n`` particles started from ``N(α₀, Σ₀)`` approach the
Gaussian moment ODE at rate ``n^{-1/2}`` (central limit theorem + propagation of chaos; the ``O(1/n)`` bias
of the finite system is below the fluctuations for the ``n`` used here).

:func:`moment_convergence` measures it: for each ``n`` and each of several seeds it samples ``n`` tokens,
evolves them (``symbolic_tpde.numerics.particles.simulate.simulate``, RK4) and records the moment error at ``T``

* ``reference="gaussian"``: ``e = sqrt(|m_n - α(T)|² + ‖C_n - Σ(T)‖_F²)`` against the Gaussian ODE
  (``symbolic_tpde.gaussian.GaussianODE`` when it is installed, or a caller-supplied ``(α(T), Σ(T))``);
* ``reference="pair"``: the same norm between two independent ``n``-systems (no limit needed; valid for
  every variant, also non-Gaussian ones: ``E|m_n - m'_n|² = 2 E|m_n - m_∞|²`` up to ``O(1/n)``).

The rate is the OLS slope of ``log e`` on ``log n`` over all (n, seed) pairs, with a Student-t interval
(:func:`ols`), cross-checked by a seed-bootstrap of the RMS curve (:func:`bootstrap_slope`).

Shared statistics (used by :mod:`.stability` and :mod:`.masked` too):

* :func:`ols` — least squares ``y = a + b x`` with the classical standard errors and a Student-t
  confidence interval for the slope (iid residuals assumed; Weisberg, *Applied Linear Regression*, §2.4);
* :func:`bootstrap_slope` — percentile bootstrap interval of a log-log slope, resampling seeds within each
  ``n`` (no distributional assumption on the per-seed errors);
* :func:`uniform_ball`, :func:`gaussian_mixture` — compactly supported / multimodal initial data;
* :func:`mardia` — Mardia's multivariate skewness and kurtosis with their large-``n`` null distributions
  (Mardia 1970, Biometrika 57:519): under normality ``n b1/6 ~ χ²_{d(d+1)(d+2)/6}`` and
  ``(b2 - d(d+2)) / sqrt(8 d (d+2) / n) ~ N(0, 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy import stats

from ..errors import BlowupError, InputError
from ..weights import Schedule, Weights


@dataclass(frozen=True)
class LineFit:
    """``y ≈ intercept + slope·x``; ``ci`` is the two-sided ``level`` interval of the slope."""

    slope: float
    intercept: float
    slope_se: float
    ci: tuple[float, float]
    level: float
    n_points: int

    def contains(self, value: float) -> bool:
        return self.ci[0] <= value <= self.ci[1]

    def as_dict(self) -> dict:
        return {"slope": self.slope, "intercept": self.intercept, "slope_se": self.slope_se,
                "ci": list(self.ci), "level": self.level, "n_points": self.n_points}


def ols(x, y, level: float = 0.95) -> LineFit:
    """Least-squares line with slope SE ``s / sqrt(Σ(x - x̄)²)`` and a ``t_{n-2}`` interval."""
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape or len(x) < 3:
        raise InputError("x", "need at least 3 (x, y) pairs of equal length")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise InputError("y", "contains NaN or Inf")
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    if sxx == 0:
        raise InputError("x", "all x values are equal")
    slope = float(((x - xm) * (y - ym)).sum() / sxx)
    intercept = float(ym - slope * xm)
    resid = y - intercept - slope * x
    s2 = float((resid ** 2).sum() / (len(x) - 2))
    se = float(np.sqrt(s2 / sxx))
    q = float(stats.t.ppf(0.5 + level / 2, len(x) - 2))
    return LineFit(slope, intercept, se, (slope - q * se, slope + q * se), level, len(x))


def bootstrap_slope(ns, errors, rng: np.random.Generator, reps: int = 2000, level: float = 0.95):
    """Percentile bootstrap interval for the slope of ``log RMS(error) vs log n``.

    ``errors[k]`` holds the per-seed errors at ``ns[k]``; seeds are resampled with replacement within each
    ``n``, the RMS recomputed and the slope refitted.  Returns ``(slope_of_data, (lo, hi))``.
    """
    ln = np.log(np.asarray(ns, dtype=float))
    errs = [np.asarray(e, dtype=float) for e in errors]
    rms = np.array([np.sqrt((e ** 2).mean()) for e in errs])
    base = np.polyfit(ln, np.log(rms), 1)[0]
    slopes = np.empty(reps)
    for r in range(reps):
        boot = [np.sqrt((e[rng.integers(0, len(e), len(e))] ** 2).mean()) for e in errs]
        slopes[r] = np.polyfit(ln, np.log(boot), 1)[0]
    lo, hi = np.quantile(slopes, [0.5 - level / 2, 0.5 + level / 2])
    return float(base), (float(lo), float(hi))


def uniform_ball(n: int, d: int, radius: float, rng: np.random.Generator, center=None) -> np.ndarray:
    """``n`` points uniform in the ball ``B(center, radius)`` of ``R^d`` (direction × radius ``U^{1/d}``)."""
    if n < 1 or d < 1 or not radius > 0:
        raise InputError("radius", "need n >= 1, d >= 1 and radius > 0")
    g = rng.standard_normal((n, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    r = radius * rng.uniform(size=(n, 1)) ** (1.0 / d)
    out = g * r
    return out if center is None else out + np.asarray(center, dtype=float)


def gaussian_mixture(n: int, centers, scale: float, radius: float, rng: np.random.Generator) -> np.ndarray:
    """Mixture of isotropic Gaussians (equal weights) truncated to the ball ``B(0, radius)`` (rejection), so
    the data stay compactly supported as README Mathematics §6 requires."""
    centers = np.atleast_2d(np.asarray(centers, dtype=float))
    out = np.empty((0, centers.shape[1]))
    while len(out) < n:
        k = rng.integers(0, len(centers), 2 * n)
        pts = centers[k] + scale * rng.standard_normal((2 * n, centers.shape[1]))
        out = np.vstack([out, pts[np.linalg.norm(pts, axis=1) <= radius]])
    return out[:n]


@dataclass(frozen=True)
class Mardia:
    """Mardia statistics and their z-scores / p-values under the Gaussian null (large ``n``)."""

    skewness: float  # b1
    kurtosis: float  # b2
    skew_p: float
    kurt_z: float
    kurt_p: float
    n: int
    d: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def mardia(X) -> Mardia:
    """Mardia's ``b1 = (1/n²) Σ_ij (z_iᵀ S⁻¹ z_j)³`` and ``b2 = (1/n) Σ_i (z_iᵀ S⁻¹ z_i)²`` (S with 1/n).

    O(n² d) for ``b1`` (done in row blocks).  ``kurt_z`` is the standardised ``b2``: ``|z| ≫ 3`` is a
    Gaussian misfit beyond sampling error.
    """
    X = np.asarray(X, dtype=float)
    n, d = X.shape
    Z = X - X.mean(0)
    S = Z.T @ Z / n
    L = np.linalg.cholesky(S)
    W = np.linalg.solve(L, Z.T).T  # whitened: W Wᵀ = Z S⁻¹ Zᵀ
    b1 = 0.0
    for i0 in range(0, n, 512):
        G = W[i0:i0 + 512] @ W.T
        b1 += float((G ** 3).sum())
    b1 /= n * n
    b2 = float(((W * W).sum(1) ** 2).mean())
    dof = d * (d + 1) * (d + 2) / 6
    skew_p = float(stats.chi2.sf(n * b1 / 6, dof))
    kz = (b2 - d * (d + 2)) / np.sqrt(8 * d * (d + 2) / n)
    return Mardia(b1, b2, skew_p, float(kz), float(2 * stats.norm.sf(abs(kz))), n, d)


# ------------------------------------------------------------------------------------ running particles
def as_schedule(weights) -> Schedule:
    """Accept :class:`Weights` (constant in time) or a :class:`Schedule`."""
    if isinstance(weights, Schedule):
        return weights
    if isinstance(weights, Weights):
        return Schedule.constant(weights)
    raise InputError("weights", f"expected Weights or Schedule, got {type(weights).__name__}")


def evolve(X0: np.ndarray, weights, T: float, steps: int, save_every: int | None = None):
    """Evolve particles with fixed-step RK4 (``symbolic_tpde.numerics.particles.simulate.simulate``).

    Returns ``(times, states)``: ``states[k]`` the positions at ``times[k]`` (only ``t = T`` when
    ``save_every`` is None, else every ``save_every`` steps including ``t = 0`` and ``t = T``).
    """
    from ..numerics.particles.simulate import simulate

    run = simulate(np.asarray(X0, dtype=float), as_schedule(weights), float(T), steps=int(steps),
                   method="rk4", save_every=save_every, progress=False)
    if save_every is None:
        return np.array([float(T)]), np.asarray(run.X)[None]
    return np.asarray(run.times, dtype=float), np.asarray(run.trajectory)


def moment_error(X: np.ndarray, mean, cov) -> float:
    """``sqrt(|m_X - mean|² + ‖C_X - cov‖_F²)``, ``C_X`` the unbiased (1/(n-1)) empirical covariance."""
    m = X.mean(0)
    C = np.cov(X, rowvar=False, ddof=1).reshape(len(m), len(m))
    return float(np.sqrt(((m - mean) ** 2).sum() + ((C - cov) ** 2).sum()))


def gaussian_reference(weights, alpha0, Sigma0, T: float):
    """``(α(T), Σ(T))`` from the project's Gaussian moment ODE (``symbolic_tpde.gaussian.GaussianODE``,
    derived symbolically and integrated at ``rtol = 1e-10``), or ``None`` when that module is missing.
    A blow-up before ``T`` raises :class:`BlowupError`."""
    try:
        from ..gaussian import GaussianODE
    except ImportError:
        return None
    sol = GaussianODE.from_schedule(as_schedule(weights)).integrate(np.asarray(alpha0, float),
                                                                     np.asarray(Sigma0, float), float(T))
    if sol.status != "ok":
        raise BlowupError(sol.blowup_time or 0.0, "Gaussian moment ODE", sol.message)
    return np.asarray(sol.alpha[-1]), np.asarray(sol.Sigma[-1])


@dataclass
class Convergence:
    """Result of :func:`moment_convergence`: per-``n`` per-seed errors and the fitted rate."""

    ns: list[int]
    errors: list[list[float]]
    fit: LineFit
    bootstrap_slope: float
    bootstrap_ci: tuple[float, float]
    reference: str
    T: float
    steps: int
    expected: float = -0.5
    extra: dict = field(default_factory=dict)

    @property
    def rms(self) -> np.ndarray:
        return np.array([np.sqrt(np.mean(np.square(e))) for e in self.errors])

    def as_dict(self) -> dict:
        return {"ns": self.ns, "errors": self.errors, "rms": self.rms.tolist(), "fit": self.fit.as_dict(),
                "bootstrap_slope": self.bootstrap_slope, "bootstrap_ci": list(self.bootstrap_ci),
                "reference": self.reference, "T": self.T, "steps": self.steps, "expected": self.expected,
                **self.extra}


def moment_convergence(weights, alpha0, Sigma0, T: float, ns: Sequence[int], seeds: int,
                       rng: np.random.Generator, *, steps: int = 20, reference: str = "gaussian",
                       limit: tuple | None = None, level: float = 0.95) -> Convergence:
    """Moment error of ``n`` particles at ``T`` as a function of ``n`` (see the module docstring).

    ``limit=(α(T), Σ(T))`` overrides the Gaussian ODE lookup.  ``steps`` RK4 steps: the time-discretisation
    error ``O(h⁴)`` must stay far below ``n_max^{-1/2}`` (20 steps on ``T = 1`` give ~1e-6 relative).
    """
    alpha0 = np.asarray(alpha0, float)
    Sigma0 = np.asarray(Sigma0, float)
    if reference not in ("gaussian", "pair"):
        raise InputError("reference", f"expected 'gaussian' or 'pair', got {reference!r}")
    if reference == "gaussian" and limit is None:
        limit = gaussian_reference(weights, alpha0, Sigma0, T)
        if limit is None:
            raise InputError("reference", "symbolic_tpde.gaussian is not available: pass limit= or use 'pair'")
    if len(ns) < 2 or seeds < 2:
        raise InputError("ns", "need at least two n values and two seeds")
    L = np.linalg.cholesky(Sigma0)
    errors: list[list[float]] = []
    for n in ns:
        row = []
        for _ in range(int(seeds)):
            X0 = alpha0 + rng.standard_normal((int(n), len(alpha0))) @ L.T
            XT = evolve(X0, weights, T, steps)[1][-1]
            if reference == "gaussian":
                row.append(moment_error(XT, limit[0], limit[1]))
            else:
                Y0 = alpha0 + rng.standard_normal((int(n), len(alpha0))) @ L.T
                YT = evolve(Y0, weights, T, steps)[1][-1]
                mY = YT.mean(0)
                CY = np.cov(YT, rowvar=False, ddof=1).reshape(len(mY), len(mY))
                row.append(moment_error(XT, mY, CY))
        errors.append(row)
    return fit_rate(ns, errors, rng, reference, T, steps, level)


def fit_rate(ns, errors, rng: np.random.Generator, reference: str, T: float, steps: int, level: float = 0.95,
             extra: dict | None = None) -> Convergence:
    """:class:`Convergence` from per-``n`` per-seed errors: the OLS slope of ``log e`` on ``log n`` over all
    ``(n, seed)`` pairs with its Student-t interval (:func:`ols`) and the seed-bootstrap interval
    (:func:`bootstrap_slope`, which draws from ``rng``)."""
    x = np.concatenate([[np.log(n)] * len(e) for n, e in zip(ns, errors)])
    y = np.log(np.concatenate(errors))
    fit = ols(x, y, level)
    bslope, bci = bootstrap_slope(ns, errors, rng, level=level)
    return Convergence(list(map(int, ns)), errors, fit, bslope, bci, reference, float(T), int(steps),
                       extra=dict(extra or {}))
