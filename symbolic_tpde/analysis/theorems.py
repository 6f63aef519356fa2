"""What is *known* about the long-time covariance dynamics of a set of weights, each fact with its hypotheses.

The one classifier (:mod:`.verdict`) asks this module first and the numerics second.  The theorems themselves
(statement, hypotheses, proof in brief, source) are stated once, in :data:`symbolic_tpde.registry.theorems.
THEOREMS` (``riccati``, ``lyapunov``, ``growth``), which the derivation documents also print; this module checks
their hypotheses on *numeric* weights and instantiates them (``T*``, ``Σ*``, the growth rate ``L``).  A fact
applies only when its hypotheses are checked on the given weights (the check and its margin are part of the
fact).  Numeric conventions of the checks:

Every hypothesis is a predicate on the heads' registry entries and their quadratic forms
(:func:`.closed_forms.head_form`, ``log k = xᵀBy + yᵀRy + rᵀy + …``), never on kind names:

* ``riccati``: every head normalised with a form whose ``R`` is 0 on the given weights (softmax ``B = Aᵀ``, a
  key-biased softmax, a custom head with ``R = 0``) and ``V = cI``, ``c > 0``; ``ker S``
  (``S = Σ_h c_h(B_h + B_hᵀ)``) is read with the tolerance ``|λ| ≤ KERNEL_RTOL·‖S‖``; every ``Σ`` with range in
  ``ker S`` is an equilibrium, so the limits form a continuum and none is hyperbolic.
* ``growth``: ``L = Σ_h L_h`` with ``L_h = ‖V‖`` for a self-coupling (Sinkhorn) and ``L_h = ‖V‖ min(‖B‖/λ_min(N),
  cond(N)^{1/2} ‖N⁻¹Bᵀ‖)`` for a normalised form with ``N = -(R + Rᵀ) ≻ 0`` (ℓ2: ``cond(N)^{1/2}‖N⁻¹Bᵀ‖ =
  cond(K)‖K⁺Q‖``; the bound ``‖V‖‖K⁻¹Q‖`` without ``cond(K)`` is false when ``K`` is not a multiple of an
  orthogonal matrix), plus ``‖W‖`` for a feed-forward term; with layers, the largest ``L`` over the layers.
  Heads of other kinds void the fact.
* ``lyapunov``: one normalised head with ``R = 0``, ``V`` symmetric positive definite, ``B + Bᵀ ⪯ 0`` (checked
  with the same relative tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..registry import kinds
from .closed_forms import head_form

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
    """``(L_h, hypothesis text)`` for a head covered by the ``growth`` fact, ``(None, why not)`` otherwise.

    Decided on the kind's registry entry, never its name: a self-coupling (Sinkhorn) has ``L_h = ‖V‖``; a
    normalised quadratic form with ``N = -(R + Rᵀ) ≻ 0`` has ``‖J‖ ≤ L_h = ‖V‖ min(‖B‖/λ_min(N),
    κ(N)^{1/2} ‖N⁻¹Bᵀ‖)`` (both bounds proved in ``registry.theorems``; for ℓ2 the second is the former
    ``‖V‖ cond(K) ‖K⁺Q‖``)."""
    spec = kinds.get(h.kind)
    e = h.effective
    if spec.coupling and spec.preserves_gaussians:
        L = float(np.linalg.norm(e["V"], 2))
        return L, f"{h.kind} head (a self-coupling of μ): L = ‖V‖ = {L:.6g}"
    form = head_form(h)
    if form is None:
        return None, f"{h.kind} head (no growth theorem: neither a normalised quadratic form nor a coupling)"
    B, R, _ = form
    V = np.asarray(e["V"], float)
    N = -(R + R.T)
    lam = np.linalg.eigvalsh(N)
    if lam.max() <= 0 or lam.min() <= 1e3 * np.finfo(float).eps * lam.max() * N.shape[0]:
        return None, f"{h.kind} head with -(R + Rᵀ) not positive definite (no growth theorem)"
    nV = float(np.linalg.norm(V, 2))
    plain = nV * float(np.linalg.norm(B, 2)) / lam.min()
    cond = nV * float(np.sqrt(lam.max() / lam.min()) * np.linalg.norm(np.linalg.solve(N, B.T), 2))
    L = min(plain, cond)
    return L, (f"{h.kind} head, N = -(R + Rᵀ) ≻ 0 (λ_min = {lam.min():.6g}, cond(N)^(1/2) = "
               f"{np.sqrt(lam.max() / lam.min()):.6g}): L = ‖V‖ min(‖B‖/λ_min(N), cond(N)^(1/2) ‖N⁻¹Bᵀ‖) = {L:.6g}")


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


def _bilinear_head(h, i: int, d: int) -> tuple[tuple | None, str]:
    """``((B, r, V), "")`` for a head whose kind is normalised with a quadratic form and whose ``R`` is zero (on
    the given weights), ``V`` d×d; ``(None, why not)`` otherwise."""
    form = head_form(h)
    if form is None:
        return None, f"head {i + 1} ({h.kind}) has no normalised quadratic form (no closed form)"
    B, R, r = form
    if np.any(R):
        return None, f"head {i + 1} ({h.kind}) has a key-quadratic block R ≠ 0"
    V = np.asarray(h.effective["V"], float)
    if V.shape != (d, d):
        return None, f"head {i + 1}: V is not d×d"
    return (B, r, V), ""


def _riccati_fact(w, Sigma0: np.ndarray) -> tuple[Fact | None, str]:
    if w.ffn is not None or w.sink is not None:
        return None, "a feed-forward term or a sink (no closed form here)"
    S = np.zeros_like(Sigma0)
    A_eff = np.zeros_like(Sigma0)
    for i, h in enumerate(w.heads):
        got, why = _bilinear_head(h, i, Sigma0.shape[0])
        if got is None:
            return None, why
        B, _, V = got
        c = _scalar_identity(V)
        if c is None or c <= 0:
            return None, f"head {i + 1}: V is not a positive multiple of I"
        S += c * (B.T + B)
        A_eff += c * B.T
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
    hyp = (f"normalised heads with log k = xᵀBy + rᵀy (R = 0; softmax B = Aᵀ), V = cI (c > 0), S = Σ c(B + Bᵀ), "
           f"‖S‖ = {nS:.6g}; constant weights; no feed-forward term; eigenvalues of S: "
           f"{np.array2string(lam, precision=4)}, |λ| ≤ {tol:.2g} read as 0",)
    return Fact("riccati", statement, hyp, "closed_forms.vi_solution (symbolic check); README Mathematics §4",
                values), ""


def _lyapunov_fact(w) -> tuple[Fact | None, str]:
    if len(w.heads) != 1 or w.ffn is not None or w.sink is not None:
        return None, "not a single head without feed-forward term"
    d = w.d
    got, why = _bilinear_head(w.heads[0], 0, d)
    if got is None:
        return None, why
    B, _, V = got
    if not np.array_equal(V, V.T):
        return None, "V is not symmetric"
    lv = np.linalg.eigvalsh(V)
    S = B.T + B
    ls = np.linalg.eigvalsh(S)
    tol = KERNEL_RTOL * max(float(np.abs(ls).max()), 1e-300)
    if lv.min() <= 0 or ls.max() > tol:
        return None, "V not positive definite or B + Bᵀ not negative semidefinite"
    k = int(np.sum(np.abs(ls) <= tol))
    return Fact("lyapunov", f"no finite-time blow-up; tr(V⁻¹Σ(t)) non-increasing; rank Σ* ≤ dim ker(B + Bᵀ) = {k}",
                (f"one normalised head with log k = xᵀBy + rᵀy (R = 0; softmax B = Aᵀ), V SPD (λ_min(V) = "
                 f"{lv.min():.6g}), B + Bᵀ ⪯ 0 (λ_max = {ls.max():.3g})",),
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
