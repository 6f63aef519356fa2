"""Covariance-trajectory figures of README Mathematics §7, made with our own integrator and seeds.

All in ``d = 2``, mean 0 (invariant; the covariance ODE of these variants does not involve the mean), from the
trace-one grid ``Σ₀ = [[(1+u)/2, w/2], [w/2, (1-u)/2]]``, ``u² + w² < 0.95``.  Trajectories come from the
*generated* batched right-hand side (:meth:`symbolic_tpde.gaussian.GaussianODE.rhs_batch`)
integrated by the adaptive Dormand-Prince 5(4) of :mod:`.batch` (per-trajectory step control), with a
blow-up monitor; every row is classified by :func:`.verdict.classify_many`, the rules of ``tpde classify``.  Each family figure has one row per variant and three panels:

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

from ..weights import Weights, make_head, make_weights

D = 2
SQ = np.sqrt(D)
SINKHORN_EPS_FACTOR = 10.0   # explosion family: Sinkhorn ε = 10‖A‖₂ (family_explosion docstring)


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
    horizons: tuple[tuple[str, float], ...] = ()   # per-variant horizon overriding T (variant label, T)
    note: str = ""            # stated under the title (e.g. why a variant has no row)

    def horizon(self, label: str) -> float:
        return dict(self.horizons).get(label, self.T)


#: row labels as drawn (mathtext); the variant keys stay plain for code that looks rows up by name
DISPLAY = {"softmax": "softmax", "l2": r"$\ell_2$", "sinkhorn": "Sinkhorn"}


def display(label: str) -> str:
    return DISPLAY.get(label, label)


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
    return Family("collapse", r"collapse to a point: $A = -Q^\top Q/\sqrt{2} \prec 0$, $V = BB^\top + 0.1I$ SPD",
                  1e3, seed, vs)


def family_rank_one(seed: int = 36) -> Family:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(1, 2))
    q /= np.linalg.norm(q)
    vs = tuple((k, variant_weights(k, q, -q, np.eye(2))) for k in ("softmax", "l2", "sinkhorn"))
    vs += (("multi-head (H=2)", multihead_weights([(q, -q), (0.5 * q, -q)], [np.eye(2) / 2, np.eye(2) / 2])),)
    return Family("rank_one", r"rank-one limit on $\ker A = q^\perp$: $A = -q^\top q/\sqrt{2}$, $V = I$, "
                  rf"$q = ({q[0, 0]:.3f}, {q[0, 1]:.3f})$", 1e3, seed, vs)


NO_SINKHORN = ("no Sinkhorn row: README Mathematics §4 states only global existence for Sinkhorn "
               r"($\|\Sigma(t)\| \leq \|\Sigma_0\|e^{2\|V\|t}$), no limit for indefinite $A + A^\top$ and random $V$")


def family_two_lines(seed: int = 44) -> Family:
    rng = np.random.default_rng(seed)
    Q, K = _draw_until(rng, lambda e: e[0] * e[1] < 0)
    V = rng.normal(size=(2, 2))
    vs = tuple((k, variant_weights(k, Q, K, V)) for k in ("softmax", "l2"))
    vs += (("multi-head (H=2, row split)", row_split_heads(Q, K, V)),)
    return Family("two_lines", r"'two lines': indefinite $A + A^\top$, random $V$; limits (black) $s\,uu^\top$ with "
                  r"$u^\top A u = 0$ (red: the two isotropic lines of $A + A^\top$)", 1e3, seed, vs,
                  note=NO_SINKHORN)


def family_explosion(seed: int = 33) -> Family:
    """``A + Aᵀ ≻ 0``, ``V = I`` (authors' draw, seed 33).  Sinkhorn is run with ``ε = 10‖A‖₂`` instead of the
    authors' ``ε = 1``: for ``ε ≫ ‖A‖ tr Σ₀`` the fixed point ``C = ΣAᵀ(Σ - CᵀΣ⁻¹C)/ε`` is
    ``C = ΣAᵀΣ/ε + O(‖A‖²‖Σ‖³/ε²)``, so ``dΣ/dt = Σ(A + Aᵀ)Σ/ε + …``: the softmax ``V = I`` Riccati flow on the
    time scale ``ε``, which drives ``Σ/tr Σ`` towards rank one as it approaches its blow-up time; once
    ``‖Σ‖ ≳ ε/‖A‖`` the plan is nearly a Monge map and ``Σ`` grows like ``e^{2t}`` in every direction whose
    eigenvalue has left the slow regime, so the small eigenvalue, still at ``O(tr Σ₀)``, lags the large one by
    the time ``~ε/(2‖A‖λ_min)`` it takes to escape (1-D closed form ``C = (√(1 + 4a²σ⁴) - 1)/(2a)``).  With
    ``ε = 1`` and ``‖A‖ ≈ 3.5`` both eigenvalues leave the slow regime early and ``Σ/tr Σ`` freezes at an
    interior shape (measured on a 36-point grid: ``λ_min/tr Σ`` up to 0.46 at ``tr Σ = 10⁶``); with
    ``ε = 10‖A‖₂`` at most ``1.5·10⁻⁴`` (median ``2·10⁻⁷``).
    (Equivalently, by the scaling ``Σ → εΣ``: ``ε = 1`` from ``tr Σ₀ = 1/ε``.)  The Sinkhorn row runs to
    ``T = 100`` (its Riccati phase lasts ``~ε T*``)."""
    rng = np.random.default_rng(seed)
    Q, K = _draw_until(rng, lambda e: e.min() > 0)
    Q2, K2 = _draw_until(rng, lambda e: e.min() > 0)
    vs = tuple((k, variant_weights(k, Q, K, np.eye(2))) for k in ("softmax", "l2"))
    eps = SINKHORN_EPS_FACTOR * float(np.linalg.norm(K.T @ Q, 2))
    vs += (("sinkhorn", make_weights([make_head("sinkhorn", A=K.T @ Q, V=np.eye(2), epsilon=eps)])),)
    vs += (("multi-head (H=2)", multihead_weights([(Q, K), (Q2, K2)], [np.eye(2) / 2, np.eye(2) / 2])),)
    return Family("explosion", r"$A + A^\top \succ 0$, $V = I$: softmax/multi-head blow up, $\ell_2$/Sinkhorn "
                  r"only diverge; $\Sigma/\mathrm{tr}\,\Sigma \to$ rank one (unit circle; how close: "
                  r"end $\lambda_{min}/\mathrm{tr}\,\Sigma$ per row)", 20.0, seed, vs,
                  horizons=(("sinkhorn", 100.0),),
                  note=rf"Sinkhorn: $A = K^\top Q$, $\varepsilon = {SINKHORN_EPS_FACTOR:g}\|A\|_2 = {eps:.3g}$ "
                  r"($\gg \|A\|\,\mathrm{tr}\,\Sigma_0$: Riccati phase first, then exponential growth; "
                  r"with $\varepsilon = 1$ the shape freezes inside the disk), horizon 100")


def family_initial_data(seed: int = 46) -> Family:
    rng = np.random.default_rng(seed)
    Q, K = _draw_until(rng, lambda e: e[0] * e[1] < 0)
    V = rng.normal(size=(2, 2))
    vs = tuple((k, variant_weights(k, Q, K, V)) for k in ("softmax", "l2"))
    vs += (("multi-head (H=2, row split)", row_split_heads(Q, K, V)),)
    return Family("initial_data", r"indefinite $A + A^\top$, random $V$: the outcome depends on $\Sigma_0$ "
                  r"(red: isotropic lines of $A + A^\top$)", 1e3, seed, vs, grid=16, lim=0.97, note=NO_SINKHORN)


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
    """Classify every row by the package's one classifier (:func:`.verdict.classify_many`: the theorems per
    point, then the batched numerics with the decision rule of ``tpde classify``) at ``T``; rows still
    ``"undetermined"`` there are classified again at ``extend·T``, which settles directions whose decay time lies
    between the two; then integrate the dense output.  Rows stop at ``tr Σ = 10⁶ tr Σ₀``; rows that diverge
    without blow-up run on to ``10⁶·diverge_factor·tr Σ₀`` (or ``T``), so that ``Σ/tr Σ`` can approach its
    rank-one limit (default 1: a larger factor makes ℓ2 rows, whose right-hand side involves ``Σ⁻¹``, very
    slow): for exponential growth the ratio of eigenvalues decays like ``e^{-(rate gap) t}`` while the trace
    grows like ``e^{(top rate) t}``, so stopping at ``10⁶`` would cut it off early."""
    from ..numerics.ode.rk import Status, rk_solve
    from ..analysis.verdict import classify_many

    F = batched_rhs(weights)
    N = len(Sigma0s)
    Y0 = np.concatenate([np.zeros((N, 2)), Sigma0s[:, 0, :], Sigma0s[:, 1, 1:]], axis=1)
    tr0 = np.trace(Sigma0s, axis1=1, axis2=2)
    cls = classify_many(weights, Sigma0s, T=T, rtol=rtol)
    und = [i for i, c in enumerate(cls) if c.outcome == "undetermined"]
    if und and extend > 1:
        for i, c in zip(und, classify_many(weights, Sigma0s[und], T=extend * T, rtol=rtol)):
            cls[i] = c
    T_plot = max([T] + [extend * T for i in und if cls[i].outcome != "undetermined"])
    t_eval = np.concatenate([[0.0], np.geomspace(1e-3, T_plot, n_out)])
    bt = np.array([c.blowup_time if c.outcome == "blowup" else np.nan for c in cls])
    if np.isfinite(bt).any():
        # samples approaching each blow-up time T* (Riccati: tr Σ ~ 1/(T* - t), so the stop at 10⁶ tr Σ₀ comes
        # at T* - t ~ 1e-6 T*), else the disk panel joins the last sample to the end state by a chord
        near = np.outer(bt[np.isfinite(bt)], 1.0 - np.geomspace(1e-6, 0.5, 24)).ravel()
        t_eval = np.unique(np.concatenate([t_eval, near[(near > 0) & (near < T_plot)]]))
    # the plotted range: a row stops at tr Σ = 10⁶·base (a display cut, not a blow-up test)
    cut = 1e6 * np.where([c.outcome == "diverge" for c in cls], tr0 * diverge_factor, tr0)
    res = rk_solve(F, 0.0, Y0, T_plot, rtol=rtol, atol=1e-12, t_eval=t_eval, max_steps=50_000,
                   monitor=lambda acc: np.where(acc.y1[:, 2] + acc.y1[:, 4] > cut[acc.rows], Status.OVERFLOW, None))

    def mats(Y):
        S = np.empty(Y.shape[:-1] + (2, 2))
        S[..., 0, 0], S[..., 0, 1], S[..., 1, 0], S[..., 1, 1] = Y[..., 2], Y[..., 3], Y[..., 3], Y[..., 4]
        return S

    return Trajectories(t_eval, mats(res.ys), mats(res.y), res.t, [c.short for c in cls], bt)


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
    """Height of the drawn cone: ``1.05 max tr Σ`` over rows that converge (their whole path, so every limit
    is inside the box), at least the start (``tr Σ₀ = 1``); 3 when every row grows.  Growing rows are clipped
    at this height."""
    conv = [i for i, lab in enumerate(tr.labels) if lab not in ("blowup", "diverge")]
    z = [np.nanmax(np.trace(P, axis1=1, axis2=2)) for i, P in enumerate(_paths(tr)) if i in conv]
    return float(1.05 * max([1.0] + z)) if conv else 3.0


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
        s += f"; $T^*$ in [{np.nanmin(tr.blowup_times):.3g}, {np.nanmax(tr.blowup_times):.3g}]"
    # distance of the last state from rank one (0 on the unit circle of the disk panel)
    lam = np.linalg.eigvalsh(tr.Sig_end)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = lam[:, 0] / lam.sum(axis=1)
    if np.isfinite(r).any():
        s += "\n" + rf"end $\lambda_{{min}}/\mathrm{{tr}}\,\Sigma$: median {np.nanmedian(r):.1g}, max {np.nanmax(r):.1g}"
    return s


def isotropic_dirs(weights: Weights) -> list[np.ndarray]:
    """Unit ``u`` with ``uᵀ(A + Aᵀ)u = 0`` for the summed cross term ``A`` (softmax ``A``, ℓ2 ``(2/τ)KᵀQ``,
    heads added); empty unless ``A + Aᵀ`` is indefinite.  For ``d = 2`` these are the two lines on which the
    rank-one equilibria ``s uuᵀ`` of the indefinite families lie (``VΣAΣ = s²(uᵀAu)Vuuᵀ = 0``, and for ℓ2
    ``JΣ ∝ (uᵀKᵀQu)``); in the disk ``uuᵀ`` is the point ``(cos 2φ, sin 2φ)`` for ``u = (cos φ, sin φ)``."""
    A = np.zeros((D, D))
    for h in weights.heads:
        if h.kind == "softmax":
            A = A + h.params["A"]
        elif h.kind == "l2":
            A = A + 2.0 / float(h.params["tau"]) * h.params["K"].T @ h.params["Q"]
        else:
            return []
    lam, U = np.linalg.eigh(A + A.T)
    tol = 1e-12 * max(1.0, float(np.abs(lam).max()))  # round-off of eigh on O(1) entries (semidefinite A)
    if not lam[0] < -tol < tol < lam[1]:
        return []
    # u = cos θ U₀ + sin θ U₁ with λ₀cos²θ + λ₁sin²θ = 0
    th = np.arctan(np.sqrt(-lam[0] / lam[1]))
    return [np.cos(th) * U[:, 0] + sg * np.sin(th) * U[:, 1] for sg in (1.0, -1.0)]


PANELS = ("cone", "disk", "trace")


def _slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label).strip("_").replace("__", "_")


def draw_panel(fig, ax, which: str, label: str, tr: Trajectories, colours, weights: Weights, norm, cmap) -> None:
    """One of the three panels of a family row (module docstring) on ``ax``; the disk gets the colour bar
    (one meaning in every family: the initial off-diagonal ``w``) and the isotropic lines (red)."""
    import matplotlib

    name = display(label)
    if which == "cone":
        draw_cone(ax, tr, colours)
        ax.set_title(f"{name}: cone", fontsize=10)
    elif which == "disk":
        draw_disk(ax, tr, colours)
        for u in isotropic_dirs(weights):
            ax.plot([u[0] ** 2 - u[1] ** 2], [2 * u[0] * u[1]], "r+", ms=12, mew=2)
        ax.set_title(rf"{name}: $\Sigma/\mathrm{{tr}}\,\Sigma$", fontsize=10)
        fig.colorbar(matplotlib.cm.ScalarMappable(norm, cmap), ax=ax, fraction=0.046, pad=0.04,
                     label=r"initial $w = 2\Sigma_{0,12}$")
    else:
        draw_trace(ax, tr, colours)
        # the run may be longer than the family's horizon (rows re-classified at extend·T): say so
        ax.set_title(f"{name}: {summary(tr)}, drawn to $t = {tr.t[-1]:g}$", fontsize=8)


def make_family_figure(fam: Family, out_dir: Path, formats=("png", "pdf"), panels: bool = False) -> list[Path]:
    """The family's canvas ``fig_<name>`` (one row per variant, three panels); with ``panels=True`` also one
    file per panel, ``fig_<name>_<variant>_<cone|disk|trace>`` (same data, same colours), in addition to the
    canvas.  Returns the paths written (canvas first)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    S0, w = init_grid(fam.grid, fam.lim)
    nv = len(fam.variants)
    fig = plt.figure(figsize=(16, 4.4 * nv))
    cmap = plt.get_cmap("viridis")
    norm = matplotlib.colors.Normalize(-1.0, 1.0)
    colours = cmap(norm(w))
    extra: list[Path] = []
    horizons = []
    for r, (label, weights) in enumerate(fam.variants):
        tr = compute(weights, S0, fam.horizon(label))
        horizons.append(fam.horizon(label))
        for k, which in enumerate(PANELS):
            kw = {"projection": "3d"} if which == "cone" else {}
            draw_panel(fig, fig.add_subplot(nv, 3, 3 * r + k + 1, **kw), which, label, tr, colours, weights, norm,
                       cmap)
            if panels:
                f1 = plt.figure(figsize=(5.6, 4.6) if which != "trace" else (5.2, 4.2))
                draw_panel(f1, f1.add_subplot(1, 1, 1, **kw), which, label, tr, colours, weights, norm, cmap)
                f1.tight_layout()
                extra += save(f1, out_dir, f"fig_{fam.name}_{_slug(label)}_{which}", formats)
    hz = f"horizon T = {fam.T:g}" + ("" if len(set(horizons)) == 1 else
                                     " (" + ", ".join(f"{display(lab)}: {t:g}" for lab, t in fam.horizons) + ")")
    fig.suptitle(f"{fam.title}\n(seed {fam.seed}, {len(S0)} initial $\\Sigma_0$, {hz}, adaptive DOPRI5 on the "
                 "generated RHS)" + (f"\n{fam.note}" if fam.note else ""), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97 if not fam.note else 0.955))
    return save(fig, out_dir, f"fig_{fam.name}", formats) + extra


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
