"""The front door (issue 28 item 2): ``dir(symbolic_tpde)`` shows the lazy names, every public name carries a
runnable example (run here), ``docs/front_door.md``'s example runs, one reader loads both geometries, the three
verbs share one argument order and the ``t_eval`` vocabulary, old method names warn and run what they say,
nothing is printed unless asked, :func:`symbolic_tpde.compare` detects a wrong ODE, and the sphere numbers
agree with independent routes."""

from __future__ import annotations

import doctest
import inspect
import io
import re
import warnings
from contextlib import redirect_stderr
from pathlib import Path

import numpy as np
import pytest

import symbolic_tpde as st
from symbolic_tpde.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def test_dir_lists_every_public_name():
    names = dir(st)
    assert set(st.__all__) <= set(names)
    assert "moments" in names and "GaussianODE" in names and "__version__" in names


def _docstring_tests():
    finder = doctest.DocTestFinder(recurse=False)
    out = []
    import symbolic_tpde.api as api

    for obj in [st, api] + [getattr(st, n) for n in st.__all__]:
        mod = inspect.getmodule(obj) if not inspect.ismodule(obj) else obj
        name = getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))
        for t in finder.find(obj, name, module=mod, globs=vars(mod)):
            if t.examples:
                out.append(t)
    return out


def test_every_public_name_has_an_example():
    missing = [n for n in st.__all__ if ">>>" not in (inspect.getdoc(getattr(st, n)) or "")]
    assert not missing, f"public names without a runnable example in their docstring: {missing}"


@pytest.mark.timeout(300)
def test_the_docstring_examples_run():
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = _docstring_tests()
    assert len(tests) >= len(st.__all__)
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)      # the examples use the current names
        for t in tests:
            runner.run(t, out=out.write)
    res = runner.summarize(verbose=False)
    assert res.failed == 0, out.getvalue()[-4000:]


