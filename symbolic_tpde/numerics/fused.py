"""Fused compiled kernel behind :func:`symbolic_tpde.numerics.fields_core.attend` (softmax, sigmoid, exp).

For each query ``i`` with logits ``l_ij = q_i·k_j + β_j`` over the visible keys ``j < K_i`` (``K_i = prefix_i``
or ``n_k``), one thread computes, in a fixed order (so the result is bitwise independent of the thread count):

* softmax: ``m_i = max(max_j l_ij, s_i)``, then ``out_i = (Σ_j e^{l_ij - m_i} v_j + e^{s_i - m_i} v_s) /
  (Σ_j e^{l_ij - m_i} + e^{s_i - m_i})`` (two passes: row maximum, then ``exp``-and-accumulate; the sink
  terms ``s_i, v_s`` only when a sink is given);
* exp (unnormalised): ``out_i = e^{m_i - log n_k} Σ_j e^{l_ij - m_i} v_j``; a zero sum gives 0 (``0·inf = 0``)
  and ``inf`` appears only when the true result overflows (the product is formed in float64, and when
  ``e^{m_i - log n_k}`` alone overflows it is recomputed as ``±e^{m_i - log n_k + log|Σ|}``);
* sigmoid: ``out_i = (1/n_k) Σ_j σ(q_i·k_j + b) v_j`` with ``σ(z) = 1/(1+e^{-z})`` for ``z ≥ 0`` and
  ``e^{z}/(1+e^{z})`` for ``z < 0``, so ``exp`` only ever sees arguments ``≤ 0``.

The C source is generated per (mode, dtype, p, d, key bias?, prefix?, sink?) with ``p`` and ``d`` as
compile-time constants (loops fully unrolled), keys and values transposed to ``(p, n_k)`` / ``(d, n_k)`` so the
inner loop over keys is unit-stride and vectorised with ``#pragma omp simd`` (``-fopenmp-simd``: no OpenMP
runtime, hence no fork hazard in process pools).  Queries are spread over POSIX threads started per call
(``threads``; default: the cores this process may use), each taking chunks of 16 queries from an atomic
counter.  float32 sums run in blocks of 1024 keys in float32 (vectorised), block totals in float64.

On AVX-512 and on AVX2 with FMA (the compiler's ``__AVX512F__`` / ``__AVX2__``, i.e. ``-march=native`` on such
a machine) the softmax and unnormalised loops for ``d ≤ 8`` are :mod:`.fused_simd`'s instead: hand-vectorised,
online over key blocks of 256 (float32: 512) keys; on AVX-512 with a table-driven ``exp`` of 16 vector
instructions (bound 1.2 eps).  Measured against the plain-C loops below in interleaved rounds (d = 8, n = 8000,
one thread, AVX-512): 1.65x; the half of the time that went to ``exp`` and the accumulator spills of the 8-query
tiles were the cause.  ``TPDE_FUSED_ISA`` (``avx2``, ``plain``; :data:`ISA_FLAGS`) builds the forms other
machines run.  Everything in this docstring from here on describes the plain-C loops, which every other
machine and variant runs.

Query tiles (issue 12, d ≤ 8): for ``3 ≤ d ≤ 8`` without a prefix, each pass over the keys serves a tile of
``Q = 8`` queries (:func:`tile_size`), so every loaded key and value row is used 8 times (a chunk's last
partial tile is padded with copies of its last query).  Each query keeps its own maximum, weights and
accumulators with the same expressions and per-key order as the one-query loop, so the result is bitwise that
of ``Q = 1`` (tests/test_fused_kernel.py) and independent of the tile and thread a query lands in.  Measured
(one thread, CPU time, per-round ratios, shared 2-core box, 256-bit vectors): ``Q = 8`` takes 1/1.2 of the
time of ``Q = 1`` at d = 8, n = 8000 and 1/1.4-1/2.2 at n = 32000 (keys and values no longer fit in L2),
within ±15% at d = 3-6, n = 8000 (512-bit vectors, ``CFLAGS``: 1/1.2-1/1.45 at d = 8, n = 8000; the
same-run column ``t1/fus`` of ``numerics/bench_particles.py``); at ``d ≤ 2`` one query per pass is faster (the pass is bound by ``exp``, not by loading 2
keys and 2 values; tiles of 2-8 measured 1.2-1.3x slower), and a causal prefix (each query its own key
count) keeps the one-query loop.

``exp`` is this module's own, not libm's and not ``-ffast-math`` (which would assume no inf/nan, and the
integrators rely on non-finite fields to detect blow-up): for ``x ≤ 0``, ``k = rint(x/ln 2)``,
``r = x - k ln2_hi - k ln2_lo`` (Cody-Waite, ``|r| ≤ ln2/2``), ``e^r`` by its Taylor polynomial of degree 13
(float64; truncation ``≤ (ln2/2)^14/14! < 5e-18``) or 7 (float32; ``< 6e-9``), times ``2^k`` built in the
exponent bits; ``x < -708`` (float32: ``-87``) returns 0 (the true value is below 3.3e-308, resp. 1.7e-38),
NaN propagates.  Measured (tests/test_fused_kernel.py, against ``exp`` in long double at 2.1e6 arguments in
[-745, 0] and [-1, 0]): max relative error 1.4e-16 = 0.61 eps in float64 (numpy's own: 0.58 eps) and
7.4e-8 = 0.62 eps in float32 (numpy's: 1.65 eps); the test asserts < 1 eps.
The field then agrees with the blocked numpy path to ~1e-14 relative (float64) and ~1e-6 (float32).

Built through cffi API mode and the content-hash cache (:mod:`symbolic_tpde.codegen.cbuild`,
:mod:`symbolic_tpde.codegen.cache`); compiled with ``-march=native``, so the CPU model and flags are part of
the key.  Without a compiler or cffi (or when the build fails) :func:`attend_fused` returns ``None`` and the
caller runs the numpy path; that is announced once per process (a :class:`FusedFallbackWarning` and one
stderr line).  ``TPDE_FUSED=0`` disables the kernel.

References: the particle field of Castin, Ablin, Carrillo, Peyré (arXiv 2501.18322) as written in
``symbolic_tpde/numerics/fields.py``; the two-pass loop of issue 12 as the yardstick (one thread, n = 8000,
d = 2, same run, shared 2-core box: this kernel takes 0.7-0.8x the time of the ``-ffast-math`` libmvec loop
in float64 and float32); Cody & Waite's range reduction (Software Manual for the Elementary Functions, 1980); timings
against the numpy path: ``numerics/bench_fused.py``.  No SymPy here.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings

import numpy as np

from ..codegen import cbuild
from ..codegen.cache import Cache, make_key
from ..errors import InputError
from . import fused_simd

__all__ = ["FusedFallbackWarning", "attend_fused", "c_source", "available", "default_threads", "kernel_exp",
           "simd_compiled", "work_entries", "isa_form", "cflags", "ISA_FLAGS",
           "tile_size", "MAX_P", "MAX_D", "CFLAGS", "EXP_SOURCE", "module"]

#: Feature dimensions from this size on take BLAS for the logits (a real matmul there) and the compiled row
#: pass of :mod:`.fused_rows` for the rest.
MAX_P = 32
#: Largest value dimension the kernel is generated for.
MAX_D = 64
#: Below this many pairs a call runs in one thread (thread start-up, ~20 µs, would dominate).
THREADS_MIN_PAIRS = 1 << 16
#: Compiler flags (part of the cache key, together with the CPU signature because of -march=native).
#: No -ffast-math: inf/nan must propagate.  -fopenmp-simd honours the simd pragmas without an OpenMP runtime.
#: -mprefer-vector-width=512: on AVX-512 machines gcc otherwise keeps 256-bit vectors; 512 measured 1.3x
#: faster at d = 2 and 1.2x (one query per pass) / 1.5-1.6x (tiles of 8) at d = 8 (one thread, n = 8000,
#: same run); ignored without AVX-512.
CFLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fPIC", "-shared", "-fno-math-errno",
          "-fopenmp-simd", "-std=gnu11", "-pthread")
CHUNK = 16
#: ``TPDE_FUSED_ISA``: ``avx2`` adds ``-mno-avx512f`` (the AVX2 loops of :mod:`.fused_simd` on an AVX-512
#: machine); ``plain`` that and ``-DTPDE_NO_SIMD`` (the plain-C loops, vectorised by gcc for AVX2: the kernel an
#: AVX2 machine ran before :mod:`.fused_simd`): for tests and benchmarks of the forms other machines run.
#: Unset: what the machine supports.
ISA_FLAGS = {"": (), "native": (), "avx2": ("-mno-avx512f",), "plain": ("-mno-avx512f", "-DTPDE_NO_SIMD")}


def isa_form() -> str:
    """The form ``TPDE_FUSED_ISA`` asks for (``""``: the machine's own)."""
    isa = os.environ.get("TPDE_FUSED_ISA", "").strip().lower()
    if isa not in ISA_FLAGS:  # a user's setting: bad input (exit 2), not an internal error
        raise InputError("TPDE_FUSED_ISA", f"unknown form {isa!r}: expected one of "
                         f"{', '.join(k for k in ISA_FLAGS if k)} (or unset)")
    return "" if isa == "native" else isa


def cflags(isa: str | None = None) -> tuple:
    """The kernel's compiler flags: :data:`CFLAGS` plus those of ``isa`` (default: :func:`isa_form`)."""
    return CFLAGS + ISA_FLAGS[isa_form() if isa is None else isa]


class FusedFallbackWarning(UserWarning):
    """The fused C kernel is unavailable; the numpy path runs instead (issued once per process)."""


#: Source of the kernel's ``exp`` per C type (also used by :mod:`.fused_rows`).
EXP_SOURCE = {
    "double": """
/* e^x for x <= 0 (see the module docstring of symbolic_tpde.numerics.fused): max rel. error ~1.1 ulp. */
static inline double tpde_exp(double x) {
    const double xc = x < -708.0 ? -708.0 : x;
    const double t = xc * 1.4426950408889634 + 0x1.8p52;
    const double kf = t - 0x1.8p52;
    double r = xc - kf * 6.93147180369123816490e-01;
    r = r - kf * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;  p = p * r + 1.0 / 39916800.0;  p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;     p = p * r + 1.0 / 40320.0;     p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;        p = p * r + 1.0 / 120.0;       p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;          p = p * r + 0.5;               p = p * r + 1.0;
    p = p * r + 1.0;
    union { double f; uint64_t u; } tb = { t }, sb;
    sb.u = (tb.u + 1023u) << 52;
    const double y = p * sb.f;
    return x < -708.0 ? 0.0 : y;
}
""",
    "float": """
/* e^x for x <= 0 (see the module docstring of symbolic_tpde.numerics.fused): max rel. error ~1 ulp. */
static inline float tpde_exp(float x) {
    const float xc = x < -87.0f ? -87.0f : x;
    const float t = xc * 1.44269504f + 0x1.8p23f;
    const float kf = t - 0x1.8p23f;
    float r = xc - kf * 0.693145751953125f;
    r = r - kf * 1.428606765330187045e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;  p = p * r + 1.0f / 120.0f;  p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;    p = p * r + 0.5f;           p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { float f; uint32_t u; } tb = { t }, sb;
    sb.u = (tb.u + 127u) << 23;
    const float y = p * sb.f;
    return x < -87.0f ? 0.0f : y;
}
""",
}


def _cdecl(T: str) -> str:
    return (f"void tpde_exp_array(long n, const {T} *x, {T} *y);\nint tpde_simd(void);\n"
            f"void tpde_vexp_array(long n, const {T} *x, {T} *y);\n"
            f"int tpde_attend(long nq, long nk, const {T} *q, const {T} *kT, const {T} *vT, const {T} *bias, "
            f"const int64_t *prefix, const {T} *sink_logit, const {T} *sink_value, double shift, {T} *out, "
            f"int threads);")


def c_source(mode: str, dtype, p: int, d: int, bias: bool = False, prefix: bool = False,
             sink: bool = False, tile: int | None = None) -> str:
    """C translation unit of one kernel variant (exported function ``tpde_attend``, see :func:`_cdecl`).

    Arguments of ``tpde_attend``, in order: ``nq, nk``; ``q (nq, p)``; ``kT (p, nk)``; ``vT (d, nk)``;
    ``bias (nk,)`` or NULL; ``prefix (nq,)`` int64 or NULL; ``sink_logit (nq,)``, ``sink_value (d,)`` or NULL;
    ``shift`` (sigmoid); ``out (nq, d)``; ``threads``.  Returns the number of threads that ran (at most
    ``threads`` and the number of 16-query chunks), or -1 when a work buffer could not be allocated.
    ``tile``: queries per pass over the keys (:func:`tile_size` when None; 1 = one query per pass; only for
    ``d <= 8`` without a prefix, else 1).
    """
    T = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}[np.dtype(dtype)]
    if mode not in ("softmax", "exp", "sigmoid"):
        raise ValueError(f"unknown mode {mode!r}")
    fused = d <= 8  # fused exp-and-accumulate; above that the weights go to a buffer first (registers)
    simd = fused_simd.covered(mode, d)  # hand-vectorised loops when the compiler targets AVX-512F or AVX2

    def queries_per_tile(default: int, tiled: bool) -> int:  # a prefix (own key count per query): one query
        return (default if tile is None else int(tile)) if tiled and not prefix else 1

    Q = queries_per_tile(tile_size(d), fused)  # plain-C loops
    Qs = queries_per_tile(fused_simd.tile_size(d), simd)  # AVX-512
    Q2 = queries_per_tile(fused_simd.tile_size(d, "avx2"), simd)  # AVX2
    if not (1 <= Q <= CHUNK and 1 <= Qs <= CHUNK and 1 <= Q2 <= CHUNK):
        raise ValueError(f"tile must be in 1..{CHUNK}, got {tile}")
    A = "double"
    accs = [f"a{c}" for c in range(d)]
    dot = " + ".join(f"q{a} * k{a}[j]" for a in range(p))
    L = [f"/* Generated by symbolic_tpde.numerics.fused; do not edit.  mode={mode} dtype={T} p={p} d={d}",
         f" * bias={int(bias)} prefix={int(prefix)} sink={int(sink)}.  Formula: see the module docstring.",
         " * " + _cdecl(T).replace("*/", "* /"), " */",
         "#include <math.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <pthread.h>", "",
         f"#define P {p}", f"#define D {d}", f"#define CHUNK {CHUNK}", f"typedef {T} T;",
         "#define JB " + ("1024" if T == "float" else "(1L << 62)") + "  /* keys per T-precision partial sum */",
         EXP_SOURCE[T],
         "typedef struct {",
         "    long nq, nk; const T *q, *kT, *vT, *bias; const int64_t *prefix;",
         "    const T *sink_logit, *sink_value; double shift; T *out; long next; int failed;",
         "} tpde_args;", ""]
    if simd:
        L += ["#if defined(__AVX512F__) && !defined(TPDE_NO_SIMD)", "#include <immintrin.h>", f"#define QT {Qs}",
              "#define TPDE_SIMD 1",
              fused_simd.exp_source(T, "avx512"),
              fused_simd.row_and_tile_source(mode, T, p, d, bias, sink, Qs, _finish),
              "#elif defined(__AVX2__) && defined(__FMA__) && !defined(TPDE_NO_SIMD)", "#include <immintrin.h>",
              f"#define QT {Q2}",
              "#define TPDE_SIMD 2", fused_simd.exp_source(T, "avx2"),
              fused_simd.row_and_tile_source(mode, T, p, d, bias, sink, Q2, _finish),
              "#else"]
    L += [f"#define QT {Q}", "#define TPDE_SIMD 0",
         "static void tpde_row(const tpde_args *restrict a, long i, T *restrict buf) {",
         "    const long nk = a->nk;"]
    L += [f"    const T q{c} = a->q[i * P + {c}];" for c in range(p)]
    L += [f"    const T *restrict k{c} = a->kT + {c} * nk;" for c in range(p)]
    L += [f"    const T *restrict v{c} = a->vT + {c} * nk;" for c in range(d)]
    if bias:
        L.append("    const T *restrict bj = a->bias;")
    L.append(f"    {A} " + ", ".join(f"{x} = 0" for x in accs) + ";")
    if prefix:
        L += ["    long kmax = (long)a->prefix[i];",
              "    kmax = kmax < 0 ? 0 : (kmax > nk ? nk : kmax);"]
    else:
        L.append("    const long kmax = nk;")

    def acc_loop(names, body):
        """Sum ``body``'s terms over the visible keys into the float64 accumulators ``names``: in blocks of JB
        keys summed in T (vectorised), each block total added in float64 (float32: error ~JB/lanes ulp)."""
        parts = ", ".join(f"s_{x} = 0" for x in names)
        return (["    for (long j0 = 0; j0 < kmax; j0 += JB) {",
                 "        const long j1 = j0 + JB < kmax ? j0 + JB : kmax;",
                 f"        T {parts};",
                 f"        #pragma omp simd reduction(+:{','.join('s_' + x for x in names)})",
                 "        for (long j = j0; j < j1; ++j) {"]
                + ["            " + line for line in body]
                + ["        }"] + [f"        {x} += ({A})s_{x};" for x in names] + ["    }"])

    if mode == "sigmoid":
        L.append("    const T shift = (T)a->shift;")
        sig = [f"const T z = {dot} + shift;", "const T t = tpde_exp(-fabs(z));",
               "const T s = (z >= 0 ? (T)1 : t) / ((T)1 + t);"]
        if fused:
            L += acc_loop(accs, sig + [f"s_a{c} += s * v{c}[j];" for c in range(d)])
        else:
            L += ["    #pragma omp simd", "    for (long j = 0; j < kmax; ++j) {"]
            L += ["        " + x for x in sig] + ["        buf[j] = s;", "    }"]
            for c in range(d):
                L += acc_loop([f"a{c}"], [f"s_a{c} += buf[j] * v{c}[j];"])
        L += _finish(mode, sink, d, "a{c}", "", "", "", "a->out[i * D + {c}]") + ["}"]
    else:
        L += ["    T m = -INFINITY;", "    #pragma omp simd reduction(max:m)",
              "    for (long j = 0; j < kmax; ++j) {",
              f"        const T l = {dot}" + (" + bj[j];" if bias else ";"),
              "        buf[j] = l;", "        m = l > m ? l : m;", "    }"]
        if sink:
            L += ["    const T sl = a->sink_logit[i];", "    m = sl > m ? sl : m;"]
        L.append(f"    {A} den = 0;")
        if fused:
            L += acc_loop(["den", *accs], ["const T w = tpde_exp(buf[j] - m);", "s_den += w;"]
                          + [f"s_a{c} += w * v{c}[j];" for c in range(d)])
        else:
            L += acc_loop(["den"], ["const T w = tpde_exp(buf[j] - m);", "buf[j] = w;", "s_den += w;"])
            for c in range(d):
                L += acc_loop([f"a{c}"], [f"s_a{c} += buf[j] * v{c}[j];"])
        L += _finish(mode, sink, d, "a{c}", "m", "sl", "den", "a->out[i * D + {c}]") + ["}"]
    if Q > 1:
        L += _tile_fn(mode, p, d, bias, sink, Q, acc_loop)
    if simd:
        L.append("#endif")
    need_buf = not (mode == "sigmoid" and fused)
    L += ["", "static void *tpde_worker(void *arg) {", "    tpde_args *a = (tpde_args *)arg;",
          "    T *buf = NULL;"]
    if need_buf:
        L += ["#if TPDE_SIMD", "    buf = (T *)malloc(sizeof(T) * (size_t)QT * KB);  /* one key block per query */",
              "#else",
              "    buf = (T *)malloc(sizeof(T) * (size_t)QT * (size_t)(a->nk > 0 ? a->nk : 1));", "#endif",
              "    if (!buf) { __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED); return NULL; }"]
    L += ["    for (;;) {",
          "        const long lo = __atomic_fetch_add(&a->next, CHUNK, __ATOMIC_RELAXED);",
          "        if (lo >= a->nq) break;",
          "        const long hi = lo + CHUNK < a->nq ? lo + CHUNK : a->nq;"]
    if max(Q, Qs, Q2) == 1:
        L.append("        for (long i = lo; i < hi; ++i) tpde_row(a, i, buf);")
    else:  # full tiles in place; a chunk's last partial tile padded with copies of its last query (same code path)
        L += ["#if QT == 1", "        for (long i = lo; i < hi; ++i) tpde_row(a, i, buf);", "#else",
              "        for (long i = lo; i < hi; i += QT) {",
              "            if (i + QT <= hi) {",
              "                tpde_tile(a, a->q + i * P, " + ("a->sink_logit + i" if sink else "NULL")
              + ", a->out + i * D, buf);", "                continue;", "            }",
              "            T qp[QT * P], sp[QT], op[QT * D];",
              "            for (long t = 0; t < QT; ++t) {",
              "                const long r = i + t < hi ? i + t : hi - 1;",
              "                for (long c = 0; c < P; ++c) qp[t * P + c] = a->q[r * P + c];",
              "                sp[t] = " + ("a->sink_logit[r];" if sink else "0;"), "            }",
              "            tpde_tile(a, qp, sp, op, buf);",
              "            for (long t = 0; i + t < hi; ++t)",
              "                for (long c = 0; c < D; ++c) a->out[(i + t) * D + c] = op[t * D + c];",
              "        }", "#endif"]
    L += ["    }", "    free(buf);", "    return NULL;", "}", "",
          "void tpde_exp_array(long n, const T *x, T *y) {  /* the plain-C exp, vectorised as in the loops */",
          "    #pragma omp simd", "    for (long j = 0; j < n; ++j) y[j] = tpde_exp(x[j]);", "}", "",
          "int tpde_simd(void) { return TPDE_SIMD; }  /* fused_simd's loops compiled: 1 AVX-512, 2 AVX2; 0 none */",
          "",
          "void tpde_vexp_array(long n, const T *x, T *y) {  /* the exp of the hot loops */",
          "#if TPDE_SIMD", "    long j = 0;", "    for (; j + W <= n; j += W) VSTORE(y + j, tpde_vexp(VLOAD(x + j)));",
          "    if (j < n) VMSTORE(y + j, VTAIL(n - j), tpde_vexp(VMLOAD(VTAIL(n - j), x + j)));",
          "#else", "    tpde_exp_array(n, x, y);", "#endif", "}", "",
          _cdecl(T).splitlines()[-1][:-1] + " {",
          "    tpde_args a = { nq, nk, q, kT, vT, bias, prefix, sink_logit, sink_value, shift, out, 0, 0 };",
          "    const long chunks = (nq + CHUNK - 1) / CHUNK;",
          "    if (threads > 64) threads = 64;", "    if (threads > chunks) threads = (int)chunks;",
          "    pthread_t tid[64];", "    int started = 0;",
          "    for (int t = 1; t < threads; ++t) {",
          "        if (pthread_create(&tid[started], NULL, tpde_worker, &a) != 0) break;",
          "        ++started;", "    }",
          "    tpde_worker(&a);  /* the calling thread works too; fewer threads only cost time */",
          "    for (int t = 0; t < started; ++t) pthread_join(tid[t], NULL);",
          "    return a.failed ? -1 : started + 1;", "}", ""]
    return "\n".join(L)


