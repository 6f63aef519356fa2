"""Property-based tests (hypothesis; issue 11): the scenario reader only ever raises InputError, the Gaussian
state layout round-trips, generated code equals SymPy evaluation, W_p is a metric."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symbolic_tpde.errors import InputError
from symbolic_tpde.inputs.scenario import loads, parse_scenario

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10 ** 500, max_value=10 ** 500)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20)
KEYS = ["attention", "d", "A", "V", "Q", "K", "B", "R", "tau", "heads", "ffn", "sink", "layers", "alpha0",
        "Sigma0", "T", "kind", "where", "t_end", "epsilon", "W", "c", "mass", "x"]
scenario_like = st.dictionaries(st.sampled_from(KEYS), json_values | st.just("softmax"), max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario_like)
def test_parse_scenario_only_raises_input_error(data):
    try:
        scn = parse_scenario(data, need_T=False)
    except InputError as exc:
        assert "\n" not in str(exc.field)
    else:  # accepted: then it is a genuine scenario with finite, SPD initial data
        assert np.isfinite(scn.alpha0).all() and np.linalg.eigvalsh(scn.Sigma0).min() > 0


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda s: s.encode("utf-8")))
def test_reading_bytes_only_raises_input_error(raw):
    try:
        data = loads(raw)
        parse_scenario(data, need_T=False)
    except InputError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2 ** 32 - 1))
def test_pack_unpack_round_trip(d, seed):
    from symbolic_tpde.registry.layout import pack, state_size, unpack

    rng = np.random.default_rng(seed)
    alpha = rng.standard_normal(d)
    G = rng.standard_normal((d, d))
    Sigma = G @ G.T
    y = pack(alpha, Sigma)
    assert y.shape == (state_size(d),)
    a2, S2 = unpack(y, d)
    assert np.array_equal(a2, alpha) and np.array_equal(S2, Sigma)  # exact: pure copies
    assert np.array_equal(pack(a2, S2), y)


@pytest.fixture(scope="module")
def l2_ode():
    from symbolic_tpde import make_head, make_weights
    from symbolic_tpde.gaussian import GaussianODE

    A = np.array([[-0.6, 0.2], [0.1, -0.4]])
    V = np.array([[1.0, 0.3], [-0.2, 0.8]])
    return GaussianODE.from_weights(make_weights([make_head("l2", Q=A, K=V, V=V, tau=1.5)]), backend="numpy")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=5, max_size=5))
def test_generated_code_equals_sympy_evaluation(l2_ode, v):
    """Tolerance 1e-12 relative: float64 round-off of a CSE'd vs a substituted evaluation of the same
    rational expression (a few hundred operations, each 1.1e-16)."""
    import sympy as sp

    ode = l2_ode
    system = ode.system
    alpha = np.array(v[:2])
    Sigma = np.array([[1.0 + v[2] ** 2, 0.3 * v[3]], [0.3 * v[3], 1.0 + v[4] ** 2]])
    y = np.concatenate([alpha, Sigma[np.triu_indices(2)]])
    p = ode.params(0.0)
    subs = {**dict(zip(system.states, y)), **dict(zip(system.params, p)), system.time: 0.0}
    ref = np.array([float(sp.N(e.xreplace({k: sp.Float(val, 30) for k, val in subs.items()}), 30))
                    for e in system.rhs])
    got = ode.rhs(0.0, y)
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 8), st.integers(0, 2 ** 32 - 1))
def test_wasserstein_metric_axioms(n, seed):
    """Identity, symmetry, triangle inequality.  Slack 1e-9: the assignment/LP optimum is exact up to float64
    round-off in the cost sums (n² terms of size O(10))."""
    from symbolic_tpde.numerics.measures.distances import wasserstein

    rng = np.random.default_rng(seed)
    X, Y, Z = (rng.standard_normal((n, 2)) for _ in range(3))
    assert wasserstein(X, X) <= 1e-9
    assert abs(wasserstein(X, Y) - wasserstein(Y, X)) <= 1e-9
    assert wasserstein(X, Z) <= wasserstein(X, Y) + wasserstein(Y, Z) + 1e-9
    assert wasserstein(X, Y) >= 0
