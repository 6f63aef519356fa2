"""The registry of attention kinds: completeness, one path for built-ins and user kernels, structured heads,
immutability, and a new kind added through its four parts."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import sympy as sp

import symbolic_tpde as st
from symbolic_tpde.weights import Sink, make_head, make_weights
from symbolic_tpde.numerics.particles.fields import field
from symbolic_tpde.registry import kinds
from symbolic_tpde.registry.layout import pack
from symbolic_tpde.symbolic.moments import derive_gaussian_system, gaussian_symbols


@pytest.mark.parametrize("name", kinds.kind_names())
def test_every_kind_has_every_part(name):
    spec = kinds.get(name)
    sym = kinds.part(name, "symbolic")
    orc = kinds.part(name, "oracle")
    assert callable(kinds.part(name, "particle"))
    assert callable(orc.loop)
    if spec.gaussian == "affine":
        assert sym.witness is None and (sym.log_kernel is not None or sym.field is not None)
        assert orc.affine is not None
    else:
        assert spec.gaussian == "witness" and sym.witness is not None and orc.affine is None
    for p in spec.params:
        assert p.latex and p.description and all(s in ("d", "m", "k", "v") for s in p.shape)


@pytest.mark.parametrize("name", kinds.kind_names("sphere"))
def test_every_sphere_kind_has_its_geometry_parts(name):
    """Each geometry has its own parts: a sphere kind has particles, reductions and diagnostics, no Gaussian
    (symbolic/oracle) part; the R^d table is unchanged and holds no sphere kind."""
    spec = kinds.get(name)
    assert spec.geometry == "sphere" and name not in kinds.KINDS
    for part_name in kinds.GEOMETRY_PARTS["sphere"]:
        assert kinds.part(name, part_name) is not None
    with pytest.raises(LookupError):
        kinds.part(name, "symbolic")
    assert all(kinds.get(k).geometry == "R^d" for k in kinds.kind_names())


def _random_head(name, d, rng):
    """A valid head of any kind from its registry entry alone (its parameters' example ranges)."""
    dims = {"d": d, "m": 2}
    return make_head(name, **{p.name: kinds.draw_example(p, dims, rng) for p in kinds.get(name).params})


@pytest.mark.parametrize("name", kinds.kind_names())
def test_particle_field_matches_its_oracle(name):
    """The vectorised particle part against the kind's pure-Python loop oracle (float64 round-off on sums of
    10 terms of size O(1): 1e-12 relative is a wide margin; Sinkhorn stops at a marginal error of 1e-9, its
    default tolerance, which moves the field by up to ~1e-9 |V| |x|, hence 1e-8 there)."""
    rng = np.random.default_rng(3)
    d = 2
    h = _random_head(name, d, rng)
    sink = Sink(mass=0.2, x=np.array([0.5, -0.1])) if name == "masked" else None
    w = make_weights([h], sink=sink)
    X = rng.standard_normal((10, d))
    ref = kinds.part(name, "oracle").loop(X, h.effective, sink=sink)
    got = field(X, w)
    tol = 1e-8 if name == "sinkhorn" else 1e-12
    assert np.max(np.abs(got - ref)) <= tol * max(1.0, np.max(np.abs(ref)))


def _rational_point(symbols, rng):
    return {s: sp.Rational(rng.randint(1, 9), rng.randint(2, 7)) * rng.choice((1, -1)) if not s.is_positive
            else sp.Rational(rng.randint(1, 9), rng.randint(2, 7)) for s in symbols}


@pytest.mark.parametrize("name", [k for k in kinds.kind_names() if kinds.part(k, "symbolic").log_kernel])
def test_builtin_kernel_kinds_equal_derive_kernel_exactly(name):
    """A normalised built-in kind re-expressed as a user kernel through derive_kernel gives the same
    right-hand side as the registry path: exact rational comparison at random rational points."""
    d = 2
    reg = derive_gaussian_system((d, ((name, d),), False, False))
    by_name = {s.name: s for s in reg.params}
    prm = {}
    for blk in reg.param_layout:
        nm = blk.key[2]
        if len(blk.shape) == 2:
            prm[nm] = sp.Matrix(*blk.shape, lambda i, j: by_name[f"h0_{nm}_{i}_{j}"])
        elif len(blk.shape) == 1:
            prm[nm] = sp.Matrix([by_name[f"h0_{nm}_{i}"] for i in range(blk.shape[0])])
        else:
            prm[nm] = by_name[f"h0_{nm}"]
    x = sp.Matrix(sp.symbols("u0:2", real=True))
    y = sp.Matrix(sp.symbols("w0:2", real=True))
    ell = kinds.part(name, "symbolic").log_kernel(prm, x, y)     # the definition, written as a user would
    user = st.derive_kernel(ell, x, y, prm["V"])
    assert {s.name for s in user.params} <= set(by_name)
    rng = random.Random(11)
    for _ in range(3):
        pt = _rational_point([*reg.states, *reg.params], rng)
        a, S = gaussian_symbols(d)
        Sn = sp.Matrix(2, 2, lambda i, j: S[i, j].xreplace(pt))
        if not Sn.is_positive_definite:
            pt.update({S[0, 0]: 2, S[1, 1]: 2, S[0, 1]: sp.Rational(1, 3)})
        by_n = {s.name: v for s, v in pt.items()}
        r1 = [sp.nsimplify(e.xreplace(pt)) for e in reg.rhs]
        r2 = [sp.nsimplify(e.xreplace({s: by_n[s.name] for s in (*user.states, *user.params)})) for e in user.rhs]
        assert [sp.simplify(u - v) for u, v in zip(r1, r2)] == [0] * len(r1)


def test_structured_head_equals_its_effective_head():
    """Q, K (k = 1, low rank) and an output block WO: the moment ODE, the particle field and the closed form
    equal those of the head with A = KᵀQ/√k and V = WO V given directly (float64 round-off, 1e-12)."""
    rng = np.random.default_rng(5)
    d, k, v = 3, 1, 2
    Q, K = rng.standard_normal((k, d)), rng.standard_normal((k, d))
    WO, V = rng.standard_normal((d, v)), rng.standard_normal((v, d))
    hs = make_head("softmax", Q=Q, K=K, WO=WO, V=V)
    he = make_head("softmax", A=K.T @ Q / math.sqrt(k), V=WO @ V)
    sys_s = derive_gaussian_system(make_weights([hs]).structure())
    assert len(sys_s.params) == 2 * k * d + d * v + v * d               # the factors, not A's d² entries
    a = rng.standard_normal(d)
    G = rng.standard_normal((d, d))
    S = G @ G.T / d + 0.5 * np.eye(d)
    o1 = st.GaussianODE.from_weights(make_weights([hs]), backend="numpy")
    o2 = st.GaussianODE.from_weights(make_weights([he]), backend="numpy")
    y0 = pack(a, S)
    r1, r2 = o1.rhs(0.0, y0), o2.rhs(0.0, y0)
    assert np.max(np.abs(r1 - r2)) <= 1e-12 * np.max(np.abs(r2))
    X = rng.standard_normal((20, d))
    f1, f2 = field(X, make_weights([hs])), field(X, make_weights([he]))
    assert np.max(np.abs(f1 - f2)) <= 1e-12 * np.max(np.abs(f2))


def test_heads_are_immutable_values():
    A, V = np.eye(2), np.array([[1.0, 0.5], [0.0, 1.0]])
    h1, h2 = make_head("softmax", A=A, V=V), make_head("softmax", A=A.copy(), V=V.copy())
    assert h1 == h2 and hash(h1) == hash(h2) and len({h1, h2}) == 1
    assert h1 != make_head("softmax", A=A, V=V + np.array([[0, 1e-15], [0, 0]]))    # exact, by bit pattern
    with pytest.raises(AttributeError):
        h1.kind = "l2"
    with pytest.raises(TypeError):
        h1.params["A"] = np.zeros((2, 2))
    with pytest.raises(ValueError):
        h1.params["A"][0, 0] = 3.0
    assert make_weights([h1]) == make_weights([h2]) and hash(make_weights([h1])) == hash(make_weights([h2]))


def test_validation_comes_from_the_registry():
    with pytest.raises(st.InputError, match="tau: must be > 0"):
        make_head("l2", Q=np.eye(2), K=np.eye(2), V=np.eye(2), tau=-1.0)
    with pytest.raises(st.InputError, match="unknown variant"):
        make_head("nosuch", A=np.eye(2), V=np.eye(2))
    with pytest.raises(st.InputError, match="cannot be combined"):
        make_head("softmax", A=np.eye(2), Q=np.eye(2), K=np.eye(2), V=np.eye(2))
    with pytest.raises(st.InputError, match="missing parameter"):
        make_head("sigmoid", A=np.eye(2), V=np.eye(2))
    from symbolic_tpde.commands.derive import variants
    from symbolic_tpde.inputs.scenario import attentions
    assert set(variants()) == set(attentions()) == set(kinds.kind_names()) | {"multihead"}


@pytest.fixture
def toy_kind():
    """A new kind in its four parts: softmax with a temperature, log k = <Ax, y>/τ."""
    from symbolic_tpde.numerics.particles.fields import softmax_field
    from symbolic_tpde.symbolic.kind_parts import SymbolicPart
    from symbolic_tpde.validate.oracles import Oracle, ref_softmax

    name = "softmax_temperature"
    spec = kinds.KindSpec(name, (kinds.get("softmax").param("A"), kinds.get("softmax").param("V"),
                                 kinds.ParamSpec("T", (), None, "positive", "T", "temperature")),
                          "affine", "V ∫ y e^{<Ax,y>/T} dμ / ∫ e^{<Ax,y>/T} dμ")
    kinds.add(spec)                                                                   # 1. registry/kinds.py
    kinds.register(name, "symbolic")(SymbolicPart(                                    # 2. symbolic/kind_parts.py
        log_kernel=lambda p, x, y: (y.T * p["A"] * x)[0, 0] / p["T"]))
    kinds.register(name, "particle")(lambda X, p, c: softmax_field(X, p["A"] / p["T"], p["V"], **c.kw))  # 3.
    kinds.register(name, "oracle")(Oracle(lambda X, p, sink=None: ref_softmax(X, p["A"] / p["T"], p["V"]),
                                          lambda p, a, S: (p["V"] @ a, p["V"] @ S @ p["A"] / p["T"])))  # 4.
    yield name
    kinds.remove(name)


def test_a_new_kind_needs_only_its_four_parts(toy_kind):
    from symbolic_tpde.inputs.scenario import parse_scenario
    from symbolic_tpde.validate.oracles import affine_field

    rng = np.random.default_rng(2)
    A, V = 0.4 * rng.standard_normal((2, 2)), np.eye(2) + 0.2 * rng.standard_normal((2, 2))
    scn = parse_scenario({"attention": toy_kind, "A": A.tolist(), "V": V.tolist(), "T": 1.0,
                          "alpha0": [0.1, -0.2], "Sigma0": [[1.0, 0.1], [0.1, 0.8]]})
    w = scn.weights(0.0)
    ode = st.GaussianODE.from_scenario(scn, backend="numpy")
    b, J = affine_field(w, scn.alpha0, scn.Sigma0)
    ref = pack(b + J @ scn.alpha0, J @ scn.Sigma0 + scn.Sigma0 @ J.T)
    assert np.max(np.abs(ode.rhs(0.0, pack(scn.alpha0, scn.Sigma0)) - ref)) <= 1e-12 * np.max(np.abs(ref))
    X = rng.standard_normal((8, 2))
    assert np.allclose(field(X, w), kinds.part(toy_kind, "oracle").loop(X, w.heads[0].effective), rtol=0,
                       atol=1e-12)


def test_one_gaussian_layout_and_one_set_of_state_symbols():
    """The moment ODE, the Gaussian energy and the spec layout name the state alike (a subs between an energy
    and a moment ODE acts; before, Σ_00 was positive in one and real in the other, so it silently did not)."""
    from symbolic_tpde.registry.layout import state_names, unpack
    from symbolic_tpde.symbolic import gaussian_energy as ge

    a1, S1 = gaussian_symbols(3)
    a2, S2 = ge.gaussian_symbols(3)
    assert a1 == a2 and S1 == S2
    sysm = derive_gaussian_system((3, (("softmax", 3),), False, False))
    assert [s.name for s in sysm.states] == state_names(3)
    y = np.arange(9.0)
    al, S = unpack(y, 3)
    assert np.array_equal(pack(al, S), y) and np.array_equal(S, S.T)
    batch = np.stack([y, 2 * y])
    assert np.array_equal(pack(*unpack(batch, 3)), batch)


def test_constraints_and_example_ranges_come_from_the_registry():
    """Constraint kinds are checked on input by name; an example range outside its constraint, an unknown
    constraint or an example form that does not fit the shape is refused when the spec is built."""
    with pytest.raises(ValueError, match="violates its constraint"):
        kinds.ParamSpec("tau", (), None, "positive", r"\tau", "t", ("interval", 0.0, 1.0))
    with pytest.raises(ValueError, match="constraint"):
        kinds.ParamSpec("tau", (), None, "odd", r"\tau", "t")
    with pytest.raises(ValueError, match="does not fit"):
        kinds.ParamSpec("A", ("d", "d"), None, None, "A", "a", ("interval", 0.0, 1.0))
    nn = kinds.ParamSpec("s", (), None, "nonnegative", "s", "a scale")
    assert nn.violation(0.0) is None and "must be >= 0" in nn.violation(-1e-300)
    rng = np.random.default_rng(0)
    R = kinds.draw_example(kinds.get("custom").param("R"), {"d": 3}, rng)
    assert np.allclose(R, R.T) and np.linalg.eigvalsh(R).max() <= 1e-15     # "nsd": the tilt exists at every Σ


@pytest.mark.parametrize("name", [k for k, s in kinds.KINDS.items() if s.preserves_gaussians])
def test_moments_rows_examples_satisfy_their_preconditions(name):
    """The moments rows' example weights: κ (key bias included) <= KAPPA_MAX along the ODE on [0, T] and a
    predicted sensitivity >= SENS_PREDICTED -- recomputed here from the numpy-backend ODE."""
    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.validate import checks_moments as cm

    w = cm.row_weights(name)
    a0, S0 = cm.initial(2)
    sol = GaussianODE.from_weights(w, backend="numpy").integrate(a0, S0, cm.T_DEFAULT, rtol=1e-10, atol=1e-12)
    assert max(cm.tilt_strength(w, a, S) for a, S in zip(sol.alpha, sol.Sigma)) <= cm.KAPPA_MAX
    assert cm.predicted_sensitivity(st.GaussianODE.from_weights(w, backend="numpy"), a0, S0) >= cm.SENS_PREDICTED


def test_docs_kinds_table_is_the_generated_one():
    """The kinds table of the documentation's scenarios page (docs/guide/scenarios.md) is `tpde kinds --markdown`'s
    output (regenerate it when the registry changes)."""
    from pathlib import Path

    from symbolic_tpde.commands.kinds import markdown

    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "scenarios.md").read_text(encoding="utf-8")
    start = page.index("<!-- kinds table: generated by `tpde kinds --markdown`")
    body = page[page.index("\n", start) + 1:page.index("<!-- end of kinds table -->")]
    assert body.rstrip("\n") == markdown(), \
        "docs/guide/scenarios.md kinds table is stale: paste `tpde kinds --markdown` into it"


