"""Spectral circle solver (symbolic_tpde.numerics.grids.circle): the velocity against direct quadrature of its
definition, the growth rate of each Fourier mode from the uniform state against the linearisation (mpmath
Bessel functions), and the number of clusters that emerge from a nearly uniform start."""

import math

import numpy as np
import pytest

from symbolic_tpde.errors import InputError
from symbolic_tpde.numerics.grids.circle import (
    circle_velocity, circle_weights, growth_rates, initial_density, solve_circle, trig_moments
)
from symbolic_tpde.weights import make_head, make_weights

M = 64
TH = 2 * np.pi * np.arange(M) / M


@pytest.mark.parametrize("kind", ["SA", "USA"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_mode_growth_matches_the_linearisation(kind, k):
    """A 1e-8 perturbation in mode k grows at λ_k = k² I_k(β)/(β c) to 1e-6 relative (the nonlinear correction
    is O(1e-8), the integration is at rtol 1e-12 of the deviation)."""
    beta, eps = 5.0, 1e-8
    rho0 = (1 + eps * np.cos(k * TH)) / (2 * np.pi)
    lam = growth_rates(beta, 8, kind)
    sol = solve_circle(rho0, circle_weights(beta, kind), 1.0 / lam[k], rtol=1e-12)
    rate = math.log(abs(np.fft.fft(sol.y[-1])[k] / np.fft.fft(rho0)[k])) / sol.t[-1]
    assert abs(rate / lam[k] - 1) <= 1e-6
    assert abs(sol.y[-1].sum() * 2 * np.pi / M - 1) <= 1e-13          # mass
    with_noise = growth_rates(beta, 8, kind, noise=0.1)
    assert with_noise[k] == pytest.approx(lam[k] - 0.1 * k * k, rel=1e-14)


def test_noise_damps_at_the_predicted_rate():
    beta, eps, nu, k = 1.0, 1e-8, 0.5, 2
    rho0 = (1 + eps * np.cos(k * TH)) / (2 * np.pi)
    lam = growth_rates(beta, 4, "SA", noise=nu)
    assert lam[k] < 0
    sol = solve_circle(rho0, circle_weights(beta, "SA"), 1.0, noise=nu, rtol=1e-12)
    rate = math.log(abs(np.fft.fft(sol.y[-1])[k] / np.fft.fft(rho0)[k])) / sol.t[-1]
    assert abs(rate / lam[k] - 1) <= 1e-6


@pytest.mark.parametrize("beta", [5.0, pytest.param(12.0, marks=pytest.mark.slow)])
def test_number_of_clusters_is_the_fastest_mode(beta):
    """From the uniform state plus 1e-12 in each of the modes 1..10 (fixed random phases), the density is run
    until its maximum reaches 3x the uniform value; its number of peaks (local maxima above the uniform value)
    is the fastest-growing mode k* of the linearisation (β = 5: three, Bruno-Pasqualotto-Agazzi)."""
    Mc = 128
    th = 2 * np.pi * np.arange(Mc) / Mc
    rng = np.random.default_rng(0)
    rho0 = np.ones(Mc)
    for k in range(1, 11):
        rho0 += 1e-12 * np.cos(k * th + rng.uniform(0, 2 * np.pi))
    rho0 /= 2 * np.pi
    lam = growth_rates(beta, 20, "SA")
    kstar = int(np.argmax(lam))
    T = math.log(1e12) / lam[kstar] * 1.5
    ts = np.linspace(0, T, 400)
    sol = solve_circle(rho0, circle_weights(beta, "SA"), T, t_eval=ts, rtol=1e-9)
    hit = np.nonzero(sol.y.max(axis=1) >= 3 / (2 * np.pi))[0]
    assert hit.size, "no clusters formed"
    rho = sol.y[hit[0]]
    peaks = (rho > np.roll(rho, 1)) & (rho >= np.roll(rho, -1)) & (rho > 1 / (2 * np.pi))
    assert int(peaks.sum()) == kstar, (int(peaks.sum()), kstar)
    if beta == 5.0:
        assert kstar == 3


def test_bad_input():
    with pytest.raises(InputError):
        growth_rates(-1.0, 3)
    with pytest.raises(InputError):
        solve_circle(np.ones(7), circle_weights(1.0), 1.0)
    with pytest.raises(InputError):
        circle_weights(1.0, kind="nope")


def _rot(a, b):
    return np.array([[a, -b], [b, a]])


@pytest.mark.parametrize("norm", ["post", "ngpt"])
def test_velocity_of_general_heads_is_the_attention_field(norm):
    """Two heads (SA and USA) with A = aI + bJ, V = vI + wJ (not the identity, so the kernel is a shifted
    convolution and V rotates): against the vector definition A_i = Σ_heads V Σ_j w_ij θ_j (trapezoid rule,
    exact for a band-limited density), projected on the tangent e_θ = (-sin θ, cos θ) (nGPT: α/|A| times it)."""
    rho = (1 + 0.3 * np.cos(TH - 0.4) + 0.2 * np.sin(3 * TH)) / (2 * np.pi)
    heads = [make_head("sphere_sa", A=_rot(1.2, -0.5), V=_rot(0.7, 0.4), beta=1.5),
             make_head("sphere_usa", A=_rot(-0.3, 0.8), V=_rot(1.0, -0.2), beta=0.8)]
    w = make_weights(heads)
    P = np.stack([np.cos(TH), np.sin(TH)], axis=1)
    A = np.zeros((M, 2))
    for h in heads:
        p = h.effective
        logits = p["beta"] * (P @ p["A"].T) @ P.T                  # β <A θ_i, θ_j>
        W = np.exp(logits) * rho * (2 * np.pi / M)
        if h.kind == "sphere_sa":
            W = W / W.sum(1, keepdims=True)
        A += (W @ P) @ p["V"].T
    e = np.stack([-np.sin(TH), np.cos(TH)], axis=1)
    ref = (e * A).sum(1)
    if norm == "ngpt":
        ref = 0.7 * ref / np.linalg.norm(A, axis=1)
    got = circle_velocity(rho, w, norm=norm, alpha=0.7)
    assert np.abs(got - ref).max() <= 1e-13 * max(1.0, np.abs(ref).max())


def test_large_beta_normalised_is_finite_unnormalised_is_refused():
    """β = 1000: I_k(β) overflows float64 (from β ≈ 713).  The SA field is of degree 0 in the kernel's
    coefficients and is computed from e^{-β} I_k(β).  Reference: the definition, the softmax over a fine
    quadrature of the density (20000 points, log-sum-exp; the kernel's width 1/√β ≈ 0.03 spans 100 points, and the
    periodic trapezoid rule converges geometrically), for a density with modes |k| <= 1 (for which the spectral
    field is exact).  USA's field is of size e^β: refused by name (it printed a RuntimeWarning and called the
    run a blow-up at t = 0, found by fuzz_cli --stream new --seed 2026, case 987)."""
    beta = 1000.0
    dens = lambda th: (1 + 0.3 * np.cos(th - 0.4)) / (2 * np.pi)      # noqa: E731
    phi = 2 * np.pi * np.arange(20000) / 20000
    P, Q = np.stack([np.cos(TH), np.sin(TH)], axis=1), np.stack([np.cos(phi), np.sin(phi)], axis=1)
    logits = beta * P @ Q.T + np.log(dens(phi))
    W = np.exp(logits - logits.max(1, keepdims=True))
    A = (W / W.sum(1, keepdims=True)) @ Q
    ref = (np.stack([-np.sin(TH), np.cos(TH)], axis=1) * A).sum(1)
    got = circle_velocity(dens(TH), make_weights([make_head("sphere_sa", A=np.eye(2), V=np.eye(2), beta=beta)]))
    # tolerance: the reference's softmax sums 2e4 terms (round-off ~1e-12 relative) and the spectral field's
    # ratio of Bessel sums ~1e-13, both absolute: the field (3e-4 here) is the tangential part of an O(1) vector
    assert np.abs(got - ref).max() <= 1e-11, np.abs(got - ref).max()
    assert np.all(np.isfinite(growth_rates(beta, 8)))
    with pytest.raises(InputError) as e:
        circle_velocity(dens(TH), make_weights([make_head("sphere_usa", A=np.eye(2), V=np.eye(2), beta=beta)]))
    assert e.value.field == "beta"


def test_refusals_name_the_field():
    ok = make_head("sphere_sa", A=np.eye(2), V=np.eye(2), beta=1.0)
    rho = np.full(16, 1 / (2 * np.pi))
    cases = [(make_weights([make_head("sphere_sa", A=np.array([[1.0, 0.2], [0.0, 1.0]]), V=np.eye(2), beta=1.0)]),
              "post", "heads[0].A"),
             (make_weights([ok, make_head("sphere_causal", A=np.eye(2), V=np.eye(2), beta=1.0)]), "post",
              "heads[1].attention"),
             (make_weights([ok]), "pre", "norm"),
             (make_weights([make_head("sphere_sa", A=np.eye(3), V=np.eye(3), beta=1.0)]), "post", "d")]
    for w, norm, field in cases:
        with pytest.raises(InputError) as e:
            circle_velocity(rho if field != "d" else rho, w, norm=norm)
        assert e.value.field == field, (field, e.value)
    with pytest.raises(InputError) as e:
        initial_density({"type": "frame"}, 16)
    assert e.value.field == "init.type"


def test_von_mises_density_and_moments():
    """The vmf init on S^1 is the von Mises density: mass 1 and first moment I_1(κ)/I_0(κ) e^{iθ_μ}."""
    import mpmath

    rho = initial_density({"type": "vmf", "mu": [0.0, 2.0], "kappa": 3.0}, 64)
    m = trig_moments(rho, 2)
    assert abs(rho.sum() * 2 * np.pi / 64 - 1) <= 1e-13
    assert abs(m[0] - 1j * float(mpmath.besseli(1, 3) / mpmath.besseli(0, 3))) <= 1e-13


@pytest.mark.parametrize("kind, T", [("sphere_sa", 2.0), ("sphere_usa", 0.5)])
def test_spectral_vs_sphere_particles(kind, T):
    """Spectral solution (M = 128) against the sphere particle simulator from von Mises data, general A, V:
    the trigonometric moments E e^{ikθ}, k = 1..3, within 4 standard errors estimated from 8 independent
    replicates of n = 250 (interacting particles are not i.i.d. at T, so the SE is measured, not the i.i.d.
    formula); the time-integration errors (rtol 1e-10 and 1e-8) are far below the SE (~0.01-0.02)."""
    from symbolic_tpde.numerics.particles.sphere import simulate_sphere
    from symbolic_tpde.numerics.measures.laws import sample_sphere as sample

    w = make_weights([make_head(kind, A=_rot(1.0, 0.3), V=_rot(0.8, 0.2), beta=2.0)])
    init = {"type": "vmf", "mu": [1.0, 0.5], "kappa": 1.0}
    sol = solve_circle(initial_density(init, 128), w, T)
    assert sol.status == "ok" and sol.y[-1].min() > 0
    ref = trig_moments(sol.y[-1], 3)
    rng = np.random.default_rng(7)
    B, n = 8, 250
    th = simulate_sphere(np.stack([sample(init, n, 2, rng) for _ in range(B)]), w, T, tol=1e-8).theta
    ang = np.arctan2(th[..., 1], th[..., 0])
    reps = np.stack([np.exp(1j * k * ang).mean(axis=1) for k in (1, 2, 3)], axis=1)
    se = np.sqrt((np.abs(reps - reps.mean(0)) ** 2).sum(0) / (B * (B - 1)))
    z = np.abs(reps.mean(0) - ref) / se
    assert np.all(z <= 4), (z, ref, reps.mean(0))
    assert np.all(np.abs(ref) > 0.05)      # the moments compared are not all ~0


def test_cli_circle_pde_against_cli_sphere_particles(tmp_path, capsys):
    """End to end: `tpde pde` on the built-in circle scenario against `tpde particles` on the same scenario
    (6 seeds of n = 200, final tokens from --save): E e^{ikθ}, k = 1..3, within 4 replicate standard errors."""
    import json

    from symbolic_tpde.cli import main

    assert main(["pde", "--scenario", "sphere_sa_circle", "--grid", "128", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["geometry"] == "circle" and abs(out["mass"] - 1) <= 1e-13
    ref = np.array([complex(*c) for c in out["moments"]])
    reps = []
    for seed in range(6):
        f = tmp_path / f"p{seed}.npz"
        assert main(["particles", "--scenario", "sphere_sa_circle", "--n", "200", "--seed", str(seed),
                     "--save", str(f), "--json"]) == 0
        capsys.readouterr()
        X = np.load(f)["X"][-1]
        ang = np.arctan2(X[:, 1], X[:, 0])
        reps.append([np.exp(1j * k * ang).mean() for k in (1, 2, 3)])
    reps = np.array(reps)
    se = np.sqrt((np.abs(reps - reps.mean(0)) ** 2).sum(0) / (len(reps) * (len(reps) - 1)))
    assert np.all(np.abs(reps.mean(0) - ref) <= 4 * se), (ref, reps.mean(0), se)
    # options of the finite-volume solver are refused on the circle, --noise off it
    assert main(["pde", "--scenario", "sphere_sa_circle", "--grid", "64", "--cfl", "0.5"]) == 2
    assert main(["pde", "--scenario", "mixture_1d", "--grid", "64", "--noise", "0.1"]) == 2
    assert main(["pde", "--scenario", "sphere_sa_circle", "--grid", "63"]) == 2


def test_cli_cluster_count_from_circle_modes(tmp_path, capsys):
    """The cluster-count check from the CLI: a `circle_modes` init (uniform plus 1e-9 in modes 1..10, fixed
    phases), β = 5, run to T = log(1e9)/λ_3 + 1 (the fastest mode k* = 3 has grown to O(1)); `tpde pde` counts
    3 peaks.  The init's parser: moments in closed form against sampled tokens, bad amplitudes refused."""
    import json

    from symbolic_tpde.cli import main
    from symbolic_tpde.numerics.measures.laws import sample
    from symbolic_tpde.inputs.scenario import parse_init

    beta = 5.0
    lam = growth_rates(beta, 20, "SA")
    rng = np.random.default_rng(1)
    modes = [[k, 1e-9, float(rng.uniform(0, 2 * np.pi))] for k in range(1, 11)]
    T = math.log(1e9) / lam[3] + 1.0
    scn = {"geometry": "sphere", "norm": "post", "attention": "sphere_sa", "d": 2, "beta": beta, "A": "identity",
           "V": "identity", "init": {"type": "circle_modes", "modes": modes}, "T": T}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(scn))
    assert main(["pde", "--scenario", str(f), "--grid", "128", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ok" and out["peaks"] == 3 == int(np.argmax(lam)), out
    # the law's mean and covariance (closed form) against 40 000 rejection samples: 5 SE
    spec = parse_init({"type": "circle_modes", "modes": [[1, 0.4, 0.5], [2, 0.3, -1.0], [5, 0.2, 0.0]]},
                      d=2, geometry="sphere")
    X = sample(spec, 40_000, np.random.default_rng(2))
    assert np.all(np.abs(X.mean(0) - spec.mean) <= 5 * X.std(0) / 200), (X.mean(0), spec.mean)
    C = np.cov(X.T, bias=True)
    assert np.all(np.abs(C - spec.cov) <= 5 * 0.5 / 200), (C, spec.cov)
    for bad in ([[1, 0.7, 0.0], [2, 0.4, 0.0]], [[0, 0.1, 0.0]], [[1, -0.1, 0.0]], []):
        with pytest.raises(InputError):
            parse_init({"type": "circle_modes", "modes": bad}, d=2, geometry="sphere")
    with pytest.raises(InputError):
        parse_init({"type": "circle_modes", "modes": [[1, 0.1, 0.0]]}, d=3, geometry="sphere")
