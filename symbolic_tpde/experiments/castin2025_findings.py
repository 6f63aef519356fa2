"""What we found in the authors' figure code (README "Reproducing the authors' figures"), each *recomputed*
here from their draws and conventions (:mod:`.castin2025_draws`), never read from a table of results.

* ``mixed_3d_plots_l2``: their script assigns the softmax run and then the ℓ2 run to the same variable and
  plots it into both ``trad_mixed_3d`` and ``L2_mixed_3d``.  Recomputed: the softmax and ℓ2 runs on their
  draws end far apart, so their softmax file shows the ℓ2 trajectories, not softmax ones.
* ``MH_both_is_single_head``: ``MH_both`` is run with the default ``H = 1``; their row split with one head is
  single-head softmax.  Recomputed: the right-hand sides coincide bit for bit on their grid, while ``H = 2``
  differs at ``O(1)``.
* ``MH_rank_1_empty_head``: with ``Q = q ∈ R^{1×2}`` and ``H = 2`` the second row block is empty: ``A_2 = 0``
  and only head 1 acts, with value matrix ``e₁e₁ᵀ``.
* ``histogram_rank_errors``: for their first ``n`` draws per ``d`` (softmax, ``V = I``, their step sizes and
  tolerance), the number of draws whose rank (eigenvalues ``> 0.1`` of the returned iterate) changes when
  ``h → h/10``; the rank of the exact solution (``V = I``: ``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹``, README Mathematics
  §4) at the same stopping time, our adaptive integrator's rank there, how many of the wrong draws had an
  eigenvalue clipped by the projection, and the limit rank (our classifier) against the bound ``⌈d/2⌉``.
* ``sinkhorn_singular_A``: their Sinkhorn closed form with pseudo-inverses (``Cᵀ = ½(Aᵀ)⁺(Σ^{-1/2}M^{1/2}
  Σ^{1/2} - I)``, ``M = I + 4Σ^{1/2}AᵀΣAΣ^{1/2}``) against ours (:func:`~symbolic_tpde.numerics.ode.numeric_matrix.
  sinkhorn_cross_cov`, ``A⁻¹``-free) for the singular ``A = -qᵀq`` of their rank-one setup, with the
  first-order condition ``C = ΣAᵀ(Σ - CᵀΣ⁻¹C)`` and a discrete entropic plan on Gauss-Hermite nodes as the
  numeric check.
"""

from __future__ import annotations

import numpy as np

from ..registry import layout
from . import castin2025_draws as cd

# Which run each of their mixed_3d output files plots, as their script does it (a fact read from their
# 2d_plots.py: both plot calls receive the variable last assigned by the l2 run).
MIXED_3D_PLOTTED = {"trad_mixed_3d": "L2_mixed_3d", "L2_mixed_3d": "L2_mixed_3d"}


def _rel(a, b) -> float:
    return float(np.max(np.linalg.norm(a - b, axis=(-2, -1)) / np.linalg.norm(b, axis=(-2, -1))))


def mixed_3d_plots_l2(every: int = 1) -> dict:
    """Softmax vs ℓ2 projected-Euler runs of their ``mixed_3d`` setup (every ``every``-th grid point)."""
    st = cd.SETUPS["mixed_3d"]
    S0, _ = cd.setup_grid(st)
    S0 = S0[::every]
    ends = {}
    for run in st.runs:
        F = cd.covariance_field([cd.setup_weights(st, run)])
        ends[run.file] = cd.projected_euler(F, S0, run.h, run.tol_low, run.tol_high, run.max_iter,
                                            keep_paths=False).last
    shown = ends[MIXED_3D_PLOTTED["trad_mixed_3d"]]
    gap = np.linalg.norm(ends["trad_mixed_3d"] - ends["L2_mixed_3d"], axis=(1, 2))
    size = np.maximum(np.linalg.norm(ends["trad_mixed_3d"], axis=(1, 2)), np.linalg.norm(ends["L2_mixed_3d"],
                                                                                         axis=(1, 2)))
    return {"finding": "trad_mixed_3d plots the l2 trajectories", "n_starts": len(S0),
            "trad_file_equals_l2_run": bool(np.array_equal(shown, ends["L2_mixed_3d"])),
            "softmax_vs_l2_end_gap_max": float(gap.max()), "softmax_vs_l2_end_gap_median": float(np.median(gap)),
            "softmax_vs_l2_rel_gap_median": float(np.median(gap / size)),
            "softmax_vs_l2_rel_gap_max": float(np.max(gap / size))}


def mh_both_is_single_head() -> dict:
    st = cd.SETUPS["both_V"]
    p = cd.draws(st.draws)
    S0, _ = cd.setup_grid(st)
    soft = cd.covariance_field([cd.softmax_weights(p["Q"], p["K"], p["V"])])(S0)
    h1 = cd.covariance_field([cd.multihead_weights(p["Q"], p["K"], p["V"], 1)])(S0)
    h2 = cd.covariance_field([cd.multihead_weights(p["Q"], p["K"], p["V"], 2)])(S0)
    return {"finding": "MH_both runs with H = 1 (identical to softmax)", "n_starts": len(S0),
            "H1_vs_softmax_max_rel": _rel(h1, soft), "H2_vs_softmax_max_rel": _rel(h2, soft)}


