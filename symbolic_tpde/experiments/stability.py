"""Dobrushin-type stability of the Transformer PDE, measured (README Mathematics §6).

Claim: for data supported in ``B(0, R₀)``, ``W_p(μ_t, ν_t) ≤ C(t, R₀) W_p(μ₀, ν₀)`` with a constant growing
like ``e^{c‖A‖R₀²}``; the support stays in ``B(0, R₀ e^{‖V‖t})``.

Measured here (:func:`stability_curve`): two nearby empirical measures (the particles ``X₀`` and
``Y₀ = X₀ + δ ξ``, ``ξ`` standard normal per particle) are evolved by the same weights; the ratio
``W_p(μ_t, ν_t) / W_p(μ₀, ν₀)`` is computed with the exact assignment solver at saved times (for masked
attention: the conditional distance ``W_p^c`` with one token per position).  The growth constant ``λ`` is
the OLS slope of ``log ratio`` on ``t`` (``ratio ≈ e^{λt}``).  :func:`radius_dependence` repeats this for
several ``R₀`` and fits ``log C(T, R₀) = a + k R₀²``; ``c = k / (‖A‖ T)`` is the constant of the
``e^{c‖A‖R²}`` form (per unit time).

A rigorous comparison for softmax (:func:`softmax_dobrushin_bound`): with the identity coupling
``D(t)² = (1/n) Σ |x_i - y_i|²`` one has ``dD/dt ≤ (L_x + L_μ) D`` where, for keys in ``B(0, R)``,

* ``L_x = ‖V‖ ‖A‖ R²`` (``∂_x Γ = V Cov_w(y) A`` and ``‖Cov_w(y)‖ ≤ R²``),
* ``L_μ = ‖V‖ (1 + 2‖A‖R²) e^{2‖A‖R²}`` (moving key ``j`` changes ``Σ_k w_k y_k`` by
  ``w_j (I + (y_j - ȳ)(Aq)ᵀ) δy_j`` and ``w_j ≤ e^{2‖A‖R²}/n``; then Cauchy-Schwarz),

so ``W₂(μ_T, ν_T) ≤ D(T) ≤ D(0) exp(∫₀ᵀ (L_x + L_μ)(R₀ e^{‖V‖s}) ds)``; when the identity coupling is
optimal at ``t = 0`` (checked: ``W₂(0) = D(0)``) this bounds the measured ratio.  It is loose (double
exponential in ``R₀²``), the measured constants are the informative numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import BlowupError, InputError
from ..weights import make_head, make_weights
from ..numerics.measures.distances import conditional_wasserstein, wasserstein
from ..analysis.meanfield import LineFit, as_schedule, evolve, gaussian_mixture, ols, uniform_ball

VARIANTS = ("softmax", "l2", "sinkhorn", "sigmoid", "linear", "multihead", "masked")


def variant_weights(variant: str, A: np.ndarray, V: np.ndarray, *, sink_mass: float | None = None):
    """Weights of each variant built from one ``(A, V)`` so that variants are comparable, by the registry
    (:func:`~symbolic_tpde.analysis.sweep.interaction_head`: the kernel's bilinear term is ``<Ax, y>``):

    * ``l2``: ``Q = A``, ``K = I``, ``τ = 2``: kernel ``exp(-|Ax - y|²/2) ∝ exp(<Ax, y> - |y|²/2)``;
    * ``sinkhorn``: ``ε = 1``; ``sigmoid``: ``b = 0``;
    * ``multihead``: heads ``(A, V/2)`` and ``(Aᵀ, V/2)``;
    * ``masked``: causal softmax, with an attention sink of mass ``sink_mass`` at ``x = 0`` if given.
    """
    from ..registry import kinds
    from ..analysis.sweep import interaction_head

    A = np.asarray(A, float)
    V = np.asarray(V, float)
    d = len(V)
    if variant == "multihead":
        return make_weights([make_head("softmax", A=A, V=V / 2), make_head("softmax", A=A.T.copy(), V=V / 2)])
    if variant not in kinds.KINDS:
        raise InputError("variant", f"unknown variant {variant!r}; expected one of {list(VARIANTS)}")
    sink = {"mass": float(sink_mass), "x": np.zeros(d)} if (sink_mass is not None and variant == "masked") else None
    return make_weights([interaction_head(variant, A, V)], sink=sink)


def _is_masked(weights) -> bool:
    return any(h.kind == "masked" for h in as_schedule(weights)(0.0).heads)


@dataclass
class StabilityCurve:
    """``ratio[p][k] = W_p(μ_{t_k}, ν_{t_k}) / W_p(μ₀, ν₀)`` and the fitted growth constant."""

    times: np.ndarray
    w: dict            # p -> array of W_p(t)
    ratio: dict        # p -> array of ratios
    growth: float      # λ: OLS slope of log ratio_2 on t
    C_T: float         # ratio_2 at T
    C_max: float       # max_t ratio_2
    radius: float      # max |x| over both initial clouds
    identity_optimal_at_0: bool
    conditional: bool  # True when W_p^c (masked attention) was used
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"times": self.times.tolist(), "w": {str(p): v.tolist() for p, v in self.w.items()},
                "ratio": {str(p): v.tolist() for p, v in self.ratio.items()}, "growth": self.growth,
                "C_T": self.C_T, "C_max": self.C_max, "radius": self.radius,
                "identity_optimal_at_0": self.identity_optimal_at_0, "conditional": self.conditional,
                **self.extra}


def stability_curve(weights, X0, T: float, steps: int, rng: np.random.Generator, *, delta: float = 1e-3,
                    n_save: int = 10, ps=(1.0, 2.0)) -> StabilityCurve:
    """Evolve ``X₀`` and ``X₀ + δξ`` and measure ``W_p`` between them at ``n_save + 1`` times (see module
    docstring).  ``δ`` is small against the inter-particle spacing so that the exact ``W_p`` at ``t = 0`` is
    the identity-coupling cost (reported in ``identity_optimal_at_0``).
    """
    X0 = np.asarray(X0, float)
    if steps % n_save:
        raise InputError("steps", f"must be a multiple of n_save = {n_save}")
    Y0 = X0 + delta * rng.standard_normal(X0.shape)
    times, TX = evolve(X0, weights, T, steps, save_every=steps // n_save)
    _, TY = evolve(Y0, weights, T, steps, save_every=steps // n_save)
    masked = _is_masked(weights)
    pos = np.arange(len(X0)) / len(X0)
    w = {}
    for p in ps:
        if masked:
            w[p] = np.array([conditional_wasserstein(a, b, pos, p) for a, b in zip(TX, TY)])
        else:
            w[p] = np.array([wasserstein(a, b, p) for a, b in zip(TX, TY)])
    ratio = {p: v / v[0] for p, v in w.items()}
    d0 = float(np.sqrt(((X0 - Y0) ** 2).sum(1).mean()))
    r2 = ratio[2.0] if 2.0 in ratio else ratio[ps[-1]]
    fit = np.polyfit(times, np.log(r2), 1)
    radius = float(max(np.linalg.norm(X0, axis=1).max(), np.linalg.norm(Y0, axis=1).max()))
    w2_0 = w[2.0][0] if 2.0 in w else np.nan
    return StabilityCurve(times, w, ratio, float(fit[0]), float(r2[-1]), float(r2.max()), radius,
                          bool(abs(w2_0 - d0) <= 1e-9 * d0), masked)


def initial_cloud(kind: str, n: int, d: int, radius: float, rng: np.random.Generator) -> np.ndarray:
    """``"ball"``: uniform on ``B(0, R₀)``; ``"mixture"``: three Gaussian bumps (scale ``R₀/6``) centred on
    a circle of radius ``R₀/2``, truncated to ``B(0, R₀)``."""
    if kind == "ball":
        return uniform_ball(n, d, radius, rng)
    if kind == "mixture":
        ang = 2 * np.pi * np.arange(3) / 3
        centers = np.zeros((3, d))
        centers[:, 0], centers[:, min(1, d - 1)] = np.cos(ang), np.sin(ang)
        return gaussian_mixture(n, 0.5 * radius * centers, radius / 6, radius, rng)
    raise InputError("data", f"unknown initial data {kind!r}; expected 'ball' or 'mixture'")


@dataclass
class RadiusFit:
    """``log C(T, R₀)`` against ``R₀²``: the ``e^{c‖A‖R²}`` form, fitted."""

    radii: list
    log_C: list
    growth: list
    fit: LineFit
    c: float          # fit.slope / (‖A‖ T)
    norm_A: float
    T: float
    r2: float         # coefficient of determination of the linear fit in R₀²
    blowups: list = field(default_factory=list)  # radii left out: the run blew up (with its time)

    def as_dict(self) -> dict:
        return {"radii": self.radii, "log_C": self.log_C, "growth": self.growth, "fit": self.fit.as_dict(),
                "c": self.c, "norm_A": self.norm_A, "T": self.T, "r2": self.r2, "blowups": self.blowups}


def radius_dependence(weights, norm_A: float, radii, n: int, T: float, steps: int, rng: np.random.Generator,
                      *, data: str = "ball", delta: float = 1e-3, n_save: int = 10) -> RadiusFit:
    """Stability constant ``C(T, R₀) = ratio₂(T)`` for each radius, and the OLS fit of ``log C`` on ``R₀²``."""
    d = as_weights_d(weights)
    logC, growth, used, blowups = [], [], [], []
    for R in radii:
        X0 = initial_cloud(data, n, d, float(R), rng)
        try:
            curve = stability_curve(weights, X0, T, steps, rng, delta=delta * R, n_save=n_save, ps=(2.0,))
        except BlowupError as exc:  # e.g. linear attention: cubic field, finite-time blow-up for large R₀
            blowups.append({"radius": float(R), "t": exc.t})
            continue
        logC.append(float(np.log(curve.C_T)))
        growth.append(curve.growth)
        used.append(float(R))
    if len(used) < 3:
        raise BlowupError(blowups[0]["t"] if blowups else 0.0, "radius_dependence",
                          f"fewer than 3 radii without blow-up: {blowups}")
    radii = used
    x = np.square(np.asarray(radii, float))
    fit = ols(x, logC)
    resid = np.asarray(logC) - fit.intercept - fit.slope * x
    r2 = 1.0 - float((resid ** 2).sum() / max(((np.asarray(logC) - np.mean(logC)) ** 2).sum(), 1e-300))
    return RadiusFit([float(r) for r in radii], logC, growth, fit, fit.slope / (norm_A * T), float(norm_A),
                     float(T), r2, blowups)


def as_weights_d(weights) -> int:
    return as_schedule(weights)(0.0).d


def softmax_dobrushin_bound(A, V, R0: float, T: float, n_quad: int = 2001) -> float:
    """``exp(∫₀ᵀ L(R₀ e^{‖V‖s}) ds)`` with ``L(R) = ‖V‖‖A‖R² + ‖V‖(1 + 2‖A‖R²) e^{2‖A‖R²}`` (module
    docstring; trapezoid rule on ``n_quad`` points, the integrand is smooth and increasing)."""
    a = float(np.linalg.norm(np.asarray(A, float), 2))
    v = float(np.linalg.norm(np.asarray(V, float), 2))
    s = np.linspace(0.0, T, n_quad)
    R2 = (R0 * np.exp(v * s)) ** 2
    with np.errstate(over="ignore"):
        L = v * a * R2 + v * (1 + 2 * a * R2) * np.exp(2 * a * R2)
        return float(np.exp(np.trapezoid(L, s)))
