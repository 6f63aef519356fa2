"""What is *known* about the long-time covariance dynamics of a set of weights, each fact with its hypotheses.

The one classifier (:mod:`.verdict`) asks this module first and the numerics second.  The theorems themselves
(statement, hypotheses, proof in brief, source) are stated once, in :data:`symbolic_tpde.registry.theorems.
THEOREMS` (``riccati``, ``lyapunov``, ``growth``), which the derivation documents also print; this module checks
their hypotheses on *numeric* weights and instantiates them (``T*``, ``Σ*``, the growth rate ``L``).  A fact
applies only when its hypotheses are checked on the given weights (the check and its margin are part of the
fact).  Numeric conventions of the checks:

* ``riccati``: ``ker S`` (``S = Σ_h c_h(A_h + A_hᵀ)``) is read with the tolerance ``|λ| ≤ KERNEL_RTOL·‖S‖``;
  every ``Σ`` with range in ``ker S`` is an equilibrium, so the limits form a continuum and none is hyperbolic.
* ``growth``: ``L = Σ_h L_h`` with ``L_h = ‖V‖ cond(K) ‖K⁺Q‖`` (ℓ2; the bound ``‖V‖‖K⁻¹Q‖`` without ``cond(K)``
  is false when ``K`` is not a multiple of an orthogonal matrix), ``‖V‖`` (Sinkhorn), ``‖V‖‖B‖/λ_min(-R - Rᵀ)``
  (custom), plus ``‖W‖`` for a feed-forward term; with layers, the largest ``L`` over the layers.  Heads of
  other kinds void the fact.
* ``lyapunov``: one softmax head, ``V`` symmetric positive definite, ``A + Aᵀ ⪯ 0`` (checked with the same
  relative tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Fact", "Facts", "facts_for", "KERNEL_RTOL"]

#: eigenvalues of ``S`` with ``|λ| ≤ KERNEL_RTOL·‖S‖₂`` count as zero (``S`` is formed from the user's entries
#: by a few additions: its round-off is a few ulps of ``‖S‖``; 1e-12 leaves a factor ~1e3 of room).
KERNEL_RTOL = 1e-12


@dataclass(frozen=True)
class Fact:
    """One theorem that applies: ``name``, the statement, the hypotheses as checked (with margins), its
    source, and the numbers it gives."""

    name: str
    statement: str
    hypotheses: tuple[str, ...]
    source: str
    values: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Facts:
    """The facts that apply to a schedule: ``riccati`` (the closed form), ``growth`` (no blow-up, a growth
    rate), ``lyapunov`` (no blow-up, a rank bound); ``None`` where a fact does not apply, with the reason in
    ``why_not``."""

    riccati: Fact | None = None
    growth: Fact | None = None
    lyapunov: Fact | None = None
    why_not: dict = field(default_factory=dict)

    @property
    def no_blowup(self) -> Fact | None:
        """The fact that excludes a finite-time blow-up, if one applies."""
        if self.growth is not None:
            return self.growth
        if self.lyapunov is not None:
            return self.lyapunov
        r = self.riccati
        if r is not None and not np.isfinite(r.values["T_star"]):
            return r
        return None

    def as_list(self) -> list[Fact]:
        return [f for f in (self.riccati, self.growth, self.lyapunov) if f is not None]


def _scalar_identity(V: np.ndarray) -> float | None:
    """``c`` if ``V = cI`` exactly (entries as given), else ``None``."""
    c = float(V[0, 0])
    return c if np.array_equal(V, c * np.eye(V.shape[0])) else None


def _head_growth(h) -> tuple[float | None, str]:
    """``(L_h, hypothesis text)`` for a head covered by the ``growth`` fact, ``(None, why not)`` otherwise."""
    e = h.effective
    if h.kind == "sinkhorn":
        L = float(np.linalg.norm(e["V"], 2))
        return L, f"Sinkhorn head: L = ‖V‖ = {L:.6g}"
    if h.kind == "l2":
        K, Q, V = (np.asarray(e[k], float) for k in ("K", "Q", "V"))
        s = np.linalg.svd(K, compute_uv=False)
        d = K.shape[1]
        if K.shape[0] < d or s.min() <= 1e3 * np.finfo(float).eps * s.max() * max(K.shape):
            return None, f"ℓ2 head with K of rank < d = {d} (no theorem)"
        condK = float(s.max() / s.min())
        L = float(np.linalg.norm(V, 2) * condK * np.linalg.norm(np.linalg.pinv(K) @ Q, 2))
        return L, (f"ℓ2 head, K ({K.shape[0]}×{d}) of full column rank, cond(K) = {condK:.6g}: "
                   f"L = ‖V‖ cond(K) ‖K⁺Q‖ = {L:.6g}")
    if h.kind == "custom":
        B, R, V = (np.asarray(e[k], float) for k in ("B", "R", "V"))
        lam = np.linalg.eigvalsh(-(R + R.T))
        if lam.min() <= 0:
            return None, "custom head with R + Rᵀ not negative definite (no growth theorem)"
        L = float(np.linalg.norm(V, 2) * np.linalg.norm(B, 2) / lam.min())
        return L, (f"custom head, -(R + Rᵀ) ≻ 0 (λ_min = {lam.min():.6g}): (Σ⁻¹ - R - Rᵀ)⁻¹ ⪯ (-(R + Rᵀ))⁻¹, "
                   f"L = ‖V‖‖B‖/λ_min = {L:.6g}")
    return None, f"{h.kind} head (no growth theorem)"


def _growth_fact(layers) -> tuple[Fact | None, str]:
    Ls, hyps = [], []
    for w in layers:
        if w.sink is not None:
            return None, "an attention sink (no growth theorem)"
        L = 0.0
        for i, h in enumerate(w.heads):
            Lh, text = _head_growth(h)
            if Lh is None:
                return None, text
            L += Lh
            hyps.append(f"head {i + 1}: {text}")
        if w.ffn is not None:
            Lf = float(np.linalg.norm(w.ffn.W, 2))
            L += Lf
            hyps.append(f"feed-forward term: L = ‖W‖ = {Lf:.6g}")
        Ls.append(L)
    L = max(Ls)
    return Fact("growth", f"no finite-time blow-up; ‖Σ(t)‖₂ ≤ ‖Σ₀‖₂·exp(2Lt) with L = {L:.6g}",
                tuple(dict.fromkeys(hyps)), "theorems.py (Grönwall on ‖Σ‖₂; ℓ2 factor cond(K); README §4)",
                {"L": L}), ""


def _riccati_fact(w, Sigma0: np.ndarray) -> tuple[Fact | None, str]:
    if w.ffn is not None or w.sink is not None:
        return None, "a feed-forward term or a sink (no closed form here)"
    S = np.zeros_like(Sigma0)
    A_eff = np.zeros_like(Sigma0)
    for i, h in enumerate(w.heads):
        if h.kind != "softmax":
            return None, f"head {i + 1} is {h.kind}, not softmax"
        V = np.asarray(h.effective["V"], float)
        if V.shape != Sigma0.shape:
            return None, f"head {i + 1}: V is not d×d"
        c = _scalar_identity(V)
        if c is None or c <= 0:
            return None, f"head {i + 1}: V is not a positive multiple of I"
        A = np.asarray(h.effective["A"], float)
        S += c * (A + A.T)
        A_eff += c * A
    from .closed_forms import blowup_time_vi, sigma_star_vi

    nS = float(np.linalg.norm(S, 2))
    lam, U = np.linalg.eigh(S)
    tol = KERNEL_RTOL * max(nS, 1e-300)
    T_star = blowup_time_vi(Sigma0, A_eff, use_polynomial=False) if lam.max() > tol else float("inf")
    values = {"S": S, "A_eff": A_eff, "T_star": T_star, "kernel_tol": tol, "S_eigenvalues": lam}
    if np.isfinite(T_star):
        statement = f"Σ(t) = (Σ₀⁻¹ - tS)⁻¹ blows up at T* = 1/λ_max(Σ₀^(1/2) S Σ₀^(1/2)) = {T_star:.15g}"
    else:
        S_star, Uk = sigma_star_vi(Sigma0, A_eff, rtol=KERNEL_RTOL)
        values.update(Sigma_star=S_star, kernel=Uk, rank=int(Uk.shape[1]))
        statement = (f"Σ(t) = (Σ₀⁻¹ - tS)⁻¹ → Σ* = U(UᵀΣ₀⁻¹U)⁻¹Uᵀ, rank {Uk.shape[1]} = dim ker S, at rate "
                     "O(1/t); the limits form a continuum of equilibria (none hyperbolic)")
    hyp = (f"softmax heads with V = cI (c > 0), S = Σ c(A + Aᵀ), ‖S‖ = {nS:.6g}; constant weights; no "
           f"feed-forward term; eigenvalues of S: {np.array2string(lam, precision=4)}, |λ| ≤ {tol:.2g} read as 0",)
    return Fact("riccati", statement, hyp, "closed_forms.vi_solution (symbolic check); README Mathematics §4",
                values), ""


def _lyapunov_fact(w) -> tuple[Fact | None, str]:
    if len(w.heads) != 1 or w.heads[0].kind != "softmax" or w.ffn is not None or w.sink is not None:
        return None, "not a single softmax head without feed-forward term"
    A = np.asarray(w.heads[0].effective["A"], float)
    V = np.asarray(w.heads[0].effective["V"], float)
    if V.shape != A.shape or not np.array_equal(V, V.T):
        return None, "V is not symmetric"
    lv = np.linalg.eigvalsh(V)
    S = A + A.T
    ls = np.linalg.eigvalsh(S)
    tol = KERNEL_RTOL * max(float(np.abs(ls).max()), 1e-300)
    if lv.min() <= 0 or ls.max() > tol:
        return None, "V not positive definite or A + Aᵀ not negative semidefinite"
    k = int(np.sum(np.abs(ls) <= tol))
    return Fact("lyapunov", f"no finite-time blow-up; tr(V⁻¹Σ(t)) non-increasing; rank Σ* ≤ dim ker(A + Aᵀ) = {k}",
                (f"one softmax head, V SPD (λ_min(V) = {lv.min():.6g}), A + Aᵀ ⪯ 0 (λ_max = {ls.max():.3g})",),
                "README Mathematics §4", {"rank_bound": k}), ""


def facts_for(schedule, Sigma0, T: float | None = None) -> Facts:
    """The facts that apply to ``schedule`` (a :class:`~symbolic_tpde.weights.Schedule` or
    :class:`~symbolic_tpde.weights.Weights`) from ``N(·, Sigma0)``.  Callable schedules get none (nothing can
    be checked for every ``t``); layered ones only ``growth`` (the closed forms need constant weights)."""
    from ..weights import Schedule, Weights

    if isinstance(schedule, Weights):
        schedule = Schedule.constant(schedule)
    Sigma0 = np.asarray(Sigma0, float)
    why: dict = {}
    if schedule.func is not None:
        why["all"] = "weights given as a callable of t: no hypothesis can be checked for every t"
        return Facts(why_not=why)
    layers = list(schedule.weights)
    growth, why["growth"] = _growth_fact(layers)
    riccati = lyap = None
    if schedule.is_constant:
        riccati, why["riccati"] = _riccati_fact(layers[0], Sigma0)
        lyap, why["lyapunov"] = _lyapunov_fact(layers[0])
    else:
        why["riccati"] = why["lyapunov"] = "weights change between layers"
    return Facts(riccati, growth, lyap, {k: v for k, v in why.items() if v})