def _finish(mode: str, sink: bool, d: int, acc: str, m: str, sl: str, den: str, out: str) -> list[str]:
    """C block finishing one query (formulas: module docstring): ``acc`` and ``out`` are templates in ``{c}``
    (accumulator and output of value component ``c``), ``m``, ``sl``, ``den`` the names of the row maximum,
    sink logit and weight sum."""
    a = [acc.format(c=c) for c in range(d)]
    o = [out.format(c=c) for c in range(d)]
    if mode == "sigmoid":
        return [f"    {o[c]} = (T)({a[c]} / (double)nk);" for c in range(d)]
    L = ["    {"]
    if mode == "softmax":
        if sink:
            L += [f"    const double ws = (double)tpde_exp({sl} - {m});", f"    {den} += ws;"]
            L += [f"    {a[c]} += ws * (double)a->sink_value[{c}];" for c in range(d)]
        L += [f"    {o[c]} = (T)({a[c]} / {den});" for c in range(d)]
    else:  # exp: e^{m - log n_k} * sum, formed in double; 0 * inf = 0; inf only on true overflow
        L += [f"    const double ls = (double){m} - log((double)nk), sc = exp(ls);", "    double v;"]
        for c in range(d):
            L += [f"    v = {a[c]} == 0 ? 0.0 : sc * (double){a[c]};",
                  f"    if (isinf(sc) && {a[c]} != 0 && isfinite({a[c]}))  /* e^ls overflows, the product may not */",
                  f"        v = copysign(exp(ls + log(fabs((double){a[c]}))), (double){a[c]});",
                  f"    {o[c]} = (T)v;"]
    return L + ["    }"]


