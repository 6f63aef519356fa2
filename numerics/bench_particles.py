"""Benchmark: one softmax field evaluation, naive vs blocked numpy vs fused kernel vs a plain C yardstick.

Run:  python numerics/bench_particles.py [--quick] [--repeats R] [--n ...] [--d ...] [--memory-n 200000]
      [--memory-what field rk4 dopri5] [--memory-only] [--large] [--crossover]

``--crossover``: the fused kernel's vector loops against BLAS logits with the row pass at d = p = 8..32
(n = 4000, both dtypes, interleaved rounds): the measurement behind ``fused.CROSSOVER``.

For n in {2000, 8000, 32000} and d in {2, 8, 16, 24, 32, 64, 128}, plus n = 128 000 at d = 2 and 8, float64
and float32 (``--quick``: n in {2000, 8000}, d in {2, 16, 64}; ``--n``/``--d`` choose others; ``--large`` the
extra n) it times, in the same run and on the same data (``q = X Aᵀ``, keys and values ``X``; logits O(1)):

* ``naive``: the full n x n logit matrix, max-subtracted, exponentiated, normalised, multiplied (several
  passes); skipped when its three n x n temporaries exceed 3 GB or n > 8000 (minutes per call);
* ``numpy``: the blocked path :func:`symbolic_tpde.numerics.particles.attend.attend_numpy` (row blocks, BLAS at one
  thread per Python thread, default threads);
* ``fused``: :func:`symbolic_tpde.numerics.particles.attend.attend`, the package's dispatch (column ``path``:
  ``fused``, the fused C kernel of :mod:`symbolic_tpde.numerics.particles.fused`, up to ``fused.CROSSOVER``;
  ``flash``, the key-blocked kernel of :mod:`symbolic_tpde.numerics.particles.fused_flash`, above it on AVX-512 /
  AVX2 builds; ``rows``, BLAS logits and the compiled row pass of
  :mod:`symbolic_tpde.numerics.particles.fused_rows`, above it on other builds);
* ``tile1``: the fused kernel forced to one query per pass over the keys (``tile=1``; only where the
  dispatch tiles, 3 <= d <= 8), so ``t1/fus`` is the gain of the query tiles in the same run;
* ``avx2``, ``plain`` (x86, d <= 8, ``--no-forms`` to skip): the same dispatch with the kernel built as other
  machines build it (``TPDE_FUSED_ISA``): ``avx2`` the 256-bit loops of ``fused_simd`` (an AVX2 machine),
  ``plain`` the plain-C loops at AVX2 width (what an AVX2 machine ran before ``fused_simd``); numpy and its
  ``exp`` stay this machine's, so ``num/a2`` and ``num/pl`` are not what an AVX2 machine would show;
* ``torch`` (when torch is importable: an optional benchmark peer, never a dependency of the package):
  ``torch.nn.functional.scaled_dot_product_attention(q, X, X, scale=1)`` on the CPU with the usable cores as
  threads; ``tch/fus`` is the median of the per-round ratios torch time / ours, with ``=`` marking a cell whose
  rounds' ratios straddle 1 (parity within the round-to-round spread);
* ``fma%``: the dispatch's time against this machine's FMA rate measured in the same rounds by a probe (a
  compiled loop of independent vector FMA chains on every usable core, ``-O2 -march=native``): the
  fraction ``n² (p + d) / t`` of the probe's scalar FMAs per second in the same dtype, i.e. the share of peak
  that the two matrix products of attention would use (the ``exp`` and the maxima are extra work, not
  counted);
* ``yard``: the yardstick of issue 12 (d <= 8), a plain fused two-pass C loop compiled here with
  ``gcc -O3 -march=native -ffast-math -fopenmp`` (per query: row maximum, then ``exp``-and-accumulate;
  ``-ffast-math`` lets gcc vectorise ``exp`` through glibc's libmvec), OpenMP over queries with the usable
  cores.

Variants run in interleaved rounds (``R`` rounds, default 5, 3 above n = 8000; ``numpy``, ``naive`` only up
to n = 32 000), medians over rounds; a call
shorter than 0.15 s is repeated within its round, so that every timed segment is at least that long; ratios
are medians of per-round ratios, so a shared machine's load drift cancels.  Every timed segment starts after a pause
(``--settle``, default 0.2 s) in which the previous segment's idle helper threads stop spinning (OpenBLAS's
workers busy-wait ~0.1 s after the ``naive`` column's multithreaded products; before this pause the segment
right after ``naive``, the fused kernel's, shared the second core with that spin).  ``ns/pair`` = time / (n_q n): n_q = n queries, except in the
n = 128 000 cells, where the first 16 000 particles are the queries against all n keys (``LARGE_QUERIES``: the
cost per pair is set by the key count; all n queries would take an hour).
Accuracy (``rel.err``; ``tch.err`` torch's): max relative difference from the numpy path in float64 on the same
data, first 500 queries (issue target: 1e-13 float64, 1e-5 float32).  Memory:
peak traced by ``tracemalloc`` for one call (numpy buffers; the fused kernel's C work buffers,
``threads · fused.work_entries(...) · itemsize``, are added), and, for ``--memory-n``
(default 200 000, d = 2), the peak resident set (``VmHWM``) of a fresh process doing one field evaluation through
``symbolic_tpde.numerics.particles.fields.field``, one RK4 step and one error-controlled (Dormand-Prince) step of
``simulate`` (``--memory-what``; issue target: < 200 MB; ``--memory-only`` skips the table).  The machine is
shared: only ratios well above ~2x are firm; the load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

import numpy as np

from symbolic_tpde.numerics.particles import fused, fused_flash
from symbolic_tpde.numerics.particles.attend import BLAS_CONTROL, attend, attend_numpy
from symbolic_tpde.numerics.threads import usable_cores

NAIVE_LIMIT_BYTES = 3e9
#: Above n = 32 000 (the n = 128 000 cells) the first this many particles are the queries, all n the keys: the
#: cost per query-key pair is set by the key count (cache behaviour), the query count only multiplies it, and
#: all n queries would take an hour of the run.
LARGE_QUERIES = 16_000
#: Shortest timed segment (s): calls shorter than this are repeated within a round, so a round's ratio is not
#: one 5 ms call against another on a shared machine whose speed moves by 2x within seconds.
MIN_SEGMENT_S = 0.15
#: Pause before every timed segment (s), so that no segment starts while the previous one's helper threads still
#: spin on the other core: OpenBLAS's idle workers busy-wait about 0.1 s after a multithreaded product (the
#: ``naive`` column's; measured here: 0.099 s of CPU time during a 0.3 s sleep after a 2000 x 64 x 2000 product),
#: libgomp's (torch's, the yardstick's) about 7 ms.  Without it the segment timed right after ``naive`` (the
#: fused kernel's) shared the cores with a spinning thread for two thirds of its 0.15 s, which hit the short
#: calls at n = 2000 most (docs/performance.md, "after the n = 2000 / float32 work").
SETTLE_S = 0.2
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

YARD_C = r"""
#include <math.h>
void yard(long n, long nk, const T *q, const T *k, const T *v, T *out) {
    #pragma omp parallel for schedule(dynamic, 16)
    for (long i = 0; i < n; ++i) {
        T m = -INFINITY;
        for (long j = 0; j < nk; ++j) {           /* pass 1: row maximum */
            T l = 0;
            for (int a = 0; a < D; ++a) l += q[i * D + a] * k[j * D + a];
            m = l > m ? l : m;
        }
        T s = 0, acc[D];
        for (int a = 0; a < D; ++a) acc[a] = 0;
        for (long j = 0; j < nk; ++j) {           /* pass 2: exp and accumulate */
            T l = 0;
            for (int a = 0; a < D; ++a) l += q[i * D + a] * k[j * D + a];
            T w = exp(l - m);
            s += w;
            for (int a = 0; a < D; ++a) acc[a] += w * v[j * D + a];
        }
        for (int a = 0; a < D; ++a) out[i * D + a] = acc[a] / s;
    }
}
"""


FMA_C = r"""
#include <immintrin.h>
#include <omp.h>
/* independent FMA chains on 512-bit (or 256-bit) vectors on every thread: the machine's FMA rate */
#ifdef __AVX512F__
typedef __m512d V; typedef __m512 VF;
#define FMAD _mm512_fmadd_pd
#define FMAF _mm512_fmadd_ps
#define SETD _mm512_set1_pd
#define SETF _mm512_set1_ps
#define STD(p, x) _mm512_storeu_pd(p, x)
#define STF(p, x) _mm512_storeu_ps(p, x)
#define LANES 8
#else
typedef __m256d V; typedef __m256 VF;
#define FMAD _mm256_fmadd_pd
#define FMAF _mm256_fmadd_ps
#define SETD _mm256_set1_pd
#define SETF _mm256_set1_ps
#define STD(p, x) _mm256_storeu_pd(p, x)
#define STF(p, x) _mm256_storeu_ps(p, x)
#define LANES 4
#endif
int lanes(void) { return LANES; }
/* ten independent chains of vector FMAs, then one lane of each added to tot */
#define CHAINS(VT, FMA, SET, ST, ET, one, b_, c_) { \
    VT a0 = SET(one), a1 = SET(one), a2 = SET(one), a3 = SET(one), a4 = SET(one), a5 = SET(one), \
       a6 = SET(one), a7 = SET(one), a8 = SET(one), a9 = SET(one), b = SET(b_), c = SET(c_); \
    for (long i = 0; i < iters; ++i) { \
        a0 = FMA(a0, b, c); a1 = FMA(a1, b, c); a2 = FMA(a2, b, c); a3 = FMA(a3, b, c); a4 = FMA(a4, b, c); \
        a5 = FMA(a5, b, c); a6 = FMA(a6, b, c); a7 = FMA(a7, b, c); a8 = FMA(a8, b, c); a9 = FMA(a9, b, c); \
    } \
    ET o[32]; \
    ST(o, a0); tot += o[0]; ST(o, a1); tot += o[0]; ST(o, a2); tot += o[0]; ST(o, a3); tot += o[0]; \
    ST(o, a4); tot += o[0]; ST(o, a5); tot += o[0]; ST(o, a6); tot += o[0]; ST(o, a7); tot += o[0]; \
    ST(o, a8); tot += o[0]; ST(o, a9); tot += o[0]; }
