"""Benchmark: gradient of one scalar loss w.r.t. all parameters and the initial state, adjoint vs forward
sensitivities (same run, numpy backend, best of ``--repeat``; generation timed separately, first call).

Problem: softmax head, ``A = 0.3√(2/d) G``, ``V = I + 0.2√(2/d) G'`` (seed 0), ``α₀ = 0.3 g``, ``Σ₀ = ½I``,
``T = 0.5``, DOP853 at rtol 1e-12, loss ``ℓ = w·y(T)`` (w random).  Forward: ``n(1 + P + n)`` states (every
parameter and every initial entry); adjoint: one forward run of ``n`` states and one backward run of
``2n + P``.  The ratio ``forward / adjoint`` says when the adjoint pays.
Usage: python numerics/bench_adjoint.py [--dims 2 3 4] [--repeat 3]
"""

import argparse
import time

import numpy as np

from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.gaussian.sensitivities import adjoint_gradient
from symbolic_tpde.registry import layout
from symbolic_tpde.weights import make_head, make_weights


def best(fn, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def case(d, repeat):
    rng = np.random.default_rng(0)
    A = 0.3 * np.sqrt(2 / d) * rng.normal(size=(d, d))
    V = np.eye(d) + 0.2 * np.sqrt(2 / d) * rng.normal(size=(d, d))
    a0, S0, T = 0.3 * rng.normal(size=d), 0.5 * np.eye(d), 0.5
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", d, A=A, V=V)]), backend="numpy")
    w = rng.normal(size=layout.state_size(d))
    t = time.perf_counter()
    adj = adjoint_gradient(ode, a0, S0, T, w)
    gen_adj = time.perf_counter() - t
    names = list(adj.param_names) + list(adj.init_names)
    t = time.perf_counter()
    ode.integrate(a0, S0, T, sensitivities=names, t_eval=[T])
    gen_fwd = time.perf_counter() - t
    ta = best(lambda: adjoint_gradient(ode, a0, S0, T, w), repeat)
    tf = best(lambda: ode.integrate(a0, S0, T, sensitivities=names, t_eval=[T]), repeat)
    fwd = ode.integrate(a0, S0, T, sensitivities=names, t_eval=[T]).S[-1] @ w
    err = np.abs(np.concatenate([adj.params, adj.init]) - fwd).max()
    n, P = layout.state_size(d), len(adj.param_names)
    print(f"| {d} | {P} | {n * (1 + P + n)} | {2 * n + P} | {1e3 * tf:.1f} ms | {1e3 * ta:.1f} ms | {tf / ta:.2f} | "
          f"{gen_fwd:.1f} s | {gen_adj:.1f} s | {err:.0e} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print("| d | P | forward states | adjoint states | forward | adjoint | ratio | first fwd | first adj | max diff |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in args.dims:
        case(d, args.repeat)


if __name__ == "__main__":
    main()