def tile_size(d: int) -> int:
    """Queries per pass over the keys of the plain-C loops for value dimension ``d`` (see :func:`c_source`)."""
    return 8 if 3 <= d <= 8 else 1


def work_entries(mode: str, d: int, n_k: int, dtype=np.float64) -> int:
    """Entries of the work buffer one thread of the kernel allocates (softmax/exp: logits of a tile of
    queries; fused_simd's loops: one key block per query of the tile, else a whole row of ``n_k`` per query)."""
    form = simd_compiled(dtype) if fused_simd.covered(mode, d) else ""
    if form:
        T = "double" if np.dtype(dtype) == np.float64 else "float"
        return fused_simd.tile_size(d, form) * fused_simd.KEY_BLOCK[T]
    return (tile_size(d) if d <= 8 else 1) * max(1, n_k)


def _tile_fn(mode: str, p: int, d: int, bias: bool, sink: bool, Q: int, acc_loop) -> list[str]:
    """C lines of ``tpde_tile``: ``tpde_row`` for ``Q`` queries in one pass over the keys (no prefix, d <= 8).

    Each loaded key and value row serves ``Q`` queries; every query keeps its own maximum, weights and
    accumulators, with the same expressions and the same per-key order as ``tpde_row``."""
    qs = range(Q)
    L = ["", "static void tpde_tile(const tpde_args *restrict a, const T *restrict qt, const T *restrict slt,",
         "                      T *restrict outt, T *restrict buf) {",
         "    const long nk = a->nk, kmax = nk;", "    (void)slt;"]
    L += [f"    const T q{t}_{c} = qt[{t} * P + {c}];" for t in qs for c in range(p)]
    L += [f"    const T *restrict k{c} = a->kT + {c} * nk;" for c in range(p)]
    L += [f"    const T *restrict v{c} = a->vT + {c} * nk;" for c in range(d)]
    if bias:
        L.append("    const T *restrict bj = a->bias;")
    dots = [" + ".join(f"q{t}_{c} * k{c}[j]" for c in range(p)) for t in qs]
    accs = {t: [f"a{t}_{c}" for c in range(d)] for t in qs}
    L.append("    double " + ", ".join(f"{x} = 0" for t in qs for x in accs[t]) + ";")
    if mode == "sigmoid":
        L.append("    const T shift = (T)a->shift;")
        body = []
        for t in qs:
            body += [f"const T z{t} = {dots[t]} + shift;", f"const T t{t} = tpde_exp(-fabs(z{t}));",
                     f"const T s{t} = (z{t} >= 0 ? (T)1 : t{t}) / ((T)1 + t{t});"]
            body += [f"s_a{t}_{c} += s{t} * v{c}[j];" for c in range(d)]
        L += acc_loop([x for t in qs for x in accs[t]], body)
        for t in qs:
            L += _finish(mode, sink, d, f"a{t}_{{c}}", "", "", "", f"outt[{t} * D + {{c}}]")
        return L + ["}"]
    L += [f"    T *restrict b{t} = buf + {t} * nk;" for t in qs]
    L += ["    " + " ".join(f"T m{t} = -INFINITY;" for t in qs),
          "    #pragma omp simd reduction(max:" + ",".join(f"m{t}" for t in qs) + ")",
          "    for (long j = 0; j < kmax; ++j) {"]
    for t in qs:
        L += [f"        const T l{t} = {dots[t]}" + (" + bj[j];" if bias else ";"),
              f"        b{t}[j] = l{t};", f"        m{t} = l{t} > m{t} ? l{t} : m{t};"]
    L.append("    }")
    if sink:
        L += [f"    const T sl{t} = slt[{t}];  m{t} = sl{t} > m{t} ? sl{t} : m{t};" for t in qs]
    L.append("    double " + ", ".join(f"den{t} = 0" for t in qs) + ";")
    body = []
    for t in qs:
        body += [f"const T w{t} = tpde_exp(b{t}[j] - m{t});", f"s_den{t} += w{t};"]
        body += [f"s_a{t}_{c} += w{t} * v{c}[j];" for c in range(d)]
    L += acc_loop([x for t in qs for x in (f"den{t}", *accs[t])], body)
    for t in qs:
        L += _finish(mode, sink, d, f"a{t}_{{c}}", f"m{t}", f"sl{t}", f"den{t}", f"outt[{t} * D + {{c}}]")
    return L + ["}"]


