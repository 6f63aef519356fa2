"""Values that travel (issue 18 item 4): weights, schedules, structures, derived systems and solutions pickle and
deep-copy with their equality, hashing and immutability, and arrive intact in another process (a
``multiprocessing`` spawn pool, a Dask ``LocalCluster``), where a derived system still compiles to the same
right-hand side; the numeric-matrix backend has the generated backends' shape; a missing command module is an
ImportError."""

from __future__ import annotations

import copy
import dataclasses
import multiprocessing
import pickle

import numpy as np
import pytest

from symbolic_tpde.gaussian import GaussianODE, backend_for, pack_params, pack_state
from symbolic_tpde.numerics.ode.solve import Solution, as_monitor, integrate
from symbolic_tpde.symbolic.moments import derive_gaussian_system
from symbolic_tpde.validate.oracles import affine_field
from symbolic_tpde.weights import (FFN, Head, Scenario, Schedule, Structure, Weights, check_gaussian, make_head,
                                   make_weights)

D = 2
#: generated code vs the oracle's closed form: both float64 formulas of a few dozen operations on O(1) data,
#: so they agree to round-off (a few hundred ulp at most)
RTOL = 1e-12


def _values():
    """One of each value type, with structured heads, an FFN and a sink; seeded."""
    rng = np.random.default_rng(18)
    soft = make_head("softmax", A=rng.normal(size=(D, D)) * 0.4, V=rng.normal(size=(D, D)))
    low = make_head("sinkhorn", Q=rng.normal(size=(1, D)), K=rng.normal(size=(1, D)), WO=rng.normal(size=(D, 1)),
                    V=rng.normal(size=(1, D)), epsilon=0.8)
    masked = make_head("masked", A=np.eye(D), V=np.eye(D))
    w = make_weights([soft], ffn={"W": rng.normal(size=(D, D)) * 0.1, "c": rng.normal(size=D)})
    w2 = make_weights([soft, low], ffn=w.ffn)
    wm = make_weights([masked], sink={"mass": 0.25, "x": [0.5, -1.0]})
    G = rng.normal(size=(D, D))
    alpha0, Sigma0 = check_gaussian(rng.normal(size=D), G @ G.T / D + np.eye(D), D)
    sched = Schedule.layers([(0.5, w2), (1.0, make_weights([soft, low], ffn={"W": np.eye(D), "c": np.ones(D)}))])
    scn = Scenario(attention="multihead", d=D, schedule=sched, alpha0=alpha0, Sigma0=Sigma0, T=1.0)
    return {"head": low, "weights": w, "weights2": w2, "sink": wm, "constant": Schedule.constant(w),
            "layers": sched, "callable": Schedule.from_callable(_weights_at), "structure": w2.structure(),
            "scenario": scn}


def _weights_at(t: float) -> Weights:
    """A module-level schedule function (a lambda would not pickle)."""
    return make_weights([make_head("linear", A=np.eye(D), V=np.eye(D) * (1 + t))])


def _arrays(value):
    """Every array held by a value (to check that they stay read-only)."""
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, Head):
        return [v for m in (value.params, value.effective) for v in m.values() if isinstance(v, np.ndarray)]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in _arrays(v)]
    if dataclasses.is_dataclass(value):
        return [a for f in dataclasses.fields(value) for a in _arrays(getattr(value, f.name))]
    return []


def _solution() -> Solution:
    """A real run with events and level samples: ``y' = y²``, ``y(0) = 1`` blows up at ``t = 1``."""
    return integrate(lambda t, y: y * y, [1.0], (0.0, 2.0), events=[as_monitor([1.0])], rtol=1e-8)


def _same_solution(a: Solution, b: Solution) -> bool:
    for f in dataclasses.fields(Solution):
        x, y = getattr(a, f.name), getattr(b, f.name)
        same = np.array_equal(x, y) if isinstance(x, np.ndarray) or isinstance(y, np.ndarray) else x == y
        if not same:
            return False
    return True


ROUND_TRIPS = {"pickle": lambda v: pickle.loads(pickle.dumps(v)), "deepcopy": copy.deepcopy}


