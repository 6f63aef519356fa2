"""Rank histograms (d = 3, 4, 5) and token clouds next to the Gaussian ODE (README Mathematics §6-7, README Mathematics §7).

Rank histograms (horizon ``T = 10⁶``: with ``V = BᵀB`` the smallest eigenvalue of ``V`` can be ``~10⁻⁴``, which
slows the ``O(1/t)`` decay so much that at ``T = 10⁴`` some draws still look full rank): ``A = -QᵀQ/√d`` with ``Q ∈ R^{⌊d/2⌋×d}`` (so ``dim ker(A + Aᵀ) = ⌈d/2⌉``), rows ``V = I`` and
``V = BᵀB`` (``B`` standard normal), one ``Σ₀ = GGᵀ`` per draw; each ``(Q, V, Σ₀)`` is classified by
:func:`.verdict.classify_many` (the rules of ``tpde classify``) at horizon ``T`` with all parameter sets integrated in one batch (per-row
parameter vectors through :meth:`~symbolic_tpde.gaussian.GaussianODE.rhs_batch`).  Two counts are drawn: the persistence rank of
our classifier and the authors' rule "eigenvalues of ``Σ(T)`` above 0.1" (which undercounts small limits).
ℓ2 uses ``K = -Q`` and ``τ = 2√d`` (same cross term as softmax).

Token clouds: ``n`` particles drawn from ``N(0, Σ₀)`` evolved by :func:`symbolic_tpde.numerics.particles.simulate.simulate`
(RK4), their empirical covariance ellipse (dashed) against the Gaussian ODE's ellipse (solid, DOP853 on the
generated right-hand side); ellipses are the 2-standard-deviation level sets.  Clouds are drawn centred on their
sample mean: with ``V = I`` the mean obeys ``dα/dt = α + ΣAα``, so the sample mean's ``O(n^{-1/2})`` offset from 0
grows like ``e^t`` and would carry the cloud off the panel.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from ..weights import make_head, make_weights
from .figures import save


def rank_samples(kind: str, d: int, v_random: bool, n: int, seed: int, T: float = 1e4,
                 extend: tuple[float, ...] = (), stiff_T: float | None = 1e8, stiff_nfev: int = 40_000):
    """Classify ``n`` random ``(Q, V, Σ₀)`` (module docstring); returns (ranks, threshold ranks, labels).

    The limit rank is at most ``dim ker(A + Aᵀ) = ⌈d/2⌉`` (README Mathematics §4: ``tr(V⁻¹Σ)`` decreases
    and ``Σ*(A + Aᵀ)Σ* = 0``).  A persistence rank above it, or ``"undetermined"``, means a direction had not
    reached its decaying regime by ``T`` (ill-conditioned ``V = BᵀB`` slows the ``O(1/t)`` decay by its
    smallest eigenvalue).  Such rows are classified again at ``extend[k]·T`` (default none: with ``V = BᵀB``
    the flow is stiff, an explicit run to ``10⁸`` took minutes per row on the shared machine); softmax rows with
    ``V = I`` are decided by the classifier's theorem (the closed-form limit ``Σ* = U(UᵀΣ₀⁻¹U)⁻¹Uᵀ``, rank
    ``dim ker(A + Aᵀ)``).  Rows still unresolved are reported
    as ``-1``, never as a rank the theorem excludes.  Rows still open after that are continued alone by the
    implicit Radau method with the generated Jacobian to ``stiff_T`` (at most ``stiff_nfev`` right-hand-side
    evaluations each, deterministic; :func:`.rank_resolve.continue_stiff`, the classifier's limit rule on
    ``Σ(stiff_T/2ᵏ)``, settled only with a rank within the bound).  ``labels`` carries the final verdict (suffix ``" (closed form)"``,
    ``" (T = …)"`` or ``" (stiff Radau, T = …)"`` when it was not obtained at ``T``) or, for a row left
    unresolved, ``"unresolved: <reason>"``."""
    from ..gaussian import GaussianODE
    from ..analysis.closed_forms import sigma_vi
    from ..analysis.verdict import classify_many

    rng = np.random.default_rng(seed)
    m = d // 2
    weights, S0s, As = [], [], []
    for _ in range(n):
        Q = rng.normal(size=(m, d))
        if v_random:
            B = rng.normal(size=(d, d))
            V = B.T @ B
        else:
            V = np.eye(d)
        if kind == "softmax":
            w = make_weights([make_head("softmax", A=-Q.T @ Q / np.sqrt(d), V=V)])
        else:
            w = make_weights([make_head("l2", Q=Q, K=-Q, V=V, tau=2 * np.sqrt(d))])
        G = rng.normal(size=(d, d))
        weights.append(w)
        S0s.append(G @ G.T)
        As.append(-Q.T @ Q / np.sqrt(d))
    odes = [GaussianODE.from_weights(w) for w in weights]
    S0s = np.array(S0s)
    res = classify_many(weights, S0s, T=T, rtol=1e-8)
    bound = (d + 1) // 2
    labels = [v.short + (" (closed form)" if v.source == "theorem" else "") for v in res]
    # the authors' threshold rule reads Σ(T): the closed form's where the theorem decided
    sig_T = [sigma_vi(T, S, v.facts[0].values["A_eff"]) if v.source == "theorem" else v.Sigma_T
             for v, S in zip(res, S0s)]

    def ok(v) -> bool:
        return v.outcome == "rank" and v.rank <= bound

    bad = [i for i, v in enumerate(res) if not ok(v)]
    for fac in extend:
        if not bad:
            break
        again = classify_many([weights[i] for i in bad], S0s[bad], T=fac * T, rtol=1e-8)
        for i, v in zip(bad, again):
            if ok(v):
                res[i], labels[i], sig_T[i] = v, f"{v.short} (T = {fac * T:g})", v.Sigma_T
        bad = [i for i in bad if not ok(res[i])]
    if bad and stiff_T is not None:
        from .rank_resolve import DOUBLINGS, continue_stiff

        for i in bad:
            t_stop = float(res[i].t or T)
            if t_stop >= stiff_T / 2 ** DOUBLINGS or res[i].Sigma_T is None:
                labels[i] = f"unresolved: {labels[i]} at t = {t_stop:.3g}"
                continue
            R = continue_stiff(odes[i], res[i].Sigma_T, t_stop, stiff_T, S0s[i], bound, max_nfev=stiff_nfev)
            if R.result is not None:
                res[i], sig_T[i] = R.result, R.Sigma
                labels[i] = f"{R.result.short} (stiff Radau, T = {stiff_T:g})"
            else:
                labels[i] = f"unresolved: {R.reason}"
    for i, v in enumerate(res):
        if not ok(v) and not labels[i].startswith("unresolved"):
            labels[i] = f"unresolved: {labels[i]} at T = {float(v.t or T):.3g}"
    ranks = [v.rank if ok(v) else -1 for v in res]
    thr = [int(np.sum(np.linalg.eigvalsh(S) > 0.1)) if k >= 0 else -1 for S, k in zip(sig_T, ranks)]
    return ranks, thr, labels


def draw_histogram(ax, kind: str, d: int, v_random: bool, ranks, thr, n: int) -> None:
    """One histogram panel: persistence ranks (ours) beside the authors' 0.1-threshold count, bound in red."""
    xs = np.arange(d + 1)
    cr, ct = Counter(ranks), Counter(thr)
    ax.bar(xs - 0.2, [cr.get(x, 0) for x in xs], width=0.4, label="persistence rank (ours)")
    ax.bar(xs + 0.2, [ct.get(x, 0) for x in xs], width=0.4, label="eigenvalues > 0.1 (authors' rule)")
    bound = (d + 1) // 2
    ax.axvline(bound + 0.5, color="r", ls="--", lw=1)
    ax.text(bound + 0.55, 0.9 * n, rf"bound $\lceil d/2\rceil = {bound}$", color="r", fontsize=8)
    other = n - sum(1 for x in ranks if x >= 0)
    vname = r"B^{\top}B" if v_random else "I"
    ax.set_title(rf"$d = {d}$, $V = {vname}$ ({n} draws"
                 + (f", {other} unresolved" if other else "") + ")", fontsize=10)
    ax.set_xticks(xs)
    ax.set_ylim(0, 1.05 * n)
    ax.set_xlabel("limit rank")
    ax.set_ylabel("count")


