"""``tpde particles``: sample n tokens from the scenario's initial law (N(alpha0, Sigma0), or its ``init`` block),
evolve them to T, print moments.

Prints (``--json``)::

    {"status": "ok", "n": .., "t": .., "mean": [..], "cov": [[..]], "cov_normalisation": "1/n",
     "method": .., "steps": .., "nfev": .., "dtype": .., "seed": .., "seconds": ..}

``cov`` is the covariance of the empirical measure (``1/n``).  Exit status: 0 success; 2 bad input (one-line
message naming the field); 3 blow-up (the state left the finite floats: ``{"status": "blowup", "t": last
finite time, "where": .., "detail": ..}``); 4 a Sinkhorn head did not converge (``"status": "no_convergence"``);
5 the wall-clock cap ``--max-seconds`` (default 600 s, :class:`symbolic_tpde.numerics.ode.solve.Deadline`, checked
once per step) stopped the run before ``T``: ``{"status": "time-limit", "t": time reached, "mean", "cov": of the
cloud at t, ...}``, no ``--save`` file is written (the trajectory is incomplete).
"""

from __future__ import annotations

import sys

EXIT_BLOWUP = 3
EXIT_NO_CONVERGENCE = 4
#: the token cloud, its Runge-Kutta stages and the field's row blocks: a few dozen copies of ``n × d``
MAX_MEMORY = 4 * 2 ** 30
MAX_STEPS = 1_000_000
#: about an hour of the fused kernel on one core of this kind of machine (~3e9 pair evaluations per second)
MAX_PAIR_WORK = 1e13


def register(sub) -> None:
    p = sub.add_parser(
        "particles", help="simulate tokens as interacting particles and print their moments",
        description="Sample N tokens from the scenario's initial law (N(alpha0, Sigma0) or its init block) with numpy.random.default_rng(SEED), "
                    "evolve them to T and print the empirical mean and covariance (1/n).  Exit status: 0 ok, "
                    f"2 bad input, {EXIT_BLOWUP} blow-up (reported with its time), {EXIT_NO_CONVERGENCE} Sinkhorn "
                    "non-convergence, 5 wall-clock cap reached (status time-limit with the time reached).")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--n", type=int, required=True, help="number of tokens (>= 2)")
    p.add_argument("--seed", type=int, required=True, help="seed of numpy.random.default_rng (>= 0)")
    p.add_argument("--steps", type=int, default=None,
                   help="fixed RK4 steps over [0, T] (default: error-controlled Dormand-Prince 5(4) at rtol "
                        "1e-3 n^-1/2, a thousandth of the Monte-Carlo error); adaptive: nominal save grid")
    p.add_argument("--method", default="rk4", choices=("rk4", "dopri5", "euler", "ivp", "adaptive"),
                   help="integrator: rk4 (default) fixed RK4 steps with --steps, error-controlled Dormand-Prince "
                        "5(4) (= dopri5) without; euler; ivp (adaptive is its old name): the general integrator "
                        "with --rtol/--atol")
    p.add_argument("--dtype", default="float64", choices=("float32", "float64"), help="working precision")
    p.add_argument("--T", type=float, default=None, help="horizon (default: the scenario's T)")
    p.add_argument("--save", metavar="FILE.npz", default=None,
                   help="save the trajectory (arrays times (k,), X (k, n, d)) to this .npz file")
    p.add_argument("--save-every", type=int, default=None, metavar="K",
                   help="with --save: keep every K-th step (default: about 100 frames)")
    p.add_argument("--rtol", type=float, default=1e-7, help="--method ivp only: relative tolerance (default 1e-7)")
    p.add_argument("--atol", type=float, default=1e-9, help="ivp: absolute tolerance (default 1e-9)")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                   help="progress bar on stderr (auto: runs expected to exceed ~2 s)")
    from .gaussian import DEFAULT_MAX_SECONDS, add_max_seconds

    add_max_seconds(p, DEFAULT_MAX_SECONDS, "the simulation")
    p.add_argument("--json", action="store_true", help="print JSON (default: a short text summary)")
    p.set_defaults(func=run)


