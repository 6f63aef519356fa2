"""The front door for a user's kernel: derive_kernel -> OdeSystem -> GaussianODE.from_system.

Independent routes: each derived right-hand side is compared with a closed form written here by hand from
the tilt formula (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §3): for
``log k = c(x) + yᵀRy + (Bᵀx + r)ᵀy`` on ``N(α, Σ)``, ``S = (Σ⁻¹ - R - Rᵀ)⁻¹``, ``b = V S(Σ⁻¹α + r)``,
``J = V S Bᵀ``, ``dα/dt = b + Jα``, ``dΣ/dt = JΣ + ΣJᵀ``.  The closed form uses numpy linear algebra on
O(1) well-conditioned matrices (condition numbers < 1e3), so the two agree to ~1e-14; 1e-10 leaves a margin
of four orders while catching any wrong sign, factor or transpose.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy as sp

import symbolic_tpde as st
from symbolic_tpde.registry.layout import pack

TOL = 1e-10   # see module docstring


def _vec(name, d):
    return sp.Matrix(sp.symbols(f"{name}0:{d}", real=True))


def _mat(name, d):
    return sp.Matrix(d, d, lambda i, j: sp.Symbol(f"{name}{i}{j}", real=True))


def _num(M, vals, t=None):
    f = sp.lambdify([sp.Symbol("t", real=True), *[sp.Symbol(k, real=True) for k in vals]], M, "numpy")
    return np.array(f(t if t is not None else 0.0, *vals.values()), dtype=float)


def _closed(B, R, r, V, a, S):
    Sinv = np.linalg.inv(S)
    Sh = np.linalg.inv(Sinv - R - R.T)
    b, J = V @ Sh @ (Sinv @ a + r), V @ Sh @ B.T
    return pack(b + J @ a, J @ S + S @ J.T)


@pytest.fixture
def gauss():
    rng = np.random.default_rng(7)
    G = rng.standard_normal((3, 3))
    return rng.standard_normal(3) * 0.7, G @ G.T / 3 + 0.5 * np.eye(3)


def test_user_kernel_with_temperature_penalty_linear_term_and_time(gauss):
    """What a user tries first: d = 3, softmax with temperature τ, key penalty λ|y|², a linear term in y
    with explicit time dependence, A(t) = A0 + t A1 and V all symbolic."""
    d = 3
    x, y, c = _vec("x", d), _vec("y", d), _vec("c", d)
    t = sp.Symbol("t", real=True)
    tau, lam = sp.Symbol("tau", positive=True), sp.Symbol("lam", positive=True)
    A0, A1, V = _mat("a", d), _mat("b", d), _mat("v", d)
    ell = (y.T * (A0 + t * A1) * x)[0, 0] / tau - lam * (y.T * y)[0, 0] + sp.cos(t) * (c.T * y)[0, 0]
    system = st.derive_kernel(ell, x, y, V, time=t)
    assert [p.name for p in system.params] == sorted(p.name for p in system.params)   # documented order
    assert system.time == t and len(system.params) == 3 * 9 + 3 + 2
    assert len(repr(system)) < 200 and "user kernel" in repr(system)
    rng = np.random.default_rng(1)
    vals = {p.name: float(rng.normal() * 0.5) for p in system.params}
    vals.update(tau=1.3, lam=0.4)
    ode = st.GaussianODE.from_system(system, vals)
    a, S = gauss
    M = lambda n: np.array([[vals[f"{n}{i}{j}"] for j in range(d)] for i in range(d)])  # noqa: E731
    for tt in (0.0, 0.35, 1.7):
        A = (M("a") + tt * M("b")) / vals["tau"]
        r = np.cos(tt) * np.array([vals[f"c{i}"] for i in range(d)])
        ref = _closed(A.T, -vals["lam"] * np.eye(d), r, M("v"), a, S)
        got = ode.rhs(tt, pack(a, S))
        assert np.max(np.abs(got - ref)) <= TOL * np.max(np.abs(ref))


def test_custom_quadratic_kernel_with_x_only_terms_and_conditions(gauss):
    """x-only terms (here non-polynomial) cancel in the normalisation; the key block R gives an existence
    condition, reported symbolically and evaluated numerically."""
    d = 2
    x, y = _vec("x", d), _vec("y", d)
    B, R = _mat("B", d), sp.Matrix([[sp.Symbol("r0", real=True), 0], [0, sp.Symbol("r1", real=True)]])
    ell = (x.T * B * y)[0, 0] + (y.T * R * y)[0, 0] + sp.exp(x[0]) * sp.sin(x[1])
    system = st.derive_kernel(ell, x, y)
    assert system.conditions and all(isinstance(c, sp.core.relational.StrictGreaterThan) for c in system.conditions)
    vals = {"B00": 0.3, "B01": -0.2, "B10": 0.5, "B11": 0.1, "r0": 0.2, "r1": -0.3}
    ode = st.GaussianODE.from_system(system, vals)
    a, S3 = gauss
    a, S = a[:2], S3[:2, :2]
    Bn, Rn = np.array([[0.3, -0.2], [0.5, 0.1]]), np.diag([0.2, -0.3])
    ref = _closed(Bn, Rn, np.zeros(2), np.eye(2), a, S)
    assert np.max(np.abs(ode.rhs(0.0, pack(a, S)) - ref)) <= TOL * np.max(np.abs(ref))
    # the tilt exists iff Σ⁻¹ - 2R ≻ 0: with Σ = 2I and r0 = 0.5 it does not (1/2 - 1 < 0)
    assert ode.condition_values(0.0, pack(a, S)).min() > 0
    bad = st.GaussianODE.from_system(system, {**vals, "r0": 0.5})
    assert bad.condition_values(0.0, pack(a, 2 * np.eye(2))).min() < 0
    with pytest.raises(st.InputError, match="tilt does not exist"):
        bad.check_tilt(0.0, pack(a, 2 * np.eye(2)))


def test_low_rank_head_stays_symbolic_and_matches_closed_form(gauss):
    """A = KᵀQ/√k with k = 1 written by the user: the parameters are the factors, not A's entries."""
    d, k = 3, 1
    x, y = _vec("x", d), _vec("y", d)
    Q = sp.Matrix(k, d, lambda i, j: sp.Symbol(f"q{j}", real=True))
    K = sp.Matrix(k, d, lambda i, j: sp.Symbol(f"k{j}", real=True))
    system = st.derive_kernel((y.T * K.T * Q * x)[0, 0] / sp.sqrt(k), x, y)
    assert sorted(p.name for p in system.params) == [f"k{j}" for j in range(d)] + [f"q{j}" for j in range(d)]
    vals = {**{f"q{j}": 0.3 * (j + 1) for j in range(d)}, **{f"k{j}": -0.2 * (j - 1) for j in range(d)}}
    ode = st.GaussianODE.from_system(system, vals)
    qn, kn = np.array([vals[f"q{j}"] for j in range(d)]), np.array([vals[f"k{j}"] for j in range(d)])
    a, S = gauss
    ref = _closed(np.outer(kn, qn).T, np.zeros((d, d)), np.zeros(d), np.eye(d), a, S)
    assert np.max(np.abs(ode.rhs(0.0, pack(a, S)) - ref)) <= TOL * np.max(np.abs(ref))


