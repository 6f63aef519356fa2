"""Figure machinery: grid, cone coordinates, trajectory labels per family, files written."""

import dataclasses

import numpy as np

from symbolic_tpde.analysis import figures as F


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
