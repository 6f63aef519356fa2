"""Derivation engine: closed forms of README Mathematics §3 reproduced, two derivations agree, quadrature agrees."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.weights import make_head, make_weights
from symbolic_tpde.symbolic.kernels import (NotQuadraticError, kernel_from_log, l2_kernel_matrix,
                                            l2_log_kernel_explicit)
from symbolic_tpde.symbolic.moments import (derive_for_weights, derive_gaussian_system, param_vector)
from symbolic_tpde.symbolic.sinkhorn import MatrixSqrtRequired
from symbolic_tpde.symbolic.witness import NotGaussianPreserving
from symbolic_tpde.validate import checks_symbolic as cs


@pytest.mark.parametrize("d,m", [(1, 1), (2, 3), (3, 2)])
def test_l2_blocks_read_off_definition_match_matrix_form(d, m):
    rng = np.random.default_rng(d)
    Q = sp.Matrix(m, d, lambda i, j: cs._rat(rng))
    K = sp.Matrix(m, d, lambda i, j: cs._rat(rng))
    tau = sp.Rational(5, 3)
    x = sp.Matrix([sp.Symbol(f"x{i}") for i in range(d)])
    y = sp.Matrix([sp.Symbol(f"y{i}") for i in range(d)])
    read = kernel_from_log(l2_log_kernel_explicit(Q, K, tau, x, y), list(x), list(y))  # checks exactness
    mat = l2_kernel_matrix(Q, K, tau)
    assert read.B == mat.B and read.P == mat.P and read.R == mat.R
    assert read.p == sp.zeros(d, 1) and read.r == sp.zeros(d, 1)


def test_non_quadratic_log_kernel_is_refused():
    x, y = sp.symbols("x y")
    with pytest.raises(NotQuadraticError):
        kernel_from_log(x * y ** 2, [x], [y])


@pytest.mark.parametrize("kinds,ffn", [(("softmax",), False), (("softmax",), True), (("softmax", "softmax"), False),
                                       (("l2",), False), (("custom",), False), (("linear",), False),
                                       (("sinkhorn",), False)])
def test_matrix_form_reproduces_closed_forms(kinds, ffn):
    assert cs.matrix_form_residual(kinds, ffn) == 0


def test_matrix_form_residual_detects_a_wrong_claim():
    # the comparison can fail: a claim with the transpose on the wrong factor is not reduced to zero
    import symbolic_tpde.symbolic.moments as mo

    mf = mo.matrix_form(("softmax",))
    A, V = mf.heads[0]["symbols"]["A"], mf.heads[0]["symbols"]["V"]
    wrong = V * (mf.alpha + mf.Sigma * A.T * mf.alpha)
    diff = mo.mexpand(mo.symmetric_subs_all(mf.alpha_dot - wrong, mf.Sigma))
    assert diff != sp.ZeroMatrix(*diff.shape)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("heads,ffn", [
    (lambda d: (("softmax", d),), False),
    (lambda d: (("l2", max(1, d - 1)),), False),
    (lambda d: (("l2", d + 1),), True),
    (lambda d: (("custom", d),), False),
    (lambda d: (("linear", d),), False),
    (lambda d: (("softmax", d), ("softmax", d)), True),
    (lambda d: (("softmax", d), ("l2", d), ("linear", d), ("custom", d)), True),
])
def test_entrywise_equals_closed_forms_exactly(d, heads, ffn):
    rng = np.random.default_rng(100 + d)
    assert cs.entrywise_vs_claim((d, heads(d), ffn, False), rng, n_points=1) == 0


@pytest.mark.parametrize("d", [1, 2, pytest.param(3, marks=pytest.mark.slow)])  # d = 3 also in `tpde verify`
@pytest.mark.parametrize("kind", ["softmax", "custom", "l2", "linear"])
def test_matrix_derivation_equals_entrywise_derivation(d, kind):
    assert cs.matrix_vs_entrywise((d, ((kind, d),), d == 2, False), np.random.default_rng(7 * d)) == 0


def test_custom_nonsymmetric_R_acts_through_its_symmetric_part():
    d = 2
    system = derive_gaussian_system((d, (("custom", d),), False, False))
    rng = np.random.default_rng(3)
    vals, arrays = cs.random_point(system, rng)
    R = arrays[("heads", 0, "R")]
    N = sp.Matrix([[0, sp.Rational(1, 3)], [-sp.Rational(1, 3), 0]])  # antisymmetric perturbation
    blk = next(b for b in system.param_layout if b.key == ("heads", 0, "R"))
    vals2 = dict(vals)
    for k, v in enumerate(R + N):
        vals2[system.params[blk.offset + k]] = v
    assert cs.dag_eval(system.rhs, vals) == cs.dag_eval(system.rhs, vals2)
    assert ("heads", 0, "P") in system.origin["unused_params"]   # P and p drop out after normalisation
    assert ("heads", 0, "p") in system.origin["unused_params"]


@pytest.mark.parametrize("kind", ["custom", "l2"])
def test_tilt_mean_vs_quadrature(kind):
    assert cs.tilt_vs_quadrature(kind) < 1e-25  # 30-digit quadrature


def test_linear_field_vs_quadrature():
    assert cs.linear_vs_quadrature() < 1e-25


@pytest.mark.parametrize("kind", ["l2", "custom"])
def test_ldl_adjugate_lu_solves_agree(kind):
    systems = [derive_gaussian_system((2, ((kind, 2),), False, False), method=m) for m in ("ldl", "adjugate", "lu")]
    vals, _ = cs.random_point(systems[0], np.random.default_rng(5))
    ref = cs.dag_eval(systems[0].rhs, vals)
    for s in systems[1:]:
        assert [sp.nsimplify(a - b) for a, b in zip(ref, cs.dag_eval(s.rhs, vals))] == [0] * 5


def test_layout_and_weights_numeric():
    """With real Weights objects: param_layout fills p correctly (float64 round-off vs numpy formulas)."""
    rng = np.random.default_rng(11)
    d, m = 3, 2
    A, V, V2, W = (rng.normal(size=(d, d)) for _ in range(4))
    Q, K = rng.normal(size=(m, d)), rng.normal(size=(m, d))
    c = rng.normal(size=d)
    w = make_weights([make_head("softmax", A=A, V=V), make_head("l2", Q=Q, K=K, V=V2, tau=1.7)],
                     ffn={"W": W, "c": c})
    system = derive_for_weights(w)
    assert system is derive_gaussian_system(w.structure())  # cached, immutable
    assert [s.name for s in system.states[:4]] == ["alpha_0", "alpha_1", "alpha_2", "Sigma_0_0"]
    p = param_vector(system, w)
    f = cs.float_rhs(system)
    G = rng.normal(size=(d, d))
    Sigma = G @ G.T + np.eye(d)
    alpha = rng.normal(size=d)
    y = list(alpha) + [Sigma[i, j] for i in range(d) for j in range(i, d)]
    got = np.array(f(y, p), dtype=float)
    Si = np.linalg.inv(Sigma)
    S2 = np.linalg.inv(Si + 2 / 1.7 * K.T @ K)
    J = V @ Sigma @ A + V2 @ S2 @ ((2 / 1.7) * K.T @ Q) + W
    b = V @ alpha + V2 @ S2 @ Si @ alpha + c
    Sd = J @ Sigma + Sigma @ J.T
    want = np.concatenate([b + J @ alpha, [Sd[i, j] for i in range(d) for j in range(i, d)]])
    assert np.max(np.abs(got - want)) < 1e-10 * max(1, np.max(np.abs(want)))  # float64 round-off


def test_time_symbol_allows_time_dependent_parameters():
    system = derive_gaussian_system((1, (("softmax", 1),), False, False))
    t = system.time
    assert t.name == "t" and all(not e.has(t) for e in system.rhs)  # autonomous for constant weights
    a = next(p for p in system.params if p.name == "h0_A_0_0")
    layered = [e.subs(a, sp.sin(t)) for e in system.rhs]
    assert all(e.has(t) for e in layered)


# softmax_unnormalized's certificate takes ~30 s (87 s under load): slow; its field is also checked against the
# Gaussian integral in test_symbolic_witness.py
@pytest.mark.parametrize("kind", ["sigmoid", pytest.param("softmax_unnormalized", marks=pytest.mark.slow), "masked"])
def test_non_preserving_heads_raise_with_witness(kind):
    with pytest.raises(NotGaussianPreserving) as info:
        derive_gaussian_system((2, (("softmax", 2), (kind, 2)), False, kind == "masked"))
    assert info.value.witness.certified and info.value.witness.value != 0
    assert isinstance(info.value, ValueError)


def test_sinkhorn_entrywise_needs_matrix_sqrt_for_d3():
    with pytest.raises(NotImplementedError, match="square root"):
        derive_gaussian_system((3, (("sinkhorn", 3),), False, False))
    with pytest.raises(MatrixSqrtRequired):
        derive_gaussian_system((3, (("softmax", 3), ("sinkhorn", 3)), False, False))


def test_bad_structure():
    with pytest.raises(ValueError):
        derive_gaussian_system((2, (("softmax", 2),), False, False), d=3)
    with pytest.raises(ValueError):
        derive_gaussian_system((2, (("nonsense", 2),), False, False))


def test_rhs_uses_only_states_params():
    for st in [(2, (("l2", 3), ("sinkhorn", 2)), True, False), (3, (("custom", 3), ("linear", 3)), False, False)]:
        system = derive_gaussian_system(st)
        from symbolic_tpde.symbolic.moments import dag_symbols
        assert dag_symbols(system.rhs) <= set(system.states) | set(system.params)
        assert all(not isinstance(s, sp.Dummy) for s in dag_symbols(system.rhs))


def test_sinkhorn_in_multihead_numeric_vs_scipy_sqrtm():
    """softmax + Sinkhorn (ε = 0.6) + FFN at d = 2, float64, against numpy/scipy with the paper's A⁻¹ form."""
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(21)
    d = 2
    A1, V1, A2, V2, W = (rng.normal(size=(d, d)) for _ in range(5))
    c = rng.normal(size=d)
    w = make_weights([make_head("softmax", A=A1, V=V1), make_head("sinkhorn", A=A2, V=V2, epsilon=0.6)],
                     ffn={"W": W, "c": c})
    system = derive_for_weights(w)
    f = cs.float_rhs(system)
    G = rng.normal(size=(d, d))
    Sigma, alpha = G @ G.T + 0.5 * np.eye(d), rng.normal(size=d)
    got = np.array(f(list(alpha) + [Sigma[0, 0], Sigma[0, 1], Sigma[1, 1]], param_vector(system, w)), float)
    Ae = A2 / 0.6
    r = np.real(sqrtm(Sigma))
    Ct = 0.5 * np.linalg.inv(Ae.T) @ (np.linalg.inv(r) @ np.real(sqrtm(np.eye(d) + 4 * r @ Ae.T @ Sigma @ Ae @ r))
                                      @ r - np.eye(d))
    J1 = V1 @ Sigma @ A1 + W
    ad = V1 @ alpha + J1 @ alpha + c + V2 @ alpha
    Sd = J1 @ Sigma + Sigma @ J1.T + V2 @ Ct + Ct.T @ V2.T
    want = np.concatenate([ad, [Sd[0, 0], Sd[0, 1], Sd[1, 1]]])
    assert np.max(np.abs(got - want)) < 1e-9 * max(1, np.max(np.abs(want)))  # float64 round-off (sqrtm ~1e-13)


