"""Forward sensitivities of the Gaussian moment ODE against central differences of the integrated ODE.

Reference: ``(y(T; θ + h) - y(T; θ - h)) / 2h`` from two integrations of the *plain* generated rhs (not the
sensitivity system) at ``rtol = 1e-13``.  Its error: truncation ``h² |y'''|/6`` (≈ 1e-10 at ``h = 1e-5`` for
the O(1) solutions used here) plus integration error / h (≈ 1e-13·|y| / 1e-5 = 1e-8 |y|); the sensitivity run
itself is integrated at ``rtol = 1e-12``.  Tolerance ``2e-6 max(1, |S|)``: 100x the larger term.  The mpmath
test removes the round-off term (30 digits, Taylor integrator, h = 1e-12) and is compared to 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from symbolic_tpde import InputError, Schedule, make_head, make_weights
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.numerics.ode.solve import integrate
from symbolic_tpde.registry import layout
from symbolic_tpde.symbolic.sensitivities import dag_diff

T = 0.5
H = 1e-5


def _head(kind: str, d: int, rng) -> object:
    A = 0.3 * rng.normal(size=(d, d))
    V = np.eye(d) + 0.2 * rng.normal(size=(d, d))
    if kind == "l2":
        return make_head("l2", d, Q=0.5 * rng.normal(size=(d, d)), K=0.5 * rng.normal(size=(d, d)), V=V, tau=1.5)
    if kind == "sinkhorn":
        return make_head("sinkhorn", d, A=A, V=V, epsilon=1.3)
    if kind == "custom":
        return make_head("custom", d, B=0.2 * rng.normal(size=(d, d)), P=0.1 * np.eye(d),
                         R=np.zeros((d, d)), p=0.1 * rng.normal(size=d), r=np.zeros(d), V=V)
    return make_head(kind, d, A=A, V=V)


def _init(d: int, rng):
    G = rng.normal(size=(d, d))
    return 0.3 * rng.normal(size=d), 0.5 * np.eye(d) + 0.05 * G @ G.T


def _endpoint(ode, y0, p):
    sol = integrate(lambda t, y: ode.compiled.f(t, y, p), y0, (0.0, T), method="DOP853", rtol=1e-13,
                    atol=1e-15, t_eval=[T])
    assert sol.status == "ok"
    return sol.y[-1]


def _central(ode, alpha0, Sigma0, name):
    """Central difference of y(T) in direction ``name`` (a parameter or ``alpha0_i``/``Sigma0_i_j``)."""
    y0, p = layout.pack(alpha0, Sigma0), ode.params(0.0).copy()
    pnames = [s.name for s in ode.system.params]
    snames = layout.state_names(ode.d)
    if name in pnames:
        e = np.zeros_like(p)
        e[pnames.index(name)] = H
        return (_endpoint(ode, y0, p + e) - _endpoint(ode, y0, p - e)) / (2 * H)
    head, _, rest = name.partition("0_")
    e = np.zeros_like(y0)
    e[snames.index(f"{head}_{rest}")] = H
    return (_endpoint(ode, y0 + e, p) - _endpoint(ode, y0 - e, p)) / (2 * H)


def _check(ode, alpha0, Sigma0, names):
    sol = ode.integrate(alpha0, Sigma0, T, sensitivities=names, t_eval=[T])
    assert sol.status == "ok"
    assert len(sol.names) == len(names) and sol.dSigma.shape == (1, len(names), ode.d, ode.d)
    for k, nm in enumerate(sol.names):
        ref = _central(ode, alpha0, Sigma0, nm)
        got = sol.S[-1, k]
        assert np.max(np.abs(got - ref)) <= 2e-6 * max(1.0, np.max(np.abs(ref))), (nm, got, ref)
    return sol


CASES = [("softmax", 2), ("softmax", 3), ("linear", 2), ("linear", 3), ("l2", 2), ("l2", 3), ("sinkhorn", 2),
         ("custom", 2), ("custom", 3)]


@pytest.mark.parametrize("kind,d", CASES)
def test_sensitivities_match_central_differences(kind, d):
    rng = np.random.default_rng(7 + d)
    ode = GaussianODE.from_weights(make_weights([_head(kind, d, rng)]), backend="numpy")
    alpha0, Sigma0 = _init(d, rng)
    pnames = [s.name for s in ode.system.params]
    # every parameter at d = 2 (the full Jacobian), a spread subset at d = 3; two initial-data entries
    chosen = pnames if d == 2 else pnames[:: max(1, len(pnames) // 6)]
    _check(ode, alpha0, Sigma0, chosen + ["alpha0_0", f"Sigma0_0_{d - 1}"])


def test_sinkhorn_d3_is_out_of_reach():
    rng = np.random.default_rng(1)
    ode = GaussianODE.from_weights(make_weights([_head("sinkhorn", 3, rng)]))
    with pytest.raises(InputError, match="out of reach"):
        ode.integrate(np.zeros(3), np.eye(3), T, sensitivities=["h0_A_0_0"])


def test_block_names_layers_and_c_backend():
    """Block shorthand expands; a layered schedule perturbs the entry in every layer; C equals numpy."""
    rng = np.random.default_rng(3)
    w1, w2 = (make_weights([_head("softmax", 2, rng)]) for _ in range(2))
    ode = GaussianODE.from_schedule(Schedule.layers([(0.2, w1), (1.0, w2)]), backend="numpy")
    alpha0, Sigma0 = _init(2, rng)
    sol = ode.integrate(alpha0, Sigma0, T, sensitivities=["h0_V", "Sigma0"], t_eval=[T])
    assert sol.names == ("h0_V_0_0", "h0_V_0_1", "h0_V_1_0", "h0_V_1_1", "Sigma0_0_0", "Sigma0_0_1", "Sigma0_1_1")
    y0 = layout.pack(alpha0, Sigma0)
    for k in (1, 2):
        def end(sign, k=k):
            ps = [ode.params(0.0).copy(), ode.params(0.3).copy()]
            for p in ps:
                p[ode.system.params.index(sp.Symbol(sol.names[k], real=True))] += sign * H
            r = integrate(lambda t, y: ode.compiled.f(t, y, ps[int(t >= 0.2)]), y0, (0, T), method="DOP853",
                          rtol=1e-13, atol=1e-15, breakpoints=[0.2], t_eval=[T])
            return r.y[-1]
        ref = (end(1) - end(-1)) / (2 * H)
        assert np.max(np.abs(sol.S[-1, k] - ref)) <= 2e-6 * max(1.0, np.abs(ref).max())
    from symbolic_tpde.codegen.c_backend import availability
    if availability() is None:
        solc = ode.integrate(alpha0, Sigma0, T, sensitivities=["h0_V", "Sigma0"], t_eval=[T], backend="c")
        assert solc.backend == "c"
        np.testing.assert_allclose(solc.S, sol.S, rtol=1e-9, atol=1e-12)  # same ODE, two roundings


def test_unknown_direction_is_input_error():
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", 2, A=np.eye(2), V=np.eye(2))]),
                                   backend="numpy")
    with pytest.raises(InputError, match="unknown sensitivity direction 'h0_Z_0_0'"):
        ode.integrate(np.zeros(2), np.eye(2), T, sensitivities=["h0_Z_0_0"])
    with pytest.raises(InputError, match="list of names"):
        ode.integrate(np.zeros(2), np.eye(2), T, sensitivities="h0_A")


def test_dag_diff_equals_sympy_diff():
    """The DAG chain rule against ``sympy.diff`` at random rational points (ℓ2 d = 2: pow, sqrt, divisions)."""
    rng = np.random.default_rng(0)
    ode = GaussianODE.from_weights(make_weights([_head("l2", 2, rng)]), backend="numpy")
    system = ode.system
    point = {s: sp.Rational(int(rng.integers(1, 9)), 10) for s in (*system.states, *system.params)}
    point.update({s: 1 + sp.Rational(1, 3) for s in system.states if s.name in ("Sigma_0_0", "Sigma_1_1")})
    for var in (system.states[2], system.params[-1]):
        ours = dag_diff(system.rhs, var)
        for e, mine in zip(system.rhs[:2], ours[:2]):
            ref = sp.diff(e, var).xreplace(point)
            assert abs(sp.N(mine.xreplace(point) - ref, 30)) < sp.Float(1e-25)


def test_dag_grad_equals_sympy_diff():
    """Reverse accumulation (one sweep, the adjoint's vector-Jacobian products) against ``sympy.diff`` of the
    same scalar ``Σ c_i f_i`` (ℓ2 d = 2 rhs: pow, sqrt, divisions) at a random rational point, 30 digits; and
    equal-but-distinct symbols are found (equality, not identity)."""
    from symbolic_tpde.symbolic.sensitivities import dag_grad

    rng = np.random.default_rng(1)
    system = GaussianODE.from_weights(make_weights([_head("l2", 2, rng)]), backend="numpy").system
    point = {s: sp.Rational(int(rng.integers(1, 9)), 10) for s in (*system.states, *system.params)}
    point.update({s: 1 + sp.Rational(1, 3) for s in system.states if s.name in ("Sigma_0_0", "Sigma_1_1")})
    phi = sum((sp.Rational(k + 1, 7) * f for k, f in enumerate(system.rhs)), sp.S.Zero)
    vars_ = [system.states[0], system.states[3], system.params[0], system.params[-1]]
    for var, mine in zip(vars_, dag_grad(phi, vars_)):
        ref = sum((sp.Rational(k + 1, 7) * sp.diff(f, var) for k, f in enumerate(system.rhs)), sp.S.Zero)
        assert abs(sp.N(mine.xreplace(point) - ref.xreplace(point), 30)) < sp.Float(1e-25)
    x = sp.Symbol("x", real=True)
    twin = sp.Symbol.__xnew__(sp.Symbol, "x", real=True)
    assert dag_grad(twin ** 3 + 2 * twin, [x]) == [3 * x ** 2 + 2]


def test_dag_diff_sees_equal_symbols_that_are_distinct_objects():
    """SymPy's symbol cache is an LRU: after a long session, or for a system read back from the disk cache, the
    symbol in the rhs and the one asked for can be equal but distinct objects.  This failed in CI (all-zero
    sensitivities after ~1000 tests) when ``dag_diff`` compared symbols by identity."""
    x = sp.Symbol("x", real=True)
    twin = sp.Symbol.__xnew__(sp.Symbol, "x", real=True)   # bypasses the cache: equal, not identical
    assert twin == x and twin is not x
    y = sp.Symbol("y", real=True)
    assert dag_diff([twin ** 2 * y + sp.exp(twin)], x) == [2 * x * y + sp.exp(x)]
    assert dag_diff([twin * y], y) == [x]


def test_softmax_d2_against_mpmath_central_differences():
    """Round-off-free reference: the softmax moment ODE integrated by mpmath's Taylor method at 30 digits,
    central difference with h = 1e-12 (truncation ~1e-24, integration error ~1e-25/1e-12): agreement to 1e-9
    is the float64 sensitivity run's own accuracy (rtol 1e-12 over T = 0.5, with a margin)."""
    import mpmath as mp

    A = np.array([[0.3, -0.2], [0.1, 0.4]])
    V = np.array([[1.0, 0.2], [-0.1, 0.9]])
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", 2, A=A, V=V)]), backend="numpy")
    alpha0, Sigma0 = np.array([0.2, -0.1]), np.array([[0.6, 0.1], [0.1, 0.5]])
    sol = ode.integrate(alpha0, Sigma0, T, sensitivities=["h0_A_0_1"], t_eval=[T])

    def endpoint(a01):
        Am = mp.matrix([[mp.mpf("0.3"), a01], [mp.mpf("0.1"), mp.mpf("0.4")]])
        Vm = mp.matrix([[1, mp.mpf("0.2")], [mp.mpf("-0.1"), mp.mpf("0.9")]])

        def f(t, y):
            al = mp.matrix([y[0], y[1]])
            S = mp.matrix([[y[2], y[3]], [y[3], y[4]]])
            da = Vm * (al + S * Am * al)          # dα/dt = V(α + ΣAα)
            M = Vm * S * Am * S
            dS = M + M.T                          # dΣ/dt = VΣAΣ + ΣAᵀΣVᵀ
            return [da[0], da[1], dS[0, 0], dS[0, 1], dS[1, 1]]
        y0 = [mp.mpf(x) for x in ("0.2", "-0.1", "0.6", "0.1", "0.5")]
        return mp.odefun(f, 0, y0)(mp.mpf(T))

    with mp.workdps(30):
        h = mp.mpf("1e-12")
        plus, minus = endpoint(mp.mpf("-0.2") + h), endpoint(mp.mpf("-0.2") - h)
        ref = np.array([float((a - b) / (2 * h)) for a, b in zip(plus, minus)])
    np.testing.assert_allclose(sol.S[-1, 0], ref, rtol=0, atol=1e-9 * max(1.0, np.abs(ref).max()))


@pytest.mark.slow
def test_softmax_d8_subset():
    """d = 8, a subset of directions (two entries of A, one of V, one of Σ₀), same reference and tolerance.
    Random parts scaled by ``√(2/d)`` (``A = 0.3√(2/d) G``, ``V = I + 0.2√(2/d) G'``, ``Σ₀ = ½I + 0.05(2/d)G''G''ᵀ``)
    so that the problem has the size of the d = 2 cases (``tr Σ``: 4.86 -> 5.65 on [0, T]).  With the d = 2
    scaling the spectral scale of ``A + Aᵀ`` and of ``Σ₀`` grows with d and this problem sits a hair from its
    blow-up at T = 0.5 (``tr Σ`` from 7 to 1.5e6, the plain run needs 3.6e5 rhs evaluations, the sensitivities
    reach 3e5 by t = 0.23): that, not the generated path, is why the earlier d = 8 check never finished.
    Measured (shared 2-core box): derivation + sensitivity system + numpy code generation ≈ 35 s, the
    integrations a few seconds."""
    rng = np.random.default_rng(8)
    d = 8
    A = 0.3 * np.sqrt(2 / d) * rng.normal(size=(d, d))
    V = np.eye(d) + 0.2 * np.sqrt(2 / d) * rng.normal(size=(d, d))
    G = rng.normal(size=(d, d))
    alpha0, Sigma0 = 0.3 * rng.normal(size=d), 0.5 * np.eye(d) + 0.05 * (2 / d) * G @ G.T
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", d, A=A, V=V)]), backend="numpy")
    sol = _check(ode, alpha0, Sigma0, ["h0_A_0_1", "h0_A_7_3", "h0_V_2_5", "Sigma0_3_4"])
    assert np.abs(sol.S[-1]).max() > 1e-2     # the directions do move the state (not a vacuous agreement)


@pytest.mark.parametrize("kind,d", [("softmax", 2), ("l2", 2), ("softmax", 3)])
def test_adjoint_gradient_equals_forward_sensitivities(kind, d):
    """ℓ = w·y(T) (random w): the adjoint gradient for every parameter and every initial entry equals
    Σ_i w_i S_ik(T) from the forward sensitivities (an independent route: forward vs reverse accumulation, and
    forward vs backward integration), both at rtol 1e-12: agreement to 1e-8 max(1, |grad|) (1e4 x the tolerance
    for the backward re-integration of y over an O(1) horizon)."""
    from symbolic_tpde.gaussian.sensitivities import adjoint_gradient

    rng = np.random.default_rng(40 + d)
    ode = GaussianODE.from_weights(make_weights([_head(kind, d, rng)]), backend="numpy")
    alpha0, Sigma0 = _init(d, rng)
    w = rng.normal(size=layout.state_size(d))
    adj = adjoint_gradient(ode, alpha0, Sigma0, T, w)
    names = list(adj.param_names) + list(adj.init_names)
    fwd = ode.integrate(alpha0, Sigma0, T, sensitivities=names, t_eval=[T])
    ref = fwd.S[-1] @ w
    got = np.concatenate([adj.params, adj.init])
    assert np.abs(ref).max() > 1e-2
    assert np.max(np.abs(got - ref)) <= 1e-8 * max(1.0, np.abs(ref).max()), (got - ref)