double probe(long iters, int f32) {  /* returns a checksum so the loop is kept */
    double tot = 0;
    #pragma omp parallel reduction(+:tot)
    {
        if (f32) CHAINS(VF, FMAF, SETF, STF, float, 1.0f, 0.999999f, 1e-7f)
        else CHAINS(V, FMAD, SETD, STD, double, 1.0, 0.999999, 1e-7)
    }
    return tot;
}
"""


def build_fma_probe(tmp: str, threads: int):
    """A callable ``rate(dtype) -> scalar FMAs per second`` over ``threads`` threads (one timed call of the
    probe, ~0.1-0.3 s), for the ``fma%`` column; None without gcc."""
    src = os.path.join(tmp, "fma_probe.c")
    so = src[:-2] + ".so"
    with open(src, "w") as fh:
        fh.write(FMA_C)
    try:
        subprocess.run(["gcc", "-O2", "-march=native", "-fopenmp", "-fPIC", "-shared", src, "-o", so],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # before libgomp loads
    lib = ctypes.CDLL(so)
    lib.probe.argtypes, lib.probe.restype = [ctypes.c_long, ctypes.c_int], ctypes.c_double
    lanes = lib.lanes()
    iters = 20_000_000

    def rate(dtype) -> float:
        f32 = int(np.dtype(dtype) == np.float32)
        t0 = time.perf_counter()
        lib.probe(iters, f32)
        dt = time.perf_counter() - t0
        return threads * iters * 10 * lanes * (2 if f32 else 1) / dt

    return rate


def torch_peer(threads: int):
    """``f(q, k, v) -> callable`` running torch's CPU ``scaled_dot_product_attention`` with scale 1, or None
    when torch is not importable (an optional benchmark peer only)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)

    def make(q, k, v):
        # (batch, heads, tokens, features) = (1, 1, n, d): torch's fused CPU (flash) kernel takes 4-D inputs only;
        # with 3-D ones SDPA falls back to its unfused path, 3-7x slower here, which made torch look far behind
        tq, tk, tv = (torch.from_numpy(np.ascontiguousarray(x))[None, None] for x in (q, k, v))
        return lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, scale=1.0).numpy()[0, 0]

    return make, torch.__version__


