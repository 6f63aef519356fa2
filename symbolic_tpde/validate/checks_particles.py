"""``tpde verify`` rows for the particle simulator (fields, Sinkhorn, blocking, dtypes, integrators).

Every row compares the production code with an independent route: each registry kind's oracle, a
pure-Python double loop over pairs evaluating the definition of the field (arXiv 2501.18322, §2), plain (non-log) Sinkhorn matrix scaling, exact solutions of a linear
case, and the Gaussian moment ODE of README Mathematics §3 integrated by scipy.
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from .verify import CheckResult, result, row_rng

ROUND = "float64 round-off (n <= 10 terms of O(1)): 1e-11 relative"


def _dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def _mv(M, x):
    return [_dot(r, x) for r in M]


def _rel(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, float) - b)) / max(1.0, float(np.max(np.abs(b)))))


def _plain_sinkhorn(X, A, eps, iters=20_000, tol=1e-14):
    K = np.array([[math.exp(_dot(_mv(A.tolist(), xi), xj) / eps) for xj in X.tolist()] for xi in X.tolist()])
    u, v = np.ones(len(X)), np.ones(len(X))
    for _ in range(iters):
        u = 1.0 / (K @ v)
        v = 1.0 / (K.T @ u)
        if np.max(np.abs(u * (K @ v) - 1)) < tol:
            break
    return u[:, None] * K * v[None, :]


def checks(quick: bool = False) -> Iterator[CheckResult]:
    from ..weights import Schedule, Sink, make_head, make_weights
    from ..numerics.particles import fields as F
    from ..numerics.measures.estimators import moments
    from ..numerics.particles.simulate import simulate
    from ..numerics.particles.sinkhorn import sinkhorn_plan

    d = 3
    rng = row_rng("particles: points")          # the points (and sink) several rows share
    X = rng.standard_normal((9, d))
    sink = Sink(0.3, rng.standard_normal(d))

    # every kind of the registry: its particle part against its oracle's pure-Python loop (the definition)
    from ..registry import kinds
    from .oracles import example_params

    for name in kinds.kind_names():
        orc = kinds.part(name, "oracle")
        head = make_head(name, **example_params(name, d, row_rng("field vs pairwise loop", name, d)))
        for sk in ((None, sink) if name == "masked" else (None,)):
            w = make_weights([head], sink=sk)
            tol = 1e-8 if name == "sinkhorn" else 1e-11
            yield result("field vs pairwise loop (oracle)", name + ("+sink" if sk is not None else ""), d,
                         _rel(F.field(X, w), orc.loop(X, head.effective, sink=sk)), tol,
                         ROUND if name != "sinkhorn" else "Sinkhorn stops at marginal error 1e-9 (field ~1e-9)")

    # Sinkhorn: plan from the blocked log-domain solver vs plain matrix scaling; marginals; field
    rng = row_rng("particles: sinkhorn")
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    V = rng.standard_normal((d, d))
    P, info = sinkhorn_plan(X, A, 0.7, tol=1e-13)
    Pref = _plain_sinkhorn(X, A, 0.7)
    yield result("sinkhorn plan vs plain matrix scaling", "sinkhorn", d, _rel(P, Pref), 1e-10,
                 "both solved to marginal error < 1e-13; plan entries O(1)")
    marg = max(np.max(np.abs(P.sum(0) - 1)), np.max(np.abs(P.sum(1) - 1)))
    yield result("sinkhorn plan marginals (rows, columns)", "sinkhorn", d, marg, 1e-13, "requested tol 1e-13")
    yield result("sinkhorn field vs P X Vᵀ with the plain plan", "sinkhorn", d,
                 _rel(F.sinkhorn_field(X, A, V, 0.7, tol=1e-13), X.dot(V.T).T.dot(Pref.T).T), 1e-10,
                 "marginal error 1e-13 x O(1) points")

    # masked: the first token attends only to itself
    yield result("masked token 0 field = V x_0", "masked", d, _rel(F.masked_field(X, A, V)[0], V @ X[0]), 1e-15,
                 "exact: a single key has weight 1")

    # blocked vs unblocked, float32 vs float64
    Y = row_rng("particles: blocked cloud").standard_normal((400, 4))
    rng = row_rng("particles: blocked")
    A4, V4 = rng.standard_normal((4, 4)) / 2, rng.standard_normal((4, 4))
    full = F.softmax_field(Y, A4, V4, block=400)
    worst = max(_rel(F.softmax_field(Y, A4, V4, block=b), full) for b in (1, 13, 64))
    yield result("blocked (1, 13, 64 rows) vs one block", "softmax", 4, worst, 1e-12,
                 "round-off: summation order, ~n eps")
    worst = max(_rel(F.masked_field(Y, A4, V4, sink=Sink(0.2, np.zeros(4)), block=b),
                     F.masked_field(Y, A4, V4, sink=Sink(0.2, np.zeros(4)), block=400)) for b in (1, 13, 64))
    yield result("blocked vs one block (causal + sink)", "masked", 4, worst, 1e-12, "round-off: ~n eps")
    Lmax = float(np.abs(Y @ A4.T @ Y.T).max())
    yield result("float32 vs float64 field", "softmax", 4,
                 _rel(F.softmax_field(Y, A4, V4, dtype=np.float32), full),
                 20 * float(np.finfo(np.float32).eps) * (1 + Lmax),
                 "float32 logit round-off eps32*|logit| (x20 margin)")

    # integrators on an exact solution: A = 0 gives x_i(t) = x_i - x̄ + Φ(t) x̄, two layers (breakpoint 0.37)
    from scipy.linalg import expm

    X0 = row_rng("particles: exact linear case").standard_normal((5, 2)) + 1
    Z = np.zeros((2, 2))
    V1, V2 = np.array([[0.5, 1.0], [-1.0, 0.2]]), np.array([[-0.3, 0.4], [0.1, 0.9]])
    w = lambda Vm: make_weights([make_head("softmax", A=Z, V=Vm)])  # noqa: E731
    sched = Schedule.layers([(0.37, w(V1)), (5.0, w(V2))])
    m0 = X0.mean(0)
    exact = X0 - m0 + expm(0.63 * V2) @ expm(0.37 * V1) @ m0
    for method, order, steps in (("rk4", 4, (8, 16, 32)), ("euler", 1, (50, 100, 200))):
        errs = [np.abs(simulate(X0, sched, 1.0, steps=s, method=method).X - exact).max() for s in steps]
        slope = float(np.polyfit(np.log([1 / s for s in steps]), np.log(errs), 1)[0])
        yield result(f"{method} order across a layer breakpoint", "softmax", 2, abs(slope - order), 0.35,
                     f"log-log slope {slope:.2f}, expected {order}")

    # Sinkhorn particles: columns of P sum to 1, so the mean obeys x̄' = V x̄ exactly at every n
    Xs = row_rng("particles: sinkhorn mean").standard_normal((100, 2)) + [1.0, -0.5]
    Vs = np.array([[0.3, 0.7], [-0.6, 0.1]])
    ws = make_weights([make_head("sinkhorn", A=[[0.8, 0.3], [-0.2, 0.5]], V=Vs, epsilon=0.8)])
    hV = 0.1 * Vs  # RK4 of the particles = RK4 of x̄' = V x̄: propagator Σ_k (hV)^k / k!, k <= 4, per step
    step = np.eye(2) + hV + hV @ hV / 2 + hV @ hV @ hV / 6 + hV @ hV @ hV @ hV / 24
    mean_err = np.abs(simulate(Xs, ws, 1.0, steps=10).X.mean(0)
                      - np.linalg.matrix_power(step, 10) @ Xs.mean(0)).max()
    yield result("sinkhorn particle mean = RK4 of x' = V x", "sinkhorn", 2, mean_err, 1e-8,
                 "column sums 1 +- 1e-9 (tol): ~h|V||x| 1e-9 per step, 10 steps, x5 margin")

    # particles vs Gaussian moment ODE (README Mathematics §3, written here), control variate, K seeds
    yield _moment_ode_row(quick, simulate, moments, make_weights, make_head)


def _moment_ode_row(quick, simulate, moments, make_weights, make_head) -> CheckResult:
    from scipy.integrate import solve_ivp
    from scipy.stats import t as student

    A = np.array([[-0.4, 0.3], [-0.2, -0.5]])
    V = np.array([[1.0, 0.3], [-0.4, 0.6]])
    a0, S0 = np.array([0.5, -0.2]), np.array([[1.0, 0.3], [0.3, 0.5]])
    iu = np.triu_indices(2)

    def ode(a, S, T=1.0):
        def rhs(t, y):
            al, Sg = y[:2], y[2:].reshape(2, 2)
            return np.concatenate([V @ (al + Sg @ A @ al), (V @ Sg @ A @ Sg + Sg @ A.T @ Sg @ V.T).ravel()])

        y = solve_ivp(rhs, (0, T), np.concatenate([a, S.ravel()]), rtol=1e-11, atol=1e-13).y[:, -1]
        return np.concatenate([y[:2], y[2:].reshape(2, 2)[iu]])

    n, K = (300, 4) if quick else (600, 6)
    w = make_weights([make_head("softmax", A=A, V=V)])
    diffs = []
    for s in range(K):
        X0 = row_rng("particles vs moment ODE", s).multivariate_normal(a0, S0, size=n)
        m, C = moments(simulate(X0, w, 1.0, steps=20).X)
        diffs.append(np.concatenate([m, C[iu]]) - ode(*moments(X0)))
    diffs = np.array(diffs)
    se = diffs.std(axis=0, ddof=1) / math.sqrt(K)
    q = float(student.ppf(1 - 1e-3 / 2, K - 1))
    z = float(np.max(np.abs(diffs.mean(axis=0)) / se))
    return result(f"particles (n={n}, {K} seeds) vs Gaussian moment ODE", "softmax", 2, z, q,
                  "max |mean diff|/se vs t-quantile 1e-3; se = MC n^-1/2 spread over seeds")
