"""Hand-vectorised forms of the fused kernel's hot loops (softmax and unnormalised modes, ``d ≤ 8``; and the
exp of :mod:`.fused_rows`' row pass), for AVX-512 and for AVX2 with FMA.

:mod:`.fused` writes its loops in plain C and lets gcc vectorise them; measured at d = 8, n = 8000, one
thread, half of that kernel's time went to its ``exp`` (Taylor degree 13 on ``|r| ≤ ln2/2``, about 22
vector instructions per 8 lanes, as gcc vectorises it), and with 8 queries per pass the 72 accumulators
spilled (300 register moves per 64 pairs; at AVX2's 16 registers far more).  :func:`.fused.c_source` adds
these versions of ``tpde_row`` / ``tpde_tile`` (same signatures) under ``#if defined(__AVX512F__)`` /
``#elif defined(__AVX2__) && defined(__FMA__)``; other machines compile the plain-C loops.  The forms other
machines run can be built here with ``TPDE_FUSED_ISA`` (:data:`.fused.ISA_FLAGS`): the tests check all three,
and ``numerics/bench_particles.py`` times them side by side.

Per query and per lane of ``W`` keys (AVX-512: 8 in float64, 16 in float32), in a fixed order, so the result is
bitwise independent of the tile (queries sharing each key vector) and of the thread count; online over key
blocks of :data:`KEY_BLOCK` keys, so a block's keys, values and logits stay in L1:

* pass 1, per block: ``l = q_0 k_0 + … + q_{p-1} k_{p-1} (+ β)`` (one multiply, then fused multiply-adds in the
  order of the feature index) for every query of the tile, stored to the block's work row, lane-wise maximum;
  where the block's maximum exceeds the running one (which starts at the sink logit, or −∞), the sums so far
  are multiplied by ``e^{m_old − m_new}`` (float64) and the running maximum raised;
* pass 2, per block and one query at a time (its ``d + 1`` lane sums in registers): ``w = e^{l − m}`` (below),
  lane-wise sums of ``w`` and ``w v_c`` (float64 lanes; float32: float32 lanes over the block, then added in
  float64); after the last block the lanes are added in one fixed order.  A last partial vector is loaded and
  weighted under a mask, so keys past the end contribute exactly 0.

``exp`` (``x ≤ 0``): ``x ← max(x, c)`` (``c = −746``, float32 ``−105``: ``e^c`` rounds to 0, so every
``x ≤ c`` gives 0; NaN passes), ``k = rint(16x/ln 2)`` by the shifter trick, ``r = x − k·ln2/16`` in two parts
(Cody–Waite, ``hi`` with enough trailing zero bits that ``k·hi`` is exact), ``|r| ≤ ln2/32``;
``e^r − 1 = r·h(r)`` with ``h`` the Chebyshev fit of ``(e^r − 1)/r`` of degree 5 (float64; float32: 2),
computed by mpmath at code generation; ``y = t_j + t_j (e^r − 1)`` with ``t_j = 2^{j/16}`` (``j = k mod 16``,
a register table read by one permute, the entries correctly rounded from mpmath), and ``e^x = y · 2^{⌊k/16⌋}``
by ``vscalefpd`` (one rounding, so subnormal results are rounded, not flushed).

Error bound for a normal result, in units ``u`` of the type's unit roundoff (2^-53, 2^-24): the table entry
(≤ 1/2 ulp, relative ≤ u), the final fused multiply-add (≤ u), the fit (``max|r|·max|h − fit| < u/4``, checked
when the constants are made: :data:`POLY`), the rounding of ``r`` and of ``e^r − 1`` (each scaled by
``|r| ≤ 0.022``: ≤ 0.07 u): at most 2.4 u = 1.2 eps.  Measured (tests/test_fused_kernel.py,
``test_loop_exp_accuracy``, 2.2e6 arguments against ``exp`` in long double): 0.92 eps (float64), 0.90 eps
(float32), the test asserting < 1 eps; subnormal results within one unit of the smallest subnormal.
No ``-ffast-math``: inf/nan propagate.

AVX2 form: the same loops on 256-bit vectors (4 / 8 lanes, masks as lane vectors, 4 queries per tile), and an
``exp`` without a table (AVX2 has no one-instruction permute of 16 doubles): ``k = rint(x/ln2)``, ``|r| ≤
ln2/2``, ``e^r`` by a Chebyshev fit of degree 11 (float32: 7; fit error < 2^-55 / 2^-26 relative, checked when
the constants are made), ``2^k`` in the exponent bits; results below the normal range are 0 from ``x < −708``
(float32 ``−87``), as in the plain-C exp.  Measured: 0.66 eps (float64), 0.59 eps (float32).  Speed on this
AVX-512 machine with ``-mno-avx512f`` (``bench_particles.py``, d = 8, n = 8000, 2 threads, interleaved rounds):
1.96 ns/pair against 6.73 for the plain-C loops built the same way (3.4x), 1.08 for the AVX-512 form (over
the whole table of that script: 2.9-6.2x less time than the plain-C loops).

References: Tang, "Table-driven implementation of the exponential function in IEEE floating-point arithmetic",
ACM TOMS 15 (1989) (the table-plus-polynomial scheme); Intel's intrinsics guide for ``vscalefpd`` and
``vpermt2pd``.  Timings: ``numerics/bench_particles.py`` (column ``fused``).  No SymPy here.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["exp_source", "covered", "tile_size", "row_and_tile_source", "KEY_BLOCK"]

#: Keys per block (float32: at most 1024, so float32 partial sums stay as accurate as in :mod:`.fused`).
KEY_BLOCK = {"double": 256, "float": 512}


def covered(mode: str, d: int) -> bool:
    """Whether this module has a hand-vectorised form of the variant (else the plain-C loops run)."""
    return mode in ("softmax", "exp") and 1 <= d <= 8


def tile_size(d: int, isa: str = "avx512") -> int:
    """Queries per tile: their logits share each loaded key vector.  AVX-512, measured (one thread, n = 4000,
    interleaved rounds): at d = 2, 4 queries 1.08x (float64) / 1.07x (float32) the speed of 8 and 1.2x that of
    1; at d = 8, 4 and 8 within 3 %, 8 kept (half the key loads).  AVX2 (16 vector registers, not measured on
    an AVX2 machine): 4, so that the tile's lane maxima and a key vector per feature stay in registers."""
    if isa == "avx2":
        return 4
    return 4 if d <= 4 else 8