def build_yardstick(d: int, dtype, tmp: str):
    T = "double" if dtype == np.float64 else "float"
    src = os.path.join(tmp, f"yard_{T}_{d}.c")
    so = src[:-2] + ".so"
    with open(src, "w") as fh:
        fh.write(f"typedef {T} T;\n#define D {d}\n" + YARD_C.replace("exp(", "exp(" if T == "double" else "expf("))
    subprocess.run(["gcc", "-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC", "-shared", src, "-o", so,
                    "-lm"], check=True)
    lib = ctypes.CDLL(so)
    ptr = np.ctypeslib.ndpointer(dtype=dtype, flags="C_CONTIGUOUS")
    lib.yard.argtypes = [ctypes.c_long, ctypes.c_long, ptr, ptr, ptr, ptr]
    lib.yard.restype = None

    def run(q, k, v):
        out = np.empty((q.shape[0], v.shape[1]), dtype=v.dtype)
        lib.yard(q.shape[0], k.shape[0], q, k, v, out)
        return out

    return run


def naive(q, k, v):
    L = q @ k.T
    L = L - L.max(axis=1, keepdims=True)
    W = np.exp(L)
    W = W / W.sum(axis=1, keepdims=True)
    return W @ v


def with_form(form: str, fn):
    """``fn()`` with the fused kernel built in another machine's form (``TPDE_FUSED_ISA``, see
    :data:`symbolic_tpde.numerics.particles.fused.ISA_FLAGS`)."""
    old = os.environ.get("TPDE_FUSED_ISA")
    os.environ["TPDE_FUSED_ISA"] = form
    try:
        return fn()
    finally:
        if old is None:
            del os.environ["TPDE_FUSED_ISA"]
        else:
            os.environ["TPDE_FUSED_ISA"] = old


