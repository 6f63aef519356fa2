"""The quadratic form is the one description of an exponential-quadratic kind (issue 28, item 1).

* each built-in form equals the blocks read off the kind's own definition (an independent route: the
  definition is a log-kernel expression, the read-off is :func:`kernel_from_log`);
* the same form function serves numpy arrays and SymPy matrices;
* the particle field, the grid velocity, the closed forms and the theorem predicates read it (a kind's name is
  never asked), and a kind may carry a form with no theorem applying (unnormalised softmax);
* a kernel from ``derive_kernel`` carries its form and runs as particles, matching its own moment ODE.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import symbolic_tpde as st
from symbolic_tpde.registry import kinds
from symbolic_tpde.weights import make_head, make_weights

FORM_KINDS = [k for k in kinds.kind_names() if kinds.get(k).quadratic is not None]


def _sym_params(name, d, m=2):
    """The kind's parameters as explicit SymPy matrices / symbols (entrywise form)."""
    dims = {"d": d, "m": m}
    out = {}
    for p in kinds.get(name).params:
        shape = tuple(dims[s] for s in p.shape)
        if len(shape) == 2:
            out[p.name] = sp.Matrix(*shape, lambda i, j: sp.Symbol(f"{p.name}_{i}_{j}", real=True))
        elif len(shape) == 1:
            out[p.name] = sp.Matrix([sp.Symbol(f"{p.name}_{i}", real=True) for i in range(shape[0])])
        else:
            out[p.name] = sp.Symbol(p.name, positive=bool(p.constraint))
    return out


def test_the_form_kinds_are_the_exponential_quadratic_ones():
    assert set(FORM_KINDS) == {"softmax", "l2", "custom", "softmax_unnormalized"}
    assert [k for k in FORM_KINDS if kinds.get(k).tilt] == ["softmax", "l2", "custom"]


@pytest.mark.parametrize("name", [k for k in FORM_KINDS
                                  if getattr(kinds.part(k, "symbolic", None), "log_kernel", None) is not None])
def test_form_equals_the_read_off_of_the_kinds_definition(name):
    """B, R (symmetric part: the only part yᵀRy sees) and r of the registry form are exactly the coefficients
    :func:`kernel_from_log` reads off the kind's registered log-kernel (for softmax and ℓ2 their definitions
    ``<Ax, y>`` and ``-|Qx - Ky|²/τ`` as written, not the form)."""
    from symbolic_tpde.symbolic.kernels import kernel_from_log

    d = 2
    prm = _sym_params(name, d)
    x = sp.Matrix(sp.symbols("u0:2", real=True))
    y = sp.Matrix(sp.symbols("w0:2", real=True))
    read = kernel_from_log(kinds.part(name, "symbolic").log_kernel(prm, x, y), list(x), list(y))
    form = kinds.get(name).form(prm)
    zero = sp.zeros(d, d)
    R = zero if form["R"] is None else sp.Matrix(form["R"])
    r = sp.zeros(d, 1) if form["r"] is None else sp.Matrix(form["r"])
    assert sp.expand(read.B - sp.Matrix(form["B"])) == zero
    assert sp.expand(read.R - (R + R.T) / 2) == zero
    assert sp.expand(read.r - r) == sp.zeros(d, 1)


@pytest.mark.parametrize("name", FORM_KINDS)
def test_one_form_function_serves_numpy_and_sympy(name):
    """The form at numeric parameters equals the SymPy form evaluated at the same numbers (float64 round-off
    of a few products of O(1) entries: 1e-13)."""
    rng = np.random.default_rng(1)
    d = 3
    num = {p.name: kinds.draw_example(p, {"d": d, "m": 2}, rng) for p in kinds.get(name).params}
    prm = _sym_params(name, d)
    subs = {}
    for k, v in prm.items():
        if isinstance(v, sp.MatrixBase):
            subs.update({s: float(x) for s, x in zip(v, np.asarray(num[k]).reshape(-1))})
        else:
            subs[v] = float(num[k])
    fn, fs = kinds.get(name).form(num), kinds.get(name).form(prm)
    for blk in ("B", "R", "r"):
        assert (fn[blk] is None) == (fs[blk] is None)
        if fn[blk] is not None:
            want = np.array(sp.Matrix(fs[blk]).xreplace(subs), dtype=float).reshape(np.shape(fn[blk]))
            assert np.max(np.abs(np.asarray(fn[blk]) - want)) <= 1e-13