def _split_hi(c: float, bits: int) -> float:
    """``c`` rounded down to ``bits`` significant bits (the Cody-Waite ``hi`` part)."""
    e = math.frexp(c)[1]
    return math.ldexp(math.floor(math.ldexp(c, bits - e)), e - bits)


#: Degree of the polynomial ``h(r) ≈ (e^r - 1)/r`` per C type, and the bound its Chebyshev fit must meet on
#: ``|r| ≤ ln2/32`` as a contribution ``max|r|·max|h - h_fit|`` to the relative error of ``e^x``: a quarter
#: of the type's unit roundoff (2^-53, 2^-24), beside the table's and the last rounding's half unit each.
POLY = {"double": (5, 2.0 ** -55), "float": (2, 2.0 ** -26)}


def _rounder(T: str):
    """Correct rounding of an mpmath number to C type ``T`` (``float(mpf)`` is correctly rounded)."""
    return float if T == "double" else (lambda x: float(np.float32(float(x))))


def _fit(f, a, deg: int, rnd, err) -> tuple[list[float], float]:
    """Chebyshev fit (mpmath.chebyfit, nearly minimax) of ``f`` of degree ``deg`` on ``[-a, a]``, coefficients
    rounded by ``rnd`` (highest degree first), and ``max err(fit(r), f(r))`` of the rounded fit over a grid of
    2001 points of the interval (call inside an mpmath working precision)."""
    import mpmath

    fit = [rnd(c) for c in mpmath.chebyfit(f, [-a, a], deg + 1)]
    exact = [mpmath.mpf(c) for c in fit]
    grid = [-a + 2 * a * i / 2000 for i in range(2001)]
    return fit, float(max(err(mpmath.polyval(exact, r), f(r)) for r in grid))


