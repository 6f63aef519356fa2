"""Benchmark: the error-controlled default of ``simulate`` (issue 12 item 2) against a fine fixed-step run.

Run:  python numerics/bench_particle_steps.py [--n 6000] [--seed 3] [--T 0.6] [--fine 120]

Times ``tpde particles --scenario softmax_2d --n N --seed S --T T --json`` with defaults (a subprocess, so the
figure is the user's wall time including start-up) and, in this process on the same sample
(``default_rng(S).multivariate_normal(alpha0, Sigma0, method="cholesky")``, the command's recipe), a fixed
RK4 run with ``--fine`` steps (step 0.005 at T = 0.6; RK4's error ``~h⁴`` is ~1e-9 there).  Prints the
moment differences in units of their Monte-Carlo standard errors (mean: ``sqrt(C_ii / n)``; covariance
entry ``ij``: ``std((x_i - m_i)(x_j - m_j)) / sqrt(n)``); the acceptance is <= 2 standard errors, and the
default run should take <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--T", type=float, default=0.6)
    ap.add_argument("--fine", type=int, default=120)
    a = ap.parse_args()
    from symbolic_tpde.numerics.measures.estimators import moments
    from symbolic_tpde.numerics.particles.simulate import simulate
    from symbolic_tpde.inputs.scenario import load_scenario

    cmd = [sys.executable, "-m", "symbolic_tpde.cli", "particles", "--scenario", "softmax_2d", "--n", str(a.n),
           "--seed", str(a.seed), "--T", str(a.T), "--json", "--progress", "never"]
    t0 = time.perf_counter()
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    wall = time.perf_counter() - t0
    scn = load_scenario("softmax_2d", need_T=False)
    X0 = np.random.default_rng(a.seed).multivariate_normal(scn.alpha0, scn.Sigma0, size=a.n, method="cholesky")
    t0 = time.perf_counter()
    fine = simulate(X0, scn.schedule, a.T, steps=a.fine, method="rk4", progress=False)
    t_fine = time.perf_counter() - t0
    auto = simulate(X0, scn.schedule, a.T, progress=False)
    m, C = moments(fine.X)
    Y = fine.X - m
    se_m = np.sqrt(np.diag(C) / a.n)
    se_C = np.array([[np.std(Y[:, i] * Y[:, j]) for j in range(Y.shape[1])] for i in range(Y.shape[1])]) / np.sqrt(a.n)
    dm = np.abs(np.array(out["mean"]) - m) / se_m
    dC = np.abs(np.array(out["cov"]) - C) / se_C
    print(f"tpde particles defaults: {wall:.2f} s wall ({out['seconds']:.2f} s integrating), method "
          f"{out['method']}, {out['steps']} steps, {out['nfev']} field evaluations")
    print(f"in-process default: tolerance {auto.tolerance:.2e}, error estimate {auto.error_estimate:.2e}, "
          f"{auto.rejected} rejected steps")
    print(f"fine fixed run: rk4, {a.fine} steps, {t_fine:.2f} s;  ratio fine/default time "
          f"{t_fine / out['seconds']:.1f}x")
    print(f"|mean - fine| / MC s.e.: {np.array2string(dm, formatter={'float_kind': lambda v: f'{v:.1e}'})}  (max abs diff "
          f"{np.abs(np.array(out['mean']) - m).max():.2e})")
    print(f"|cov - fine| / MC s.e.: max {dC.max():.2e}  (max abs diff {np.abs(np.array(out['cov']) - C).max():.2e})")
    ok = dm.max() <= 2 and dC.max() <= 2 and wall <= 10
    print("acceptance (<= 2 s.e., <= 10 s):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