@pytest.mark.parametrize("how", list(ROUND_TRIPS))
def test_values_round_trip_equal_hashable_and_immutable(how):
    trip = ROUND_TRIPS[how]
    values = _values()
    for name, v in values.items():
        c = trip(v)
        assert c is not v and type(c) is type(v), name
        assert c == v and hash(c) == hash(v), name
        assert {c: 1}[v] == 1, name                      # usable as a memo key in place of the original
        for arr in _arrays(c):
            assert not arr.flags.writeable, name
            with pytest.raises(ValueError):
                arr[...] = 0
        for orig, new in zip(_arrays(v), _arrays(c)):
            assert not np.shares_memory(orig, new), name   # a real copy, not a view of the original
        field = "kind" if isinstance(c, Head) else dataclasses.fields(c)[0].name
        with pytest.raises(AttributeError):                # FrozenInstanceError is an AttributeError
            setattr(c, field, getattr(c, field))
    head = values["head"]
    assert trip(head).effective["A"].tobytes() == head.effective["A"].tobytes()   # A = KᵀQ/√k rebuilt exactly
    # equality is by value after the trip: one ulp in one entry makes a different head
    bumped = make_head("sinkhorn", **{**head.params, "V": np.nextafter(head.params["V"], np.inf)})
    assert trip(bumped) != head and trip(head) != bumped
    other = Schedule.from_callable(lambda t: _weights_at(2 * t))
    assert trip(values["callable"]) != other and trip(values["callable"])(0.5) == _weights_at(0.5)
    sol = _solution()
    assert sol.status == "blowup" and sol.events and sol.samples     # a non-trivial solution
    assert _same_solution(trip(sol), sol)


def test_structure_is_the_memo_and_derivation_key():
    w = _values()["weights2"]
    st = w.structure()
    assert isinstance(st, Structure) and st.d == D and st.ffn and not st.sink
    assert [k for k, _ in st.heads] == ["softmax", "sinkhorn"]
    assert st == make_weights(list(w.heads), ffn=FFN(W=np.ones((D, D)), c=np.zeros(D))).structure()  # form only
    assert st != make_weights(list(w.heads)).structure()
    tuple_form = (st.d, st.heads, st.ffn, st.sink)
    assert derive_gaussian_system(tuple_form) is derive_gaussian_system(st)   # one derivation per structure
    assert derive_gaussian_system(st).origin["structure"] == st


def test_warm_cache_key_is_that_of_the_tuple_form(monkeypatch):
    """The on-disk warm key digests ``repr`` of the field values, i.e. what it was when the structure was the
    tuple ``(d, heads, ffn, sink)``: caches written before the dataclass stay valid."""
    from symbolic_tpde.codegen import warm

    st, seen, real = _values()["structure"], [], warm.make_key
    monkeypatch.setattr(warm, "make_key", lambda content, backend, flags=(): seen.append(content) or
                        real(content, backend, flags))
    warm.structure_key(st, "numpy")
    assert seen[0].startswith(f"structure={(st.d, st.heads, st.ffn, st.sink)!r};")


def _system_and_values(w: Weights):
    system = derive_gaussian_system(w.structure())
    p = pack_params(system, w)
    return system, {s.name: float(x) for s, x in zip(system.params, p)}


def _oracle_rhs(w: Weights, y) -> np.ndarray:
    """``(b + Jα, JΣ + ΣJᵀ)`` from the registry's numeric closed forms (independent of the derivation)."""
    from symbolic_tpde.gaussian import unpack_state

    a, S = unpack_state(np.asarray(y), D)
    b, J = affine_field(w, a, S)
    return pack_state(b + J @ a, J @ S + S @ J.T)


def _point():
    rng = np.random.default_rng(7)
    G = rng.normal(size=(D, D))
    return pack_state(rng.normal(size=D), G @ G.T / D + 0.5 * np.eye(D))


@pytest.mark.parametrize("how", list(ROUND_TRIPS))
def test_ode_system_round_trip_keeps_its_rhs_and_derivation(how):
    from symbolic_tpde.codegen.compile import system_key

    w = _values()["weights2"]
    system, values = _system_and_values(w)
    c = ROUND_TRIPS[how](system)
    assert c is not system and system_key(c) == system_key(system)
    assert c.derivation is system.derivation            # the module-level function: steps build the same way
    assert [s.name for s in c.params] == [s.name for s in system.params] and c.time == system.time
    assert c.param_layout == system.param_layout and c.existence == system.existence
    y, ref = _point(), _oracle_rhs(w, _point())
    got = GaussianODE.from_system(c, values, backend="numpy").rhs(0.3, y)
    assert np.allclose(got, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())