def test_unnormalised_softmax_carries_the_form_and_no_theorem():
    """B = Aᵀ, R = 0 like softmax, but not normalised: no tilt, no closed form, no theorem (the issue's
    example of a form with no theorem applying), while its particle field is the form's (mode exp)."""
    from symbolic_tpde.analysis.closed_forms import affine_field, head_form
    from symbolic_tpde.analysis.theorems import facts_for
    from symbolic_tpde.registry.theorems import for_kinds

    A = np.array([[-1.0, 0.3], [-0.3, 0.0]])
    h = make_head("softmax_unnormalized", A=A, V=np.eye(2))
    assert np.array_equal(kinds.get(h.kind).form(h.effective)["B"], A.T)
    assert head_form(h) is None and affine_field(make_weights([h]), np.zeros(2), np.eye(2)) is None
    assert facts_for(make_weights([h]), np.eye(2)).as_list() == [] and for_kinds((h.kind,)) == ()
    hs = make_head("softmax", A=A, V=np.eye(2))
    assert {f.name for f in facts_for(make_weights([hs]), np.eye(2)).as_list()} == {"riccati", "lyapunov"}


def test_a_custom_head_with_R_zero_meets_the_riccati_predicate():
    """Hypotheses are predicates on the form, not names: a custom head with R = 0 and r ≠ 0 has the closed
    form of softmax with A = Bᵀ (the same T*, to the bit: the same arithmetic on the same S)."""
    from symbolic_tpde.analysis.theorems import facts_for

    A = np.array([[0.4, 0.2], [-0.1, 0.3]])
    S0 = np.array([[1.0, 0.2], [0.2, 0.5]])
    f_soft = facts_for(make_weights([make_head("softmax", A=A, V=2 * np.eye(2))]), S0).riccati
    f_cust = facts_for(make_weights([make_head("custom", B=A.T, r=np.array([0.3, -1.0]), V=2 * np.eye(2))]),
                       S0).riccati
    assert f_cust is not None and np.isfinite(f_soft.values["T_star"])
    assert f_cust.values["T_star"] == f_soft.values["T_star"]
    why = facts_for(make_weights([make_head("custom", B=A.T, R=-0.1 * np.eye(2), V=np.eye(2))]), S0).why_not
    assert "R ≠ 0" in why["riccati"]


def test_grid_velocity_reads_the_form_with_masses_as_key_bias():
    """The grid's weighted field with masses m_j equals the particle field of a cloud that repeats each point
    in proportion to its mass (integer masses: 1, 2, 3 copies), for every kind with a form (float64 round-off
    of softmax sums of O(1) terms: 1e-12)."""
    from symbolic_tpde.numerics.grids.euclidean import weighted_field
    from symbolic_tpde.numerics.particles.fields import field

    rng = np.random.default_rng(6)
    X = rng.standard_normal((5, 2))
    counts = np.array([1, 2, 3, 1, 2])
    rep = np.repeat(X, counts, axis=0)
    for name in FORM_KINDS:
        h = make_head(name, **{p.name: kinds.draw_example(p, {"d": 2, "m": 2}, rng) for p in kinds.get(name).params})
        w = make_weights([h])
        got = weighted_field(X, X, counts / counts.sum(), w)
        want = field(rep, w)[np.cumsum(counts) - counts]
        assert np.max(np.abs(got - want)) <= 1e-12 * max(1.0, np.abs(want).max()), name


def test_a_layer_that_does_not_take_a_kind_names_it():
    from symbolic_tpde.numerics.grids.euclidean import check_kinds

    A = np.eye(2)
    with pytest.raises(st.InputError, match="sinkhorn"):
        check_kinds(make_weights([make_head("sinkhorn", A=A, V=A)]))


