"""Gaussian moment ODEs, end to end: derive (symbolic engine) -> generate code -> integrate.

For ``μ_t = N(α, Σ)`` and an attention whose field is affine on Gaussians, ``Γ(x) = b + J x``, the moments
obey ``dα/dt = b + J α``, ``dΣ/dt = J Σ + Σ Jᵀ`` (``../shared/MATH.md`` §3).  The entrywise right-hand side
comes from :func:`symbolic_tpde.symbolic.moments.derive_gaussian_system`; it is compiled by
:func:`symbolic_tpde.codegen.compile.compile_system` (C when available, numpy otherwise).

Flat state (``symbolic.system.gaussian_state_layout``): ``alpha`` then the upper triangle of ``Sigma`` row by
row.  Flat parameters: ``system.param_layout`` (``("heads", h, name)``, ``("ffn", "W")``, ``("ffn", "c")``).

Sinkhorn heads at ``d >= 3`` have no entrywise closed form (the cross-covariance needs a matrix square root);
there :class:`GaussianODE` evaluates the closed form numerically (``backend="numeric-matrix"``, see
:func:`affine_field`): ``Cᵀ = 2 Σ A_ε Σ^{1/2} (S + I)^{-1} Σ^{1/2}`` with ``A_ε = A/ε``,
``S = (I + 4 M)^{1/2}``, ``M = Σ^{1/2} A_εᵀ Σ A_ε Σ^{1/2}`` (eigen-decomposition of the SPD ``M``).  This is
MATH.md's ``Cᵀ = ½ A^{-ᵀ}(Σ^{-1/2}(I + 4M)^{1/2}Σ^{1/2} - I)`` rewritten with ``S - I = 4M(S + I)^{-1}`` so
that ``A`` need not be invertible; it is checked against the first-order condition
``C = Σ A_εᵀ (Σ - Cᵀ Σ⁻¹ C)`` in the tests.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .errors import InputError
from .model import Scenario, Schedule, Weights
from .numerics.linalg import sqrtm_psd

#: Blow-up threshold: integration stops when ``tr Σ + |α|²`` exceeds this multiple of its initial value.
BLOWUP_FACTOR = 1e12
NOT_PRESERVING = ("sigmoid", "softmax_unnormalized", "masked")


# ---------------------------------------------------------------------------------------------- packing
def pack_state(alpha, Sigma) -> np.ndarray:
    """``y = (alpha_0..alpha_{d-1}, Sigma_00, Sigma_01, .., Sigma_0{d-1}, Sigma_11, ..)``."""
    a = np.asarray(alpha, dtype=float).reshape(-1)
    S = np.asarray(Sigma, dtype=float)
    d = a.shape[0]
    if S.shape != (d, d):
        raise InputError("Sigma", f"expected shape ({d}, {d}), got {S.shape}")
    iu = np.triu_indices(d)
    return np.concatenate([a, S[iu]])


def unpack_state(y, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack_state`; works on a leading batch axis too (``y`` of shape ``(..., n)``)."""
    y = np.asarray(y, dtype=float)
    n = d + d * (d + 1) // 2
    if y.shape[-1] != n:
        raise ValueError(f"state of length {y.shape[-1]} does not match d = {d} (expected {n})")
    alpha = y[..., :d].copy()
    Sigma = np.zeros(y.shape[:-1] + (d, d))
    iu = np.triu_indices(d)
    Sigma[..., iu[0], iu[1]] = y[..., d:]
    Sigma[..., iu[1], iu[0]] = y[..., d:]
    return alpha, Sigma


def _block_value(weights: Weights, key: tuple) -> Any:
    if key[0] == "heads":
        h, name = key[1], key[2]
        if h >= len(weights.heads) or name not in weights.heads[h].params:
            raise InputError(f"heads[{h}].{name}", "parameter required by the derived system is missing")
        return weights.heads[h].params[name]
    if key[0] == "ffn":
        if weights.ffn is None:
            raise InputError("ffn", "the derived system has a feed-forward term but the weights do not")
        return getattr(weights.ffn, key[1])
    if key[0] == "sink":
        if weights.sink is None:
            raise InputError("sink", "the derived system has a sink but the weights do not")
        return getattr(weights.sink, key[1])
    raise InputError(str(key), "unknown parameter block key")


def pack_params(system, weights: Weights) -> np.ndarray:
    """Flat parameter vector of ``system`` filled from ``weights`` following ``system.param_layout``."""
    p = np.empty(system.n_params)
    if system.n_params and not system.param_layout:
        raise InputError("params", "system has parameters but no param_layout to fill them from")
    for blk in system.param_layout:
        arr = np.asarray(_block_value(weights, blk.key), dtype=float)
        if arr.shape != tuple(blk.shape):
            raise InputError(".".join(map(str, blk.key)), f"expected shape {tuple(blk.shape)}, got {arr.shape}")
        p[blk.offset:blk.offset + blk.size] = arr.reshape(-1)
    return p


