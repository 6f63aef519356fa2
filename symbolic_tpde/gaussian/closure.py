"""Gaussian-closure moment ODEs (an APPROXIMATION) for kinds that do not preserve Gaussians, and their error
against particles.

The closure equations are those of :mod:`symbolic_tpde.symbolic.closures`: the exact mean/covariance equations
``dα/dt = E[Γ(X)]``, ``dΣ/dt = E[Γ(X)(X-α)ᵀ] + E[(X-α)Γ(X)ᵀ]`` evaluated as if ``X ~ N(α, Σ)``.  Everything
returned here carries ``label = "closure (approximate)"``.

* **unnormalised softmax**: the right-hand side is the SymPy-derived closed form
  (:func:`~symbolic_tpde.symbolic.closures.closure_system`), generated (numpy or C) like the exact systems;
  its finiteness conditions (``Σ⁻¹ - AᵀΣA ≻ 0``) are a stop event (status ``"closure-undefined"``).
* **sigmoid**, ``Γ(x) = V E_y[σ(yᵀAx + b) y]`` with ``y ~ N(α, Σ)``: given ``x``, ``u = yᵀAx + b`` is Gaussian,
  ``u ~ N(μ(x), s(x)²)``, ``μ = αᵀAx + b``, ``s² = xᵀAᵀΣAx``, and ``Cov(y, u) = ΣAx``; Stein's lemma
  (``E[y h(u)] = α E[h(u)] + Cov(y, u) E[h'(u)]`` for jointly Gaussian ``(y, u)``) gives

      Γ(x) = V (α E[σ(u)] + ΣAx E[σ'(u)]),      σ' = σ(1 - σ).

  ``E[σ(u)]`` has no closed form: both one-dimensional expectations, and the outer ``E_x`` over ``N(α, Σ)``, are
  taken by **Gauss–Hermite quadrature** (probabilists' nodes; outer: tensor grid of ``n_outer`` nodes per axis on
  ``x = α + Σ^{1/2} z``; inner: ``n_inner`` nodes).  ``σ`` has poles at ``±iπ``, so in the Hermite variable the
  integrands are analytic only in a strip of half-width ``π/s``: Gauss–Hermite converges root-exponentially
  (``~ e^{-c (π/s) √n}``), fast for a weak interaction and slowly for a strong one (measured in
  ``tests/test_closures.py``); :meth:`ClosureODE.quadrature_error` estimates the error as the change when both
  node counts grow by half, and is reported with every closure-vs-particles measurement.  Cost: ``n_outer^d · n_inner`` sigmoid evaluations per right-hand side (``d ≤ 4``
  is refused above that: ``InputError``).
* **masked** (with a sink): no fixed-size closure (:mod:`symbolic_tpde.symbolic.closures`); refused.

:func:`closure_vs_particles` measures the closure error: particle clouds of ``n`` tokens from ``N(α₀, Σ₀)``
run to ``T`` (``runs`` independent seeds), their empirical ``(α, Σ)`` against the closure's; the error is
reported with the Monte-Carlo standard error of the seed mean (``∝ n^{-1/2}``), so one can read whether the
closure error is resolved (``|error| ≫ SE``) or below the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..registry import layout
from ..weights import Weights, check_gaussian

LABEL = "closure (approximate)"
CLOSURE_KINDS = ("softmax_unnormalized", "sigmoid")
#: status of a run stopped where the closure's expectations cease to be finite
UNDEFINED = "closure-undefined"


def _sigma(u):
    return 0.5 * (1.0 + np.tanh(0.5 * u))      # = 1/(1 + e^{-u}), without overflow


def _gh(n: int):
    """Probabilists' Gauss–Hermite nodes and weights normalised to the standard normal law."""
    z, w = np.polynomial.hermite_e.hermegauss(n)
    return z, w / math.sqrt(2 * math.pi)


def sigmoid_closure_rhs(alpha, Sigma, A, V, b, n_outer: int = 24, n_inner: int = 48):
    """``(dα/dt, dΣ/dt)`` of the sigmoid Gaussian closure (module docstring), by Gauss–Hermite quadrature."""
    d = len(alpha)
    z, w = _gh(n_outer)
    Z = np.stack(np.meshgrid(*([z] * d), indexing="ij"), -1).reshape(-1, d)
    W = np.prod(np.stack(np.meshgrid(*([w] * d), indexing="ij"), -1).reshape(-1, d), axis=1)
    lam, U = np.linalg.eigh(0.5 * (Sigma + Sigma.T))
    R = (U * np.sqrt(np.clip(lam, 0.0, None))) @ U.T
    X = alpha + Z @ R.T
    SAx = X @ (Sigma @ A).T                       # rows (ΣA x)ᵀ = Cov(y, u)
    mu = X @ (A.T @ alpha) + b
    s = np.sqrt(np.clip(np.einsum("ij,ij->i", X @ A.T, SAx), 0.0, None))   # s² = xᵀAᵀΣAx
    t, v = _gh(n_inner)
    sg = _sigma(mu[:, None] + s[:, None] * t[None, :])
    E0, E1 = sg @ v, (sg * (1 - sg)) @ v
    G = (np.outer(E0, alpha) + SAx * E1[:, None]) @ V.T      # Γ(x) per node
    da = W @ G
    M = (G * W[:, None]).T @ (X - alpha)
    return da, M + M.T


