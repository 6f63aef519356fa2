"""Sinkhorn on Gaussians: first-order condition derived, closed form checked symbolically and at 50 digits."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.symbolic import sinkhorn as sk
from symbolic_tpde.validate import checks_symbolic as cs


def test_condition_derived_from_block_inverse():
    out = sk.condition_matrix()
    assert out["collapsed"]                                   # Σ(-Π_xy)(schur) reduced to C by the code
    S, C, A = out["Sigma"], out["C"], out["A"]
    assert out["rhs"] == S * A.T * (S - C.T * S.I * C)


def test_condition_explicit_d2_matches_schur_form():
    rng = np.random.default_rng(1)
    G = sp.Matrix(2, 2, lambda i, j: cs._rat(rng))
    S = G * G.T / 4 + sp.eye(2)
    C = sp.Matrix(2, 2, lambda i, j: cs._rat(rng) / 8)
    A = sp.Matrix(2, 2, lambda i, j: cs._rat(rng))
    res = sk.condition_explicit(S, C, A)                      # Π_xy + Aᵀ from the explicit joint inverse
    schur = S - C.T * S.inv() * C
    # Π_xy = -Σ⁻¹C schur⁻¹  (block inverse, exact): residual must equal Aᵀ - Σ⁻¹C schur⁻¹
    assert sp.simplify(res - (A.T - S.inv() * C * schur.inv())) == sp.zeros(2, 2)


def test_closed_form_symbolic_d1():
    assert sk.check_closed_form_d1() == 0


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("form", ["inverse_free", "a_inverse", "symmetric"])
def test_closed_form_solves_condition_50_digits(d, form):
    res, lam = cs.sinkhorn_condition_residual(d, np.random.default_rng(10 + d), form=form)
    assert res < 1e-45 and lam > 0    # 50 digits, 5 digits margin for conditioning


@pytest.mark.parametrize("eps", [0.3, 2.5])
def test_epsilon_scaling(eps):
    res, lam = cs.sinkhorn_condition_residual(2, np.random.default_rng(4), epsilon=eps)
    assert res < 1e-44 and lam > 0


def test_inverse_free_form_handles_singular_A():
    with mp.workdps(50):
        S = mp.matrix([[2, 0.5, 0], [0.5, 1, 0.2], [0, 0.2, 0.7]])
        u = mp.matrix([1, -2, 0.5])
        A = u * mp.matrix([[0.3, 1, -1]])                     # rank one: A⁻¹ does not exist
        Ct = sk.mp_cross_covariance(S, A, "inverse_free")
        r1, r2, lam = sk.mp_condition_residuals(S, A, Ct)
        assert max(r1, r2) < mp.mpf(10) ** -45 and lam > 0
        assert sk.mp_cross_covariance(S, 0 * A, "inverse_free") == mp.zeros(3, 3)  # A = 0: independent plan


def test_sqrtm_2x2_closed_form():
    X = sp.Matrix([[sp.Rational(7, 2), sp.Rational(1, 3)], [sp.Rational(2, 5), sp.Rational(9, 4)]])
    R = sk.sqrtm_explicit(X)
    assert sp.N(sp.Matrix(R * R - X).norm(), 50) < 1e-45
    ev = [complex(v) for v in sp.Matrix(R).evalf(30).eigenvals()]
    assert all(v.real > 0 for v in ev)                        # principal root


def test_entrywise_d2_vs_mpmath_sqrtm():
    assert cs.sinkhorn_entrywise_vs_mp(np.random.default_rng(8)) < 1e-40


def test_d3_entrywise_refused():
    with pytest.raises(sk.MatrixSqrtRequired):
        sk.cross_covariance_explicit(sp.eye(3), sp.eye(3))
