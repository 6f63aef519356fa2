"""C backend: agreement with numpy/SymPy/mpmath, batched loop in C, Jacobian, and the no-compiler paths."""

import numpy as np
import pytest
import sympy as sp

from symbolic_tpde.codegen import c_backend
from symbolic_tpde.codegen.cache import Cache
from symbolic_tpde.codegen.compile import CFallbackWarning, CompilerUnavailable, compile_system
from symbolic_tpde.symbolic.system import OdeSystem
from symbolic_tpde.validate.checks_codegen import compare_system, tolerance_for

from test_codegen_numpy import adversarial_system, softmax_fixture

needs_c = pytest.mark.skipif(c_backend.availability() is not None, reason=str(c_backend.availability()))


@needs_c
def test_c_matches_sympy_and_mpmath(tmp_path):
    cache = Cache(tmp_path)
    system = adversarial_system()
    crhs = compile_system(system, "c", cache=cache)
    assert crhs.backend == "c" and "tpde_rhs_batch" in crhs.source
    errs = compare_system(system, [crhs], np.random.default_rng(3), n_points=6)
    tol = tolerance_for(system)
    for key, err in errs.items():
        assert err <= tol, (key, err, tol)


@needs_c
def test_c_batch_and_jac_match_numpy(tmp_path):
    cache = Cache(tmp_path)
    system = softmax_fixture(3)
    cn = compile_system(system, "numpy", cache=cache)
    cc = compile_system(system, "c", cache=cache)
    rng = np.random.default_rng(7)
    N = 50
    Y = rng.normal(size=(N, system.n_states))
    P = rng.normal(size=(N, system.n_params))
    t = rng.uniform(size=N)
    scale = 1 + np.max(np.abs(cn.batch(t, Y, P)))
    # same CSE'd expressions, different evaluation order only in the compiler: float64 round-off
    assert np.max(np.abs(cc.batch(t, Y, P) - cn.batch(t, Y, P))) <= 1e-13 * scale
    assert np.max(np.abs(cc.batch(0.5, Y, P[0]) - cn.batch(0.5, Y, P[0]))) <= 1e-13 * scale
    assert np.max(np.abs(cc.batch(0.5, Y[0], P) - cn.batch(0.5, Y[0], P))) <= 1e-13 * scale
    assert np.max(np.abs(cc.jac(0.1, Y[0], P[0]) - cn.jac(0.1, Y[0], P[0]))) <= 1e-13 * scale
    with pytest.raises(ValueError):
        cc.f(0.0, Y[0, :-1], P[0])  # wrong size is refused before any C memory access


@needs_c
def test_c_nonfinite_propagates(tmp_path):
    x, a = sp.symbols("x a")
    system = OdeSystem((x,), (a,), (sp.exp(a * x) + 1 / x,), (), sp.Symbol("t"), {})
    cc = compile_system(system, "c", cache=Cache(tmp_path))
    assert np.isinf(cc.f(0.0, [1000.0], [1.0])[0])


def test_no_compiler_auto_falls_back_loudly(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert c_backend.find_compiler() is None
    assert "not found" in c_backend.availability()
    system = softmax_fixture(2)
    with pytest.warns(CFallbackWarning, match="falling back to the numpy backend"):
        crhs = compile_system(system, "auto", cache=Cache(tmp_path))
    assert crhs.backend == "numpy"
    assert "C backend unavailable" in capsys.readouterr().err
    with pytest.raises(CompilerUnavailable, match="backend='c'"):
        compile_system(system, "c", cache=Cache(tmp_path))


def test_no_compiler_found_by_finder(tmp_path, monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(c_backend, "find_compiler", lambda: None)
    assert c_backend.availability() == "no C compiler (gcc/cc) on PATH"
    with pytest.raises(CompilerUnavailable):
        compile_system(softmax_fixture(2), "c", cache=Cache(tmp_path))


@needs_c
def test_auto_falls_back_when_the_build_fails(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("C compilation failed (simulated)")

    from symbolic_tpde.codegen import warm

    monkeypatch.setattr(warm, "_build", broken)  # the build lives in the SymPy-free codegen.warm
    with pytest.warns(CFallbackWarning, match="C build failed"):
        crhs = compile_system(softmax_fixture(2), "auto", cache=Cache(tmp_path))
    assert crhs.backend == "numpy"
    assert "falling back to numpy" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="simulated"):
        compile_system(softmax_fixture(3), "c", cache=Cache(tmp_path))


@needs_c
def test_lane_vector_form_matches_row_by_row_and_falls_back(tmp_path):
    """The batch on gcc's vector extension (c_backend._lane_source: 8 states per vector, the last tile padded)
    gives, row by row, the same bits as the single-state call, for N not a multiple of the lane count, per-row
    parameters and times; bodies with a function call (exp here) keep the scalar form."""
    system = softmax_fixture(2)
    src = c_backend.c_source(system, "rhs")
    assert "tpde_v" in src and "rhs_lanes" in src  # softmax: plain arithmetic
    cc = compile_system(system, "c", cache=Cache(tmp_path))
    rng = np.random.default_rng(9)
    for N in (1, 7, 8, 9, 21):
        Y = rng.normal(size=(N, system.n_states))
        P = rng.normal(size=(N, system.n_params))
        t = rng.uniform(size=N)
        got = cc.batch(t, Y, P)
        assert np.array_equal(got, np.stack([cc.f(t[k], Y[k], P[k]) for k in range(N)]))
        shared = cc.batch(0.3, Y, P[0])
        assert np.array_equal(shared, np.stack([cc.f(0.3, Y[k], P[0]) for k in range(N)]))
    x, a = sp.symbols("x a")
    calls = OdeSystem((x,), (a,), (sp.exp(a * x) + 1 / x,), (), sp.Symbol("t"), {})
    assert "tpde_v" not in c_backend.c_source(calls, "rhs") and "rhs_one" in c_backend.c_source(calls, "rhs")
