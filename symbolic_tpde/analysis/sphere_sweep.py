"""The phase diagram of clustering on the sphere over ``(t, β)`` (``tpde sweep --kind sphere_sa|sphere_usa``).

As in Rigollet's survey (arXiv 2512.01868, after Geshkovski et al., arXiv 2312.10794): ``n`` tokens drawn
uniformly on ``S^{d-1}`` (``K`` independent clouds per ``β``), ``Q = K = V = I``, Post-LN (or the ``norm``
given); at each time of the grid the fraction of pairs with ``<θ_i, θ_j> >= 1 - δ`` (``δ = 1e-3``: the
survey's 0.999), averaged over the clouds: an estimate of the probability that two tokens are clustered,
with Monte-Carlo standard error ``≤ 0.5/√K`` (pairs of one cloud are dependent, so only ``K`` counts).

Drawn over it, the **equiangular curve**: the time at which the derived equiangular reduction
(:func:`.sphere_verdict.equiangular_curve`, from ``ρ₀ = 0``, the mean inner product of uniform tokens) reaches
``ρ = 1 - δ``.  Each ``β`` also gets the long-time verdict of the one classifier
(:func:`symbolic_tpde.analysis.verdict.classify_long_time`, its sphere branch) for its first cloud: a
theorem when one applies (``d >= 3``, ``β >= 0``: almost every start gives one cluster), else numerical.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .sphere_clusters import DELTA, STEP_BUDGET

__all__ = ["SphereSweep", "run_sphere_sweep", "save_sphere_sweep"]


@dataclass
class SphereSweep:
    kind: str
    norm: str
    d: int
    n: int
    K: int
    seed: int
    betas: np.ndarray            # (nb,)
    times: np.ndarray            # (nt,)
    prob: np.ndarray             # (nb, nt): fraction of linked pairs, averaged over the K clouds
    equiangular_time: np.ndarray  # (nb,): NaN when ρ does not reach 1 - δ by T (or no reduction: causal)
    verdicts: list               # per β: {"outcome", "source", "label"}
    status: list                 # per β: "ok" | "time-limit"
    seconds: float


def run_sphere_sweep(kind: str, d: int, n: int, betas, T: float, *, K: int = 4, seed: int = 0,
                     n_times: int = 61, norm: str = "post", delta: float = DELTA,
                     max_seconds_point: float | None = None, max_steps: int = STEP_BUDGET) -> SphereSweep:
    """The phase diagram of the module docstring (one batched run of ``K`` clouds per ``β``; ``max_steps``: the
    step budget of each run, ``tpde sweep`` derives it from the sweep's size).  BLAS is held to
    one thread: the clouds are small and threaded BLAS on a shared machine was measured 27x slower for a
    ``32 × 128`` product."""
    from ..numerics.measures.laws import sample_sphere
    from ..numerics.threads import limit_threads

    betas = np.asarray(betas, float)
    times = np.linspace(0.0, T, n_times)
    rng = np.random.default_rng(seed)
    X0 = np.stack([sample_sphere({"type": "uniform_sphere"}, n, d, rng) for _ in range(K)])
    res = SphereSweep(kind, norm, d, n, K, seed, betas, times, np.full((len(betas), n_times), np.nan),
                      np.full(len(betas), np.nan), [], [], 0.0)
    t0 = time.perf_counter()
    with limit_threads(1):
        for b, beta in enumerate(betas):
            _one_beta(res, b, float(beta), X0, T, delta, max_seconds_point, max_steps)
    res.seconds = time.perf_counter() - t0
    return res


def _one_beta(res: SphereSweep, b: int, beta: float, X0, T, delta, max_seconds_point,
              max_steps: int = STEP_BUDGET) -> None:
    from ..numerics.particles.sphere import SphereScenario, simulate_sphere
    from ..inputs.scenario import parse_init
    from ..weights import make_head, make_weights
    from .sphere_verdict import equiangular_curve
    from .verdict import classify_long_time

    d, n = res.d, res.n
    w = make_weights([make_head(res.kind, A=np.eye(d), V=np.eye(d), beta=beta)])
    run = simulate_sphere(X0, w, T, norm=res.norm, t_eval=res.times, max_seconds=max_seconds_point,
                          max_steps=max_steps)
    res.status.append(run.status)
    iu = np.triu_indices(n, 1)
    U = run.trajectory / np.linalg.norm(run.trajectory, axis=-1, keepdims=True)       # (nt, K, n, d)
    G = np.einsum("tkid,tkjd->tkij", U, U)[:, :, iu[0], iu[1]]
    reached = res.times <= run.t
    res.prob[b, reached] = (G >= 1 - delta).mean(axis=(1, 2))[reached]
    if res.kind != "sphere_causal":
        hit = equiangular_curve(res.norm, res.kind, n, beta, 0.0, T, threshold=1 - delta)[1]
        res.equiangular_time[b] = np.nan if hit is None else hit
    block = {"type": "uniform_sphere"}
    law = parse_init(block, d=d, geometry="sphere")
    v = classify_long_time(SphereScenario(w, res.norm, 1.0, block, T, 1.0, d, law=law), X0[0], T,
                           max_seconds=max_seconds_point)
    res.verdicts.append({"beta": beta, "outcome": v.outcome, "source": v.source, "label": v.label})


def save_sphere_sweep(res: SphereSweep, out) -> list[Path]:
    """Write ``out.npz``, ``out.csv`` (beta, t, probability) and ``out.png`` (the map with the equiangular
    curve)."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"kind": res.kind, "norm": res.norm, "d": res.d, "n": res.n, "K": res.K, "seed": res.seed,
            "delta": DELTA, "verdicts": res.verdicts, "status": res.status}
    np.savez(out.with_suffix(".npz"), betas=res.betas, times=res.times, prob=res.prob,
             equiangular_time=res.equiangular_time, meta=np.array(json.dumps(meta)))
    # a plain table (pandas.read_csv / numpy.genfromtxt(names=True) with no option); metadata beside it
    out.with_suffix(".meta.json").write_text(json.dumps({**{k: v for k, v in meta.items() if k != "verdicts"},
                                                         "columns": ["beta", "t", "prob_linked"]}) + "\n")
    with open(out.with_suffix(".csv"), "w") as fh:
        fh.write("beta,t,prob_linked\n")
        for b, beta in enumerate(res.betas):
            for t, p in zip(res.times, res.prob[b]):
                fh.write(f"{beta:.6g},{t:.6g},{p:.6g}\n")
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    m = ax.pcolormesh(res.times, res.betas, res.prob, shading="nearest", vmin=0, vmax=1, cmap="viridis")
    fig.colorbar(m, ax=ax, label=rf"P($\langle\theta_i,\theta_j\rangle \geq {1 - DELTA:g}$)")
    ok = np.isfinite(res.equiangular_time)
    if ok.any():
        ax.plot(res.equiangular_time[ok], res.betas[ok], "w--", lw=1.5, label="equiangular reduction")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("t")
    ax.set_ylabel(r"$\beta$")
    ax.set_title(f"{res.kind} ({res.norm}), n = {res.n}, d = {res.d}, {res.K} uniform clouds per β", fontsize=9)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    plt.close(fig)
    return [out.with_suffix(s) for s in (".npz", ".csv", ".meta.json", ".png")]