@functools.lru_cache(maxsize=None)
def _constants(T: str) -> dict:
    """The exp's constants for C type ``T``, derived here (not pasted): mpmath at 200 bits, rounded once
    (once per process: every kernel variant's source carries them).

    ``coef``: the Chebyshev fit of ``h(r) = (e^r - 1)/r`` on ``|r| ≤ (ln2/32)(1 + 1e-6)`` (the margin covers
    ``k`` rounded through ``16/ln2``), highest degree first; ``fit_bound``: ``max|r| · max|h - fit|``, checked
    against :data:`POLY` here."""
    import mpmath

    deg, bound = POLY[T]
    rnd = _rounder(T)
    # |k| < 2^15 (x >= -746) in float64, 2^12 (x >= -105) in float32: k*hi has <= 47 / 24 bits, exact
    bits, cut = (32, -746.0) if T == "double" else (12, -105.0)
    with mpmath.workprec(200):
        ln2_16 = mpmath.log(2) / 16
        hi = rnd(_split_hi(float(ln2_16), bits))
        lo = rnd(ln2_16 - mpmath.mpf(hi))
        tab = [rnd(mpmath.power(2, mpmath.mpf(j) / 16)) for j in range(16)]
        inv = rnd(16 / mpmath.log(2))
        a = mpmath.log(2) / 32 * (1 + mpmath.mpf("1e-6"))
        h = lambda r: mpmath.expm1(r) / r if r != 0 else mpmath.mpf(1)  # noqa: E731
        fit, fit_err = _fit(h, a, deg, rnd, lambda p, v: abs(p - v))
        fit_bound = float(a * fit_err)
    if not fit_bound < bound:
        raise AssertionError(f"exp polynomial for {T}: fit error {fit_bound:.3g} not below {bound:.3g}")
    return {"hi": hi, "lo": lo, "tab": tab, "inv": inv, "coef": fit, "cut": cut, "fit_bound": fit_bound}


def _lit(x: float, T: str) -> str:
    return x.hex() + ("f" if T == "float" else "")


def exp_source(T: str, isa: str = "avx512") -> str:
    """C text: the vector macros for ``T`` on ``isa`` (``avx512`` or ``avx2``, the latter with FMA) and
    ``static inline V tpde_vexp(V x)`` (module docstring)."""
    return _macros_avx512(T) + _exp_avx512(T) if isa == "avx512" else _macros_avx2(T) + _exp_avx2(T)


def _macros_avx512(T: str) -> str:
    s = "pd" if T == "double" else "ps"
    return "\n".join([
        f"typedef {'__m512d' if T == 'double' else '__m512'} V;",
        f"typedef {'__mmask8' if T == 'double' else '__mmask16'} VM;",
        f"#define W {8 if T == 'double' else 16}",
        f"#define VLOAD(p) _mm512_loadu_{s}(p)", f"#define VMLOAD(m, p) _mm512_maskz_loadu_{s}(m, p)",
        f"#define VSTORE(p, x) _mm512_storeu_{s}(p, x)", f"#define VMSTORE(p, m, x) _mm512_mask_storeu_{s}(p, m, x)",
        f"#define VSET1(x) _mm512_set1_{s}(x)", f"#define VZERO() _mm512_setzero_{s}()",
        f"#define VADD(a, b) _mm512_add_{s}(a, b)", f"#define VSUB(a, b) _mm512_sub_{s}(a, b)",
        f"#define VMUL(a, b) _mm512_mul_{s}(a, b)", f"#define VFMA(a, b, c) _mm512_fmadd_{s}(a, b, c)",
        f"#define VFNMA(a, b, c) _mm512_fnmadd_{s}(a, b, c)",
        f"#define VMAX(a, b) _mm512_max_{s}(a, b)  /* a NaN in a is ignored: the second operand is kept */",
        f"#define VMMAX(src, m, a, b) _mm512_mask_max_{s}(src, m, a, b)",
        f"#define VMZ(m, x) _mm512_maskz_mov_{s}(m, x)",
        f"#define VRMAX(x) _mm512_reduce_max_{s}(x)",
        "#define VTAIL(r) ((VM)((1u << (r)) - 1u))",
        "typedef __m512d DV;  /* float64 lane sums */",
        "#define DZERO() _mm512_setzero_pd()", "#define DADD(a, b) _mm512_add_pd(a, b)",
        "#define DMUL(a, b) _mm512_mul_pd(a, b)", "#define DSET1(x) _mm512_set1_pd(x)",
        "#define DRED(x) _mm512_reduce_add_pd(x)",
        "#define F2DLO(x) _mm512_cvtps_pd(_mm512_castps512_ps256(x))  /* float32 lanes 0-7 as float64 */",
        "#define F2DHI(x) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))",
        f"#define KB {KEY_BLOCK[T]}  /* keys per block */", ""])