def test_a_wrong_matrix_claim_is_counted():
    """The matrix-form rows can fail: a claim off by a factor 2 in J leaves identities not reduced to 0."""
    from dataclasses import replace

    from symbolic_tpde.validate import checks_symbolic as cs

    spec = kinds.get("l2")
    good = spec.parts["claim"] if "claim" in spec.parts else kinds.part("l2", "claim")
    spec.parts["claim"] = replace(good, matrix=lambda h, a, S: {**good.matrix(h, a, S),
                                                                  "J": 2 * good.matrix(h, a, S)["J"]})
    try:
        assert cs.matrix_form_residual(("l2",)) == 1
    finally:
        spec.parts["claim"] = good
    assert cs.matrix_form_residual(("l2",)) == 0


# ------------------------------------------------------------------------------ acceptance: a key-bias kind
KEYBIAS = "softmax_keybias"


def _ref_keybias(X, A, V, b):
    """Pure-Python definition: weights exp(<A x_i, x_j> + bᵀx_j), normalised, then V."""
    X, A, V, b = X.tolist(), A.tolist(), V.tolist(), b.tolist()
    out = []
    for xi in X:
        Ax = [sum(a * x for a, x in zip(row, xi)) for row in A]
        w = [math.exp(sum(u * v for u, v in zip(Ax, xj)) + sum(u * v for u, v in zip(b, xj))) for xj in X]
        m = [sum(wj * xj[c] for wj, xj in zip(w, X)) / sum(w) for c in range(len(xi))]
        out.append([sum(v * mm for v, mm in zip(row, m)) for row in V])
    return np.array(out)


