"""Empirical moments of a particle cloud and a Gaussianity witness (skewness / excess kurtosis of projections).

Conventions.  A cloud ``X (n, d)`` is the empirical measure ``μ_n = (1/n) Σ δ_{x_i}``:

* :func:`mean` ``= (1/n) Σ x_i``;
* :func:`covariance` ``= (1/n) Σ (x_i - x̄)(x_i - x̄)ᵀ`` by default (``ddof=0``: the covariance *of* ``μ_n``, the
  quantity the Gaussian moment ODE tracks); ``ddof=1`` gives the unbiased ``1/(n-1)`` estimator;
* :func:`moment_standard_errors`: distribution-free Monte-Carlo standard errors of the mean and of the
  covariance entries, ``sd(x_k)/√n`` and ``sd((x_k - x̄_k)(x_l - x̄_l))/√n`` (delta method, first order in
  ``n^{-1/2}``);
* :func:`projection_moments` / :func:`gaussianity_witness`: for unit directions ``u``, the projections
  ``z = X u`` have sample skewness ``g1 = m3 / m2^{3/2}`` and excess kurtosis ``g2 = m4 / m2² - 3``
  (``m_k = (1/n) Σ (z_i - z̄)^k``).  Under normality their exact standard deviations are
  ``SE(g1) = sqrt(6(n-2) / ((n+1)(n+3)))`` and ``SE(g2) = sqrt(24 n (n-2)(n-3) / ((n+1)²(n+3)(n+5)))``
  (Fisher 1930; D'Agostino & Pearson 1973), i.e. ``sqrt(6/n)`` and ``sqrt(24/n)`` for large ``n``, and
  ``E[g2] = -6/(n+1)``.  The witness reports the z-scores ``g1/SE``, ``(g2 - E g2)/SE``; values far beyond a few
  units (with a Bonferroni allowance for the number of directions) show that the cloud is not Gaussian,
  e.g. under sigmoid attention (README Mathematics §3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import InputError
from ..particles.attend import as_points


def mean(X) -> np.ndarray:
    """Empirical mean ``(1/n) Σ x_i`` (float64 accumulation).

    >>> mean([[0.0, 1.0], [2.0, 3.0]]).tolist()
    [1.0, 2.0]
    """
    X = as_points(X)
    return X.mean(axis=0, dtype=np.float64)


def covariance(X, ddof: int = 0) -> np.ndarray:
    """Empirical covariance ``(1/(n - ddof)) Σ (x_i - x̄)(x_i - x̄)ᵀ``; ``ddof=0`` (default) is the covariance of μ_n.

    >>> covariance([[0.0], [2.0]]).tolist(), covariance([[0.0], [2.0]], ddof=1).tolist()
    ([[1.0]], [[2.0]])
    """
    X = as_points(X)
    n = X.shape[0]
    if ddof not in (0, 1):
        raise InputError("ddof", f"must be 0 (1/n) or 1 (1/(n-1)), got {ddof!r}")
    if n - ddof < 1:
        raise InputError("X", f"need at least {ddof + 1} points for ddof = {ddof}")
    C = X.astype(np.float64) - X.mean(axis=0, dtype=np.float64)
    S = C.T @ C / (n - ddof)
    return (S + S.T) / 2


def moments(X, ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(mean(X), covariance(X, ddof))``."""
    return mean(X), covariance(X, ddof)


def moment_standard_errors(X) -> tuple[np.ndarray, np.ndarray]:
    """Monte-Carlo standard errors ``(se_mean (d,), se_cov (d, d))`` of :func:`mean` and :func:`covariance`.

    ``se_mean_k = sd(x_k)/√n`` and ``se_cov_kl = sd((x_k - x̄_k)(x_l - x̄_l))/√n``: the ``n^{-1/2}`` fluctuation of
    the estimates around their limits, estimated from the sample itself (no normality assumed).
    """
    X = as_points(X).astype(np.float64)
    n = X.shape[0]
    if n < 2:
        raise InputError("X", "need at least 2 points for standard errors")
    C = X - X.mean(axis=0)
    se_mean = C.std(axis=0, ddof=1) / math.sqrt(n)
    prods = C[:, :, None] * C[:, None, :]
    se_cov = prods.std(axis=0, ddof=1) / math.sqrt(n)
    return se_mean, se_cov


def skewness_se(n: int) -> float:
    """Exact sd of the sample skewness ``g1`` of ``n`` iid normal values: ``sqrt(6(n-2)/((n+1)(n+3)))``."""
    return math.sqrt(6.0 * (n - 2) / ((n + 1) * (n + 3)))


def kurtosis_se(n: int) -> float:
    """Exact sd of the sample excess kurtosis ``g2`` under normality: ``sqrt(24n(n-2)(n-3)/((n+1)²(n+3)(n+5)))``."""
    return math.sqrt(24.0 * n * (n - 2) * (n - 3) / ((n + 1) ** 2 * (n + 3) * (n + 5)))