class _State:
    """Per-process registry of loaded kernels and of the one fallback announcement."""

    def __init__(self):
        self.lock = threading.Lock()
        self.modules: dict[tuple, object] = {}
        self.failed: dict[tuple, str] = {}
        self.announced = False
        self.last_threads = 0  # threads used by the latest call (diagnostics, tests)

    def reset(self) -> None:
        with self.lock:
            self.modules.clear()
            self.failed.clear()
            self.announced = False


STATE = _State()


def available() -> str | None:
    """``None`` when the fused kernel can be built here, else the reason (``TPDE_FUSED=0`` included)."""
    if os.environ.get("TPDE_FUSED", "1").strip() == "0":
        return "disabled by TPDE_FUSED=0"
    return cbuild.availability()


def _announce(reason: str) -> None:
    if STATE.announced:
        return
    STATE.announced = True
    msg = f"fused particle kernel unavailable ({reason}); using the numpy path"
    warnings.warn(msg, FusedFallbackWarning, stacklevel=4)
    print(f"symbolic_tpde: {msg}", file=sys.stderr)


def module(variant: tuple):
    """The loaded cffi module of a variant, building (or fetching from the cache) on first use; or None.

    ``variant``: the arguments of :func:`c_source`, or ``("rows", mode, dtype, bias, prefix, sink)`` for
    :func:`.fused_rows.c_source`."""
    isa = isa_form()
    key = (variant, isa)
    mod = STATE.modules.get(key)
    if mod is not None:
        return mod
    with STATE.lock:
        if key in STATE.modules:
            return STATE.modules[key]
        if key in STATE.failed:
            reason = STATE.failed[key]
        else:
            reason = available()
            if reason is None:
                try:
                    mod = _build(variant, isa)
                except (cbuild.CompilerUnavailable, RuntimeError, OSError, ImportError) as exc:
                    reason = f"build failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            if mod is not None:
                STATE.modules[key] = mod
                return mod
            if not reason.startswith("disabled"):
                STATE.failed[key] = reason
    if not reason.startswith("disabled"):
        _announce(reason)
    return None


