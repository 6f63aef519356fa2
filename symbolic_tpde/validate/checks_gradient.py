"""``tpde verify`` rows for the gradient-flow structure (README Mathematics §5).

Rows: gradient identity (symbolic, and numeric at large n), energy-dissipation identity (RK4 order and a
tight-tolerance run), Riemannian Hessian vs finite differences along integrated geodesics (particles and
Gaussians), certified sign of the Hessian (mpmath.iv), Gaussian energy closed form vs Gauss-Hermite
quadrature, Sinkhorn / Bures-Wasserstein identity (symbolic d = 1, 50-digit finite differences d = 2, 3).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from .verify import CheckResult, result, row_rng


def _spd_pair(rng: np.random.Generator, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric ``A`` and SPD ``V`` with ``G = -AV⁻¹`` SPD: common eigenvectors, ``A = -Q diag(g v) Qᵀ``."""
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    g = rng.uniform(0.5, 1.5, d)
    v = rng.uniform(0.5, 1.5, d)
    return -(Q * (g * v)) @ Q.T, (Q * v) @ Q.T


def checks(quick: bool = False) -> Iterator[CheckResult]:
    import sympy as sp

    from ..numerics.particles import energy as en
    from ..symbolic.energy import gradient_identity, particle_energy
    from ..symbolic.hessian import gaussian_hessian, particle_hessian
    from ..symbolic.sinkhorn_bw import bw_identity_d1, bw_identity_mp
    from .convexity import certify_particles


    # 1. gradient identity, symbolic: grad_g E + Γ simplifies to the zero matrix
    for n, d in ([(2, 2)] if quick else [(2, 2), (3, 1)]):
        A, V = sp.Matrix([[-1, sp.Rational(1, 3)], [sp.Rational(1, 3), -2]])[:d, :d], sp.eye(d)
        diff = gradient_identity(particle_energy(n, d, A, V))
        nonzero = sum(1 for e in diff if e != 0)
        yield result(f"gradient identity grad E = -Γ (n={n}, symbolic)", "softmax", d, nonzero, 0,
                     "exact: SymPy simplification to 0 (count of nonzero entries)")

    # 1b. numeric, large n, general symmetric A and SPD V with G SPD
    rng = row_rng("gradient identity (numeric)")
    A, V = _spd_pair(rng, 3)
    X = rng.normal(size=(200, 3))
    try:  # the particle simulator's field, when present; the direct formula otherwise
        from ..numerics.particles.fields import softmax_field
    except ImportError:
        softmax_field = en.softmax_field
    F = softmax_field(X, A, V)
    err = np.max(np.abs(en.riemannian_gradient(X, A, V) + F))
    yield result("gradient identity (numeric, n=200)", "softmax", 3, err / np.max(np.abs(F)), 1e-12,
                 "float64 round-off: ~n·eps relative for n-term sums")

    # 2. dissipation identity: defect of E(X_T) - E(X_0) + ∫ g(Γ,Γ) with RK4 falls like h^4
    rng = row_rng("dissipation")
    X0 = rng.normal(size=(6, 2))
    A2, V2 = _spd_pair(rng, 2)
    steps = [8, 16, 32, 64]
    defects = [abs(en.rk4_energy_defect(X0, A2, V2, 1.0, s)) for s in steps]
    slope = float(np.polyfit(np.log([1.0 / s for s in steps]), np.log(defects), 1)[0])
    yield result("dissipation dE/dt = -g(Γ,Γ): RK4 log-log slope", "softmax", 2, abs(slope - 4), 0.3,
                 f"classical RK4 is order 4 (slope {slope:.2f}; defects {defects[0]:.1e}..{defects[-1]:.1e})")

    # 3. Riemannian Hessian (symbolic Christoffels) vs d²/ds² E along an integrated geodesic
    n, d = (2, 2) if quick else (3, 2)
    A3 = sp.Matrix([[-1, sp.Rational(1, 4)], [sp.Rational(1, 4), -sp.Rational(1, 2)]])
    ph = particle_hessian(n, d, A3, sp.eye(2))
    An = np.array(A3, float)
    rng = row_rng("Hess E symbolic vs geodesic FD", n)
    X = rng.normal(scale=0.8, size=(n, d))
    U = rng.normal(size=(n, d))
    H = np.array(sp.lambdify(ph.coords, ph.H)(*X.ravel()), float)
    sym = float(U.ravel() @ H @ U.ravel())
    geo, est = en.hessian_along_geodesic(X, U, An, np.eye(2))
    yield result(f"Hess E symbolic vs geodesic FD (n={n})", "softmax", d, abs(sym - geo), max(10 * est, 1e-9),
                 "DOP853 rtol 1e-13 + 7-point stencil: 10x the Richardson/round-off estimate")

    # 3b. Gaussian family d = 1 (fully symbolic g⁻¹)
    gh = gaussian_hessian([[-1]], [[1]])
    h = gh.numeric("math")
    theta, Ug = [0.4, 0.6], [0.3, -0.5]
    sym = float(h(theta, Ug))
    geo, est = en.gaussian_hessian_along_geodesic([0.4], [[0.6]], [[-1.0]], [[1.0]], Ug)
    yield result("Hess E Gaussian (d=1) symbolic vs geodesic FD", "softmax", 1, abs(sym - geo),
                 max(10 * est, 1e-9), "metric derivative FD 1e-10 + DOP853 1e-12 + stencil: 10x the estimate")

    # 4. certified sign (mpmath.iv) at 50 digits, V = I, A = -I
    c = certify_particles(-np.eye(2), np.eye(2), n=2, dps=50, seed=0, want="negative")
    lo, hi = float(c["interval"][0]), float(c["interval"][1])
    yield result("Hess E < 0 certified (mpmath.iv, 50 digits)", "softmax", 2, c["width"], abs(hi),
                 f"interval [{lo:.6g}, {hi:.6g}] excludes 0: width < |upper end|", passed=c["certified_negative"])
    cp = certify_particles(-np.eye(2), np.eye(2), n=2, dps=50, seed=1, want="positive")
    yield result("Hess E > 0 certified somewhere (mpmath.iv)", "softmax", 2, cp["width"],
                 abs(float(cp["interval"][0])), "the Hessian is indefinite over configurations",
                 passed=cp["certified_positive"])

    # 5. Gaussian energy: closed form (completing the square) vs tensor Gauss-Hermite quadrature
    a, S = np.array([0.3, -0.2]), np.array([[0.5, 0.1], [0.1, 0.3]])
    Ag = np.array([[-1, 1 / 3], [1 / 3, -0.5]])
    q = en.gaussian_energy_quadrature(a, S, Ag, nodes=16)
    e = en.gaussian_energy(a, S, Ag)
    yield result("Gaussian E closed form vs Gauss-Hermite", "softmax", 2, abs(q - e) / e, 1e-12,
                 "16^4-node Gauss-Hermite converged to ~1e-15 (12 nodes: 1e-11)")

    # 6. Sinkhorn = Bures-Wasserstein gradient flow
    r = bw_identity_d1()
    bad = sum(1 for k in ("fixed_point_residual", "stationarity", "residual") if r[k] != 0)
    yield result("Sinkhorn ODE = BW gradient flow of F (symbolic)", "sinkhorn", 1, bad, 0,
                 "exact: SymPy simplification to 0")
    for d in ([2] if quick else [2, 3]):
        rng = row_rng("Sinkhorn ODE = BW flow", d)
        Q = rng.normal(size=(d, d))
        S = Q @ Q.T / d + 0.5 * np.eye(d)
        B = rng.normal(size=(d, d))
        rr = bw_identity_mp(((B + B.T) / 2).tolist(), S.tolist(), dps=50)
        yield result("Sinkhorn ODE = BW flow (50-digit FD of F)", "sinkhorn", d, float(rr["error"] / rr["scale"]),
                     1e-30, "4th-order FD at h=1e-10 in 50 digits: truncation ~1e-40, round-off ~1e-40")
