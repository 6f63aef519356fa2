"""The key-blocked ("flash") attention kernel of issue 33 (``fused_flash``): against a long-double reference at
several head sizes in both dtypes and every mode it serves (softmax with key bias, sink and causal prefix;
unnormalised ``exp`` with bias), tails of query tiles, key panels and key blocks, bitwise independence of the
thread count and of the other queries of a call, the overflow semantics, and the AVX2 form.

Tolerance (a worst-case bound, computed per case, not fitted): with ``u`` the dtype's unit roundoff, each
logit is a chain of ``p`` fused multiply-adds, absolute error <= ``p u Σ_c |q_c k_c|``; the weight ``e^{l - m}``
then carries relative error <= 2 that (the maximum's error included) plus the vector exp's 2.4 u; each block sum of
at most ``KB`` terms (fused_flash.params) in the dtype adds <= ``KB u`` relative to ``Σ w |v|``; float64
merging and the final division add a few u.  So |out - ref| <= (2 p u max Σ|q k| + (KB + 8) u) · Σ w|v| / Σ w,
and the test asserts it with a factor 2.  The reference is numpy in long double (its own error far below).
"""

from __future__ import annotations

import numpy as np
import pytest

from symbolic_tpde.numerics.particles import attend as attend_mod, fused, fused_flash, fused_rows
from symbolic_tpde.numerics.particles.attend import attend

FORM = fused.simd_compiled(np.float64) if fused.available() is None else None
needs_flash = pytest.mark.skipif(FORM not in fused_flash.LANES,
                                 reason=f"no vector loops in this build ({FORM!r}) or no compiler")


