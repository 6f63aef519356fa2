"""Spectral circle solver (symbolic_tpde.numerics.grid_circle): the velocity against direct quadrature of its
definition, the growth rate of each Fourier mode from the uniform state against the linearisation (mpmath
Bessel functions), and the number of clusters that emerge from a nearly uniform start."""

import math

import numpy as np
import pytest

from symbolic_tpde.errors import InputError
from symbolic_tpde.numerics.grid_circle import circle_velocity, circle_weights, growth_rates, solve_circle

M = 64
TH = 2 * np.pi * np.arange(M) / M


@pytest.mark.parametrize("kind", ["SA", "USA"])
def test_velocity_is_the_attention_field(kind):
    """Against the definition v(θ) = -∫ e^{β cos(θ-φ)} sin(θ-φ) ρ(φ) dφ / Z(θ) by the trapezoid rule (exact to
    round-off for this band-limited density and enough points)."""
    rho = (1 + 0.3 * np.cos(TH) + 0.2 * np.sin(3 * TH)) / (2 * np.pi)
    beta = 2.0
    d = TH[:, None] - TH[None, :]
    K = np.exp(beta * np.cos(d))
    num = (K * np.sin(d) * rho).sum(1) * 2 * np.pi / M
    ref = -num / ((K * rho).sum(1) * 2 * np.pi / M) if kind == "SA" else -num
    assert np.abs(circle_velocity(rho, circle_weights(beta, kind)) - ref).max() <= 1e-14


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
