"""Figure machinery: grid, cone coordinates, trajectory labels per family, files written."""

import dataclasses

import numpy as np
import pytest

from symbolic_tpde.experiments import figures as F


def test_init_grid_trace_one_spd():
    S, w = F.init_grid(8, 0.95)
    assert np.allclose(np.trace(S, axis1=1, axis2=2), 1.0)
    assert np.all(np.linalg.eigvalsh(S)[:, 0] > 0)
    x, y, z = F.cone_xyz(S)
    # PSD <=> inside the round cone z >= sqrt(x^2 + y^2); rank one <=> on its boundary
    assert np.all(z > np.hypot(x, y))
    R1 = np.array([[[0.64, 0.48], [0.48, 0.36]]])
    x, y, z = F.cone_xyz(R1)
    assert np.isclose(np.hypot(x, y)[0], z[0])


@pytest.mark.slow   # ~30 s: every family; the fast suite checks figure labels = classify (test_figure_verdicts)
def test_family_outcomes_match_theory():
    S0, _ = F.init_grid(4, 0.8)
    fam = F.family_explosion()
    labels = {}
    for name, w in fam.variants:
        tr = F.compute(w, S0, 20.0, n_out=20)
        labels[name] = set(tr.labels)
    assert labels["softmax"] == {"blowup"} and labels["multi-head (H=2)"] == {"blowup"}
    assert labels["l2"] == {"diverge"} and labels["sinkhorn"] == {"diverge"}
    fam = F.family_rank_one()
    tr = F.compute(fam.variants[0][1], S0, 1e3, n_out=20)
    assert set(tr.labels) == {"rank 1"}
    # rank-one limit lies on ker A = q⊥ (A = -qᵀq/√2): Σ_end q ≈ 0 relative to tr Σ_end (O(1/T))
    A = fam.variants[0][1].heads[0].params["A"]
    w_, U = np.linalg.eigh(A + A.T)
    q = U[:, 0]
    assert np.max(np.abs(tr.Sig_end @ q)) < 1e-2


def test_make_family_figure_writes_files(tmp_path):
    fam = dataclasses.replace(F.family_collapse(), grid=3, T=10.0)
    fam = dataclasses.replace(fam, variants=fam.variants[:1])
    paths = F.make_family_figure(fam, tmp_path, formats=("png",))
    assert paths[0].exists() and paths[0].stat().st_size > 10_000


# ------------------------------------------------------------------ rank histograms: stiff continuation (issue 13)
def _draw(d: int, seed: int, row: int, v_random: bool = True):
    """Row ``row`` of :func:`figures_extra.rank_samples` (same generator order: Q, B, G per draw), softmax."""
    from symbolic_tpde.gaussian import GaussianODE
    from symbolic_tpde.weights import make_head, make_weights

    rng = np.random.default_rng(seed)
    for _ in range(row + 1):
        Q = rng.normal(size=(d // 2, d))
        B = rng.normal(size=(d, d))
        G = rng.normal(size=(d, d))
    V = B.T @ B if v_random else np.eye(d)
    A = -Q.T @ Q / np.sqrt(d)
    return GaussianODE.from_weights(make_weights([make_head("softmax", A=A, V=V)])), A, V, G @ G.T


def test_stiff_continuation_matches_closed_form_v_identity():
    # independent route: with V = I, Σ(t) = (Σ0⁻¹ - t(A + Aᵀ))⁻¹ (README Mathematics §4, closed_forms.sigma_vi)
    from symbolic_tpde.analysis.closed_forms import sigma_star_vi, sigma_vi
    from symbolic_tpde.experiments.rank_resolve import continue_stiff

    ode, A, _, S0 = _draw(5, 90, 3, v_random=False)
    R = continue_stiff(ode, sigma_vi(10.0, S0, A), 10.0, 1e8, S0, 3)
    assert R.result is not None and R.result.short == "rank 3", R.reason
    S_ref = sigma_vi(1e8, S0, A)
    # Radau at rtol 1e-6 over ~7 decades of t: 1e-4 relative to ‖Σ‖ leaves two decades for accumulation
    assert np.abs(R.Sigma - S_ref).max() < 1e-4 * np.abs(S_ref).max()
    S_star, _ = sigma_star_vi(S0, A)
    lam = np.linalg.eigvalsh(S_star)
    assert int(np.sum(lam > 1e-9 * lam.sum())) == R.result.rank


def test_stiff_continuation_settles_ill_conditioned_draw():
    # draw 26 of the d = 5, V = BᵀB softmax panel (seed 40 + 10·5 + 1): λ_min(V) ≈ 2e-6, the explicit batch
    # exhausts its step budget near t = 2e3 ("undetermined")
    from symbolic_tpde.experiments.rank_resolve import continue_stiff

    ode, A, V, S0 = _draw(5, 91, 26)
    assert np.linalg.eigvalsh(V)[0] < 1e-5
    R = continue_stiff(ode, S0, 0.0, 1e8, S0, 3)
    assert R.result is not None and R.result.outcome == "rank" and R.result.rank <= 3, R.reason
    # independent checks from README Mathematics §4: the persistent range lies in ker(A + Aᵀ) (Σ*(A + Aᵀ)Σ* = 0;
    # the decaying part is O(1/T), so ‖A U‖ is small against ‖A‖), and tr(V⁻¹Σ) has not increased
    U = np.linalg.eigh(R.result.Sigma_star)[1][:, 5 - R.result.rank:]     # the range of Σ* (eigh: ascending)
    assert np.linalg.norm(A @ U, 2) < 1e-2 * np.linalg.norm(A, 2)
    Vi = np.linalg.inv(V)
    assert np.trace(Vi @ R.Sigma) <= np.trace(Vi @ S0)


def test_stiff_continuation_reports_reason_when_budget_spent():
    from symbolic_tpde.experiments.rank_resolve import continue_stiff

    ode, _, _, S0 = _draw(5, 91, 26)
    R = continue_stiff(ode, S0, 0.0, 1e8, S0, 3, max_nfev=50)
    assert R.result is None and "budget of 50 evaluations" in R.reason and R.t_reached < 1e7


@pytest.mark.slow
def test_rank_samples_verdicts_within_bound_or_unresolved_with_reason():
    # the whole d = 5, V = BᵀB softmax panel as the figure draws it (README Mathematics §4 bound ⌈d/2⌉ = 3)
    from symbolic_tpde.experiments.figures_extra import rank_samples

    ranks, thr, labels = rank_samples("softmax", 5, True, 40, 91, T=1e6)
    assert all(-1 <= r <= 3 for r in ranks)
    assert all(lab.startswith("unresolved: ") for r, lab in zip(ranks, labels) if r < 0)
    assert sum("stiff Radau" in lab for lab in labels) >= 1  # the continuation settled at least one draw
