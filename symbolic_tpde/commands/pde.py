"""``tpde pde``: solve the Transformer PDE on a grid (finite volumes, ℝ¹ and ℝ²; spectral on the circle) from the
scenario's initial law.

Prints (``--json``)::

    {"status": "ok", "t": .., "d": .., "cells": [..], "h": [..], "lo": [..], "hi": [..], "scheme": ..,
     "mass": Σm, "lost": mass that left the domain, "truncated": 1 - Σm₀ of the raw projection (initial mass
     outside the grid + cell quadrature error; refused above 1e-2, then normalised away: Σm₀ = 1),
     "frozen": mass in cells below 1e-15 (they carry no flux out; the CFL step is set where the mass is),
     "mass_error": max |Σm + lost - Σm₀| over the steps, "min_mass": most negative cell mass seen,
     "mean": [..], "cov": [[..]] (exact moments of the piecewise-constant density), "occupied": cells with 99 %,
     "steps", "rejected", "nfev", "grown", "seconds"}

A sphere scenario (``"geometry": "sphere"``) with ``d = 2`` runs the spectral circle solver
(:mod:`symbolic_tpde.numerics.grids.circle`; heads ``sphere_sa``/``sphere_usa`` with ``A``, ``V`` commuting with
rotations, norm ``post`` or ``ngpt``, init ``uniform_sphere`` or ``vmf``) on ``--grid M`` equispaced angles
(``M`` even) and prints (``--json``)::

    {"status": "ok", "geometry": "circle", "t": .., "points": M, "norm": .., "noise": σ, "truncated": dropped
     modes of the initial law / its peak, "resolution": top-third modes / mean, "mass": ∫ρ, "min_density": ..,
     "moments": [[Re, Im] of ∫ e^{ikθ} ρ, k = 1, 2, 3], "peaks": local maxima above 1/2π, "nfev", "steps",
     "seconds"}

(``--noise σ`` adds ``σ ∂²ρ``, the mean field of independent Brownian angles; the particle simulator has none.)
The initial law is its exact Fourier projection (mass 1, exact moments), refused when ``M`` points do not
resolve it (the message names the grid that does).  A density that goes negative or whose peaks outgrow the
points stops the run with status ``"under-resolved"`` (exit 6, ``detail`` says ``raise --grid to …``), never
ok and never blow-up.  ``--save``: ``times (k,)`` and ``rho (k, M)`` at ``--save-every``.

The solvers and their guarantees: :mod:`symbolic_tpde.numerics.grids.euclidean`, :mod:`symbolic_tpde.numerics.grids.circle`.  Exit status: 0 ok; 2 bad input (one line
naming the field; sinkhorn and masked attention refused with the reason; with ``--json`` also
``{"status": "error", "field", "problem"}`` on stdout); 3 blow-up (with its time); 5 wall-clock cap
(``status`` ``time-limit``) or work budget (``status`` ``step-budget``, ℝᵈ: 2e10 cell-pair evaluations, or a
pace that projects over 100 times that), with
the time reached, no ``--save`` file; 6 under-resolved (``status`` ``under-resolved``); docs/cli_statuses.md.
"""

from __future__ import annotations

import sys

EXIT_BLOWUP = 3
#: the grid does not resolve the solution (a density below zero, peaks sharper than the points, a collapsed
#: step): status "under-resolved", never ok and never blow-up (docs/cli_statuses.md)
EXIT_UNDER_RESOLVED = 6


