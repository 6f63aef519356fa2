"""Spectral solver of the Transformer PDE on the circle (normalised tokens, d = 2, Q = K = V = I).

A minimal circle field of its own (the sphere kinds of the "Normalised tokens" issue are built elsewhere; the
lead wires them together): tokens ``θ ∈ [0, 2π)``, Post-LN dynamics ``θ̇ = P⊥_θ A(θ)``, in angle

    v(θ) = -(S * ρ)(θ) / Z(θ),   S(θ) = e^{β cos θ} sin θ,   (f * ρ)(θ) = ∫ f(θ - φ) ρ(φ) dφ,

with ``Z = (K * ρ)``, ``K = e^{β cos θ}`` for SA (softmax-normalised) and ``Z = 1`` for USA (unnormalised;
``ρ`` a probability density), and the PDE ``∂ₜρ + ∂_θ(ρ v) = ν ∂²_θ ρ`` (``noise = ν ≥ 0``: the mean field of
independent Brownian angles of variance ``2ν t``).

Convolutions are exact in the kernel: ``K̂_k = I_k(β)`` (``e^{β cos θ} = Σ_k I_k(β) e^{ikθ}``, modified Bessel
functions, evaluated with mpmath), ``S = -(1/β) K'`` so ``Ŝ_k = -(ik/β) I_k(β)``; ``(f * ρ)^_k = 2π f̂_k ρ̂_k``.
The products ``ρ v`` are formed on ``M`` equispaced points (pseudo-spectral; ``M`` even, modes ``|k| < M/2``,
the Nyquist mode dropped); time by the package's integrator (:func:`.solve.integrate`, Dormand–Prince 5(4)).

Linearisation at the uniform density ``1/2π`` (``v = 0``): mode ``k`` grows at

    λ_k = k² I_k(β) / (β c) - ν k²,    c = I_0(β) (SA) or 1 (USA),

(:func:`growth_rates`), largest at ``k* ~ √β``: the number of clusters that appear first from a nearly uniform
start (β = 5: three).  Checked against the solver in ``tests/test_grid_circle.py``.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import InputError

__all__ = ["bessel_coefficients", "growth_rates", "circle_velocity", "solve_circle"]


def bessel_coefficients(beta: float, kmax: int) -> np.ndarray:
    """``I_k(β)`` for ``k = 0..kmax`` (mpmath, 30 digits, rounded to float)."""
    import mpmath

    with mpmath.workdps(30):
        return np.array([float(mpmath.besseli(k, mpmath.mpf(beta))) for k in range(kmax + 1)])


def growth_rates(beta: float, kmax: int, kind: str = "SA", noise: float = 0.0) -> np.ndarray:
    """``λ_k``, ``k = 0..kmax``, of the linearisation at the uniform state (module docstring)."""
    _check(beta, kind, noise)
    I = bessel_coefficients(beta, kmax)
    k = np.arange(kmax + 1)
    c = I[0] if kind == "SA" else 1.0
    return k ** 2 * I / (beta * c) - noise * k ** 2


def _check(beta, kind, noise):
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise InputError("beta", f"must be a finite number > 0, got {beta!r}")
    if kind not in ("SA", "USA"):
        raise InputError("kind", f"must be 'SA' or 'USA', got {kind!r}")
    if not (math.isfinite(noise) and noise >= 0):
        raise InputError("noise", f"must be finite and >= 0, got {noise!r}")


class _Circle:
    def __init__(self, M, beta, kind, noise):
        self.M, self.kind, self.noise = M, kind, noise
        k = np.fft.fftfreq(M, 1.0 / M)
        k[M // 2] = 0.0                                  # the Nyquist mode is dropped
        self.k = k
        I = bessel_coefficients(beta, M // 2)[np.abs(k).astype(int)]
        self.K = 2 * math.pi * I                         # (K * ρ)^ = K ρ̂
        self.S = 2 * math.pi * (-1j * k / beta) * I      # (S * ρ)^ = S ρ̂
        self.nyq = np.zeros(M, bool)
        self.nyq[M // 2] = True

    def velocity(self, rho, bar=0.0):
        """Velocity of the density ``bar + rho`` (``bar`` a constant, added to mode 0 only: no round-off of
        the constant leaks into the other modes)."""
        r = np.fft.fft(rho) / self.M                     # ρ̂_k with ρ(θ) = Σ ρ̂_k e^{ikθ}
        r[0] += bar
        r[self.nyq] = 0.0
        num = np.real(np.fft.ifft(self.S * r) * self.M)
        if self.kind == "USA":
            return -num
        return -num / np.real(np.fft.ifft(self.K * r) * self.M)

    def rhs(self, t, u, bar=0.0):
        """``∂ₜ`` of the density ``bar + u``."""
        flux = (bar + u) * self.velocity(u, bar)
        f = np.fft.fft(flux)
        f[self.nyq] = 0.0
        out = -np.real(np.fft.ifft(1j * self.k * f))
        if self.noise:
            r = np.fft.fft(u)
            r[self.nyq] = 0.0
            out += np.real(np.fft.ifft(-self.noise * self.k ** 2 * r))
        return out


def circle_velocity(rho, beta: float, kind: str = "SA") -> np.ndarray:
    """The velocity ``v(θ_j)`` at the ``M`` equispaced points ``θ_j = 2πj/M`` for the density values ``rho``."""
    _check(beta, kind, 0.0)
    rho = np.asarray(rho, dtype=float)
    return _Circle(len(rho), beta, kind, 0.0).velocity(rho)


def solve_circle(rho0, beta: float, T: float, *, kind: str = "SA", noise: float = 0.0, t_eval=None,
                 rtol: float = 1e-10, max_seconds=None):
    """Integrate the circle PDE from the density values ``rho0`` on ``M`` equispaced points (``M`` even ≥ 8) to
    ``T``; returns the :class:`.solve.Solution` (rows of ``y``: densities at ``t``).  The state integrated is
    ``ρ - ρ̄`` (``ρ̄`` the mean of ``rho0``), so the relative error control applies to the deviation from the
    uniform state (a perturbation of 1e-8 is resolved to ``rtol`` of itself); the mass is its mode 0, which
    the right-hand side never changes."""
    from .solve import integrate

    _check(beta, kind, noise)
    rho0 = np.asarray(rho0, dtype=float)
    M = len(rho0)
    if rho0.ndim != 1 or M < 8 or M % 2 or not np.all(np.isfinite(rho0)):
        raise InputError("rho0", f"must be M >= 8 (even) finite density values, got shape {rho0.shape}")
    circ = _Circle(M, beta, kind, noise)
    bar = float(rho0.mean())        # the state is ρ - ρ̄ (mode 0 stays 0): the error control acts on deviations
    u0 = rho0 - bar
    atol = rtol * max(float(np.abs(u0).max()), 1e-300)   # absolute error: rtol of the deviation's size
    sol = integrate(lambda t, u: circ.rhs(t, u, bar), u0, (0.0, float(T)), method="dopri5", rtol=rtol,
                    atol=atol, t_eval=t_eval, max_seconds=max_seconds)
    sol.y = sol.y + bar
    if sol.y_end is not None:
        sol.y_end = sol.y_end + bar
    return sol
