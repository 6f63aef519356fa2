"""``tpde figures [--out DIR] [--only NAME ...]``: make every covariance-trajectory figure family, the rank
histograms and the particle-cloud figure (PNG and PDF), on built-in defaults (seeds stated in each figure)."""

from __future__ import annotations

NAMES = ("collapse", "rank_one", "two_lines", "explosion", "initial_data", "histograms_softmax",
         "histograms_l2", "particles")


def register(sub) -> None:
    p = sub.add_parser("figures", help="make the dynamics-atlas figures (README Mathematics §7) as PNG and PDF")
    p.add_argument("--out", default="figures", metavar="DIR", help="output directory (default ./figures)")
    p.add_argument("--only", nargs="+", choices=NAMES, metavar="NAME", help=f"subset of {list(NAMES)}")
    p.set_defaults(func=run)


def make(name: str, out):
    from ..analysis import figures, figures_extra

    if name in figures.FAMILIES:
        return figures.make_family_figure(figures.FAMILIES[name](), out)
    if name.startswith("histograms_"):
        return figures_extra.make_rank_histograms(name.split("_", 1)[1], out)
    if name == "particles":
        return figures_extra.make_particle_figure(out)
    raise ValueError(name)


def run(args) -> int:
    import time
    import warnings
    from pathlib import Path

    out = Path(args.out)
    for name in args.only or NAMES:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            paths = make(name, out)
        print(f"{name}: {', '.join(str(p) for p in paths)} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return 0
