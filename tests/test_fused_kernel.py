"""The fused C attention kernel (symbolic_tpde/numerics/particles/fused.py) against a long-double loop reference and
the blocked numpy path; its exp accuracy; its fallback; bitwise determinism of both paths across runs and
thread counts (issue 11, "same seed, different answer").

Tolerances, from float round-off (eps = 2.2e-16 in float64, 1.2e-7 in float32): logits of size <= L ~ 6 carry
absolute error ~ (p + 1) L eps, which is the relative error of each weight; the kernel's exp adds < 1 eps
(measured 0.61/0.62 eps below); sums of n <= 200 terms add <= n eps in float64 (float32 sums run in blocks
of 1024 keys in float32 with float64 totals: ~n/16 eps).  Bounds: float64 ~ (17·6 + 1 + 200) eps < 1e-13,
float32 ~ (17·6 + 1 + 13) eps ~ 1.4e-5 < 3e-5 relative to the scale sum_j w_ij |v_j|.  (Measured worst
over the grid below: 1.3e-15 float64, 4.9e-7 float32; the numpy path: 1.7e-15, 7.3e-7.)
"""

from __future__ import annotations

import platform
import subprocess
import sys

import numpy as np
import pytest

from symbolic_tpde.codegen import cbuild
from symbolic_tpde.errors import InputError
from symbolic_tpde.numerics.particles import attend as fields_core, fused, fused_flash, fused_rows, fused_simd
from symbolic_tpde.numerics.particles.attend import attend, attend_numpy

needs_c = pytest.mark.skipif(fused.available() is not None, reason=str(fused.available()))
TOL = {np.float64: 1e-13, np.float32: 3e-5}  # see the module docstring
EPS = {np.float64: 2.0 ** -52, np.float32: 2.0 ** -23}


def reference(q, k, v, mode, bias=None, shift=0.0, prefix=None, sink_logit=None, sink_value=None):
    """Row-by-row loop in long double: ``(out, scale)`` with scale_i = the same average of |v| (for tolerances)."""
    q, k, v = (np.asarray(a, np.longdouble) for a in (q, k, v))
    n_q, n_k, d = q.shape[0], k.shape[0], v.shape[1]
    out, scale = np.zeros((n_q, d), np.longdouble), np.zeros((n_q, d), np.longdouble)
    for i in range(n_q):
        kmax = n_k if prefix is None else int(prefix[i])
        l = k[:kmax] @ q[i] + (0 if bias is None else np.asarray(bias, np.longdouble)[:kmax])
        if mode == "sigmoid":
            w = 1 / (1 + np.exp(-(l + shift)))
            out[i], scale[i] = w @ v[:kmax] / n_k, w @ np.abs(v[:kmax]) / n_k
            continue
        if mode == "exp":
            w = np.exp(l)
            out[i], scale[i] = w @ v[:kmax] / n_k, w @ np.abs(v[:kmax]) / n_k
            continue
        m = max(l.max(initial=-np.inf), -np.inf if sink_logit is None else sink_logit[i])
        w = np.exp(l - m)
        num, den, sc = w @ v[:kmax], w.sum(), w @ np.abs(v[:kmax])
        if sink_logit is not None:
            ws = np.exp(np.longdouble(sink_logit[i]) - m)
            sv = np.asarray(sink_value, np.longdouble)
            num, den, sc = num + ws * sv, den + ws, sc + ws * np.abs(sv)
        out[i], scale[i] = num / den, sc / den
    return out, scale


def case(rng, n_q, n_k, p, d, dt, mode, opts):
    q = (rng.standard_normal((n_q, p)) * 1.5 / np.sqrt(p)).astype(dt)
    k = rng.standard_normal((n_k, p)).astype(dt)
    v = rng.standard_normal((n_k, d)).astype(dt)
    kw = {}
    if "bias" in opts:
        kw["key_bias"] = (rng.standard_normal(n_k) - 1).astype(dt)
    if "prefix" in opts:  # query i sees keys 0..prefix_i - 1; zeros only when a sink is present
        kw["prefix"] = rng.integers(0 if "sink" in opts else 1, n_k + 1, n_q)
    if "sink" in opts:
        kw["sink_logit"] = rng.standard_normal(n_q).astype(dt)
        kw["sink_value"] = rng.standard_normal(d).astype(dt)
    if mode == "sigmoid":
        kw["shift"] = -0.7
    return q, k, v, kw


