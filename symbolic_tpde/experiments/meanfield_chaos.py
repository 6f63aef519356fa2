"""Propagation of chaos, measured by a coupling: interacting particles against decoupled mean-field particles.

Why a coupling (issue 13): the moment error of :func:`.meanfield.moment_convergence` compares ``n`` particles
with the Gaussian ODE started from the *nominal* ``(α₀, Σ₀)``, so its ``n^{-1/2}`` slope is mostly the
central limit theorem of the initial sample, already present at ``t = 0``.  Propagation of chaos is the
statement that the interaction adds only a vanishing error (Sznitman, *Topics in propagation of chaos*, 1991,
§I.1): draw ``x_i(0) ~ μ₀`` i.i.d., evolve

* the interacting system ``dx_i/dt = Γ_{μ^n_t}(x_i)``, ``μ^n_t = (1/n) Σ_j δ_{x_j(t)}`` (RK4 particles), and
* the decoupled ("nonlinear") particles ``dx̄_i/dt = Γ_{μ_t}(x̄_i)`` driven by the mean-field law ``μ_t``
  itself, from the *same* points ``x̄_i(0) = x_i(0)``.

The ``x̄_i(T)`` are i.i.d. samples of ``μ_T``; the labels pair each ``x_i`` with its ``x̄_i`` (a coupling), so

    ``e_n = ((1/n) Σ_i |x_i(T) - x̄_i(T)|²)^{1/2} ≥ W₂(μ^n_T, μ̄^n_T)``  and ``e_n = 0`` at ``T = 0``.

Expected rate ``E e_n² = O(1/n)``: ``d(x_i - x̄_i)/dt`` is a Lipschitz term in ``x - x̄`` plus the fluctuation
``Γ_{μ̄^n_t} - Γ_{μ_t}`` of an empirical field of i.i.d. points, ``O(n^{-1/2})`` by the CLT; Grönwall gives
``e_n = O(n^{-1/2})`` on ``[0, T]`` (Sznitman §I.1 for Lipschitz fields; compactly supported or Gaussian
data as in README Mathematics §6).

Exact decoupled flow for a Gaussian-preserving kind: ``μ_t = N(α(t), Σ(t))`` and the field of a Gaussian is
affine, ``Γ_{μ_t}(x) = b(t) + J(t) x`` (README Mathematics §3, :func:`affine_field`), so the characteristic
flow is the affine map ``x̄(T) = M(T) x̄(0) + c(T)`` with

    ``dα/dt = b + Jα``, ``dΣ/dt = JΣ + ΣJᵀ``, ``dM/dt = J M`` (``M(0) = I``), ``dc/dt = J c + b`` (``c(0) = 0``),

integrated once (:func:`characteristic_flow`, the package's Dormand-Prince at ``rtol = 1e-11``) and applied
to every sample.  Two identities cross-check it: ``α(T) = M α₀ + c`` and ``Σ(T) = M Σ₀ Mᵀ`` (the push-forward
of ``N(α₀, Σ₀)`` by the flow), and ``(α(T), Σ(T))`` must agree with the symbolic moment ODE
(:class:`symbolic_tpde.gaussian.GaussianODE`).

:func:`chaos_convergence` returns the coupling errors and, from the *same* runs, the old moment error against
``(α(T), Σ(T))`` (labelled "initial-sample CLT"), each with the OLS slope of ``log e`` on ``log n`` over all
``(n, seed)`` pairs and its Student-t 95% interval (:func:`.meanfield.ols`), cross-checked by the
seed-bootstrap interval (:func:`.meanfield.bootstrap_slope`), both through :func:`.meanfield.fit_rate`.

Every kind (also non-Gaussian ones, e.g. sigmoid): :func:`reference_convergence` couples the ``n``-system
with a larger ``N``-system started from the same points (a block of ``n`` of its ``N``), the route "against a
much larger reference system".  To first order in the field fluctuations ``x_i - x̄_i ≈ L_i(μ^n_0 - μ_0)``
(linear response), so ``x^n_i - x^N_i ≈ L_i(μ^n_0 - μ^N_0)`` and, ``μ^n_0`` being the mean of ``n`` of the
``N`` i.i.d. points, ``E|x^n_i - x^N_i|² ≈ (1/n - 1/N) C``: the reported error is the coupling cost divided
by ``(1 - n/N)^{1/2}`` (the finite-population correction), an estimate of ``e_n`` whose slope is ``-1/2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import BlowupError, InputError
from ..analysis.meanfield import Convergence, as_schedule, evolve, fit_rate, moment_error

def affine_field(weights, alpha, Sigma) -> tuple[np.ndarray, np.ndarray]:
    """``(b, J)`` with ``Γ_{N(α, Σ)}(x) = b + J x`` (README Mathematics §3, Gaussian tilt), summed over heads
    and the feed-forward term: the matrix closed form of :func:`symbolic_tpde.analysis.closed_forms.affine_field` (e.g.
    softmax ``b = Vα``, ``J = VΣA``), so every Gaussian-preserving kind has the coupling route.  Kinds that do
    not preserve Gaussians and an attention sink raise :class:`InputError`."""
    from ..analysis.closed_forms import affine_field as matrix_affine_field

    if weights.sink is not None:
        raise InputError("weights.sink", "an attention sink does not preserve Gaussian data (README Mathematics §3): "
                         "no affine mean-field flow")
    bJ = matrix_affine_field(weights, np.asarray(alpha, float), np.asarray(Sigma, float))
    if bJ is None:
        kinds_ = sorted({h.kind for h in weights.heads})
        raise InputError("attention", f"{', '.join(map(repr, kinds_))} attention: a head does not preserve "
                         "Gaussians, no affine mean-field flow")
    return bJ


@dataclass(frozen=True)
class Flow:
    """The mean-field characteristic flow ``x ↦ M x + c`` on ``[0, T]`` and the law ``N(α(T), Σ(T))``."""

    M: np.ndarray
    c: np.ndarray
    alpha: np.ndarray
    Sigma: np.ndarray
    T: float

    def __call__(self, X0) -> np.ndarray:
        """Push the points ``X0 (n, d)`` by the flow: rows ``M x + c``."""
        return np.asarray(X0, float) @ self.M.T + self.c


def characteristic_flow(weights, alpha0, Sigma0, T: float, rtol: float = 1e-11) -> Flow:
    """Integrate ``(α, Σ, M, c)`` (module docstring) with :func:`symbolic_tpde.numerics.ode.solve.integrate`
    (Dormand-Prince 5(4), restarted at the schedule's layer breakpoints).  A blow-up raises
    :class:`BlowupError` with its time."""
    from ..numerics.particles.simulate import segments
    from ..numerics.ode.solve import Status, integrate

    alpha0 = np.asarray(alpha0, float)
    Sigma0 = np.asarray(Sigma0, float)
    d = len(alpha0)
    sched = as_schedule(weights)
    edges = [a for a, _ in segments(sched, float(T))]

    def weights_at(t: float):
        if sched.func is not None:
            return sched(t)
        return sched(edges[max(0, int(np.searchsorted(edges, t, side="right")) - 1)])

    def rhs(t, y):
        a, S, M, c = y[:d], y[d:d + d * d].reshape(d, d), y[d + d * d:d + 2 * d * d].reshape(d, d), y[-d:]
        b, J = affine_field(weights_at(t), a, 0.5 * (S + S.T))
        return np.concatenate([b + J @ a, (J @ S + S @ J.T).ravel(), (J @ M).ravel(), J @ c + b])

    y0 = np.concatenate([alpha0, Sigma0.ravel(), np.eye(d).ravel(), np.zeros(d)])
    sol = integrate(rhs, y0, (0.0, float(T)), rtol=rtol, breakpoints=edges[1:])
    if sol.status != Status.OK:
        raise BlowupError(sol.t_end, "mean-field characteristic flow", sol.message)
    y = sol.y_end
    S = y[d:d + d * d].reshape(d, d)
    return Flow(y[d + d * d:d + 2 * d * d].reshape(d, d).copy(), y[-d:].copy(), y[:d].copy(), 0.5 * (S + S.T),
                float(T))


def coupling_error(XT, X0, flow: Flow) -> float:
    """``((1/n) Σ_i |x_i(T) - Φ_T(x_i(0))|²)^{1/2}``: the same-label coupling cost, an upper bound of
    ``W₂(μ^n_T, Φ_T # μ^n_0)``."""
    D = np.asarray(XT, float) - flow(X0)
    return float(np.sqrt((D * D).sum(1).mean()))


@dataclass
class Chaos:
    """Result of :func:`chaos_convergence`: the coupling (propagation-of-chaos) rate and, from the same
    runs, the moment error against the limit law (initial-sample CLT), both as :class:`.meanfield.Convergence`."""

    chaos: Convergence
    moments: Convergence
    flow: Flow

    def as_dict(self) -> dict:
        return {"propagation_of_chaos": self.chaos.as_dict(), "initial_sample_clt": self.moments.as_dict(),
                "limit_alpha": self.flow.alpha.tolist(), "limit_Sigma": self.flow.Sigma.tolist()}


def chaos_convergence(weights, alpha0, Sigma0, T: float, ns: Sequence[int], seeds: int, rng: np.random.Generator,
                      *, steps: int = 20, level: float = 0.95, law: tuple | None = None) -> Chaos:
    """For each ``n`` and seed: sample ``X₀ ~ N(α₀, Σ₀)``, evolve the interacting particles (RK4, ``steps``
    steps), push ``X₀`` by the mean-field flow and record the coupling error and the moment error.

    ``law=(α', Σ')`` drives the decoupled particles by the flow of ``N(α', Σ')`` instead of the true law
    (a negative control: the coupling error then stays ``O(1)`` and the slope flattens).  ``steps``: RK4's
    ``O(h⁴)`` error (~1e-6 at 20 steps on ``T = 1``) must stay far below the coupling error at ``n_max``.
    """
    alpha0 = np.asarray(alpha0, float)
    Sigma0 = np.asarray(Sigma0, float)
    if len(ns) < 2 or seeds < 2:
        raise InputError("ns", "need at least two n values and two seeds")
    sched = as_schedule(weights)
    affine_field(sched(0.0), alpha0, Sigma0)  # refuse unsupported kinds before any particle run
    flow = characteristic_flow(sched, alpha0, Sigma0, T)
    drive = flow if law is None else characteristic_flow(sched, law[0], law[1], T)
    L = np.linalg.cholesky(Sigma0)
    chaos, moments = [], []
    for n in ns:
        row_c, row_m = [], []
        for _ in range(int(seeds)):
            X0 = alpha0 + rng.standard_normal((int(n), len(alpha0))) @ L.T
            XT = evolve(X0, sched, T, steps)[1][-1]
            row_c.append(coupling_error(XT, X0, drive))
            row_m.append(moment_error(XT, flow.alpha, flow.Sigma))
        chaos.append(row_c)
        moments.append(row_m)
    meta = {"method": "same-initial-sample coupling to the mean-field characteristic flow",
            "ci_method": f"{level:.0%} Student-t interval of the OLS slope over all (n, seed) pairs; "
                         "bootstrap_ci: percentile bootstrap over seeds within each n"}
    c = fit_rate(ns, chaos, rng, "coupling", T, steps, level, meta)
    m = fit_rate(ns, moments, rng, "gaussian", T, steps, level,
                 {"method": "moment error against the Gaussian ODE from the nominal (α₀, Σ₀): mostly the "
                            "initial sample's CLT", "ci_method": meta["ci_method"]})
    return Chaos(c, m, flow)


def reference_convergence(weights, alpha0, Sigma0, T: float, ns: Sequence[int], seeds: int,
                          rng: np.random.Generator, *, N: int, steps: int = 20, level: float = 0.95) -> Convergence:
    """Propagation of chaos against a larger reference system (module docstring; any kind).

    For each seed: ``N`` points ``~ N(α₀, Σ₀)`` (``α₀ + Z Lᵀ``, ``Z`` from ``rng``), the ``N``-system evolved
    once, and for the ``k``-th ``n`` the ``n``-system of the block ``B_k`` of points ``o_k .. o_k + n - 1``,
    ``o_k = n_0 + .. + n_{k-1}`` (disjoint blocks, so the errors at different ``n`` share only the reference's
    own error, not their samples: the OLS interval assumes independent residuals); error
    ``((1/n) Σ_{i∈B_k} |x^n_i(T) - x^N_i(T)|²)^{1/2} / (1 - n/N)^{1/2}``.  Needs ``Σ n ≤ N``.
    """
    alpha0 = np.asarray(alpha0, float)
    Sigma0 = np.asarray(Sigma0, float)
    ns = [int(n) for n in ns]
    if len(ns) < 2 or seeds < 2:
        raise InputError("ns", "need at least two n values and two seeds")
    if not int(N) >= sum(ns):
        raise InputError("N", f"the reference system must hold disjoint blocks of every n (N = {N} < Σ n = "
                         f"{sum(ns)})")
    offsets = np.concatenate([[0], np.cumsum(ns)[:-1]]).astype(int)
    sched = as_schedule(weights)
    L = np.linalg.cholesky(Sigma0)
    errors: list[list[float]] = [[] for _ in ns]
    for _ in range(int(seeds)):
        X0 = alpha0 + rng.standard_normal((int(N), len(alpha0))) @ L.T
        XN = evolve(X0, sched, T, steps)[1][-1]
        for k, (n, o) in enumerate(zip(ns, offsets)):
            D = evolve(X0[o:o + n], sched, T, steps)[1][-1] - XN[o:o + n]
            errors[k].append(float(np.sqrt((D * D).sum(1).mean() / (1.0 - n / int(N)))))
    meta = {"method": f"same-initial-sample coupling to a reference system of N = {int(N)} particles, "
                      "finite-population corrected by (1 - n/N)^(-1/2)", "N": int(N),
            "ci_method": f"{level:.0%} Student-t interval of the OLS slope over all (n, seed) pairs; "
                         "bootstrap_ci: percentile bootstrap over seeds within each n"}
    return fit_rate(ns, errors, rng, "larger_system", T, steps, level, meta)
