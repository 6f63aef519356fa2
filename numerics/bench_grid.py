"""Benchmark: the grid solver (``tpde pde``), cost per right-hand side vs grid size, and a full 2-D run.

Run:  python numerics/bench_grid.py [--repeats R] [--n1 200 400 800 1600] [--n2 32 64 128] [--full N]

Per size, on the softmax_2d weights (d = 2) or a 1-D softmax head (d = 1), Gaussian data: the time of one
right-hand side (velocity at every cell centre + fluxes), as the median over R interleaved rounds of

* ``tensor``: the 2-D velocity by exact separable matrix products (``grid.grid_field``; d = 2 only);
* ``kernel``: the same velocity through the attention kernel with log-mass key biases (``grid.weighted_field``,
  every cell a key) — the baseline measured in the same run;
* ``flux``: the flux/update part alone (velocity given).

``ratio`` = kernel / tensor (median of per-round ratios: slow drifts of a shared machine's load cancel);
``diff`` = largest difference of the two velocities relative to max |u|.  ``--full N``: a complete MUSCL run
of softmax_2d to T = 1 on N² cells (the README's number), printed with its steps and evaluations.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from symbolic_tpde.numerics.grid import _axis_flux, _face_velocity, grid_field, initial_grid, solve_grid, weighted_field
from symbolic_tpde.numerics.init_data import cell_masses
from symbolic_tpde.scenario import InitSpec, load_scenario, parse_scenario


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
    ap.add_argument("--n2", type=int, nargs="*", default=[32, 64, 128])
    ap.add_argument("--full", type=int, default=0, metavar="N", help="also time a full 2-D T = 1 run on N² cells")
    args = ap.parse_args(argv)
    print(f"{'d':>2} {'cells':>7} {'tensor s':>10} {'kernel s':>10} {'flux s':>9} {'ratio':>6} {'diff':>8}")
    for d, sizes in ((1, args.n1), (2, args.n2)):
        for N in sizes:
            scn, init, g, m = _setup(d, N)
            w = scn.weights(0.0)
            C = g.centres
            axes = [(e[1:] + e[:-1]) / 2 for e in g.edges]
            fns = {"kernel": lambda: weighted_field(C, C, m.ravel(), w)}
            if d == 2:
                fns["tensor"] = lambda: grid_field(C, axes, m, w)
            u = fns["kernel"]().reshape(m.shape + (d,))

            def flux():
                for k in range(d):
                    np.diff(_axis_flux(m, _face_velocity(u, k), k, True), axis=k)
            fns["flux"] = flux
            times = {k: [] for k in fns}
            ratios = []
            for _ in range(args.repeats):
                rnd = {}
                for name, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    rnd[name] = time.perf_counter() - t0
                    times[name].append(rnd[name])
                if d == 2:
                    ratios.append(rnd["kernel"] / rnd["tensor"])
            med = {k: statistics.median(v) for k, v in times.items()}
            if d == 2:
                ut = grid_field(C, axes, m, w)
                diff = float(np.abs(ut - u.reshape(-1, d)).max() / np.abs(u).max())
                print(f"{d:>2} {m.size:>7} {med['tensor']:>10.4f} {med['kernel']:>10.4f} {med['flux']:>9.4f} "
                      f"{statistics.median(ratios):>6.1f} {diff:>8.1e}")
            else:
                print(f"{d:>2} {m.size:>7} {'-':>10} {med['kernel']:>10.4f} {med['flux']:>9.4f} {'-':>6} {'-':>8}")
    if args.full:
        scn, init, g, m = _setup(2, args.full)
        r = solve_grid(init, scn.schedule, 1.0, args.full)
        print(f"full run: softmax_2d, MUSCL + SSPRK2, {args.full}x{args.full} cells (grid at the end "
              f"{r.grid.shape}), T = 1: {r.seconds:.1f} s, {r.steps} steps, {r.nfev} evaluations, "
              f"{r.seconds / max(1, r.nfev):.3f} s per evaluation, mass error {r.mass_error:.1e}, "
              f"min mass {r.min_mass:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
