"""The castin2025 preset (README "Reproducing the authors' figures"): our right-hand sides on the authors' draws
against formulas written here from README Mathematics §3, their draws' stated properties, and one test per
finding, each recomputing it."""

import numpy as np
import pytest
import scipy.linalg

from symbolic_tpde.experiments import castin2025, castin2025_draws as cd, castin2025_findings as cf

EPS = np.finfo(float).eps


# ------------------------------------------------------------------------------ direct formulas (README §3)
def direct_rhs(kind, Q, K, V, H, S):
    """dΣ/dt written from README Mathematics §3 in the authors' conventions (d = 2), one Σ at a time.
    Returns (rhs, scale): scale bounds the size of the float64 round-off of either evaluation (see below)."""
    d = 2
    if kind == "sinkhorn":
        A = K.T @ Q
        R = np.real(scipy.linalg.sqrtm(S))
        M = np.real(scipy.linalg.sqrtm(np.eye(d) + 4 * R @ A.T @ S @ A @ R))
        Ct = 0.5 * np.linalg.solve(A.T, np.linalg.solve(R, M @ R) - np.eye(d))
        return V @ Ct + Ct.T @ V.T, 2 * np.linalg.norm(V @ Ct)
    if kind == "l2":      # tilt precision Σ⁻¹ + (2/τ)K'ᵀK', cross term (2/τ)K'ᵀQ', Q' = Q/√d, τ = 1
        P = np.linalg.inv(S) + 2 * K.T @ K
        B = 2 * K.T @ Q / np.sqrt(d)
        J = V @ np.linalg.solve(P, B)
        # round-off scale: |V||P⁻¹||B||Σ| entrywise, times cond(P) for the solve
        return J @ S + S @ J.T, 2 * np.linalg.cond(P) * np.linalg.norm(
            abs(V) @ abs(np.linalg.inv(P)) @ abs(B) @ abs(S))
    if kind == "softmax":
        blocks = [(K.T @ Q / np.sqrt(d), V)]
    else:                 # their row split: k = d/H rows per head, value block = the head's rows of V
        k = d // H
        blocks = []
        for h in range(H):
            E = np.eye(d)[k * h:k * (h + 1)]
            Qh, Kh = Q[k * h:k * (h + 1)], K[k * h:k * (h + 1)]
            blocks.append((Kh.T @ Qh / np.sqrt(k) if len(Qh) else np.zeros((d, d)), E.T @ E @ V))
    out = sum(C @ S @ A @ S for A, C in blocks)
    # round-off scale of a matrix product: the product of the entrywise absolute values (Higham §3.5)
    return out + out.T, 2 * sum(np.linalg.norm(abs(C) @ abs(S) @ abs(A) @ abs(S)) for A, C in blocks)


@pytest.mark.parametrize("name", [n for n in castin2025.NAMES if n != "histograms"])
def test_our_rhs_on_their_draws_equals_the_direct_formulas(name):
    st = cd.SETUPS[name]
    p = cd.draws(st.draws)
    S0, _ = cd.setup_grid(st)
    for run in st.runs:
        ours = cd.covariance_field([cd.setup_weights(st, run)])(S0)
        for S, o in zip(S0, ours):
            ref, scale = direct_rhs(run.kind, p["Q"], p["K"], p["V"], run.H, S)
            if run.kind == "sinkhorn":
                # two matrix square roots (scipy's Schur method here, eigen-decompositions in ours) and a
                # solve with Aᵀ: round-off amplified by cond(Σ) and cond(A) (measured: at most 45 ε cond cond)
                tol = 100 * EPS * np.linalg.cond(S) * np.linalg.cond(p["K"].T @ p["Q"])
            else:
                # the same rational expression evaluated twice in float64 (a few dozen operations, one
                # 2x2 solve for ℓ2): each differs from the exact value by a few ε times `scale`
                tol = 1e-14
            assert np.linalg.norm(o - ref) <= tol * scale, (name, run.file)


def test_their_draws_have_the_stated_properties():
    neg = cd.draws("neg_def_V")
    A = neg["K"].T @ neg["Q"]
    assert np.all((neg["Q"] >= 0) & (neg["Q"] < 1)) and np.linalg.eigvalsh(A + A.T).max() < 0
    assert np.linalg.eigvalsh(neg["V"]).min() > 0
    r1 = cd.draws("rank_1")
    assert r1["Q"].shape == (1, 2) and np.isclose(np.linalg.norm(r1["Q"]), 1.0)
    for s, cond in (("mixed_3d", lambda e: e[0] * e[1] < 0), ("both_V", lambda e: e[0] * e[1] < 0),
                    ("explosion", lambda e: e.min() > 0)):
        q = cd.draws(s)
        A = q["K"].T @ q["Q"]
        assert cond(np.linalg.eigvalsh(A + A.T)), s
    # mixed_3d and both_V share Q, K (same seed 36 and rule) and differ in V (seeds 32 and 35)
    m, b = cd.draws("mixed_3d"), cd.draws("both_V")
    assert np.array_equal(m["Q"], b["Q"]) and not np.array_equal(m["V"], b["V"])
    # their grid keeps u² + w² < 1: 10x10 on [-.5, .5]² keeps all 100, 40x40 on [-1, 1]² keeps 1184
    assert len(cd.authors_grid(10, 10)[0]) == 100
    assert len(cd.authors_grid(40, 40, (-1, 1, -1, 1))[0]) == 1184


