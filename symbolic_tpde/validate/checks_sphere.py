"""``tpde verify`` rows for normalised tokens on the sphere (README "Sphere"): the derived equiangular ODE
against the particle system, the derived rates near one cluster, the circle's Bessel rates, tokens on the
sphere in float32.  A few seconds in all."""

from __future__ import annotations

import numpy as np

from .verify import result


def checks(quick: bool = False):
    import mpmath
    import sympy as sp
    from scipy.integrate import solve_ivp

    from ..numerics.particles.sphere import simulate_sphere
    from ..symbolic import sphere_reductions as R
    from ..weights import make_head, make_weights

    n, d, beta, T = 3, 4, 1.0, 2.0
    for kind, z in (("sphere_sa", "softmax"), ("sphere_usa", "n")):
        red = R.equiangular(R.MODELS["post"](z))
        f = sp.lambdify(R.rho, red.rhs["rho"].subs({R.n: n, R.beta: beta}))
        ref = solve_ivp(lambda t, y: [f(y[0])], (0, T), [0.0], method="DOP853", rtol=1e-12, atol=1e-14).y[0, -1]
        w = make_weights([make_head(kind, A=np.eye(d), V=np.eye(d), beta=beta)])
        th = simulate_sphere(np.eye(d)[:n], w, T).theta
        G = th @ th.T
        err = max(abs(G[i, j] - ref) for i in range(n) for j in range(i + 1, n))
        yield result("equiangular rho(T): particles (frame) vs derived ODE", kind, d, err, 1e-8,
                     "integrators: package DOPRI5 at 1e-10 vs scipy DOP853 at 1e-12; 100x margin"
                     + ("" if red.ok else "; a derivation check FAILED"), None if red.ok else False)
        lam = R.rates(red)["lambda"]
        want = 2 if z == "softmax" else 2 * sp.exp(R.beta)
        yield result("rate near rho = 1 (derived, n symbolic)", kind, None,
                     0.0 if sp.simplify(lam - want) == 0 else 1.0, 0.0,
                     "exact (SymPy) vs published 2 (SA), 2e^beta (USA), Geshkovski et al. 2023")
    lin = R.circle_linearisation("softmax")
    fk = sp.lambdify((lin["k"], R.beta), lin["rate"], modules="mpmath")
    err = max(abs(fk(k, b) / (k * k * mpmath.besseli(k, b) / (b * mpmath.besseli(0, b))) - 1)
              for k in (1, 2, 3, 5) for b in (1.0, 5.0))
    yield result("circle: derived mode rates vs k^2 I_k/(beta I_0) (mpmath)", "sphere_sa", 2, float(err), 1e-13,
                 "round-off of mpmath at 15 digits" + ("" if all(s.checked for s in lin["steps"]) else "; check FAILED"),
                 None if all(s.checked for s in lin["steps"]) else False)
    k5 = R.fastest_mode("softmax", 5.0)[0]
    yield result("circle: fastest mode k*(beta = 5)", "sphere_sa", 2, abs(k5 - 3), 0.0,
                 "exact: argmax of the derived rates; 3 clusters at beta = 5 (Bruno-Pasqualotto-Agazzi)")
    X0 = np.random.default_rng(0).standard_normal((16, 3))
    run = simulate_sphere(X0, make_weights([make_head("sphere_sa", A=np.eye(3), V=np.eye(3), beta=2.0)]), 2.0,
                          dtype=np.float32, t_eval=np.linspace(0, 2, 5))
    err = float(np.max(np.abs(np.linalg.norm(run.trajectory.astype(float), axis=-1) - 1)))
    yield result("tokens on the sphere (float32, renormalised steps)", "sphere_sa", 3, err, 1e-6,
                 "float32 round-off of a renormalisation, a few eps32")
