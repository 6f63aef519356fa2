"""Benchmark: the grid solver (``tpde pde``), cost per right-hand side vs grid size, and a full 2-D run.

Run:  python numerics/bench_grid.py [--repeats R] [--n1 200 400 800 1600] [--n2 32 64 96] [--full N]

Per size, Gaussian data (d = 1: a softmax head A = 0.5, V = 1; d = 2: the softmax_2d scenario), the median over
R interleaved rounds of

* ``rhs``: one right-hand side of the solver (velocity at every cell centre with the cell masses as weights,
  through the attention kernel with log-mass key biases, plus the MUSCL fluxes);
* ``flux``: the flux/update part alone (velocity given);
* ``particles``: the baseline, measured in the same rounds: the package's particle field
  (``numerics.fields.field``) of ``n = cells`` equal-weight tokens at the cell centres.

``ratio`` = rhs / particles (median of per-round ratios, so slow drifts of a shared machine's load cancel):
a grid evaluation costs about one particle-field evaluation with as many tokens as cells.  ``--full N``: a
complete MUSCL + SSPRK2 run of softmax_2d to T = 1 on N² cells (the README's number), with its steps and
evaluations.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from symbolic_tpde.numerics.particles.fields import field
from symbolic_tpde.numerics.grids.euclidean import _Rhs, initial_grid, solve_grid
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
    args = ap.parse_args(argv)
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
    if args.full:
        scn, init, g, m = _setup(2, args.full)
        r = solve_grid(init, scn.schedule, 1.0, args.full)
        print(f"full run: softmax_2d, MUSCL + SSPRK2, {args.full}x{args.full} cells (grid at the end "
              f"{r.grid.shape}), T = 1: {r.seconds:.1f} s, {r.steps} steps, {r.nfev} evaluations, "
              f"{r.seconds / max(1, r.nfev):.3f} s per evaluation, mass error {r.mass_error:.1e}, "
              f"min mass {r.min_mass:.1e}", flush=True)
    return 0


class _Frozen:
    """An :class:`_Rhs` whose velocity is fixed (times the flux part alone)."""

    def __init__(self, rhs, u):
        self.__dict__.update(rhs.__dict__)
        self._u = u

    def velocity(self, t, m):
        return self._u


if __name__ == "__main__":
    raise SystemExit(main())