def test_projected_euler_clips_and_stops_like_theirs():
    """One step by hand: S + hF(S), eigenvalues below 0 set to 1e-14; the returned iterate is the one before
    the converging update."""
    w = cd.softmax_weights(np.eye(2), -np.eye(2), np.eye(2))
    F = cd.covariance_field([w])
    S0 = np.array([[[1.0, 0.0], [0.0, 0.5]]])
    res = cd.projected_euler(F, S0, h=1.0, tol_low=1e-30, max_iter=1)
    step = S0[0] + 1.0 * (-np.sqrt(2)) * S0[0] @ S0[0]      # dΣ/dt = Σ(A + Aᵀ)Σ = -√2 Σ² here
    lam, U = np.linalg.eigh(step)
    assert lam[0] < 0 and res.clipped[0] == 1
    expect = U @ np.diag(np.where(lam < 0, 1e-14, lam)) @ U.T
    assert res.status == ["max_iter"] and np.allclose(res.paths[0][-1], S0[0])
    res2 = cd.projected_euler(F, S0, h=1.0, tol_low=1e-30, max_iter=2)
    assert np.allclose(res2.last[0], expect, atol=1e-15)
    conv = cd.projected_euler(F, S0, h=0.1, tol_low=1e-2, max_iter=10_000)
    assert conv.status == ["converged"]
    assert np.linalg.norm(F(conv.last)[0]) < 1e-2        # the returned iterate is the converging one


# ------------------------------------------------------------------------------ findings, recomputed
def test_mh_both_runs_with_one_head_which_is_softmax():
    f = cf.mh_both_is_single_head()
    assert f["H1_vs_softmax_max_rel"] == 0.0          # the same head, so the same floats
    assert f["H2_vs_softmax_max_rel"] > 0.5           # the intended two-head split is another flow


def test_mh_rank_1_second_head_is_empty():
    f = cf.mh_rank_1_empty_head()
    assert f["A2_max_abs"] == 0.0
    assert f["C1"] == [[1.0, 0.0], [0.0, 0.0]]
    assert f["MH_vs_head1_alone_max_rel"] == 0.0


def test_sinkhorn_closed_form_with_singular_A():
    f = cf.sinkhorn_singular_A(n_check=2)
    assert f["rank_A"] == 1
    # ours solves the first-order condition to round-off (a few float64 matrix products) and matches the
    # discrete plan on 20x20 Gauss-Hermite nodes (quadrature error measured below 1e-13)
    assert f["ours_residual_max"] < 1e-13 and f["ours_vs_discrete_max_rel"] < 1e-12
    # theirs does not: at every grid point it misses the condition by > 1e-3, at worst by ~50 % in dΣ/dt
    assert f["theirs_residual_min"] > 1e-3 and f["theirs_vs_discrete_min_rel"] > 0.1
    assert 0.4 < f["rhs_rel_diff_max"] < 0.6 and f["rhs_rel_diff_min"] > 1e-3


def test_sinkhorn_forms_agree_for_invertible_A():
    """Their closed form equals ours where A is invertible (their Sinkhorn figures): the discrepancy is the
    pseudo-inverse only."""
    from symbolic_tpde.numerics.ode.numeric_matrix import sinkhorn_cross_cov

    p = cd.draws("explosion")
    A = p["K"].T @ p["Q"]
    S0, _ = cd.authors_grid(10, 10, (-1, 1, -1, 1))
    for S in S0:
        ours = sinkhorn_cross_cov(A, S)
        assert np.linalg.norm(cf.authors_sinkhorn_cross_cov(A, S) - ours) < 1e-12 * np.linalg.cond(S) * \
            np.linalg.norm(ours)


@pytest.mark.slow
def test_mixed_3d_softmax_file_shows_l2():
    f = cf.mixed_3d_plots_l2(every=8)
    assert f["trad_file_equals_l2_run"]
    # the two runs are different flows: their end states differ by several per cent (measured: median 8 %
    # on every 8th start), while each run reproduces to ~1e-12 (projected Euler is deterministic)
    assert f["softmax_vs_l2_rel_gap_median"] > 0.02


@pytest.mark.slow
@pytest.mark.parametrize("d, wrong", [(3, 3), (4, 8), (5, 2)])
def test_rank_histogram_errors(d, wrong):
    f = cf.histogram_rank_errors(d, 20)
    assert f["all_converged"]
    assert f["n_wrong"] == wrong                       # draws whose rank changes from h to h/10
    assert f["n_wrong_with_clipping"] == wrong         # every one had an eigenvalue clipped at h
    assert f["n_wrong_lower"] == wrong                 # and lost rank
    assert f["n_h10_differs_from_exact"] == 0          # h/10 gives the exact solution's rank
    assert f["ranks_adaptive_at_stop"] == f["ranks_exact_at_stop"]
    # DOPRI5 at rtol 1e-10 over t ~ 1e2 against the closed form: global error ~1e-10 relative
    assert f["adaptive_vs_exact_max_rel"] < 1e-8
    assert max(f["limit_ranks"]) <= f["bound"] and min(f["limit_ranks"]) >= 0


@pytest.mark.slow
def test_make_writes_the_files(tmp_path):
    paths = castin2025.make("MH_rank_1", tmp_path, panels=True, formats=("png", "pdf"))
    names = sorted(p.name for p in paths)
    assert names == sorted(f"castin2025_MH_rank_1{s}.{e}" for s in ("", "_MH_rank_1_theirs", "_MH_rank_1_ours")
                           for e in ("png", "pdf"))
    assert all(p.stat().st_size > 10_000 for p in paths)


def test_unknown_family_is_an_input_error():
    from symbolic_tpde.errors import InputError

    with pytest.raises(InputError, match="unknown family"):
        castin2025.make("nope", "/nonexistent")
