"""The dispatch of ``attend`` (issue 33): which path each head size takes (the fused kernel's vector loops up to
the measured crossover ``fused.CROSSOVER``, the key-blocked kernel ``fused_flash`` above it on AVX-512/AVX2
builds, BLAS logits with the compiled row pass on other builds and for factored trained-model heads), each path against a plain numpy reference in both dtypes, and bitwise repeatability of
the newly vectorised sizes (8 < d <= 16) across tiles and thread counts.

Tolerances: logits of size <= 6 from p <= 40 products carry relative error ~ (p + 1) · 6 eps on each weight,
the exps < 1 eps (tests/test_fused_kernel.py), sums of 300 terms <= 300 eps (linear worst case):
float64 (41·6 + 1 + 300) eps = 1.2e-13 < 2e-13; float32 the kernel tests' 3e-5 (float32 sums in float64
block totals; measured ~5e-7).  The reference is longdouble numpy, so its own error is far below these.
"""

from __future__ import annotations

import numpy as np
import pytest

from symbolic_tpde.numerics.particles import attend as attend_mod, fused, fused_flash, fused_rows, fused_simd
from symbolic_tpde.numerics.particles.attend import attend

needs_c = pytest.mark.skipif(fused.available() is not None, reason=str(fused.available()))
TOL = {np.float64: 2e-13, np.float32: 3e-5}


def reference(q, k, v, bias):
    """Softmax attention with a key bias in long double: ``(out, scale)``, scale = Σ w |v| / Σ w per entry."""
    q, k, v, bias = (np.asarray(a, np.longdouble) for a in (q, k, v, bias))
    L = q @ k.T + bias
    W = np.exp(L - L.max(axis=1, keepdims=True))
    W /= W.sum(axis=1, keepdims=True)
    return W @ v, W @ np.abs(v) + np.finfo(np.float64).tiny


def spy(monkeypatch):
    """Record which path each ``attend`` call ran: ``"fused"``, ``"flash"`` or ``"rows"``."""
    seen = []
    real_fused, real_rows, real_flash = fused.attend_fused, fused_rows.row_pass, fused_flash.attend_flash

    def fake_fused(*a, **kw):
        out = real_fused(*a, **kw)
        if out is not None:
            seen.append("fused")
        return out

    def fake_rows(*a, **kw):
        out = real_rows(*a, **kw)
        if out is not None:
            seen.append("rows")
        return out

    def fake_flash(*a, **kw):
        out = real_flash(*a, **kw)
        if out is not None:
            seen.append("flash")
        return out

    monkeypatch.setattr(fused, "attend_fused", fake_fused)
    monkeypatch.setattr(fused_rows, "row_pass", fake_rows)
    monkeypatch.setattr(fused_flash, "attend_flash", fake_flash)
    return seen


# (p, d): the vector loops' old range, the newly covered middle sizes, one beyond the crossover, a feature
# dimension past the kernel's MAX_P, a factored trained-model head (32 key features, value dimension 384)
SHAPES = [(8, 8), (12, 12), (16, 16), (24, 24), (40, 3), (32, 384)]


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("p,d", SHAPES)
def test_each_dispatched_path_matches_numpy_reference(p, d, dt, monkeypatch):
    form = fused.simd_compiled(dt)
    limit = fused.CROSSOVER[form]
    expect = ("fused" if (p <= limit and d <= limit and p < fused.MAX_P) else
              "flash" if (form in fused_flash.LANES and max(p, d) <= fused_flash.MAX_DIM) else "rows")
    seen = spy(monkeypatch)
    rng = np.random.default_rng([p, d])
    q = (rng.standard_normal((37, p)) / np.sqrt(p)).astype(dt)
    k = rng.standard_normal((300, p)).astype(dt)
    v = rng.standard_normal((300, d)).astype(dt)
    bias = rng.uniform(-1, 1, 300).astype(dt)
    got = attend(q, k, v, key_bias=bias, threads=2)
    assert seen == [expect], (form, p, d, seen)
    assert got.dtype == dt and got.shape == (37, d)
    ref, scale = reference(q, k, v, bias)
    err = float((np.abs(got.astype(np.longdouble) - ref) / scale).max())
    assert err < TOL[dt], (p, d, err)