def _macros_avx2(T: str) -> str:
    d = T == "double"
    s = "pd" if d else "ps"
    tail = ("_mm256_cmpgt_epi64(_mm256_set1_epi64x(r), _mm256_set_epi64x(3, 2, 1, 0))" if d else
            "_mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0))")
    L = [f"typedef {'__m256d' if d else '__m256'} V;", "typedef __m256i VM;  /* all-ones lanes: visible */",
         f"#define W {4 if d else 8}",
         f"#define VLOAD(p) _mm256_loadu_{s}(p)", f"#define VMLOAD(m, p) _mm256_maskload_{s}(p, m)",
         f"#define VSTORE(p, x) _mm256_storeu_{s}(p, x)", f"#define VMSTORE(p, m, x) _mm256_maskstore_{s}(p, m, x)",
         f"#define VSET1(x) _mm256_set1_{s}(x)", f"#define VZERO() _mm256_setzero_{s}()",
         f"#define VADD(a, b) _mm256_add_{s}(a, b)", f"#define VSUB(a, b) _mm256_sub_{s}(a, b)",
         f"#define VMUL(a, b) _mm256_mul_{s}(a, b)", f"#define VFMA(a, b, c) _mm256_fmadd_{s}(a, b, c)",
         f"#define VFNMA(a, b, c) _mm256_fnmadd_{s}(a, b, c)",
         f"#define VMAX(a, b) _mm256_max_{s}(a, b)  /* a NaN in a is ignored: the second operand is kept */",
         f"#define VMMAX(src, m, a, b) _mm256_blendv_{s}(src, _mm256_max_{s}(a, b), _mm256_castsi256_{s}(m))",
         f"#define VMZ(m, x) _mm256_and_{s}(x, _mm256_castsi256_{s}(m))",
         f"#define VTAIL(r) {tail}",
         "typedef __m256d DV;  /* float64 lane sums */",
         "#define DZERO() _mm256_setzero_pd()", "#define DADD(a, b) _mm256_add_pd(a, b)",
         "#define DMUL(a, b) _mm256_mul_pd(a, b)", "#define DSET1(x) _mm256_set1_pd(x)",
         "static inline double DRED(DV x) {  /* lanes added in one fixed order */",
         "    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));",
         "    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));", "}",
         "#define F2DLO(x) _mm256_cvtps_pd(_mm256_castps256_ps128(x))  /* float32 lanes 0-3 as float64 */",
         "#define F2DHI(x) _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))"]
    if d:
        L += ["static inline double VRMAX(V x) {",
              "    __m128d h = _mm_max_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));",
              "    return _mm_cvtsd_f64(_mm_max_sd(h, _mm_unpackhi_pd(h, h)));", "}"]
    else:
        L += ["static inline float VRMAX(V x) {",
              "    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));",
              "    h = _mm_max_ps(h, _mm_movehl_ps(h, h));",
              "    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));", "}"]
    return "\n".join(L + [f"#define KB {KEY_BLOCK[T]}  /* keys per block */", ""])


def _exp_avx512(T: str) -> str:
    c = _constants(T)
    s = "pd" if T == "double" else "ps"
    shifter = "0x1.8p52" if T == "double" else "0x1.8p23f"
    L = ["/* e^x for x <= 0 on W lanes (symbolic_tpde.numerics.fused_simd): table 2^(j/16), Chebyshev fit, "
         "vscalef. */",
         "static inline V tpde_vexp(V x) {",
         f"    const V sh = VSET1({shifter});",
         f"    x = VMAX(VSET1({_lit(c['cut'], T)}), x);  /* NaN in x passes (second operand) */",
         f"    const V t = VFMA(x, VSET1({_lit(c['inv'], T)}), sh);",
         "    const V kf = VSUB(t, sh);",
         f"    V r = VFNMA(kf, VSET1({_lit(c['hi'], T)}), x);",
         f"    r = VFNMA(kf, VSET1({_lit(c['lo'], T)}), r);"]
    coef = c["coef"]  # highest degree first
    L.append(f"    V h = VSET1({_lit(coef[0], T)});  /* h(r) ~ (e^r - 1)/r, fit bound {c['fit_bound']:.1e} */")
    L += [f"    h = VFMA(h, r, VSET1({_lit(a, T)}));" for a in coef[1:]]
    L.append("    const V em1 = VMUL(h, r);  /* e^r - 1 */")
    if T == "double":
        lo8 = ", ".join(_lit(v, T) for v in reversed(c["tab"][:8]))
        hi8 = ", ".join(_lit(v, T) for v in reversed(c["tab"][8:]))
        L += [f"    const V t0 = _mm512_set_pd({lo8});", f"    const V t1 = _mm512_set_pd({hi8});",
              "    const V tj = _mm512_permutex2var_pd(t0, _mm512_castpd_si512(t), t1);  /* 2^((k mod 16)/16) */"]
    else:
        tab = ", ".join(_lit(v, T) for v in reversed(c["tab"]))
        L += [f"    const V tb = _mm512_set_ps({tab});",
              "    const V tj = _mm512_permutexvar_ps(_mm512_castps_si512(t), tb);  /* 2^((k mod 16)/16) */"]
    L += ["    const V y = VFMA(tj, em1, tj);",
          f"    return _mm512_scalef_{s}(y, VMUL(kf, VSET1({_lit(1 / 16, T)})));  /* y 2^floor(k/16) */", "}", ""]
    return "\n".join(L)


