"""Figures of the sphere models (README "Normalised tokens: the sphere"); standalone until `tpde figures` gets a
sphere family.  Writes OUT_DIR/sphere.png (four panels) and prints the numbers each panel shows.

1. circle, SA, β = 5, n = 200 evenly spaced tokens plus a 1e-4 random perturbation (seed 0): angles over time;
   the number of clusters formed first is the fastest linear mode k*(5) = 3;
2. S², SA, β = 4, n = 32 uniform tokens (seed 1): cluster count (rule <θ_i, θ_j> >= 1 - 1e-3) and energy Ẽ_β
   over log t: metastable plateaus (a staircase);
3. Post-LN vs Pre-LN vs Peri-LN vs nGPT (α = 1), SA, β = 1, orthonormal frame n = 3, d = 3: 1 - ρ(t) on log-log
   axes with the derived equiangular ODEs (scipy) drawn over the particles;
4. the linear spectrum on the circle: λ_k(β) = k² I_k(β)/(β I_0(β)) for k = 1..6 against β, and k*(β).

Usage: python numerics/fig_sphere.py [OUT_DIR]   (default ./figures)
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import sympy as sp  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

from symbolic_tpde.analysis import sphere_clusters as C  # noqa: E402
from symbolic_tpde.numerics.sphere import simulate_sphere  # noqa: E402
from symbolic_tpde.numerics.init_data import sample_sphere as sample  # noqa: E402
from symbolic_tpde.symbolic import sphere_reductions as R  # noqa: E402
from symbolic_tpde.weights import make_head, make_weights  # noqa: E402


def _w(kind, d, beta):
    return make_weights([make_head(kind, A=np.eye(d), V=np.eye(d), beta=beta)])


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(2, 2, figsize=(11, 8.5))

    # 1. circle
    n, beta = 200, 5.0
    rng = np.random.default_rng(0)
    x = 2 * np.pi * np.arange(n) / n + 1e-4 * rng.standard_normal(n)
    ts = np.linspace(0, 30, 121)
    run = simulate_sphere(np.stack([np.cos(x), np.sin(x)], 1), _w("sphere_sa", 2, beta), 30.0, t_eval=ts)
    ang = np.unwrap(np.arctan2(run.trajectory[..., 1], run.trajectory[..., 0]), axis=0)
    ax[0, 0].plot(ts, ang[:, ::4], lw=0.5, color="k")
    counts = C.cluster_counts(run.trajectory)
    kstar = R.fastest_mode("softmax", beta)[0]
    ax[0, 0].set(xlabel="t", ylabel="angle (unwrapped)", title=f"circle, SA, β = {beta:g}, n = {n}: {counts[-1]} "
                 f"clusters at t = 30 (k* = {kstar})")
    print(f"panel 1: clusters (δ = 1e-3) at t = 10, 20, 30: {counts[40]}, {counts[80]}, {counts[-1]}; "
          f"k*({beta:g}) = {kstar}")

    # 2. metastability on S²
    X0 = sample({"type": "uniform_sphere"}, 32, 3, np.random.default_rng(1))
    ts = np.geomspace(0.1, 2000, 80)
    run = simulate_sphere(X0, _w("sphere_sa", 3, 4.0), 2000.0, t_eval=ts, tol=1e-8)
    counts = C.cluster_counts(run.trajectory)
    E = [C.energy(th, 4.0) for th in run.trajectory]
    ax[0, 1].semilogx(ts, counts, "k-", drawstyle="steps-post")
    ax2 = ax[0, 1].twinx()
    ax2.semilogx(ts, E, "C1-")
    ax2.set_ylabel("energy Ẽ_β", color="C1")
    ax[0, 1].set(xlabel="t", ylabel="clusters (δ = 1e-3)", title="S², SA, β = 4, n = 32: metastable plateaus")
    steps = C.staircase(ts, run.trajectory, 4.0)
    print("panel 2: plateaus", [(round(s.t_start, 1), round(s.t_end, 1), s.clusters) for s in steps])

    # 3. normalisations
    ts = np.geomspace(0.05, 200, 60)
    for i, norm in enumerate(("post", "pre", "peri", "ngpt")):
        run = simulate_sphere(np.eye(3), _w("sphere_sa", 3, 1.0), 200.0, norm=norm, t_eval=ts)
        th = run.trajectory / np.linalg.norm(run.trajectory, axis=-1, keepdims=True)
        rho = np.einsum("kd,kd->k", th[:, 0], th[:, 1])
        red = R.equiangular(R.MODELS[norm]("softmax"))
        f = {k: sp.lambdify((R.rho, R.r), v.subs({R.n: 3, R.beta: 1.0, R.alpha: 1.0})) for k, v in red.rhs.items()}
        rhs = (lambda t, y: [f["rho"](y[0], 1.0)]) if "r" not in f else \
            (lambda t, y: [f["rho"](y[0], y[1]), f["r"](y[0], y[1])])
        sol = solve_ivp(rhs, (0, 200), [0.0] if "r" not in f else [0.0, 1.0], method="LSODA", rtol=1e-10,
                        atol=1e-14, t_eval=ts)
        ok = rho < 1 - 1e-13
        ax[1, 0].loglog(ts[ok], 1 - rho[ok], "o", ms=3, color=f"C{i}", label=f"{norm} (particles)")
        ax[1, 0].loglog(sol.t, np.maximum(1 - sol.y[0], 1e-16), "-", color=f"C{i}", lw=0.8)
        j = int(np.searchsorted(ts, 50.0))
        print(f"panel 3: {norm}: 1 - rho(t = {ts[j]:.3g}) = {1 - rho[j]:.3g} (derived ODE {1 - sol.y[0][j]:.3g})")
    ax[1, 0].set(xlabel="t", ylabel="1 − ρ", ylim=(1e-14, 2), title="frame n = d = 3, SA, β = 1: lines = derived ODE")
    ax[1, 0].legend(fontsize=8)

    # 4. spectrum
    betas = np.linspace(0.5, 12, 60)
    lam = np.array([R.fastest_mode("softmax", b, 6)[1] for b in betas])
    for k in range(6):
        ax[1, 1].plot(betas, lam[:, k], label=f"k = {k + 1}")
    kst = [R.fastest_mode("softmax", b)[0] for b in betas]
    ax[1, 1].set(xlabel="β", ylabel="λ_k", title="circle, SA: growth rate of mode k at the uniform measure")
    ax[1, 1].legend(fontsize=8)
    print("panel 4: k*(β) at β = 1, 2, 5, 8, 12:", [R.fastest_mode("softmax", b)[0] for b in (1, 2, 5, 8, 12)],
          "; √(2β):", [round(np.sqrt(2 * b), 2) for b in (1, 2, 5, 8, 12)], "; changes of k* over the grid at β =",
          [round(betas[i], 2) for i in range(1, len(betas)) if kst[i] != kst[i - 1]])
    fig.tight_layout()
    fig.savefig(out / "sphere.png", dpi=110)
    print(f"wrote {out / 'sphere.png'}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "figures"))
