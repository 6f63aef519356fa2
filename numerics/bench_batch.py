"""Benchmark: batched integration of 10 000 initial 2x2 covariances vs a per-trajectory loop; sweep scaling.

Same run, same generated right-hand side (softmax, d = 2, A = -[[0.6, 0.1], [0.1, 0.3]], V = I, horizon T = 5,
rtol 1e-8, atol 1e-10), Σ₀ = GGᵀ + 0.1 I with G standard normal (seed 0):

* batched: :func:`symbolic_tpde.numerics.ode.rk.rk_solve` (Dormand-Prince rows) on ``GaussianODE.rhs_batch`` (all rows
  at once);
* loop: ``scipy.integrate.solve_ivp`` (RK45, the same Dormand-Prince pair) per trajectory on ``compiled.f``,
  timed on a subset of ``--loop-n`` trajectories and reported per trajectory;
* sweep: ``tpde sweep``-style grid in-process vs 2 local worker processes (a pool warmed with the
  generated RHS first: start-up and SymPy derivation per process are excluded; the load average is printed).

Prints trajectories per second and the ratios (target >= 20x for batched vs loop).
Usage: python numerics/bench_batch.py [--N 10000] [--loop-n 300]
"""

import argparse
import time

import numpy as np
from scipy.integrate import solve_ivp

from symbolic_tpde.analysis.sweep import SweepSpec, run_sweep
from symbolic_tpde.gaussian import GaussianODE
from symbolic_tpde.weights import make_head, make_weights
from symbolic_tpde.numerics.ode.rk import Status, rk_solve


def _busy(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--N", type=int, default=10_000)
    ap.add_argument("--loop-n", type=int, default=300)
    ap.add_argument("--skip-sweep", action="store_true")
    args = ap.parse_args()
    A = -np.array([[0.6, 0.1], [0.1, 0.3]])
    ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=A, V=np.eye(2))]))
    p = ode.params(0.0)
    rng = np.random.default_rng(0)
    G = rng.normal(size=(args.N, 2, 2))
    S0 = G @ G.transpose(0, 2, 1) + 0.1 * np.eye(2)
    Y0 = np.concatenate([np.zeros((args.N, 2)), S0[:, 0, :], S0[:, 1, 1:]], axis=1)
    T, rtol, atol = 5.0, 1e-8, 1e-10
    batch, f = ode.rhs_batch, ode.compiled.f
    print(f"backend: {ode.backend}")

    t0 = time.perf_counter()
    res = rk_solve(lambda t, Y: batch(t, Y, p), 0.0, Y0, T, rtol=rtol, atol=atol)
    tb = time.perf_counter() - t0
    assert np.all(res.status == Status.OK)
    m = args.loop_n
    t0 = time.perf_counter()
    ends = []
    for i in range(m):
        s = solve_ivp(lambda t, y: f(t, y, p), (0, T), Y0[i], method="RK45", rtol=rtol, atol=atol)
        ends.append(s.y[:, -1])
    tl = (time.perf_counter() - t0) / m * args.N
    diff = np.abs(np.array(ends) - res.y[:m]).max() / np.abs(res.y[:m]).max()
    print(f"{'method':<44} {'time (s)':>10} {'traj/s':>10} {'ratio':>7}")
    print(f"{'per-trajectory solve_ivp RK45 loop':<44} {tl:>10.2f} {args.N / tl:>10.0f} {1.0:>7.1f}"
          f"   (timed on {m}, scaled to {args.N})")
    print(f"{'batched DOPRI5 (rk.rk_solve)':<44} {tb:>10.2f} {args.N / tb:>10.0f} {tl / tb:>7.1f}")
    print(f"max relative end-state difference batched vs loop: {diff:.2e} (both at rtol {rtol:g})")
    print(f"batched: mean steps/trajectory {res.n_steps.mean():.1f}, rejected {res.n_rejected.mean():.2f}")

    if not args.skip_sweep:
        import os
        from concurrent.futures import ProcessPoolExecutor

        from symbolic_tpde.analysis.sweep import warm_worker

        spec = SweepSpec(n=8, K=16, T=1e2, seed=1)
        warm_worker()
        t0 = time.perf_counter()
        run_sweep(spec, workers=1)
        t1 = time.perf_counter() - t0
        with ProcessPoolExecutor(max_workers=2, initializer=warm_worker) as ex:
            list(ex.map(abs, [1, 2]))  # start both workers (and run the initializer) before timing
            t0 = time.perf_counter()
            run_sweep(spec, executor=ex)
            t2 = time.perf_counter() - t0
            # control: the parallelism the machine offers right now (pure-Python busy loops, same pool)
            t0 = time.perf_counter()
            [_busy(3_000_000) for _ in range(4)]
            c1 = time.perf_counter() - t0
            t0 = time.perf_counter()
            list(ex.map(_busy, [3_000_000] * 4))
            c2 = time.perf_counter() - t0
        print(f"sweep {spec.n}x{spec.n} grid, K = {spec.K} (warmed workers): 1 worker {t1:.1f} s, 2 workers "
              f"{t2:.1f} s, speed-up {t1 / t2:.2f}x; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores (shared machine)")
        print(f"control (busy loops, same pool): speed-up {c1 / c2:.2f}x = parallelism available right now")


if __name__ == "__main__":
    main()