def _key(csrc: str, cc, isa: str = "") -> str:
    """Cache key: source, backend, compiler, flags and (because of -march=native) the CPU signature."""
    return make_key(csrc, "fused-attend-cffi-api", (*cc, *cflags(isa), cbuild.cpu_signature()))


def _build(variant: tuple, isa: str = ""):
    if variant[0] == "rows":
        from . import fused_rows

        dt = variant[2]
        csrc, cdecl = fused_rows.c_source(*variant[1:]), fused_rows.cdecl
    else:
        dt = variant[1]
        csrc, cdecl = c_source(*variant), _cdecl
    cc = cbuild.find_compiler()
    if cc is None:
        raise cbuild.CompilerUnavailable(cbuild.availability() or "no C compiler")
    key = _key(csrc, cc, isa)
    modname = f"_tpde_fused_{key[:20]}"
    cache = Cache()
    path = cache.get_file(key, ".so")
    if path is not None:
        try:
            return cbuild.load_extension(path, modname)
        except ImportError as exc:  # checksum ok but unloadable: rebuild
            warnings.warn(f"cached fused kernel {path} failed to load ({exc}); rebuilding", stacklevel=2)
    T = "double" if np.dtype(dt) == np.float64 else "float"
    data = cbuild.compile_extension(csrc, modname, cdecl(T), cflags(isa), cc, libs=("-lm",))
    path = cache.put_file(key, ".so", data)
    return cbuild.load_extension(cache.get_file(key, ".so") or path, modname)


