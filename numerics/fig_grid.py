"""Figures of the grid solver (``tpde pde``): densities beside particles and the Gaussian ODE, convergence orders.

Usage: python numerics/fig_grid.py [OUT_DIR]   (default ./figures; about a minute)

* ``grid_mixture_1d.png``: mixture_1d, MUSCL on 400 cells at t = 0, 0.5, 1, with the histogram of 20 000
  particles from the same initial law at t = 1 (exact W₁ between the two printed);
* ``grid_gaussian_1d.png``: Gaussian data under softmax (A = 0.5, V = 1, Σ₀ = 0.5, T = T*/2 = 1): grid density
  (100 cells, upwind and MUSCL) against the moment ODE's N(α(T), Σ(T));
* ``grid_orders.png``: L¹ error vs h for both schemes (the test's Gaussian case) and the upwind W₁ error for two
  atoms and for an indicator (linear attention, exact solution), with reference slopes;
* ``grid_mixture_2d.png``: mixture_2d, MUSCL on 48² cells at T = 1 as a heatmap beside 5 000 particles.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def main(out: str = "figures") -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.numerics.grids.euclidean import Grid, solve_grid, wasserstein_1d_exact
    from symbolic_tpde.numerics.measures.laws import cell_masses, sample
    from symbolic_tpde.numerics.particles.simulate import simulate
    from symbolic_tpde.inputs.scenario import InitSpec, load_scenario, parse_scenario

    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)

    # 1. mixture_1d: grid densities beside particles
    scn = load_scenario("mixture_1d", gaussian_data=False)
    r = solve_grid(scn.init, scn.schedule, 1.0, 400, save_every=0.5)
    X = simulate(sample(scn.init, 20_000, np.random.default_rng(0)), scn.schedule, 1.0, progress=False).X[:, 0]
    fig, ax = plt.subplots(figsize=(7, 4))
    for t, m, lo in r.frames:
        e = lo[0] + r.grid.h[0] * np.arange(len(m) + 1)
        ax.stairs(m / r.grid.h[0], e, label=f"grid, t = {t:g}")
    ax.hist(X, bins=120, density=True, histtype="step", color="k", label="20 000 particles, t = 1")
    w1 = wasserstein_1d_exact(("grid", r.grid.edges[0], r.masses), ("points", X), 1)
    ax.set_title(f"mixture_1d: MUSCL, 400 cells; W1(grid, particles) at t = 1: {w1:.4f}")
    ax.set_xlim(-3, 3)
    ax.legend()
    fig.savefig(outdir / "grid_mixture_1d.png", dpi=120, bbox_inches="tight")
    print(f"grid_mixture_1d.png: W1(grid, particles) = {w1:.4g}, mass error {r.mass_error:.1e}")

    # 2. Gaussian data stays Gaussian
    g_scn = parse_scenario({"attention": "softmax", "A": [[0.5]], "V": [[1.0]], "alpha0": [0.3],
                            "Sigma0": [[0.5]], "T": 1.0})
    init = InitSpec("gaussian", 1, {"alpha": g_scn.alpha0, "Sigma": g_scn.Sigma0}, g_scn.alpha0, g_scn.Sigma0, True)
    sol = GaussianODE(g_scn.schedule).integrate(g_scn.alpha0, g_scn.Sigma0, 1.0, rtol=1e-12)
    a, S = float(sol.alpha[-1][0]), float(sol.Sigma[-1][0, 0])
    x = np.linspace(-10, 14, 2000)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, np.exp(-(x - a) ** 2 / (2 * S)) / np.sqrt(2 * np.pi * S), "k", label=f"ODE: N({a:.3f}, {S:.3f})")
    for scheme in ("upwind", "muscl"):
        gr = Grid(np.array([-10.0]), np.array([0.24]), (100,))
        rr = solve_grid(init, g_scn.schedule, 1.0, 100, scheme=scheme, grid=gr)
        ax.stairs(rr.masses / 0.24, rr.grid.edges[0], label=f"{scheme}, 100 cells")
    ax.set_xlim(-4, 6)
    ax.legend()
    ax.set_title("softmax, Gaussian data, T = T*/2: grid vs moment ODE")
    fig.savefig(outdir / "grid_gaussian_1d.png", dpi=120, bbox_inches="tight")

    # 3. orders
    ref = InitSpec("gaussian", 1, {"alpha": np.array([a]), "Sigma": np.array([[S]])}, [a], [[S]], True)
    fig, axs = plt.subplots(1, 2, figsize=(10, 4))
    for scheme, Ns in (("upwind", (100, 200, 400, 800)), ("muscl", (100, 200, 400, 800))):
        errs = []
        for N in Ns:
            gr = Grid(np.array([-10.0]), np.array([24.0 / N]), (N,))
            rr = solve_grid(init, g_scn.schedule, 1.0, N, scheme=scheme, grid=gr)
            errs.append(np.abs(rr.masses - cell_masses(ref, rr.grid.edges)).sum())
        h = 24.0 / np.array(Ns)
        axs[0].loglog(h, errs, "o-", label=f"{scheme}: slope {np.polyfit(np.log(h), np.log(errs), 1)[0]:.2f}")
    axs[0].set_xlabel("h")
    axs[0].set_ylabel("L1 error vs ODE")
    axs[0].legend()
    np.save(outdir / "_two_atoms.npy", np.array([[-1.0], [1.0]]))
    for name, block, M0, meas in (
            ("two atoms", {"type": "empirical", "path": str(outdir / "_two_atoms.npy")}, 1.0,
             lambda s: ("points", np.array([-s, s]))),
            ("indicator", {"type": "uniform_box", "low": [-1.0], "high": [1.0]}, 1 / 3,
             lambda s: ("grid", np.array([-s, s]), np.array([1.0])))):
        lin = parse_scenario({"attention": "linear", "A": [[0.25]], "V": [[1.0]], "init": block, "T": 0.5},
                             gaussian_data=False)
        Ns = np.array([136, 272, 544, 1088, 2176])
        ws = []
        for N in Ns:
            gr = Grid(np.array([-1.7]), np.array([3.4 / N]), (int(N),))
            rr = solve_grid(lin.init, lin.schedule, 0.5, int(N), scheme="upwind", grid=gr)
            ws.append(wasserstein_1d_exact(("grid", rr.grid.edges[0], rr.masses),
                                           meas((1 - 2 * 0.25 * 0.5 * M0) ** -0.5), 1))
        h = 3.4 / Ns
        axs[1].loglog(h, ws, "o-", label=f"{name}: slope {np.polyfit(np.log(h), np.log(ws), 1)[0]:.2f}")
    (outdir / "_two_atoms.npy").unlink()
    axs[1].set_xlabel("h")
    axs[1].set_ylabel("W1 error (upwind, exact solution)")
    axs[1].legend()
    fig.savefig(outdir / "grid_orders.png", dpi=120, bbox_inches="tight")

    # 4. mixture_2d heatmap beside particles
    scn2 = load_scenario("mixture_2d", gaussian_data=False)
    r2 = solve_grid(scn2.init, scn2.schedule, 1.0, 48)
    X2 = simulate(sample(scn2.init, 5000, np.random.default_rng(0)), scn2.schedule, 1.0, progress=False).X
    fig, axs = plt.subplots(1, 2, figsize=(10, 4.5), sharex=True, sharey=True)
    e0, e1 = r2.grid.edges
    axs[0].pcolormesh(e0, e1, r2.density.T, shading="flat")
    axs[0].set_title(f"grid (MUSCL, {r2.grid.shape[0]}x{r2.grid.shape[1]}), t = 1")
    axs[1].hist2d(X2[:, 0], X2[:, 1], bins=[e0, e1], density=True)
    axs[1].set_title("5 000 particles, t = 1 (histogram on the same cells)")
    m = r2.masses > 1e-4 * r2.masses.max()
    c = r2.grid.centres[m.ravel()]
    axs[0].set_xlim(c[:, 0].min() - 0.5, c[:, 0].max() + 0.5)
    axs[0].set_ylim(c[:, 1].min() - 0.5, c[:, 1].max() + 0.5)
    fig.savefig(outdir / "grid_mixture_2d.png", dpi=120, bbox_inches="tight")
    H, _, _ = np.histogram2d(X2[:, 0], X2[:, 1], bins=[e0, e1])
    print(f"grid_mixture_2d.png: L1(grid masses, particle histogram) = {np.abs(H / len(X2) - r2.masses).sum():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "figures"))
