"""``tpde plot --scenario FILE --out PNG [--n N] [--seed S] [--T T] [--panels K] [--dims I J]``.

The scenario's token cloud (``n`` tokens from ``N(alpha0, Sigma0)``, RK4) beside the Gaussian moment ODE's
2-sd ellipses, the ODE started from the cloud's sample mean and covariance, at ``K`` equally spaced times on
``[0, T]`` (shortened to ``0.9 T*`` when the ODE blows up first); coordinates ``I, J`` for ``d > 2`` (the
marginal of a Gaussian is the sub-block).  Kinds that do not preserve Gaussians show the cloud alone.  See
:func:`symbolic_tpde.experiments.figures_extra.make_scenario_figure`.  Any extension matplotlib writes (``.png``,
``.pdf``, ``.svg``).
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("plot", help="token cloud beside the Gaussian ODE's ellipses for a scenario")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--out", required=True, metavar="FILE", help="output image (.png, .pdf, .svg)")
    p.add_argument("--n", type=int, default=2000, help="tokens (default 2000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--T", type=float, default=None, help="horizon (default: the scenario's T)")
    p.add_argument("--panels", type=int, default=4, help="number of times shown (default 4)")
    p.add_argument("--dims", type=int, nargs=2, default=(0, 1), metavar=("I", "J"), help="coordinates shown")
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    from ..experiments.figures_extra import make_scenario_figure
    from ..errors import InputError
    from ..inputs.scenario import load_scenario

    from ..inputs.checks import writable_output

    writable_output(args.out, "out", suffixes=(".png", ".pdf", ".svg"))     # before the work
    if args.seed < 0:
        raise InputError("seed", f"must be >= 0, got {args.seed}")
    if args.n < 2 or args.n > 10**6:
        raise InputError("n", f"must be in [2, 1e6], got {args.n}")
    if not 2 <= args.panels <= 12:
        raise InputError("panels", f"must be in [2, 12], got {args.panels}")
    scn = load_scenario(args.scenario, need_T=args.T is None)
    T = scn.T if args.T is None else args.T
    if not (math.isfinite(T) and T > 0):
        raise InputError("T", f"must be finite and > 0, got {T}")
    if len(set(args.dims)) != 2 or not all(0 <= i < scn.d for i in args.dims):
        raise InputError("dims", f"two distinct coordinates in [0, {scn.d - 1}], got {list(args.dims)}")
    from pathlib import Path

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)     # a creatable directory passed the check
    print(make_scenario_figure(scn, args.out, n=args.n, seed=args.seed, T=T, panels=args.panels,
                               dims=tuple(args.dims), name=args.scenario))
    return 0
