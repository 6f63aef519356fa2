"""Benchmark: symbolic derivation time of the entrywise Gaussian moment ODE per variant and d.

Every timing starts from cold caches (the engine's own lru caches and SymPy's global cache are cleared), so
the numbers are what a fresh process pays.  Target (issue 3): all Gaussian-preserving variants at d = 4
derived in under 10 s in total (Sinkhorn entrywise exists only for d <= 2).  Also compares the three ways of
applying N⁻¹, N = Σ - Σ(R+Rᵀ)Σ (default LDLᵀ without pivoting, adjugate of a generic matrix, SymPy LUsolve)
for ℓ2 and custom kernels: derivation time and size of the result (distinct sub-expressions, what CSE and
code generation have to chew on).

Run: python numerics/bench_derive.py [--dims 1 2 3 4] [--repeat 1]
"""

from __future__ import annotations

import argparse
import time

from sympy.core.cache import clear_cache

from symbolic_tpde.symbolic import moments, tilt


def cold(structure, method="ldl", cpu: bool = True) -> float:
    """Seconds for one cold derivation: CPU time of this process by default (the machine is shared, so wall
    time mostly measures the neighbours), wall time with ``cpu=False``."""
    moments._derive.cache_clear()
    tilt.generic_adjugate.cache_clear()
    clear_cache()
    clock = time.process_time if cpu else time.perf_counter
    t0 = clock()
    moments.derive_gaussian_system(structure, method=method)
    return clock() - t0


def dag_nodes(structure, method) -> int:
    system = moments.derive_gaussian_system(structure, method=method)
    seen, stack = set(), list(system.rhs)
    while stack:
        e = stack.pop()
        if e not in seen:
            seen.add(e)
            stack.extend(e.args)
    return len(seen)


def structures(d: int) -> dict[str, tuple]:
    """One structure per variant (the target set), Sinkhorn only where an entrywise form exists."""
    out = {"softmax": (d, (("softmax", d),), False, False),
           "l2": (d, (("l2", d),), False, False),
           "linear": (d, (("linear", d),), False, False),
           "custom": (d, (("custom", d),), False, False),
           "multihead (2 softmax)": (d, (("softmax", d),) * 2, False, False),
           "softmax + ffn": (d, (("softmax", d),), True, False)}
    if d <= 2:
        out["sinkhorn"] = (d, (("sinkhorn", d),), False, False)
    return out


EXTRA = {"mixed softmax+l2+linear+custom+ffn": lambda d: (d, (("softmax", d), ("l2", d), ("linear", d),
                                                              ("custom", d)), True, False)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--repeat", type=int, default=1, help="take the minimum over this many cold runs")
    args = ap.parse_args()
    print(f"{'variant':<44} {'d':>2} {'CPU s':>8} {'wall s':>8}")
    totals = {}
    for d in args.dims:
        total = [0.0, 0.0]
        for name, st in structures(d).items():
            c = min(cold(st) for _ in range(args.repeat))
            w = min(cold(st, cpu=False) for _ in range(args.repeat))
            total[0] += c
            total[1] += w
            print(f"{name:<44} {d:>2} {c:>8.3f} {w:>8.3f}")
        totals[d] = total
        print(f"{'TOTAL (all variants)':<44} {d:>2} {total[0]:>8.3f} {total[1]:>8.3f}")
        for name, make in EXTRA.items():
            print(f"{name + ' (extra)':<44} {d:>2} {cold(make(d)):>8.3f} {cold(make(d), cpu=False):>8.3f}")
    if 4 in totals:
        c, w = totals[4]
        print(f"\nd = 4, all variants: CPU {c:.2f} s, wall {w:.2f} s; ratio to the 10 s target: CPU {c / 10:.2f}, "
              f"wall {w / 10:.2f} ({'met' if max(c, w) < 10 else 'NOT met'})")
    print("\nN^-1 with N = Sigma - Sigma (R + R^T) Sigma: time (cold) and distinct sub-expressions of the RHS")
    for d in [d for d in args.dims if d >= 2]:
        for kind in ("l2", "custom"):
            st = (d, ((kind, d),), False, False)
            t = {m: min(cold(st, m) for _ in range(args.repeat)) for m in ("ldl", "adjugate", "lu")}
            n = {m: dag_nodes(st, m) for m in t}
            print(f"{kind:<7} d = {d}: " + ", ".join(f"{m} {t[m]:.3f} s / {n[m]} nodes" for m in t)
                  + f"; time ratio adjugate/ldl = {t['adjugate'] / t['ldl']:.2f}, lu/ldl = {t['lu'] / t['ldl']:.2f}")

if __name__ == "__main__":
    main()
