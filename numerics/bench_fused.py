"""Benchmark: the fused C attention kernel vs the blocked numpy path, one softmax field evaluation.

Run:  python numerics/bench_fused.py [--repeats R] [--n 2000 8000] [--d 2 8]

For every dtype (float64, float32), n and d it times, on the same data, ``attend(X Aᵀ, X, X)`` through
``fields_core.attend_numpy`` (the numpy path) and ``fused.attend_fused`` (the kernel), each with threads = 1
and 2, in interleaved rounds (the four variants back to back, R rounds): times are medians over rounds and each
ratio is the median of the per-round ratios numpy / fused at the same thread count, so slow drifts of a
shared machine's load cancel.  ``ns/pair`` = time / n².  The last column is the largest difference between
the two results relative to max |x|.  The machine is shared: only ratios well above the noise (~2x) are firm.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from symbolic_tpde.numerics.particles import fused
from symbolic_tpde.numerics.particles.attend import BLAS_CONTROL, attend_numpy


def one_round(fns):
    out = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        out[name] = time.perf_counter() - t0
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, nargs="+", default=[2000, 8000])
    ap.add_argument("--d", type=int, nargs="+", default=[2, 8])
    args = ap.parse_args(argv)
    reason = fused.available()
    if reason is not None:
        print(f"fused kernel unavailable: {reason}", file=sys.stderr)
        return 1
    print(f"BLAS control: {BLAS_CONTROL}; fused flags: {' '.join(fused.CFLAGS)}; repeats {args.repeats}")
    hdr = (f"{'dtype':8} {'n':>6} {'d':>3} | {'numpy t1':>9} {'numpy t2':>9} {'fused t1':>9} {'fused t2':>9}"
           f" | {'ratio t1':>8} {'ratio t2':>8} | {'max diff':>8}")
    print("ns/pair (median over rounds); ratio = numpy / fused at the same thread count (median per round)")
    print(hdr)
    print("-" * len(hdr))
    rng = np.random.default_rng(0)
    none = dict(key_bias=None, shift=0.0, prefix=None, sink_logit=None, sink_value=None)
    for dt in (np.float64, np.float32):
        for n in args.n:
            for d in args.d:
                X = rng.standard_normal((n, d)).astype(dt)
                A = (rng.standard_normal((d, d)) / np.sqrt(d)).astype(dt)
                q = X @ A.T
                fns = {f"numpy{t}": (lambda t=t, q=q, X=X: attend_numpy(q, X, X, threads=t)) for t in (1, 2)}
                fns.update({f"fused{t}": (lambda t=t, q=q, X=X: fused.attend_fused(q, X, X, mode="softmax",
                                                                                  threads=t, **none))
                            for t in (1, 2)})
                a, b = fns["numpy2"](), fns["fused2"]()  # warm-up (and the kernel build)
                diff = float(np.abs(a.astype(np.float64) - b).max() / np.abs(X).max())
                rounds = [one_round(fns) for _ in range(args.repeats)]
                med = {k: statistics.median(r[k] for r in rounds) / n ** 2 * 1e9 for k in fns}
                rat = {t: statistics.median(r[f"numpy{t}"] / r[f"fused{t}"] for r in rounds) for t in (1, 2)}
                print(f"{np.dtype(dt).name:8} {n:6d} {d:3d} | {med['numpy1']:9.2f} {med['numpy2']:9.2f} "
                      f"{med['fused1']:9.2f} {med['fused2']:9.2f} | {rat[1]:8.2f} {rat[2]:8.2f} "
                      f"| {diff:8.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
