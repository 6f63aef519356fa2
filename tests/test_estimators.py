"""Estimators: moments vs numpy/scipy, standard errors vs Monte-Carlo spread, Gaussianity witness."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from symbolic_tpde.errors import InputError
from symbolic_tpde.numerics.measures import estimators as E


def test_mean_cov_conventions():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((37, 3)) @ rng.standard_normal((3, 3)) + 2.0
    np.testing.assert_allclose(E.mean(X), X.mean(axis=0), rtol=1e-14)
    # 1/n: numpy's bias=True; 1/(n-1): numpy's default (float64 round-off tolerance)
    np.testing.assert_allclose(E.covariance(X), np.cov(X.T, bias=True), rtol=1e-12)
    np.testing.assert_allclose(E.covariance(X, ddof=1), np.cov(X.T), rtol=1e-12)
    with pytest.raises(InputError):
        E.covariance(X, ddof=2)
    with pytest.raises(InputError):
        E.mean(np.array([[np.nan, 1.0]]))


def test_projection_moments_match_scipy():
    rng = np.random.default_rng(2)
    X = rng.exponential(size=(200, 2))
    U = np.array([[1.0, 0.0], [1.0, 1.0]])
    pm = E.projection_moments(X, U)
    Z = X @ (U / np.linalg.norm(U, axis=1, keepdims=True)).T
    np.testing.assert_allclose(pm.skewness, stats.skew(Z, bias=True), rtol=1e-12)
    np.testing.assert_allclose(pm.excess_kurtosis, stats.kurtosis(Z, fisher=True, bias=True), rtol=1e-12)
    assert pm.se_skewness == pytest.approx(math.sqrt(6 / 200), rel=0.02)  # exact form -> sqrt(6/n)
    assert pm.se_kurtosis == pytest.approx(math.sqrt(24 / 200), rel=0.06)


def _sd_with_se(v):
    """Sample sd of v and its standard error by the delta method: se(s) = sqrt((m4 - s^4)/R) / (2 s)."""
    v = np.asarray(v)
    R = len(v)
    c = v - v.mean()
    s2 = np.mean(c ** 2)
    return math.sqrt(s2), math.sqrt((np.mean(c ** 4) - s2 ** 2) / R) / (2 * math.sqrt(s2))


def test_normal_theory_standard_errors_by_monte_carlo():
    """Over R = 2000 normal samples of size n = 40, the spreads of g1, g2 match the exact formulas.

    Tolerance: 4 Monte-Carlo standard errors of the sd estimate (delta method, estimated from the replicates).
    """
    rng = np.random.default_rng(3)
    n, R = 40, 2000
    samples = rng.standard_normal((R, n))
    g1 = stats.skew(samples, axis=1, bias=True)
    g2 = stats.kurtosis(samples, axis=1, bias=True)
    s1, e1 = _sd_with_se(g1)
    s2, e2 = _sd_with_se(g2)
    assert abs(s1 - E.skewness_se(n)) < 4 * e1
    assert abs(s2 - E.kurtosis_se(n)) < 4 * e2
    # mean of g2 is -6/(n+1): check within 4 standard errors of the replicate mean
    assert abs(g2.mean() + 6 / (n + 1)) < 4 * g2.std() / math.sqrt(R)


def test_moment_standard_errors_by_replication():
    """Spread of the mean / covariance estimates over 400 replicates vs the per-sample estimated se."""
    rng = np.random.default_rng(4)
    L = np.array([[1.0, 0.0], [0.6, 0.5]])
    n, R = 300, 400
    means, covs, se_m, se_c = [], [], [], []
    for _ in range(R):
        X = rng.standard_normal((n, 2)) @ L.T
        means.append(E.mean(X))
        covs.append(E.covariance(X))
        a, b = E.moment_standard_errors(X)
        se_m.append(a)
        se_c.append(b)
    sd_m = np.std(means, axis=0, ddof=1)
    sd_c = np.std(covs, axis=0, ddof=1)
    # the sd of R replicates has relative se ~ 1/sqrt(2R) = 3.5% (a bit more for 4th-moment quantities);
    # 15% is > 4 such se
    np.testing.assert_allclose(sd_m, np.mean(se_m, axis=0), rtol=0.15)
    np.testing.assert_allclose(sd_c, np.mean(se_c, axis=0), rtol=0.15)


def test_witness_accepts_gaussian_rejects_non_gaussian():
    rng = np.random.default_rng(5)
    G = rng.standard_normal((4000, 3)) @ rng.standard_normal((3, 3))
    w = E.gaussianity_witness(G, rng=rng, n_random=4)
    assert not w["gaussian_rejected"], w["max_abs_z"]
    # a mixture of two Gaussians: strongly bimodal along axis 0 (negative excess kurtosis)
    M = rng.standard_normal((4000, 3))
    M[:, 0] += np.where(rng.random(4000) < 0.5, -2.0, 2.0)
    w2 = E.gaussianity_witness(M)
    assert w2["gaussian_rejected"] and w2["max_abs_z"] > 2 * w2["threshold"]
    # exact excess kurtosis of ±2 + N(0,1): m4 = 16 + 6·4 + 3 = 43, var = 5 -> 43/25 - 3 = -1.28
    # (the normal-theory se is an upper bound for this light-tailed law: 5 se is a generous tolerance)
    assert abs(w2["excess_kurtosis"][0] + 1.28) < 5 * w2["se_kurtosis"]


def test_bad_directions():
    X = np.random.default_rng(6).standard_normal((10, 2))
    with pytest.raises(InputError):
        E.projection_moments(X, [[0.0, 0.0]])
    with pytest.raises(InputError):
        E.projection_moments(X, [[1.0, 0.0, 0.0]])
    with pytest.raises(InputError):
        E.projection_moments(X[:3])