def make_case(rng, nq, nk, p, d, dt, opts):
    q = (rng.standard_normal((nq, p)) / np.sqrt(p)).astype(dt)
    k = rng.standard_normal((nk, p)).astype(dt)
    v = rng.standard_normal((nk, d)).astype(dt)
    kw = dict(key_bias=None, prefix=None, sink_logit=None, sink_value=None)
    if "bias" in opts:
        kw["key_bias"] = rng.uniform(-1, 1, nk).astype(dt)
    if "masked" in opts:  # whole key blocks of log-weight -inf (zero masses) at the start
        kw["key_bias"] = rng.uniform(-1, 1, nk).astype(dt)
        kw["key_bias"][:300] = -np.inf
    if "prefix" in opts:  # causal: query i sees keys 0 .. prefix_i - 1 (at least 1)
        kw["prefix"] = np.minimum(nk, 1 + (np.arange(nq) * nk) // nq).astype(np.int64)
    if "sink" in opts:
        kw["sink_logit"] = rng.uniform(-1, 1, nq).astype(dt)
        kw["sink_value"] = rng.standard_normal(d).astype(dt)
    return q, k, v, kw


def reference(q, k, v, mode, kw):
    """``(out, scale)`` in long double; scale = Σ w |v| / Σ w (softmax) or Σ w |v| / n_k (exp) per entry."""
    qq, kk, vv = (np.asarray(a, np.longdouble) for a in (q, k, v))
    L = qq @ kk.T
    if kw["key_bias"] is not None:
        L = L + np.asarray(kw["key_bias"], np.longdouble)
    if kw["prefix"] is not None:
        L[np.arange(L.shape[1])[None, :] >= kw["prefix"][:, None]] = -np.inf
    mx = L.max(axis=1, keepdims=True)
    if kw["sink_logit"] is not None:
        mx = np.maximum(mx, np.asarray(kw["sink_logit"], np.longdouble)[:, None])
    W = np.exp(L - mx)
    num, absn, den = W @ vv, W @ np.abs(vv), W.sum(axis=1)
    if kw["sink_logit"] is not None:
        ws = np.exp(np.asarray(kw["sink_logit"], np.longdouble) - mx[:, 0])
        sv = np.asarray(kw["sink_value"], np.longdouble)
        num, absn, den = num + ws[:, None] * sv, absn + ws[:, None] * np.abs(sv), den + ws
    if mode == "exp":
        return np.exp(mx) * num / k.shape[0], np.exp(mx) * absn / k.shape[0]
    return num / den[:, None], absn / den[:, None]


def bound(q, k, dt, form) -> float:
    """The module docstring's worst-case relative bound (times 2)."""
    u = np.finfo(dt).eps / 2
    p = q.shape[1]
    sabs = float((np.abs(q.astype(np.float64)) @ np.abs(k.astype(np.float64)).T).max())
    kb = fused_flash.params(fused.ctype(dt), form, p, 1)["KB"]
    return 2 * (2 * p * u * sabs + (kb + 8) * u)


def run(q, k, v, mode, kw, threads=2):
    return fused_flash.attend_flash(q, k, v, mode=mode, shift=0.0, threads=threads, **kw)


# (p, d): just above the AVX-512 crossover, middle sizes, a value dimension not a whole number of vectors,
# p != d both ways, the large sizes up to the kernel's MAX_DIM
SIZES = [(12, 12), (16, 16), (24, 24), (40, 3), (5, 37), (64, 64), (128, 128),
         pytest.param(256, 256, marks=pytest.mark.slow)]


@needs_flash
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("p,d", SIZES)
def test_softmax_with_bias_matches_reference(p, d, dt):
    rng = np.random.default_rng([p, d, 1])
    q, k, v, kw = make_case(rng, 53, 700, p, d, dt, ("bias",))  # 53: a partial query tile; 700: partial blocks
    got = run(q, k, v, "softmax", kw)
    assert got.dtype == dt and got.shape == (53, d)
    ref, scale = reference(q, k, v, "softmax", kw)
    err = float((np.abs(got.astype(np.longdouble) - ref) / scale).max())
    assert err < bound(q, k, dt, FORM), (p, d, err)


@needs_flash
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("mode,opts", [("softmax", ("bias", "sink")), ("softmax", ("prefix",)),
                                       ("softmax", ("prefix", "sink", "bias")), ("softmax", ("masked",)),
                                       ("exp", ("bias",)), ("exp", ())])
@pytest.mark.parametrize("p,d", [(16, 16), pytest.param(64, 24, marks=pytest.mark.slow)])
def test_every_mode_matches_reference(mode, opts, p, d, dt):
    rng = np.random.default_rng([p, d, len(opts), len(mode)])
    q, k, v, kw = make_case(rng, 61, 1100, p, d, dt, opts)  # 1100 keys: several key blocks (online rescaling)
    got = run(q, k, v, mode, kw)
    assert np.isfinite(got).all()
    ref, scale = reference(q, k, v, mode, kw)
    err = float((np.abs(got.astype(np.longdouble) - ref) / scale).max())
    assert err < bound(q, k, dt, FORM), (mode, opts, err)


@needs_flash
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_bitwise_across_thread_counts_and_query_subsets(dt):
    """A query's result depends on its own row only: the same bits for 1, 2, 3 threads, and for a call on a
    slice of the queries (other tile-mates, another tile position)."""
    rng = np.random.default_rng(33)
    q, k, v, kw = make_case(rng, 150, 900, 24, 20, dt, ("bias", "prefix", "sink"))
    one = run(q, k, v, "softmax", kw, threads=1)
    for threads in (2, 3, 2):
        assert np.array_equal(run(q, k, v, "softmax", kw, threads=threads), one)
    sub = slice(7, 40)
    kws = {**kw, "prefix": kw["prefix"][sub], "sink_logit": kw["sink_logit"][sub]}
    assert np.array_equal(run(q[sub], k, v, "softmax", kws, threads=2), one[sub])


@needs_flash
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_half_width_value_tail_gives_the_bits_of_whole_vectors(dt, monkeypatch):
    """AVX-512: value components of a last vector at most half full go through the half-width micro-kernel
    (HALF); each component is the same chain of fused multiply-adds as in a whole vector, so the bits equal
    those of the build that sums every vector whole (forced here by the parameters)."""
    form = fused.simd_compiled(dt)
    if form != "avx512":
        pytest.skip("the half-width tail is an AVX-512 form")
    rng = np.random.default_rng(35)
    T = fused.ctype(dt)
    w = fused_flash.LANES[form][T]
    cases = [(24, w + w // 2), (30, w // 4)]  # whole vectors and a half one; only a half one
    orig = fused_flash.params

    def whole(T, form, p, d, n_k=0):
        prm = dict(orig(T, form, p, d, n_k))
        s = fused_flash.SHAPE[form]
        nc = prm["DP"] // prm["NPW"]
        cc = max(c for c in range(1, s["CCMAX"] + 1) if nc % c == 0)
        r = s["ACC"] // cc
        while prm["QB"] % r or prm["QB"] % s["RL"]:
            r -= 1
        prm.update(HALF=0, CC=cc, R=r)
        return prm

    for p, d in cases:
        assert orig(T, form, p, d)["HALF"] == 1
        q, k, v, kw = make_case(rng, 100, 700, p, d, dt, ("bias", "sink"))
        half = run(q, k, v, "softmax", kw)
        ref, scale = reference(q, k, v, "softmax", kw)
        assert float((np.abs(half.astype(np.longdouble) - ref) / scale).max()) < bound(q, k, dt, form)
        monkeypatch.setattr(fused_flash, "params", whole)
        assert np.array_equal(run(q, k, v, "softmax", kw), half)
        monkeypatch.setattr(fused_flash, "params", orig)


@needs_flash
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_large_query_tiles_give_the_same_bits(dt, monkeypatch):
    """Keys and values above LARGE_KV_BYTES take larger query tiles (a time choice by shape): the bits of every
    row are those of the small tiles."""
    rng = np.random.default_rng(34)
    q, k, v, kw = make_case(rng, 230, 700, 20, 24, dt, ("bias", "sink"))
    small = run(q, k, v, "softmax", kw)
    form = fused.simd_compiled(dt)
    assert fused_flash.params(fused.ctype(dt), form, 20, 24, 700)["QB"] == fused_flash.SHAPE[form]["QB"]
    monkeypatch.setattr(fused_flash, "LARGE_KV_BYTES", 1000)
    assert fused_flash.params(fused.ctype(dt), form, 20, 24, 700)["QB"] == fused_flash.SHAPE[form]["QB_LARGE"]
    assert np.array_equal(run(q, k, v, "softmax", kw), small)


@needs_flash
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_exp_mode_overflow_semantics(dt):
    """Unnormalised mode: inf only when the true value overflows; a zero sum gives 0; as the fused kernel."""
    big = 710.0 if dt == np.float64 else 89.0  # e^big overflows the dtype, e^big / 2 does not
    p = 12
    q = np.zeros((4, p), dt)
    q[:, 0] = [1.0, 1.0, 1.0, big + 10]
    k = np.zeros((1, p), dt)
    k[0, 0] = big
    none = dict(key_bias=None, prefix=None, sink_logit=None, sink_value=None)
    out = run(q, k, np.full((1, p), 0.5, dt), "exp", none)
    assert np.isfinite(out[:3]).all() and np.isinf(out[3]).all()
    true = np.exp(np.longdouble(big)) / 2
    assert abs(out[0, 0] / true - 1) < 1000 * np.finfo(dt).eps  # log/exp round trip at |ls| ~ 710: ~|ls| eps
    assert (run(q[:1], k, np.zeros((1, p), dt), "exp", none) == 0).all()


@needs_flash
def test_overflowing_logits_stay_non_finite():
    """A logit that overflows to inf gives a non-finite result (the integrators detect blow-up), as the numpy
    path does; the other rows are unaffected."""
    p = 12
    q = np.zeros((2, p))
    k = np.zeros((2, p))
    q[0, 0] = k[0, 0] = 1e200
    q[1, 1] = k[1, 1] = 1.0
    v = np.ones((2, p))
    none = dict(key_bias=None, prefix=None, sink_logit=None, sink_value=None)
    for mode in ("softmax", "exp"):
        fast = run(q, k, v, mode, none)
        with np.errstate(all="ignore"):
            slow = attend_mod.attend_numpy(q, k, v, mode=mode)
        np.testing.assert_array_equal(np.isfinite(fast), np.isfinite(slow))
        assert not np.isfinite(fast[0]).any()
        np.testing.assert_allclose(fast[1], slow[1], rtol=1e-15)


@needs_flash
def test_uncovered_calls_return_none():
    rng = np.random.default_rng(0)
    q, k, v, kw = make_case(rng, 5, 9, 12, 12, np.float64, ("sink",))
    assert run(q, k, v, "exp", kw) is None  # exp with a sink
    none = dict(key_bias=None, prefix=None, sink_logit=None, sink_value=None)
    assert run(q, k, v, "sigmoid", none) is None
    assert run(q, k, np.ones((9, 257)), "softmax", none) is None  # d above MAX_DIM
    assert run(q.astype(np.float32), k, v, "softmax", none) is None  # mixed dtypes


@needs_flash
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_attend_dispatches_middle_and_large_heads_here(dt, monkeypatch):
    """attend() runs this kernel above fused.CROSSOVER (softmax, exp), the fused kernel at or below it, and the
    rows path for sigmoid and for values wider than MAX_DIM."""
    seen = []
    real = {"fused": fused.attend_fused, "flash": fused_flash.attend_flash, "rows": fused_rows.row_pass}

    def spy(name):
        def f(*a, **kw):
            out = real[name](*a, **kw)
            if out is not None:
                seen.append(name)
            return out
        return f

    monkeypatch.setattr(fused, "attend_fused", spy("fused"))
    monkeypatch.setattr(fused_flash, "attend_flash", spy("flash"))
    monkeypatch.setattr(fused_rows, "row_pass", spy("rows"))
    limit = fused.CROSSOVER[fused.simd_compiled(dt)]
    rng = np.random.default_rng(5)
    cases = [(limit, limit, "softmax", "fused"), (limit + 1, limit + 1, "softmax", "flash"),
             (2, limit + 1, "exp", "flash"), (64, 64, "softmax", "flash"), (256, 8, "softmax", "flash"),
             (24, 24, "sigmoid", "rows"), (32, 384, "softmax", "rows")]
    for p, d, mode, want in cases:
        q, k, v, _ = make_case(rng, 20, 50, p, d, dt, ())
        seen.clear()
        attend(q, k, v, mode=mode, threads=1)
        assert seen == [want], (p, d, mode, seen)
        assert fused_flash.prefers(mode, p, d, dt) == (want == "flash")


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_avx2_form_matches_reference(dt, monkeypatch):
    """The AVX2 form (TPDE_FUSED_ISA=avx2, what an AVX2 machine builds): its own tile shapes, same results to
    the bound, bitwise across thread counts."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64") or fused.available() is not None:
        pytest.skip("the ISA forms are x86 builds")
    monkeypatch.setenv("TPDE_FUSED_ISA", "avx2")
    if fused.simd_compiled(dt) != "avx2":
        pytest.skip("this compiler/machine does not build the AVX2 form")
    rng = np.random.default_rng(2)
    for p, d, opts in [(16, 16, ("bias", "sink")), (40, 37, ("prefix",))]:
        q, k, v, kw = make_case(rng, 31, 700, p, d, dt, opts)
        got = run(q, k, v, "softmax", kw)
        ref, scale = reference(q, k, v, "softmax", kw)
        assert float((np.abs(got.astype(np.longdouble) - ref) / scale).max()) < bound(q, k, dt, "avx2")
        assert np.array_equal(run(q, k, v, "softmax", kw, threads=1), got)


FLAG_SETS = ([("softmax", (b, pf, s)) for b in (0, 1) for pf in (0, 1) for s in (0, 1)]  # (bias, prefix, sink)
             + [("exp", (b, pf, 0)) for b in (0, 1) for pf in (0, 1)])


def warning_cases():
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    out = [("avx512", "softmax", np.float32, 16, 16, (1, 1, 1)), ("avx512", "softmax", np.float32, 20, 24, (0, 0, 0)),
           ("avx2", "exp", np.float64, 40, 37, (1, 0, 0))]
    shapes = [(12, 12), (3, 40), (64, 64), (256, 130)]
    for i, form in enumerate(("avx512", "avx2")):
        for j, dt in enumerate((np.float64, np.float32)):
            for k, (mode, flags) in enumerate(FLAG_SETS):
                p, d = shapes[(k + j + i) % len(shapes)]
                out.append(pytest.param(form, mode, dt, p, d, flags, marks=pytest.mark.slow))
    return out


@pytest.mark.skipif(fused.available() is not None, reason=str(fused.available()))
@pytest.mark.parametrize("form,mode,dt,p,d,flags", warning_cases())
def test_every_variant_compiles_without_warnings(form, mode, dt, p, d, flags, tmp_path):
    """-Wall -Wextra -Werror, with the kernel's flags and those of the form (AVX-512 / AVX2 targeted explicitly,
    so both are checked on either machine)."""
    import subprocess

    from symbolic_tpde.codegen import cbuild

    path = tmp_path / "flash.c"
    path.write_text(fused_flash.c_source(mode, dt, p, d, *map(bool, flags), form))
    isa = {"avx512": ("-mavx512f",), "avx2": ("-mno-avx512f", "-mavx2", "-mfma")}[form]
    base = [*cbuild.find_compiler(), *(f for f in fused.CFLAGS if f != "-shared"), *isa]
    proc = subprocess.run([*base, "-Wall", "-Wextra", "-Werror", "-c", str(path), "-o", str(tmp_path / "f.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
