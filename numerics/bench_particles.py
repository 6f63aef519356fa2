"""Benchmark: one softmax particle step, blocked simulator vs a naive full-matrix numpy implementation.

Run:  python numerics/bench_particles.py [--quick] [--repeats R]

For n in {1000, 4000, 16000} and d in {2, 16, 64} (``--quick``: n in {1000, 4000}, d in {2, 16}) it measures,
in the same run and on the same data:

* ``symbolic_tpde.numerics.fields.softmax_field`` (row blocks, stable log-sum-exp, in-place exp, BLAS limited
  to one thread per Python thread, default threads) in float64 and float32;
* the naive version: the full n x n logit matrix, max-subtracted, exponentiated, normalised, then multiplied
  (``naive_softmax_step``), skipped when its estimated peak (3 n² floats: the logits, their shifted copy
  and the exponentials overlap at most pairwise, plus slack) exceeds 8 GB.

The variants are timed in interleaved rounds (naive, ours float64, ours float64 single-threaded, ours float32,
back to back, ``R`` rounds): times are medians over rounds and each ratio is the median of the per-round
ratios, so slow drifts of a shared machine's load cancel.  ``ns/pair`` = time / n²; peak memory is measured in
a separate call under ``tracemalloc`` (numpy reports its buffers to it).  The issue's targets are checked on
the default configuration (``threads=None``: two Python threads when BLAS can be limited to one thread):
>= 1.8x faster than naive at n >= 4000 (float64), >= 10x less peak memory at n = 16000, float32 >= 1.3x faster
than our float64.  The machine is shared: only ratios well above the noise (~2x) are firm.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc

import numpy as np

from symbolic_tpde.numerics.fields import softmax_field
from symbolic_tpde.numerics.fields_core import BLAS_CONTROL, default_block

NAIVE_LIMIT_BYTES = 8e9


def naive_softmax_step(X, A, V):
    """Full-matrix reference: V Σ_j softmax_j(<A x_i, x_j>) x_j with n x n temporaries."""
    L = (X @ A.T) @ X.T
    L = L - L.max(axis=1, keepdims=True)
    W = np.exp(L)
    W = W / W.sum(axis=1, keepdims=True)
    return W @ X @ V.T


def timed(fn, repeats):
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def peak_bytes(fn):
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n in {1000, 4000}, d in {2, 16}")
    ap.add_argument("--repeats", type=int, default=3, help="timing repeats (median), default 3")
    args = ap.parse_args(argv)
    ns = (1000, 4000) if args.quick else (1000, 4000, 16000)
    ds = (2, 16) if args.quick else (2, 16, 64)
    rng = np.random.default_rng(12345)
    print(f"BLAS thread control: {BLAS_CONTROL}; numpy {np.__version__}; os.getloadavg() at start: "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    hdr = (f"{'n':>6} {'d':>3} {'blk':>4} | {'naive s':>8} {'ns/pr':>6} {'MB':>7} | {'ours64 s':>8} {'ns/pr':>6} "
           f"{'MB':>6} | {'1thr ns':>7} | {'ours32 s':>8} {'ns/pr':>6} | {'speed64':>7} {'1thr':>6} {'mem':>6} "
           f"{'f32/f64':>7}")
    print(hdr)
    print("-" * len(hdr))
    verdicts = []
    for n in ns:
        for d in ds:
            X = rng.standard_normal((n, d))
            A = rng.standard_normal((d, d)) / d  # logits O(1): a realistic, overflow-free regime
            V = rng.standard_normal((d, d)) / np.sqrt(d)
            X32 = X.astype(np.float32)
            reps = args.repeats
            ours64 = lambda: softmax_field(X, A, V)  # noqa: E731
            ours32 = lambda: softmax_field(X32, A, V, dtype=np.float32)  # noqa: E731
            run_naive = 3 * n * n * 8 <= NAIVE_LIMIT_BYTES
            ref = naive_softmax_step(X, A, V) if run_naive else None
            if ref is not None:  # same answer, or the comparison is meaningless
                err = np.abs(ours64() - ref).max() / np.abs(ref).max()
                assert err < 1e-10, err
            ours1 = lambda: softmax_field(X, A, V, threads=1)  # noqa: E731
            naive = (lambda: naive_softmax_step(X, A, V)) if run_naive else None
            rounds = {"naive": [], "64": [], "64t1": [], "32": []}
            for _ in range(reps):
                for key, fn in (("naive", naive), ("64", ours64), ("64t1", ours1), ("32", ours32)):
                    if fn is not None:
                        rounds[key].append(timed(fn, 1))
            med = {k: (statistics.median(v) if v else float("nan")) for k, v in rounds.items()}
            ratio = lambda a, b: (statistics.median(x / y for x, y in zip(rounds[a], rounds[b]))  # noqa: E731
                                  if rounds[a] else float("nan"))
            t64, t32, t1, tn = med["64"], med["32"], med["64t1"], med["naive"]
            m64 = peak_bytes(ours64)
            mn = peak_bytes(naive) if run_naive else float("nan")
            pairs = n * n
            sp, sp1, mem, f32 = ratio("naive", "64"), ratio("naive", "64t1"), mn / m64, ratio("64", "32")
            print(f"{n:>6} {d:>3} {default_block(n, d):>4} | {tn:>8.3f} {1e9 * tn / pairs:>6.2f} {mn / 1e6:>7.1f} | "
                  f"{t64:>8.3f} {1e9 * t64 / pairs:>6.2f} {m64 / 1e6:>6.1f} | {1e9 * t1 / pairs:>7.2f} | "
                  f"{t32:>8.3f} {1e9 * t32 / pairs:>6.2f} | {sp:>6.2f}x {sp1:>5.2f}x {mem:>5.0f}x {f32:>6.2f}x", flush=True)
            if not run_naive:
                print(f"{'':>16}(naive skipped: ~{3 * pairs * 8 / 1e9:.1f} GB > 8 GB)")
            if n >= 4000 and run_naive:
                verdicts.append((f"speed64 >= 1.8x at n={n}, d={d}", sp >= 1.8, sp))
            if n == 16000 and run_naive:
                verdicts.append((f"memory >= 10x less at n={n}, d={d}", mem >= 10, mem))
            verdicts.append((f"float32 >= 1.3x faster at n={n}, d={d}", f32 >= 1.3, f32))
    print("\ntargets:")
    for text, ok, val in verdicts:
        print(f"  {'MET ' if ok else 'MISS'} {text}: {val:.2f}x")
    missed = sum(1 for _, ok, _ in verdicts if not ok)
    print(f"{len(verdicts) - missed}/{len(verdicts)} targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