def test_user_kernel_system_pickles_with_its_derivation():
    import sympy as sp

    import symbolic_tpde as st

    x, y = sp.Matrix([sp.Symbol("x0", real=True)]), sp.Matrix([sp.Symbol("y0", real=True)])
    b, lam = sp.Symbol("b", real=True), sp.Symbol("lam", positive=True)
    system = st.derive_kernel(b * x[0] * y[0] - lam * y[0] ** 2, x, y)        # d = 1: the steps take < 1 s
    c = pickle.loads(pickle.dumps(system))
    assert c.derivation.func is system.derivation.func and "steps" not in c._memo
    steps = c.steps                                         # built in the copy, from the pickled derivation
    assert len(steps) >= 3 and all(s.checked for s in steps)


def _evaluate(payload: dict) -> dict:
    """Runs in another process: what arrived, and the rhs compiled there from the arrived system."""
    out = dict(payload)
    out["rhs"] = GaussianODE.from_system(payload["system"], payload["values"], backend="numpy").rhs(0.3, payload["y"])
    out["rhs_weights"] = GaussianODE.from_weights(payload["weights2"], backend="numpy").rhs(0.3, payload["y"])
    return out


def _payload() -> dict:
    values = _values()
    system, pvals = _system_and_values(values["weights2"])
    return {**values, "system": system, "values": pvals, "y": _point(), "solution": _solution()}


def _check_returned(sent: dict, got: dict) -> None:
    for name in _values():
        assert got[name] == sent[name] and hash(got[name]) == hash(sent[name]), name
        assert all(not a.flags.writeable for a in _arrays(got[name])), name
    assert _same_solution(got["solution"], sent["solution"])
    ref = _oracle_rhs(sent["weights2"], sent["y"])
    for key in ("rhs", "rhs_weights"):
        assert np.allclose(got[key], ref, rtol=RTOL, atol=RTOL * np.abs(ref).max()), key


def test_values_through_a_multiprocessing_spawn_pool():
    """Spawn: a fresh interpreter with empty memos, so the system is really compiled again over there."""
    sent = _payload()
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(_evaluate, (sent,))
    _check_returned(sent, got)


def test_values_through_a_dask_local_cluster():
    distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed (extra 'dist')")
    sent = _payload()
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) \
            as cluster, distributed.Client(cluster) as client:
        got = client.submit(_evaluate, sent, pure=False).result(timeout=60)
    _check_returned(sent, got)


# ------------------------------------------------------------------------------------ numeric-matrix backend
def test_numeric_matrix_backend_has_the_generated_backends_shape():
    """Sinkhorn at d = 3 (no entrywise form) beside a structured softmax head and an FFN: the backend object
    answers the same questions as a generated one, and its rhs is the oracle's closed form."""
    rng = np.random.default_rng(3)
    d = 3
    heads = [make_head("sinkhorn", A=rng.normal(size=(d, d)) * 0.3, V=rng.normal(size=(d, d)), epsilon=0.7),
             make_head("softmax", Q=rng.normal(size=(2, d)), K=rng.normal(size=(2, d)), V=rng.normal(size=(d, d))),
             make_head("sinkhorn", Q=rng.normal(size=(2, d)), K=rng.normal(size=(2, d)), WO=rng.normal(size=(d, 2)),
                       V=rng.normal(size=(2, d)))]
    w = make_weights(heads, ffn={"W": rng.normal(size=(d, d)) * 0.2, "c": rng.normal(size=d)})
    nm = backend_for(w.structure(), "numpy")
    generated = backend_for(make_weights(heads[1:2]).structure(), "numpy")
    for attr in ("f", "batch", "jac", "n_states", "n_params", "param_layout", "system", "backend", "source", "key"):
        assert hasattr(nm, attr) and hasattr(generated, attr), attr
    assert nm.backend == "numeric-matrix" and nm.system is nm.rest.system and nm.rest is generated
    assert sum(b.size for b in nm.param_layout) == nm.n_params
    ode = GaussianODE.from_weights(w, backend="numpy")
    assert ode.compiled is nm and ode.system is nm.system
    G = rng.normal(size=(d, d))
    a, S = rng.normal(size=d), G @ G.T / d + np.eye(d)
    y = pack_state(a, S)
    b, J = affine_field(w, a, S)
    ref = pack_state(b + J @ a, J @ S + S @ J.T)
    assert np.allclose(ode.rhs(0.0, y), ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())   # sqrtm: eigh round-off
    assert np.array_equal(ode.rhs_batch(0.0, np.stack([y, y]))[1], ode.rhs(0.0, y))