@needs_c
def test_crossover_table_is_what_the_dispatch_reads():
    """Middle head sizes take the vector loops up to the table's crossover and the rows path beyond it."""
    form = fused.simd_compiled(np.float64)
    limit = fused.CROSSOVER[form]
    assert fused.prefers("softmax", limit, limit, np.float64)
    assert not fused.prefers("softmax", limit + 1, limit, np.float64)
    assert not fused.prefers("softmax", 2, limit + 1, np.float64)
    assert not fused.prefers("softmax", 32, 384, np.float64)  # factored heads: BLAS products
    assert fused.prefers("sigmoid", 8, 8, np.float64) and not fused.prefers("sigmoid", 9, 9, np.float64)
    assert fused_simd.covered("softmax", 16) and not fused_simd.covered("sigmoid", 4)


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_middle_d_vector_loops_bitwise_across_tiles_and_threads(dt):  # the loops still serve d = 12 elsewhere
    """d = 12 (vector loops since issue 33): one query per pass, tiles of 8 / 3 and 1 / 2 / 3 threads give
    bitwise the same result; 1100 keys span several key blocks (the online rescaling) and, in float32, the
    1024-key partial sums."""
    rng = np.random.default_rng(12)
    q = (rng.standard_normal((37, 12)) / 3).astype(dt)
    k = rng.standard_normal((1100, 12)).astype(dt)
    v = rng.standard_normal((1100, 12)).astype(dt)
    kw = dict(mode="softmax", key_bias=None, shift=0.0, prefix=None, sink_logit=None, sink_value=None)
    one = fused.attend_fused(q, k, v, threads=1, tile=1, **kw)
    for tile, threads in [(None, 2), (8, 3), (3, 1)]:
        assert np.array_equal(fused.attend_fused(q, k, v, threads=threads, tile=tile, **kw), one), (tile, threads)
    assert np.array_equal(attend(q, k, v, threads=2), attend(q, k, v, threads=1))
    ref, scale = reference(q, k, v, np.zeros(1100))
    assert float((np.abs(one.astype(np.longdouble) - ref) / scale).max()) < TOL[dt] * 4  # 1100 terms, not 300
    assert attend_mod.USE_FUSED


@needs_c
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("mode,opts", [("softmax", ("bias", "sink")), ("exp", ("bias",)), ("sigmoid", ()),
                                       ("softmax", ("masked",))])
def test_rows_path_key_tiles_match_reference(mode, opts, dt, monkeypatch):
    """The rows path's key tiles (online softmax over tiles, issue 33), forced small (tiles of ~16 keys over 300
    keys): against the untiled rows path and the long-double reference; keys with log-weight -inf (a zero
    mass's bias) filling whole tiles give 0 weight, not NaN."""
    monkeypatch.setattr(fused_flash, "prefers", lambda *a: False)  # the rows path itself (plain-C builds)
    rng = np.random.default_rng([33, len(opts), len(mode)])
    p, d, nq, nk = 40, 3, 37, 300
    q = (rng.standard_normal((nq, p)) / np.sqrt(p)).astype(dt)
    k = rng.standard_normal((nk, p)).astype(dt)
    v = rng.standard_normal((nk, d)).astype(dt)
    kw = {}
    if "bias" in opts or "masked" in opts:
        kw["key_bias"] = rng.uniform(-1, 1, nk).astype(dt)
    if "masked" in opts:
        kw["key_bias"][:100] = -np.inf  # the first tiles see no key at all
    if "sink" in opts:
        kw["sink_logit"], kw["sink_value"] = rng.uniform(-1, 1, nq).astype(dt), rng.standard_normal(d).astype(dt)
    untiled = attend(q, k, v, mode=mode, threads=2, **kw)
    monkeypatch.setattr(attend_mod, "KEY_TILE_BYTES", 16 * (p + d) * np.dtype(dt).itemsize)
    got = attend(q, k, v, mode=mode, threads=2, **kw)
    assert got.dtype == dt and np.isfinite(got).all()
    assert not np.array_equal(got, untiled) or mode == "sigmoid"  # the tiled computation ran
    qq, kk, vv = (np.asarray(a, np.longdouble) for a in (q, k, v))
    L = qq @ kk.T + (np.asarray(kw["key_bias"], np.longdouble) if "key_bias" in kw else 0)
    if mode == "sigmoid":
        ref = (1 / (1 + np.exp(-L))) @ vv / nk
        scale = (1 / (1 + np.exp(-L))) @ np.abs(vv) / nk
    else:
        mx = L.max(axis=1, keepdims=True)
        if "sink_logit" in kw:
            mx = np.maximum(mx, np.asarray(kw["sink_logit"], np.longdouble)[:, None])
        W = np.exp(L - mx)
        num, absn, den = W @ vv, W @ np.abs(vv), W.sum(axis=1)
        if "sink_logit" in kw:
            ws = np.exp(np.asarray(kw["sink_logit"], np.longdouble) - mx[:, 0])
            num += ws[:, None] * np.asarray(kw["sink_value"], np.longdouble)
            absn += ws[:, None] * np.abs(np.asarray(kw["sink_value"], np.longdouble))
            den += ws
        if mode == "exp":
            ref, scale = np.exp(mx) * num / nk, np.exp(mx) * absn / nk
        else:
            ref, scale = num / den[:, None], absn / den[:, None]
    assert float((np.abs(got.astype(np.longdouble) - ref) / scale).max()) < TOL[dt]