def kernel_exp(x: np.ndarray, loops: bool = False) -> np.ndarray | None:
    """The kernel's own ``exp`` applied to ``x`` (float32 or float64, entries ``≤ 0``); None if unavailable.

    ``loops=False``: the plain-C ``exp`` (sigmoid, ``d > 8``, a sink's weight, and everything on machines
    with neither AVX-512 nor AVX2); ``loops=True``: the ``exp`` of the softmax/unnormalised loops for ``d ≤ 8``
    and of the rows pass, which is :mod:`.fused_simd`'s where the compiler targets AVX-512F or AVX2
    (:func:`simd_compiled`), else the same plain-C one.  For measuring their accuracy
    (tests/test_fused_kernel.py); the kernels call the same inline functions."""
    x = np.ascontiguousarray(x)
    mod = _probe_module(x.dtype)
    if mod is None:
        return None
    T = "double[]" if x.dtype == np.float64 else "float[]"
    y = np.empty_like(x)
    fn = mod.lib.tpde_vexp_array if loops else mod.lib.tpde_exp_array
    fn(x.size, mod.ffi.from_buffer(T, x), mod.ffi.from_buffer(T, y, require_writable=True))
    return y


def simd_compiled(dtype=np.float64) -> str | None:
    """Which loops this machine's build runs for softmax at d <= 8: ``"avx512"`` or ``"avx2"`` (those of
    :mod:`.fused_simd`), ``""`` (the plain-C loops), or None (no kernel)."""
    mod = _probe_module(dtype)
    return None if mod is None else {1: "avx512", 2: "avx2"}.get(int(mod.lib.tpde_simd()), "")


