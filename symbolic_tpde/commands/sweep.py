"""``tpde sweep``: phase diagram over two eigenvalues of ``A + Aᵀ`` for any Gaussian-preserving kind, any ``d``,
a skew part and any ``V``, one ``Σ₀`` sample shared by the grid; see
:mod:`symbolic_tpde.analysis.sweep`.  Local process pool by default, ``--scheduler ADDRESS`` for Dask.

Every argument is checked before any work (:func:`check_args`, one-line :class:`InputError` naming it): ``--n``
in ``[1, 200]``; ``--K`` in ``[1, 10000]``; at most :data:`MAX_TRAJECTORIES` trajectories in all
(``n² · K``, doubled by the symmetrised sample); ``--range`` finite, ``SMIN < SMAX`` (``<=`` when ``n = 1``);
``--skew``, ``--rest``, ``--theta``, ``--V`` finite with ``|x| <= MAX_ENTRY``; ``--kind`` a Gaussian-preserving
kind of the registry whose head the grid can build; ``--d`` in ``[2, 8]`` (the moment ODE is derived per
``d``; 8 is far below ``MAX_DIM``); ``--rest`` only for ``d > 2``; ``--V`` ``d`` or ``d²`` numbers; ``--T`` in
``(0, T_MAX]``; ``--seed >= 0``; ``--workers`` in ``[1, 1024]`` and not together with ``--scheduler``; the
output stem's directory writable (or creatable).  Progress (``point k/N``) goes to stderr, and ``STEM.npz`` /
``STEM.csv`` are rewritten as points complete (pending points: phase ``-1`` / ``pending``, ``done`` false), so
an interrupted sweep leaves a loadable partial map; a warning (stderr) when the grid misses ``s = 0`` (an even
``--n`` on a range around 0).  Bounded work: ``--max-seconds S`` per grid point (default
60 s, :data:`symbolic_tpde.analysis.sweep.DEFAULT_POINT_SECONDS`); a point that reaches it is phase
``time-limit``, the sweep goes on, the files are written and the exit status is 5.
"""

from __future__ import annotations

#: the largest number of trajectories (grid points x initial covariances) one sweep may integrate
MAX_TRAJECTORIES = 1_000_000
MAX_WORKERS = 1024
#: ``--max-seconds`` default: :data:`symbolic_tpde.analysis.sweep.DEFAULT_POINT_SECONDS` (spelled out so that
#: ``tpde --help`` does not import numpy; tests/test_caps.py checks they agree)
POINT_SECONDS = 60.0


