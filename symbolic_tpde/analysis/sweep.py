"""Phase diagrams: sweep the spectrum of ``A + Aᵀ`` (and ``V``) and classify the covariance dynamics.

Grid (``d = 2``, softmax): ``A = R(θ) diag(s₁, s₂) R(θ)ᵀ / 2`` (so ``A + Aᵀ`` has eigenvalues ``s₁, s₂``) for
``(s₁, s₂)`` on an ``n x n`` grid, ``V = diag(v₁, v₂)``.  At each point ``K`` initial covariances
``Σ₀ = GGᵀ + 0.1 I`` (``G`` standard normal, ``rng = default_rng([seed, point index])``, so every point is
reproducible on any worker) are integrated in one batch (:func:`.clustering.classify_batch`, generated RHS with
per-row parameters) to horizon ``T``.  Per point: the fraction of each outcome, the majority phase and the
median blow-up time.  Phases: 0 collapse, 1 low rank (rank 1), 2 full rank (rank 2), 3 diverge, 4 blow-up,
5 undetermined.

Execution: the grid is cut into chunks (rows of the grid) evaluated by :func:`sweep_chunk`, a pure module-level
function, on a local ``concurrent.futures.ProcessPoolExecutor`` (``workers``) or, with ``scheduler``, on a Dask
distributed cluster (``dask.distributed.Client(address).map``).  The results are identical either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

PHASES = ("collapse", "low rank", "full rank", "diverge", "blow-up", "undetermined")


@dataclass(frozen=True)
class SweepSpec:
    n: int = 9
    smin: float = -1.0
    smax: float = 1.0
    v: tuple[float, float] = (1.0, 1.0)
    theta: float = 0.4
    K: int = 8
    T: float = 1e3
    seed: int = 0

    def points(self) -> np.ndarray:
        s = np.linspace(self.smin, self.smax, self.n)
        s1, s2 = np.meshgrid(s, s, indexing="ij")
        return np.stack([s1.ravel(), s2.ravel()], axis=1)


def _phase_of(label: str) -> int:
    if label == "collapse":
        return 0
    if label.startswith("rank"):
        return 1 if label == "rank 1" else 2
    return {"diverge": 3, "blowup": 4}.get(label, 5)


def sweep_chunk(spec: SweepSpec, indices: list[int]) -> list[tuple[int, np.ndarray, float]]:
    """Classify the grid points ``indices``; returns ``(index, outcome counts (6,), median T* or NaN)``."""
    from ..gaussian import GaussianODE
    from ..model import make_head, make_weights
    from .clustering import classify_batch

    pts = spec.points()
    c, s = np.cos(spec.theta), np.sin(spec.theta)
    R = np.array([[c, -s], [s, c]])
    V = np.diag(spec.v)
    out = []
    ode = None
    for i in indices:
        A = R @ np.diag(pts[i]) @ R.T / 2
        w = make_weights([make_head("softmax", A=A, V=V)])
        ode = GaussianODE.from_weights(w) if ode is None else ode
        p = GaussianODE.from_weights(w).params(0.0)
        rng = np.random.default_rng([spec.seed, i])
        G = rng.normal(size=(spec.K, 2, 2))
        S0 = G @ G.transpose(0, 2, 1) + 0.1 * np.eye(2)
        res = classify_batch(lambda t, Y, p=p: ode.rhs_batch(t, Y, p), S0, T=spec.T)
        counts = np.zeros(len(PHASES), dtype=int)
        for r in res:
            counts[_phase_of(r.label())] += 1
        bt = [r.blowup_time for r in res if r.kind == "blowup"]
        out.append((i, counts, float(np.median(bt)) if bt else float("nan")))
    return out


@dataclass
class SweepResult:
    spec: SweepSpec
    points: np.ndarray        # (P, 2)
    counts: np.ndarray        # (P, 6)
    phase: np.ndarray         # (P,) majority phase
    blowup_time: np.ndarray   # (P,) median T* (NaN if none)


def warm_worker() -> None:
    """Derive and load the sweep's generated right-hand side once in this process (pool initializer)."""
    sweep_chunk(SweepSpec(n=1, K=1, T=1.0), [0])


def run_sweep(spec: SweepSpec, *, workers: int = 1, scheduler: str | None = None, executor=None) -> SweepResult:
    """Evaluate the grid serially (``workers=1``), on a new local process pool, on a given
    ``concurrent.futures`` ``executor`` (reused across sweeps, e.g. warmed with :func:`warm_worker`), or on
    a Dask cluster at ``scheduler``."""
    pts = spec.points()
    chunks = [list(range(r * spec.n, (r + 1) * spec.n)) for r in range(spec.n)]
    if executor is not None:
        parts = list(executor.map(sweep_chunk, [spec] * len(chunks), chunks))
    elif scheduler is not None:
        from dask.distributed import Client

        with Client(scheduler) as client:
            futures = client.map(sweep_chunk, [spec] * len(chunks), chunks, pure=False)
            parts = client.gather(futures)
    elif workers <= 1:
        parts = [sweep_chunk(spec, ch) for ch in chunks]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as ex:
            parts = list(ex.map(sweep_chunk, [spec] * len(chunks), chunks))
    counts = np.zeros((len(pts), len(PHASES)), dtype=int)
    bt = np.full(len(pts), np.nan)
    for part in parts:
        for i, c, b in part:
            counts[i], bt[i] = c, b
    return SweepResult(spec, pts, counts, counts.argmax(axis=1), bt)


def save_sweep(res: SweepResult, out: Path) -> list[Path]:
    """Write ``out.npz``, ``out.csv`` and ``out.png`` (phase map and median blow-up time)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out.with_suffix(".npz"), points=res.points, counts=res.counts, phase=res.phase,
             blowup_time=res.blowup_time, phases=np.array(PHASES), spec=np.array(repr(res.spec)))
    with open(out.with_suffix(".csv"), "w") as fh:
        fh.write("s1,s2," + ",".join(p.replace(" ", "_") for p in PHASES) + ",phase,median_blowup_time\n")
        for (s1, s2), c, ph, b in zip(res.points, res.counts, res.phase, res.blowup_time):
            fh.write(f"{s1:.6g},{s2:.6g}," + ",".join(map(str, c)) + f",{PHASES[ph]},{b:.10g}\n")
    n = res.spec.n
    s = np.linspace(res.spec.smin, res.spec.smax, n)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 5))
    cmap = ListedColormap(["tab:green", "tab:blue", "tab:cyan", "tab:orange", "tab:red", "grey"])
    a1.pcolormesh(s, s, res.phase.reshape(n, n).T, cmap=cmap, vmin=-0.5, vmax=5.5, shading="nearest")
    for k, name in enumerate(PHASES):
        a1.plot([], [], "s", color=cmap(k), label=name)
    a1.legend(fontsize=8, loc="upper left")
    a1.set_xlabel("s₁ (eigenvalue of A + Aᵀ)")
    a1.set_ylabel("s₂")
    a1.set_title(f"majority phase of {res.spec.K} random Σ₀ per point, V = diag{res.spec.v}, T = {res.spec.T:g}")
    im = a2.pcolormesh(s, s, np.log10(res.blowup_time.reshape(n, n)).T, shading="nearest")
    fig.colorbar(im, ax=a2, label="log10 median blow-up time")
    a2.set_xlabel("s₁")
    a2.set_ylabel("s₂")
    a2.set_title("median blow-up time (blank: no blow-up)")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)
    plt.close(fig)
    return [out.with_suffix(x) for x in (".npz", ".csv", ".png")]
