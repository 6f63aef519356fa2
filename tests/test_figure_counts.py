"""Each figure family's outcome counts recomputed from the theory (README Mathematics §4, §7; issue 13 item 1).

Small grids (a few Σ₀) to stay fast; the figure code path (`figures.compute`) is the one tested."""

import numpy as np
import pytest

from symbolic_tpde.analysis import figures as F
from symbolic_tpde.analysis import figures_extra as FX

S0, _ = F.init_grid(3, 0.8)


def _labels(fam, name, T=None):
    w = dict(fam.variants)[name]
    return F.compute(w, S0, fam.T if T is None else T, n_out=10).labels


@pytest.mark.slow
def test_multihead_row_split_is_the_softmax_flow_for_KtQ():
    """Row-split heads with a shared V add up to one head with A = KᵀQ = √2 A_softmax (README Math §3); the
    covariance ODE is homogeneous of degree one in A, so the multi-head trajectory at t is the softmax one at
    √2 t: the multi-head row at horizon T and the softmax row at horizon √2 T see the same trajectories and
    get the same labels, Σ₀ by Σ₀ (the classifier's verdict depends on the horizon, so equal horizons would
    not be a fair comparison)."""
    fam = F.family_two_lines()
    names = [n for n, _ in fam.variants]
    mh = next(n for n in names if n.startswith("multi-head"))
    w_mh = dict(fam.variants)[mh]
    A_sum = sum(h.params["A"] for h in w_mh.heads)
    A_soft = dict(fam.variants)["softmax"].heads[0].params["A"]
    assert np.allclose(A_sum, np.sqrt(2) * A_soft, rtol=1e-14, atol=1e-15)
    a, b = _labels(fam, mh), _labels(fam, "softmax", T=fam.T * np.sqrt(2))
    assert a == b


def test_collapse_family_collapses():
    """A = -QᵀQ/√2 ≺ 0 (Q uniform, full rank a.s.), V SPD: Σ → 0 for softmax (README Math §4, Lyapunov
    identity: tr(V⁻¹Σ) decreases like 1/t)."""
    fam = F.family_collapse()
    assert set(_labels(fam, "softmax")) == {"collapse"}


@pytest.mark.slow
def test_histogram_ranks_never_exceed_the_bound():
    for d in (3, 4):
        ranks, thr, _ = FX.rank_samples("softmax", d, True, 4, 40 + 10 * d + 1, T=1e5)
        assert max(ranks) <= (d + 1) // 2 and max(thr) <= (d + 1) // 2
