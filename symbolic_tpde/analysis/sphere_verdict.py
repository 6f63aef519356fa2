"""Long-time verdicts for tokens on the sphere: theorems first, numerics second, evidence attached.

The sphere branch of the one classifier (:func:`symbolic_tpde.analysis.verdict.classify_long_time` dispatches
here on the scenario's geometry; ``tpde classify`` and ``tpde sweep`` call that function).  The question is
"what do the tokens ``θ_i(t)`` do as ``t → ∞``?" for one initial configuration ``X0`` (drawn from the
scenario's ``init`` law).  The vocabulary is that of :mod:`.verdict`: ``source`` is ``"theorem"`` or
``"numerical"``, a theorem's verdict names the theorem and its hypotheses as checked, a numerical one says
"numerical", its horizon and what was measured.

1. **Theorems** (:func:`sphere_facts`; each hypothesis is checked on the weights, the normalisation and the
   initial tokens; those that fail are reported in the evidence with the reason).  All are for Post-LN
   (``θ̇_i = P⊥_{θ_i} A_i``), one head, ``V = vI`` with ``v > 0`` (a time change); ``β_eff = cβ`` when
   ``A = cI``:

   * ``hemisphere`` (Geshkovski-Letrouit-Polyanskiy-Rigollet, arXiv 2312.10794; survey arXiv 2512.01868):
     SA or USA, ``A = cI``, ``β_eff >= 0``, the initial tokens in an open hemisphere (certified by a linear
     program: a unit ``w`` with ``min_i <w, θ_i>`` above its round-off bound) ⇒ one cluster, exponentially;
   * ``almost-every-d>=3`` (Markdahl-Thunberg-Goncalves 2018; Criscitiello-Rebjock-McRae-Boumal, arXiv
     2405.18273): SA or USA, ``A = cI``, ``β_eff >= 0``, ``d >= 3``, tokens drawn i.i.d. from an ``init`` law
     with a density (so the draw avoids the null set of exceptions almost surely) ⇒ one cluster;
   * ``circle-usa`` (Polyanskiy-Rigollet-Yao, arXiv 2507.22857): USA, ``d = 2``, ``A = cI``,
     ``β_eff >= -0.16``, i.i.d. draws with a density ⇒ one cluster almost surely;
   * ``causal`` (Karagodin-Polyanskiy-Rigollet, arXiv 2411.04990, Theorem 4.1): the causal mask, ``V = vI``,
     any ``A`` and ``β``, i.i.d. draws with a density ⇒ every token converges to the first one.

2. **The exact equiangular reduction** (when every ``<θ_i, θ_j>`` (``i ≠ j``) equals one ``ρ₀`` to 1e-12, every
   radius is equal, one SA or USA head with ``A = cI``, ``V = vI``, any ``norm``): the closed ODE for ``ρ`` (and
   ``r``) derived by :mod:`symbolic_tpde.symbolic.sphere_reductions` from the particle system, integrated by
   scipy (DOP853, rtol 1e-12) to ``T``.  An initial ``ρ₀`` within 1e-12 of a rational at which the derived
   ``ρ̇`` vanishes *exactly* (SymPy; e.g. antipodal tokens ``ρ₀ = -1``, the regular simplex ``-1/(n-1)``) is an
   equilibrium: the tokens do not move.  Labelled "numerical (derived equiangular reduction)".

3. **Particles** (:func:`symbolic_tpde.numerics.particles.sphere.simulate_sphere` to ``T``, 201 frames): the cluster count
   by the rule of :mod:`.sphere_clusters` (``<θ_i, θ_j> >= 1 - δ``) over time, the time from which the cloud is
   one cluster, ``min_ij <θ_i, θ_j>`` at ``T``, and the slopes of ``log(1 - min <θ_i, θ_j>)`` against ``t`` and
   ``log t`` on the frames of ``[T/2, T]`` above round-off (exponential vs polynomial approach: measured, not
   claimed).  Several clusters at ``T`` are reported as such, never as the limit: metastable plateaus last for
   times growing like ``e^{cβ}`` (Geshkovski-Koubbi-Polyanskiy-Rigollet, arXiv 2410.06833).

Outcomes: ``"one-cluster"``, ``"clusters"`` (k > 1 at ``T``), ``"equilibrium"``, ``"blowup"`` (the state left
the floats or a step collapsed, with its time, e.g. Peri-LN where ``A_i = 0``), ``"undetermined"`` (the
wall-clock cap stopped the run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import math
from functools import lru_cache

import numpy as np

from .sphere_clusters import DELTA, cluster_counts, step_budget
from .theorems import Fact

__all__ = ["SphereVerdict", "classify_sphere", "sphere_facts", "hemisphere_margin", "equiangular_curve"]

#: pairwise inner products (and radii, relatively) equal to this count as an equiangular configuration
EQUIANGULAR_TOL = 1e-12
#: the threshold β of Polyanskiy-Rigollet-Yao above which USA on the circle synchronises
CIRCLE_BETA_MIN = -0.16
FRAMES = 201


@dataclass
class SphereVerdict:
    outcome: str
    label: str
    source: str                                   # "theorem" | "numerical"
    horizon: float
    clusters: int | None = None                   # the limit (theorem) or the count at t (numerical)
    t: float | None = None
    time_to_one_cluster: float | None = None
    min_inner: float | None = None
    rate: dict | None = None
    evidence: list = field(default_factory=list)
    facts: list = field(default_factory=list)
    geometry: str = "sphere"

    def as_dict(self) -> dict:
        return {"geometry": self.geometry, "outcome": self.outcome, "label": self.label, "source": self.source,
                "horizon": self.horizon, "clusters": self.clusters, "t": self.t,
                "time_to_one_cluster": self.time_to_one_cluster, "min_inner": self.min_inner, "rate": self.rate,
                "evidence": list(self.evidence),
                "facts": [{"name": f.name, "statement": f.statement, "hypotheses": list(f.hypotheses),
                           "source": f.source} for f in self.facts]}


# ------------------------------------------------------------------------------------------------ hypotheses
def _scalar(M) -> float | None:
    """``c`` if ``M = cI`` exactly, else ``None``."""
    M = np.asarray(M, float)
    c = float(M[0, 0])
    return c if np.array_equal(M, c * np.eye(len(M))) else None


def hemisphere_margin(theta) -> tuple[float, np.ndarray]:
    """``(m, w)``: a unit ``w`` maximising ``min_i <w, θ_i>`` over ``|w_k| <= 1`` (linear program, HiGHS), and
    ``m = min_i <w, θ_i>/|w|`` recomputed in float64.  ``m > 0`` certifies an open hemisphere when it exceeds
    the round-off of the recomputation (``hemisphere_roundoff``)."""
    from scipy.optimize import linprog

    th = np.asarray(theta, float)
    n, d = th.shape
    # variables (w, s): maximise s subject to s - <w, θ_i> <= 0, -1 <= w_k <= 1, s <= 1
    c = np.zeros(d + 1)
    c[-1] = -1.0
    A = np.hstack([-th, np.ones((n, 1))])
    res = linprog(c, A_ub=A, b_ub=np.zeros(n), bounds=[(-1, 1)] * d + [(None, 1)], method="highs")
    w = res.x[:d] if res.status == 0 else np.zeros(d)
    nw = np.linalg.norm(w)
    if nw == 0:
        return 0.0, w
    w = w / nw
    return float(np.min(th @ w)), w


def hemisphere_roundoff(d: int) -> float:
    """Bound on the float64 error of ``<w, θ_i>`` for unit vectors (``d`` products and sums): ``2 d ε``."""
    return 2 * d * np.finfo(float).eps


def _iid_density(init) -> str | None:
    """``None`` when the initial tokens are i.i.d. draws of a law with a density (else the reason)."""
    from ..numerics.measures.laws import INIT_TYPES

    if init is None:
        return "the initial tokens were given, not drawn from an init law"
    t = INIT_TYPES.get(init.type)
    if t is None or t.density is None:
        return f"init type {init.type!r} has no density (the tokens may lie in the exceptional null set)"
    return None


def sphere_facts(weights, norm: str, X0, init=None) -> tuple[list[Fact], dict]:
    """The theorems of the module docstring that apply (``Fact``s, hypotheses as checked) and, for the others,
    the first hypothesis that fails (``why_not``)."""
    th = np.asarray(X0, float)
    th = th / np.linalg.norm(th, axis=1, keepdims=True)
    n, d = th.shape
    heads = weights.heads
    why: dict = {}
    base: list[str] = []
    if norm != "post":
        reason = f"norm is {norm!r}: the theorems are proved for Post-LN (θ̇ = P⊥A)"
    elif len(heads) != 1:
        reason = f"{len(heads)} heads: the theorems are for one head"
    else:
        reason = None
    h = heads[0]
    v = _scalar(h.effective["V"])
    if reason is None and not (v is not None and v > 0):
        reason = "V is not a positive multiple of the identity"
    names = ("hemisphere", "almost-every-d>=3", "circle-usa", "causal")
    if reason is not None:
        return [], {k: reason for k in names}
    base = [f"Post-LN; one head of kind {h.kind}", f"V = {v:g}·I, {v:g} > 0 (a change of time)"]
    c = _scalar(h.effective["A"])
    beta = float(h.params["beta"])
    b_eff = None if c is None else c * beta
    iid = _iid_density(init)
    facts: list[Fact] = []
    if h.kind == "sphere_causal":
        for k in names[:3]:
            why[k] = "the causal mask (these theorems are for full attention)"
        if iid is None:
            facts.append(Fact("causal", "every token converges to the first token as t → ∞ (almost every "
                              "initial condition; the draw is one almost surely)",
                              tuple(base + ["causal mask j <= i", "any A and β",
                                            f"tokens i.i.d. from {init.type!r}, a law with a density"]),
                              "Karagodin-Polyanskiy-Rigollet, arXiv 2411.04990, Theorem 4.1", {"clusters": 1}))
        else:
            why["causal"] = iid
        return facts, why
    why["causal"] = f"kind {h.kind} is not the causal mask"
    if b_eff is None:
        for k in names[:3]:
            why[k] = "A is not a multiple of the identity (Q^T K = cI)"
        return facts, why
    aa = base + [f"A = {c:g}·I: β_eff = cβ = {b_eff:g}"]
    m, w = hemisphere_margin(th)
    eps = hemisphere_roundoff(d)
    if b_eff < 0:
        why["hemisphere"] = why["almost-every-d>=3"] = f"β_eff = {b_eff:g} < 0"
    else:
        if m > eps:
            facts.append(Fact("hemisphere", "the tokens converge to one point, exponentially fast",
                              tuple(aa + [f"β_eff = {b_eff:g} >= 0", f"open hemisphere: min_i <w, θ_i> = {m:.3g} "
                                          f"> round-off bound {eps:.2g} for the unit w of a linear program"]),
                              "Geshkovski-Letrouit-Polyanskiy-Rigollet, arXiv 2312.10794 (survey arXiv 2512.01868)",
                              {"clusters": 1, "w": w, "margin": m}))
        else:
            why["hemisphere"] = (f"the tokens are not certified in an open hemisphere (best min_i <w, θ_i> = "
                                 f"{m:.3g}, round-off bound {eps:.2g})")
        if d < 3:
            why["almost-every-d>=3"] = f"d = {d} < 3"
        elif iid is not None:
            why["almost-every-d>=3"] = iid
        else:
            facts.append(Fact("almost-every-d>=3", "for almost every initial condition the tokens converge to "
                              "one point (the draw is such a condition almost surely)",
                              tuple(aa + [f"β_eff = {b_eff:g} >= 0", f"d = {d} >= 3",
                                          f"tokens i.i.d. from {init.type!r}, a law with a density"]),
                              "Markdahl-Thunberg-Goncalves 2018; Criscitiello-Rebjock-McRae-Boumal, arXiv 2405.18273",
                              {"clusters": 1}))
    if h.kind != "sphere_usa" or d != 2:
        why["circle-usa"] = "the theorem is for USA on the circle (d = 2)"
    elif b_eff < CIRCLE_BETA_MIN:
        why["circle-usa"] = f"β_eff = {b_eff:g} < {CIRCLE_BETA_MIN}"
    elif iid is not None:
        why["circle-usa"] = iid
    else:
        facts.append(Fact("circle-usa", "the tokens synchronise (converge to one point) for almost every initial "
                          "condition (the draw is one almost surely)",
                          tuple(aa + [f"USA, d = 2, β_eff = {b_eff:g} >= {CIRCLE_BETA_MIN}",
                                      f"tokens i.i.d. from {init.type!r}, a law with a density"]),
                          "Polyanskiy-Rigollet-Yao, arXiv 2507.22857", {"clusters": 1}))
    return facts, why


# --------------------------------------------------------------------------------- equiangular reduction
@lru_cache(maxsize=None)
def _reduction(norm: str, normaliser: str):
    """The derived equiangular reduction and its numerical right-hand side ``(ρ, r; n, β, α) -> (ρ̇, ṙ)``."""
    import sympy as sp

    from ..symbolic import sphere_reductions as R

    red = R.equiangular(R.MODELS[norm](normaliser))
    args = (R.rho, R.r, R.n, R.beta, R.alpha)
    f_rho = _wide(sp.lambdify(args, red.rhs["rho"], "math"), sp.lambdify(args, red.rhs["rho"], "mpmath"))
    f_r = _wide(sp.lambdify(args, red.rhs["r"], "math"), sp.lambdify(args, red.rhs["r"], "mpmath")) \
        if "r" in red.rhs else None
    return red, f_rho, f_r


def _wide(fast, wide):
    """``fast`` (float64), falling back to ``wide`` (mpmath, unbounded exponent) where an ``exp(β ρ)`` of the
    derived expression overflows float64 (β above ~709) although the ratio it sits in is finite (softmax);
    a value that is itself beyond float64 comes back as ``±inf`` (the integrator reports it)."""
    def f(*a):
        try:
            return fast(*a)
        except (OverflowError, ZeroDivisionError):
            import mpmath

            with mpmath.workdps(30):
                v = wide(*a)
            return float(v) if abs(v) < 1.7e308 else math.copysign(math.inf, float(mpmath.sign(v)))
    return f


def _equiangular_state(weights, X, norm):
    """``(ρ₀, r₀, β_eff, v)`` when the configuration and the weights fit the equiangular reduction, else the
    reason (a string)."""
    if len(weights.heads) != 1 or weights.heads[0].kind not in ("sphere_sa", "sphere_usa"):
        return "the reduction is derived for one SA or USA head"
    h = weights.heads[0]
    c, v = _scalar(h.effective["A"]), _scalar(h.effective["V"])
    if c is None or v is None or v <= 0:
        return "the reduction is derived for A = cI and V = vI, v > 0"
    X = np.asarray(X, float)
    rad = np.linalg.norm(X, axis=1)
    th = X / rad[:, None]
    n = len(th)
    if n < 2:
        return "one token"
    G = th @ th.T
    off = G[~np.eye(n, dtype=bool)]
    if np.ptp(off) > EQUIANGULAR_TOL or np.ptp(rad) > EQUIANGULAR_TOL * rad.max():
        return (f"not equiangular: the pairwise <θ_i, θ_j> spread over {np.ptp(off):.2g} (> {EQUIANGULAR_TOL:g})"
                if np.ptp(off) > EQUIANGULAR_TOL else "the radii differ")
    r0 = 1.0 if norm in ("post", "ngpt") else float(rad.mean())
    return float(off.mean()), r0, c * float(h.params["beta"]), v


#: right-hand-side evaluations of one integration of the equiangular ODE (2 unknowns): a resolved run takes tens
#: to hundreds (measured <= 600 at |β| <= 50, T = 2); at β = -800 (n = 2) every method stalls near ρ ≈ 0.91
#: and the former limit of 1e6 evaluations, twice, took 58 s (fuzz --stream new --seed 10606 case 418)
EQUIANGULAR_NFEV = 50_000


def equiangular_curve(norm: str, kind: str, n: int, beta: float, rho0: float, T: float, *, r0: float = 1.0,
                      alpha: float = 1.0, v: float = 1.0, t_eval=None, threshold: float | None = None,
                      max_seconds=None):
    """Integrate the derived equiangular ODE (the package's integrator, DOP853, rtol 1e-12, atol 1e-14) from
    ``(ρ₀, r₀)`` to ``T``; returns the :class:`~symbolic_tpde.numerics.ode.solve.Solution` (``y[:, 0] = ρ``,
    ``y[:, 1] = r``) and the first time ``ρ`` reaches ``threshold`` (``None`` if it does not), located to
    round-off on the dense output by a second run that stops there.  Each run may spend EQUIANGULAR_NFEV
    evaluations and ``max_seconds``; a run stopped by either is returned as it is (no threshold)."""
    from ..numerics.ode.solve import StopCondition, integrate

    _, f_rho, f_r = _reduction(norm, "n" if kind == "sphere_usa" else "softmax")
    scale = v if norm in ("post", "pre") else 1.0     # V = vI: post/pre run at speed v, peri/ngpt do not see v

    def rhs(t, y):
        rho = min(y[0], 1.0)
        return np.array([scale * f_rho(rho, y[1], n, beta, alpha),
                         scale * f_r(rho, y[1], n, beta, alpha) if f_r is not None else 0.0])

    def run(**kw):
        return integrate(rhs, [rho0, r0], (0.0, T), method="DOP853", rtol=1e-12, atol=1e-14,
                         max_nfev=EQUIANGULAR_NFEV, max_seconds=max_seconds, **kw)

    sol, hit = run(t_eval=t_eval), None
    if sol.status != "ok":          # stopped (budget, cap): no second run for the threshold
        return sol, None
    if threshold is not None and rho0 >= threshold:
        hit = 0.0
    elif threshold is not None:
        stop = run(t_eval=[T], events=[StopCondition(lambda t, y: np.array([threshold - y[0]]), "threshold")])
        hit = stop.event.time if stop.status == "event" else None
    return sol, hit


def _exact_fixed_point(norm: str, kind: str, n: int, rho0: float) -> str | None:
    """A rational ``p/q`` (``q <= 1000``) within ``EQUIANGULAR_TOL`` of ``ρ₀`` at which the derived ``ρ̇``
    vanishes exactly for every ``β`` (SymPy), as a string; ``None`` otherwise."""
    import sympy as sp
    from fractions import Fraction

    from ..symbolic import sphere_reductions as R

    q = Fraction(rho0).limit_denominator(1000)
    if abs(float(q) - rho0) > EQUIANGULAR_TOL or not -1 <= q <= 1:
        return None
    red = _reduction(norm, "n" if kind == "sphere_usa" else "softmax")[0]
    val = sp.simplify(red.rhs["rho"].subs({R.rho: sp.Rational(q.numerator, q.denominator), R.n: n}))
    return str(sp.Rational(q.numerator, q.denominator)) if val == 0 else None


def classify_sphere(scenario, X0, T: float, *, delta: float = DELTA, max_seconds=None, tol=None,
                    drawn: bool = True) -> SphereVerdict:
    """The verdict for ``scenario`` (a :class:`~symbolic_tpde.numerics.particles.sphere.SphereScenario`) from the tokens
    ``X0 (n, d)`` (``x = r0·θ`` for Pre-/Peri-LN) at horizon ``T`` (module docstring).  ``drawn``: ``X0`` was
    drawn from ``scenario.law`` (only then can an "almost every initial condition" theorem speak for it)."""
    from ..errors import BlowupError, InputError
    from ..numerics.particles.sphere import simulate_sphere

    X0 = np.asarray(X0, float)
    if X0.ndim != 2 or X0.shape[1] != scenario.d or len(X0) < 2:
        raise InputError("X0", f"expected at least 2 tokens of dimension {scenario.d}, got shape {X0.shape}")
    w, norm = scenario.weights, scenario.norm
    n = len(X0)
    facts, why = sphere_facts(w, norm, X0, scenario.law if drawn else None)
    evidence = [f"theorem '{k}' does not apply: {r}" for k, r in why.items()]
    if facts:
        f = facts[0]
        what = "every token converges to the first one" if f.name == "causal" else "one cluster"
        return SphereVerdict("one-cluster", f"{what} as t → ∞ (theorem '{f.name}': {f.source})", "theorem", T,
                             clusters=1, facts=facts, evidence=evidence,
                             rate={"law": "exponential"} if f.name == "hemisphere" else None)
    state = _equiangular_state(w, X0, norm)
    if not isinstance(state, str):
        return _equiangular_verdict(state, scenario, n, T, delta, evidence, max_seconds)
    evidence.append(f"equiangular reduction does not apply: {state}")
    return _particle_verdict(scenario, X0, T, delta, evidence, max_seconds, tol, simulate_sphere, BlowupError)


def _equiangular_verdict(state, scenario, n, T, delta, evidence, max_seconds=None) -> SphereVerdict:
    from ..symbolic import sphere_reductions as R

    rho0, r0, b_eff, v = state
    norm, kind, alpha = scenario.norm, scenario.weights.heads[0].kind, scenario.alpha
    red = _reduction(norm, "n" if kind == "sphere_usa" else "softmax")[0]
    how = (f"derived equiangular reduction ({norm}, {kind}, n = {n}, β_eff = {b_eff:g}; "
           f"`tpde derive --sphere equiangular --norm {norm} --sphere-kind {kind}`)")
    evidence.append(f"equiangular configuration: every <θ_i, θ_j> = ρ₀ = {rho0:.15g} within {EQUIANGULAR_TOL:g}"
                    + ("" if norm in ("post", "ngpt") else f", every radius r₀ = {r0:.15g}"))
    q = _exact_fixed_point(norm, kind, n, rho0)
    if q is not None and q != "1":
        evidence.append(f"ρ₀ is within {EQUIANGULAR_TOL:g} of {q}, where the derived ρ' vanishes exactly (SymPy)")
        return SphereVerdict("equilibrium", f"equilibrium: the tokens do not move (ρ = {q} is a zero of the {how}; "
                             "numerical for the float data, exact for ρ₀ = " + q + ")", "numerical", T,
                             clusters=n, t=T, min_inner=rho0, evidence=evidence,
                             rate={"law": "none", "rho_dot_at_rho0": 0})
    sol, hit = equiangular_curve(norm, kind, n, b_eff, rho0, T, r0=r0, alpha=alpha, v=v, threshold=1 - delta,
                                 max_seconds=max_seconds)
    if sol.status != "ok":
        return SphereVerdict("undetermined", f"undetermined: the reduction's integration stopped ({sol.message})",
                             "numerical", T, t=float(sol.t[-1]), evidence=evidence)
    rho_T = float(sol.y[-1, 0])
    lam = R.rates(red)
    subs = {R.n: n, R.beta: b_eff, R.alpha: alpha}
    law = {k: float(val.subs(subs)) if not val.free_symbols - set(subs) else str(val.subs(subs))
           for k, val in lam.items() if k != "fixed_point"}
    law["law"] = "polynomial 1 - ρ ~ C t^-power" if "power" in lam else "exponential 1 - ρ ~ C e^(-λ t)"
    evidence.append(f"{how}: DOP853 (rtol 1e-12) to T = {T:g}: ρ(T) = {rho_T:.15g}, 1 - ρ(T) = "
                    f"{1 - rho_T:.3g}" + ("" if sol.y[-1, 1] == r0 else f", r(T) = {sol.y[-1, 1]:.6g}"))
    if hit is not None:
        return SphereVerdict("one-cluster", f"one cluster from t = {hit:.6g} (every <θ_i, θ_j> = ρ(t) >= 1 - "
                             f"{delta:g}) to T = {T:g}; approach near ρ = 1: {law['law']} (numerical, {how})",
                             "numerical", T, clusters=1, t=T, time_to_one_cluster=hit, min_inner=rho_T,
                             rate=law, evidence=evidence)
    return SphereVerdict("clusters", f"{n} separate tokens at T = {T:g}: ρ(T) = {rho_T:.6g} < 1 - {delta:g} "
                         f"(numerical, {how})", "numerical", T, clusters=n, t=T, min_inner=rho_T, rate=law,
                         evidence=evidence)


def _slopes(times, gap):
    """Slopes of ``log gap`` against ``t`` and ``log t`` on the frames of ``[T/2, T]`` with ``gap > 1e-13``."""
    T = times[-1]
    m = (times >= T / 2) & (gap > 1e-13) & (times > 0)
    if m.sum() < 3:
        return None
    # fitted on t/T and log(t/T) (well scaled at any horizon; a tiny T such as 1e-300 makes the raw
    # Vandermonde matrix subnormal and the SVD fail), then rescaled; a slope that is not finite is not reported
    u = times[m] / T
    lg = np.log(gap[m])
    if np.ptp(lg) < 1e-8:        # the gap does not move beyond round-off on the window: no slope to measure
        return None
    try:
        s_t = float(np.polyfit(u, lg, 1)[0]) / T
        s_log = float(np.polyfit(np.log(u), lg, 1)[0])
    except (np.linalg.LinAlgError, ValueError):
        return None
    if not (np.isfinite(s_t) and np.isfinite(s_log)):
        return None
    return {"log_gap_vs_t": s_t, "log_gap_vs_log_t": s_log,
            "on": [float(times[m][0]), float(times[m][-1])],
            "meaning": "slopes of log(1 - min <θ_i,θ_j>) against t and against log t (measured; an exponential "
                       "approach has a constant first slope, a polynomial one a constant second slope)"}


def _particle_verdict(scenario, X0, T, delta, evidence, max_seconds, tol, simulate_sphere, BlowupError):
    times = np.linspace(0.0, T, FRAMES)
    n = len(X0)
    try:
        run = simulate_sphere(X0, scenario.weights, T, norm=scenario.norm, alpha=scenario.alpha, t_eval=times,
                              max_steps=step_budget(n, X0.shape[1], len(scenario.weights.heads)),
                              max_seconds=max_seconds, tol=tol)
    except BlowupError as exc:
        evidence.append(f"particles: {exc.where}: {exc.detail}")
        return SphereVerdict("blowup", f"blow-up at t = {exc.t:.6g}: {exc.detail} (numerical)", "numerical", T,
                             t=exc.t, evidence=evidence)
    how = (f"{n} particles, Dormand-Prince 5(4) at tolerance {run.tolerance:g}, {run.steps} steps; clusters by "
           f"<θ_i, θ_j> >= 1 - {delta:g} on {FRAMES} frames")
    if run.status != "ok":
        evidence.append(f"{how}: {run.detail}")
        return SphereVerdict("undetermined", f"undetermined: {run.detail} (< T = {T:g})",
                             "numerical", T, t=run.t, evidence=evidence)
    traj = run.trajectory
    counts = cluster_counts(traj, delta)
    U = traj / np.linalg.norm(traj, axis=2, keepdims=True)
    mins = np.einsum("kid,kjd->kij", U, U).min(axis=(1, 2))
    ok = mins >= 1 - delta                     # the rule of one_cluster (every pair linked)
    th = run.theta
    m_T = float(np.min(th @ th.T))
    k = len(ok) - 1
    while k > 0 and ok[k - 1]:
        k -= 1
    changed = np.nonzero(np.diff(counts))[0]
    since = float(times[changed[-1] + 1]) if changed.size else 0.0
    evidence.append(f"{how}: cluster count {int(counts[0])} at t = 0, {int(counts[-1])} at T = {T:g} (unchanged "
                    f"since t = {since:.6g}); min <θ_i, θ_j>(T) = {m_T:.12g}"
                    + ("" if run.r is None else f"; radii in [{run.r.min():.6g}, {run.r.max():.6g}]"))
    rate = _slopes(times, np.clip(1 - mins, 0, None))
    if ok[-1]:
        t1 = float(times[k])
        return SphereVerdict("one-cluster", f"one cluster (every pair linked) from t ≈ {t1:.6g} to T = {T:g} (min <θ_i, θ_j> = "
                             f"{m_T:.12g}; numerical, horizon {T:g})", "numerical", T, clusters=1, t=T,
                             time_to_one_cluster=t1, min_inner=m_T, rate=rate, evidence=evidence)
    c = int(counts[-1])
    return SphereVerdict("clusters", f"{c} clusters at T = {T:g} (count unchanged since t = {since:.6g}; not "
                         "decided whether they merge later: metastable plateaus last for times growing like "
                         f"e^(cβ); numerical, horizon {T:g})", "numerical", T, clusters=c, t=T, min_inner=m_T,
                         rate=rate, evidence=evidence)