MEM_SCRIPT = """
import resource, sys, time
import numpy as np
from symbolic_tpde.weights import make_head, make_weights
from symbolic_tpde.numerics.particles.fields import field
from symbolic_tpde.numerics.particles.simulate import simulate
n, what = int(sys.argv[1]), sys.argv[2]
X = np.random.default_rng(0).standard_normal((n, 2))
w = make_weights([make_head("softmax", A=[[-0.5, 0.2], [0.1, -0.4]], V=[[1.0, 0.3], [-0.2, 0.8]])])
field(X[:64], w)                      # builds / loads the kernel: not part of the step
def rss():
    # peak resident set of this process's own memory, MB: VmHWM (reset by exec, unlike ru_maxrss, which
    # keeps the peak of the forked parent's pages: a child of a 300 MB pytest process starts at 300 MB)
    try:
        with open("/proc/self/status") as f:
            return next(float(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: kB
base, t0 = rss(), time.perf_counter()
if what == "field":
    field(X, w)
    steps, nfev = 0, 1
elif what == "dopri5":                # the error-controlled default; T = 1e-4 is one step (start probe + 7 stages)
    run = simulate(X, w, 1e-4, progress=False)
    steps, nfev = run.steps, run.nfev
else:                                 # one classical RK4 step
    run = simulate(X, w, 1e-4, steps=1, method="rk4", progress=False)
    steps, nfev = run.steps, run.nfev
print(base, rss(), steps, nfev, time.perf_counter() - t0)
"""

#: The resident-memory target of issue 12 for one step at n = 200 000, d = 2 (whole process, MB).
MEMORY_TARGET_MB = 200