CASES = [("softmax", ()), ("softmax", ("bias",)), ("softmax", ("prefix",)), ("softmax", ("sink",)),
         ("softmax", ("bias", "prefix", "sink")), ("sigmoid", ()), ("exp", ()), ("exp", ("bias", "prefix"))]


# every case at (p, d) = (2, 2) in the fast suite; (4, 12) (d > 8: the buffered accumulation) and a spanning
# subset elsewhere under the slow marker (each variant is one compilation, ~0.5 s cold)
GRID = ([(m, o, 2, 2) for m, o in CASES]
        + [pytest.param(m, o, p, d, marks=pytest.mark.slow) for m, o in CASES for p, d in [(4, 12)]]
        + [pytest.param(m, o, p, d, marks=pytest.mark.slow)
           for m, o in [CASES[0], CASES[4], CASES[5], CASES[7]] for p, d in [(1, 1), (3, 5), (8, 8)]])


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("mode,opts,p,d", GRID)
def test_fused_matches_reference_and_numpy(mode, opts, p, d, dt):
    rng = np.random.default_rng([p, d, len(opts), sum(map(ord, mode))])   # stable across processes
    q, k, v, kw = case(rng, 37, 200, p, d, dt, mode, opts)
    got = fused.attend_fused(q, k, v, mode=mode, threads=2, **{
        "key_bias": None, "shift": 0.0, "prefix": None, "sink_logit": None, "sink_value": None, **kw})
    assert got is not None and got.dtype == dt and got.shape == (37, d)
    ref, scale = reference(q, k, v, mode, kw.get("key_bias"), kw.get("shift", 0.0), kw.get("prefix"),
                           kw.get("sink_logit"), kw.get("sink_value"))
    err = np.abs(got.astype(np.longdouble) - ref) / scale
    assert float(err.max()) < TOL[dt], (mode, opts, float(err.max()))
    slow = attend_numpy(q, k, v, mode=mode, **kw)
    assert float((np.abs(slow.astype(np.longdouble) - got) / scale).max()) < 2 * TOL[dt]


