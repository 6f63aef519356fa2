"""``tpde figures --preset castin2025``: the authors' figure families beside ours (README "Reproducing the
authors' figures"; README Mathematics §7).

Each family is one of the setups of ``vcastin/2025-transformers-PDEs`` (:data:`.castin2025_draws.SETUPS`:
their seeds, draw order, conventions, ``Σ₀`` grid, step sizes and tolerances).  Every figure row is one of
their output files:

* left: their scheme as they ran it, projected Euler (:func:`.castin2025_draws.projected_euler`) with their
  step ``h`` and stopping rules on their draws, drawn in their view (cone coordinates ``(a - b, 2c, a + b)``
  or ``Σ/tr Σ`` in the unit disk);
* right: the same draws and grid, integrated by our adaptive Dormand-Prince on the generated right-hand side
  and classified (:func:`.figures.compute`).

The ``histograms`` family recounts their rank rule (eigenvalues ``> 0.1`` of the returned iterate; softmax,
``V = I``, their first 20 draws per ``d``) at ``h``, at ``h/10``, for the exact solution at their stopping time,
and the limit rank of our classifier (:func:`.castin2025_findings.histogram_rank_errors`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from . import castin2025_draws as cd

NAMES = ("neg_def_V", "rank_1", "MH_rank_1", "mixed_3d", "explosion", "divergence", "both_V", "histograms")

# horizon of our adaptive runs per family (collapse/rank limits need long times, O(1/t) decay; blow-up and
# divergence rows stop at tr Σ = 10⁶ tr Σ₀ well before T = 20)
HORIZON = {"neg_def_V": 1e3, "rank_1": 1e3, "MH_rank_1": 1e3, "mixed_3d": 1e3, "explosion": 20.0,
           "divergence": 20.0, "both_V": 1e3}

KIND_TEX = {"softmax": "softmax", "l2": r"$\ell_2$ ($Q/\sqrt{2}$, $\tau = 1$)", "sinkhorn": r"Sinkhorn ($\varepsilon = 1$)",
            "multihead": "multi-head (row split)"}


def _mat(M) -> str:
    M = np.atleast_2d(np.asarray(M, float))
    return "[" + "; ".join(", ".join(f"{x:.3f}" for x in r) for r in M) + "]"


def _euler_trajectories(res: cd.EulerResult, h: float):
    """Their iterates as a :class:`.figures.Trajectories` (NaN-padded), so both sides use one drawing code."""
    from .figures import Trajectories

    K = max(len(p) for p in res.paths)
    N = len(res.paths)
    Sig = np.full((K, N, 2, 2), np.nan)
    for i, p in enumerate(res.paths):
        Sig[:len(p), i] = p
    labels = [{"converged": "converged", "diverged": "diverge", "max_iter": "max_iter"}[s] for s in res.status]
    return Trajectories(np.arange(K) * h, Sig, res.last, (res.steps - 1) * h, labels, np.full(N, np.nan))


def _colours(setup: cd.Setup, w: np.ndarray, tr):
    import matplotlib

    if setup.colour_by == "w":
        norm = matplotlib.colors.Normalize(-1.0, 1.0)
        return norm(w), norm, r"initial $w = 2\Sigma_{0,12}$"
    z = np.log10(np.trace(tr.Sig_end, axis1=1, axis2=2))
    norm = matplotlib.colors.Normalize(float(z.min()), float(z.max()))
    return norm(z), norm, r"$\log_{10}\,\mathrm{tr}\,\Sigma_{\mathrm{end}}$"


def _summary(labels) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(Counter(labels).items()))


def family_panels(name: str) -> tuple[str, list[dict]]:
    """Compute one family: ``(suptitle, panels)``; a panel is ``{"title", "view", "tr", "values", "norm",
    "cbar", "stem"}``."""
    from .figures import compute

    st = cd.SETUPS[name]
    p = cd.draws(st.draws)
    S0, w = cd.setup_grid(st)
    panels = []
    for run in st.runs:
        weights = cd.setup_weights(st, run)
        F = cd.covariance_field([weights])
        eu = cd.projected_euler(F, S0, run.h, run.tol_low, run.tol_high, run.max_iter)
        tr_e = _euler_trajectories(eu, run.h)
        tr_o = compute(weights, S0, HORIZON[name])
        kind = KIND_TEX[run.kind] + (f", $H = {run.H}$" if run.kind == "multihead" else "")
        note = f"\n({run.note})" if run.note else ""
        for side, tr, what in (("theirs", tr_e, f"{run.file}: projected Euler $h = {run.h:g}$, "
                                rf"tol$_{{low}}$ = {run.tol_low:g}, tol$_{{high}}$ = {run.tol_high:g}"),
                               ("ours", tr_o, f"same draws: adaptive DOPRI5 to $T = {HORIZON[name]:g}$")):
            vals, norm, cbar = _colours(st, w, tr)
            nt = note if side == "theirs" else ""
            # their status words: "diverged" only means the stop tr Σ > tol_high
            labs = [f"stopped at tr > {run.tol_high:g}" if s == "diverged" else s for s in eu.status] \
                if side == "theirs" else tr.labels
            panels.append({"title": f"{kind}; {what}{nt}\n{_summary(labs)}", "view": st.view, "tr": tr,
                           "values": vals, "norm": norm, "cbar": cbar, "stem": f"{run.file}_{side}"})
    sup = (f"authors' setup '{name}' ({st.what}); seed {p['seed']}, $Q$ = {_mat(p['Q'])}, $K$ = {_mat(p['K'])}, "
           f"$V$ = {_mat(p['V'])}; {len(S0)} trace-one $\\Sigma_0$ (their grid {st.grid[0]}x{st.grid[1]} on "
           f"{list(st.grid[2])}); left: as they ran it, right: ours")
    return sup, panels


def _draw(ax, panel) -> None:
    import matplotlib.pyplot as plt

    from .figures import draw_cone, draw_disk

    colours = plt.get_cmap("viridis")(panel["values"])
    (draw_cone if panel["view"] == "cone" else draw_disk)(ax, panel["tr"], colours)
    ax.set_title(panel["title"], fontsize=8)


def _colourbar(fig, ax, panel) -> None:
    import matplotlib
    import matplotlib.pyplot as plt

    fig.colorbar(matplotlib.cm.ScalarMappable(panel["norm"], plt.get_cmap("viridis")), ax=ax, fraction=0.046,
                 pad=0.08, label=panel["cbar"])


def make_family(name: str, out_dir: Path, panels: bool = False, formats=("png", "pdf")) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .figures import save

    sup, pans = family_panels(name)
    proj = "3d" if cd.SETUPS[name].view == "cone" else None
    paths: list[Path] = []
    if panels:
        for pan in pans:
            fig = plt.figure(figsize=(6.5, 5.5))
            ax = fig.add_subplot(1, 1, 1, projection=proj)
            _draw(ax, pan)
            _colourbar(fig, ax, pan)
            fig.text(0.5, 0.01, sup, ha="center", va="bottom", fontsize=7, wrap=True)
            fig.subplots_adjust(bottom=0.16, top=0.88)
            paths += save(fig, out_dir, f"castin2025_{name}_{pan['stem']}", formats)
    nr = len(pans) // 2
    fig = plt.figure(figsize=(13, 5.2 * nr + 0.8))
    for i, pan in enumerate(pans):
        ax = fig.add_subplot(nr, 2, i + 1, projection=proj)
        _draw(ax, pan)
        _colourbar(fig, ax, pan)
    fig.suptitle(sup, fontsize=9, wrap=True)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return save(fig, out_dir, f"castin2025_{name}", formats) + paths


def make_histograms(out_dir: Path, panels: bool = False, formats=("png", "pdf"), n: int = 20) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .castin2025_findings import histogram_rank_errors
    from .figures import save

    res = [histogram_rank_errors(d, n) for d in (3, 4, 5)]
    series = (("ranks_h", "their projected Euler, $h$"), ("ranks_h10", "projected Euler, $h/10$"),
              ("ranks_exact_at_stop", r"exact $(\Sigma_0^{-1} - t(A + A^\top))^{-1}$ at their stop"),
              ("limit_ranks", "limit rank (our classifier, $T = 10^6$)"))
    sup = (r"their rank rule (eigenvalues of the returned iterate $> 0.1$), softmax, $V = I$, "
           r"$A = -Q^\top Q/\sqrt{d}$, $Q \in \mathbb{R}^{\lfloor d/2\rfloor \times d}$ (seed 40), "
           rf"$\Sigma_0 = GG^\top$ (seed 41); their first {n} draws per $d$, tol$_{{low}} = 10^{{-4}}$")
    fig, axes = plt.subplots(1, 3, figsize=(16, 5), sharey=True)
    figs = [(fig, list(axes), "castin2025_histograms")]
    if panels:
        for r in res:
            fig, ax = plt.subplots(figsize=(6, 4.5))
            figs.append((fig, [ax], f"castin2025_histograms_d{r['d']}"))
    axes_all = [a for _, axs, _ in figs for a in axs]
    for ax, r in zip(axes_all, res + res):
        xs = np.arange(r["d"] + 1)
        for k, (key, lab) in enumerate(series):
            c = Counter(r[key])
            ax.bar(xs + (k - 1.5) * 0.2, [c.get(x, 0) for x in xs], width=0.2, label=lab)
        ax.axvline(r["bound"] + 0.5, color="k", ls=":", lw=1, label=r"bound $\lceil d/2 \rceil$")
        ax.set_xticks(xs)
        ax.set_xlabel("rank")
        ax.set_ylabel("draws")
        ax.set_title(f"$d = {r['d']}$, $h = {r['h']:g}$: {r['n_wrong']}/{r['n']} draws change rank at $h/10$ "
                     f"({r['n_wrong_with_clipping']} with an eigenvalue clipped)", fontsize=9)
        ax.legend(fontsize=7)
    paths: list[Path] = []
    for fig, _, stem in figs:
        fig.suptitle(sup, fontsize=9, wrap=True)
        fig.tight_layout(rect=(0, 0, 1, 0.92))
        paths += save(fig, out_dir, stem, formats)
    return paths


def make(name: str, out_dir, panels: bool = False, formats=("png", "pdf")) -> list[Path]:
    """Draw the authors' family ``name`` (one of :data:`NAMES`) beside ours into ``out_dir``; returns the
    files written (``panels=True``: also one file per panel, from the same computation)."""
    from ..errors import InputError

    if name not in NAMES:
        raise InputError("preset castin2025", f"unknown family {name!r} (choose from {', '.join(NAMES)})")
    if name == "histograms":
        return make_histograms(Path(out_dir), panels, formats)
    return make_family(name, Path(out_dir), panels, formats)