def _emit(out: dict, as_json: bool) -> None:
    from ..inputs.checks import strict_json

    if as_json:
        print(strict_json(out))
    elif out["status"] in ("ok", "time-limit"):
        if out["status"] == "time-limit":
            print(f"time-limit: {out['detail']}")
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
    from ..numerics.measures.estimators import moments
    from ..numerics.particles.simulate import simulate
    from ..inputs.scenario import load_scenario

    from ..inputs.checks import positive_number

    from .sphere import is_sphere_file, run_particles
    from ..inputs.checks import writable_output

    if args.save is not None:                   # before any work (and --save '' refused, not ignored)
        writable_output(args.save, "save")
    if is_sphere_file(args.scenario):           # "geometry": "sphere": tokens on the sphere (commands/sphere.py)
        return run_particles(args, save=_save_atomic, exit_blowup=EXIT_BLOWUP, max_pair_work=MAX_PAIR_WORK)
    if args.n < 2:
        raise InputError("n", f"must be >= 2 (a covariance needs two tokens), got {args.n}")
    if args.seed < 0:
        raise InputError("seed", f"must be >= 0, got {args.seed}")
    if args.save_every is not None and not args.save:
        raise InputError("save-every", "only meaningful with --save")
    positive_number(args.rtol, "rtol")
    positive_number(args.atol, "atol")
    from .gaussian import EXIT_TIME_LIMIT, max_seconds

    cap = max_seconds(args)
    scn = load_scenario(args.scenario, need_T=args.T is None, gaussian_data=False)
    T = scn.T if args.T is None else args.T
    if not (math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be finite and >= 0, got {T}")
    steps = args.steps
    if steps is not None and steps < 1:
        raise InputError("steps", f"must be a positive integer, got {steps}")
    nominal = steps if steps is not None else max(10, math.ceil(100 * T))
    if args.method not in ("ivp", "adaptive") and nominal > MAX_STEPS:
        raise InputError("steps", f"{nominal} fixed steps exceed the cap {MAX_STEPS} (lower --T or --steps, or "
                         "use --method adaptive)")
    save_every = None
    frames = 0
    if args.save:
        save_every = args.save_every if args.save_every is not None else max(1, nominal // 100)
        if save_every < 1:
            raise InputError("save-every", f"must be a positive integer, got {save_every}")
        frames = nominal // save_every + 2
    itemsize = np.dtype(args.dtype).itemsize
    need = args.n * scn.d * itemsize * (40 + frames)
    if need > MAX_MEMORY:
        raise InputError("n", f"{args.n} tokens need about {need / 2 ** 30:.3g} GiB, above the memory bound "
                         f"{MAX_MEMORY / 2 ** 30:.3g} GiB (use fewer tokens, or fewer saved frames)")
    stages = {"euler": 1, "rk4": 4}.get(args.method, 6)
    heads = len(scn.weights(0.0).heads)
    work = float(nominal) * stages * heads * float(args.n) ** 2
    if args.method not in ("ivp", "adaptive") and work > MAX_PAIR_WORK:
        raise InputError("n", f"{args.n} tokens over {nominal} steps need about {work:.2g} pair evaluations, "
                         f"above the work cap {MAX_PAIR_WORK:.0e} (use fewer tokens or steps)")
    rng = np.random.default_rng(args.seed)
    if scn.init is None:
        X0 = rng.multivariate_normal(scn.alpha0, scn.Sigma0, size=args.n, method="cholesky")
    else:
        from ..numerics.measures.laws import sample

        X0 = sample(scn.init, args.n, rng)
    progress = {"auto": None, "always": True, "never": False}[args.progress]
    t0 = time.perf_counter()
    try:
        method = {"adaptive": "ivp"}.get(args.method, "dopri5" if args.method == "rk4" and steps is None
                                         else args.method)
        run_ = simulate(X0, scn.schedule, T, steps=steps, method=method, dtype=np.dtype(args.dtype),
                        save_every=save_every, progress=progress, max_seconds=cap,
                        **(dict(rtol=args.rtol, atol=args.atol) if method == "ivp" else {}))
    except BlowupError as exc:
        _emit({"status": "blowup", "n": args.n, "t": exc.t, "where": exc.where, "detail": exc.detail}, args.json)
        return EXIT_BLOWUP
    except ConvergenceError as exc:
        _emit({"status": "no_convergence", "n": args.n, "t": None, "where": exc.where,
               "detail": exc.detail}, args.json)
        return EXIT_NO_CONVERGENCE
    seconds = time.perf_counter() - t0
    with np.errstate(over="ignore", invalid="ignore"):   # a finite cloud of huge tokens: checked just below
        mean, cov = moments(run_.X)
    if not (np.isfinite(mean).all() and np.isfinite(cov).all()):
        _emit({"status": "blowup", "n": args.n, "t": run_.t, "where": "moments",
               "detail": "the mean or covariance of the final cloud is not finite"}, args.json)
        return EXIT_BLOWUP
    stopped = run_.status == "time-limit"
    if args.save and not stopped:
        _save_atomic(args.save, run_.times, run_.trajectory)
    extra = {"detail": f"wall-clock limit of {cap:g} s reached at t = {run_.t:.6g} (before T = {T:.6g}); raise "
                       "--max-seconds to finish"} if stopped else {}
    _emit({"status": run_.status, **extra, "n": args.n, "t": run_.t, "mean": mean.tolist(), "cov": cov.tolist(),
           "cov_normalisation": "1/n", "method": run_.method, "steps": run_.steps, "nfev": run_.nfev,
           "error_estimate": getattr(run_, "error_estimate", None), "tolerance": getattr(run_, "tolerance", None),
           "dtype": run_.dtype, "seed": args.seed, "seconds": seconds}, args.json)
    sys.stdout.flush()
    return EXIT_TIME_LIMIT if stopped else 0


def _save_atomic(path: str, times, X) -> None:
    """Write ``times``, ``X`` as ``.npz`` to exactly ``path`` (:func:`_save_atomic_arrays`)."""
    _save_atomic_arrays(path, {"times": times, "X": X})


def _save_atomic_arrays(path: str, arrays: dict) -> None:
    """Write ``arrays`` as ``.npz`` to exactly ``path`` (its directory created, as ``writable_output`` accepted a
    creatable one before the work): a regular file through a temporary file in the same directory and
    ``os.replace`` (an interrupted or failed write leaves nothing behind), anything else
    (a device such as ``/dev/full``) directly, checking every write."""
    import io
    import os

    import numpy as np

    from ..errors import InputError

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    try:
        if os.path.exists(path) and not os.path.isfile(path):
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            return
        from pathlib import Path

        from ..codegen.cache import atomic_write

        target = Path(os.path.abspath(path))
        target.parent.mkdir(parents=True, exist_ok=True)   # a creatable directory passed writable_output first
        atomic_write(target, data)
    except OSError as exc:
        raise InputError("save", f"cannot write {path!r}: {exc.strerror or exc}") from None