def _probe_module(dtype):
    """The smallest softmax variant (p = d = 1, one query per pass): what :func:`kernel_exp` and
    :func:`simd_compiled` load to ask the build about its exp and its loops."""
    return module(("softmax", np.dtype(dtype).str, 1, 1, False, False, False, 1))


def default_threads(pairs: int) -> int:
    """Threads for a call with ``pairs`` query-key pairs: the usable cores (at most the limit of
    :func:`.threads.limit_threads`), or 1 below ``THREADS_MIN_PAIRS``."""
    if pairs < THREADS_MIN_PAIRS:
        return 1
    from .threads import kernel_threads

    return kernel_threads()  # the usable cores, or the limit of an active threads.limit_threads block


def attend_fused(q, k, values, *, mode, key_bias, shift, prefix, sink_logit, sink_value, threads, tile=None):
    """The fused kernel's result for :func:`~symbolic_tpde.numerics.fields_core.attend`, or ``None`` when this
    call is not covered (``p ≥ MAX_P``, ``d > MAX_D``, mixed dtypes, sigmoid with bias/prefix/sink, exp with a
    sink) or the kernel is unavailable (announced once).  ``tile``: queries per pass over the keys
    (:func:`tile_size` when None; the result is bitwise the same for every tile, tests/test_fused_kernel.py)."""
    dt = values.dtype
    if dt not in (np.float32, np.float64) or q.dtype != dt or k.dtype != dt:
        return None
    n_q, p = q.shape
    n_k, d = values.shape
    if not (1 <= p < MAX_P and 1 <= d <= MAX_D and n_k >= 1 and n_q >= 1):
        return None
    if mode == "sigmoid" and (key_bias is not None or prefix is not None or sink_logit is not None):
        return None
    if mode == "exp" and sink_logit is not None:
        return None
    if mode not in ("softmax", "exp", "sigmoid") or (sink_logit is None) != (sink_value is None):
        return None
    variant = (mode, dt.str, p, d, key_bias is not None, prefix is not None, sink_logit is not None,
               tile_size(d) if tile is None else int(tile))
    mod = module(variant)
    if mod is None:
        return None
    ffi, lib = mod.ffi, mod.lib
    T = "double[]" if dt == np.float64 else "float[]"

    def buf(a, cdecl=T):
        return ffi.NULL if a is None else ffi.from_buffer(cdecl, a)

    qc = np.ascontiguousarray(q)
    kT = np.ascontiguousarray(k.T)
    vT = np.ascontiguousarray(values.T)
    kb = None if key_bias is None else np.ascontiguousarray(key_bias, dtype=dt).reshape(n_k)
    pf = None if prefix is None else np.ascontiguousarray(prefix, dtype=np.int64).reshape(n_q)
    sl = None if sink_logit is None else np.ascontiguousarray(sink_logit, dtype=dt).reshape(n_q)
    sv = None if sink_value is None else np.ascontiguousarray(sink_value, dtype=dt).reshape(d)
    out = np.empty((n_q, d), dtype=dt)
    nt = default_threads(n_q * n_k) if threads is None else max(1, int(threads))
    rc = lib.tpde_attend(n_q, n_k, buf(qc), buf(kT), buf(vT), buf(kb), buf(pf, "int64_t[]"), buf(sl), buf(sv),
                         float(shift), ffi.from_buffer(T, out, require_writable=True), nt)
    STATE.last_threads = rc
    if rc < 0:
        raise MemoryError(f"fused attention kernel: could not allocate a work buffer of {variant[-1]} x {n_k} "
                          "entries")
    return out