# ---------------------------------------------------------------------------------------- a user's kernel
def _user_system():
    x = sp.Matrix(sp.symbols("x0 x1", real=True))
    y = sp.Matrix(sp.symbols("y0 y1", real=True))
    a, b, c, g, s = sp.symbols("a b c g s", real=True)
    # log k = xᵀBy + yᵀRy + rᵀy + (x alone): a bilinear coupling, a key-quadratic damping, a key bias
    ell = a * x[0] * y[0] + b * x[1] * y[1] + c * x[0] * y[1] - g * (y[0] ** 2 + y[1] ** 2) + s * y[0] + x[0] ** 2
    V = sp.Matrix([[1, sp.Symbol("v")], [0, 1]])
    return st.derive_kernel(ell, x, y, V), {"a": 0.8, "b": 0.6, "c": -0.4, "g": 0.15, "s": 0.5, "v": 0.3}


def test_derive_kernel_result_carries_its_form():
    from symbolic_tpde.symbolic.user_kernel import kernel_form, kernel_schedule

    system, values = _user_system()
    kf = kernel_form(system)
    a, b, c, g, s = sp.symbols("a b c g s", real=True)
    assert kf.B == sp.Matrix([[a, c], [0, b]]) and kf.R == -g * sp.eye(2) and kf.r == sp.Matrix([s, 0])
    h = kernel_schedule(system, values)(0.0).heads[0]
    assert h.kind == "custom" and np.allclose(h.effective["B"], [[0.8, -0.4], [0.0, 0.6]], rtol=0, atol=0)
    with pytest.raises(st.InputError, match="missing parameters"):
        kernel_schedule(system, {"a": 1.0})
    built_in = st.derive_gaussian_system((2, (("softmax", 2),), False, False))
    with pytest.raises(st.InputError, match="carries no kernel form"):
        kernel_form(built_in)
    with pytest.raises(st.NotGaussianPreserving, match="degree 3"):      # not of the form: says why
        x, y = sp.Matrix(sp.symbols("x0 x1")), sp.Matrix(sp.symbols("y0 y1"))
        st.derive_kernel(x[0] * y[0] ** 3, x, y)


def test_user_kernel_runs_as_particles_and_matches_its_moment_ode():
    """A kernel given as an expression runs as particles through its form and its empirical moments match its
    own moment ODE at T: each of the 5 moments within 4 Monte-Carlo standard errors.  The SEs are measured
    (spread over 8 independent clouds of n = 1500 from N(α₀, Σ₀), divided by √8); the mean-field bias is
    O(1/n) ≈ 7e-4, below one SE (~6e-3).  The moments move by many SEs on [0, T] (checked), so the comparison
    is not vacuous."""
    from symbolic_tpde.numerics.particles.simulate import simulate
    from symbolic_tpde.symbolic.user_kernel import kernel_schedule

    system, values = _user_system()
    sched = kernel_schedule(system, values)
    a0, S0 = np.array([0.3, -0.2]), np.array([[0.6, 0.15], [0.15, 0.4]])
    T = 0.8
    ode = st.GaussianODE.from_system(system, values, backend="numpy")
    sol = ode.integrate(a0, S0, T, rtol=1e-10, atol=1e-12)

    def moments(a, S):
        return np.array([a[0], a[1], S[0, 0], S[0, 1], S[1, 1]])

    want, start = moments(sol.alpha[-1], sol.Sigma[-1]), moments(a0, S0)
    rng = np.random.default_rng(2026)
    runs = []
    for _ in range(8):
        X0 = rng.multivariate_normal(a0, S0, size=1500)
        X = simulate(X0, sched, T, progress=False).X
        runs.append(moments(X.mean(0), np.cov(X.T, bias=True)))
    runs = np.array(runs)
    se = runs.std(0, ddof=1) / np.sqrt(len(runs))
    got = runs.mean(0)
    assert np.all(np.abs(got - want) <= 4 * se), (got, want, se)
    assert np.max(np.abs(want - start) / se) > 20