def register(sub) -> None:
    p = sub.add_parser("pde", help="solve the PDE on a grid (finite volumes, d = 1, 2) and print its moments",
                       description="Finite-volume solver of d_t mu + div(mu Gamma_mu) = 0 from the scenario's "
                                   "initial law (init block or N(alpha0, Sigma0)); d = 1 or 2.  Exit status: 0 ok, "
                                   "2 bad input, 3 blow-up, 5 wall-clock cap or work budget reached, "
                                   "6 under-resolved (raise --grid).")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--grid", type=int, required=True, metavar="N", help="cells per axis of the initial box (>= 4)")
    p.add_argument("--scheme", default=None, choices=("muscl", "upwind"),
                   help="muscl (default): MC-limited linear reconstruction (order 2); upwind: order 1")
    p.add_argument("--method", default=None, choices=("ssprk2", "ssprk3"), help="SSP Runge-Kutta (default 2)")
    p.add_argument("--cfl", type=float, default=None, help="fraction of the positivity step bound (default 0.8)")
    p.add_argument("--pad", type=float, default=None, help="initial box: the data's support box plus this "
                   "fraction of its width on each side (default 0.25)")
    p.add_argument("--noise", type=float, default=None, metavar="SIGMA",
                   help="circle only: diffusion sigma d^2 rho / d theta^2 (default 0)")
    p.add_argument("--T", type=float, default=None, help="horizon (default: the scenario's T)")
    p.add_argument("--save", metavar="FILE.npz", default=None,
                   help="save frames: arrays times (k,), and per frame masses_<i>, lo_<i>, plus h")
    p.add_argument("--save-every", type=float, default=0.0, metavar="DT", help="with --save: time between frames (0, the default: the first and last only)")
    from .gaussian import DEFAULT_MAX_SECONDS, add_max_seconds

    add_max_seconds(p, DEFAULT_MAX_SECONDS, "the solve")
    p.add_argument("--json", action="store_true", help="print JSON (default: a short text summary)")
    p.set_defaults(func=run)


FV_ONLY = ("scheme", "method", "cfl", "pad")


def run(args) -> int:
    """With ``--json`` every exit prints JSON on stdout: a refusal as ``{"status": "error", "field", "problem"}``
    (and its one line on stderr, exit 2)."""
    from ..errors import InputError
    from ..inputs.checks import strict_json

    try:
        return _run(args)
    except InputError as exc:
        if args.json:
            print(strict_json({"status": "error", "field": exc.field, "problem": exc.problem}))
            sys.stdout.flush()
        raise


def _run(args) -> int:
    from ..errors import InputError
    from .sphere import is_sphere_file
    from ..inputs.checks import writable_output

    if args.save is not None:                   # before any work (and --save '' refused, not ignored)
        writable_output(args.save, "save")
    if is_sphere_file(args.scenario):
        for name in FV_ONLY:
            if getattr(args, name) is not None:
                raise InputError(name, "not used by the spectral circle solver (sphere scenarios)")
        return run_circle(args)
    if args.noise is not None:
        raise InputError("noise", "only for the circle solver (a sphere scenario with d = 2)")
    args.scheme = args.scheme or "muscl"
    args.method = args.method or "ssprk2"
    args.cfl = 0.8 if args.cfl is None else args.cfl
    args.pad = 0.25 if args.pad is None else args.pad

    import numpy as np

    from ..errors import BlowupError
    from ..numerics.grids.euclidean import grid_moments, solve_grid
    from ..inputs.scenario import InitSpec, load_scenario
    from ..inputs.checks import positive_number, strict_json
    from .gaussian import EXIT_TIME_LIMIT, max_seconds

    cap = max_seconds(args)
    positive_number(args.pad, "pad", allow_zero=True)
    scn = load_scenario(args.scenario, need_T=args.T is None, gaussian_data=False)
    if scn.d > 2:
        raise InputError("d", f"the grid solver covers d = 1 and d = 2, got d = {scn.d}")
    T = _horizon(args, scn.T)
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
           "truncated": run_.truncated, "frozen": run_.frozen, "mass_error": run_.mass_error,
           "min_mass": run_.min_mass,
           "mean": mean.tolist(), "cov": cov.tolist(), "occupied": run_.occupied, "steps": run_.steps,
           "rejected": run_.rejected, "nfev": run_.nfev, "grown": run_.grown, "seconds": run_.seconds}
    from ..numerics.grids.euclidean import POS_TOL

    broken = [name for name, bad in (
        ("non-finite value", not all(np.all(np.isfinite(np.asarray(v, float))) for v in (mean, cov, run_.masses))),
        (f"negative cell mass {run_.min_mass:.3g}", run_.min_mass < -POS_TOL),
        (f"mass error {run_.mass_error:.3g}", not run_.mass_error <= 1e-9)) if bad]
    if broken:
        out.update(status="under-resolved", detail=f"the grid run violates an invariant at t = {run_.t:.6g}: "
                   f"{'; '.join(broken)}; raise --grid")
        print(strict_json(out) if args.json else out["detail"])
        return EXIT_UNDER_RESOLVED
    stopped = run_.status in ("time-limit", "step-budget")
    if run_.status == "step-budget":
        out["detail"] = (f"{run_.detail} ({run_.nfev} evaluations of {int(np.prod(g.shape))} cells) at t = "
                         f"{run_.t:.6g} (before T = {T:.6g}): use fewer cells, a larger --cfl "
                         "or a shorter T")
    if args.save and not stopped:
        from .particles import _save_atomic_arrays

        arrays = {"times": np.array([f[0] for f in run_.frames]), "h": g.h}
        for i, (_, m, lo) in enumerate(run_.frames):
            arrays[f"masses_{i}"], arrays[f"lo_{i}"] = m, lo
        _save_atomic_arrays(args.save, arrays)
    if args.json:
        print(strict_json(out))
    else:
        if run_.status == "step-budget":
            print(f"step-budget: {out['detail']}")
        elif stopped:
            print(f"time-limit: wall-clock limit of {cap:g} s reached at t = {run_.t:.6g} (before T = {T:.6g})")
        print(f"grid {'x'.join(map(str, g.shape))} ({run_.scheme}, {run_.steps} steps, {run_.seconds:.2f} s), "
              f"t = {run_.t:.6g}")
        print(f"mass = {out['mass']:.17g} (lost through the boundary {run_.lost:.3g}, initial truncation "
              f"{run_.truncated:.3g}, max conservation error {run_.mass_error:.3g})")
        print(f"mean = {out['mean']}")
        print(f"cov = {out['cov']}")
    sys.stdout.flush()
    return EXIT_TIME_LIMIT if stopped else 0


