"""Covariance-trajectory figures of README Mathematics §7, made with our own integrator and seeds.

All in ``d = 2``, mean 0 (invariant; the covariance ODE of these variants does not involve the mean), from the
trace-one grid ``Σ₀ = [[(1+u)/2, w/2], [w/2, (1-u)/2]]``, ``u² + w² < 0.95``.  Trajectories come from the
*generated* batched right-hand side (:meth:`symbolic_tpde.gaussian.GaussianODE.rhs_batch`)
integrated by the adaptive Dormand-Prince 5(4) of :mod:`.batch` (per-trajectory step control), with a
blow-up monitor; blown-up rows are classified (finite-time singularity vs exponential divergence) by
:func:`.clustering.classify_batch`.  Each family figure has one row per variant and three panels:

1. cone coordinates ``(a - b, 2c, a + b)`` of ``Σ = [[a, c], [c, b]]`` (the PSD cone drawn translucent),
   trajectories clipped at ``tr Σ ≤ 3``;
2. ``Σ / tr Σ`` in the unit disk (the circle = rank-one matrices);
3. ``tr Σ(t)`` against ``t`` on log-log axes: collapse decays like ``1/t``, blow-up shoots up at ``T*``,
   divergence grows exponentially.

Parameter conventions (as the authors' figures, README Mathematics §7): ``A = KᵀQ/√d`` for softmax and multi-head; ℓ2 uses
the same ``Q, K`` with ``τ = 2√d`` so that its cross term ``(2/τ)KᵀQ`` equals that ``A``; Sinkhorn uses
``A = KᵀQ``, ``ε = 1``.  Seeds are fixed per family (``FAMILIES``) and drawn with ``numpy.random.default_rng``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..model import Weights, make_head, make_weights

D = 2
SQ = np.sqrt(D)


# ------------------------------------------------------------------------------------------ parameters
def init_grid(n: int = 12, lim: float = 0.9, r2max: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Trace-one initial covariances on an ``n x n`` grid of ``(u, w) ∈ [-lim, lim]²`` with ``u² + w² < r2max``.

    Returns ``(Sigma0s (N, 2, 2), w (N,))`` (``w`` colours the trajectories).
    """
    u, w = np.meshgrid(np.linspace(-lim, lim, n), np.linspace(-lim, lim, n))
    u, w = u.ravel(), w.ravel()
    keep = u**2 + w**2 < r2max
    u, w = u[keep], w[keep]
    S = np.empty((len(u), 2, 2))
    S[:, 0, 0], S[:, 1, 1], S[:, 0, 1], S[:, 1, 0] = (1 + u) / 2, (1 - u) / 2, w / 2, w / 2
    return S, w


