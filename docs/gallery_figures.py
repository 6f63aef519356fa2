"""The gallery's figures: each drawn by the real command (or a few lines of the Python API) on quick settings
when the site builds (``docs/_ext/tpde_docs.py``).  The page shows the command under each figure, so a reader
can redraw it, at full settings, with the command's documented options.

Each entry: ``file`` (PNG written into the output folder), ``title``, ``caption``, and either ``argv`` (the
``tpde`` arguments; ``{out}`` is the output folder) or ``python`` (code run with ``OUT`` the output folder).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIGURES = [
    {"file": "plot_softmax_2d.png", "title": "Tokens beside the Gaussian moment ODE",
     "argv": ["plot", "--scenario", "softmax_2d", "--out", "{out}/plot_softmax_2d.png"],
     "caption": "`softmax_2d`: a token cloud beside the ellipses of the moment ODE started from the cloud's "
                "sample moments (see [particles vs the ODE](../tutorials/particles_vs_ode.md))."},
    {"file": "plot_l2_2d.png", "title": "The same for ℓ2 attention",
     "argv": ["plot", "--scenario", "l2_2d", "--out", "{out}/plot_l2_2d.png"],
     "caption": "`l2_2d`: ℓ2 attention preserves Gaussians too (the table of [kinds](../guide/scenarios.md))."},
    {"file": "sweep_softmax.png", "title": "Phase diagram over the spectrum of A + Aᵀ",
     "argv": ["sweep", "--n", "7", "--K", "4", "--T", "100", "--out", "{out}/sweep_softmax"],
     "caption": "`tpde sweep` on a 7×7 grid with 4 initial covariances per point (the default is 9×9 with 8, "
                "to T = 1000): collapse, low rank, blow-up (see [sweeps](../tutorials/sweeps_dask.md))."},
    {"file": "fig_collapse.png", "title": "The paper's collapse family",
     "argv": ["figures", "--only", "collapse", "--out", "{out}"],
     "caption": "`A = −QᵀQ/√2 ≺ 0`, `V` SPD: softmax, ℓ2, Sinkhorn and multi-head all collapse "
                "([the authors' figures](../guide/authors_figures.md); Mathematics §7)."},
    {"file": "sweep_sphere.png", "title": "Clustering on the sphere: fraction of linked pairs",
     "argv": ["sweep", "--kind", "sphere_sa", "--d", "3", "--tokens", "8", "--range", "0", "4", "--n", "3",
              "--K", "2", "--T", "10", "--out", "{out}/sweep_sphere"],
     "caption": "Post-LN SA on S², 8 tokens, β = 0, 2, 4, 2 clouds each, with the derived equiangular curve "
                "(see [sphere models](../tutorials/sphere.md))."},
    {"file": "pde_mixture_1d.png", "title": "The PDE on a grid from a Gaussian mixture",
     "python": """
import subprocess, sys
import matplotlib.pyplot as plt
import numpy as np
path = f"{OUT}/mixture_1d.npz"
subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "pde", "--scenario", "mixture_1d", "--grid", "200",
                "--T", "1", "--save", path, "--save-every", "0.5", "--json"], check=True, capture_output=True)
z = np.load(path)                       # times, h, and per saved time k: masses_k and the grid's corner lo_k
h = z["h"][0]
fig, ax = plt.subplots(figsize=(6, 3.2))
for k, t in enumerate(z["times"]):
    m = z[f"masses_{k}"]
    ax.plot(z[f"lo_{k}"][0] + h * (np.arange(m.size) + 0.5), m / h, label=f"t = {t:g}")
ax.set_xlabel("x"); ax.set_ylabel("density"); ax.legend(); fig.tight_layout()
fig.savefig(f"{OUT}/pde_mixture_1d.png", dpi=110)
""",
     "caption": "`tpde pde --scenario mixture_1d --grid 200` (MUSCL, SSPRK2) at t = 0, ½, 1: a two-bump law "
                "transported by softmax attention (see [the PDE on a grid](../tutorials/pde_grid.md))."},
]


def command(fig: dict) -> str:
    """The command line shown under a figure."""
    if "argv" in fig:
        return "tpde " + " ".join(a.replace("{out}", "OUT") for a in fig["argv"])
    return "python (the code below the figure)"


def draw(fig: dict, out: Path, env: dict, cwd: Path) -> None:
    """Draw one figure into ``out``; a failure raises with the command's last error lines."""
    if "argv" in fig:
        argv = [sys.executable, "-m", "symbolic_tpde.cli", *(a.replace("{out}", str(out)) for a in fig["argv"])]
    else:
        argv = [sys.executable, "-c", f"OUT = {str(out)!r}\n" + fig["python"]]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    if proc.returncode != 0 or not (out / fig["file"]).exists():
        tail = "\n".join(proc.stderr.strip().split("\n")[-5:])
        raise RuntimeError(f"{command(fig)} exited {proc.returncode}: {tail}")


def page(prefix: str) -> str:
    """The gallery's figures as Markdown (included by ``docs/gallery.md``)."""
    parts = []
    for fig in FIGURES:
        parts += [f"# {fig['title']}", "", f"![{fig['title']}]({prefix}{fig['file']})", "", fig["caption"], ""]
        if "argv" in fig:
            parts += ["```console", f"$ {command(fig)}", "```", ""]
        else:
            parts += ["```", fig["python"].strip(), "```", ""]
    return "\n".join(parts)