@pytest.mark.parametrize("kind", ["l2", "custom"])
def test_ldl_pivots_positive_when_tilt_exists(kind):
    """The LDLᵀ pivots of N = Σ - Σ(R+Rᵀ)Σ are the divisors in the generated expressions; under the existence
    assumption (here: ℓ2 always, custom with R ⪯ 0) they must all be > 0 (no spurious singularity)."""
    from symbolic_tpde.symbolic.moments import gaussian_symbols, head_kernel, head_param_symbols
    from symbolic_tpde.symbolic.tilt import solve_by_ldl, sym_vector, tilt_explicit

    d = 3
    alpha, Sigma = gaussian_symbols(d)
    prm = head_param_symbols(0, kind, d, d)
    x = sym_vector("_x", d)
    N = tilt_explicit(head_kernel(kind, prm, x, d), alpha, Sigma, x).precision
    _, pivots = solve_by_ldl(N, sp.zeros(d, 1))
    system = derive_gaussian_system((d, ((kind, d),), False, False))
    rng = np.random.default_rng(9)
    for _ in range(5):
        vals, _ = cs.random_point(system, rng)   # Σ SPD, τ > 0, custom R = -HHᵀ/8 (same Symbols as prm)
        assert all(p > 0 for p in cs.dag_eval(pivots, vals))