def variant_weights(kind: str, Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> Weights:
    """One head of ``kind`` from authors-style ``(Q, K, V)`` (module docstring conventions)."""
    if kind == "softmax":
        return make_weights([make_head("softmax", A=K.T @ Q / SQ, V=V)])
    if kind == "l2":
        return make_weights([make_head("l2", Q=Q, K=K, V=V, tau=2 * SQ)])
    if kind == "sinkhorn":
        return make_weights([make_head("sinkhorn", A=K.T @ Q, V=V)])
    raise ValueError(kind)


def multihead_weights(QK: list[tuple[np.ndarray, np.ndarray]], Vs: list[np.ndarray]) -> Weights:
    return make_weights([make_head("softmax", A=K.T @ Q / SQ, V=V) for (Q, K), V in zip(QK, Vs)])


def row_split_heads(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> Weights:
    """The authors' multi-head construction (README Mathematics §7): head ``h`` takes row ``h`` of ``Q`` and ``K``
    (``d_head = 1``, ``A_h = K_hᵀQ_h``) and all heads share ``V``.  Then ``Σ_h (VΣA_hΣ + ΣA_hᵀΣVᵀ) = VΣAΣ +
    ΣAᵀΣVᵀ`` with ``A = Σ_h A_h = KᵀQ`` (README Mathematics §3: heads add): the multi-head covariance flow is the
    single-head flow for ``KᵀQ`` (``√2`` times the softmax row's ``A``), so its outcomes are the softmax row's
    on a time axis scaled by ``1/√2``."""
    return make_weights([make_head("softmax", A=np.outer(K[h], Q[h]), V=V) for h in range(Q.shape[0])])


def _draw_until(rng, cond: Callable[[np.ndarray], bool], shape=(2, 2)) -> tuple[np.ndarray, np.ndarray]:
    while True:
        Q, K = rng.normal(size=shape), rng.normal(size=shape)
        S = K.T @ Q + Q.T @ K
        if cond(np.linalg.eigvalsh(S)):
            return Q, K


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    T: float
    seed: int
    variants: tuple[tuple[str, Weights], ...]
    colour_by: str = "w"      # "w" (starting off-diagonal) or "trace" (final trace)
    grid: int = 12
    lim: float = 0.9


def family_collapse(seed: int = 35) -> Family:
    rng = np.random.default_rng(seed)
    Q = rng.uniform(size=(2, 2))
    B = rng.normal(size=(2, 2))
    V = B @ B.T + 0.1 * np.eye(2)
    Q2 = rng.uniform(size=(2, 2))
    B2 = rng.normal(size=(2, 2))
    V2 = B2 @ B2.T + 0.1 * np.eye(2)
    vs = tuple((k, variant_weights(k, Q, -Q, V)) for k in ("softmax", "l2", "sinkhorn"))
    vs += (("multi-head (H=2)", multihead_weights([(Q, -Q), (Q2, -Q2)], [V / 2, V2 / 2])),)
    return Family("collapse", "collapse to a point: A = -QᵀQ/√2 ≺ 0, V SPD", 1e3, seed, vs)


def family_rank_one(seed: int = 36) -> Family:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(1, 2))
    q /= np.linalg.norm(q)
    vs = tuple((k, variant_weights(k, q, -q, np.eye(2))) for k in ("softmax", "l2", "sinkhorn"))
    vs += (("multi-head (H=2)", multihead_weights([(q, -q), (0.5 * q, -q)], [np.eye(2) / 2, np.eye(2) / 2])),)
    return Family("rank_one", f"rank-one limit on ker A = q⊥: A = -qᵀq/√2, V = I, q = {np.round(q[0], 3)}",
                  1e3, seed, vs)


def family_two_lines(seed: int = 44) -> Family:
    rng = np.random.default_rng(seed)
    Q, K = _draw_until(rng, lambda e: e[0] * e[1] < 0)
    V = rng.normal(size=(2, 2))
    vs = tuple((k, variant_weights(k, Q, K, V)) for k in ("softmax", "l2"))
    vs += (("multi-head (H=2, row split)", row_split_heads(Q, K, V)),)
    return Family("two_lines", "'two lines': indefinite A + Aᵀ, random V; limits (black) on a rank-one ray and a "
                  "rank-two branch", 1e3, seed, vs)


def family_explosion(seed: int = 33) -> Family:
    rng = np.random.default_rng(seed)
    Q, K = _draw_until(rng, lambda e: e.min() > 0)
    Q2, K2 = _draw_until(rng, lambda e: e.min() > 0)
    vs = tuple((k, variant_weights(k, Q, K, np.eye(2))) for k in ("softmax", "l2", "sinkhorn"))
    vs += (("multi-head (H=2)", multihead_weights([(Q, K), (Q2, K2)], [np.eye(2) / 2, np.eye(2) / 2])),)
    return Family("explosion", "A + Aᵀ ≻ 0, V = I: softmax/multi-head blow up, ℓ2/Sinkhorn only diverge",
                  20.0, seed, vs)


def family_initial_data(seed: int = 46) -> Family:
    rng = np.random.default_rng(seed)
    Q, K = _draw_until(rng, lambda e: e[0] * e[1] < 0)
    V = rng.normal(size=(2, 2))
    vs = tuple((k, variant_weights(k, Q, K, V)) for k in ("softmax", "l2"))
    vs += (("multi-head (H=2, row split)", row_split_heads(Q, K, V)),)
    return Family("initial_data", "indefinite A + Aᵀ, random V: the outcome depends on Σ₀", 1e3, seed, vs,
                  grid=16, lim=0.97)


FAMILIES: dict[str, Callable[[], Family]] = {
    "collapse": family_collapse, "rank_one": family_rank_one, "two_lines": family_two_lines,
    "explosion": family_explosion, "initial_data": family_initial_data,
}


# ------------------------------------------------------------------------------------------ computation
def batched_rhs(weights: Weights) -> Callable:
    """``F(t, Y)``: the ODE's batch evaluation (generated code, or the numeric-matrix backend's row loop)."""
    from ..gaussian import GaussianODE

    ode = GaussianODE.from_weights(weights)
    p = ode.params(0.0)
    return lambda t, Y: ode.rhs_batch(t, Y, p)


@dataclass
class Trajectories:
    t: np.ndarray            # (K,) output times
    Sig: np.ndarray          # (K, N, 2, 2), NaN after a row stopped
    Sig_end: np.ndarray      # (N, 2, 2) last state (the stop for blown-up rows)
    t_end: np.ndarray        # (N,)
    labels: list[str]        # classification per row
    blowup_times: np.ndarray  # (N,) NaN unless blow-up


def compute(weights: Weights, Sigma0s: np.ndarray, T: float, n_out: int = 160, rtol: float = 1e-7,
            extend: float = 100.0, diverge_factor: float = 1.0) -> Trajectories:
    """Classify every row (:func:`.clustering.classify_batch` at ``T``; rows still ``"undetermined"`` there are
    classified again at ``extend·T``, which settles directions whose decay time lies between the two), then
    integrate the dense output.  Rows stop at ``tr Σ = 10⁶ tr Σ₀``; rows that diverge without blow-up
    run on to ``10⁶·diverge_factor·tr Σ₀`` (or ``T``), so that ``Σ/tr Σ`` can approach its rank-one limit
    (default 1: a larger factor makes ℓ2 rows, whose right-hand side involves ``Σ⁻¹``, very slow): for exponential growth the ratio of eigenvalues decays like ``e^{-(rate gap) t}`` while the trace
    grows like ``e^{(top rate) t}``, so stopping at ``10⁶`` would cut it off early."""
    from .batch import dopri5_batch, trace_monitor
    from .clustering import classify_batch

    F = batched_rhs(weights)
    N = len(Sigma0s)
    Y0 = np.concatenate([np.zeros((N, 2)), Sigma0s[:, 0, :], Sigma0s[:, 1, 1:]], axis=1)
    tr0 = np.trace(Sigma0s, axis1=1, axis2=2)
    cls = classify_batch(F, Sigma0s, T=T, rtol=rtol)
    und = [i for i, c in enumerate(cls) if c.kind == "undetermined"]
    if und and extend > 1:
        for i, c in zip(und, classify_batch(F, Sigma0s[und], T=extend * T, rtol=rtol)):
            cls[i] = c
    T_plot = max([T] + [extend * T for i in und if cls[i].kind != "undetermined"])
    t_eval = np.concatenate([[0.0], np.geomspace(1e-3, T_plot, n_out)])
    base = np.where([c.kind == "diverge" for c in cls], tr0 * diverge_factor, tr0)
    res = dopri5_batch(F, 0.0, Y0, T_plot, rtol=rtol, atol=1e-12, t_eval=t_eval,
                       monitor=trace_monitor(2, 2, blowup_factor=1e6, base=base), max_steps=50_000)

    def mats(Y):
        S = np.empty(Y.shape[:-1] + (2, 2))
        S[..., 0, 0], S[..., 0, 1], S[..., 1, 0], S[..., 1, 1] = Y[..., 2], Y[..., 3], Y[..., 3], Y[..., 4]
        return S

    bt = np.array([c.blowup_time if c.blowup_time is not None else np.nan for c in cls])
    return Trajectories(t_eval, mats(res.ys), mats(res.y), res.t, [c.label() for c in cls], bt)


# ------------------------------------------------------------------------------------------ plotting
def cone_xyz(S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return S[..., 0, 0] - S[..., 1, 1], 2 * S[..., 0, 1], S[..., 0, 0] + S[..., 1, 1]


def _paths(tr: Trajectories) -> list[np.ndarray]:
    """Per row: (K_i, 2, 2) finite part of the dense output followed by the end state."""
    out = []
    for i in range(tr.Sig.shape[1]):
        S = tr.Sig[:, i]
        ok = np.all(np.isfinite(S), axis=(1, 2))
        out.append(np.concatenate([S[ok], tr.Sig_end[i][None]]))
    return out


def cone_height(tr: Trajectories) -> float:
    """Height of the drawn cone: ``1.05 max tr Σ`` over rows that converge (their whole path), at least the
    start (``tr Σ₀ = 1``) and at most 3 (growing rows are clipped there)."""
    conv = [i for i, lab in enumerate(tr.labels) if lab not in ("blowup", "diverge")]
    z = [np.nanmax(np.trace(P, axis1=1, axis2=2)) for i, P in enumerate(_paths(tr)) if i in conv]
    return float(min(3.0, 1.05 * max([1.0] + z))) if conv else 3.0


def draw_cone(ax, tr: Trajectories, colours, zmax: float | None = None) -> None:
    zmax = cone_height(tr) if zmax is None else zmax
    th = np.linspace(0, 2 * np.pi, 60)
    z = np.linspace(0, zmax, 12)
    Th, Z = np.meshgrid(th, z)
    ax.plot_surface(Z * np.cos(Th), Z * np.sin(Th), Z, alpha=0.08, color="grey", linewidth=0)
    for P, c in zip(_paths(tr), colours):
        x, y, zz = cone_xyz(P)
        keep = zz <= zmax
        cut = np.argmin(keep) if not keep.all() else len(zz)
        ax.plot(x[:cut], y[:cut], zz[:cut], color=c, lw=0.8)
        ax.scatter(x[:1], y[:1], zz[:1], color=c, s=4)
        if keep[-1]:
            ax.scatter(x[-1:], y[-1:], zz[-1:], color="k", s=5)
    ax.set_xlabel("$a - b$")
    ax.set_ylabel("$2c$")
    ax.set_zlabel(r"$a + b = \mathrm{tr}\,\Sigma$")
    ax.set_zlim(0, zmax)


def draw_disk(ax, tr: Trajectories, colours) -> None:
    th = np.linspace(0, 2 * np.pi, 200)
    ax.plot(np.cos(th), np.sin(th), "k-", lw=1)
    for P, c in zip(_paths(tr), colours):
        x, y, z = cone_xyz(P)
        ax.plot(x / z, y / z, color=c, lw=0.8)
        ax.plot(x[-1] / z[-1], y[-1] / z[-1], "k.", ms=3)
    ax.set_aspect("equal")
    ax.set_xlim(-1.05, 1.05)
    ax.set_ylim(-1.05, 1.05)
    ax.set_xlabel(r"$(a - b)/\mathrm{tr}\,\Sigma$")
    ax.set_ylabel(r"$2c/\mathrm{tr}\,\Sigma$")


def draw_trace(ax, tr: Trajectories, colours) -> None:
    for P, t_i, tend, c in zip(_paths(tr), range(len(colours)), tr.t_end, colours):
        ok = np.all(np.isfinite(tr.Sig[:, t_i]), axis=(1, 2))
        ts = np.concatenate([tr.t[ok], [tend]])
        z = np.trace(P, axis1=1, axis2=2)
        ax.loglog(np.maximum(ts, 1e-3), z, color=c, lw=0.7)
    ax.set_xlabel("$t$")
    ax.set_ylabel(r"$\mathrm{tr}\,\Sigma(t)$")
    ax.axhline(1.0, color="grey", lw=0.5, ls=":")


def summary(tr: Trajectories) -> str:
    from collections import Counter

    cnt = Counter(tr.labels)
    s = ", ".join(f"{k}: {v}" for k, v in sorted(cnt.items()))
    if np.isfinite(tr.blowup_times).any():
        s += f"; T* in [{np.nanmin(tr.blowup_times):.3g}, {np.nanmax(tr.blowup_times):.3g}]"
    return s


def make_family_figure(fam: Family, out_dir: Path, formats=("png", "pdf")) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S0, w = init_grid(fam.grid, fam.lim)
    nv = len(fam.variants)
    fig = plt.figure(figsize=(16, 4.4 * nv))
    cmap = plt.get_cmap("viridis")
    for r, (label, weights) in enumerate(fam.variants):
        tr = compute(weights, S0, fam.T)
        norm = matplotlib.colors.Normalize(-1.0, 1.0)
        colours = cmap(norm(w))
        ax1 = fig.add_subplot(nv, 3, 3 * r + 1, projection="3d")
        draw_cone(ax1, tr, colours)
        ax1.set_title(f"{label}: cone", fontsize=10)
        ax2 = fig.add_subplot(nv, 3, 3 * r + 2)
        draw_disk(ax2, tr, colours)
        ax2.set_title(rf"{label}: $\Sigma/\mathrm{{tr}}\,\Sigma$", fontsize=10)
        fig.colorbar(matplotlib.cm.ScalarMappable(norm, cmap), ax=ax2, fraction=0.046, pad=0.04,
                     label=r"initial $w = 2\Sigma_{0,01}$")
        ax3 = fig.add_subplot(nv, 3, 3 * r + 3)
        draw_trace(ax3, tr, colours)
        ax3.set_title(f"{label}: {summary(tr)}", fontsize=8)
    fig.suptitle(f"{fam.title}  (seed {fam.seed}, {len(S0)} initial Σ₀, horizon T = {fam.T:g}, "
                 "adaptive DOPRI5 on the generated RHS)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return save(fig, out_dir, f"fig_{fam.name}", formats)


def save(fig, out_dir: Path, stem: str, formats) -> list[Path]:
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in formats:
        p = out_dir / f"{stem}.{ext}"
        fig.savefig(p, dpi=110, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    return paths