@pytest.mark.parametrize("make", [
    lambda x, y, A: ((y.T * A * x)[0, 0]) ** 2,                 # (yᵀAx)²: key-quadratic part depends on x
    lambda x, y, A: sp.log(1 + sp.exp((y.T * A * x)[0, 0])),    # softplus: not polynomial in y
    lambda x, y, A: (y.T * A * x)[0, 0] * x[0] ** 2,             # linear in y, not affine in x
], ids=["square", "softplus", "cubic-in-x"])
def test_non_preserving_kernels_are_refused_with_a_witness(make):
    d = 2
    x, y, A = _vec("x", d), _vec("y", d), _mat("a", d)
    with pytest.raises(st.NotGaussianPreserving) as info:
        st.derive_kernel(make(x, y, A), x, y)
    w = info.value.witness
    assert w.certified and any(v != 0 for v in w.value)          # exact rational witness
    assert all(v.is_Rational for v in w.value)
    # the independent route (Gauss-Hermite quadrature + central difference, O(h²) ≈ 1e-6 relative) agrees
    ref = np.array([float(v) for v in w.value])
    assert np.max(np.abs(np.array(w.independent) - ref)) <= 1e-4 * max(1.0, np.max(np.abs(ref)))
    assert "not affine in x" in str(info.value)


