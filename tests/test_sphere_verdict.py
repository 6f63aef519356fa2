"""Long-time verdicts on the sphere (symbolic_tpde.analysis.sphere_verdict through the one classifier):
theorems only when their hypotheses hold, the exact equiangular reduction against the particle system, and
numerical verdicts with their evidence, each against a reference that does not share the code path."""

import json
import subprocess
import sys

import numpy as np
import pytest

from symbolic_tpde.analysis.sphere_verdict import hemisphere_margin
from symbolic_tpde.analysis.verdict import classify_long_time
from symbolic_tpde.numerics.particles.sphere import parse_sphere_scenario, simulate_sphere


def _scn(**kw):
    base = {"geometry": "sphere", "attention": "sphere_sa", "d": 3, "beta": 1.0, "A": "identity",
            "V": "identity", "init": {"type": "uniform_sphere"}, "T": 10.0}
    return parse_sphere_scenario({**base, **kw})


def _cap(n, d, rng, height=0.2):
    """Tokens with last coordinate >= height: in the open hemisphere {x_d > 0} by construction."""
    X = rng.standard_normal((n, d))
    X[:, -1] = np.abs(X[:, -1])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X[:, -1] = np.maximum(X[:, -1], height)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def test_hemisphere_start_is_one_cluster_by_the_theorem():
    """Tokens in {x_d > 0} (by construction) with Post-LN SA, A = V = I: the hemisphere theorem, no run; the
    particles (a different code path) indeed reach one cluster.  A point set containing an antipodal pair has
    no open hemisphere (⟨w, θ⟩ and ⟨w, -θ⟩ cannot both be > 0): the LP margin is <= round-off."""
    X = _cap(12, 4, np.random.default_rng(0))
    s = _scn(d=4)
    v = classify_long_time(s, X, 100.0)
    assert v.source == "theorem" and v.outcome == "one-cluster" and v.facts[0].name == "hemisphere"
    assert v.facts[0].values["margin"] > 0.1          # x_d >= 0.2/|.| >= 0.19: w = e_d gives at least that
    run = simulate_sphere(X, s.weights, 100.0)
    assert np.min(run.theta @ run.theta.T) >= 1 - 1e-6
    Y = np.vstack([X, -X[:1]])
    assert hemisphere_margin(Y)[0] <= 1e-12


@pytest.mark.parametrize("change, reason", [
    ({"norm": "pre"}, "Post-LN"), ({"A": [[1, 0, 0], [0, 0.5, 0], [0, 0, 0.2]]}, "multiple of the identity"),
    ({"beta": -1.0}, "< 0"), ({"V": [[1, 0.1, 0], [0, 1, 0], [0, 0, 1]]}, "V is not")])
def test_theorems_refuse_when_a_hypothesis_fails(change, reason):
    """Each failed hypothesis is named in the evidence and the verdict is numerical (particles, with the run's
    description); the cluster count at T agrees with a direct pair count of an independent run's end state."""
    s = _scn(**change)
    X = _cap(6, 3, np.random.default_rng(1))
    v = classify_long_time(s, X, 20.0)
    assert v.source == "numerical" and not v.facts
    assert any("hemisphere" in e and reason in e for e in v.evidence), v.evidence
    assert any("particles" in e and "tolerance" in e for e in v.evidence)
    th = simulate_sphere(X * (1.0 if s.norm == "post" else s.r0), s.weights, 20.0, norm=s.norm).theta
    linked = th @ th.T >= 1 - 1e-3
    # components by repeated squaring of the adjacency (independent of scipy's connected_components)
    R = linked.astype(int)
    for _ in range(5):
        R = ((R @ R) > 0).astype(int)
    assert v.clusters == len({tuple(row) for row in R})


def test_equiangular_pre_ln_verdict_matches_the_particles():
    """Pre-LN SA from an orthonormal frame (n = d = 4): no theorem (Pre-LN), the derived reduction integrated
    by scipy; the particle system from the same frame gives the same ρ(T) to 1e-7 (two tolerance-1e-10 runs
    over T = 60) and the same crossing time of 1 - δ to the frame spacing of the check (0.05); the approach is
    polynomial with power 2 (derived)."""
    s = _scn(d=4, norm="pre", init={"type": "frame"})
    X = s.initial(4, np.random.default_rng(0))
    v = classify_long_time(s, X, 60.0)
    assert v.source == "numerical" and "equiangular" in v.label and v.outcome == "one-cluster"
    assert v.rate["power"] == pytest.approx(2.0, abs=1e-12)
    times = np.linspace(0, 60, 1201)
    run = simulate_sphere(X, s.weights, 60.0, norm="pre", t_eval=times)
    assert abs(float((run.theta @ run.theta.T)[0, 1]) - v.min_inner) <= 1e-7
    U = run.trajectory / np.linalg.norm(run.trajectory, axis=2, keepdims=True)
    rho = np.einsum("kd,kd->k", U[:, 0], U[:, 1])
    t_hit = times[np.argmax(rho >= 1 - 1e-3)]
    assert abs(t_hit - v.time_to_one_cluster) <= 0.05


