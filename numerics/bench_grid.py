"""Benchmark: the grid solver (``tpde pde``), cost per right-hand side vs grid size, and a full 2-D run.

Run:  python numerics/bench_grid.py [--repeats R] [--n1 200 400 800 1600] [--n2 32 64 96] [--full N]
      [--sep 64 128 256] [--tol 1e-12] [--quick] [--full-direct N]

``--quick``: only the separable table at 64² and 128² and ``--full 128`` (a few minutes on a quiet machine).

Per size, Gaussian data (d = 1: a softmax head A = 0.5, V = 1; d = 2: the softmax_2d scenario), the median over
R interleaved rounds of

* ``rhs``: one right-hand side of the solver (velocity at every cell centre with the cell masses as weights,
  through the attention kernel with log-mass key biases, plus the MUSCL fluxes);
* ``flux``: the flux/update part alone (velocity given);
* ``particles``: the baseline, measured in the same rounds: the package's particle field
  (``numerics.fields.field``) of ``n = cells`` equal-weight tokens at the cell centres.

``ratio`` = rhs / particles (median of per-round ratios, so slow drifts of a shared machine's load cancel):
a grid evaluation costs about one particle-field evaluation with as many tokens as cells.

Separable velocity (issue 33, ``symbolic_tpde.numerics.grids.separable``), per size of ``--sep`` (default 64²,
128², 256²), softmax_2d's initial masses: the direct sum (the attention kernel over every massive cell) and the
separable path at relative tolerance ``--tol`` in interleaved rounds; ``ratio`` = direct / separable (median of
per-round ratios), ``max err`` = the largest velocity difference, ``bound`` = the bound the code computed.

``--full N``: a complete MUSCL + SSPRK2 run of softmax_2d to T = 1 on N² cells with the default (separable)
velocity, with its steps and evaluations, against the direct sum's per-evaluation time (measured in the same
run on the initial grid, at the query cells the solver evaluates: those next to a cell above ``FLOW_TOL``)
times that evaluation count.  ``--full-direct N``: the same run with the direct sum too, and the largest
difference of the final masses; a run that stops before T (at 256² the direct sum spends the solver's work
budget ``WORK_BUDGET`` in about 10 steps) is reported with its status and time, and not compared.
The ``--sep`` table queries every cell with mass (more than the solver does), the harder case for the error.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from symbolic_tpde.numerics.particles.fields import field
from symbolic_tpde.numerics.grids import separable
from symbolic_tpde.numerics.grids.euclidean import FLOW_TOL, _Rhs, initial_grid, solve_grid
from symbolic_tpde.numerics.measures.laws import cell_masses
from symbolic_tpde.inputs.scenario import InitSpec, load_scenario, parse_scenario


def _setup(d, N):
    if d == 2:
        scn = load_scenario("softmax_2d")
    else:
        scn = parse_scenario({"attention": "softmax", "A": [[0.5]], "V": [[1.0]], "alpha0": [0.3],
                              "Sigma0": [[0.5]], "T": 1.0})
    init = InitSpec("gaussian", d, {"alpha": scn.alpha0, "Sigma": scn.Sigma0}, scn.alpha0, scn.Sigma0, True)
    g = initial_grid(init, N)
    m = cell_masses(init, g.edges)
    return scn, init, g, m


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n1", type=int, nargs="*", default=[200, 400, 800, 1600])
    ap.add_argument("--n2", type=int, nargs="*", default=[32, 64, 96])
    ap.add_argument("--full", type=int, default=0, metavar="N", help="also time a full 2-D T = 1 run on N² cells")
    ap.add_argument("--sep", type=int, nargs="*", default=[64, 128, 256], help="sizes of the separable table")
    ap.add_argument("--tol", type=float, default=1e-12, help="relative tolerance of the separable velocity")
    ap.add_argument("--full-direct", type=int, default=0, metavar="N",
                    help="a full run with the direct sum too, and the difference of the final masses")
    ap.add_argument("--quick", action="store_true", help="separable table at 64², 128² and --full 128 only")
    args = ap.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} at start")
    if args.quick:
        args.n1, args.n2, args.sep, args.full = [], [], [64, 128], args.full or 128
    separable_table(args)
    print(f"{'d':>2} {'cells':>7} {'rhs s':>9} {'flux s':>9} {'particles s':>12} {'ratio':>6}")
    for d, sizes in ((1, args.n1), (2, args.n2)):
        for N in sizes:
            scn, init, g, m = _setup(d, N)
            f = _Rhs(g, scn.schedule, True, None)
            y = np.concatenate([m.ravel(), [0.0]])
            C = g.centres
            w = scn.weights(0.0)
            u = f.velocity(0.0, m)
            fns = {"rhs": lambda: f(0.0, y), "particles": lambda: field(C, w),
                   "flux": lambda: f.__class__.__call__(_Frozen(f, u), 0.0, y)}
            times = {k: [] for k in fns}
            ratios = []
            for _ in range(args.repeats):
                rnd = {}
                for name, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    rnd[name] = time.perf_counter() - t0
                    times[name].append(rnd[name])
                ratios.append(rnd["rhs"] / rnd["particles"])
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{d:>2} {m.size:>7} {med['rhs']:>9.4f} {med['flux']:>9.4f} {med['particles']:>12.4f} "
                  f"{statistics.median(ratios):>6.2f}", flush=True)
    for N in sorted({args.full, args.full_direct} - {0}):
        scn, init, g, m = _setup(2, N)
        f = _Rhs(g, scn.schedule, True, None)  # the direct sum, per evaluation, on the initial grid
        flowing = np.abs(m) >= FLOW_TOL         # the query cells the solver itself evaluates (FLOW_TOL)
        direct = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            f.velocity(0.0, m, flowing)
            direct.append(time.perf_counter() - t0)
        r = solve_grid(init, scn.schedule, 1.0, N, velocity_tol=args.tol)
        est = statistics.median(direct) * r.nfev
        print(f"full run: softmax_2d, MUSCL + SSPRK2, {N}x{N} cells (grid at the end {r.grid.shape}), T = 1, "
              f"separable velocity (tol {args.tol:g}, bound {r.velocity_bound:.1e}): {r.seconds:.1f} s, {r.steps} "
              f"steps, {r.nfev} evaluations, status {r.status} at t = {r.t:.3g}, {r.seconds / max(1, r.nfev):.3f} s per evaluation, mass error "
              f"{r.mass_error:.1e}; direct sum {statistics.median(direct):.3f} s per evaluation x {r.nfev} = "
              f"{est:.0f} s: {est / r.seconds:.1f}x; load {os.getloadavg()[0]:.2f}", flush=True)
        if N == args.full_direct:
            rd = solve_grid(init, scn.schedule, 1.0, N, velocity_tol=None)
            head = (f"  the same run with the direct sum: {rd.seconds:.1f} s, {rd.steps} steps, status {rd.status} at "
                    f"t = {rd.t:.3g}")
            if rd.status != "ok" or r.status != "ok" or rd.grid.shape != r.grid.shape:
                # e.g. the direct sum's work budget (WORK_BUDGET) runs out before T at 256²: nothing to compare
                print(f"{head}; not compared (both runs must reach T = 1 on the same grid); load "
                      f"{os.getloadavg()[0]:.2f}", flush=True)
                continue
            diff = float(np.abs(rd.masses - r.masses).max())
            print(f"{head} ({rd.seconds / r.seconds:.1f}x the separable run's time); final masses differ by at most "
                  f"{diff:.1e} (largest mass {float(r.masses.max()):.1e}); load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


def separable_table(args) -> None:
    """The separable velocity against the direct sum (module docstring)."""
    if not args.sep:
        return
    print(f"separable velocity vs direct sum, softmax_2d initial masses, tol {args.tol:g}, "
          f"{args.repeats} interleaved rounds")
    print(f"{'cells':>7} {'direct s':>9} {'separ. s':>9} {'ratio':>6} {'max err':>9} {'bound':>9} {'nodes':>5}")
    for N in args.sep:
        scn, init, g, m = _setup(2, N)
        fast, slow = _Rhs(g, scn.schedule, True, None, args.tol), _Rhs(g, scn.schedule, True, None)
        u_fast, u_slow = fast.velocity(0.0, m), slow.velocity(0.0, m)  # warm-up (kernel build), and the error
        rounds = []
        for _ in range(args.repeats):
            r = {}
            for name, f in (("direct", slow), ("sep", fast)):
                t0 = time.perf_counter()
                f.velocity(0.0, m)
                r[name] = time.perf_counter() - t0
            rounds.append(r)
        med = {k: statistics.median(r[k] for r in rounds) for k in ("direct", "sep")}
        ratio = statistics.median(r["direct"] / r["sep"] for r in rounds)
        print(f"{m.size:>7} {med['direct']:>9.3f} {med['sep']:>9.3f} {ratio:>6.1f} "
              f"{float(np.abs(u_fast - u_slow).max()):>9.1e} {fast.velocity_bound:>9.1e} "
              f"{separable.nodes_for(args.tol, N, N):>5}  (load {os.getloadavg()[0]:.2f})", flush=True)


class _Frozen:
    """An :class:`_Rhs` whose velocity is fixed (times the flux part alone)."""

    def __init__(self, rhs, u):
        self.__dict__.update(rhs.__dict__)
        self._u = u

    def velocity(self, t, m, flowing=None):
        return self._u


if __name__ == "__main__":
    raise SystemExit(main())