def mh_rank_1_empty_head() -> dict:
    p = cd.draws("rank_1")
    (A1, C1), (A2, C2) = cd.row_split_blocks(p["Q"], p["K"], p["V"], 2)
    S0, _ = cd.setup_grid(cd.SETUPS["MH_rank_1"])
    mh = cd.covariance_field([cd.multihead_weights(p["Q"], p["K"], p["V"], 2)])(S0)
    one = cd.covariance_field([cd.make_weights([cd.make_head("softmax", A=A1, V=C1)])])(S0)
    return {"finding": "MH_rank_1 gives head 2 an empty block (A_2 = 0)", "A2_max_abs": float(np.abs(A2).max()),
            "A1": A1.tolist(), "C1": C1.tolist(), "C2": C2.tolist(),
            "MH_vs_head1_alone_max_rel": _rel(mh, one)}


def exact_softmax_identity_V(A: np.ndarray, S0: np.ndarray, t: float) -> np.ndarray:
    """``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹`` (softmax, ``V = I``, README Mathematics §4)."""
    return np.linalg.inv(np.linalg.inv(S0) - t * (A + A.T))


def histogram_rank_errors(d: int, n: int = 20, factor: int = 10, threshold: float = 0.1,
                          limit_horizon: float = 1e6) -> dict:
    """Their softmax ``V = I`` rank rule on their first ``n`` draws at ``d`` (module docstring)."""
    from ..numerics.ode.rk import rk_solve
    from ..analysis.verdict import classify_many
    from ..gaussian import GaussianODE

    Qs, S0s = cd.histogram_draws(d, n)
    h = cd.HIST_STEPS["softmax"][(3, 4, 5).index(d)]
    ws = [cd.softmax_weights(Q, -Q, np.eye(d), d) for Q in Qs]
    F = cd.covariance_field(ws)
    S0 = np.array(S0s)
    runs = {}
    for name, hh, mi in (("h", h, 60_000), ("h/10", h / factor, 60_000 * factor)):
        runs[name] = cd.projected_euler(F, S0, hh, 1e-4, max_iter=mi, keep_paths=False)
    rank = {k: np.sum(np.linalg.eigvalsh(r.last) > threshold, axis=1) for k, r in runs.items()}
    # the exact solution and our adaptive integration at their stopping time t = (steps - 1) h of the
    # returned iterate (their S_list[-1] is the state before the last update)
    t_stop = (runs["h"].steps - 1) * h
    As = [-Q.T @ Q / np.sqrt(d) for Q in Qs]
    exact = np.array([exact_softmax_identity_V(A, S, t) for A, S, t in zip(As, S0, t_stop)])
    ode = GaussianODE.from_weights(ws[0])
    P = np.array([GaussianODE.from_weights(w).params(0.0) for w in ws])
    Y0 = layout.pack(np.zeros((n, d)), S0)
    ad = rk_solve(lambda t, Y, PP: ode.rhs_batch(t, Y, PP), 0.0, Y0, t_stop, rtol=1e-10, atol=1e-14,
                  args=(P,), max_steps=200_000)
    ours = layout.unpack(ad.y, d)[1]
    rank_exact = np.sum(np.linalg.eigvalsh(exact) > threshold, axis=1)
    rank_ours = np.sum(np.linalg.eigvalsh(ours) > threshold, axis=1)
    lim = classify_many(ws, S0, T=limit_horizon)
    bound = (d + 1) // 2
    wrong = rank["h"] != rank["h/10"]
    return {"finding": f"rank histogram errors at d = {d}", "d": d, "n": n, "h": h,
            "all_converged": all(s == "converged" for r in runs.values() for s in r.status),
            "n_wrong": int(wrong.sum()), "wrong_draws": np.nonzero(wrong)[0].tolist(),
            "ranks_h": rank["h"].tolist(), "ranks_h10": rank["h/10"].tolist(),
            "ranks_exact_at_stop": rank_exact.tolist(), "ranks_adaptive_at_stop": rank_ours.tolist(),
            "n_h10_differs_from_exact": int(np.sum(rank["h/10"] != rank_exact)),
            "n_h_differs_from_exact": int(np.sum(rank["h"] != rank_exact)),
            "adaptive_vs_exact_max_rel": _rel(ours, exact),
            "n_wrong_with_clipping": int(np.sum(wrong & (runs["h"].clipped > 0))),
            "n_wrong_lower": int(np.sum(rank["h"][wrong] < rank["h/10"][wrong])),
            "limit_ranks": [v.rank if v.outcome == "rank" else -1 for v in lim], "bound": bound}


