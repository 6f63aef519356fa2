"""Hand-vectorised forms of the fused kernel's hot loops (softmax and unnormalised modes, ``d ≤ 32``; and the
exp of :mod:`.fused_rows`' row pass), for AVX-512 and for AVX2 with FMA: the C is in ``templates/tpde_vec.h``
(macros and the vector exp) and ``templates/fused_attend.c`` (the loops, under ``#if TPDE_SIMD``); this module
derives the exp's constants and chooses the tile sizes.  Other machines compile the plain-C loops; the forms
other machines run can be built here with ``TPDE_FUSED_ISA`` (:data:`.fused.ISA_FLAGS`): the tests check all
three, and ``numerics/bench_particles.py`` times them side by side (measurements: README, "Benchmarks").

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
computed by mpmath here; ``y = t_j + t_j (e^r − 1)`` with ``t_j = 2^{j/16}`` (``j = k mod 16``, a register
table read by one permute, the entries correctly rounded from mpmath), and ``e^x = y · 2^{⌊k/16⌋}`` by
``vscalefpd`` (one rounding, so subnormal results are rounded, not flushed).

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
(float32 ``−87``), as in the plain-C exp.  Measured: 0.66 eps (float64), 0.59 eps (float32).

References: Tang, "Table-driven implementation of the exponential function in IEEE floating-point arithmetic",
ACM TOMS 15 (1989) (the table-plus-polynomial scheme); Intel's intrinsics guide for ``vscalefpd`` and
``vpermt2pd``.  No SymPy here.
"""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["exp_defines", "covered", "tile_size", "superblock", "query_chunk", "KEY_BLOCK", "MAX_D"]

#: Keys per block (float32: at most 1024, so float32 partial sums stay as accurate as in :mod:`.fused`).
KEY_BLOCK = {"double": 256, "float": 512}


#: Largest value dimension the vector loops are generated for (their pass 2 keeps ``d + 1`` lane sums per query).
MAX_D = 32


def covered(mode: str, d: int) -> bool:
    """Whether this module has a hand-vectorised form of the variant (else the plain-C loops run)."""
    return mode in ("softmax", "exp") and 1 <= d <= MAX_D


#: Bytes of keys and values a superblock holds (half the 1 MB L2 per core of this kind of machine), and bytes
#: of tile states a chunk of queries keeps (float64 lane sums, ``(d + 1)`` vectors per query): see
#: :func:`superblock`, :func:`query_chunk`.
L2_BYTES = 1 << 19
STATE_BYTES = 1 << 17


def superblock(T: str, p: int, d: int) -> int:
    """Keys per superblock of the vector loops: a multiple of :data:`KEY_BLOCK` whose keys and values
    (``(p + d)`` entries per key) fit in :data:`L2_BYTES`.  Every tile of a chunk of queries sweeps one
    superblock while it is in L2 (so each key is read from memory once per chunk, not once per tile: the cost
    per pair stays flat as n grows); the result does not depend on it (the key blocks and their order are
    those of one pass)."""
    size = 4 if T == "float" else 8
    kb = KEY_BLOCK[T]
    return max(kb, L2_BYTES // (size * (p + d)) // kb * kb)


def query_chunk(T: str, d: int) -> int:
    """Queries a thread takes at once when the keys exceed one superblock: as many as keep their states
    (``(d + 1)`` lane-sum vectors of 64 bytes each, twice in float32) within :data:`STATE_BYTES`, a multiple
    of 16 in 16..256."""
    per_query = (d + 1) * 64 * (2 if T == "float" else 1)
    return int(min(256, max(16, STATE_BYTES // per_query // 16 * 16)))


def tile_size(d: int, isa: str = "avx512") -> int:
    """Queries per tile: their logits share each loaded key vector.  AVX-512: 4 at ``d ≤ 4``, else 8 (the
    measured choice: README, "Benchmarks"); AVX2 (16 vector registers): 4, so that the tile's lane maxima and a
    key vector per feature stay in registers."""
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
    ``k`` rounded through ``16/ln2``), highest degree first; its error bound ``max|r| · max|h - fit|`` is
    checked against :data:`POLY` here."""
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
    return {"hi": hi, "lo": lo, "tab": tab, "inv": inv, "coef": fit, "cut": cut}


#: AVX2 exp: no table (AVX2 has no cross-lane permute of 16 doubles); ``k = rint(x/ln2)``, ``|r| ≤ ln2/2``,
#: ``e^r`` by a Chebyshev fit of degree 11 (float32: 7), and the bound on the fit's relative error.
POLY_AVX2 = {"double": (11, 2.0 ** -55), "float": (7, 2.0 ** -26)}


@functools.lru_cache(maxsize=None)
def _constants_avx2(T: str) -> dict:
    """Constants of the AVX2 exp (as :func:`_constants`): Cody-Waite parts of ln2, the fit of ``e^r`` on
    ``|r| ≤ (ln2/2)(1 + 1e-6)`` (highest degree first), its relative error checked against :data:`POLY_AVX2`."""
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
    return {"hi": hi, "lo": lo, "inv": rnd(1 / mpmath.log(2)), "coef": fit, "cut": -708.0 if T == "double" else -87.0}


def exp_defines(T: str) -> dict:
    """The vector exps' constants for C type ``T`` as the macros ``templates/tpde_vec.h`` reads: ``TPDE_X512_*``
    (AVX-512) and ``TPDE_X2_*`` (AVX2), exact hexadecimal literals, polynomial coefficients highest degree first."""
    def lit(x: float) -> str:
        return x.hex() + ("f" if T == "float" else "")

    out = {}
    for prefix, c in (("TPDE_X512", _constants(T)), ("TPDE_X2", _constants_avx2(T))):
        out |= {f"{prefix}_{k.upper()}": lit(c[k]) for k in ("cut", "inv", "hi", "lo")}
        out[f"{prefix}_COEF"] = ", ".join(lit(a) for a in c["coef"])
        out[f"{prefix}_NCOEF"] = len(c["coef"])
    out["TPDE_X512_TAB"] = ", ".join(lit(v) for v in _constants(T)["tab"])
    return out
