"""Benchmark: the particle kernels' persistent thread pool (templates/tpde_threads.h) against a thread per call.

Run:  python numerics/bench_pool.py [--n 2000 8000] [--d 24 64] [--dtype float32 float64] [--rounds 5]
      python numerics/bench_pool.py --gaps [--n 2000] [--d 24] [--dtype float32]
      python numerics/bench_pool.py --integration [0 500 2000 5000] [--n 2000] [--d 24] [--rounds 5]
      python numerics/bench_pool.py --field [--n 2000 8000] [--d 24 64] [--dtype float32 float64] [--rounds 5]

Default mode: for each cell, the same call (the package's dispatch ``attend(q, X, X)``, the benchmark's data:
``q = X Aᵀ``, keys and values ``X``) at one and two threads, with the pool (``pooled``) and with a thread
created per call (``percall``, what every call did before the pool; ``fused.thread_pool(pooled=False)``), in
interleaved rounds in one process (each segment >= 0.15 s of back-to-back calls, after a 0.2 s pause).  It
prints the median time per call of each variant and the median over rounds of the per-round 2-thread speedups
``t(1 thread) / t(2 threads)``: what the second core gives.  The bits are checked equal across all four.

``--gaps``: what the pool's spin must cover, the time between two kernel calls that use the second thread
(the pool's worker 1 clocks its wait from the end of its work to seeing the next call): back-to-back calls (a
benchmark segment), and the calls of a particle run, ``simulate`` with dopri5 on a softmax field (the
right-hand-side evaluations with the integrator's Python and numpy between them).  Prints quantiles.

``--integration [SPIN_US ...]``: the time per right-hand-side evaluation of such a run (rk4, 20 steps, two
threads), a thread per call against the pool at each spin length, interleaved rounds: what the spin buys where
the calls are separated by the integrator's work.

``--field``: the BLAS threads around the kernel.  The public field ``softmax_field(X, A, V)`` computes its
projections ``X Aᵀ`` and ``(·) Vᵀ`` with BLAS held at one thread (``attend.one_blas_thread``); the baseline is
the same function with OpenBLAS left to its own threads (``softmax_field.__wrapped__``); the yardstick is the
kernel alone on the precomputed logits (``attend(X Aᵀ, X, X)``).  Interleaved rounds, median ms per call and the
median per-round ratios threaded-BLAS / one-thread; the bits of both field variants are compared.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from symbolic_tpde.numerics.particles import fused
from symbolic_tpde.numerics.particles.attend import attend

MIN_SEGMENT_S = 0.15
SETTLE_S = 0.2


def data(n: int, d: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) / np.sqrt(max(1, d) / 2)).astype(dtype)
    A = (-0.5 * np.eye(d) + 0.1 * rng.standard_normal((d, d))).astype(dtype)
    return np.ascontiguousarray(X @ A.T), X


def speedup(n: int, d: int, dtype, rounds: int) -> None:
    q, X = data(n, d, dtype)
    variants = {(pooled, t): (pooled, t) for pooled in (False, True) for t in (1, 2)}
    outs, reps = {}, {}
    for key, (pooled, t) in variants.items():  # warm-up, bits, repetitions per segment
        fused.thread_pool(pooled=pooled)
        outs[key] = attend(q, X, X, threads=t)
        t0 = time.perf_counter()
        attend(q, X, X, threads=t)
        reps[key] = max(1, min(200, int(MIN_SEGMENT_S / max(time.perf_counter() - t0, 1e-6))))
    same = all(np.array_equal(outs[(False, 1)], o) for o in outs.values())
    per = []
    for _ in range(rounds):
        r = {}
        for key, (pooled, t) in variants.items():
            fused.thread_pool(pooled=pooled)
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            for _ in range(reps[key]):
                attend(q, X, X, threads=t)
            r[key] = (time.perf_counter() - t0) / reps[key]
        per.append(r)
    fused.thread_pool(pooled=True)
    med = {k: statistics.median(r[k] for r in per) for k in variants}
    sp = {p: [r[(p, 1)] / r[(p, 2)] for r in per] for p in (False, True)}
    print(f"{np.dtype(dtype).name:>8} {d:>4} {n:>6} | percall 1t {1e3 * med[(False, 1)]:7.3f} 2t "
          f"{1e3 * med[(False, 2)]:7.3f} ms  x{statistics.median(sp[False]):.2f} "
          f"[{min(sp[False]):.2f}-{max(sp[False]):.2f}] | pooled 1t {1e3 * med[(True, 1)]:7.3f} 2t "
          f"{1e3 * med[(True, 2)]:7.3f} ms  x{statistics.median(sp[True]):.2f} "
          f"[{min(sp[True]):.2f}-{max(sp[True]):.2f}] | bits {'same' if same else 'DIFFER'}", flush=True)


def gaps(n: int, d: int, dtype) -> None:
    from symbolic_tpde.numerics.particles import fused_flash
    from symbolic_tpde.numerics.particles.simulate import simulate
    from symbolic_tpde.weights import make_head, make_weights

    spin = fused.thread_pool()["spin_us"]
    fused.thread_pool(pooled=True, spin_us=10 ** 6)  # spin through every gap: the wait is then the gap itself
    seen: list[float] = []
    between: list[float] = []
    last = [None]
    orig = fused_flash.attend_flash

    def clocked(*args, **kw):
        t0 = time.perf_counter()
        if last[0] is not None:
            between.append(1e6 * (t0 - last[0]))
        out = orig(*args, **kw)
        seen.append(fused.thread_pool()["last_wait_us"])
        last[0] = time.perf_counter()
        return out

    def quant(label: str, xs) -> None:
        xs = np.sort(np.asarray(xs[1:]))  # the first wait is from the warm-up
        qs = np.quantile(xs, [0.1, 0.5, 0.9, 0.99]) if len(xs) else [np.nan] * 4
        print(f"{label:<34} calls {len(xs):>5}  gap us: p10 {qs[0]:8.1f}  median {qs[1]:8.1f}  p90 {qs[2]:8.1f}  "
              f"p99 {qs[3]:8.1f}  max {xs.max() if len(xs) else np.nan:8.1f}", flush=True)

    fused_flash.attend_flash = clocked  # attend imports it from the module at every call
    try:
        q, X = data(n, d, dtype)
        for _ in range(50):
            attend(q, X, X, threads=2)
        quant(f"back-to-back attend, n = {n}", seen)
        quant("  (Python: return to next call)", [0.0, *between])
        seen.clear()
        between.clear()
        last[0] = None
        rng = np.random.default_rng(1)
        X0 = (rng.standard_normal((n, d)) / np.sqrt(d)).astype(dtype)
        A = (-0.5 * np.eye(d) + 0.1 * rng.standard_normal((d, d)))
        w = make_weights([make_head("softmax", A=A, V=np.eye(d))])
        t0 = time.perf_counter()
        run = simulate(X0, w, 1.0, dtype=dtype, threads=2)
        quant(f"simulate dopri5 T = 1, n = {n} ({time.perf_counter() - t0:.1f} s, nfev {getattr(run, 'nfev', '?')})",
              seen)
        quant("  (Python: return to next call)", [0.0, *between])
    finally:
        fused_flash.attend_flash = orig
        fused.thread_pool(spin_us=spin)


def integration(n: int, d: int, dtype, rounds: int, spins) -> None:
    """Time per right-hand-side evaluation of a particle run (simulate, rk4, 20 steps = 80 evaluations, two
    threads) with a thread per call and with the pool at each spin length, in interleaved rounds."""
    from symbolic_tpde.numerics.particles.simulate import simulate
    from symbolic_tpde.weights import make_head, make_weights

    rng = np.random.default_rng(1)
    X0 = (rng.standard_normal((n, d)) / np.sqrt(d)).astype(dtype)
    A = (-0.5 * np.eye(d) + 0.1 * rng.standard_normal((d, d)))
    w = make_weights([make_head("softmax", A=A, V=np.eye(d))])
    saved = fused.thread_pool()
    variants = [("percall", False, saved["spin_us"])] + [(f"spin {s} us", True, s) for s in spins]
    simulate(X0, w, 0.1, dtype=dtype, threads=2, steps=2)  # builds, warms up
    per = []
    for _ in range(rounds):
        r = {}
        for name, pooled, spin in variants:
            fused.thread_pool(pooled=pooled, spin_us=spin)
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            run = simulate(X0, w, 1.0, dtype=dtype, threads=2, steps=20)
            r[name] = (time.perf_counter() - t0) / run.nfev
        per.append(r)
    fused.thread_pool(pooled=saved["pooled"], spin_us=saved["spin_us"])
    cells = "  ".join(f"{name} {1e3 * statistics.median(r[name] for r in per):6.3f} ms "
                      f"(x{statistics.median(r['percall'] / r[name] for r in per):.2f})" for name, _, _ in variants)
    print(f"{np.dtype(dtype).name:>8} {d:>4} {n:>6} | per evaluation: {cells}", flush=True)


def field_blas(n: int, d: int, dtype, rounds: int) -> None:
    from symbolic_tpde.numerics.particles.fields import softmax_field

    rng = np.random.default_rng(2)
    X = (rng.standard_normal((n, d)) / np.sqrt(max(1, d) / 2)).astype(dtype)
    A = (-0.5 * np.eye(d) + 0.1 * rng.standard_normal((d, d))).astype(dtype)
    V = (np.eye(d) + 0.1 * rng.standard_normal((d, d))).astype(dtype)
    q = np.ascontiguousarray(X @ A.T)
    variants = {"kernel": lambda: attend(q, X, X), "one-thread": lambda: softmax_field(X, A, V),
                "threaded": lambda: softmax_field.__wrapped__(X, A, V)}
    reps = {}
    for name, f in variants.items():
        f()
        t0 = time.perf_counter()
        f()
        reps[name] = max(1, min(200, int(MIN_SEGMENT_S / max(time.perf_counter() - t0, 1e-6))))
    same = np.array_equal(variants["one-thread"](), variants["threaded"]())
    per = []
    for _ in range(rounds):
        r = {}
        for name, f in variants.items():
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            for _ in range(reps[name]):
                f()
            r[name] = (time.perf_counter() - t0) / reps[name]
        per.append(r)
    med = {k: 1e3 * statistics.median(r[k] for r in per) for k in variants}
    ratio = [r["threaded"] / r["one-thread"] for r in per]
    over = [r["one-thread"] / r["kernel"] for r in per]
    print(f"{np.dtype(dtype).name:>8} {d:>4} {n:>6} | kernel {med['kernel']:8.3f}  field, one BLAS thread "
          f"{med['one-thread']:8.3f}  threaded BLAS {med['threaded']:8.3f} ms | threaded/one "
          f"x{statistics.median(ratio):.2f} [{min(ratio):.2f}-{max(ratio):.2f}]  one/kernel "
          f"{statistics.median(over):.2f} | bits {'same' if same else 'differ'}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[2000])
    ap.add_argument("--d", type=int, nargs="+", default=[24])
    ap.add_argument("--dtype", nargs="+", default=["float32"], choices=["float32", "float64"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gaps", action="store_true", help="only: the gaps between kernel calls the spin must cover")
    ap.add_argument("--integration", type=int, nargs="*", metavar="SPIN_US",
                    help="only: time per evaluation of a particle run, a thread per call against the pool at "
                         "these spin lengths (default 0 500 2000 5000)")
    ap.add_argument("--field", action="store_true",
                    help="only: the public softmax field with one BLAS thread against OpenBLAS's own threads")
    a = ap.parse_args()
    if fused.thread_pool() is None:
        raise SystemExit("no fused kernel here (no compiler or TPDE_FUSED=0): nothing to measure")
    print(f"pool: {fused.thread_pool()}")
    for dt in a.dtype:
        for d in a.d:
            for n in a.n:
                if a.field:
                    field_blas(n, d, np.dtype(dt).type, a.rounds)
                elif a.gaps:
                    gaps(n, d, np.dtype(dt).type)
                elif a.integration is not None:
                    integration(n, d, np.dtype(dt).type, a.rounds, a.integration or [0, 500, 2000, 5000])
                else:
                    speedup(n, d, np.dtype(dt).type, a.rounds)


if __name__ == "__main__":
    main()