# -------------------------------------------------------------------------------- numeric matrix path
def sinkhorn_cross_cov(A: np.ndarray, Sigma: np.ndarray, epsilon: float = 1.0) -> np.ndarray:
    """``Cᵀ`` of the Gaussian entropic self-plan (module docstring), by eigen-decompositions only."""
    Ae = np.asarray(A, dtype=float) / epsilon
    R = sqrtm_psd(Sigma)
    M = R @ Ae.T @ Sigma @ Ae @ R
    M = 0.5 * (M + M.T)
    w, U = np.linalg.eigh(M)
    inv_SpI = (U / (np.sqrt(1.0 + 4.0 * np.clip(w, 0.0, None)) + 1.0)) @ U.T
    return 2.0 * Sigma @ Ae @ R @ inv_SpI @ R


def affine_field(weights: Weights, alpha: np.ndarray, Sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numeric ``(b, J)`` with ``Γ(x) = b + J x`` on ``N(alpha, Sigma)``, summed over heads (+ FFN).

    Per head (MATH.md §3, tilt ``N(y; α, Σ) e^{yᵀRy + (Bᵀx + r)ᵀy} ∝ N(y; m(x), S)``,
    ``S = (Σ⁻¹ - R - Rᵀ)⁻¹``, ``m(x) = S(Σ⁻¹α + r + Bᵀx)``): softmax ``B = Aᵀ``; ℓ2 ``B = 2QᵀK/τ``,
    ``R = -KᵀK/τ``; custom as given; then ``b = V S(Σ⁻¹α + r)``, ``J = V S Bᵀ``.  Linear:
    ``J = V(Σ + ααᵀ)A``, ``b = 0``.  Sinkhorn: ``E[y|x] = α + CᵀΣ⁻¹(x - α)``.
    """
    d = alpha.shape[0]
    b = np.zeros(d)
    J = np.zeros((d, d))
    Sinv = None
    for i, head in enumerate(weights.heads):
        prm = head.params
        V = prm["V"]
        if head.kind in ("softmax", "l2", "custom"):
            if head.kind == "softmax":
                B, R, r = prm["A"].T, np.zeros((d, d)), np.zeros(d)
            elif head.kind == "l2":
                B, R, r = 2.0 * prm["Q"].T @ prm["K"] / prm["tau"], -prm["K"].T @ prm["K"] / prm["tau"], np.zeros(d)
            else:
                B, R, r = prm["B"], prm["R"], prm["r"]
            if Sinv is None:
                Sinv = np.linalg.inv(Sigma)
            prec = Sinv - R - R.T
            try:
                np.linalg.cholesky(prec)
            except np.linalg.LinAlgError:
                raise InputError(f"heads[{i}]", "tilted precision Σ⁻¹ - R - Rᵀ is not positive definite: "
                                 "the kernel is not integrable against this Gaussian") from None
            b += V @ np.linalg.solve(prec, Sinv @ alpha + r)
            J += V @ np.linalg.solve(prec, B.T)
        elif head.kind == "linear":
            J += V @ (Sigma + np.outer(alpha, alpha)) @ prm["A"]
        elif head.kind == "sinkhorn":
            Ct = sinkhorn_cross_cov(prm["A"], Sigma, prm.get("epsilon", 1.0))
            Jh = V @ np.linalg.solve(Sigma.T, Ct.T).T  # V Cᵀ Σ⁻¹
            J += Jh
            b += V @ alpha - Jh @ alpha
        else:
            raise InputError(f"heads[{i}].attention", f"{head.kind!r} attention is not Gaussian-preserving")
    if weights.ffn is not None:
        J += weights.ffn.W
        b += weights.ffn.c
    return b, J


# ------------------------------------------------------------------------------------------ GaussianODE
_SYSTEMS: dict[tuple, Any] = {}
_COMPILED: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def system_for(weights: Weights):
    """The derived entrywise :class:`OdeSystem` for ``weights.structure()`` (memoised per structure)."""
    from .symbolic.moments import derive_gaussian_system

    key = weights.structure()
    with _LOCK:
        hit = _SYSTEMS.get(key)
    if hit is None:
        hit = derive_gaussian_system(key)
        with _LOCK:
            _SYSTEMS[key] = hit
    return hit


def compiled_for(weights: Weights, backend: str = "auto"):
    """Compiled right-hand side for ``weights.structure()`` and ``backend`` (memoised in memory)."""
    from .codegen.compile import compile_system

    key = (weights.structure(), backend)
    with _LOCK:
        hit = _COMPILED.get(key)
    if hit is None:
        hit = compile_system(system_for(weights), backend)
        with _LOCK:
            _COMPILED[key] = hit
    return hit


def needs_numeric_matrix(weights: Weights) -> bool:
    return weights.d >= 3 and any(h.kind == "sinkhorn" for h in weights.heads)


class GaussianODE:
    """The Gaussian moment ODE of a weights schedule, ready to evaluate and integrate.

    ``backend``: ``"auto"`` / ``"numpy"`` / ``"c"`` for generated code; Sinkhorn at ``d >= 3`` always uses
    ``"numeric-matrix"`` (reported in :attr:`backend` and in solutions).
    """

    def __init__(self, schedule: Schedule, backend: str = "auto"):
        self.schedule = schedule
        w0 = schedule(0.0)
        self.d = w0.d
        self.structure = w0.structure()
        for i, h in enumerate(w0.heads):
            if h.kind in NOT_PRESERVING:
                from .symbolic.witness import NotGaussianPreserving, witness_for

                raise NotGaussianPreserving(witness_for(h.kind, sink=w0.sink is not None))
        self._pcache: dict[int, Any] = {}
        if needs_numeric_matrix(w0):
            self.system = None
            self.compiled = None
            self.backend = "numeric-matrix"
        else:
            self.system = system_for(w0)
            self.compiled = compiled_for(w0, backend)
            self.backend = self.compiled.backend
        self.scenario: Scenario | None = None

    @classmethod
    def from_schedule(cls, schedule: Schedule, backend: str = "auto") -> "GaussianODE":
        return cls(schedule, backend)

    @classmethod
    def from_weights(cls, weights: Weights, backend: str = "auto") -> "GaussianODE":
        return cls(Schedule.constant(weights), backend)

    @classmethod
    def from_scenario(cls, scn: Scenario, backend: str = "auto") -> "GaussianODE":
        ode = cls(scn.schedule, backend)
        ode.scenario = scn
        return ode

    # -- evaluation -----------------------------------------------------------------------------------
    def weights(self, t: float) -> Weights:
        w = self.schedule(t)
        if w.structure() != self.structure:
            raise InputError("schedule", f"weights at t = {t} have structure {w.structure()}, "
                             f"expected {self.structure}")
        return w

    def params(self, t: float):
        """Flat parameter vector at ``t`` (layers respected); the :class:`Weights` on the numeric path."""
        w = self.weights(t)
        cacheable = self.schedule.func is None
        if cacheable and id(w) in self._pcache:
            return self._pcache[id(w)]
        p = w if self.system is None else pack_params(self.system, w)
        if cacheable:
            self._pcache[id(w)] = p
        return p

    def _numeric_rhs(self, y: np.ndarray, w: Weights) -> np.ndarray:
        alpha, Sigma = unpack_state(y, self.d)
        b, J = affine_field(w, alpha, Sigma)
        JS = J @ Sigma
        return pack_state(b + J @ alpha, JS + JS.T)

    def rhs(self, t: float, y) -> np.ndarray:
        if self.system is None:
            return self._numeric_rhs(np.asarray(y, dtype=float), self.params(t))
        return self.compiled.f(t, y, self.params(t))

    def rhs_matrices(self, t: float, alpha, Sigma) -> tuple[np.ndarray, np.ndarray]:
        return unpack_state(self.rhs(t, pack_state(alpha, Sigma)), self.d)

    def jac(self, t: float, y) -> np.ndarray:
        """``∂(dy/dt)/∂y``: generated symbolic Jacobian; central differences on the numeric-matrix path
        (step ``h = ε^{1/3} max(1, |y_j|)``, error O(h²) ≈ 1e-10 relative)."""
        if self.system is not None:
            return self.compiled.jac(t, y, self.params(t))
        y = np.asarray(y, dtype=float)
        n = y.shape[0]
        out = np.empty((n, n))
        for j in range(n):
            h = np.finfo(float).eps ** (1 / 3) * max(1.0, abs(y[j]))
            e = np.zeros(n)
            e[j] = h
            out[:, j] = (self.rhs(t, y + e) - self.rhs(t, y - e)) / (2 * h)
        return out

    # -- integration ----------------------------------------------------------------------------------
    def integrate(self, alpha0, Sigma0, T: float, **kwargs):
        """Integrate the moment ODE on ``[0, T]``: see :func:`symbolic_tpde.gaussian_integrate.integrate_gaussian`."""
        from .gaussian_integrate import integrate_gaussian

        return integrate_gaussian(self, alpha0, Sigma0, T, **kwargs)