def test_bad_input_names_the_problem():
    x, y = _vec("x", 2), _vec("y", 2)
    with pytest.raises(st.InputError, match="query"):
        st.derive_kernel(x[0] * y[0], [x[0], x[1]], y)
    with pytest.raises(st.InputError, match="not a string"):
        st.derive_kernel("x0*y0", x, y)
    with pytest.raises(st.InputError, match="key"):
        st.derive_kernel(x[0] * y[0], x, _vec("y", 3))
    with pytest.raises(st.InputError, match="value"):
        st.derive_kernel(x[0] * y[0], x, y, sp.eye(3))
    with pytest.raises(st.InputError, match="reserved"):
        st.derive_kernel(x[0] * y[0] * sp.Symbol("alpha_0"), x, y)
    system = st.derive_kernel((y.T * _mat("a", 2) * x)[0, 0], x, y)
    with pytest.raises(st.InputError, match="missing parameters"):
        st.GaussianODE.from_system(system, {"a00": 1.0})
    with pytest.raises(st.InputError, match="unknown parameters"):
        st.GaussianODE.from_system(system, {**{f"a{i}{j}": 0.1 for i in range(2) for j in range(2)}, "zz": 1})
    with pytest.raises(st.InputError, match="real number"):
        st.GaussianODE.from_system(system, {**{f"a{i}{j}": 0.1 for i in range(2) for j in range(2)}, "a00": "1"})


def test_system_jacobian_latex_and_steps():
    x, y = _vec("x", 2), _vec("y", 2)
    A = _mat("a", 2)
    system = st.derive_kernel((y.T * A * x)[0, 0], x, y)
    Jac = system.jacobian()
    assert Jac.shape == (5, 5) and system.jacobian() is Jac                 # built once
    # symbolic Jacobian vs central differences of the generated rhs (O(h²) with h = 1e-5: ~1e-10)
    vals = {f"a{i}{j}": 0.1 * (i - 2 * j + 1) for i in range(2) for j in range(2)}
    ode = st.GaussianODE.from_system(system, vals, backend="numpy")
    y0 = pack(np.array([0.3, -0.1]), np.array([[1.0, 0.2], [0.2, 0.7]]))
    sub = dict(zip(system.states, y0)) | {sp.Symbol(k, real=True): v for k, v in vals.items()}
    Jn = np.array(Jac.subs(sub), dtype=float)
    h = 1e-5
    Jfd = np.column_stack([(ode.rhs(0, y0 + h * e) - ode.rhs(0, y0 - h * e)) / (2 * h) for e in np.eye(5)])
    assert np.max(np.abs(Jn - Jfd)) < 1e-8
    assert "\\begin{align*}" in system.latex()
    titles = [s.title for s in system.steps]
    assert titles[0].startswith("the kernel as given") and any("moment ODE" in t for t in titles)


def _sign_free_kernel():
    """d = 2, a key-quadratic block of either sign (so the tilt exists at some points and not at others) and an
    x-only term."""
    x, y = _vec("x", 2), _vec("y", 2)
    r0, r1, r01 = sp.symbols("r0 r1 r01", real=True)
    ell = (x.T * _mat("b", 2) * y)[0, 0] + r0 * y[0] ** 2 + r1 * y[1] ** 2 + r01 * y[0] * y[1] + sp.exp(x[0])
    return st.derive_kernel(ell, x, y), (r0, r1, r01)


