"""The figures classify with the rules of ``tpde classify`` (issue 20: one classifier, so they cannot disagree;
a verdict the theory excludes is never printed)."""

import numpy as np
import pytest

from symbolic_tpde.analysis.verdict import classify_long_time
from symbolic_tpde.experiments import figures as F
from symbolic_tpde.gaussian import GaussianODE

S0, _ = F.init_grid(3, 0.8)
RTOL = 1e-7          # the figures' tolerance (figures.compute), used by both sides


def _both(fam, name, rows):
    w = dict(fam.variants)[name]
    T = fam.horizon(name)
    fig = F.compute(w, S0[rows], T, n_out=10)
    ode = GaussianODE.from_weights(w)
    one = [classify_long_time(ode, S, T, rtol=RTOL) for S in S0[rows]]
    return fig, one


def test_theorem_decided_points_agree_with_classify():
    """Softmax with V = I (explosion family): the closed form decides; the figure's T* is classify's."""
    fig, one = _both(F.family_explosion(), "softmax", [0, 2])
    assert fig.labels == [v.short for v in one] == ["blowup", "blowup"]
    assert all(v.source == "theorem" for v in one)
    # both are the closed form T* = 1/λ_max(Σ₀^½ S Σ₀^½): equal up to round-off of the same evaluation
    assert np.allclose(fig.blowup_times, [v.blowup_time for v in one], rtol=1e-13, atol=0)


def test_numeric_points_agree_with_classify():
    """Softmax with V ≠ cI (collapse family: numerics, Lyapunov theorem) and ℓ2 (rank-one family: numerics,
    growth theorem): the figure's labels are classify's, point by point."""
    for fam, name in ((F.family_collapse(), "softmax"), (F.family_rank_one(), "l2")):
        fig, one = _both(fam, name, [1, 3])
        assert all(v.source == "numerical" for v in one)
        assert fig.labels == [v.short for v in one], (name, fig.labels, [v.label for v in one])
        assert set(fig.labels) <= {"collapse", "rank 1"}


@pytest.mark.slow   # ~23 s (the Sinkhorn rows run until precision is lost)
def test_no_l2_or_sinkhorn_point_labelled_blowup():
    """A + Aᵀ ≻ 0, V = I (explosion family): softmax blows up, but ℓ2 (square invertible K) and Sinkhorn have
    no finite-time blow-up (growth theorem), so their rows are never labelled blow-up."""
    fam = F.family_explosion()
    for name in ("l2", "sinkhorn"):
        tr = F.compute(dict(fam.variants)[name], S0, fam.horizon(name), n_out=10)
        assert "blowup" not in tr.labels and not np.isfinite(tr.blowup_times).any()
        assert set(tr.labels) == {"diverge"}
