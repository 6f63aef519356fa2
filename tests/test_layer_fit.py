"""Per-layer effective attention from consecutive hidden states (variable projection in the principal subspace):
a planted head recovered from its own Euler step; d = 1024 runs with a projection; bad input refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from symbolic_tpde import InputError
from symbolic_tpde.analysis.layer_fit import fit_layer


def _field(X, A, V, c):
    S = X @ A.T @ X.T
    P = np.exp(S - S.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    return P @ X @ V.T + c


def test_planted_head_recovered_without_projection():
    """rank = d (the projection is a rotation): from a start within 0.05 of the planted A (in the principal
    coordinates) the fit finds A, V, c to the optimiser's accuracy (noise-free: residual ~0, the A-zero baseline
    far worse; the cost is not convex, so random starts may end in local minima: they are never better than the
    truth and the lowest is kept)."""
    rng = np.random.default_rng(0)
    n, d = 60, 4
    A = 0.3 * rng.normal(size=(d, d))
    V = rng.normal(size=(d, d)) / 2
    c = rng.normal(size=d) / 5
    X = rng.normal(size=(n, d))
    Y = X + _field(X, A, V, c)
    _, _, Wt = np.linalg.svd(X - X.mean(0))
    P = Wt.T
    f = fit_layer(X, Y, rank=d, ridge=0.0, max_nfev=400, A0=P.T @ A @ P + 0.05)
    assert f.converged and f.residual < 1e-8 and f.residual_linear > 0.05 and f.jac_rank == d * d
    np.testing.assert_allclose(np.abs(f.P.T @ P), np.eye(d), atol=1e-12)      # the same principal axes
    P = f.P
    np.testing.assert_allclose(P @ f.A @ P.T, A, atol=1e-5)
    np.testing.assert_allclose(P @ f.V @ P.T, V, atol=1e-5)
    np.testing.assert_allclose(P @ f.c, c, atol=1e-5)
    g = fit_layer(X, Y, rank=d, ridge=0.0, max_nfev=200, starts=2)
    assert f.residual <= g.residual < g.residual_linear


def test_real_size_with_projection_and_bad_input():
    rng = np.random.default_rng(1)
    n, d = 40, 1024
    X = rng.normal(size=(n, d))
    Y = X + 0.1 * rng.normal(size=(n, d))
    f = fit_layer(X, Y, rank=6, max_nfev=30)
    rep = f.report()
    assert rep["rank"] == 6 and f.A.shape == (6, 6) and np.isfinite(f.residual) and isinstance(rep["converged"], bool)
    assert f.residual <= 1.0 + 1e-12                    # V = 0, c = 0 is a candidate of the inner least squares
    with pytest.raises(InputError, match="rank"):
        fit_layer(X, Y, rank=50)
    with pytest.raises(InputError, match="exceeds 1024"):
        fit_layer(np.zeros((5, 1025)), np.zeros((5, 1025)))