@pytest.fixture
def keybias_kind():
    """Softmax with a key bias bᵀy in the log-kernel, added as a user would: one registry entry whose quadratic
    form is ``B = Aᵀ, r = b`` (no symbolic or particle part: the layers read the form), plus its independent
    loop oracle and closed form (``oracle``) and the paper-style claim (``claim``); taken out after the test."""
    from symbolic_tpde.validate.oracles import Claim, Oracle

    A, V = kinds.get("softmax").params
    kinds.add(kinds.KindSpec(                                                          # the registry entry
        KEYBIAS, (A, V, kinds.ParamSpec("b", ("d",), None, None, "b", "key bias: log k has + bᵀy",
                                        ("normal", 0.3, 0.0))),
        "affine", "V ∫ y e^{<Ax,y> + bᵀy} dμ(y) / ∫ e^{<Ax,y> + bᵀy} dμ(y)",
        interaction=lambda A, I: {"A": A}, quadratic=lambda p: {"B": p["A"].T, "r": p["b"]}))
    try:
        kinds.register(KEYBIAS, "oracle")(Oracle(                                      # its independent routes
            lambda X, p, sink=None: _ref_keybias(X, p["A"], p["V"], p["b"]),
            lambda p, a, S: (p["V"] @ (a + S @ p["b"]), p["V"] @ S @ p["A"])))      # m(x) = α + Σ(Ax + b)
        kinds.register(KEYBIAS, "claim")(Claim(
            lambda P, a, S: (P["V"] * (a + S * P["b"]), P["V"] * S * P["A"]),
            lambda h, a, S: {"alpha_dot": h["symbols"]["V"] * (a + S * h["symbols"]["b"] + S * h["symbols"]["A"] * a),
                             "Sigma_dot": h["symbols"]["V"] * S * h["symbols"]["A"] * S
                             + S * h["symbols"]["A"].T * S * h["symbols"]["V"].T}))
        yield KEYBIAS
    finally:
        kinds.remove(KEYBIAS)


