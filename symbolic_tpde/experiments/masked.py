"""Masked (causal) attention, measured: the Lipschitz blow-up at ``s = 0``, the attention sink, and the loss
of Gaussianity (README Mathematics §2, §3, §6).

Tokens ``x_i`` carry positions ``s_i = i / n`` (index order); a query attends to keys with ``s_j ≤ s_i``.
In the mean-field picture the field at position ``s`` is a softmax average over ``μ`` restricted to
``[0, s]``, normalised by (a kernel-weighted) ``λ([0, s])``, which vanishes as ``s → 0``.  Moving the
first token by ``δ`` is a perturbation of size ``W_1^c = δ/n``; the response of the token at ``s_i`` is,
to first order in time, ``≈ T ‖V‖ w_{i0} δ`` with attention weight

* without sink: ``w_{i0} ≈ 1/(i + 1) = 1/(n s_i + 1)``, so ``|δx_i| / W_1^c ≈ n/(i+1) ~ 1/s_i``: the
  Lipschitz constant in ``W^c`` blows up as ``s → 0``;
* with a sink of mass ``m₀`` (weights ``m₀`` for the sink and ``(1-m₀)/n`` per token inside the softmax
  normalisation, ``symbolic_tpde.weights.Sink``): ``w_{i0} ≈ ((1-m₀)/n) / (m₀ + (1-m₀)(i+1)/n)``, so
  ``|δx_i| / W_1^c ≲ 1/m₀``: bounded uniformly in ``s``.

:func:`token_sensitivity` measures ``|δx_i(T)| / |δ|`` per position by finite differences of two runs
(forward difference, ``δ = 1e-6``: truncation ``O(δ)``, round-off ``O(eps/δ) ~ 1e-10``, both far below the
effects measured).  :func:`gaussian_witness` shows that masked attention does not preserve Gaussian data
(README Mathematics §3: the field is not affine in ``x``) with Mardia's skewness test (and kurtosis z-score), the
unmasked softmax flow (which preserves Gaussians in the mean-field limit) of the same tokens serving as
control.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..weights import make_head, make_weights
from ..analysis.meanfield import Mardia, evolve, mardia


def masked_weights(A, V, sink_mass: float | None = None, sink_x=None):
    """Causal softmax head ``(A, V)``, with an attention sink of mass ``sink_mass`` at ``sink_x`` (default
    the origin) when given."""
    V = np.asarray(V, float)
    sink = None
    if sink_mass is not None:
        sink = {"mass": float(sink_mass), "x": np.zeros(len(V)) if sink_x is None else np.asarray(sink_x, float)}
    return make_weights([make_head("masked", A=np.asarray(A, float), V=V)], sink=sink)


def predicted_weight(n: int, sink_mass: float | None = None) -> np.ndarray:
    """Attention weight of token 0 in query ``i``'s softmax for a flat kernel (the ``t → 0``, ``A → 0``
    value of ``w_{i0}`` in the module docstring)."""
    i = np.arange(n)
    if sink_mass is None:
        return 1.0 / (i + 1.0)
    m = float(sink_mass)
    return ((1 - m) / n) / (m + (1 - m) * (i + 1) / n)


@dataclass
class Sensitivity:
    positions: np.ndarray     # s_i = i/n
    sensitivity: np.ndarray   # |δx_i(T)| / |δ|
    sink_mass: float | None
    perturbed: str            # "first" or "random"
    T: float

    @property
    def lipschitz_wc(self) -> np.ndarray:
        """Response per unit ``W_1^c`` of the perturbation: ``n |δx_i| / |δ|`` for ``"first"``."""
        return len(self.positions) * self.sensitivity

    def early_max(self, frac: float = 0.125) -> float:
        """``max`` of the sensitivity over tokens ``1 ≤ i ≤ frac·n`` (token 0 itself excluded)."""
        k = max(2, int(frac * len(self.positions)))
        return float(self.sensitivity[1:k].max())

    def as_dict(self) -> dict:
        return {"positions": self.positions.tolist(), "sensitivity": self.sensitivity.tolist(),
                "sink_mass": self.sink_mass, "perturbed": self.perturbed, "T": self.T}


def token_sensitivity(A, V, X0, T: float, steps: int, rng: np.random.Generator, *,
                      sink_mass: float | None = None, perturbed: str = "first", delta: float = 1e-6) -> Sensitivity:
    """``|x_i^δ(T) - x_i(T)| / |δ|`` per position ``i``.

    ``perturbed="first"``: token 0 moved by ``δ u`` (``u`` a random unit vector); ``"random"``: every token
    moved by ``δ ξ_i/√d`` (``ξ`` standard normal), the ratio being taken against ``|δ|``.
    """
    X0 = np.asarray(X0, float)
    n, d = X0.shape
    w = masked_weights(A, V, sink_mass)
    if perturbed == "first":
        u = rng.standard_normal(d)
        P = np.zeros_like(X0)
        P[0] = u / np.linalg.norm(u)
    elif perturbed == "random":
        P = rng.standard_normal(X0.shape) / np.sqrt(d)
    else:
        raise InputError("perturbed", f"expected 'first' or 'random', got {perturbed!r}")
    XT = evolve(X0, w, T, steps)[1][-1]
    YT = evolve(X0 + delta * P, w, T, steps)[1][-1]
    sens = np.linalg.norm(YT - XT, axis=1) / delta
    return Sensitivity(np.arange(n) / n, sens, sink_mass, perturbed, float(T))


#: p-value threshold of the Gaussianity witness (one-sided normal tail of ~4.9 standard deviations)
P_WITNESS = 1e-6


@dataclass
class GaussianWitness:
    initial: Mardia
    masked: Mardia
    control: Mardia      # unmasked softmax with the same (A, V) and tokens
    sink_mass: float | None
    T: float
    clouds: tuple = ()   # (initial, masked, control) token clouds, not serialised

    @property
    def witnessed(self) -> bool:
        """Masked cloud: Mardia skewness p-value below ``P_WITNESS`` (beyond ~5 null standard deviations)
        while the initial cloud and the unmasked control stay above it."""
        return (self.masked.skew_p < P_WITNESS and self.control.skew_p > P_WITNESS
                and self.initial.skew_p > P_WITNESS)

    def as_dict(self) -> dict:
        return {"initial": self.initial.as_dict(), "masked": self.masked.as_dict(),
                "control": self.control.as_dict(), "sink_mass": self.sink_mass, "T": self.T,
                "witnessed": self.witnessed}


def gaussian_witness(A, V, n: int, T: float, steps: int, rng: np.random.Generator, *,
                     sink_mass: float | None = None, sink_x=None, alpha0=None, Sigma0=None) -> GaussianWitness:
    """Mardia statistics of ``n`` Gaussian tokens before and after the masked flow, and after the unmasked
    softmax flow (control).  Under the Gaussian null ``n b1/6 ~ χ²`` and ``kurt_z ~ N(0, 1)`` (large ``n``).

    Mechanism (mean-field): with a sink at ``x_s`` the field at position ``s`` is
    ``V [p x_s + (1 - p) m_s(x)]`` with sink share ``p = m₀ e^{<Ax,x_s>} / (m₀ e^{<Ax,x_s>} + (1-m₀) s Z_s(x))``,
    a logistic function of ``x`` when ``x_s`` is away from the data: tokens on one side are pulled to the
    sink, the others follow the tilted mean, and the cloud becomes skewed.  The control's own finite-``n``
    distortion (the empirical tilt is sampled poorly in the tails) grows with ``‖Σ^{1/2} A Σ^{1/2}‖``: keep
    that norm moderate (0.3 in the defaults) so the control stays Gaussian within sampling error.
    """
    V = np.asarray(V, float)
    d = len(V)
    alpha0 = np.zeros(d) if alpha0 is None else np.asarray(alpha0, float)
    Sigma0 = np.eye(d) if Sigma0 is None else np.asarray(Sigma0, float)
    X0 = alpha0 + rng.standard_normal((n, d)) @ np.linalg.cholesky(Sigma0).T
    XT = evolve(X0, masked_weights(A, V, sink_mass, sink_x), T, steps)[1][-1]
    ctrl = make_weights([make_head("softmax", A=np.asarray(A, float), V=V)])
    CT = evolve(X0, ctrl, T, steps)[1][-1]
    return GaussianWitness(mardia(X0), mardia(XT), mardia(CT), sink_mass, float(T), (X0, XT, CT))
