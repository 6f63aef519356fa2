"""``tpde particles``: sample n tokens from the scenario's N(alpha0, Sigma0), evolve them to T, print moments.

Prints (``--json``)::

    {"status": "ok", "n": .., "t": .., "mean": [..], "cov": [[..]], "cov_normalisation": "1/n",
     "method": .., "steps": .., "nfev": .., "dtype": .., "seed": .., "seconds": ..}

``cov`` is the covariance of the empirical measure (``1/n``).  Exit status: 0 success; 2 bad input (one-line
message naming the field); 3 blow-up (the state left the finite floats: ``{"status": "blowup", "t": last
finite time, "where": .., "detail": ..}``); 4 a Sinkhorn head did not converge (``"status": "no_convergence"``).
"""

from __future__ import annotations

import json
import sys

EXIT_BLOWUP = 3
EXIT_NO_CONVERGENCE = 4


def register(sub) -> None:
    p = sub.add_parser(
        "particles", help="simulate tokens as interacting particles and print their moments",
        description="Sample N tokens from N(alpha0, Sigma0) of the scenario with numpy.random.default_rng(SEED), "
                    "evolve them to T and print the empirical mean and covariance (1/n).  Exit status: 0 ok, "
                    f"2 bad input, {EXIT_BLOWUP} blow-up (reported with its time), {EXIT_NO_CONVERGENCE} Sinkhorn "
                    "non-convergence.")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--n", type=int, required=True, help="number of tokens (>= 2)")
    p.add_argument("--seed", type=int, required=True, help="seed of numpy.random.default_rng (>= 0)")
    p.add_argument("--steps", type=int, default=None,
                   help="fixed steps over [0, T] (default max(10, ceil(100 T))); adaptive: nominal save grid")
    p.add_argument("--method", default="rk4", choices=("rk4", "euler", "adaptive"), help="integrator (default rk4)")
    p.add_argument("--dtype", default="float64", choices=("float32", "float64"), help="working precision")
    p.add_argument("--T", type=float, default=None, help="horizon (default: the scenario's T)")
    p.add_argument("--save", metavar="FILE.npz", default=None,
                   help="save the trajectory (arrays times (k,), X (k, n, d)) to this .npz file")
    p.add_argument("--save-every", type=int, default=None, metavar="K",
                   help="with --save: keep every K-th step (default: about 100 frames)")
    p.add_argument("--rtol", type=float, default=1e-7, help="adaptive: relative tolerance (default 1e-7)")
    p.add_argument("--atol", type=float, default=1e-9, help="adaptive: absolute tolerance (default 1e-9)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr (auto: runs expected to exceed ~2 s)")
    p.add_argument("--json", action="store_true", help="print JSON (default: a short text summary)")
    p.set_defaults(func=run)


def _emit(out: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(out))
    elif out["status"] == "ok":
        print(f"n = {out['n']}, t = {out['t']:.6g} ({out['method']}, {out['steps']} steps, {out['dtype']}, "
              f"{out['seconds']:.2f} s)")
        print(f"mean = {out['mean']}")
        print(f"cov (1/n) = {out['cov']}")
    else:
        when = "" if out["t"] is None else f" at t = {out['t']:.6g}"
        print(f"{out['status']}: {out['where']}{when}: {out['detail']}")


def run(args) -> int:
    import math
    import time

    import numpy as np

    from ..errors import BlowupError, ConvergenceError, InputError
    from ..numerics.estimators import moments
    from ..numerics.integrate import simulate
    from ..scenario import load_scenario

    if args.n < 2:
        raise InputError("n", f"must be >= 2 (a covariance needs two tokens), got {args.n}")
    if args.seed < 0:
        raise InputError("seed", f"must be >= 0, got {args.seed}")
    if args.save_every is not None and not args.save:
        raise InputError("save-every", "only meaningful with --save")
    scn = load_scenario(args.scenario, need_T=args.T is None)
    T = scn.T if args.T is None else args.T
    if not (math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be finite and >= 0, got {T}")
    steps = args.steps
    if steps is not None and steps < 1:
        raise InputError("steps", f"must be a positive integer, got {steps}")
    save_every = None
    if args.save:
        nominal = steps if steps is not None else max(10, math.ceil(100 * T))
        save_every = args.save_every if args.save_every is not None else max(1, nominal // 100)
        if save_every < 1:
            raise InputError("save-every", f"must be a positive integer, got {save_every}")
    rng = np.random.default_rng(args.seed)
    X0 = rng.multivariate_normal(scn.alpha0, scn.Sigma0, size=args.n, method="cholesky")
    progress = {"auto": None, "always": True, "never": False}[args.progress]
    t0 = time.perf_counter()
    try:
        run_ = simulate(X0, scn.schedule, T, steps=steps, method=args.method, dtype=np.dtype(args.dtype),
                        save_every=save_every, progress=progress, rtol=args.rtol, atol=args.atol)
    except BlowupError as exc:
        _emit({"status": "blowup", "n": args.n, "t": exc.t, "where": exc.where, "detail": exc.detail}, args.json)
        return EXIT_BLOWUP
    except ConvergenceError as exc:
        _emit({"status": "no_convergence", "n": args.n, "t": None, "where": exc.where,
               "detail": exc.detail}, args.json)
        return EXIT_NO_CONVERGENCE
    seconds = time.perf_counter() - t0
    if args.save:
        try:
            np.savez(args.save, times=run_.times, X=run_.trajectory)
        except OSError as exc:
            raise InputError("save", f"cannot write {args.save!r}: {exc.strerror or exc}") from None
    mean, cov = moments(run_.X)
    _emit({"status": "ok", "n": args.n, "t": run_.t, "mean": mean.tolist(), "cov": cov.tolist(),
           "cov_normalisation": "1/n", "method": run_.method, "steps": run_.steps, "nfev": run_.nfev,
           "dtype": run_.dtype, "seed": args.seed, "seconds": seconds}, args.json)
    sys.stdout.flush()
    return 0
