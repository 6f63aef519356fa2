"""Staged code generation (codegen/numpy_backend.py::dag_cse, issue 12 item 3) and the vectorised C batch.

Checked numerically, never by comparing CSE text (README habit 4): the staged programs evaluate to the same
numbers as the globally CSE'd ones at seeded random points.  Tolerance 1e-12 relative: both evaluate the same
expression DAG in float64 with a different association of a few sums (round-off ~1e-15 per operation times
the ~10² operations on a path at d = 3).
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.codegen import c_backend
from symbolic_tpde.codegen.cache import Cache
from symbolic_tpde.codegen.numpy_backend import _temp_symbols, dag_cse, load_source, numpy_source, reduce_cse
from symbolic_tpde.symbolic.moments import derive_gaussian_system


def _system(kind="softmax", d=3):
    names = (("A", (d, d)), ("V", (d, d))) if kind == "softmax" else (("Q", (d, d)), ("K", (d, d)), ("V", (d, d)),
                                                                       ("tau", ()))
    return derive_gaussian_system((d, ((kind, names),), False, False))


def test_dag_cse_is_exact_and_as_small_as_global_cse():
    x, y, z = sp.symbols("x y z")
    shared = (x + y) * z
    exprs = [shared + sp.sin(shared), shared ** 2 - x]
    temps, reduced = dag_cse(exprs, _temp_symbols("w_"))
    back = [e.subs(list(reversed(temps))) for e in reduced]
    for e, b in zip(exprs, back):
        assert sp.simplify(e - b) == 0           # exact: substituting the temporaries back gives the input
    assert len(temps) >= 1                       # the shared product got a name
    S = _system("softmax", 4)
    ex = [sp.sympify(e) for e in S.rhs]
    t1, r1 = dag_cse(ex, _temp_symbols("a_"))
    t2, r2 = reduce_cse(ex, staged=False)
    ops = [sum(sp.count_ops(e) for _, e in t) + sum(sp.count_ops(e) for e in r) for t, r in ((t1, r1), (t2, r2))]
    assert ops[0] <= 1.1 * ops[1], ops          # measured: 418 vs 412 operations at d = 4


@pytest.mark.parametrize("kind", ["softmax", "l2"])
def test_staged_programs_match_global_cse(kind):
    S = _system(kind, 3 if kind == "softmax" else 2)
    rng = np.random.default_rng(4)
    Y = rng.standard_normal((7, S.n_states)) * 0.3
    Y[:, S.n_states - 6 if S.n_states >= 6 else 0] += 1.0
    P = rng.standard_normal((7, S.n_params)) * 0.3 + 0.5
    a = load_source(numpy_source(S, staged=False))
    b = load_source(numpy_source(S, staged=True))
    ref = a["batch"](0.1, Y, P)
    np.testing.assert_allclose(b["batch"](0.1, Y, P), ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    if c_backend.availability() is None:
        mod = c_backend.build_module(c_backend.c_source(S, staged=True), "rhs", Cache())
        from symbolic_tpde.codegen.warm import c_callables

        f, batch = c_callables(mod, S.n_states, S.n_params)
        got = batch(0.1, Y, P)                   # per-row parameters, odd N: the vector loop's remainder
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
        np.testing.assert_allclose(f(0.1, Y[3], P[3]), ref[3], rtol=1e-12, atol=1e-12 * np.abs(ref).max())