# ------------------------------------------------------------------------------------------------ cli
def test_missing_command_module_is_an_import_error(monkeypatch):
    from symbolic_tpde import cli

    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "no_such_command"))
    with pytest.raises(ImportError, match="no_such_command"):
        cli.build_parser()


# ------------------------------------------------------------------ the newer values (issues 21, 22, 23)
def _same(a, b) -> bool:
    """Equal by value, field by field (arrays entry by entry, NaN equal to NaN; nested dataclasses, lists,
    tuples and dicts recursively)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def _sphere_values():
    from symbolic_tpde.analysis.sphere_verdict import classify_sphere
    from symbolic_tpde.numerics.particles.sphere import load_sphere_scenario, simulate_sphere

    scn = load_sphere_scenario("sphere_ngpt")
    X0 = scn.initial(4, np.random.default_rng(0))
    verdict = classify_sphere(scn, X0, 0.5)
    run = simulate_sphere(X0, scn.weights, 0.2, norm=scn.norm, alpha=scn.alpha)
    return scn, verdict, run


@pytest.mark.parametrize("how", list(ROUND_TRIPS))
def test_sphere_scenario_verdict_and_run_travel(how):
    trip = ROUND_TRIPS[how]
    scn, verdict, run = _sphere_values()
    c = trip(scn)
    assert c is not scn and c == scn and hash(c) == hash(scn) and {c: 1}[scn] == 1   # usable as a memo key
    assert c.law == scn.law and hash(c.law) == hash(scn.law)
    assert np.array_equal(c.initial(4, np.random.default_rng(0)), scn.initial(4, np.random.default_rng(0)))
    v = trip(verdict)
    assert v is not verdict and _same(v, verdict) and v.as_dict() == verdict.as_dict()
    assert verdict.evidence                                   # a non-trivial verdict (reasons recorded)
    r = trip(run)
    assert r is not run and _same(r, run) and run.X.shape == (4, 4)


@pytest.mark.parametrize("how", list(ROUND_TRIPS))
@pytest.mark.parametrize("kind,params", [("sigmoid", {"A": [[0.3, 0.1], [0.0, 0.2]], "V": np.eye(2), "b": 0.1}),
                                         ("softmax_unnormalized", {"A": [[0.1, 0.0], [0.05, 0.1]], "V": np.eye(2)})])
def test_closure_ode_travels_and_computes_the_same_rhs(how, kind, params):
    """``ClosureODE`` held compiled code and a lambdified condition (neither pickles; deepcopy failed on a lock):
    it travels as its weights and rebuilds.  The copy's right-hand side and conditions are the original's, bit
    for bit (same code on the same numbers)."""
    from symbolic_tpde.gaussian.closure import ClosureODE

    ode = ClosureODE(make_weights([make_head(kind, **params)]), backend="numpy")
    c = ROUND_TRIPS[how](ode)
    assert c is not ode and type(c) is ClosureODE and repr(c) == repr(ode)
    y = pack_state(np.array([0.1, -0.2]), np.array([[0.8, 0.1], [0.1, 0.5]]))
    assert np.array_equal(c.rhs(0.3, y), ode.rhs(0.3, y)) and np.any(ode.rhs(0.3, y))
    assert np.array_equal(c.condition_values(0.3, y), ode.condition_values(0.3, y))


@pytest.mark.parametrize("how", list(ROUND_TRIPS))
def test_grid_run_and_fit_result_travel(how):
    from symbolic_tpde.analysis.fit import fit
    from symbolic_tpde.numerics.grids.euclidean import solve_grid
    from symbolic_tpde.inputs.scenario import load_scenario

    trip = ROUND_TRIPS[how]
    scn = load_scenario("mixture_1d", gaussian_data=False)
    run = solve_grid(scn.init, scn.schedule, 0.1, 8, save_every=0.05)
    assert run.frames and run.status == "ok"
    r = trip(run)
    assert r is not run and _same(r, run) and np.array_equal(r.density, run.density) and r.occupied == run.occupied
    ode = GaussianODE(Schedule.constant(make_weights([make_head("softmax", A=[[-0.5]], V=[[1.0]])])),
                      backend="numpy")
    times = np.array([0.1, 0.2, 0.3])
    alpha = np.array([[0.21], [0.22], [0.235]])
    res = fit(ode, times, ["h0_A"], alpha=alpha, alpha0=[0.2], Sigma0=[[1.0]])
    f = trip(res)
    assert f is not res and _same(f, res) and f.report() == res.report() and f.describe_null() == res.describe_null()