#: AVX2 exp: no table (AVX2 has no cross-lane permute of 16 doubles); ``k = rint(x/ln2)``, ``|r| ≤ ln2/2``,
#: ``e^r`` by a Chebyshev fit of degree 11 (float32: 7), and the bound on the fit's relative error.
POLY_AVX2 = {"double": (11, 2.0 ** -55), "float": (7, 2.0 ** -26)}


@functools.lru_cache(maxsize=None)
def _constants_avx2(T: str) -> dict:
    """Constants of the AVX2 exp (as :func:`_constants`): Cody-Waite parts of ln2, the fit of ``e^r`` on
    ``|r| ≤ (ln2/2)(1 + 1e-6)`` (highest degree first) and its measured relative error bound."""
    import mpmath

    deg, bound = POLY_AVX2[T]
    rnd = _rounder(T)
    with mpmath.workprec(200):
        ln2 = mpmath.log(2)
        hi = rnd(_split_hi(float(ln2), 32 if T == "double" else 14))  # |k| <= 1022 / 126: k*hi exact
        lo = rnd(ln2 - mpmath.mpf(hi))
        a = ln2 / 2 * (1 + mpmath.mpf("1e-6"))
        fit, err = _fit(mpmath.exp, a, deg, rnd, lambda p, v: abs(p / v - 1))
    if not err < bound:
        raise AssertionError(f"AVX2 exp polynomial for {T}: fit error {err:.3g} not below {bound:.3g}")
    return {"hi": hi, "lo": lo, "inv": rnd(1 / mpmath.log(2)), "coef": fit, "fit_bound": err,
            "cut": -708.0 if T == "double" else -87.0}


def _exp_avx2(T: str) -> str:
    """``e^x`` for ``x ≤ 0`` on AVX2: results below the normal range are 0, as in :mod:`.fused`'s plain-C exp
    (``x < −708``, float32 ``−87``); NaN propagates; ``2^k`` built in the exponent bits."""
    c = _constants_avx2(T)
    d = T == "double"
    s = "pd" if d else "ps"
    L = ["/* e^x for x <= 0 on W lanes (symbolic_tpde.numerics.fused_simd, AVX2): Chebyshev fit of e^r, "
         "|r| <= ln2/2 */",
         "static inline V tpde_vexp(V x) {",
         f"    const V sh = VSET1({'0x1.8p52' if d else '0x1.8p23f'});",
         f"    const V cut = VSET1({_lit(c['cut'], T)});",
         "    const V xc = VMAX(cut, x);  /* NaN in x passes (second operand) */",
         f"    const V t = VFMA(xc, VSET1({_lit(c['inv'], T)}), sh);",
         "    const V kf = VSUB(t, sh);",
         f"    V r = VFNMA(kf, VSET1({_lit(c['hi'], T)}), xc);",
         f"    r = VFNMA(kf, VSET1({_lit(c['lo'], T)}), r);",
         f"    V p = VSET1({_lit(c['coef'][0], T)});  /* fit bound {c['fit_bound']:.1e} */"]
    L += [f"    p = VFMA(p, r, VSET1({_lit(a, T)}));" for a in c["coef"][1:]]
    if d:
        L += ["    const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(t), "
              "_mm256_set1_epi64x(1023)), 52);  /* 2^k: k + 1023 in the exponent field */"]
    else:
        L += ["    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(t), "
              "_mm256_set1_epi32(127)), 23);  /* 2^k */"]
    L += [f"    const V y = VMUL(p, _mm256_castsi256_{s}(e));",
          f"    return _mm256_andnot_{s}(_mm256_cmp_{s}(x, cut, _CMP_LT_OQ), y);  /* 0 below the cut */", "}", ""]
    return "\n".join(L)