def make_rank_histograms(kind: str, out_dir: Path, n: int = 40, seed: int = 40, formats=("png", "pdf"),
                         T: float = 1e6, panels: bool = False, stiff_T: float = 1e8,
                         stiff_nfev: int = 40_000) -> list[Path]:
    """The 2×3 canvas ``fig_histograms_<kind>`` (columns ``d = 3, 4, 5``, rows ``V = I``, ``V = BᵀB``); with
    ``panels=True`` also one file per panel ``fig_histograms_<kind>_d<d>_<VI|VBtB>`` in addition."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7), sharey=True)
    extra: list[Path] = []
    for c, d in enumerate((3, 4, 5)):
        for r, v_random in enumerate((False, True)):
            ranks, thr, _ = rank_samples(kind, d, v_random, n, seed + 10 * d + r, T, stiff_T=stiff_T,
                                          stiff_nfev=stiff_nfev)
            draw_histogram(axes[r, c], kind, d, v_random, ranks, thr, n)
            if c:
                axes[r, c].set_ylabel("")
            if panels:
                f1, a1 = plt.subplots(figsize=(4.6, 3.6))
                draw_histogram(a1, kind, d, v_random, ranks, thr, n)
                a1.legend(fontsize=7, loc="upper left")
                f1.tight_layout()
                extra += save(f1, out_dir, f"fig_histograms_{kind}_d{d}_{'VBtB' if v_random else 'VI'}", formats)
    axes[0, 0].legend(fontsize=8, loc="upper left")
    name = r"$\ell_2$" if kind == "l2" else kind
    fig.suptitle(rf"{name}: rank of $\lim\,\Sigma(t)$ for $A = -Q^\top Q/\sqrt{{d}}$, "
                 rf"$Q \in \mathbb{{R}}^{{\lfloor d/2\rfloor\times d}}$  (seeds {seed}+10d+row, horizon "
                 f"T = {T:g}, batched DOPRI5" + ("; V = I rows the classifier left open: closed-form limit"
                                                if kind == "softmax" else "") + ";\nrows still open: implicit "
                 f"Radau with the generated Jacobian to T = {stiff_T:g}, same persistence rule, \u2264 {stiff_nfev} "
                 "evaluations per row; 'unresolved' = not settled within the bound by then)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return save(fig, out_dir, f"fig_histograms_{kind}", formats) + extra


def _ellipse(S: np.ndarray, k: float = 2.0, n: int = 100) -> np.ndarray:
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    th = np.linspace(0, 2 * np.pi, n)
    circ = np.stack([np.cos(th), np.sin(th)])
    return (U * (k * np.sqrt(np.clip(w, 0, None)))) @ circ


def cloud_and_ode(schedule, alpha0, Sigma0, times, n: int, seed: int, steps_per_unit: int = 50, ode=None):
    """Particles and the Gaussian ODE at ``times`` (``times[0] = 0``, equally spaced): list of
    ``(t, X, mean_emp, Σ_emp, α_ode, Σ_ode)``.

    ``n`` tokens are drawn from ``N(alpha0, Sigma0)`` (``default_rng(seed)``) and evolved by
    :func:`symbolic_tpde.particles` (RK4, ``steps_per_unit`` steps per unit time, ``t_eval=times``).  The ODE (``ode``: a :class:`~symbolic_tpde.gaussian.GaussianODE`, or ``None`` for a kind that
    does not preserve Gaussians) starts from the cloud's *sample* mean and covariance (``1/n``), so at ``t = 0``
    both ellipses coincide and any later gap is the dynamics' (finite-``n`` sampling of the attention), not the
    ``O(n^{-1/2})`` error of the initial draw (README Mathematics §6)."""
    from ..api import particles
    from ..numerics.measures.estimators import moments

    times = np.asarray(times, float)
    k = len(times) - 1
    per = max(10, int(np.ceil(times[-1] / k * steps_per_unit)))
    rng = np.random.default_rng(seed)
    X0 = rng.multivariate_normal(np.asarray(alpha0, float), np.asarray(Sigma0, float), size=n, method="cholesky")
    run = particles(schedule, X0, float(times[-1]), t_eval=times, method="rk4", steps=per * k)
    frames = run.trajectory
    m0, S0 = moments(X0)
    sol = None
    if ode is not None:
        sol = ode.integrate(m0, S0, float(times[-1]), t_eval=times, rtol=1e-11)
    out = []
    for j, t in enumerate(times):
        X = frames[j]
        me, Se = moments(X)
        if sol is not None and j < len(sol.t) and np.isclose(sol.t[j], t):
            out.append((float(t), X, me, Se, sol.alpha[j], sol.Sigma[j]))
        else:
            out.append((float(t), X, me, Se, None, None))
    return out


def draw_cloud_row(axes, panels, dims=(0, 1), label_ode: str = "Gaussian ODE (from the sample moments)") -> None:
    """One panel per time: the tokens (projected on ``dims``), their empirical 2-sd ellipse (dashed red) and the
    ODE's (solid black), in coordinates relative to the cloud's sample mean ``ᾱ(t)`` (stated on the panel), so
    every panel is centred and equal-aspect whatever the mean does (it grows like ``eᵗ`` under softmax with
    ``V = I``), and the panel compares covariances (the mean equation ``dα/dt = V(α + ΣAα)`` amplifies the
    ``O(n^{-1/2})`` finite-``n`` drift of the sample mean, which would put the two ellipses far apart); the
    relative mean gap ``|ᾱ_emp - α|/max(|α|, √tr Σ)`` is stated in the title.  The ellipses are the level
    ``(x - ᾱ)ᵀ Σ⁻¹ (x - ᾱ) = 4`` of the 2-D marginal, which holds ``1 - e⁻² ≈ 86.5 %`` of its mass; each panel
    has its legend."""
    i, j = dims
    for ax, (t, X, me, Se, ao, So) in zip(axes, panels):
        c = me[[i, j]]
        ax.scatter(X[:, i] - c[0], X[:, j] - c[1], s=1, alpha=0.3, color="tab:blue", rasterized=True,
                   label=f"tokens (n = {len(X)})")
        sub = np.ix_([i, j], [i, j])
        ee = _ellipse(Se[sub])
        ax.plot(ee[0], ee[1], "r--", lw=1.2, label="particles: 2-sd ellipse (86.5 %)")
        pts = [ee, (X[:, [i, j]] - c).T]
        title = f"$t = {t:.3g}$"
        if So is not None:
            eo = _ellipse(So[sub])
            ax.plot(eo[0], eo[1], "k-", lw=1.5, label=label_ode + ": 2-sd ellipse")
            pts.append(eo)
            rel = np.linalg.norm(Se - So) / np.linalg.norm(So)
            gap = np.linalg.norm(me - ao) / max(np.linalg.norm(ao), np.sqrt(np.trace(So)))
            title += (rf": tr$\,\Sigma$ = {np.trace(So):.3g}, $\|\Sigma_{{emp}}-\Sigma\|/\|\Sigma\|$ = {rel:.2g}"
                      rf", mean gap {gap:.2g}")
        title += f"\nsample mean $\\bar\\alpha$ = ({c[0]:.4g}, {c[1]:.4g})"
        P = np.concatenate(pts, axis=1)
        r = 1.1 * float(np.max(np.percentile(np.abs(P), 99.5, axis=1))) + 1e-12
        ax.set_xlim(-r, r)
        ax.set_ylim(-r, r)
        ax.set_aspect("equal")
        ax.ticklabel_format(useOffset=False)
        ax.axhline(0.0, color="0.85", lw=0.5, zorder=0)
        ax.axvline(0.0, color="0.85", lw=0.5, zorder=0)
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(rf"$x_{i} - \bar\alpha_{i}(t)$")
        ax.set_ylabel(rf"$x_{j} - \bar\alpha_{j}(t)$")
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False, markerscale=4)


def make_particle_figure(out_dir: Path, n: int = 1000, seed: int = 7, formats=("png", "pdf"),
                         panels: bool = False) -> list[Path]:
    """Two regimes (README Mathematics §4, softmax, ``V = I``): clustering on a line (``A = -2qqᵀ``, limit of
    rank one on ``q⊥``) and blow-up (``A + Aᵀ ≻ 0``, times up to ``0.9 T*`` with ``T*`` from the closed form
    at the sample covariance).  ``panels=True``: also one file per panel ``fig_particles_<row>_<k>``, in
    addition to the canvas."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..gaussian import GaussianODE
    from ..weights import Schedule
    from ..numerics.measures.estimators import moments
    from ..analysis.closed_forms import blowup_time_vi

    S0 = np.array([[1.0, 0.4], [0.4, 0.7]])
    q = np.array([np.cos(0.6), np.sin(0.6)])
    Ab = np.array([[0.6, 0.2], [0.0, 0.3]])
    rng = np.random.default_rng(seed)
    _, S_hat = moments(rng.multivariate_normal(np.zeros(2), S0, size=n, method="cholesky"))
    Tb = blowup_time_vi(S_hat, Ab)
    rows = [(r"clustering on a line: $A = -2qq^\top$, $V = I$", -2 * np.outer(q, q), np.linspace(0, 8, 4)),
            (rf"blow-up: $A + A^\top \succ 0$, $V = I$, $T^* = {Tb:.4g}$", Ab, np.linspace(0, 0.9 * Tb, 4))]
    fig, axes = plt.subplots(len(rows), 4, figsize=(16, 8.4))
    extra: list[Path] = []
    for r, (title, A, times) in enumerate(rows):
        w = make_weights([make_head("softmax", A=A, V=np.eye(2))])
        data = cloud_and_ode(Schedule.constant(w), np.zeros(2), S0, times, n, seed,
                             ode=GaussianODE.from_weights(w))
        draw_cloud_row(axes[r], data)
        axes[r, 0].set_ylabel(title + "\n" + axes[r, 0].get_ylabel(), fontsize=9)
        if panels:
            for k, one in enumerate(data):
                f1, a1 = plt.subplots(figsize=(4.4, 4.4))
                draw_cloud_row([a1], [one])
                a1.set_title(title + "\n" + a1.get_title(), fontsize=8)
                f1.tight_layout()
                extra += save(f1, out_dir, f"fig_particles_{('cluster', 'blowup')[r]}_{k}", formats)
    fig.suptitle(f"token clouds (n = {n}, seed {seed}, RK4) and the Gaussian moment ODE started from the "
                 "cloud's sample mean and covariance (2-sd ellipses); $T^*$: closed form at the sample covariance",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save(fig, out_dir, "fig_particles", formats) + extra


def make_scenario_figure(scn, out: Path, *, n: int = 2000, seed: int = 0, T: float | None = None,
                         panels: int = 4, dims=(0, 1), name: str | None = None) -> Path:
    """``tpde plot``: the scenario's token cloud beside the Gaussian ODE's ellipses at ``panels`` times on
    ``[0, T]`` (``T`` shortened to ``0.9 T*`` when the ODE blows up first), for any scenario; kinds that do not
    preserve Gaussians (``kinds.get(k).preserves_gaussians``) get the cloud and its empirical ellipse only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..gaussian import GaussianODE
    from ..registry import kinds

    T = scn.T if T is None else T
    w0 = scn.schedule(0.0)
    preserving = all(kinds.get(h.kind).preserves_gaussians for h in w0.heads) and w0.sink is None
    ode = GaussianODE.from_scenario(scn) if preserving else None
    note = ""
    if ode is not None:
        sol = ode.integrate(scn.alpha0, scn.Sigma0, T)
        if sol.blowup_time is not None and sol.blowup_time < T:
            T = 0.9 * sol.blowup_time
            note = rf", horizon $0.9\,T^*$ ($T^* = {sol.blowup_time:.4g}$)"
        elif str(sol.status) != "ok":
            T = 0.9 * float(sol.t[-1])
            note = rf", horizon $0.9\times$ the ODE's stop ({sol.status})"
    times = np.linspace(0.0, T, panels)
    data = cloud_and_ode(scn.schedule, scn.alpha0, scn.Sigma0, times, n, seed, ode=ode)
    fig, axes = plt.subplots(1, panels, figsize=(4 * panels, 5.2))
    draw_cloud_row(np.atleast_1d(axes), data, dims)
    kinds_ = ", ".join(sorted({h.kind for h in w0.heads}))
    what = "vs the Gaussian ODE from the sample moments" if ode is not None else \
        "(no Gaussian ODE: this attention does not preserve Gaussians)"
    fig.suptitle(f"{name or kinds_}: d = {scn.d}, n = {n}, seed {seed}{note}; "
                 f"coordinates {dims} {what}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out