def test_user_kernel_steps_are_the_matrix_form_chain_of_the_built_in_kinds(derivation):
    """``.steps`` of a user kernel: the kernel as given, the existence condition, then the same general-d tilt
    chain as the built-in kinds (same titles, proved for every d where theirs are), every step checked."""
    system, _ = _sign_free_kernel()
    steps = system.steps
    assert all(s.checked for s in steps), [s.method for s in steps if not s.checked]
    built_in = {s.title: s.scope for s in derivation(("softmax",)).steps}
    shared = [s for s in steps if s.title in built_in]
    assert {s.title for s in shared} >= {"completing the square", r"the tilted mean $m(x) = \Lambda^{-1} n$"}
    assert len(shared) >= 6 and all(s.scope == built_in[s.title] for s in shared)
    assert "every d" in {s.scope for s in shared}


def test_user_kernel_existence_condition_against_an_independent_eigenvalue_test():
    """The displayed condition Λ ≻ 0 is ``Σ⁻¹ - [[2r0, r01], [r01, 2r1]]`` (written here by hand from the quadratic
    form of ``log k`` in ``y``); evaluated from the step's own object it agrees with numpy's eigenvalues of that
    matrix at random points, and its check saw both outcomes; a step with the sign flipped is reported NOT checked."""
    from symbolic_tpde.documents.equation import Equation

    system, (r0, r1, r01) = _sign_free_kernel()
    cond = system.steps[1]
    assert cond.eq.rel == ">0" and cond.checked
    inside, outside = map(int, re.search(r"\((\d+) where the tilt exists, (\d+) where", cond.method).groups())
    assert inside > 0 and outside > 0                              # the check saw both sides of the boundary
    Sig = sp.MatrixSymbol("Sigma", 2, 2)
    rng = np.random.default_rng(3)
    agree = {True: 0, False: 0}
    for _ in range(40):
        G = rng.standard_normal((2, 2))
        S = G @ G.T + 0.2 * np.eye(2)
        p = rng.uniform(-1.5, 1.5, 3)
        hand = np.linalg.inv(S) - np.array([[2 * p[0], p[2]], [p[2], 2 * p[1]]])
        shown = np.array(cond.eq.lhs.xreplace({Sig: sp.ImmutableMatrix(S), r0: p[0], r1: p[1], r01: p[2]})
                         .as_explicit(), dtype=float)
        assert np.allclose(shown, hand, rtol=1e-12, atol=1e-12)       # round-off of one 2x2 inverse
        agree[bool(np.linalg.eigvalsh(hand).min() > 0)] += 1
    assert agree[True] and agree[False]
    flipped = cond.changed(eq=Equation(sp.MatAdd(Sig.I, *[-a for a in cond.eq.lhs.args if a != Sig.I]), None, ">0"))
    assert not flipped.checked and not flipped.check().checked


def test_user_kernel_document_shows_the_kernel_greek_names_and_matrix_condition():
    """``latex(standalone=True)``: the user's log k as given (SymPy's own LaTeX of it), ``Symbol("lambda")`` as
    ``\\lambda`` (never ``2lambda``), the condition ``Σ⁻¹ + 2λI ≻ 0`` (by hand: ``R = -λI``), the steps, the boxed
    result; no pivot polynomial."""
    x, y = _vec("x", 2), _vec("y", 2)
    lam = sp.Symbol("lambda", positive=True)
    ell = (y.T * _mat("a", 2) * x)[0, 0] - lam * (y.T * y)[0, 0]
    system = st.derive_kernel(ell, x, y)
    assert "lambda" not in system.latex().replace("\\lambda", "")          # the entrywise fragment too
    doc = system.latex(standalone=True)
    assert "\\log k(x, y) = " + sp.latex(ell) in doc
    assert "lambda" not in doc.replace("\\lambda", "") and r"\Sigma^{-1} + 2 \lambda I \succ 0" in doc
    assert "pivot" not in doc.split("Derivation")[0] and "\\boxed" in doc and doc.count("\\item \\textbf") >= 10
    assert "NOT checked" not in doc
