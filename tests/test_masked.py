"""Masked attention experiments (symbolic_tpde.experiments.masked).

Independent route: for A = 0 the causal field is linear in the tokens, ``dX/dt = M X Vᵀ`` with ``M`` the
(lower-triangular) prefix-averaging matrix, with or without sink, so the exact sensitivity to a perturbation
of token 0 is a column of ``exp(T M ⊗ V)`` (scipy.linalg.expm).
"""

import numpy as np
import pytest
from scipy.linalg import expm

from symbolic_tpde.experiments import masked as M
from symbolic_tpde.analysis import meanfield as MF

A0 = np.array([[1.0, 0.5], [-0.5, 0.6]]) / np.linalg.norm([[1.0, 0.5], [-0.5, 0.6]], 2)


def prefix_matrix(n, m0=None):
    """Token i's weights on tokens j ≤ i for a flat kernel (A = 0); the sink sits at x = 0 (no value)."""
    Mx = np.zeros((n, n))
    for i in range(n):
        if m0 is None:
            Mx[i, : i + 1] = 1.0 / (i + 1)
        else:
            Mx[i, : i + 1] = ((1 - m0) / n) / (m0 + (1 - m0) * (i + 1) / n)
    return Mx


@pytest.mark.parametrize("m0", [None, 0.25])
def test_sensitivity_exact_for_linear_case(m0):
    n, d, T = 12, 2, 0.7
    V = np.array([[0.9, 0.3], [-0.2, 1.1]])
    rng = np.random.default_rng(0)
    X0 = rng.standard_normal((n, d))
    sens = M.token_sensitivity(np.zeros((d, d)), V, X0, T, 20, np.random.default_rng(1), sink_mass=m0)
    u = np.random.default_rng(1).standard_normal(d)
    u /= np.linalg.norm(u)
    # vec(X) row-major: d vec(X)/dt = (M ⊗ V) vec(X)
    E = expm(T * np.kron(prefix_matrix(n, m0), V))
    e0 = np.zeros(n * d)
    e0[:d] = u
    expect = np.linalg.norm((E @ e0).reshape(n, d), axis=1)
    # the system is linear: finite differences are exact up to round-off/δ ≈ 1e-10; RK4 h⁴ ≈ 1e-7 relative
    assert np.allclose(sens.sensitivity, expect, rtol=1e-6, atol=1e-9)


def test_predicted_weights_are_a_partition_of_unity():
    n = 50
    for m0 in (0.1, 0.6):
        w = M.predicted_weight(n, m0)
        i = np.arange(n)
        sink = m0 / (m0 + (1 - m0) * (i + 1) / n)
        assert np.allclose(sink + (i + 1) * w, 1.0, rtol=1e-14)
    assert np.allclose(M.predicted_weight(n) * np.arange(1, n + 1), 1.0)


def test_sink_controls_early_sensitivity():
    """With A ≠ 0 on data in the unit ball: without sink token 1 reacts to token 0 with weight ~1/2, with a
    sink of mass 0.2 with weight ~(1-m₀)/(n m₀) ≈ 0.03 (n = 128); kernel factors are within e^{±2‖A‖R²}."""
    n = 128
    rng = np.random.default_rng(2)
    X0 = MF.uniform_ball(n, 2, 1.0, rng)
    free = M.token_sensitivity(A0, np.eye(2), X0, 1.0, 10, np.random.default_rng(3))
    sink = M.token_sensitivity(A0, np.eye(2), X0, 1.0, 10, np.random.default_rng(3), sink_mass=0.2)
    assert sink.early_max() < 0.25 * free.early_max()
    # the sink bound 1/m₀ on the response per unit W₁^c, up to the kernel factor e^{2‖A‖R²} e^{‖V‖T}
    assert sink.lipschitz_wc[1:].max() <= np.exp(2 * 1.0 * 1.0 ** 2) * np.e / 0.2
    # without sink the early response per unit W₁^c is of order n (the 1/s blow-up at s = 1/n)
    assert free.lipschitz_wc[1] > 0.25 * n


def test_gaussian_not_preserved_with_sink_but_control_is():
    rng = np.random.default_rng(4)
    g = M.gaussian_witness(0.3 * A0, np.eye(2), 1500, 1.0, 10, rng, sink_mass=0.5, sink_x=[3.0, 0.0])
    # Mardia skewness: n b1/6 ~ χ²_4 under the Gaussian null; p < 1e-6 is ~5 standard deviations
    assert g.initial.skew_p > M.P_WITNESS and g.control.skew_p > M.P_WITNESS
    assert g.masked.skew_p < M.P_WITNESS
    assert g.witnessed


def test_bad_perturbation_kind():
    from symbolic_tpde.errors import InputError

    with pytest.raises(InputError, match="perturbed"):
        M.token_sensitivity(A0, np.eye(2), np.zeros((3, 2)), 1.0, 2, np.random.default_rng(0), perturbed="all")