def _horizon(args, scn_T):
    import math

    from ..errors import InputError
    from ..inputs.checks import positive_number

    positive_number(args.save_every, "save-every", allow_zero=True)
    if args.save_every and not args.save:
        raise InputError("save-every", "only meaningful with --save")
    T = scn_T if args.T is None else args.T
    if not (math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be finite and >= 0, got {T}")
    return T


def run_circle(args) -> int:
    """``tpde pde`` on a sphere scenario with d = 2: the spectral circle solver (module docstring)."""
    import math
    import time

    import numpy as np

    from ..errors import BlowupError, InputError
    from ..numerics.grids.circle import evaluation_budget, project_initial, resolution, solve_circle, trig_moments
    from ..numerics.particles.sphere import load_sphere_scenario
    from ..inputs.checks import strict_json
    from .gaussian import EXIT_TIME_LIMIT, max_seconds

    cap = max_seconds(args)
    scn = load_sphere_scenario(args.scenario)
    if scn.d != 2:
        raise InputError("d", f"the grid solver on the sphere covers the circle (d = 2), got d = {scn.d}")
    T = _horizon(args, scn.T)
    M = args.grid
    if M < 8 or M % 2 or M > 1 << 16:
        raise InputError("grid", f"must be an even number of points in [8, 65536] on the circle, got {M}")
    noise = 0.0 if args.noise is None else args.noise
    rho0, truncated = project_initial(scn.init, M)
    k = max(2, math.ceil(T / args.save_every)) if args.save_every else 2
    if k > 10_001:
        raise InputError("save-every", f"{k} frames requested (at most 10001)")
    t_eval = np.linspace(0.0, T, k)
    t0 = time.perf_counter()
    try:
        sol = solve_circle(rho0, scn.weights, T, norm=scn.norm, alpha=scn.alpha, noise=noise, t_eval=t_eval,
                           max_seconds=cap)
    except BlowupError as exc:       # nGPT where the attention vector vanishes: a property of the dynamics
        out = {"status": "blowup", "geometry": "circle", "t": exc.t, "where": exc.where, "detail": exc.detail}
        print(strict_json(out) if args.json else f"blowup: {exc}")
        return EXIT_BLOWUP
    seconds = time.perf_counter() - t0
    status = str(sol.status)
    rho = sol.y[-1] if sol.y_end is None or status == "ok" else sol.y_end
    t_end = float(sol.t[-1]) if status == "ok" else float(sol.t_end)
    mass = float(rho.sum() * 2 * math.pi / M)
    R = resolution(rho)
    mom = trig_moments(rho, 3)
    peaks = (rho > np.roll(rho, 1)) & (rho >= np.roll(rho, -1)) & (rho > 1 / (2 * math.pi))
    # the invariants a result must satisfy: mass 1, a density >= 0 (to NEGATIVE_TOL), |E e^{ikθ}| <= 1, resolved
    # peaks, finite values; a state violating one is never reported as ok
    from ..numerics.grids.circle import NEGATIVE_TOL, RESOLUTION_TOL

    broken = []
    if not np.all(np.isfinite(rho)):
        broken.append("non-finite density")
    else:
        if float(rho.min()) < -NEGATIVE_TOL / (2 * math.pi):
            broken.append(f"negative density (min {float(rho.min()):.3g})")
        if R > RESOLUTION_TOL:
            broken.append(f"peaks not resolved (top-third modes {R:.3g} > {RESOLUTION_TOL:g})")
        if abs(mass - 1) > 1e-9 or float(np.max(np.abs(mom))) > 1 + 1e-9:
            broken.append(f"mass {mass:.6g}, max |E e^(ik theta)| {float(np.max(np.abs(mom))):.6g}")
    if status == "stalled" and sol.nfev >= evaluation_budget(M) and not broken:
        # the evaluation budget derived from M ran out on a resolved, valid state: a work budget, not the grid
        # failing (e.g. --noise: explicit steps below 3.3 / (sigma (M/2)^2), the diffusion's stiffness)
        status = "step-budget"
    elif status not in ("ok", "time-limit") or broken:
        # Post-LN and nGPT on the circle have no finite-time blow-up in a resolved density: an event, a stalled
        # or a non-finite step here is the grid failing to follow the density (clusters sharper than its points)
        status = "under-resolved"
    need = min(4 * M, 1 << 16) if M < 1 << 16 else None
    out = {"status": status, "geometry": "circle", "t": t_end, "points": M, "norm": scn.norm,
           "noise": noise, "truncated": truncated, "resolution": R if math.isfinite(R) else None,
           "mass": mass if math.isfinite(mass) else None,
           "min_density": float(rho.min()) if np.all(np.isfinite(rho)) else None,
           "moments": [[float(c.real), float(c.imag)] for c in mom] if np.all(np.isfinite(mom)) else None,
           "peaks": int(peaks.sum()), "nfev": sol.nfev, "steps": sol.n_steps, "seconds": seconds}
    if status == "under-resolved":
        why = "; ".join(broken) or (sol.message or status)
        out["detail"] = (f"under-resolved at t = {t_end:.6g} (before T = {T:.6g}) with {M} points: {why}; "
                         + (f"raise --grid to {need} or more" if need else "beyond the solver's 65536 points"))
        out["grid_needed"] = need
        print(strict_json(out) if args.json else out["detail"])
        sys.stdout.flush()
        return EXIT_UNDER_RESOLVED
    stopped = status in ("time-limit", "step-budget")
    if status == "step-budget":
        out["detail"] = (f"the evaluation budget max(20000, 2e8 / (M log2 M)) = {evaluation_budget(M)} of {M} "
                         f"points ran out at t = {t_end:.6g} (before T = {T:.6g}) on a resolved state"
                         + (f"; with --noise {noise:g} the explicit steps are bounded by the diffusion's "
                            f"stiffness, 3.3 / (sigma (M/2)^2) = {3.3 / (noise * (M / 2) ** 2):.3g}" if noise else "")
                         + "; use fewer points, less noise or a shorter T")
    if args.save and not stopped:
        from .particles import _save_atomic_arrays

        _save_atomic_arrays(args.save, {"times": sol.t, "rho": sol.y})
    if args.json:
        print(strict_json(out))
    else:
        if status == "step-budget":
            print(f"step-budget: {out['detail']}")
        elif stopped:
            print(f"time-limit: wall-clock limit of {cap:g} s reached at t = {out['t']:.6g} (before T = {T:.6g})")
        print(f"circle, {M} points (spectral, {scn.norm}, noise {noise:g}; {sol.n_steps} steps, {seconds:.2f} s), "
              f"t = {out['t']:.6g}")
        print(f"mass = {out['mass']:.17g}, min density = {out['min_density']:.6g}, peaks above 1/2pi: {out['peaks']}")
        print("moments E e^{ik theta}, k = 1..3: " + ", ".join(f"{c:.6g}" for c in mom))
    sys.stdout.flush()
    return EXIT_TIME_LIMIT if stopped else 0
