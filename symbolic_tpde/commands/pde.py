"""``tpde pde``: solve the Transformer PDE on a grid (finite volumes, ℝ¹ and ℝ²) from the scenario's initial law.

Prints (``--json``)::

    {"status": "ok", "t": .., "d": .., "cells": [..], "h": [..], "lo": [..], "hi": [..], "scheme": ..,
     "mass": Σm, "lost": mass that left the domain, "truncated": 1 - Σm₀ (initial mass outside the grid + cell quadrature error),
     "mass_error": max |Σm + lost - Σm₀| over the steps, "min_mass": most negative cell mass seen,
     "mean": [..], "cov": [[..]] (exact moments of the piecewise-constant density), "occupied": cells with 99 %,
     "steps", "rejected", "nfev", "grown", "seconds"}

The solver and its guarantees: :mod:`symbolic_tpde.numerics.grid`.  Exit status: 0 ok; 2 bad input (one line
naming the field; sinkhorn and masked attention refused with the reason); 3 blow-up (with its time);
5 wall-clock cap (``status`` ``time-limit`` with the time reached, no ``--save`` file).
"""

from __future__ import annotations

import sys

EXIT_BLOWUP = 3


def register(sub) -> None:
    p = sub.add_parser("pde", help="solve the PDE on a grid (finite volumes, d = 1, 2) and print its moments",
                       description="Finite-volume solver of d_t mu + div(mu Gamma_mu) = 0 from the scenario's "
                                   "initial law (init block or N(alpha0, Sigma0)); d = 1 or 2.  Exit status: 0 ok, "
                                   "2 bad input, 3 blow-up, 5 wall-clock cap reached.")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--grid", type=int, required=True, metavar="N", help="cells per axis of the initial box (>= 4)")
    p.add_argument("--scheme", default="muscl", choices=("muscl", "upwind"),
                   help="muscl: minmod-limited linear reconstruction (order 2); upwind: order 1")
    p.add_argument("--method", default="ssprk2", choices=("ssprk2", "ssprk3"), help="SSP Runge-Kutta (default 2)")
    p.add_argument("--cfl", type=float, default=0.8, help="fraction of the positivity step bound (default 0.8)")
    p.add_argument("--pad", type=float, default=0.25, help="initial box: the data's support box plus this "
                   "fraction of its width on each side (default 0.25)")
    p.add_argument("--T", type=float, default=None, help="horizon (default: the scenario's T)")
    p.add_argument("--save", metavar="FILE.npz", default=None,
                   help="save frames: arrays times (k,), and per frame masses_<i>, lo_<i>, plus h")
    p.add_argument("--save-every", type=float, default=0.0, metavar="DT", help="with --save: time between frames")
    from .gaussian import DEFAULT_MAX_SECONDS, add_max_seconds

    add_max_seconds(p, DEFAULT_MAX_SECONDS, "the solve")
    p.add_argument("--json", action="store_true", help="print JSON (default: a short text summary)")
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    import numpy as np

    from ..errors import BlowupError, InputError
    from ..numerics.grid import grid_moments, solve_grid
    from ..scenario import InitSpec, load_scenario
    from ..validation import positive_number, strict_json
    from .gaussian import EXIT_TIME_LIMIT, max_seconds

    cap = max_seconds(args)
    positive_number(args.pad, "pad", allow_zero=True)
    positive_number(args.save_every, "save-every", allow_zero=True)
    if args.save_every and not args.save:
        raise InputError("save-every", "only meaningful with --save")
    scn = load_scenario(args.scenario, need_T=args.T is None, gaussian_data=False)
    if scn.d > 2:
        raise InputError("d", f"the grid solver covers d = 1 and d = 2, got d = {scn.d}")
    T = scn.T if args.T is None else args.T
    if not (math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be finite and >= 0, got {T}")
    init = scn.init if scn.init is not None else InitSpec(
        "gaussian", scn.d, {"alpha": scn.alpha0, "Sigma": scn.Sigma0}, scn.alpha0, scn.Sigma0, gaussian=True)
    try:
        run_ = solve_grid(init, scn.schedule, T, args.grid, scheme=args.scheme, cfl=args.cfl, pad=args.pad,
                          method=args.method, save_every=args.save_every, max_seconds=cap)
    except BlowupError as exc:
        out = {"status": "blowup", "t": exc.t, "where": exc.where, "detail": exc.detail}
        print(strict_json(out) if args.json else f"blowup: {exc}")
        return EXIT_BLOWUP
    g = run_.grid
    mean, cov = grid_moments(g, run_.masses)
    out = {"status": run_.status, "t": run_.t, "d": g.d, "cells": list(g.shape), "h": g.h.tolist(),
           "lo": g.lo.tolist(), "hi": (g.lo + g.h * np.array(g.shape)).tolist(), "scheme": run_.scheme,
           "method": args.method, "mass": float(run_.masses.sum()), "lost": run_.lost,
           "truncated": run_.truncated, "mass_error": run_.mass_error, "min_mass": run_.min_mass,
           "mean": mean.tolist(), "cov": cov.tolist(), "occupied": run_.occupied, "steps": run_.steps,
           "rejected": run_.rejected, "nfev": run_.nfev, "grown": run_.grown, "seconds": run_.seconds}
    stopped = run_.status == "time-limit"
    if args.save and not stopped:
        from .particles import _save_atomic_arrays

        arrays = {"times": np.array([f[0] for f in run_.frames]), "h": g.h}
        for i, (_, m, lo) in enumerate(run_.frames):
            arrays[f"masses_{i}"], arrays[f"lo_{i}"] = m, lo
        _save_atomic_arrays(args.save, arrays)
    if args.json:
        print(strict_json(out))
    else:
        if stopped:
            print(f"time-limit: wall-clock limit of {cap:g} s reached at t = {run_.t:.6g} (before T = {T:.6g})")
        print(f"grid {'x'.join(map(str, g.shape))} ({run_.scheme}, {run_.steps} steps, {run_.seconds:.2f} s), "
              f"t = {run_.t:.6g}")
        print(f"mass = {out['mass']:.17g} (lost through the boundary {run_.lost:.3g}, initial truncation "
              f"{run_.truncated:.3g}, max conservation error {run_.mass_error:.3g})")
        print(f"mean = {out['mean']}")
        print(f"cov = {out['cov']}")
    sys.stdout.flush()
    return EXIT_TIME_LIMIT if stopped else 0
