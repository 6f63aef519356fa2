"""Generated numpy code vs SymPy (lambdify without CSE) and vs mpmath at 50 digits, adversarial names,
batched form, Jacobian (symbolic and finite differences), floating-point exception fallback."""

import keyword

import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.codegen.compile import compile_system
from symbolic_tpde.codegen.cache import Cache
from symbolic_tpde.codegen.numpy_backend import numpy_source, prepare
from symbolic_tpde.symbolic.system import OdeSystem, ParamBlock
from symbolic_tpde.validate.checks_codegen import compare_system, lambdify_plain, tolerance_for
from symbolic_tpde.validate.mp import mp_eval


def adversarial_system() -> OdeSystem:
    """Symbol names clashing with Python keywords/builtins, numpy, the generated arguments and temporaries,
    and two names that sanitise to the same identifier (``x-1`` and ``x_1``)."""
    lam, np_, y, sum_, xm1, x_1 = sp.symbols("lambda np y sum x-1 x_1", real=True)
    p, numpy_, math_, out, w_0, s_y = sp.symbols("p numpy math out w_0 s_y", real=True)
    t = sp.Symbol("t", real=True)
    rhs = (
        p * lam * np_ + sp.exp(-y ** 2) * numpy_ - sum_ / (1 + xm1 ** 2),
        sp.sqrt(1 + lam ** 2 + np_ ** 2) * math_ + sp.cos(t) * out,
        (lam + np_) ** 3 - (lam + np_) * y * w_0 + x_1,
        sp.Integer(0),
        p * numpy_ - s_y,                    # no state at all: must broadcast in the batched form
        sp.Rational(1, 3) * xm1 * x_1 * sum_ + sp.Float("0.1") * t,
    )
    states = (lam, np_, y, sum_, xm1, x_1)
    params = (p, numpy_, math_, out, w_0, s_y)
    return OdeSystem(states, params, rhs, (ParamBlock(("all",), (6,), 0),), t, {"variant": "adversarial"})


def softmax_fixture(d: int) -> OdeSystem:
    """Hand-built softmax moment system from the paper's matrix formula (a test fixture, not product code)."""
    al = sp.Matrix(d, 1, lambda i, j: sp.Symbol(f"alpha_{i}"))
    S = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"Sigma_{min(i, j)}_{max(i, j)}"))
    A = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"A_{i}_{j}"))
    V = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"V_{i}_{j}"))
    ad = V * (al + S * A * al)
    Sd = V * S * A * S
    Sd = Sd + Sd.T
    states = tuple(al) + tuple(S[i, j] for i in range(d) for j in range(i, d))
    rhs = tuple(ad) + tuple(Sd[i, j] for i in range(d) for j in range(i, d))
    return OdeSystem(states, tuple(A) + tuple(V), rhs,
                     (ParamBlock(("heads", 0, "A"), (d, d), 0), ParamBlock(("heads", 0, "V"), (d, d), d * d)),
                     origin={"variant": "softmax-fixture", "d": d})


@pytest.fixture
def cache(tmp_path):
    return Cache(tmp_path)


def test_adversarial_names_match_sympy_and_mpmath(cache):
    system = adversarial_system()
    crhs = compile_system(system, "numpy", cache=cache)
    src = crhs.source
    for kw in ("lambda", "def", "np"):
        assert f" {kw} =" not in src  # user names never become Python identifiers as given
    rng = np.random.default_rng(0)
    errs = compare_system(system, [crhs], rng, n_points=6)
    tol = tolerance_for(system)
    assert set(errs) >= {"numpy vs sympy", "numpy vs mpmath-50", "sympy vs mpmath-50"}
    for key, err in errs.items():
        assert err <= tol, (key, err, tol)


def test_docstring_lists_argument_order(cache):
    crhs = compile_system(adversarial_system(), "numpy", cache=cache)
    assert "y[0]: lambda -> s_lambda" in crhs.source
    assert "p[5]: s_y -> p_s_y" in crhs.source
    names = prepare(adversarial_system()).state_names
    assert len(set(names)) == len(names) and not any(keyword.iskeyword(n) for n in names)