def register(sub) -> None:
    p = sub.add_parser("sweep", help="phase diagram (collapse / low rank / diverge / blow-up) over a grid")
    p.add_argument("--n", type=int, default=9, help="grid size per axis (default 9)")
    p.add_argument("--range", type=float, nargs=2, default=(-1.0, 1.0), metavar=("SMIN", "SMAX"),
                   help="range of the eigenvalues s1, s2 of A + Aᵀ (default -1 1)")
    p.add_argument("--kind", default="softmax", help="attention kind of the registry (default softmax)")
    p.add_argument("--d", type=int, default=2, help="dimension (default 2)")
    p.add_argument("--skew", type=float, default=0.0, help="skew part: A - Aᵀ = 2·SKEW·N (default 0)")
    p.add_argument("--rest", type=float, default=None, help="the other d - 2 eigenvalues of A + Aᵀ (default -1; "
                   "only for d > 2)")
    p.add_argument("--theta", type=float, default=0.4, help="rotation of the eigenbasis (default 0.4)")
    p.add_argument("--V", type=float, nargs="+", default=None, metavar="V",
                   help="d numbers (V diagonal) or d*d numbers (row by row); default identity")
    p.add_argument("--no-symmetrise", action="store_true", help="do not close the Σ₀ sample under the swap")
    p.add_argument("--K", type=int, default=8, help="random initial covariances per grid point (default 8)")
    p.add_argument("--T", type=float, default=1e3, help="horizon (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=1, help="local processes (default 1)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler, e.g. tcp://127.0.0.1:8786")
    p.add_argument("--out", default="sweep", help="output stem: writes STEM.npz, STEM.csv, STEM.png")
    p.add_argument("--tokens", type=int, default=32, help="sphere kinds: tokens per cloud (default 32); --range "
                   "is then the range of beta, --n the number of betas, --K the clouds per beta")
    from .gaussian import add_max_seconds

    add_max_seconds(p, POINT_SECONDS, "each grid point")
    p.set_defaults(func=run)


def _writable_stem(out: str) -> None:
    """The stem's files can be created: a non-empty name, not a directory, in a writable (or creatable)
    directory (:func:`symbolic_tpde.inputs.checks.writable_output` for each of them)."""
    import os
    from pathlib import Path

    from ..errors import InputError
    from ..inputs.checks import writable_output

    if not out or out.endswith(os.sep) or os.path.basename(out) in ("", ".", ".."):
        raise InputError("out", f"must be a file stem such as results/sweep, got {out!r}")
    for suffix in (".npz", ".csv", ".meta.json", ".png"):      # the names the writers use (Path.with_suffix)
        writable_output(str(Path(out).with_suffix(suffix)), "out")


def check_args(args):
    """All ``tpde sweep`` arguments checked (module docstring); returns the :class:`SweepSpec`."""
    import math

    from ..analysis.sweep import SweepSpec, head_for
    from ..errors import InputError
    from ..registry import kinds
    from ..inputs.checks import MAX_ENTRY, sweep_axis
    from .gaussian import max_seconds

    if not 1 <= args.n <= 200:
        raise InputError("n", f"must be in [1, 200], got {args.n}")
    if not 1 <= args.K <= 10000:
        raise InputError("K", f"must be in [1, 10000], got {args.K}")
    total = args.n ** 2 * args.K * (1 if args.no_symmetrise else 2)
    if total > MAX_TRAJECTORIES:
        raise InputError("K", f"n² K{'' if args.no_symmetrise else ' · 2 (symmetrised)'} = {total} trajectories "
                         f"exceed the cap {MAX_TRAJECTORIES} (lower --n or --K)")
    if args.kind not in kinds.kind_names():
        raise InputError("kind", f"unknown kind {args.kind!r}; expected one of {list(kinds.kind_names())}")
    if not kinds.get(args.kind).preserves_gaussians:
        raise InputError("kind", f"{args.kind!r} does not preserve Gaussians: no moment ODE to sweep")
    if not 2 <= args.d <= 8:
        raise InputError("d", f"must be in [2, 8], got {args.d}")
    if args.rest is not None and args.d == 2:
        raise InputError("rest", "has no effect for d = 2 (there are no other eigenvalues): omit it or raise --d")
    rest = -1.0 if args.rest is None else args.rest
    V = tuple([1.0] * args.d) if args.V is None else tuple(args.V)
    if len(V) not in (args.d, args.d**2):
        raise InputError("V", f"expected d = {args.d} or d² = {args.d ** 2} numbers, got {len(V)}")
    named = [("V", x) for x in V] + [("skew", args.skew), ("rest", rest), ("theta", args.theta)]
    for name, x in named:
        if not (math.isfinite(x) and abs(x) <= MAX_ENTRY):
            raise InputError(name, f"must be a finite number with |x| <= {MAX_ENTRY:g}, got {x}")
    smin, smax, T = sweep_axis(args)
    if not 1 <= args.workers <= MAX_WORKERS:
        raise InputError("workers", f"must be in [1, {MAX_WORKERS}], got {args.workers}")
    if args.scheduler is not None:
        import importlib.util

        if args.workers != 1:
            raise InputError("workers", "a Dask --scheduler runs the grid on its own workers: omit --workers")
        if not args.scheduler or any(c.isspace() or not c.isprintable() for c in args.scheduler):
            raise InputError("scheduler", f"expected an address such as tcp://127.0.0.1:8786, got {args.scheduler!r}")
        if importlib.util.find_spec("dask") is None:
            raise InputError("scheduler", "needs dask.distributed, which is not installed")
    _writable_stem(args.out)
    cap = max_seconds(args)
    spec = SweepSpec(n=args.n, smin=smin, smax=smax, v=V, K=args.K, T=T, seed=args.seed, kind=args.kind,
                     d=args.d, skew=args.skew, rest=rest, theta=args.theta, symmetrise=not args.no_symmetrise,
                     max_seconds_point=cap)
    head_for(args.kind, spec.A(smin, smax), spec.V())   # the grid's heads can be built (InputError otherwise)
    return spec


def run(args) -> int:
    import sys

    from ..analysis.sweep import PHASES, run_sweep, save_sweep
    from .gaussian import EXIT_TIME_LIMIT

    import numpy as np

    from .sphere import is_sphere_kind, run_sweep as run_sphere_sweep

    if is_sphere_kind(args.kind):          # tokens on the sphere: phase diagram over (t, beta)
        return run_sphere_sweep(args, writable_stem=_writable_stem)
    spec = check_args(args)
    s = np.linspace(spec.smin, spec.smax, spec.n)
    if spec.smin < 0 < spec.smax and not np.any(s == 0.0):
        print(f"tpde sweep: warning: the grid of {spec.n} values on [{spec.smin:g}, {spec.smax:g}] misses s = 0, "
              "where the low-rank (rank-one) phase lives for V = I; use an odd --n on a symmetric range",
              file=sys.stderr)

    def progress(partial, k, total):
        # the files so far (pending points marked) after every completed chunk: an interrupted sweep leaves
        # a loadable partial map
        save_sweep(partial, args.out, png=False)
        print(f"tpde sweep: point {k}/{total}", file=sys.stderr, flush=True)

    res = run_sweep(spec, workers=args.workers, scheduler=args.scheduler, on_progress=progress)
    for p in save_sweep(res, args.out):
        print(p)
    counts = {PHASES[k]: int((res.phase == k).sum()) for k in range(len(PHASES)) if (res.phase == k).any()}
    print("phases:", counts)
    capped = int((res.counts[:, PHASES.index("time-limit")] > 0).sum())
    if capped:
        print(f"tpde sweep: time-limit: {capped} of {len(res.points)} grid points reached the per-point cap of "
              f"{spec.max_seconds_point:g} s (phase time-limit); raise --max-seconds", file=sys.stderr)
        return EXIT_TIME_LIMIT
    return 0