@pytest.mark.parametrize("norm, kind, n, d", [("post", "sphere_usa", 2, 3), ("ngpt", "sphere_sa", 4, 3),
                                             ("post", "sphere_sa", 3, 2)])
def test_antipodal_and_simplex_are_equilibria(norm, kind, n, d):
    """Antipodal tokens (ρ = -1) and the regular simplex (n = d + 1, ρ = -1/(n-1)): exact zeros of the derived
    ρ', so "equilibrium"; no hemisphere exists (and nGPT is not Post-LN), so no theorem.  Reference: the
    particles do not move (the projected attention vanishes by symmetry) over T = 3, to 1e-10: the equilibria
    are unstable, so the round-off of the steps (~1e-16) grows; 1e-10 leaves it a factor 1e6 of growth (about
    5e-12 was measured at T = 20)."""
    if n == 2:
        X = np.array([[0.0, 0.6, 0.8], [0.0, -0.6, -0.8]])
    else:
        E = np.eye(n) - 1.0 / n                          # centred basis of R^n: a regular simplex in a d-plane
        U = np.linalg.svd(E)[2][:d]
        X = E @ U.T
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    s = _scn(d=d, norm=norm, attention=kind, init={"type": "frame"})
    v = classify_long_time(s, X, 20.0)
    assert v.outcome == "equilibrium" and not v.facts, v.label
    why = "not certified" if norm == "post" else "Post-LN"
    assert any("hemisphere" in e and why in e for e in v.evidence)
    run = simulate_sphere(X, s.weights, 3.0, norm=norm)
    assert np.max(np.abs(run.theta - X)) <= 1e-10


def test_causal_theorem_for_any_A():
    """Causal mask, V = I, a non-symmetric A: the theorem of Karagodin-Polyanskiy-Rigollet (any key-query
    matrix) applies to i.i.d. vMF draws; the particles put every token within 1e-6 of the first by T = 60."""
    A = [[1.0, 0.3, 0.0], [-0.2, 0.5, 0.1], [0.0, 0.0, 0.8]]
    s = _scn(attention="sphere_causal", A=A, init={"type": "vmf", "mu": [0, 0, 1], "kappa": 2.0})
    X = s.initial(8, np.random.default_rng(4))
    v = classify_long_time(s, X, 60.0)
    assert v.source == "theorem" and v.facts[0].name == "causal"
    th = simulate_sphere(X, s.weights, 60.0).theta
    assert np.max(1 - th @ th[0]) <= 1e-6


def test_almost_every_theorem_needs_a_density_and_d3():
    """Uniform draws on S^2: the d >= 3 theorem; on the circle with SA no theorem (d = 2, not USA), with USA
    at β = 1 the circle theorem; a rotated frame (no density, not i.i.d.) gets no almost-sure theorem."""
    X = _scn().initial(8, np.random.default_rng(0))
    names = [f.name for f in classify_long_time(_scn(), X, 1.0).facts]
    assert "almost-every-d>=3" in names
    s2 = _scn(d=2, attention="sphere_usa")
    v = classify_long_time(s2, s2.initial(8, np.random.default_rng(0)), 1.0)
    assert "circle-usa" in [f.name for f in v.facts]
    v = classify_long_time(_scn(d=2), _scn(d=2).initial(8, np.random.default_rng(0)), 5.0)
    assert not any(f.name in ("almost-every-d>=3", "circle-usa") for f in v.facts)
    sf = _scn(d=5, init={"type": "frame", "rotate": True})
    Xf = sf.initial(3, np.random.default_rng(0))
    v = classify_long_time(sf, np.vstack([Xf, -Xf[:1]]), 5.0)      # not equiangular, not in a hemisphere
    assert not v.facts and any("no density" in e for e in v.evidence)