def memory_check(n: int, what: str) -> dict:
    """Peak resident set (``VmHWM``; ``ru_maxrss`` where ``/proc`` is missing) of a fresh process doing one ``what`` (``field``, ``dopri5`` step of
    ``simulate``'s default, or ``rk4`` step) at ``n`` particles, d = 2, float64: a dict with ``base`` (after
    imports, data and kernel load), ``peak`` (MB), ``steps``, ``nfev``, ``seconds`` (of the step)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    p = subprocess.run([sys.executable, "-c", MEM_SCRIPT, str(n), what], capture_output=True, text=True,
                       check=True, env=env)
    base, peak, steps, nfev, secs = p.stdout.split()
    return {"base": float(base), "peak": float(peak), "steps": int(steps), "nfev": int(nfev),
            "seconds": float(secs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, nargs="+", default=None)
    ap.add_argument("--d", type=int, nargs="+", default=None)
    ap.add_argument("--dtype", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    ap.add_argument("--memory-n", type=int, default=200_000, help="0 to skip the resident-memory check")
    ap.add_argument("--memory-what", nargs="+", default=["field", "rk4", "dopri5"],
                    choices=["field", "rk4", "dopri5"], help="what the resident-memory check runs")
    ap.add_argument("--memory-only", action="store_true", help="only the resident-memory check")
    ap.add_argument("--large", action="store_true", help="also n = 128 000 at d = 2 and 8 (default without --quick)")
    ap.add_argument("--crossover", action="store_true",
                    help="only: the fused kernel's vector loops vs BLAS logits + row pass at d = 8..32")
    ap.add_argument("--settle", type=float, default=SETTLE_S,
                    help=f"pause in s before every timed segment (default {SETTLE_S}: other segments' idle threads "
                         "stop spinning); 0: none (the runs before 2026-12-05 04:00)")
    ap.add_argument("--no-forms", dest="forms", action="store_false",
                    help="skip the columns of the kernel as other x86 machines build it (avx2, plain)")
    a = ap.parse_args(argv)
    form = fused.simd_compiled() if fused.available() is None else None
    loops = {"avx512": " (AVX-512 loops of fused_simd)", "avx2": " (AVX2 loops of fused_simd)",
             "": " (plain-C loops)", None: ""}[form]
    print(f"numpy {np.__version__}; BLAS control {BLAS_CONTROL}; fused kernel: {fused.available() or 'available'}"
          f"{loops}; "
          f"{usable_cores()} usable cores; load average {os.getloadavg()[0]:.2f} at start")
    if a.crossover:
        crossover(a)
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
        return 0
    if not a.memory_only:
        table(a)
    if a.memory_n:
        for what in a.memory_what:
            r = memory_check(a.memory_n, what)
            print(f"resident memory, one {what} {'evaluation' if what == 'field' else 'step'} at n = {a.memory_n}, "
                  f"d = 2 float64 ({r['steps']} step(s), {r['nfev']} field evaluations, {r['seconds']:.0f} s): "
                  f"peak {r['peak']:.0f} MB (before the call: {r['base']:.0f} MB; increase "
                  f"{r['peak'] - r['base']:.0f} MB); target < {MEMORY_TARGET_MB} MB", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


def table(a) -> None:
    """The timing table (module docstring)."""
    ns = a.n or ([2000, 8000] if a.quick else [2000, 8000, 32000])
    ds = a.d or ([2, 16, 64] if a.quick else [2, 8, 16, 24, 32, 64, 128])
    large = a.large or not (a.quick or a.n or a.d)
    cores = usable_cores()
    peer = torch_peer(cores)
    probe = build_fma_probe(tempfile.mkdtemp(prefix="tpde-bench-fma-"), cores)
    print(f"torch peer: {'torch ' + peer[1] + f', {cores} threads' if peer else 'not importable (no tch/fus column)'}; "
          f"FMA probe: {'compiled' if probe else 'no gcc (no fma% column)'}")
    rng = np.random.default_rng(12345)
    tmp = tempfile.mkdtemp(prefix="tpde-bench-yard-")
    native = fused.simd_compiled() if fused.available() is None else None
    forms = [f for f in ("avx2", "plain") if a.forms and native is not None and platform.machine().lower()
             in ("x86_64", "amd64") and f != (native or "plain")]
    hdr = (f"{'dtype':>7} {'d':>3} {'n':>6} {'path':>5} | {'naive':>6} {'numpy':>6} {'fused':>6} {'yard':>6} "
           f"{'tile1':>6} {'avx2':>6} {'plain':>6} {'torch':>6} ns/pair | {'num/fus':>7} {'fus/yard':>8} {'nv/fus':>6} "
           f"{'t1/fus':>6} {'num/a2':>6} {'num/pl':>6} {'tch/fus':>8} {'fma%':>5} | {'rel.err':>8} {'tch.err':>8} | MB naive numpy fused")
    print(hdr)
    print("-" * len(hdr))
    cells = [(d, n) for d in ds for n in ns] + ([(d, 128_000) for d in (2, 8)] if large else [])
    for dtype in (np.dtype(x).type for x in a.dtype):
        for d, n in cells:
            yard = build_yardstick(d, dtype, tmp) if d <= 8 else None
            if True:
                X = (rng.standard_normal((n, d)) / np.sqrt(max(1, d) / 2)).astype(dtype)
                A = (-0.5 * np.eye(d) + 0.1 * rng.standard_normal((d, d))).astype(dtype)
                q = np.ascontiguousarray(X[:min(n, LARGE_QUERIES if n > 32000 else n)] @ A.T)
                nq = q.shape[0]
                fns = {"fused": lambda: attend(q, X, X)}
                if n <= 32000:
                    fns["numpy"] = lambda: attend_numpy(q, X, X)
                if yard is not None:
                    fns["yard"] = lambda: yard(q, X, X)
                if peer:
                    fns["torch"] = peer[0](q, X, X)
                if probe:
                    fns["fma"] = lambda: fma_rate.append(probe(dtype))
                fma_rate = []
                for form in forms if (fused.available() is None and q.shape[1] < fused.MAX_P and d <= 8) else ():
                    fns[form] = (lambda form: lambda: with_form(form, lambda: attend(q, X, X)))(form)
                if fused.available() is None and q.shape[1] < fused.MAX_P and fused.tile_size(d) > 1:
                    fns["tile1"] = lambda: fused.attend_fused(  # the same kernel, one query per pass
                        q, X, X, mode="softmax", key_bias=None, shift=0.0, prefix=None, sink_logit=None,
                        sink_value=None, threads=None, tile=1)
                do_naive = 3 * n * n * np.dtype(dtype).itemsize <= NAIVE_LIMIT_BYTES and n <= 8000
                if do_naive:
                    fns = {"naive": lambda: naive(q, X, X), **fns}
                reps, mem = {}, {}
                for name, fn in fns.items():  # warm-up (builds the kernel, pages in buffers; traced by tracemalloc
                    traced = name in ("naive", "numpy", "fused")  # for the memory columns), then, for calls
                    if traced:                                    # under a second, one more timed call
                        tracemalloc.start()
                        tracemalloc.reset_peak()
                    t0 = time.perf_counter()
                    fn()
                    dt_call = time.perf_counter() - t0
                    if traced:
                        mem[name] = tracemalloc.get_traced_memory()[1] / 2**20
                        tracemalloc.stop()
                    if dt_call < 1.0:
                        time.sleep(a.settle)
                        t0 = time.perf_counter()
                        fn()
                        dt_call = time.perf_counter() - t0
                    reps[name] = max(1, min(50, int(MIN_SEGMENT_S / max(dt_call, 1e-6))))
                R = a.repeats if n <= 8000 else 3
                rounds = []
                for _ in range(R):
                    r = {}
                    for name, fn in fns.items():  # each timed segment >= MIN_SEGMENT_S: short calls repeated
                        time.sleep(a.settle)      # (no other segment's threads still spinning: SETTLE_S)
                        t0 = time.perf_counter()
                        for _ in range(reps[name]):
                            fn()
                        r[name] = (time.perf_counter() - t0) / reps[name]
                    rounds.append(r)
                med = {k: statistics.median(r[k] for r in rounds) for k in fns}
                rat = lambda x, y: statistics.median(r[x] / r[y] for r in rounds)  # noqa: E731
                # the first 500 queries against a float64 reference (the numpy path in float64 on the same data)
                X64 = X.astype(np.float64)
                ref = attend_numpy(q[:500].astype(np.float64), X64, X64)
                got = attend(q[:500], X, X)
                rel = float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())
                tch_err = (float(np.abs(np.asarray(peer[0](q[:500], X, X)(), np.float64) - ref).max()
                                 / np.abs(ref).max()) if peer else None)
                fma = (statistics.median(nq * n * (2 * d) / r["fused"] / rate for r, rate in zip(rounds, fma_rate[-R:]))
                       if fma_rate else None)
                if "torch" in fns:
                    per = [r["torch"] / r["fused"] for r in rounds]
                    tch_cell = f"{statistics.median(per):7.2f}{'=' if min(per) <= 1 <= max(per) else ' '}"
                else:
                    tch_cell = f"{'-':>8}"
                path = "numpy" if fused.available() is not None else (
                    "fused" if fused.prefers("softmax", q.shape[1], d, dtype) else
                    "flash" if fused_flash.prefers("softmax", q.shape[1], d, dtype) else "rows")
                if path == "fused":  # the C work buffers, which tracemalloc does not see
                    mem["fused"] += cores * fused.work_entries("softmax", d, n, dtype) * np.dtype(dtype).itemsize / 2**20
                elif path == "flash":
                    mem["fused"] += cores * fused_flash.work_bytes(dtype, q.shape[1], d, n) / 2**20
                ns_pair = {k: 1e9 * v / (nq * n) for k, v in med.items()}
                print(f"{np.dtype(dtype).name:>7} {d:>3} {n:>6} {path:>5} | "
                      + " ".join(f"{ns_pair[k]:6.2f}" if k in ns_pair else f"{'-':>6}"
                                 for k in ("naive", "numpy", "fused", "yard", "tile1", "avx2", "plain", "torch"))
                      + f"         | " + (f"{rat('numpy', 'fused'):7.2f}" if "numpy" in fns else f"{'-':>7}")
                      + (f" {rat('fused', 'yard'):8.2f} " if "yard" in fns else f" {'-':>8} ")
                      + (f"{rat('naive', 'fused'):6.2f}" if do_naive else f"{'-':>6}")
                      + (f" {rat('tile1', 'fused'):6.2f}" if "tile1" in fns else f" {'-':>6}")
                      + "".join(f" {rat('numpy', f):6.2f}" if f in fns and "numpy" in fns else f" {'-':>6}"
                                for f in ("avx2", "plain"))
                      + f" {tch_cell} " + (f"{100 * fma:5.1f}" if fma is not None else f"{'-':>5}")
                      + f" | {rel:8.1e} " + (f"{tch_err:8.1e}" if tch_err is not None else f"{'-':>8}") + " | "
                      + " ".join(f"{mem[k]:.1f}" if k in mem else "-"
                                                      for k in ("naive", "numpy", "fused")), flush=True)
    print("targets (issue 12): fused/yard <= 1.5 at n = 8000, d = 2 (both dtypes); numpy/fused >= 3 at d <= 8; "
          ">= 1 at d = 64; rel.err <= 1e-13 (float64), 1e-5 (float32); (issue 33): tch/fus >= 1 in every cell "
          "(goal 1.3 at d >= 16), ns/pair at n = 128 000 within 1.3x of n = 8000 at d = 2, 8")


def crossover(a) -> None:
    """The fused kernel (vector loops) against the key-blocked kernel (``fused_flash``) and BLAS logits + row pass
    at p = d = 8..32: the measurement behind ``fused.CROSSOVER`` (the flash kernel runs above it)."""
    from symbolic_tpde.numerics.particles import fused_flash
    from symbolic_tpde.numerics.particles.fused_rows import row_pass

    n = (a.n or [4000])[0]
    ds = a.d or [8, 10, 12, 14, 16, 20, 24]
    rng = np.random.default_rng(7)
    print(f"crossover, n = {n}, {a.repeats} interleaved rounds; flash/fused (rows/fused) = time of the key-blocked "
          f"kernel (of the rows path) / the fused kernel's (> 1: the fused kernel is faster); table in use: "
          f"{fused.CROSSOVER} (this build: {fused.simd_compiled()!r})")
    none = dict(mode="softmax", key_bias=None, shift=0.0, prefix=None, sink_logit=None, sink_value=None)
    for dtype in (np.dtype(x) for x in a.dtype):
        for d in ds:
            X = (rng.standard_normal((n, d)) / np.sqrt(d / 2)).astype(dtype)
            q = np.ascontiguousarray(X @ (-0.5 * np.eye(d) + 0.1 * rng.standard_normal((d, d))).astype(dtype).T)
            rows = row_pass("softmax", dtype, key_bias=None, shift=0.0, prefix=None, sink_logit=None, sink_value=None)
            fns = {"fused": lambda: fused.attend_fused(q, X, X, threads=None, **none),
                   "rows": lambda: attend_numpy(q, X, X, rows=rows)}
            if fused_flash.attend_flash(q[:1], X[:1], X[:1], threads=1, **none) is not None:
                fns["flash"] = lambda: fused_flash.attend_flash(q, X, X, threads=None, **none)
            for fn in fns.values():
                fn()
            rounds = []
            for _ in range(a.repeats):
                r = {}
                for name, fn in fns.items():
                    time.sleep(a.settle)
                    t0, k = time.perf_counter(), 0
                    while k == 0 or time.perf_counter() - t0 < MIN_SEGMENT_S:
                        fn()
                        k += 1
                    r[name] = (time.perf_counter() - t0) / k
                rounds.append(r)
            cols = []
            for other in ("flash", "rows"):
                if other in fns:
                    per = [r[other] / r["fused"] for r in rounds]
                    cols.append(f"{other}/fused {statistics.median(per):.2f} ({min(per):.2f}..{max(per):.2f})")
            path = ("fused" if fused.prefers("softmax", d, d, dtype) else
                    "flash" if fused_flash.prefers("softmax", d, d, dtype) else "rows")
            print(f"{dtype.name:>7} d = p = {d:>2}: " + "; ".join(cols) + f"; dispatch: {path}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