@pytest.mark.parametrize("d", [2, 3])
def test_softmax_fixture_pointwise_and_batched(cache, d):
    system = softmax_fixture(d)
    crhs = compile_system(system, "numpy", cache=cache)
    rng = np.random.default_rng(d)
    N = 7
    Y = rng.normal(size=(N, system.n_states))
    P = rng.normal(size=(N, system.n_params))
    lam = lambdify_plain(system)
    ref = np.array([lam(0.0, list(Y[k]), list(P[k])) for k in range(N)], dtype=float)
    scale = np.max(np.abs(ref)) + 1.0
    # float64 round-off: terms are products of <= 4 O(1) normals, sums of <= 2 d^3 terms -> 1e-13 x scale
    assert np.max(np.abs(crhs.batch(0.0, Y, P) - ref)) <= 1e-13 * scale
    loop = np.array([crhs.f(0.0, Y[k], P[k]) for k in range(N)])
    assert np.max(np.abs(loop - ref)) <= 1e-13 * scale
    # shared parameter vector, single state, array of times
    shared = crhs.batch(np.zeros(N), Y, P[0])
    ref0 = np.array([lam(0.0, list(Y[k]), list(P[0])) for k in range(N)], dtype=float)
    assert np.max(np.abs(shared - ref0)) <= 1e-13 * scale
    assert crhs.batch(0.0, Y[0], P).shape == (N, system.n_states)
    with pytest.raises(ValueError):
        crhs.batch(0.0, Y[:, :-1], P)


def test_jacobian_symbolic_and_finite_differences(cache):
    system = adversarial_system()
    crhs = compile_system(system, "numpy", cache=cache)
    rng = np.random.default_rng(5)
    t, y, p = 0.3, rng.normal(size=6), rng.normal(size=6)
    Jsym = sp.Matrix(system.rhs).jacobian(system.states)
    Jref = np.array(sp.lambdify([system.time, system.states, system.params], Jsym, "numpy")(t, y, p), float)
    J = crhs.jac(t, y, p)
    assert J.shape == (6, 6)
    assert np.max(np.abs(J - Jref)) <= 1e-13 * (1 + np.max(np.abs(Jref)))  # float64 round-off
    # independent route: central differences, error O(h^2 f''') + O(eps/h) ~ 1e-10 at h = 1e-5
    h = 1e-5
    Jfd = np.array([(crhs.f(t, y + h * e, p) - crhs.f(t, y - h * e, p)) / (2 * h) for e in np.eye(6)]).T
    assert np.max(np.abs(J - Jfd)) <= 1e-7 * (1 + np.max(np.abs(J)))


def test_overflow_falls_back_to_ieee_values(cache):
    x, a = sp.symbols("x a")
    system = OdeSystem((x,), (a,), (sp.exp(a * x) + 1 / x,), (), sp.Symbol("t"), {})
    crhs = compile_system(system, "numpy", cache=cache)
    assert np.isinf(crhs.f(0.0, [1000.0], [1.0])[0])  # math.exp would raise OverflowError
    assert np.isinf(crhs.f(0.0, [0.0], [1.0])[0])     # 1/0.0 would raise ZeroDivisionError


def test_mpmath_two_precisions_agree():
    system = softmax_fixture(2)
    rng = np.random.default_rng(1)
    y, p = rng.normal(size=system.n_states), rng.normal(size=system.n_params)
    v50, _ = mp_eval(system, 0.0, y, p, dps=50)
    v70, _ = mp_eval(system, 0.0, y, p, dps=70)
    assert max(abs(a - b) for a, b in zip(v50, v70)) < 1e-45


def test_unknown_symbol_is_an_error():
    x, a, z = sp.symbols("x a z")
    system = OdeSystem((x,), (a,), (a * x + z,), (), sp.Symbol("t"), {})
    with pytest.raises(ValueError, match="'z'"):
        numpy_source(system)
