"""Rank histograms (d = 3, 4, 5) and token clouds next to the Gaussian ODE (README Mathematics §6-7, README Mathematics §7).

Rank histograms (horizon ``T = 10⁶``: with ``V = BᵀB`` the smallest eigenvalue of ``V`` can be ``~10⁻⁴``, which
slows the ``O(1/t)`` decay so much that at ``T = 10⁴`` some draws still look full rank): ``A = -QᵀQ/√d`` with ``Q ∈ R^{⌊d/2⌋×d}`` (so ``dim ker(A + Aᵀ) = ⌈d/2⌉``), rows ``V = I`` and
``V = BᵀB`` (``B`` standard normal), one ``Σ₀ = GGᵀ`` per draw; each ``(Q, V, Σ₀)`` is classified by
:func:`.clustering.classify_batch` at horizon ``T`` with all parameter sets integrated in one batch (per-row
parameter vectors through :meth:`~symbolic_tpde.gaussian.GaussianODE.rhs_batch`).  Two counts are drawn: the persistence rank of
our classifier and the authors' rule "eigenvalues of ``Σ(T)`` above 0.1" (which undercounts small limits).
ℓ2 uses ``K = -Q`` and ``τ = 2√d`` (same cross term as softmax).

Token clouds: ``n`` particles drawn from ``N(0, Σ₀)`` evolved by :func:`symbolic_tpde.numerics.integrate.simulate`
(RK4), their empirical covariance ellipse (dashed) against the Gaussian ODE's ellipse (solid, DOP853 on the
generated right-hand side); ellipses are the 2-standard-deviation level sets.  Clouds are drawn centred on their
sample mean: with ``V = I`` the mean obeys ``dα/dt = α + ΣAα``, so the sample mean's ``O(n^{-1/2})`` offset from 0
grows like ``e^t`` and would carry the cloud off the panel.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from ..model import make_head, make_weights
from .figures import save


def rank_samples(kind: str, d: int, v_random: bool, n: int, seed: int, T: float = 1e4):
    """Classify ``n`` random ``(Q, V, Σ₀)`` (module docstring); returns (ranks, threshold ranks, labels)."""
    from ..gaussian import GaussianODE
    from .clustering import classify_batch

    rng = np.random.default_rng(seed)
    m = d // 2
    weights, S0s = [], []
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
    ode = GaussianODE.from_weights(weights[0])
    P = np.array([ode.params(0.0) if i == 0 else GaussianODE.from_weights(w).params(0.0)
                  for i, w in enumerate(weights)])
    res = classify_batch(lambda t, Y, PP: ode.rhs_batch(t, Y, PP), np.array(S0s), T=T, args=(P,))
    ranks = [r.rank if r.kind in ("rank", "collapse") else -1 for r in res]
    thr = [int(np.sum(np.linalg.eigvalsh(r.Sigma_T) > 0.1)) if r.kind in ("rank", "collapse") else -1
           for r in res]
    return ranks, thr, [r.label() for r in res]


def make_rank_histograms(kind: str, out_dir: Path, n: int = 40, seed: int = 40, formats=("png", "pdf"),
                         T: float = 1e6) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7), sharey=True)
    for c, d in enumerate((3, 4, 5)):
        for r, v_random in enumerate((False, True)):
            ranks, thr, labels = rank_samples(kind, d, v_random, n, seed + 10 * d + r, T)
            ax = axes[r, c]
            xs = np.arange(d + 1)
            cr, ct = Counter(ranks), Counter(thr)
            ax.bar(xs - 0.2, [cr.get(x, 0) for x in xs], width=0.4, label="persistence rank (ours)")
            ax.bar(xs + 0.2, [ct.get(x, 0) for x in xs], width=0.4, label="eigenvalues > 0.1 (authors' rule)")
            bound = (d + 1) // 2
            ax.axvline(bound + 0.5, color="r", ls="--", lw=1)
            ax.text(bound + 0.55, 0.9 * n, f"bound ⌈d/2⌉ = {bound}", color="r", fontsize=8)
            other = n - sum(1 for x in ranks if x >= 0)
            ax.set_title(f"d = {d}, V = {'BᵀB' if v_random else 'I'} ({n} draws"
                         + (f", {other} undetermined at T" if other else "") + ")", fontsize=10)
            ax.set_xticks(xs)
            ax.set_xlabel("limit rank")
            if c == 0:
                ax.set_ylabel("count")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"{kind}: rank of lim Σ(t) for A = -QᵀQ/√d, Q ∈ R^(⌊d/2⌋×d)  (seeds {seed}+10d+row, "
                 f"horizon T = {T:g}, batched DOPRI5)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save(fig, out_dir, f"fig_histograms_{kind}", formats)


def _ellipse(S: np.ndarray, k: float = 2.0, n: int = 100) -> np.ndarray:
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    th = np.linspace(0, 2 * np.pi, n)
    circ = np.stack([np.cos(th), np.sin(th)])
    return (U * (k * np.sqrt(np.clip(w, 0, None)))) @ circ


def particle_cloud_panels(A: np.ndarray, V: np.ndarray, Sigma0: np.ndarray, times, n: int, seed: int,
                          steps_per_unit: int = 50):
    """Particles and ODE at ``times``: list of ``(t, X, Σ_emp, Σ_ode)``."""
    from scipy.integrate import solve_ivp

    from ..gaussian import GaussianODE, pack_state, unpack_state
    from ..numerics.integrate import simulate

    w = make_weights([make_head("softmax", A=A, V=V)])
    ode = GaussianODE.from_weights(w)
    rng = np.random.default_rng(seed)
    X = rng.multivariate_normal(np.zeros(2), Sigma0, size=n)
    sol = solve_ivp(ode.rhs, (0, times[-1]), pack_state(np.zeros(2), Sigma0), method="DOP853", rtol=1e-11,
                    atol=1e-13, t_eval=times)
    out, t_prev = [], 0.0
    for k, t in enumerate(times):
        if t > t_prev:
            X = simulate(X, w, t - t_prev, steps=max(10, int(np.ceil((t - t_prev) * steps_per_unit))),
                         progress=False).X
            t_prev = t
        _, S_ode = unpack_state(sol.y[:, k], 2)
        out.append((t, X.copy(), np.cov(X.T), S_ode))
    return out


def make_particle_figure(out_dir: Path, n: int = 1000, seed: int = 7, formats=("png", "pdf")) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .closed_forms import blowup_time_vi

    S0 = np.array([[1.0, 0.4], [0.4, 0.7]])
    q = np.array([np.cos(0.6), np.sin(0.6)])
    rows = [
        ("clustering on a line: A = -2qqᵀ, V = I", -2 * np.outer(q, q), np.eye(2), [0.0, 0.5, 2.0, 8.0]),
    ]
    Ab = np.array([[0.6, 0.2], [0.0, 0.3]])
    Tb = blowup_time_vi(S0, Ab)
    rows.append((f"blow-up regime: A + Aᵀ ≻ 0, V = I, T* = {Tb:.4g} (closed form)", Ab, np.eye(2),
                 [0.0, 0.5 * Tb, 0.8 * Tb, 0.9 * Tb]))
    fig, axes = plt.subplots(len(rows), 4, figsize=(15, 7.5))
    for r, (title, A, V, times) in enumerate(rows):
        panels = particle_cloud_panels(A, V, S0, np.array(times), n, seed)
        for c, (t, X, Se, So) in enumerate(panels):
            ax = axes[r, c]
            Xc = X - X.mean(axis=0)  # centred: with V = I the sample mean drifts like e^t (α = 0 is unstable)
            ax.scatter(Xc[:, 0], Xc[:, 1], s=1, alpha=0.3, color="tab:blue")
            eo, ee = _ellipse(So), _ellipse(Se)
            ax.plot(eo[0], eo[1], "k-", lw=1.5, label="Gaussian ODE")
            ax.plot(ee[0], ee[1], "r--", lw=1.2, label="particles (empirical)")
            lim = 1.15 * max(np.abs(eo).max(), np.abs(ee).max())
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
            ax.set_aspect("equal")
            rel = np.linalg.norm(Se - So) / np.linalg.norm(So)
            ax.set_title(f"t = {t:.3g}: tr Σ = {np.trace(So):.3g}, ‖Σ_emp-Σ‖/‖Σ‖ = {rel:.2g}", fontsize=8)
        axes[r, 0].set_ylabel(title, fontsize=9)
    axes[0, 0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"token clouds (n = {n}, seed {seed}, RK4 particles; centred on their mean, which drifts like "
                 "e^t for V = I) vs the Gaussian moment ODE (2-sd ellipses)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save(fig, out_dir, "fig_particles", formats)
