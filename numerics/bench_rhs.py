"""Benchmark of the Gaussian moment right-hand side (softmax) and of the symbolic derivation.

Run:  python numerics/bench_rhs.py [--dims 2 4 8 16] [--batch 10000] [--quick]

Everything is measured in the same run; the table prints ratios against baselines measured alongside:

* per call, flat ``f(t, y, p)`` signature (what ``solve_ivp`` calls): generated numpy (CSE), generated C
  (cffi), a hand-written numpy matrix formula ``V(α + ΣAα)``, ``VΣAΣ + ΣAᵀΣVᵀ`` including the unpacking of
  ``y``/``p`` and packing of the result, and ``sympy.lambdify`` of the unreduced expressions (``cse=False``);
  the hand-written formula is also timed on ready matrices (no packing) for reference;
* batched throughput over ``N`` states (ns per state): generated numpy ``batch`` vs C ``rhs_batch``;
* symbolic derivation time per variant and d (fresh process: the engine's cache is cold), and code
  generation time (cold on-disk cache).

Targets (issue 3): numpy generated >= 3x faster per call than the hand-written formula at d = 2; C batched
>= 5x faster per state than numpy batched; derivation of all variants at d = 4 under 10 s.
Timings are minima over repeats; the machine may be shared, so only ratios above ~2x are firm.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import timeit
import warnings

import numpy as np
import sympy as sp

from symbolic_tpde.codegen import c_backend
from symbolic_tpde.codegen.cache import Cache
from symbolic_tpde.codegen.compile import compile_system
from symbolic_tpde.symbolic.moments import derive_gaussian_system
from symbolic_tpde.documents.printing import tree_size

LAMBDIFY_MAX_TREE = 200_000


def per_call(fn, number: int, repeat: int = 5) -> float:
    """Best (minimum) seconds per call over ``repeat`` repeats: on a shared machine the minimum is the least
    disturbed estimate (timeit's own advice)."""
    ts = timeit.repeat(fn, number=number, repeat=repeat)
    return min(ts) / number


def hand_written(d: int):
    iu = np.triu_indices(d)

    def f(t, y, p):
        alpha = y[:d]
        S = np.empty((d, d))
        S[iu] = y[d:]
        S.T[iu] = y[d:]
        A = p[:d * d].reshape(d, d)
        V = p[d * d:].reshape(d, d)
        SA = S @ A
        ad = V @ (alpha + SA @ alpha)
        M = V @ SA @ S
        Sd = M + M.T
        return np.concatenate([ad, Sd[iu]])

    def g(alpha, S, A, V):
        SA = S @ A
        M = V @ SA @ S
        return V @ (alpha + SA @ alpha), M + M.T

    return f, g


def bench_calls(dims, n_batch, have_c, cache):
    rng = np.random.default_rng(0)
    rows = []
    for d in dims:
        system = derive_gaussian_system((d, (("softmax", d),), False, False))
        t0 = time.perf_counter()
        cn = compile_system(system, "numpy", cache=cache)
        t_gen_np = time.perf_counter() - t0
        t0 = time.perf_counter()
        cc = compile_system(system, "c", cache=cache) if have_c else None
        t_gen_c = time.perf_counter() - t0
        L = rng.normal(size=(d, d))
        S = np.eye(d) + L @ L.T / d
        alpha = rng.normal(size=d)
        y = np.concatenate([alpha, S[np.triu_indices(d)]])
        p = rng.normal(size=system.n_params) * 0.3
        A, V = p[:d * d].reshape(d, d), p[d * d:].reshape(d, d)
        hf, hg = hand_written(d)
        ref = hf(0.0, y, p)
        assert np.allclose(cn.f(0.0, y, p), ref, rtol=1e-12, atol=1e-12)
        tsize = tree_size(system.rhs)
        # lambdify prints the full expression tree: at d = 16 that is ~3.6e6 nodes (minutes just to print)
        lam = (sp.lambdify([system.time, list(system.states), list(system.params)], list(system.rhs),
                           modules="numpy", cse=False) if tsize <= LAMBDIFY_MAX_TREE else None)
        number = 2000 if d <= 4 else (300 if d <= 8 else 50)
        r = {"d": d, "gen_np_s": t_gen_np, "gen_c_s": t_gen_c}
        r["numpy"] = per_call(lambda: cn.f(0.0, y, p), number)
        r["hand"] = per_call(lambda: hf(0.0, y, p), number)
        r["hand_mat"] = per_call(lambda: hg(alpha, S, A, V), number)
        r["tree"] = tsize
        r["lambdify"] = per_call(lambda: lam(0.0, y, p), max(10, number // 10), repeat=3) if lam else float("nan")
        if cc is not None:
            assert np.allclose(cc.f(0.0, y, p), ref, rtol=1e-12, atol=1e-12)
            r["c"] = per_call(lambda: cc.f(0.0, y, p), number)
        Y = np.tile(y, (n_batch, 1)) + 0.01 * rng.normal(size=(n_batch, y.size))
        nb = 3 if d <= 8 else 1
        r["batch_np"] = per_call(lambda: cn.batch(0.0, Y, p), nb, repeat=3) / n_batch
        if cc is not None:
            assert np.allclose(cc.batch(0.0, Y, p), cn.batch(0.0, Y, p), rtol=1e-10, atol=1e-10)
            r["batch_c"] = per_call(lambda: cc.batch(0.0, Y, p), nb, repeat=3) / n_batch
        rows.append(r)
    return rows


VARIANTS = {
    "softmax": lambda d: (d, (("softmax", d),), False, False),
    "l2": lambda d: (d, (("l2", d),), False, False),
    "linear": lambda d: (d, (("linear", d),), False, False),
    "multihead(2)": lambda d: (d, (("softmax", d), ("softmax", d)), False, False),
    "sinkhorn": lambda d: (d, (("sinkhorn", d),), False, False),
    "custom": lambda d: (d, (("custom", d),), False, False),
    "softmax+ffn": lambda d: (d, (("softmax", d),), True, False),
}


def bench_derivation(dims):
    out = {}
    for d in dims:
        for name, build in VARIANTS.items():
            if name == "sinkhorn" and d >= 3:
                continue
            t0 = time.perf_counter()
            derive_gaussian_system(build(d))
            out[(name, d)] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--derive-dims", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--quick", action="store_true", help="dims 2 4, derivation at d = 2 4")
    args = ap.parse_args()
    if args.quick:
        args.dims, args.derive_dims = [2, 4], [2, 4]
    have_c = c_backend.availability() is None
    if not have_c:
        warnings.warn(f"C backend unavailable ({c_backend.availability()}): C columns omitted")

    print("== symbolic derivation (engine, cold cache; softmax at the benchmark dims is timed below) ==")
    der = bench_derivation(args.derive_dims)
    for d in args.derive_dims:
        items = [(n, s) for (n, dd), s in der.items() if dd == d]
        print(f"d = {d}: " + ", ".join(f"{n} {s:.2f}s" for n, s in items) + f"  | total {sum(s for _, s in items):.2f}s")
    if 4 in args.derive_dims:
        tot = sum(s for (n, dd), s in der.items() if dd == 4)
        print(f"target: all variants at d = 4 under 10 s -> {tot:.2f} s {'MET' if tot < 10 else 'NOT MET'}")

    with tempfile.TemporaryDirectory(prefix="tpde-bench-cache-") as tmp:
        rows = bench_calls(args.dims, args.batch, have_c, Cache(tmp))
    print("\n== per-call time of the softmax RHS, flat f(t, y, p) (µs; ratio = hand-written / method) ==")
    hdr = f"{'d':>3} {'gen numpy':>10} {'gen C':>8} {'hand':>8} {'hand(mat)':>10} {'lambdify':>10} " \
          f"{'hand/numpy':>11} {'hand/C':>8} {'lambdify/numpy':>15} {'codegen np/C (s, cold)':>24}"
    print(hdr)
    for r in rows:
        c = r.get("c", float("nan"))
        print(f"{r['d']:>3} {r['numpy'] * 1e6:>10.2f} {c * 1e6:>8.2f} {r['hand'] * 1e6:>8.2f} "
              f"{r['hand_mat'] * 1e6:>10.2f} {r['lambdify'] * 1e6:>10.1f} {r['hand'] / r['numpy']:>11.2f} "
              f"{r['hand'] / c:>8.2f} {r['lambdify'] / r['numpy']:>15.1f} "
              f"{r['gen_np_s']:>11.2f} / {r['gen_c_s']:<10.2f}"
              + ("" if r["lambdify"] == r["lambdify"] else f"  (lambdify skipped: tree of {r['tree']} nodes)"))
    r2 = next((r for r in rows if r["d"] == 2), None)
    if r2:
        ratio = r2["hand"] / r2["numpy"]
        print(f"target: generated numpy >= 3x faster than hand-written at d = 2 -> {ratio:.2f}x "
              f"{'MET' if ratio >= 3 else 'NOT MET'} (vs hand-written on ready matrices: "
              f"{r2['hand_mat'] / r2['numpy']:.2f}x)")
    print(f"\n== batched throughput, {args.batch} states, shared parameters (ns/state) ==")
    print(f"{'d':>3} {'numpy batch':>12} {'C batch':>10} {'numpy/C':>8}")
    for r in rows:
        c = r.get("batch_c", float("nan"))
        print(f"{r['d']:>3} {r['batch_np'] * 1e9:>12.1f} {c * 1e9:>10.1f} {r['batch_np'] / c:>8.1f}")
    if r2 and "batch_c" in r2:
        worst = min(r["batch_np"] / r["batch_c"] for r in rows)
        print(f"target: C batched >= 5x faster per state than numpy batched -> d = 2: "
              f"{r2['batch_np'] / r2['batch_c']:.1f}x, worst over d: {worst:.1f}x "
              f"{'MET' if worst >= 5 else 'NOT MET'}")


if __name__ == "__main__":
    main()
