"""Figures of the sphere models (``tpde figures --only sphere sphere_phase``; README "Normalised tokens").

``sphere`` (four panels, printed numbers say what each shows):

1. circle, SA, β = 5, n = 200 evenly spaced tokens plus a 1e-4 random perturbation (seed 0): angles over time;
   the number of clusters formed first is the fastest linear mode k*(5) = 3;
2. S², SA, β = 4, n = 32 uniform tokens (seed 1): cluster count (rule <θ_i, θ_j> >= 1 - 1e-3) and energy Ẽ_β
   over log t: metastable plateaus (a staircase);
3. Post-LN vs Pre-LN vs Peri-LN vs nGPT (α = 1), SA, β = 1, orthonormal frame n = d = 3: 1 - ρ(t) on log-log
   axes, the derived equiangular ODEs (:func:`symbolic_tpde.analysis.sphere_verdict.equiangular_curve`) drawn
   over the particles;
4. the linear spectrum on the circle: λ_k(β) = k² I_k(β)/(β I_0(β)) for k = 1..6 against β, and k*(β).

``sphere_phase``: the survey's phase diagram (Rigollet, arXiv 2512.01868): SA, Post-LN, n = 32 tokens, 4 uniform
clouds per β (seed 0), β = 0, 1, ..., 9, t ∈ [0, 30], d = 8, 128, 1024: the fraction of pairs with
<θ_i, θ_j> >= 0.999, the derived equiangular curve over it (:mod:`symbolic_tpde.analysis.sphere_sweep`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

NAMES = ("sphere", "sphere_phase")


def _w(kind, d, beta):
    from ..weights import make_head, make_weights

    return make_weights([make_head(kind, A=np.eye(d), V=np.eye(d), beta=beta)])


def _save(fig, axes, out: Path, stem: str, panels: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "pdf"):
        fig.savefig(out / f"{stem}.{ext}", dpi=110)
        paths.append(out / f"{stem}.{ext}")
    if panels:
        fig.canvas.draw()
        inv = fig.dpi_scale_trans.inverted()
        for k, ax in enumerate(axes, 1):
            box = ax.get_tightbbox(fig.canvas.get_renderer()).transformed(inv).padded(0.05)
            for ext in ("png", "pdf"):
                fig.savefig(out / f"{stem}_{k}.{ext}", dpi=110, bbox_inches=box)
                paths.append(out / f"{stem}_{k}.{ext}")
    return paths


def make_sphere_figure(out, panels: bool = False) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analysis import sphere_clusters as C
    from ..analysis.sphere_verdict import equiangular_curve
    from ..numerics.measures.laws import sample_sphere
    from ..numerics.particles.sphere import simulate_sphere
    from ..symbolic import sphere_reductions as R

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
    X0 = sample_sphere({"type": "uniform_sphere"}, 32, 3, np.random.default_rng(1))
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
    # 3. normalisations: particles (dots) and the derived equiangular ODE (lines)
    ts = np.geomspace(0.05, 200, 60)
    for i, norm in enumerate(("post", "pre", "peri", "ngpt")):
        run = simulate_sphere(np.eye(3), _w("sphere_sa", 3, 1.0), 200.0, norm=norm, t_eval=ts)
        th = run.trajectory / np.linalg.norm(run.trajectory, axis=-1, keepdims=True)
        rho = np.einsum("kd,kd->k", th[:, 0], th[:, 1])
        sol = equiangular_curve(norm, "sphere_sa", 3, 1.0, 0.0, 200.0, t_eval=ts)[0]
        ok = rho < 1 - 1e-13
        ax[1, 0].loglog(ts[ok], 1 - rho[ok], "o", ms=3, color=f"C{i}", label=f"{norm} (particles)")
        ax[1, 0].loglog(sol.t, np.maximum(1 - sol.y[:, 0], 1e-16), "-", color=f"C{i}", lw=0.8)
        j = int(np.searchsorted(ts, 50.0))
        print(f"panel 3: {norm}: 1 - rho(t = {ts[j]:.3g}) = {1 - rho[j]:.3g} (derived ODE {1 - sol.y[j, 0]:.3g})")
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
          "; √(2β):", [round(float(np.sqrt(2 * b)), 2) for b in (1, 2, 5, 8, 12)], "; changes of k* over the grid at β =",
          [round(float(betas[i]), 2) for i in range(1, len(betas)) if kst[i] != kst[i - 1]])
    fig.tight_layout()
    paths = _save(fig, ax.ravel(), Path(out), "sphere", panels)
    plt.close(fig)
    return paths


def make_phase_figure(out, panels: bool = False, dims=(8, 128, 1024), K: int = 4) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analysis.sphere_sweep import run_sphere_sweep

    betas = np.arange(10.0)
    fig, axes = plt.subplots(1, len(dims), figsize=(4.6 * len(dims) + 1, 4.4), squeeze=False, layout="constrained")
    for ax, d in zip(axes[0], dims):
        r = run_sphere_sweep("sphere_sa", d, 32, betas, 30.0, K=K, seed=0)
        m = ax.pcolormesh(r.times, r.betas, r.prob, shading="nearest", vmin=0, vmax=1, cmap="viridis")
        ok = np.isfinite(r.equiangular_time)
        ax.plot(r.equiangular_time[ok], r.betas[ok], "w--", lw=1.5, label="equiangular reduction")
        ax.set(xlabel="t", ylabel="β", title=f"d = {d}")
        ax.legend(loc="lower right", fontsize=8)
        half = [float(r.times[np.argmax(p >= 0.5)]) if (p >= 0.5).any() else None for p in r.prob]
        print(f"d = {d}: t(P >= 1/2) per β = {half}; equiangular crossing = "
              f"{[None if not np.isfinite(t) else round(float(t), 2) for t in r.equiangular_time]} "
              f"({r.seconds:.0f} s)")
    fig.colorbar(m, ax=axes[0].tolist(), label="P(<θ_i,θ_j> ≥ 0.999)")
    fig.suptitle(f"SA (Post-LN), n = 32 uniform tokens, {K} cloud(s) per β: fraction of pairs with "
                 "<θ_i,θ_j> ≥ 0.999\ndashed: the derived equiangular reduction (ρ from 0 to 0.999)", fontsize=10)
    paths = _save(fig, axes[0], Path(out), "sphere_phase", panels)
    plt.close(fig)
    return paths


def make(name: str, out, panels: bool = False) -> list[Path]:
    return {"sphere": make_sphere_figure, "sphere_phase": make_phase_figure}[name](out, panels=panels)