@dataclass(frozen=True)
class ClosureSolution:
    """``t``, ``alpha (K, d)``, ``Sigma (K, d, d)``, ``status`` (``"ok"``, ``"blowup"``, :data:`UNDEFINED`, …);
    ``label`` is always :data:`LABEL`: these are NOT exact moments."""

    t: np.ndarray
    alpha: np.ndarray
    Sigma: np.ndarray
    status: str
    message: str
    label: str = LABEL


class ClosureODE:
    """Gaussian-closure moment ODE of one head (module docstring).  ``rhs(t, y)`` on the packed state."""

    def __init__(self, weights: Weights, backend: str = "auto", n_outer: int = 24, n_inner: int = 48):
        if len(weights.heads) != 1 or weights.ffn is not None or weights.sink is not None:
            raise InputError("heads", "the Gaussian closure is built for one head, no FFN, no sink")
        head = weights.heads[0]
        self._args = (weights, backend, int(n_outer), int(n_inner))
        self.kind, self.d, self.label = head.kind, weights.d, LABEL
        self.n_outer, self.n_inner = int(n_outer), int(n_inner)
        if self.kind not in CLOSURE_KINDS:
            raise InputError("attention", f"no Gaussian closure for {self.kind!r} (have: {', '.join(CLOSURE_KINDS)}"
                             "; masked with a sink has none of fixed size: see symbolic_tpde.symbolic.closures)")
        self._p = {k: np.asarray(v, float) for k, v in head.effective.items()}   # A = KᵀQ/√k, V = WO V formed
        self._cond = None
        if self.kind == "sigmoid":
            if self.d > 4:
                raise InputError("d", f"sigmoid closure quadrature costs n_outer^d nodes: d = {self.d} > 4 refused")
            self.system = None
        else:
            from ..codegen.compile import compile_system
            from ..symbolic.closures import closure_system
            import sympy as sp

            self.system = closure_system(self.kind, self.d)
            self.compiled = compile_system(self.system, backend)
            self.params = np.concatenate([self._p["A"].ravel(), self._p["V"].ravel()])   # the system's layout

            sysm = self.system
            self._cond = sp.lambdify([*sysm.states, *sysm.params], [c.lhs for c in sysm.conditions], "numpy")

    def __reduce__(self):
        """Pickle / deep-copy by rebuilding from the weights (the compiled code and the lambdified conditions are
        process-local; the derivation is memoised)."""
        return ClosureODE, self._args

    def rhs(self, t: float, y) -> np.ndarray:
        if self.system is not None:
            return np.asarray(self.compiled.f(t, np.asarray(y, float), self.params), float)
        a, S = layout.unpack(np.asarray(y, float), self.d)
        p = self._p
        da, dS = sigmoid_closure_rhs(a, S, p["A"], p["V"], float(p["b"]), self.n_outer, self.n_inner)
        return layout.pack(da, dS)

    def condition_values(self, t: float, y) -> np.ndarray:
        """Pivots of ``Σ - ΣAᵀΣAΣ`` (must stay > 0; unnormalised softmax only; empty otherwise)."""
        if self._cond is None:
            return np.zeros(0)
        return np.array(self._cond(*np.asarray(y, float), *self.params), float)

    def quadrature_error(self, alpha, Sigma) -> float:
        """Sigmoid: max-norm change of the right-hand side when both Gauss–Hermite node counts grow by half (an
        estimate of the quadrature error of the coarser rule, which converges geometrically); 0 otherwise
        (closed form)."""
        if self.system is not None:
            return 0.0
        p = self._p
        lo = sigmoid_closure_rhs(alpha, Sigma, p["A"], p["V"], float(p["b"]), self.n_outer, self.n_inner)
        hi = sigmoid_closure_rhs(alpha, Sigma, p["A"], p["V"], float(p["b"]), (3 * self.n_outer) // 2,
                                 (3 * self.n_inner) // 2)
        return float(max(np.abs(lo[0] - hi[0]).max(), np.abs(lo[1] - hi[1]).max()))

    def integrate(self, alpha0, Sigma0, T: float, *, t_eval=None, rtol: float = 1e-10,
                  method: str = "DOP853") -> ClosureSolution:
        """Integrate the closure on ``[0, T]`` on the package's integrator (blow-up monitor; the closure's
        finiteness conditions as a stop event)."""
        from ..numerics.ode.solve import BlowupMonitor, Status, StopCondition, integrate

        alpha0, Sigma0 = check_gaussian(alpha0, Sigma0, self.d)
        events = [BlowupMonitor(*layout.gaussian_size(self.d))]
        if self._cond is not None:
            if not np.all(self.condition_values(0.0, layout.pack(alpha0, Sigma0)) > 0):
                raise InputError("Sigma0", "the closure's expectations are infinite here: Σ⁻¹ - AᵀΣA is not "
                                 "positive definite (‖Σ^{1/2}AΣ^{1/2}‖ ≥ 1)")
            events.append(StopCondition(self.condition_values, UNDEFINED,
                                        "Σ⁻¹ - AᵀΣA stopped being positive definite at t = {t:.12g}: the closure's "
                                        "expectations are infinite beyond"))
        sol = integrate(self.rhs, layout.pack(alpha0, Sigma0), (0.0, float(T)), method=method, rtol=rtol,
                        t_eval=t_eval, events=events)
        a, S = layout.unpack(np.asarray(sol.y, float), self.d)
        status = sol.event.kind if sol.status == Status.EVENT else str(sol.status)
        return ClosureSolution(np.asarray(sol.t), a, S, status, f"{LABEL}: {sol.message}")

    def __repr__(self) -> str:
        how = "SymPy closed form" if self.system is not None else \
            f"Gauss–Hermite {self.n_outer}^{self.d} x {self.n_inner} nodes"
        return f"ClosureODE({self.kind!r}, d={self.d}, {LABEL}, {how})"


@dataclass(frozen=True)
class ClosureError:
    """Closure vs particles at time ``T``, paired per run (module docstring of :func:`closure_vs_particles`):
    ``closure`` (from the exact initial law) and ``particles`` (seed mean) packed ``(α, Σ upper)``; ``error`` the
    seed mean of ``particles_r - closure_r`` (closure ``r`` started from cloud ``r``'s own initial moments) and
    ``se`` its standard error (Monte-Carlo, ``∝ n^{-1/2}``); ``rel = max|error| / max|Σ_closure(T)|``;
    ``z = max |error|/se``; ``moved = max |closure(T) - initial| / se`` (how far the state moved, in SE);
    ``quadrature`` the closure's quadrature-error estimate at the end (sigmoid; 0 for a closed form)."""

    closure: np.ndarray
    particles: np.ndarray
    se: np.ndarray
    error: np.ndarray
    rel: float
    z: float
    moved: float
    quadrature: float
    n: int
    runs: int
    label: str = LABEL


def closure_vs_particles(weights: Weights, alpha0, Sigma0, T: float, *, n: int = 1000, runs: int = 6,
                         seed: int = 0, steps: int = 20, n_outer: int = 16, n_inner: int = 32) -> ClosureError:
    """Measure the closure error against ``runs`` particle clouds of ``n`` tokens.

    Paired design (a control variate): run ``r``'s closure starts from the empirical ``(α̂, Σ̂)`` of its own
    initial cloud, so the sampling error of the initial moments, which both sides carry forward alike, cancels
    and the difference keeps only the closure error, an ``O(1/n)`` finite-``n`` bias and a much smaller
    ``O(n^{-1/2})`` noise (from the cloud's higher moments), whose size ``se`` is measured over the runs.
    Particles: fixed-step RK4 with ``steps`` steps (step error ``O(h⁴)``; ``steps`` is checked by the caller
    against a doubled run).  Sigmoid quadrature: ``n_outer``, ``n_inner`` nodes (its estimate is returned).
    The runs (``default_rng([seed, r])``), the paired deviations and their standard error are
    :func:`symbolic_tpde.compare`'s (``paired=True``, this closure as its ``ode``)."""
    from ..api import compare

    d = weights.d
    alpha0, Sigma0 = check_gaussian(alpha0, Sigma0, d)
    ode = ClosureODE(weights, n_outer=n_outer, n_inner=n_inner)
    c = compare(weights, alpha0, Sigma0, T, n=n, runs=runs, seed=seed, paired=True, ode=ode,
                ode_options={"rtol": 1e-9}, method="rk4", steps=steps)
    err, se = c.deviation[-1], c.se[-1]
    return ClosureError(layout.pack(c.alpha[-1], c.Sigma[-1]), layout.pack(c.mean[-1], c.cov[-1]), se, err,
                        float(np.abs(err).max() / np.abs(c.Sigma[-1]).max()), float(np.max(np.abs(err) / se)),
                        float(c.sensitivity[-1]), ode.quadrature_error(c.alpha[-1], c.Sigma[-1]), n, runs)