def test_tpde_classify_on_sphere_scenarios():
    p = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "classify", "--scenario", "sphere_causal_vmf",
                        "--n", "6", "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["geometry"] == "sphere" and out["source"] == "theorem" and out["facts"][0]["name"] == "causal"
    p = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "classify", "--scenario", "sphere_usa_frame_pre",
                        "--n", "3", "--T", "50"], capture_output=True, text=True)
    assert p.returncode == 0 and "equiangular" in p.stdout and "numerical" in p.stdout, p.stdout + p.stderr
    bad = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "classify", "--scenario", "sphere_sa_s2",
                          "--n", "1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "n" in bad.stderr


def test_tpde_sweep_sphere_phase_diagram_follows_the_equiangular_curve(tmp_path):
    """`tpde sweep --kind sphere_usa`: the (t, β) map of P(<θ_i, θ_j> >= 0.999), 0 at t = 0 (uniform draws in
    d = 256 have |<θ_i, θ_j>| ~ 1/16) and 1 at T; in high dimension the tokens start nearly equiangular
    (ρ₀ ~ 0 ± 3/√d), so the time where half the pairs are linked is the derived reduction's crossing time of
    ρ = 0.999 from ρ₀ = 0, to 20 % (the spread of ρ₀ shifts it; measured 2-6 % at seed 0,
    20 % leaves room for other seeds) plus one frame (T/60).  Each β carries the classifier's long-time verdict (the d >= 3
    theorem for β >= 0)."""
    out = tmp_path / "sw"
    p = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "sweep", "--kind", "sphere_usa", "--d", "256",
                        "--tokens", "8", "--range", "0", "2", "--n", "3", "--K", "2", "--T", "12", "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    z = np.load(out.with_suffix(".npz"))
    prob, times, teq = z["prob"], z["times"], z["equiangular_time"]
    assert prob.shape == (3, 61) and np.all(prob[:, 0] == 0) and np.all(prob[:, -1] == 1)
    for b in range(3):
        t_half = times[np.argmax(prob[b] >= 0.5)]
        assert abs(t_half - teq[b]) <= 0.2 * teq[b] + times[1], (b, t_half, teq[b])
    meta = json.loads(str(z["meta"]))
    assert all(v["source"] == "theorem" for v in meta["verdicts"])
    assert out.with_suffix(".png").stat().st_size > 0 and "beta,t,prob_linked" in out.with_suffix(".csv").read_text()
    for extra, field in ((["--skew", "1"], "skew"), (["--d", "2000"], "d"), (["--tokens", "1"], "tokens")):
        bad = subprocess.run([sys.executable, "-m", "symbolic_tpde.cli", "sweep", "--kind", "sphere_sa", *extra,
                              "--out", str(out)], capture_output=True, text=True)
        assert bad.returncode == 2 and field in bad.stderr, bad.stderr


@pytest.mark.slow
def test_sphere_figures_are_written(tmp_path, capsys):
    """`tpde figures --only sphere sphere_phase` families (small phase diagram: d = 8, one cloud per β): the
    files exist; the sphere figure's printed numbers say what its panels claim: panel 1 ends with k*(5) = 3
    clusters, panel 2's staircase starts at 32 tokens and ends in one cluster at T = 2000, panel 4's k*(β) is the
    argmax of scipy's Bessel rates."""
    from symbolic_tpde.experiments.figures_sphere import make_phase_figure, make_sphere_figure

    paths = make_phase_figure(tmp_path, dims=(8,), K=1, panels=True)
    assert {p.name for p in paths} >= {"sphere_phase.png", "sphere_phase.pdf", "sphere_phase_1.png"}
    capsys.readouterr()
    paths = make_sphere_figure(tmp_path)
    assert all(p.stat().st_size > 0 for p in paths) and len(paths) == 2
    lines = {ln.split(":")[0]: ln for ln in capsys.readouterr().out.splitlines()}
    assert lines["panel 1"].endswith(", 3; k*(5) = 3"), lines["panel 1"]      # clusters at t = 30 = k*
    assert "(0.1, " in lines["panel 2"] and ", 32)" in lines["panel 2"] and lines["panel 2"].endswith("2000.0, 1)]")
    # panel 4 against scipy's Bessel functions: k* = argmax_k k² I_k(β)/(β I_0(β)) (the rate of the module docstring)
    from scipy.special import ive
    k = np.arange(1, 40)
    want = [int(k[np.argmax(k * k * ive(k, b))]) for b in (1, 2, 5, 8, 12)]
    assert f"12: {want} ;" in lines["panel 4"], (want, lines["panel 4"])