def _keybias_scenario(tmp_path, name, c=0.5):
    """A d = 2 scenario of the key-bias kind with V = cI and A + Aᵀ indefinite (finite-time blow-up)."""
    import json

    scn = {"attention": name, "A": [[0.5, 0.2], [0.0, 0.3]], "V": [[c, 0.0], [0.0, c]], "b": [0.4, -0.3],
           "alpha0": [0.1, -0.2], "Sigma0": [[1.0, 0.1], [0.1, 0.8]], "T": 0.5}
    path = tmp_path / "keybias.json"
    path.write_text(json.dumps(scn))
    return str(path), scn


def test_key_bias_kind_reaches_every_layer(keybias_kind, tmp_path, capsys):
    """The new kind, from its registry entry and oracle alone: particle field = its loop; moment ODE = its
    oracle's (b, J); the exact and matrix-form claims hold; `tpde kinds`, `derive` (matrix form, d = 2),
    `sweep --kind`, `particles`, `gaussian`, `classify` (the closed-form Riccati verdict: V = cI and R = 0 on
    the form), `pde` all take it; the display renames its own b of Γ = b + Jx, the parameter b stays b."""
    import json

    from symbolic_tpde.cli import main
    from symbolic_tpde.commands.kinds import markdown
    from symbolic_tpde.validate import checks_symbolic as cs
    from symbolic_tpde.validate.oracles import affine_field, example_params

    assert set(kinds.get(keybias_kind).parts) == {"oracle", "claim"}          # nothing else was registered
    rng = np.random.default_rng(4)
    w = make_weights([make_head(keybias_kind, **example_params(keybias_kind, 2, rng))])
    X = rng.standard_normal((9, 2))
    ref = kinds.part(keybias_kind, "oracle").loop(X, w.heads[0].effective)
    assert np.max(np.abs(field(X, w) - ref)) <= 1e-12 * max(1.0, np.abs(ref).max())   # float64 round-off
    a, S = np.array([0.2, -0.1]), np.array([[1.0, 0.2], [0.2, 0.7]])
    b, J = affine_field(w, a, S)
    want = pack(b + J @ a, J @ S + S @ J.T)
    got = st.GaussianODE.from_weights(w, backend="numpy").rhs(0.0, pack(a, S))
    assert np.max(np.abs(got - want)) <= 1e-12 * np.abs(want).max()
    assert cs.entrywise_vs_claim((2, ((keybias_kind, 2),), False, False), rng) == 0          # exact
    assert cs.matrix_form_residual((keybias_kind,)) == 0
    assert (((keybias_kind,), False)) in cs.matrix_rows()

    assert main(["derive", "--attention", keybias_kind]) == 0
    out = capsys.readouterr().out
    assert "Gamma(x) = b_Gamma + J x" in out and "b_Gamma = " in out
    assert main(["derive", "--attention", keybias_kind, "--d", "2", "--format", "json"]) == 0
    assert "h0_b_0" in capsys.readouterr().out                     # b is a vector block (d,), read at call time
    stem = tmp_path / "sw"
    assert main(["sweep", "--kind", keybias_kind, "--n", "1", "--range", "0.2", "0.2", "--K", "1", "--T", "1",
                 "--out", str(stem)]) == 0
    assert stem.with_suffix(".csv").exists()
    assert f"| `{keybias_kind}` |" in markdown()
    capsys.readouterr()
    assert main(["kinds"]) == 0 and keybias_kind in capsys.readouterr().out

    path, scn = _keybias_scenario(tmp_path, keybias_kind)
    assert main(["gaussian", "--scenario", path, "--json"]) == 0
    gauss = json.loads(capsys.readouterr().out)
    assert main(["particles", "--scenario", path, "--n", "300", "--seed", "1", "--json"]) == 0
    parts = json.loads(capsys.readouterr().out)
    assert parts["status"] == "ok" and np.all(np.isfinite(parts["cov"]))
    assert main(["pde", "--scenario", path, "--grid", "16", "--json"]) == 0
    grid = json.loads(capsys.readouterr().out)
    assert grid["status"] == "ok" and grid["mass_error"] <= 1e-12         # mass conserved to round-off
    assert main(["classify", "--scenario", path, "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    # the closed form: Σ(t) = (Σ₀⁻¹ - tM)⁻¹ with M = c(A + Aᵀ) (the key bias moves the mean only), so
    # T* = 1/λ_max(Σ₀ M) computed here by numpy's generalised eigenproblem (independent of closed_forms)
    A, S0 = np.array(scn["A"]), np.array(scn["Sigma0"])
    T_star = 1 / np.max(np.linalg.eigvals(S0 @ (0.5 * (A + A.T))).real)
    assert verdict["source"] == "theorem" and verdict["outcome"] == "blowup"
    assert [f["name"] for f in verdict["facts"]] == ["riccati"]
    assert abs(verdict["blowup_time"] - T_star) <= 1e-12 * T_star                 # eigenvalue round-off
    assert gauss["status"] == "ok" and np.all(np.isfinite(gauss["Sigma"]))


@pytest.mark.slow
def test_key_bias_moments_agree_across_particles_grid_and_ode(keybias_kind, tmp_path, capsys):
    """The same key-bias scenario through three solvers that read the one form: the particle mean (n = 4000)
    and the grid mean (`tpde pde`, 48² cells, MUSCL) agree with the moment ODE within 4 Monte-Carlo standard
    errors √(Σ_ii(T)/n) (≈ 0.02); the grid's own error is O(h²) with h ≈ 0.5: for plain softmax on the same
    scenario at 48² it is 4e-4 on the mean and 0.031 on the covariance (0.007 at 96²), hence 1e-2 and 5e-2."""
    import json

    from symbolic_tpde.cli import main
    from symbolic_tpde.inputs.scenario import load_scenario
    from symbolic_tpde.numerics.particles.simulate import simulate

    path, scn = _keybias_scenario(tmp_path, keybias_kind)
    s = load_scenario(path)
    sol = st.GaussianODE.from_scenario(s, backend="numpy").integrate(s.alpha0, s.Sigma0, s.T, rtol=1e-10,
                                                                      atol=1e-12)
    a_T, S_T = sol.alpha[-1], sol.Sigma[-1]
    n = 4000
    X0 = np.random.default_rng(11).multivariate_normal(s.alpha0, s.Sigma0, size=n)
    X = simulate(X0, s.schedule, s.T, progress=False).X
    se = np.sqrt(np.diag(S_T) / n)
    assert np.all(np.abs(X.mean(0) - a_T) <= 4 * se), (X.mean(0), a_T, se)
    assert np.max(np.abs(a_T - s.alpha0) / se) > 4                              # the mean moved: not vacuous
    capsys.readouterr()
    assert main(["pde", "--scenario", path, "--grid", "48", "--json"]) == 0
    grid = json.loads(capsys.readouterr().out)
    assert np.max(np.abs(np.array(grid["mean"]) - a_T)) <= 1e-2, (grid["mean"], a_T)
    assert np.max(np.abs(np.array(grid["cov"]) - S_T)) <= 5e-2, (grid["cov"], S_T)


@pytest.mark.slow
def test_key_bias_kind_leaves_verify_green_and_other_rows_bit_identical(keybias_kind):
    """`tpde verify --quick` rows in-process with the key-bias kind registered: every row not of that kind
    passes, the kind has rows of its own, and the rows of the registry-driven areas (symbolic, codegen,
    particles, moments) carry the same errors, to the bit, as without it (each row draws from its own
    generator).  Run once without the kind first (its parts are taken out and put back)."""
    from symbolic_tpde.validate.verify import run_checks

    areas = ("symbolic", "codegen", "particles", "moments")
    spec = kinds.KINDS.pop(keybias_kind)
    try:
        before = {(r.check, r.variant, r.d): r.error for a in areas for r in run_checks(quick=True, only=a)}
    finally:
        kinds.KINDS[keybias_kind] = spec
    rows = list(run_checks(quick=True))
    own = [r for r in rows if keybias_kind in r.variant]
    assert own and all(r.ok for r in own), [r for r in own if not r.ok]
    bad = [r for r in rows if keybias_kind not in r.variant and not r.ok]
    assert not bad, bad
    after = {(r.check, r.variant, r.d): r.error for r in rows if keybias_kind not in r.variant}
    changed = {k: (v, after.get(k)) for k, v in before.items() if after.get(k) != v}
    assert not changed, changed
