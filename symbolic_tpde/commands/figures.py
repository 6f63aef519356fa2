"""``tpde figures [--out DIR] [--only NAME ...] [--preset castin2025] [--panels]``: make every
covariance-trajectory figure family, the rank histograms, the particle-cloud figure and the sphere figures
(``sphere``: circle, metastability, normalisations, spectrum; ``sphere_phase``: the (t, β) phase diagram at
d = 8, 128, 1024, a few minutes; :mod:`..experiments.figures_sphere`) as PNG and PDF, on built-in defaults
(seeds stated in each figure).

``--preset castin2025`` makes instead the paper authors' figure families with their exact parameter draws and
conventions, beside the same draws integrated by this project (:mod:`..analysis.castin2025`; README
"Reproducing the authors' figures").  ``--panels`` also writes one file per panel, for slides.
"""

from __future__ import annotations

NAMES = ("collapse", "rank_one", "two_lines", "explosion", "initial_data", "histograms_softmax",
         "histograms_l2", "particles", "sphere", "sphere_phase")
PRESETS = ("castin2025",)


def register(sub) -> None:
    p = sub.add_parser("figures", help="make the dynamics-atlas figures (README Mathematics §7) as PNG and PDF")
    p.add_argument("--out", default="figures", metavar="DIR", help="output directory (default ./figures)")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help=f"subset of {list(NAMES)} (with --preset castin2025: of its family names)")
    p.add_argument("--preset", choices=PRESETS, default=None,
                   help="castin2025: the authors' figure families with their draws, beside ours")
    p.add_argument("--panels", action="store_true", help="also write one file per panel (PNG and PDF)")
    p.set_defaults(func=run)


def make(name: str, out, panels: bool = False):
    from ..experiments import figures, figures_extra, figures_sphere

    if name in figures_sphere.NAMES:
        return figures_sphere.make(name, out, panels=panels)
    if name in figures.FAMILIES:
        return figures.make_family_figure(figures.FAMILIES[name](), out, panels=panels)
    if name.startswith("histograms_"):
        return figures_extra.make_rank_histograms(name.split("_", 1)[1], out, panels=panels)
    if name == "particles":
        return figures_extra.make_particle_figure(out, panels=panels)
    raise ValueError(name)


def run(args) -> int:
    import time
    import warnings
    from pathlib import Path

    from ..errors import InputError

    if args.preset == "castin2025":
        from ..experiments import castin2025

        names, maker = castin2025.NAMES, castin2025.make
    else:
        names, maker = NAMES, make
    unknown = [n for n in (args.only or ()) if n not in names]
    if unknown:
        raise InputError("--only", f"unknown figure {unknown[0]!r}; choose from {', '.join(names)}")
    from ..inputs.checks import writable_output

    writable_output(args.out, "out", directory=True)     # before the work
    out = Path(args.out)
    for name in args.only or names:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            paths = maker(name, out, panels=args.panels)
        short = min((p.stem for p in paths), key=len, default="")  # the canvas; panels are named <canvas>_<panel>
        canvases = [p for p in paths if p.stem == short] if args.panels else paths
        more = f" and {len(paths) - len(canvases)} panel files" if len(paths) > len(canvases) else ""
        print(f"{name}: {', '.join(str(p) for p in canvases)}{more} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return 0