def test_the_front_door_page_runs():
    text = (ROOT / "docs" / "front_door.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "docs/front_door.md has no python example"
    ns: dict = {}
    exec(compile(blocks[0], "docs/front_door.md", "exec"), ns)     # noqa: S102 - our own documentation
    assert ns["cmp"].max_z < 6 and np.all(ns["cmp"].sensitivity[1:] > 10)     # t = 0: nothing moved yet


# ------------------------------------------------------------------------------------------ one reader
def test_one_reader_for_both_geometries():
    from symbolic_tpde.numerics.particles.sphere import SphereScenario, load_sphere_scenario

    sph = st.load_scenario("sphere_ngpt")
    assert isinstance(sph, SphereScenario) and sph == load_sphere_scenario("sphere_ngpt")
    assert st.load_scenario("softmax_2d").geometry == "R^d" if hasattr(st.Scenario, "geometry") else True
    with pytest.raises(InputError) as info:
        st.load_scenario(str(ROOT / "tests"))
    assert info.value.field == "scenario"


def test_a_sphere_scenario_file_loads_through_the_front_door(tmp_path):
    p = tmp_path / "s.json"
    p.write_text('{"geometry": "sphere", "attention": "sphere_sa", "d": 3, "beta": 1.0, "A": "identity", '
                 '"V": "identity", "init": {"type": "uniform_sphere"}, "T": 1.0}')
    scn = st.load_scenario(p)
    assert scn.geometry == "sphere" and scn.d == 3
    run = st.particles(scn, n=5, seed=1, t_eval=[0.0, 0.5, 1.0])
    assert run.times.tolist() == [0.0, 0.5, 1.0] and np.allclose(np.linalg.norm(run.trajectory, axis=-1), 1)
    with pytest.raises(InputError):
        st.moments(scn)


# -------------------------------------------------------------------------------------------- the verbs
def test_the_verbs_share_argument_order_and_t_eval():
    for verb in (st.moments, st.particles, st.compare):
        params = list(inspect.signature(verb).parameters.values())
        assert params[0].name == "model" and params[-1].kind != inspect.Parameter.POSITIONAL_OR_KEYWORD
        assert "t_eval" in inspect.signature(verb).parameters
        assert params[3 if verb is not st.particles else 2].name == "T"


def test_particles_t_eval_for_every_method_are_the_integrators_values():
    """``t_eval`` on the fixed-step grids equals a run that stops there (same steps); ``dopri5``'s dense output
    and ``ivp`` agree with a fine RK4 run (its own error 3e-12 against 800 steps) within 100 times their
    tolerance 1e-9 (global error of ~20 steps of local error <= tol, order-5 dense output)."""
    w = st.make_weights([st.make_head("softmax", A=0.5 * np.eye(2), V=-np.eye(2))])
    X0 = np.random.default_rng(3).normal(size=(30, 2))
    ts = [0.0, 0.3, 1.0]
    for method in ("rk4", "euler"):
        run = st.particles(w, X0, 1.0, t_eval=ts, method=method, steps=10)
        assert run.times.tolist() == ts and run.trajectory.shape == (3, 30, 2)
        part = st.particles(w, X0, 0.3, method=method, steps=3)        # h = 0.1: the same first three steps
        assert np.allclose(run.trajectory[1], part.X, rtol=0, atol=1e-14)
    fine = st.particles(w, X0, 1.0, t_eval=ts, method="rk4", steps=400)    # RK4, h = 2.5e-3: error ~ 1e-11
    for method in ("dopri5", "ivp"):
        run = st.particles(w, X0, 1.0, t_eval=ts, method=method, rtol=1e-9, atol=1e-9)
        assert run.times.tolist() == ts
        assert np.abs(run.trajectory - fine.trajectory).max() < 100 * 1e-9, method
    with pytest.raises(InputError):
        st.particles(w, X0, 1.0, t_eval=[0.5, 0.2])


def test_old_method_names_warn_and_run_what_they_say():
    w = st.make_weights([st.make_head("softmax", A=np.eye(2), V=-np.eye(2))])
    X0 = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.warns(DeprecationWarning, match="Dormand-Prince"):
        old = st.simulate(X0, w, 0.5, method="rk4")
    assert old == st.simulate(X0, w, 0.5, method="dopri5") and old.method == "dopri5"
    with pytest.warns(DeprecationWarning, match="method='ivp'"):
        old = st.simulate(X0, w, 0.5, method="adaptive")
    assert old == st.simulate(X0, w, 0.5, method="ivp") and old.method == "ivp"
    assert st.simulate(X0, w, 0.5, steps=5).method == "rk4"


def test_nothing_is_printed_unless_asked():
    w = st.make_weights([st.make_head("softmax", A=np.eye(2), V=-np.eye(2))])
    X0 = np.random.default_rng(0).normal(size=(20, 2))
    quiet, loud = io.StringIO(), io.StringIO()
    with redirect_stderr(quiet):
        st.particles(w, X0, 0.5)
        st.moments(w, [0.0, 0.0], np.eye(2), 0.5)
    with redirect_stderr(loud):
        st.particles(w, X0, 0.5, progress=True)
    assert quiet.getvalue() == "" and "100.0%" in loud.getvalue()
    assert inspect.signature(st.simulate).parameters["progress"].default is False


def test_compare_finds_a_wrong_ode_and_passes_the_right_one():
    """Same clouds, the model's ODE vs the ODE of other weights: the t-statistic is small for the first and
    large for the second (the comparison can fail); paired mode removes the initial sampling error."""
    scn = st.load_scenario("softmax_2d")
    right = st.compare(scn, n=300, runs=6, seed=5, t_eval=[0.5, 1.0])
    wrong_w = st.make_weights([st.make_head("softmax", A=np.zeros((2, 2)), V=np.eye(2))])
    wrong = st.compare(scn, n=300, runs=6, seed=5, t_eval=[0.5, 1.0], ode=st.GaussianODE.from_weights(wrong_w))
    assert right.max_z < 6 < 20 < wrong.max_z
    assert np.array_equal(right.mean, wrong.mean)          # the same particle runs
    paired = st.compare(scn, n=300, runs=6, seed=5, t_eval=[1.0], paired=True)
    assert paired.se[-1].max() < right.se[-1].max()


def test_a_derived_kernel_runs_as_particles_and_matches_its_moment_ode():
    """A user kernel with a key-quadratic term: its particles (the ``custom`` head of its form) against its
    own moment ODE, paired runs; and the particle field equals the custom kind's on the same numbers."""
    import sympy as sp

    x, y = sp.Matrix(sp.symbols("x0 x1")), sp.Matrix(sp.symbols("y0 y1"))
    a, b = sp.symbols("a b")
    system = st.derive_kernel(a * (x.T * y)[0] + b * y[0] - (y.T * y)[0] / 4, x, y)
    values = {"a": 0.5, "b": 0.3}
    c = st.compare(system, [0.2, -0.1], [[1.0, 0.2], [0.2, 0.8]], 1.0, values=values, n=800, runs=6, seed=2,
                   paired=True)
    assert c.max_z < 6 and c.sensitivity[-1] > 10
    X = np.random.default_rng(0).normal(size=(7, 2))
    w = st.make_weights([st.make_head("custom", B=0.5 * np.eye(2), R=-0.25 * np.eye(2), r=[0.3, 0.0],
                                      V=np.eye(2))])
    run = st.particles(system, X, 0.2, values=values, method="rk4", steps=4)
    assert np.allclose(run.X, st.particles(w, X, 0.2, method="rk4", steps=4).X, rtol=0, atol=1e-14)
    with pytest.raises(InputError):
        st.particles(system, X, 0.2, values={"a": 0.5})


# ------------------------------------------------------------------------------------ sphere as numbers
def test_sphere_linear_rates_match_the_bessel_formula():
    """``λ_k = k² I_k(β)/(β I_0(β))`` (SA on the circle, DLMF 10.32.3 route; scipy's Bessel functions)."""
    from scipy.special import iv

    beta = 3.0
    out = st.sphere_numbers("sphere_sa", "post", beta=beta, n=4)
    k = np.arange(1, len(out["linear"]["rates"]) + 1)
    ref = k ** 2 * iv(k, beta) / (beta * iv(0, beta))
    assert np.allclose(out["linear"]["rates"], ref, rtol=1e-12)
    assert out["linear"]["fastest_mode"] == int(k[np.argmax(ref)])


@pytest.mark.timeout(300)
def test_equiangular_t_star_and_pre_ln_constant_against_particles():
    """Three tokens of S³ with pairwise cosine ρ₀ = 0.2 (an equiangular configuration): the particle run
    reaches ``1 - δ`` when the reduction's ``t*`` says (to the frame spacing plus the run's tolerance), and
    under Pre-LN ``t²(1 - ρ)`` of the particles matches the reduction's curve at the same t."""
    from symbolic_tpde.analysis.sphere_verdict import equiangular_curve

    rho0, n, beta = 0.2, 3, 1.0
    X0 = np.hstack([np.sqrt(1 - rho0) * np.eye(3), np.full((3, 1), np.sqrt(rho0))])
    w = st.make_weights([st.make_head("sphere_sa", beta=beta, A=np.eye(4), V=np.eye(4))])
    num = st.sphere_numbers("sphere_sa", "post", beta=beta, n=n, rho0=rho0)
    from symbolic_tpde.numerics.particles.sphere import simulate_sphere

    ts = np.linspace(0.0, 1.2 * num["t_star"], 241)
    run = simulate_sphere(X0, w, ts[-1], norm="post", t_eval=ts)
    got = st.sphere_numbers("sphere_sa", "post", beta=beta, n=n, rho0=rho0, run=run)["time_to_one_cluster"]
    assert abs(got - num["t_star"]) <= ts[1] - ts[0] + 1e-6
    pre = st.sphere_numbers("sphere_sa", "pre", beta=beta, n=n, rho0=rho0, T=400.0)
    assert pre["rate"]["power"] == 2.0
    runp = simulate_sphere(X0, w, 50.0, norm="pre", t_eval=[50.0])
    th = runp.trajectory[-1] / np.linalg.norm(runp.trajectory[-1], axis=1, keepdims=True)
    f_particles = 50.0 ** 2 * (1 - (th @ th.T)[0, 1])
    sol, _ = equiangular_curve("pre", "sphere_sa", n, beta, rho0, 50.0, t_eval=[50.0])
    f_curve = 50.0 ** 2 * (1 - sol.y[-1, 0])
    assert abs(f_particles - f_curve) < 1e-4 * f_curve           # tolerance 1e-10 on ρ, times t² = 2500
    longer = st.sphere_numbers("sphere_sa", "pre", beta=beta, n=n, rho0=rho0, T=4000.0)["pre_ln_constant"]
    assert abs(longer["value"] - pre["pre_ln_constant"]["value"]) <= 2 * pre["pre_ln_constant"]["error"]