@needs_c
@pytest.mark.parametrize("dt,cut", [(np.float64, -708.0), (np.float32, -87.0)])
def test_kernel_exp_accuracy(dt, cut):
    """The plain-C exp within 1 eps relative (measured 0.61 eps float64, 0.62 eps float32) on x <= 0,
    exactly 0 below the cut (true value < 3.3e-308 / 1.7e-38), exp(0) = 1, exp(-inf) = 0, NaN propagates."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-745, 0, 10 ** 6), rng.uniform(-1, 0, 10 ** 6),
                        -np.logspace(-30, 0, 10 ** 5)]).astype(dt)
    y = fused.kernel_exp(x)
    ref = np.exp(x.astype(np.longdouble))
    ok = x >= cut
    rel = float((np.abs(y[ok] - ref[ok]) / ref[ok]).max())
    assert rel < EPS[dt], rel / EPS[dt]
    assert (y[~ok] == 0).all()
    special = fused.kernel_exp(np.array([0.0, -0.0, -np.inf, np.nan], dt))
    assert special[0] == 1 and special[1] == 1 and special[2] == 0 and np.isnan(special[3])


def check_loop_exp(dt):
    """The exp of the softmax loops, by the form this build compiled (fused.simd_compiled): within 1 eps relative
    wherever the result is a normal number; below that, AVX-512's form rounds subnormal results (within one
    unit of the smallest subnormal; exactly 0 from -746 / -105 down), the AVX2 and plain-C forms give 0 from
    -708 / -87 down (the true value is below 3.3e-308 / 1.7e-38);
    exp(0) = 1, exp(-inf) = 0, NaN propagates.  Measured: AVX-512 0.92 eps (float64), 0.90 eps (float32), bound
    1.2 eps (fused_simd docstring)."""
    info = np.finfo(dt)
    form = fused.simd_compiled(dt)
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.uniform(-800, 0, 10 ** 6), rng.uniform(-1, 0, 10 ** 6), rng.uniform(-1e-3, 0, 10 ** 5),
                        -np.logspace(-30, 0, 10 ** 5), rng.uniform(-2e5, -700, 10 ** 4)]).astype(dt)
    y = fused.kernel_exp(x, loops=True)
    ref = np.exp(x.astype(np.longdouble))
    normal = ref >= info.tiny
    if form != "avx512":  # the cut of these forms lies just inside the normal range (e^-708 = 3.3e-308)
        normal &= x >= (-708.0 if dt == np.float64 else -87.0)
    rel = float((np.abs(y[normal] - ref[normal]) / ref[normal]).max())
    assert rel < EPS[dt], (rel / EPS[dt], form)
    if form == "avx512":
        assert float(np.abs(y[~normal] - ref[~normal]).max()) <= info.smallest_subnormal
        assert (y[x <= (-746 if dt == np.float64 else -105)] == 0).all()
    else:
        assert (y[~normal] == 0).all(), form
    special = fused.kernel_exp(np.array([0.0, -0.0, -np.inf, np.nan], dt), loops=True)
    assert special[0] == 1 and special[1] == 1 and special[2] == 0 and np.isnan(special[3])


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_loop_exp_accuracy(dt):
    check_loop_exp(dt)


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_exp_mode_overflow_semantics(dt):
    """Unnormalised mode: inf only when the true value overflows; a zero sum gives 0 (0·inf = 0)."""
    big = 710.0 if dt == np.float64 else 89.0  # e^big overflows the dtype, e^big / 2 does not
    q = np.array([[1.0], [1.0], [1.0], [big + 10]], dt)
    k = np.array([[big]], dt)
    out = attend(q, k, np.array([[0.5]], dt), mode="exp")
    assert np.isfinite(out[:3]).all() and np.isinf(out[3, 0])
    true = np.exp(np.longdouble(big)) / 2
    assert abs(out[0, 0] / true - 1) < 1000 * EPS[dt]  # log/exp round trip at |ls| ~ 710: ~|ls| eps
    zero = attend(q[:1], k, np.zeros((1, 1), dt), mode="exp")
    assert zero[0, 0] == 0
    neg = attend(q[:1], k, np.array([[-0.5]], dt), mode="exp")
    assert neg[0, 0] == -out[0, 0]


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("p", [1, 40])   # the numpy path, and the rows path (BLAS logits) where compiled
def test_exp_mode_near_overflow_numpy_and_rows_paths(dt, p):
    """The blocked paths share the fused kernel's semantics in unnormalised mode: e^{m - log n} may overflow
    the dtype while the result does not (found by a fuzz of fused vs numpy: the numpy path gave ±inf there)."""
    big = 712.0 if dt == np.float64 else 92.0  # e^big overflows the dtype; e^big * 1e-3 / 2 does not
    q = np.zeros((2, p), dt)
    q[:, 0] = [1.0, 1.0]
    k = np.zeros((2, p), dt)
    k[:, 0] = [big, big - 1]
    v = np.array([[1e-3], [-2e-3]], dt)
    true = (np.exp(np.longdouble(big)) * 1e-3 - np.exp(np.longdouble(big - 1)) * 2e-3) / 2
    for got in (attend_numpy(q, k, v, mode="exp"), attend(q, k, v, mode="exp")):
        assert np.isfinite(got).all(), got
        assert abs(float(got[0, 0] / true) - 1) < 1000 * EPS[dt]  # log/exp round trip at |ls| ~ 712: ~|ls| eps
    huge = attend_numpy(q, k, np.array([[1e3], [0.0]], dt), mode="exp")   # the true value overflows: inf
    assert np.isinf(huge).all() and (huge > 0).all()


@needs_c
@pytest.mark.parametrize("mode", ["softmax", "exp", "sigmoid"])
def test_overflowing_logits_behave_as_in_the_numpy_path(mode):
    """A logit that overflows to inf must stay visible as a non-finite field (the integrators report blow-up)
    in softmax/exp mode, exactly as in the numpy path; sigmoid saturates at σ(inf) = 1 in both."""
    q = np.array([[1e200, 0.0], [0.0, 1.0]])
    k = np.array([[1e200, 0.0], [0.0, 1.0]])
    v = np.ones((2, 2))
    fast = fused.attend_fused(q, k, v, mode=mode, key_bias=None, shift=0.0, prefix=None, sink_logit=None,
                              sink_value=None, threads=1)
    with np.errstate(all="ignore"):
        slow = attend_numpy(q, k, v, mode=mode)
    np.testing.assert_array_equal(np.isfinite(fast), np.isfinite(slow))
    assert np.isfinite(fast[0]).all() == (mode == "sigmoid")
    np.testing.assert_allclose(fast[1], slow[1], rtol=1e-15)


@needs_c
def test_thread_count_respected_and_bitwise_identical():
    rng = np.random.default_rng(3)
    q, k, v, kw = case(rng, 1000, 700, 2, 2, np.float64, "softmax", ("bias", "prefix", "sink"))
    runs = {}
    for threads in (1, 2, 3, 1, 2):
        runs.setdefault(threads, []).append(fused.attend_fused(q, k, v, mode="softmax", shift=0.0,
                                                               threads=threads, **kw))
        assert fused.STATE.last_threads == threads  # 63 chunks of 16 queries: every thread gets work
    first = runs[1][0]
    assert all(np.array_equal(first, r) for rs in runs.values() for r in rs)
    fused.attend_fused(q[:20], k, v, mode="softmax", shift=0.0, threads=8, **{
        **kw, "prefix": kw["prefix"][:20], "sink_logit": kw["sink_logit"][:20]})
    assert fused.STATE.last_threads == 2  # only 2 chunks of 16 queries
    assert fused.default_threads(100) == 1 and fused.default_threads(10 ** 8) >= 1


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("mode,opts", [("softmax", ("bias", "sink")), ("exp", ("bias",)), ("sigmoid", ())])
def test_query_tiles_bitwise_equal_to_one_query_per_pass(mode, opts, dt):
    """The tiled kernel (d = 4: 8 queries per pass over the keys) gives bitwise the result of the one-query
    loop (tile 1), at any thread count; 37 queries = chunks of 16, 16, 5, so partial (padded) tiles occur;
    1100 keys span two float32 blocks of 1024.  Accuracy against the reference: the grid test above."""
    assert fused.tile_size(4) == 8 and fused.tile_size(2) == fused.tile_size(12) == 1
    rng = np.random.default_rng([7, len(opts), sum(map(ord, mode))])
    q, k, v, kw = case(rng, 37, 1100, 3, 4, dt, mode, opts)
    kw = {"key_bias": None, "shift": 0.0, "prefix": None, "sink_logit": None, "sink_value": None, **kw}
    one = fused.attend_fused(q, k, v, mode=mode, threads=1, tile=1, **kw)
    assert one is not None and np.isfinite(one).all()
    for tile, threads in [(8, 1), (8, 2), (8, 3), (3, 2), (4, 1)]:
        got = fused.attend_fused(q, k, v, mode=mode, threads=threads, tile=tile, **kw)
        assert np.array_equal(got, one), (tile, threads, float(np.abs(got - one).max()))
    # a query's result does not depend on its neighbours: a single query alone (a padded tile) agrees
    row = fused.attend_fused(q[5:6], k, v, mode=mode, threads=1, **{
        **kw, "sink_logit": None if kw["sink_logit"] is None else kw["sink_logit"][5:6]})
    assert np.array_equal(row[0], one[5])


@pytest.mark.parametrize("control", ["as-found", "threadpoolctl"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_numpy_path_bitwise_deterministic(control, dt, monkeypatch):
    """256-row blocks x 3000 keys are above OpenBLAS's threading threshold, where its 2-thread gemm sums
    differently from its 1-thread gemm: the per-worker toggling of a process-wide limit made runs differ."""
    if control == "threadpoolctl":
        pytest.importorskip("threadpoolctl")
        monkeypatch.setattr(fields_core._BLAS, "thread_local", False)
        monkeypatch.setattr(fields_core._BLAS, "name", "threadpoolctl")
    rng = np.random.default_rng(11)
    X = rng.standard_normal((3000, 2)).astype(dt)
    ref = attend_numpy(X, X, X, block=256, threads=1)
    for threads in (2, 2, 2, None, 1):
        assert np.array_equal(attend_numpy(X, X, X, block=256, threads=threads), ref)


def test_field_evaluation_bitwise_repeatable():
    """The same field evaluation, repeated and with threads = 1 / 2 / default: bitwise equal (issue 11)."""
    from symbolic_tpde.numerics.particles.fields import softmax_field

    rng = np.random.default_rng(42)
    for dt in (np.float32, np.float64):
        X = rng.standard_normal((3000, 2)).astype(dt)
        A, V = np.array([[1.0, 0.3], [0.0, 0.8]]), np.eye(2)
        ref = softmax_field(X, A, V, threads=1)
        for threads in (2, None, 2, 1):
            assert np.array_equal(softmax_field(X, A, V, threads=threads), ref)


@needs_c
def test_large_p_and_unsupported_calls_leave_the_fused_kernel(monkeypatch):
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((10, 40)), rng.standard_normal((12, 40)), rng.standard_normal((12, 3))
    none = dict(key_bias=None, shift=0.0, prefix=None, sink_logit=None, sink_value=None, threads=1)
    assert fused.attend_fused(q, k, v, mode="softmax", **none) is None  # p >= MAX_P: BLAS logits (fused_rows)
    assert fused.attend_fused(q[:, :3], k[:, :3], v, mode="sigmoid", **{**none, "key_bias": np.zeros(12)}) is None
    assert fused.attend_fused(q[:, :3].astype(np.float32), k[:, :3], v, mode="softmax", **none) is None
    assert fused_rows.row_pass("exp", np.float64, key_bias=None, shift=0.0, prefix=None,
                               sink_logit=np.zeros(10), sink_value=np.zeros(3)) is None
    mixed = attend(q.astype(np.float32), k, v)  # mixed dtypes: plain numpy path
    np.testing.assert_array_equal(mixed, attend_numpy(q.astype(np.float32), k, v))
    monkeypatch.setattr(fields_core, "USE_FUSED", False)
    np.testing.assert_array_equal(attend(q, k, v), attend_numpy(q, k, v))


# Large p (or d > MAX_D): BLAS logits + the compiled row pass of fused_rows, against the numpy path and the
# long-double reference.  Tolerances: both paths take the logits from the same BLAS product; they differ by
# the exp (< 1 eps each, measured above) and the summation order of sums of n_k terms (<= n_k eps each,
# linear worst case): float64 (2 + 2 · 200) eps = 9e-14 < 1e-13 (the target), float32 the issue's
# 1e-5 (the linear bound 400 eps = 4.8e-5 is far from what round-off does: measured 1.9e-7).
ROWS_TOL = {np.float64: 1e-13, np.float32: 1e-5}


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("mode,opts", CASES)
def test_large_p_rows_path_matches_numpy_and_reference(mode, opts, dt, monkeypatch):
    # the rows path itself (what plain-C builds run above the crossover): the key-blocked kernel set aside
    monkeypatch.setattr(fused_flash, "prefers", lambda *a: False)
    rng = np.random.default_rng([40, len(opts), sum(map(ord, mode))])
    q, k, v, kw = case(rng, 37, 200, 40, 3, dt, mode, opts)
    got = attend(q, k, v, mode=mode, block=16, threads=2, **kw)   # 3 row blocks over 2 threads
    assert got.dtype == dt and got.shape == (37, 3)
    variant = ("rows", mode, np.dtype(dt).str, "bias" in opts, "prefix" in opts, "sink" in opts)
    assert (variant, fused.isa_form()) in fused.STATE.modules  # the compiled row pass ran
    slow = attend_numpy(q, k, v, mode=mode, **kw)
    assert not np.array_equal(got, slow) or mode == "sigmoid"  # a different computation (not the same path)
    ref, scale = reference(q, k, v, mode, kw.get("key_bias"), kw.get("shift", 0.0), kw.get("prefix"),
                           kw.get("sink_logit"), kw.get("sink_value"))
    assert float((np.abs(got.astype(np.longdouble) - slow) / scale).max()) < ROWS_TOL[dt]
    assert float((np.abs(got.astype(np.longdouble) - ref) / scale).max()) < TOL[dt]


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_rows_path_large_d_many_keys_and_overflow(dt):
    """d > MAX_D (p small) also takes the row pass; 3000 keys cross the float32 partial-sum blocks (1024);
    an overflowing logit gives a non-finite row exactly where the numpy path does."""
    rng = np.random.default_rng(7)
    q, k, v, kw = case(rng, 50, 3000, 3, fused.MAX_D + 6, dt, "softmax", ("bias", "sink"))
    got = attend(q, k, v, **kw)
    slow = attend_numpy(q, k, v, **kw)
    ref, scale = reference(q, k, v, "softmax", kw["key_bias"], 0.0, None, kw["sink_logit"], kw["sink_value"])
    # sums of 3000 terms: float64 linear bound 6000 eps = 1.3e-12; float32 as above (measured ~3e-7)
    tol = {np.float64: 2e-12, np.float32: 1e-5}[dt]
    assert float((np.abs(got.astype(np.longdouble) - slow) / scale).max()) < tol
    assert float((np.abs(got.astype(np.longdouble) - ref) / scale).max()) < tol
    qb = np.zeros((2, 40), dt)
    qb[0, 0] = np.finfo(dt).max
    kb = np.zeros((3, 40), dt)
    kb[1, 0] = 2.0  # logit of query 0, key 1: overflows to inf
    with np.errstate(all="ignore"):
        fast, slow = attend(qb, kb, np.ones((3, 2), dt)), attend_numpy(qb, kb, np.ones((3, 2), dt))
    np.testing.assert_array_equal(np.isfinite(fast), np.isfinite(slow))
    assert not np.isfinite(fast[0]).any() and np.allclose(fast[1], 1.0)


@pytest.fixture
def fresh_state(monkeypatch, tmp_path):
    monkeypatch.setenv("TPDE_CACHE_DIR", str(tmp_path / "cache"))
    fused.STATE.reset()
    yield
    fused.STATE.reset()  # later tests reload their kernels from the cache


def test_fallback_without_compiler_is_announced_once(fresh_state, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert "not found" in fused.available()
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 2))
    with pytest.warns(fused.FusedFallbackWarning, match="numpy path") as rec:
        a = attend(X, X, X)
        b = attend(X, X, X, mode="sigmoid")
    assert len([w for w in rec if issubclass(w.category, fused.FusedFallbackWarning)]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "fused particle kernel" in line]
    assert len(lines) == 1 and "no-such-compiler" in lines[0]
    np.testing.assert_array_equal(a, attend_numpy(X, X, X))
    np.testing.assert_array_equal(b, attend_numpy(X, X, X, mode="sigmoid"))


@needs_c
def test_fallback_when_the_build_fails(fresh_state, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("C compilation failed (simulated)")

    monkeypatch.setattr(cbuild, "compile_extension", broken)
    X = np.random.default_rng(2).standard_normal((40, 3))
    with pytest.warns(fused.FusedFallbackWarning, match="simulated"):
        np.testing.assert_array_equal(attend(X, X, X), attend_numpy(X, X, X))
    assert "simulated" in capsys.readouterr().err


def test_disabled_by_environment(fresh_state, monkeypatch, recwarn):
    monkeypatch.setenv("TPDE_FUSED", "0")
    X = np.random.default_rng(3).standard_normal((30, 2))
    np.testing.assert_array_equal(attend(X, X, X), attend_numpy(X, X, X))
    assert not [w for w in recwarn if issubclass(w.category, fused.FusedFallbackWarning)]


def test_cache_key_carries_cpu_and_flags(monkeypatch):
    src = fused.c_source("softmax", np.float64, 2, 2)
    key = fused._key(src, ["gcc"])
    assert "-march=native" in fused.CFLAGS and cbuild.cpu_signature()
    monkeypatch.setattr(cbuild, "cpu_signature", lambda: "vendor_id=other;flags=sse2")
    assert fused._key(src, ["gcc"]) != key
    assert "tpde_attend" in src and "templates/fused_attend.c rendered" in src


def test_fused_path_stays_sympy_free():
    code = ("import sys, numpy as np; from symbolic_tpde.numerics.particles.attend import attend;"
            "X = np.random.default_rng(0).standard_normal((64, 2)); attend(X, X, X);"
            "Z = np.random.default_rng(0).standard_normal((64, 40)); attend(Z, Z, Z);"  # the row pass too
            "print('sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


X86 = platform.machine().lower() in ("x86_64", "amd64")


@needs_c
@pytest.mark.skipif(not X86, reason="the ISA forms are x86 flags")
@pytest.mark.parametrize("isa", [pytest.param("avx2", marks=pytest.mark.slow), "plain"])   # avx2: ~20 s
def test_other_machines_forms(isa, fresh_state, monkeypatch):
    """The loops other machines compile, built here through TPDE_FUSED_ISA (AVX2: fused_simd's 256-bit form;
    plain: the plain-C loops): their exp (as above), agreement with the long-double reference for softmax with
    bias and sink, unnormalised and prefix variants, and bitwise equality of tiles and thread counts."""
    if isa == "avx2" and "avx2" not in cbuild.cpu_signature().lower():  # the CPU's flags are in the signature
        pytest.skip("no AVX2 here")
    monkeypatch.setenv("TPDE_FUSED_ISA", isa)
    for dt in (np.float64, np.float32):
        assert fused.simd_compiled(dt) == ("avx2" if isa == "avx2" else "")
        check_loop_exp(dt)
        for mode, opts, p, d in [("softmax", ("bias", "sink"), 3, 4), ("exp", ("bias",), 2, 2),
                                 ("softmax", ("prefix", "sink"), 8, 8), ("softmax", (), 5, 12)]:
            rng = np.random.default_rng([p, d, len(opts)])
            q, k, v, kw = case(rng, 37, 1100, p, d, dt, mode, opts)
            kw = {"key_bias": None, "shift": 0.0, "prefix": None, "sink_logit": None, "sink_value": None, **kw}
            one = fused.attend_fused(q, k, v, mode=mode, threads=1, tile=1, **kw)
            ref, scale = reference(q, k, v, mode, kw["key_bias"], 0.0, kw["prefix"], kw["sink_logit"],
                                   kw["sink_value"])
            assert float((np.abs(one.astype(np.longdouble) - ref) / scale).max()) < TOL[dt], (isa, mode, opts)
            for tile, threads in [(None, 2), (4, 1), (3, 3)]:
                got = fused.attend_fused(q, k, v, mode=mode, threads=threads, tile=tile, **kw)
                assert np.array_equal(got, one), (isa, mode, opts, tile, threads)


# Every variant compiles with no warning under -Wall -Wextra in each form a machine may build: AVX-512 (compiled
# here whatever the CPU, with -mavx512f; not run), AVX2 with FMA, and the plain-C loops (TPDE_NO_SIMD).  The
# fast suite compiles three variants per form (tiled loops with bias and sink; the plain loops of sigmoid at
# d > 8; the row pass with every option); a covering subset of the matrix is slow (234 compilations).
WARN_FORMS = {"avx512": ("-mavx512f",), "avx2": ("-mno-avx512f", "-mavx2", "-mfma"),
              "plain": ("-mno-avx512f", "-DTPDE_NO_SIMD")}
ATTEND_SET = [("softmax", np.float64, 3, 4, (1, 0, 1), None), ("sigmoid", np.float32, 4, 12, (0, 0, 0), None)]
ROWS_SET = [("softmax", np.float32, (1, 1, 1))]
ALL_FLAGS = ([("softmax", (b, pf, s)) for b in (0, 1) for pf in (0, 1) for s in (0, 1)]  # (bias, prefix, sink)
             + [("exp", (b, pf, 0)) for b in (0, 1) for pf in (0, 1)] + [("sigmoid", (0, 0, 0))])


def compile_clean(src, form, tmp_path) -> str:
    """Compile ``src`` with the kernel's flags, those of ``form`` and -Wall -Wextra -Werror; assert that it
    compiled with an empty stderr; return which loops were compiled (the value of the macro ``TPDE_SIMD``):
    ``"avx512"``, ``"avx2"`` or ``"plain"``."""
    path = tmp_path / "kernel.c"
    path.write_text(src)
    base = [*cbuild.find_compiler(), *(f for f in fused.CFLAGS if f != "-shared"), *WARN_FORMS[form]]
    proc = subprocess.run([*base, "-Wall", "-Wextra", "-Werror", "-c", str(path), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    macros = subprocess.run([*base, "-dM", "-E", str(path)], capture_output=True, text=True, check=True).stdout
    return {"#define TPDE_SIMD 1": "avx512", "#define TPDE_SIMD 2": "avx2", "#define TPDE_SIMD 0": "plain"}[
        next(line for line in macros.splitlines() if line.startswith("#define TPDE_SIMD "))]


def warning_params(slow):
    forms = list(WARN_FORMS) if X86 else ["plain"]
    if not slow:
        return [(form, "attend", c) for form in forms for c in ATTEND_SET] + [
            (form, "rows", c) for form in forms for c in ROWS_SET]
    # A covering subset of forms x dtypes x flag sets x (p, d, tile): every (form, dtype, flag set) is compiled
    # with the default tiled loops at d = 4 (where the unused-variable warning of the AVX-512 tiles was found)
    # and with one other shape, rotated so that each shape meets every flag set across forms and dtypes
    # (234 compilations instead of the full product's ~750, which took 11 minutes on the shared machine).
    pds = [(1, 1, None), (2, 2, None), (3, 8, None), (5, 3, None), (4, 12, None), (31, 64, None)]
    tiles = [(3, 4, 1), (3, 4, 3), (3, 4, 16)]
    out = []
    for i, form in enumerate(forms):
        for j, dt in enumerate((np.float64, np.float32)):
            for k, (m, f) in enumerate(ALL_FLAGS):
                extra = pds + (tiles if not f[1] else [])
                for p, d, tile in [(3, 4, None), extra[(k + 5 * j + 3 * i) % len(extra)]]:
                    out.append(pytest.param(form, "attend", (m, dt, p, d, f, tile), marks=pytest.mark.slow))
                out.append(pytest.param(form, "rows", (m, dt, f), marks=pytest.mark.slow))
    return out


@needs_c
@pytest.mark.parametrize("form,kind,case", warning_params(False) + warning_params(True))
def test_every_variant_compiles_without_warnings(form, kind, case, tmp_path):
    if kind == "attend":
        mode, dt, p, d, (bias, prefix, sink), tile = case
        src = fused.c_source(mode, dt, p, d, bool(bias), bool(prefix), bool(sink), tile)
        vector = fused_simd.covered(mode, d)  # sigmoid and d > fused_simd.MAX_D run the plain loops
    else:
        mode, dt, (bias, prefix, sink) = case
        src = fused_rows.c_source(mode, dt, bool(bias), bool(prefix), bool(sink))
        vector = mode != "sigmoid"
    assert compile_clean(src, form, tmp_path) == (form if vector else "plain")


def test_unknown_isa_form_is_bad_input(monkeypatch):
    """A mistyped TPDE_FUSED_ISA is the user's input: the CLI reports it (exit 2), not as an internal error."""
    monkeypatch.setenv("TPDE_FUSED_ISA", "avx3")
    with pytest.raises(InputError, match="TPDE_FUSED_ISA.*avx3"):
        fused.isa_form()
    env = {**__import__("os").environ, "TPDE_FUSED_ISA": "avx3"}
    p = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "particles", "--scenario", "softmax_2d", "--n",
                        "50", "--T", "0.01", "--seed", "1"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "TPDE_FUSED_ISA" in p.stderr and "internal error" not in p.stderr, p.stderr