@dataclass(frozen=True)
class ProjectionMoments:
    """Skewness and excess kurtosis of projections ``z = X u`` along the rows of ``directions``."""

    directions: np.ndarray  # (k, d) unit vectors
    skewness: np.ndarray  # g1 per direction
    excess_kurtosis: np.ndarray  # g2 per direction
    se_skewness: float  # sd of g1 under normality
    se_kurtosis: float  # sd of g2 under normality
    kurtosis_bias: float  # E[g2] = -6/(n+1) under normality
    n: int

    @property
    def z_skewness(self) -> np.ndarray:
        return self.skewness / self.se_skewness

    @property
    def z_kurtosis(self) -> np.ndarray:
        return (self.excess_kurtosis - self.kurtosis_bias) / self.se_kurtosis

    @property
    def max_abs_z(self) -> float:
        return float(max(np.max(np.abs(self.z_skewness)), np.max(np.abs(self.z_kurtosis))))

    def gaussian_threshold(self, level: float = 1e-3) -> float:
        """Two-sided normal quantile at ``level / (2k)`` (Bonferroni over ``2k`` statistics).

        ``max_abs_z`` above it rejects Gaussianity at (about) the given level; the statistics are
        asymptotically normal, so the level is approximate for small ``n``.
        """
        from scipy.stats import norm

        k = 2 * len(self.directions)
        return float(norm.isf(level / (2 * k)))


def default_directions(X, rng: np.random.Generator | None = None, n_random: int = 0) -> np.ndarray:
    """Coordinate axes, principal axes of the sample covariance, and ``n_random`` random unit vectors."""
    X = as_points(X)
    d = X.shape[1]
    dirs = [np.eye(d)]
    if X.shape[0] > 1:
        dirs.append(np.linalg.eigh(covariance(X))[1].T)
    if n_random:
        if rng is None:
            raise InputError("rng", "random directions need a numpy.random.Generator")
        R = rng.standard_normal((n_random, d))
        dirs.append(R / np.linalg.norm(R, axis=1, keepdims=True))
    return np.vstack(dirs)


def projection_moments(X, directions=None) -> ProjectionMoments:
    """Sample skewness ``g1`` and excess kurtosis ``g2`` of ``X u`` for each unit direction (module docstring).

    ``directions``: ``(k, d)`` array (normalised here); default :func:`default_directions` (axes and principal
    axes).  Needs ``n >= 4``.  A direction along which the cloud is degenerate (variance 0) is an InputError.
    """
    X = as_points(X).astype(np.float64)
    n, d = X.shape
    if n < 4:
        raise InputError("X", f"need at least 4 points for skewness and kurtosis, got {n}")
    U = default_directions(X) if directions is None else np.atleast_2d(np.asarray(directions, dtype=float))
    if U.shape[1] != d or not np.isfinite(U).all():
        raise InputError("directions", f"expected finite vectors of dimension {d}, got shape {U.shape}")
    norms = np.linalg.norm(U, axis=1)
    if np.any(norms == 0):
        raise InputError("directions", "contains a zero vector")
    U = U / norms[:, None]
    Z = (X - X.mean(axis=0)) @ U.T  # (n, k) centred projections
    m2 = np.mean(Z ** 2, axis=0)
    if np.any(m2 <= 0):
        raise InputError("X", "the cloud has zero variance along a requested direction")
    g1 = np.mean(Z ** 3, axis=0) / m2 ** 1.5
    g2 = np.mean(Z ** 4, axis=0) / m2 ** 2 - 3.0
    return ProjectionMoments(U, g1, g2, skewness_se(n), kurtosis_se(n), -6.0 / (n + 1), n)


def gaussianity_witness(X, directions=None, *, rng: np.random.Generator | None = None, n_random: int = 0,
                        level: float = 1e-3) -> dict:
    """Summary: ``max_abs_z``, the Bonferroni threshold at ``level``, ``gaussian_rejected``, and the details.

    >>> import numpy as np
    >>> out = gaussianity_witness(np.random.default_rng(0).normal(size=(2000, 2)))
    >>> bool(out["gaussian_rejected"]), bool(out["max_abs_z"] < out["threshold"])
    (False, True)
    """
    dirs = directions if directions is not None else default_directions(X, rng, n_random)
    pm = projection_moments(X, dirs)
    thr = pm.gaussian_threshold(level)
    return {"n": pm.n, "max_abs_z": pm.max_abs_z, "threshold": thr, "gaussian_rejected": pm.max_abs_z > thr,
            "skewness": pm.skewness.tolist(), "excess_kurtosis": pm.excess_kurtosis.tolist(),
            "se_skewness": pm.se_skewness, "se_kurtosis": pm.se_kurtosis, "moments": pm}
