"""Long-time behaviour of the covariance ``Σ(t)``: collapse, rank-r limit, divergence, blow-up.

Classification at a horizon ``T`` (README Mathematics §4).  The state is integrated to ``t_mid = T/10`` and ``T``
(with the blow-up detector of :mod:`.blowup`).  With ``Σ(T) = Σ_i λ_i u_i u_iᵀ``, direction ``u_i`` is
*persistent* if ``λ_i ≥ persist·u_iᵀΣ(t_mid)u_i`` (default ``persist = 0.8``) and
``λ_i > floor·max(tr Σ₀, tr Σ(T))``; it *decays* if the ratio is ``≤ decay`` (default 0.4).  An eigenvalue
converging to ``c > 0`` gives a ratio → 1, an ``O(1/t)`` decay gives ``t_mid/T = 0.1``; a ratio in between
means the direction is not in its asymptotic regime at this horizon (e.g. ``V`` with a tiny eigenvalue slows
everything down) and the verdict is ``"undetermined"`` rather than a guess.  Kinds:

* ``"blowup"``: finite-time singularity (time and error bound from :func:`.blowup.integrate_blowup`);
* ``"diverge"``: ``tr Σ(T) > grow·tr Σ(t_mid)`` (default ``grow = 2``) or overflow without blow-up signature;
* ``"collapse"``: no persistent direction (``Σ → 0``);
* ``"rank"``: ``r ≥ 1`` persistent directions; ``range`` is their span (orthonormal columns);
* ``"undetermined"``: some direction neither settled nor decaying by ``T`` (try a longer horizon).

The verdict is a statement at horizon ``T``: directions whose decay time exceeds ``T`` (e.g. ``A + Aᵀ`` with an
eigenvalue ``-ε``, decay time ``~1/ε``) count as persistent; ``decay_slope`` is the log-log slope of the
slowest decaying direction between ``t_mid`` and ``T`` (``≈ -1`` for the ``O(1/t)`` rate).

Every time loop here runs on the package's one integrator (:func:`symbolic_tpde.numerics.solve.integrate`,
scipy's DOP853 stepper),
with the package's one blow-up monitor (:class:`~symbolic_tpde.numerics.solve.BlowupMonitor`, default levels
``10³…10¹⁰ r₀``); a row that passes the top level without the singularity signature is "diverge"
(:data:`OVERFLOW` is the top level: the signature is tested there first).

Identities checked along trajectories (README Mathematics §4; augmented quadrature, independent of the end state):

* volume: ``log det Σ(T) - log det Σ₀ = ∫₀ᵀ tr(Σ(AV + VᵀAᵀ)) dt`` (softmax, any ``V``);
* Lyapunov (``V`` SPD): ``tr(V⁻¹Σ(T)) - tr(V⁻¹Σ₀) = ∫₀ᵀ tr(Σ(A + Aᵀ)Σ) dt``, non-increasing if ``A + Aᵀ ⪯ 0``.

Growth bounds (no blow-up): Sinkhorn ``‖Σ(t)‖ ≤ ‖Σ₀‖e^{2‖V‖t}`` (README Mathematics §4).  ℓ2 with square invertible
``K``: the tilted covariance ``(Σ⁻¹ + (2/τ)KᵀK)⁻¹ ⪯ (τ/2)(KᵀK)⁻¹``, so ``‖J‖ = ‖V(Σ⁻¹ + (2/τ)KᵀK)⁻¹(2/τ)KᵀQ‖
≤ ‖V‖‖K⁻¹Q‖`` and ``dΣ/dt = JΣ + ΣJᵀ`` gives ``‖Σ(t)‖ ≤ ‖Σ₀‖e^{2‖V‖‖K⁻¹Q‖t}`` (Grönwall).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..gaussian import pack_state as _pack
from ..gaussian import unpack_state as _unpack
from ..gaussian.integrate import gaussian_events, gaussian_rhs, integrate_moments, reported_status
from ..numerics.solve import DEFAULT_LEVELS, Status, integrate
from ..registry.layout import gaussian_size
from .blowup import integrate_blowup

#: classification: growth past the monitor's top level without a singularity signature is "diverge"
OVERFLOW = DEFAULT_LEVELS[-1]


@dataclass
class ClusteringResult:
    kind: str                                 # "collapse" | "rank" | "diverge" | "blowup" | "undetermined"
    rank: int | None = None
    range: np.ndarray | None = None           # (d, r) orthonormal basis of the limit's range
    Sigma_T: np.ndarray | None = None         # Σ at the horizon (or at the stop)
    t: float | None = None                    # horizon reached
    decay_slope: float | None = None          # log-log slope of the slowest decaying direction
    blowup_time: float | None = None
    blowup_time_error: float | None = None
    ratios: np.ndarray | None = field(default=None, repr=False)

    def label(self) -> str:
        if self.kind == "rank":
            return f"rank {self.rank}"
        return self.kind


def classify_pair(S_mid: np.ndarray, S_end: np.ndarray, t_mid: float, t_end: float, tr0: float, *,
                  persist: float = 0.8, decay: float = 0.4, grow: float = 2.0,
                  floor: float = 1e-9) -> ClusteringResult:
    """Classify from ``Σ(t_mid)`` and ``Σ(t_end)`` (module docstring); no blow-up handling here."""
    S_end = 0.5 * (S_end + S_end.T)
    tr_end, tr_mid = float(np.trace(S_end)), float(np.trace(S_mid))
    if not np.isfinite(tr_end) or tr_end > grow * tr_mid:
        return ClusteringResult("diverge", Sigma_T=S_end, t=t_end)
    lam, U = np.linalg.eigh(S_end)
    before = np.einsum("ji,jk,ki->i", U, S_mid, U)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(before > 0, lam / before, 0.0)
    big = lam > floor * max(tr0, tr_end)
    keep = (ratio >= persist) & big
    r = int(keep.sum())
    slope = None
    dec = ~keep & (lam > 0) & (before > 0)
    if dec.any():
        slope = float(np.max(np.log(lam[dec] / before[dec])) / np.log(t_end / t_mid))
    if np.any(big & (ratio > decay) & (ratio < persist)):
        # a direction neither settled nor decaying at the O(1/t) rate: not asymptotic yet at this horizon
        return ClusteringResult("undetermined", None, None, S_end, t_end, slope, ratios=ratio)
    kind = "collapse" if r == 0 else "rank"
    return ClusteringResult(kind, r, U[:, keep], S_end, t_end, slope, ratios=ratio)


def classify(f: Callable, Sigma0, T: float = 1e4, *, alpha0=None, rtol: float = 1e-10, **kw) -> ClusteringResult:
    """Classify the trajectory of ``y' = f(t, y)`` (Gaussian layout) from ``N(alpha0, Sigma0)`` at horizon ``T``.

    ``alpha0`` defaults to 0: for softmax, ℓ2, multi-head and Sinkhorn heads ``dΣ/dt`` does not involve ``α``
    and ``α = 0`` is invariant without an FFN bias, so the mean (which grows like ``e^{tV}``) cannot overflow
    a long run.  Pass it for linear attention, whose covariance depends on the mean.
    """
    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    size = gaussian_size(d)
    y0 = _pack(np.zeros(d) if alpha0 is None else np.asarray(alpha0, float), Sigma0)
    t_mid = T / 10
    kw_b = dict(rtol=rtol, overflow=OVERFLOW, max_nfev=200_000)
    r1 = integrate_blowup(f, y0, t_mid, size, **kw_b)
    res = r1
    if r1.status == "ok":   # the second leg restarts the levels; its overflow keeps the total growth at OVERFLOW
        kw_b["overflow"] = max(OVERFLOW * size[0](y0) / size[0](r1.y), DEFAULT_LEVELS[-1])
        r2 = integrate_blowup(f, r1.y, T, size, t0=t_mid, **kw_b)
        res = r2
    if res.status == "blowup":
        return ClusteringResult("blowup", Sigma_T=_unpack(res.y, d)[1], t=res.t, blowup_time=res.blowup_time,
                                blowup_time_error=res.blowup_time_error)
    if res.status in ("overflow", "stalled"):
        S_T = _unpack(res.y, d)[1]
        kind = "diverge" if np.trace(S_T) > 10 * np.trace(Sigma0) else "undetermined"
        return ClusteringResult(kind, Sigma_T=S_T, t=res.t)
    return classify_pair(_unpack(r1.y, d)[1], _unpack(res.y, d)[1], t_mid, T, float(np.trace(Sigma0)), **kw)


# ------------------------------------------------------------------------------ identities along trajectories
def _augmented(f: Callable, d: int, integrand: Callable) -> Callable:
    def g(t, z):
        y = z[:-1]
        _, S = _unpack(y, d)
        return np.concatenate([f(t, y), [integrand(S)]])

    return g


def volume_identity(f: Callable, alpha0, Sigma0, A, V, T: float, rtol: float = 1e-11) -> tuple[float, float]:
    """``(log det Σ(T) - log det Σ₀, ∫₀ᵀ tr(Σ(AV + VᵀAᵀ)) dt)`` along the trajectory of ``f`` (softmax)."""
    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    M = A @ V + V.T @ A.T
    g = _augmented(f, d, lambda S: float(np.sum(S * M.T)))
    z0 = np.concatenate([_pack(np.asarray(alpha0, float), Sigma0), [0.0]])
    sol = integrate(g, z0, (0, T), method="DOP853", rtol=rtol, atol=1e-14)
    _, ST = _unpack(sol.y_end[:-1], d)
    lhs = np.linalg.slogdet(ST)[1] - np.linalg.slogdet(Sigma0)[1]
    return float(lhs), float(sol.y_end[-1])


def lyapunov_identity(f: Callable, alpha0, Sigma0, A, V, T: float, rtol: float = 1e-11,
                      n_samples: int = 50) -> tuple[float, float, float]:
    """``(tr(V⁻¹Σ(T)) - tr(V⁻¹Σ₀), ∫₀ᵀ tr(Σ(A+Aᵀ)Σ) dt, max increase between samples)`` for SPD ``V``.

    The last value is ``max_k [L(t_{k+1}) - L(t_k)]`` over ``n_samples`` times, ``L = tr(V⁻¹Σ)``: ``≤ 0`` up to
    round-off when ``A + Aᵀ ⪯ 0``.
    """
    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    S = A + A.T
    Vi = np.linalg.inv(V)
    g = _augmented(f, d, lambda Sig: float(np.trace(Sig @ S @ Sig)))
    z0 = np.concatenate([_pack(np.asarray(alpha0, float), Sigma0), [0.0]])
    ts = np.linspace(0, T, n_samples)
    sol = integrate(g, z0, (0, T), method="DOP853", rtol=rtol, atol=1e-14, t_eval=ts)
    L = np.array([np.trace(Vi @ _unpack(sol.y[k, :-1], d)[1]) for k in range(len(ts))])
    return float(L[-1] - L[0]), float(sol.y_end[-1]), float(np.max(np.diff(L)))


def growth_bound_ratio(f: Callable, alpha0, Sigma0, rate: float, T: float, n_samples: int = 60,
                       rtol: float = 1e-10) -> float:
    """``max_t ‖Σ(t)‖₂ / (‖Σ₀‖₂ e^{rate·t})`` over ``n_samples`` times in ``[0, T]`` (≤ 1 if the bound holds)."""
    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    ts = np.linspace(0, T, n_samples)
    sol = integrate(f, _pack(np.asarray(alpha0, float), Sigma0), (0, T), method="DOP853", rtol=rtol,
                    atol=1e-14, t_eval=ts)
    if sol.status != Status.OK:
        return float("inf")
    n0 = np.linalg.norm(Sigma0, 2)
    return float(max(np.linalg.norm(_unpack(sol.y[k], d)[1], 2) / (n0 * np.exp(rate * t))
                     for k, t in enumerate(sol.t)))


def l2_growth_rate(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> float:
    """Exponent ``2‖V‖‖K⁻¹Q‖`` of the ℓ2 growth bound (square invertible ``K``; module docstring)."""
    return 2.0 * np.linalg.norm(V, 2) * np.linalg.norm(np.linalg.solve(K, Q), 2)


def rate_slope(ts: np.ndarray, Sigmas: np.ndarray, Sigma_star: np.ndarray) -> float:
    """Least-squares slope of ``log ‖Σ(t) - Σ*‖_F`` against ``log t`` (``-1`` for the ``O(1/t)`` rate)."""
    e = np.linalg.norm(np.asarray(Sigmas) - Sigma_star, axis=(1, 2))
    return float(np.polyfit(np.log(ts), np.log(e), 1)[0])


# ------------------------------------------------------------------------- covariance-only flow, linearisation
def covariance_closed(ode) -> bool:
    """Whether ``dΣ/dt`` does not involve ``α`` for this :class:`~symbolic_tpde.gaussian.GaussianODE`.

    Decided from the derived system: no ``Σ`` row of ``ode.system.rhs`` has an ``α`` state among its free
    symbols (README Mathematics §3: softmax, ℓ2, multi-head, Sinkhorn and affine FFN terms give ``J`` independent
    of ``α``; linear attention's ``J = V(Σ + ααᵀ)A`` does not).  Heads evaluated by the numeric matrix closed form
    (Sinkhorn at ``d >= 3``, no entrywise system) are probed instead: ``dΣ/dt`` at three random means with the
    same ``Σ`` must agree to ``1e-12`` relative (the closed form is evaluated by the same float operations
    whatever ``α``, so a genuine dependence shows at ``O(1)``)."""
    d = ode.d
    sys = ode.system
    if sys is not None:
        alpha = set(sys.states[:d])
        if any(e.free_symbols & alpha for e in sys.rhs[d:]):
            return False
        if ode.backend != "numeric-matrix":
            return True
    rng = np.random.default_rng(0)
    G = rng.normal(size=(d, d))
    S = G @ G.T / d + np.eye(d)
    outs = [ode.rhs(0.0, _pack(rng.normal(size=d), S))[d:] for _ in range(3)]
    scale = max(1.0, float(np.abs(outs[0]).max()))
    return all(np.abs(o - outs[0]).max() <= 1e-12 * scale for o in outs[1:])


def covariance_rhs(ode, T: float) -> Callable:
    """``f(t, y)`` on the full Gaussian layout with ``α`` frozen at 0 (``dα/dt := 0``) and ``dΣ/dt`` the
    model's own.  Valid only when :func:`covariance_closed` holds: then ``Σ(t)`` is exactly the covariance of
    the full system from any ``α₀`` (its equation does not see ``α``), while the mean, which may grow like
    ``e^{t‖V‖}``, can no longer overflow a long run."""
    d = ode.d
    f = gaussian_rhs(ode, T)

    def g(t, y):
        z = np.array(y, dtype=float)
        z[:d] = 0.0
        out = np.array(f(t, z), dtype=float)
        out[:d] = 0.0
        return out

    return g


def integrate_covariance(ode, Sigma0, T: float, *, rtol: float = 1e-12, t_eval=None, method: str = "DOP853",
                         max_seconds=None):
    """The covariance equation alone (``α ≡ 0`` in the layout), on the package's one integrator with the
    Gaussian size monitor, the layer breakpoints and the tilt-existence conditions (as
    :func:`symbolic_tpde.gaussian.integrate.integrate_gaussian`; ``max_seconds`` its wall-clock cap).  Returns the
    :class:`~symbolic_tpde.numerics.solve.Solution`, its status as the Gaussian layer reports it.  Refuses
    (:class:`InputError`) when ``dΣ/dt`` involves ``α``."""
    from ..errors import InputError

    if not covariance_closed(ode):
        raise InputError("covariance-only", "the derived covariance equation involves the mean alpha "
                         "(e.g. linear attention): integrate the full system")
    y0 = _pack(np.zeros(ode.d), np.asarray(Sigma0, float))
    return integrate_moments(ode, covariance_rhs(ode, T), y0, T, freeze_alpha=True, method=method, rtol=rtol,
                             t_eval=t_eval, max_seconds=max_seconds)


def linearised_covariance_flow(ode, Sigma_star, t: float = 0.0, alpha=None) -> tuple[np.ndarray, np.ndarray]:
    """Jacobian of ``Σ ↦ dΣ/dt`` at ``Σ*`` in the packed coordinates (upper triangle of ``Σ``) and its
    eigenvalues, sorted by real part (largest first).

    The packed coordinates are a basis of the symmetric matrices, so the eigenvalues are those of the linear
    operator ``δΣ ↦ D(dΣ/dt)[δΣ]`` on ``Sym(d)``.  Uses ``ode.jac`` (the generated symbolic Jacobian; central
    differences on the numeric-matrix path).  Example (README Mathematics §4): softmax with ``V = I``,
    ``dΣ/dt = Σ(A + Aᵀ)Σ``; at a limit ``Σ* = U(UᵀΣ₀⁻¹U)⁻¹Uᵀ`` with ``(A + Aᵀ)U = 0`` the operator
    ``δ ↦ δ(A + Aᵀ)Σ* + Σ*(A + Aᵀ)δ`` is zero: the limit is not hyperbolic, which is why the approach is
    algebraic (``O(1/t)``) rather than exponential."""
    S = 0.5 * (np.asarray(Sigma_star, float) + np.asarray(Sigma_star, float).T)
    d = S.shape[0]
    y = _pack(np.zeros(d) if alpha is None else np.asarray(alpha, float), S)
    Jf = np.asarray(ode.jac(t, y), float)[d:, d:]
    ev = np.linalg.eigvals(Jf)
    return Jf, ev[np.argsort(-ev.real, kind="stable")]