def row_and_tile_source(mode: str, T: str, p: int, d: int, bias: bool, sink: bool, Q: int, finish) -> str:
    """C text of ``tpde_row`` and ``tpde_tile`` (the signatures of :mod:`.fused`), hand-vectorised.

    ``finish``: :func:`.fused._finish`, which turns the double scalars ``a{t}_{c}``, ``den{t}``, ``m{t}``,
    ``sl{t}`` into the outputs."""
    L = [_body("tpde_body1", mode, T, p, d, bias, sink, 1, finish),
         "static void tpde_row(const tpde_args *restrict a, long i, T *restrict buf) {",
         "    long kmax = a->nk;",
         "    if (a->prefix) { kmax = (long)a->prefix[i]; kmax = kmax < 0 ? 0 : (kmax > a->nk ? a->nk : kmax); }",
         "    tpde_body1(a, a->q + i * P, a->sink_logit ? a->sink_logit + i : NULL, a->out + i * D, buf, kmax);",
         "}", ""]
    if Q > 1:
        L += [_body("tpde_bodyQ", mode, T, p, d, bias, sink, Q, finish),
              "static void tpde_tile(const tpde_args *restrict a, const T *restrict qt, const T *restrict slt,",
              "                      T *restrict outt, T *restrict buf) {",
              "    tpde_bodyQ(a, qt, slt, outt, buf, a->nk);", "}", ""]
    return "\n".join(L)


