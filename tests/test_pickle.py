"""Values travel (issue 28 item 3): every public type pickles and unpickles to an equal object, one goes
through a real process pool and comes back computing the same numbers, and an error raised in the worker of
``tpde sweep``'s pool arrives in the parent as that error (it used to arrive as ``BrokenProcessPool``).

``OdeSystem`` compares by identity on purpose (its right-hand sides are DAGs too large to walk), so its copy is
checked by its content key (:func:`symbolic_tpde.codegen.compile.system_key`) and by the numbers its compiled
right-hand side gives."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
import sympy as sp

import symbolic_tpde as st
from symbolic_tpde.errors import BlowupError, ConvergenceError, InputError, NotGaussianPreserving

D = 2


def _kernel_system():
    x = sp.Matrix(sp.symbols("x0 x1"))
    y = sp.Matrix(sp.symbols("y0 y1"))
    a, b = sp.symbols("a b")
    return st.derive_kernel(a * (x.T * y)[0] + b * y[0], x, y)


def _values() -> dict:
    """One value of every public type (both backends of GaussianODE; a derivation with a local check)."""
    scn = st.load_scenario("softmax_2d")
    w = scn.schedule(0.0)
    ode_np = st.GaussianODE.from_scenario(scn, backend="numpy")
    ode_c = st.GaussianODE.from_scenario(scn, backend="c")
    system = _kernel_system()
    ode_sys = st.GaussianODE.from_system(system, {"a": 0.5, "b": 0.25}, backend="numpy")
    X0 = np.random.default_rng(0).normal(size=(40, D))
    sphere = st.load_scenario("sphere_sa_circle")
    try:
        st.GaussianODE.from_weights(st.make_weights([st.make_head("sigmoid", A=np.eye(D), V=np.eye(D), b=0.0)]))
    except NotGaussianPreserving as exc:
        ngp = exc
    document = (system.steps, system._memo["document"])[1]
    return {
        "head": w.heads[0], "weights": w, "schedule": scn.schedule, "scenario": scn, "structure": w.structure(),
        "ode_numpy": ode_np, "ode_c": ode_c, "ode_system": ode_sys,
        "solution": ode_np.integrate(scn.alpha0, scn.Sigma0, 0.5, t_eval=[0.0, 0.5]),
        "particle_run": st.particles(w, X0, 0.3, t_eval=[0.0, 0.3]),
        "sphere_scenario": sphere, "sphere_run": st.particles(sphere, n=6, T=0.2, t_eval=[0.0, 0.2]),
        "comparison": st.compare(scn, T=0.2, n=50, runs=2),
        "derivation": document, "step": document.steps[0],
        "InputError": InputError("Sigma0", "not positive definite"), "BlowupError": BlowupError(1.5, "rk4", "x"),
        "ConvergenceError": ConvergenceError("sinkhorn", "no convergence"), "NotGaussianPreserving": ngp,
    }


@pytest.fixture(scope="module")
def values():
    return _values()


def test_every_public_value_round_trips_equal(values):
    for name, v in values.items():
        back = pickle.loads(pickle.dumps(v))
        assert type(back) is type(v) and back == v, name
        assert str(back) == str(v) if isinstance(v, Exception) else True


def test_equality_can_fail(values):
    """The equalities above are by value: a changed copy is not equal."""
    import dataclasses

    run = values["particle_run"]
    X = run.X.copy()
    X[0, 0] += 1e-12
    assert dataclasses.replace(run, X=X) != run
    assert InputError("Sigma0", "other") != values["InputError"]
    sol = values["solution"]
    assert dataclasses.replace(sol, t=sol.t + 1e-15) != sol
    assert st.GaussianODE.from_weights(values["weights"], backend="numpy") != values["ode_numpy"]  # no scenario


def test_derived_system_and_its_ode_travel(values):
    from symbolic_tpde.codegen.compile import system_key

    ode = values["ode_system"]
    back = pickle.loads(pickle.dumps(ode))
    assert system_key(back.system) == system_key(ode.system)
    y = np.array([0.1, -0.2, 1.0, 0.3, 0.8])
    assert np.array_equal(back.rhs(0.0, y), ode.rhs(0.0, y))


def test_a_derivation_step_with_a_local_check_keeps_its_result(values):
    """``user_kernel_derivation`` checks some steps with local functions: the copy keeps their results, and a
    re-check there says the check did not travel instead of reporting a pass it did not make."""
    doc = pickle.loads(pickle.dumps(values["derivation"]))
    assert doc.all_checked == values["derivation"].all_checked
    local = [s for s in doc.steps if type(s.how).__name__ == "_LocalCheck"]
    assert local, "expected at least one step with a local check"
    redo = local[0].check()
    assert not redo.checked and "did not travel" in redo.method


def _rhs_in_worker(ode, y):
    return ode.rhs(0.0, y)


def _raise_in_worker(kind):
    from symbolic_tpde.analysis.sweep import head_for

    head_for(kind, np.eye(D), np.eye(D))


def test_a_gaussian_ode_through_a_process_pool(values):
    ode = values["ode_c"]
    y = np.array([0.3, -0.1, 1.2, 0.2, 0.9])
    with ProcessPoolExecutor(max_workers=1) as ex:
        got = ex.submit(_rhs_in_worker, ode, y).result(timeout=300)
    assert np.array_equal(got, ode.rhs(0.0, y))


def test_an_input_error_in_a_pool_worker_arrives_as_itself():
    with ProcessPoolExecutor(max_workers=1) as ex:
        with pytest.raises(InputError) as info:
            ex.submit(_raise_in_worker, "sigmoid").result(timeout=300)
    assert info.value.field == "kind" and "does not preserve Gaussians" in info.value.problem


def test_an_input_error_in_a_sweep_worker_arrives_as_itself():
    """``tpde sweep``'s own pool (``run_sweep`` with workers): the worker's InputError, not BrokenProcessPool."""
    from symbolic_tpde.analysis.sweep import SweepSpec, run_sweep

    with pytest.raises(InputError) as info:
        run_sweep(SweepSpec(n=1, K=1, T=1.0, kind="sigmoid"), workers=2)
    assert info.value.field == "kind"
