"""``tpde sweep``: phase diagram over two eigenvalues of ``A + Aᵀ`` for any Gaussian-preserving kind, any ``d``,
a skew part and any ``V``, one ``Σ₀`` sample shared by the grid; see
:mod:`symbolic_tpde.analysis.sweep`.  Local process pool by default, ``--scheduler ADDRESS`` for Dask."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("sweep", help="phase diagram (collapse / low rank / diverge / blow-up) over a grid")
    p.add_argument("--n", type=int, default=9, help="grid size per axis (default 9)")
    p.add_argument("--range", type=float, nargs=2, default=(-1.0, 1.0), metavar=("SMIN", "SMAX"),
                   help="range of the eigenvalues s1, s2 of A + Aᵀ (default -1 1)")
    p.add_argument("--kind", default="softmax", help="attention kind of the registry (default softmax)")
    p.add_argument("--d", type=int, default=2, help="dimension (default 2)")
    p.add_argument("--skew", type=float, default=0.0, help="skew part: A - Aᵀ = 2·SKEW·N (default 0)")
    p.add_argument("--rest", type=float, default=-1.0, help="the other d - 2 eigenvalues of A + Aᵀ (default -1)")
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
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    from ..analysis.sweep import PHASES, SweepSpec, run_sweep, save_sweep
    from ..errors import InputError

    if not 1 <= args.n <= 200:
        raise InputError("n", f"must be in [1, 200], got {args.n}")
    if not 1 <= args.K <= 10000:
        raise InputError("K", f"must be in [1, 10000], got {args.K}")
    if not (math.isfinite(args.T) and args.T > 0):
        raise InputError("T", f"must be finite and > 0, got {args.T}")
    from ..spec import kinds

    if args.kind not in kinds.kind_names():
        raise InputError("kind", f"unknown kind {args.kind!r}; expected one of {list(kinds.kind_names())}")
    if not kinds.get(args.kind).preserves_gaussians:
        raise InputError("kind", f"{args.kind!r} does not preserve Gaussians: no moment ODE to sweep")
    if not 2 <= args.d <= 8:
        raise InputError("d", f"must be in [2, 8], got {args.d}")
    V = tuple([1.0] * args.d) if args.V is None else tuple(args.V)
    if len(V) not in (args.d, args.d**2):
        raise InputError("V", f"expected {args.d} or {args.d ** 2} numbers, got {len(V)}")
    if not all(math.isfinite(x) for x in (*args.range, *V, args.skew, args.rest, args.theta)) \
            or args.range[0] > args.range[1]:
        raise InputError("range", "must be finite numbers SMIN <= SMAX (and V finite)")
    if args.workers < 1:
        raise InputError("workers", f"must be >= 1, got {args.workers}")
    spec = SweepSpec(n=args.n, smin=args.range[0], smax=args.range[1], v=V, K=args.K, T=args.T,
                     seed=args.seed, kind=args.kind, d=args.d, skew=args.skew, rest=args.rest, theta=args.theta,
                     symmetrise=not args.no_symmetrise)
    res = run_sweep(spec, workers=args.workers, scheduler=args.scheduler)
    for p in save_sweep(res, args.out):
        print(p)
    counts = {PHASES[k]: int((res.phase == k).sum()) for k in range(len(PHASES)) if (res.phase == k).any()}
    print("phases:", counts)
    return 0