def _body(name: str, mode: str, T: str, p: int, d: int, bias: bool, sink: bool, Q: int, finish) -> str:
    """One tile of ``Q`` queries over the keys ``0 .. kmax-1``, online: per key block of ``KB`` keys, pass 1
    (logits of every query of the tile into the work rows, block maxima), the running maximum raised where a
    block exceeds it (the sums so far multiplied by ``e^{m_old - m_new}``, in float64), then pass 2 (weights,
    lane sums) over the same block while its keys, values and logits are in L1."""
    qs = range(Q)
    f32 = T == "float"
    nacc = d + 1  # lane sums per query: [0] the weights, [1 + c] the weighted value component c
    L = [f"static inline void {name}(const tpde_args *restrict a, const T *restrict qt, const T *restrict slt,",
         "                             T *restrict outt, T *restrict buf, const long kmax) {",
         "    const long nk = a->nk;", "    (void)slt; (void)nk;"]
    if bias:
        L.append("    const T *restrict bj = a->bias;")
    L += [f"    const V q{t}_{c} = VSET1(qt[{t} * P + {c}]);" for t in qs for c in range(p)]
    # the running maximum starts at the sink logit (so the finishing code's e^{s - m} is consistent)
    L.append(f"    T mrow[{Q}];")
    L += [f"    mrow[{t}] = " + (f"slt[{t}];" if sink else "-INFINITY;") for t in qs]
    L.append(f"    DV Sacc[{Q}][{nacc}];  /* float64 lane sums */" if not f32 else
             f"    DV Sacc[{Q}][{nacc}][2];  /* float64 lane sums of the float32 block sums (low, high) */")
    L.append(f"    for (int t = 0; t < {Q}; ++t) for (int c = 0; c < {nacc}; ++c) "
             + ("Sacc[t][c] = DZERO();" if not f32 else
                "Sacc[t][c][0] = Sacc[t][c][1] = DZERO();"))
    L += ["    for (long jb = 0; jb < kmax; jb += KB) {",
          "        const long je = jb + KB < kmax ? jb + KB : kmax;"]
    L += [f"        const T *restrict k{c} = a->kT + {c} * nk + jb;" for c in range(p)]
    L += [f"        const T *restrict v{c} = a->vT + {c} * nk + jb;" for c in range(d)]
    if bias:
        L.append("        const T *restrict bb_ = bj + jb;")
    L.append("        const long nb = je - jb;")
    L.append("        " + " ".join(f"V mx{t} = VSET1(-INFINITY);" for t in qs))

    def logits(masked: bool) -> list[str]:
        ld = (lambda e: f"VMLOAD(tm, {e})") if masked else (lambda e: f"VLOAD({e})")
        out = [f"            const V kk{c} = {ld(f'k{c} + j')};" for c in range(p)]
        if bias:
            out.append(f"            const V bb = {ld('bb_ + j')};")
        for t in qs:
            expr = f"VMUL(q{t}_0, kk0)"
            for c in range(1, p):
                expr = f"VFMA(q{t}_{c}, kk{c}, {expr})"
            if bias:
                expr = f"VADD({expr}, bb)"
            out.append(f"            const V l{t} = {expr};")
            if masked:
                out += [f"            VMSTORE(buf + {t} * KB + j, tm, l{t});",
                        f"            mx{t} = VMMAX(mx{t}, tm, l{t}, mx{t});"]
            else:
                out += [f"            VSTORE(buf + {t} * KB + j, l{t});", f"            mx{t} = VMAX(l{t}, mx{t});"]
        return out

    L += ["        long j = 0;", "        for (; j + W <= nb; j += W) {"] + logits(False) + ["        }",
          "        if (j < nb) {", "            const VM tm = VTAIL(nb - j);"] + logits(True) + ["        }"]
    for t in qs:
        L.append(f"        {{ const T bm = VRMAX(mx{t});  /* a larger maximum: rescale the sums so far */")
        L.append(f"          if (bm > mrow[{t}]) {{")
        L.append(f"            if (mrow[{t}] != -INFINITY) {{")
        L.append(f"              const DV f = DSET1(exp((double)mrow[{t}] - (double)bm));")
        L.append(f"              for (int c = 0; c < {nacc}; ++c) "
                 + (f"Sacc[{t}][c] = DMUL(Sacc[{t}][c], f);" if not f32 else
                    f"{{ Sacc[{t}][c][0] = DMUL(Sacc[{t}][c][0], f); "
                    f"Sacc[{t}][c][1] = DMUL(Sacc[{t}][c][1], f); }}"))
        L.append(f"            }}  mrow[{t}] = bm; }} }}")
    # pass 2 over the block, one query at a time (its d + 1 lane sums in registers)
    L += [f"        for (int t = 0; t < {Q}; ++t) {{",
          "            const T *restrict bt = buf + t * KB;",
          "            const V mm = VSET1(mrow[t]);"]
    if f32:
        L.append("            " + " ".join(f"V S{c} = VZERO();" for c in range(nacc)))
    else:
        L.append("            " + " ".join(f"V S{c} = Sacc[t][{c}];" for c in range(nacc)))

    def weights(masked: bool) -> list[str]:
        ld = (lambda e: f"VMLOAD(tm, {e})") if masked else (lambda e: f"VLOAD({e})")
        w = f"tpde_vexp(VSUB({ld('bt + j')}, mm))"
        out = [f"                const V w = {'VMZ(tm, ' + w + ')' if masked else w};",
               "                S0 = VADD(S0, w);"]
        return out + [f"                S{1 + c} = VFMA(w, {ld(f'v{c} + j')}, S{1 + c});" for c in range(d)]

    L += ["            long j = 0;", "            for (; j + W <= nb; j += W) {"] + weights(False)
    L += ["            }", "            if (j < nb) {", "                const VM tm = VTAIL(nb - j);"]
    L += weights(True) + ["            }"]
    if f32:  # the block's float32 lanes added in float64
        for c in range(nacc):
            L += [f"            Sacc[t][{c}][0] = DADD(Sacc[t][{c}][0], F2DLO(S{c}));",
                  f"            Sacc[t][{c}][1] = DADD(Sacc[t][{c}][1], F2DHI(S{c}));"]
    else:
        L += [f"            Sacc[t][{c}] = S{c};" for c in range(nacc)]
    L += ["        }", "    }"]
    red = ((lambda t, c: f"DRED(DADD(Sacc[{t}][{c}][0], Sacc[{t}][{c}][1]))") if f32
           else (lambda t, c: f"DRED(Sacc[{t}][{c}])"))
    for t in qs:
        L += [f"    const T m{t} = mrow[{t}];"] + ([f"    const T sl{t} = slt[{t}];"] if sink else [])
        L.append(f"    double den{t} = {red(t, 0)};")
        L += [f"    double a{t}_{c} = {red(t, 1 + c)};" for c in range(d)]
        L += [x for x in finish(mode, sink, d, f"a{t}_{{c}}", f"m{t}", f"sl{t}", f"den{t}",
                                f"outt[{t} * D + {{c}}]")]
    L.append("}")
    return "\n".join(L)