def test_existence_conditions_are_exposed():
    from symbolic_tpde.symbolic.moments import existence_conditions

    assert existence_conditions(derive_gaussian_system((2, (("softmax", 2), ("linear", 2)), True, False))) == ()
    system = derive_gaussian_system((2, (("custom", 2),), False, False))
    conds = existence_conditions(system)
    assert len(conds) == 2
    vals, _ = cs.random_point(system, np.random.default_rng(1))
    assert all(c > 0 for c in cs.dag_eval(conds, vals))            # R ⪯ 0: tilt exists
    R = [p for p in system.params if p.name.startswith("h0_R_")]
    big = {**vals, **{r: (5 if r.name in ("h0_R_0_0", "h0_R_1_1") else 0) for r in R}}
    assert any(c <= 0 for c in cs.dag_eval(conds, big))            # R ≫ 0: Σ⁻¹ - 2R not SPD, detected


def test_tilt_mean_vs_gauss_hermite_d2():
    # converged rule: float64 round-off; a coarse rule is visibly worse, so the comparison has teeth
    assert cs.tilt_vs_gauss_hermite(n_nodes=48) < 1e-10
    assert cs.tilt_vs_gauss_hermite(n_nodes=8) > 1e-10   # 8 nodes: 1.8e-8 on the row's data (10: 1.6e-11)