# ------------------------------------------------------------------------------------------ Sinkhorn
def authors_sinkhorn_cross_cov(A: np.ndarray, S: np.ndarray) -> np.ndarray:
    """Their closed form (``ε = 1``) in our notation: ``Cᵀ = ½(Aᵀ)⁺(Σ^{-1/2}M^{1/2}Σ^{1/2} - I)`` with
    ``M = I + 4Σ^{1/2}AᵀΣAΣ^{1/2}`` and pseudo-inverses (their ``dΣ/dt = VCᵀ + CVᵀ``).  Equal to ours for
    invertible ``A``."""
    from ..numerics.linalg import sqrtm_psd

    R = sqrtm_psd(S)
    M = np.eye(len(S)) + 4 * R @ A.T @ S @ A @ R
    return 0.5 * np.linalg.pinv(A.T) @ (np.linalg.solve(R, sqrtm_psd(M)) @ R - np.eye(len(S)))


def first_order_residual(Ct: np.ndarray, A: np.ndarray, S: np.ndarray) -> float:
    """``‖C - ΣAᵀ(Σ - CᵀΣ⁻¹C)‖ / ‖C‖`` (README Mathematics §3, ``ε = 1``)."""
    C = Ct.T
    return float(np.linalg.norm(C - S @ A.T @ (S - Ct @ np.linalg.solve(S, C))) / np.linalg.norm(C))


def discrete_plan_cross_cov(A: np.ndarray, S: np.ndarray, n: int = 20, tol: float = 1e-13) -> np.ndarray:
    """``E_π[y xᵀ]`` of the entropic self-plan of ``N(0, S)`` (cost ``-<Ax, y>``, ``ε = 1``) with ``μ``
    replaced by the tensor Gauss-Hermite rule with ``n`` nodes per axis (log-domain Sinkhorn on weighted
    marginals).  Independent of any closed form; quadrature error decays faster than any power of ``n``."""
    from scipy.special import logsumexp

    z, wz = np.polynomial.hermite_e.hermegauss(n)
    Z = np.stack([a.ravel() for a in np.meshgrid(z, z, indexing="ij")], axis=1)
    logw = np.log(np.outer(wz, wz).ravel() / (2 * np.pi))
    X = Z @ np.linalg.cholesky(S).T
    C = X @ A.T @ X.T                                 # C[i, j] = <A x_i, x_j>
    f = np.zeros(len(X))
    g = np.zeros(len(X))
    for _ in range(10_000):
        f_new = -logsumexp(C + g[None, :] + logw[None, :], axis=1)
        g = -logsumexp(C + f_new[:, None] + logw[:, None], axis=0)
        if np.max(np.abs(f_new - f)) < tol:
            f = f_new
            break
        f = f_new
    logP = C + f[:, None] + g[None, :] + logw[:, None] + logw[None, :]
    return np.einsum("ij,jk,il->kl", np.exp(logP), X, X)    # Σ_ij π_ij y_j x_iᵀ


def sinkhorn_singular_A(n_check: int = 3) -> dict:
    """Their and our Sinkhorn cross-covariance on their rank-one draws (``A = KᵀQ = -qᵀq``) over their
    ``10 × 10`` grid; the discrete plan at ``n_check`` grid points."""
    from ..numerics.ode.numeric_matrix import sinkhorn_cross_cov

    p = cd.draws("rank_1")
    A = p["K"].T @ p["Q"]
    S0, _ = cd.setup_grid(cd.SETUPS["rank_1"])
    ours = np.array([sinkhorn_cross_cov(A, S) for S in S0])
    theirs = np.array([authors_sinkhorn_cross_cov(A, S) for S in S0])
    rel = np.linalg.norm(theirs - ours, axis=(1, 2)) / np.linalg.norm(ours, axis=(1, 2))
    sym = lambda Ct: Ct + np.swapaxes(Ct, 1, 2)      # dΣ/dt = VCᵀ + CVᵀ with their V = I
    rel_rhs = np.linalg.norm(sym(theirs) - sym(ours), axis=(1, 2)) / np.linalg.norm(sym(ours), axis=(1, 2))
    picks = np.linspace(0, len(S0) - 1, n_check).astype(int)
    disc = [discrete_plan_cross_cov(A, S0[i]) for i in picks]
    return {"finding": "their Sinkhorn closed form is wrong for singular A", "rank_A": int(np.linalg.matrix_rank(A)),
            "n_starts": len(S0), "rel_diff_min": float(rel.min()), "rel_diff_max": float(rel.max()),
            "rhs_rel_diff_min": float(rel_rhs.min()), "rhs_rel_diff_max": float(rel_rhs.max()),
            "ours_residual_max": max(first_order_residual(c, A, S) for c, S in zip(ours, S0)),
            "theirs_residual_min": min(first_order_residual(c, A, S) for c, S in zip(theirs, S0)),
            "ours_vs_discrete_max_rel": max(_rel(ours[i], c) for i, c in zip(picks, disc)),
            "theirs_vs_discrete_min_rel": min(_rel(theirs[i], c) for i, c in zip(picks, disc))}


def findings(n_hist: int = 20, every: int = 1) -> list[dict]:
    """Every finding, recomputed (slow: the rank recount runs projected Euler at ``h/10``)."""
    out = [mixed_3d_plots_l2(every), mh_both_is_single_head(), mh_rank_1_empty_head()]
    out += [histogram_rank_errors(d, n_hist) for d in (3, 4, 5)]
    out.append(sinkhorn_singular_A())
    return out
