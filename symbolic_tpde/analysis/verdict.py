"""The one classifier of long-time covariance behaviour: theorems first, numerics second, evidence attached.

:func:`classify_long_time` answers "what does ``Σ(t)`` do?" for a :class:`~symbolic_tpde.gaussian.GaussianODE`
(``tpde classify``, ``tpde sweep`` and the figures all call it, so they cannot disagree):

1. **Theorems** (:mod:`.theorems`, each with its hypotheses checked on the weights).  The closed form
   (softmax heads with ``V = cI``) decides everything: ``T*`` or the limit ``Σ*`` and its rank, exactly.  The
   growth and Lyapunov facts exclude a finite-time blow-up: a verdict they exclude is never printed.
2. **Numerics**, labelled "numerical", with their evidence:

   * the **regular form** of :mod:`symbolic_tpde.gaussian.regular` (Sundman time, ``tr Σ`` and ``Σ/tr Σ``)
     reaches a singularity: the verdict "blow-up" needs ``d(log r)/ds`` settled over the last 40 e-folds of
     ``r = tr Σ``, else the growth is exponential ("diverge") or unsettled ("undetermined").  Error bound: the
     tail's uncertainty plus the difference to a run at a 10x looser tolerance.  For heads with a matrix form it
     evaluates that form, and goes on in the pair form (``Σ⁻¹`` beside ``Σ``) where ``tpde gaussian`` does
     (:func:`_matrix_form`); it stops for precision only where the form in use carries ``rtol`` of relative error;
   * on ``[0, T]``, without a singularity: the covariance at ``T/2ᵏ``; convergence ``Σ(t) = Σ* + Ct^{-p} + …``
     is fitted on the last two doublings (``p`` from ``‖Σ(T/2) - Σ(T/4)‖/‖Σ(T) - Σ(T/2)‖ = 2^p``), ``Σ*`` is
     extrapolated (Richardson for that law) and its error is the gap to the same extrapolation one doubling
     earlier; the rank counts the eigenvalues of ``Σ*`` above ten times that error; two fitted exponents that
     disagree mean the run is not asymptotic yet ("undetermined", with the exponents);
   * "oscillating / bursting": ``log tr Σ`` swings up and down by more than a factor 10 on ``[T/100, T]``
     (ℓ2 with a skew part), never called convergent;
   * "diverge": ``tr Σ`` grows; the exponential rate is fitted on ``[T/2, T]`` and on ``[T/4, T/2]``.

One wall-clock cap (``max_seconds``) covers the whole classification: the regular form gets ``1 - DIRECT_SHARE`` of
it, every later stage (error reruns, the look past ``T``, the sampled run, the direct form) what is left.  A stage
it stops says so: the regular form or the sampled run with an "undetermined" verdict and the time reached, the
look past ``T`` in the evidence, a rerun for ``T*``'s error bar by a wider bound (:func:`~symbolic_tpde.gaussian.
regular.blowup_time`).

Outcomes: ``"blowup"``, ``"no-singularity-before-T"`` (``T* > T``), ``"rank"`` (``rank = 0`` is collapse),
``"diverge"``, ``"oscillating"``, ``"tilt-ceased"``, ``"metastable"`` (a plateau near a rank-deficient state
that the run left, :mod:`.plateau`, where the limit itself is not yet settled at ``T``; a plateau before a
settled limit is named in that verdict's label), ``"undetermined"`` (with the reason).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..gaussian.regular import R_MAX_FACTOR, STIFF_SWITCH_EVALS, blowup_time, integrate_regular
from ..gaussian.integrate import PRECISION_SWITCH
from ..memo import Memo
from ..numerics.ode.solve import Deadline
from ..registry import layout
from .theorems import Facts, facts_for

__all__ = ["Verdict", "classify_long_time", "classify_many"]

#: a swing of ``log tr Σ`` by more than ``ln 10`` up and down on ``[T/100, T]`` is a burst
BURST = math.log(10.0)
#: the limit is fitted on the last of Σ(T/2ᵏ), k = K_DOUBLINGS … 0; the plateau detector (:mod:`.plateau`) reads
#: them all (six decades of t)
K_DOUBLINGS = 20


@dataclass
class Verdict:
    outcome: str
    label: str
    source: str                                   # "theorem" | "numerical"
    horizon: float
    rank: int | None = None
    Sigma_star: np.ndarray | None = None
    Sigma_star_error: float | None = None
    blowup_time: float | None = None
    blowup_time_error: float | None = None
    Sigma_T: np.ndarray | None = None
    t: float | None = None
    rate: dict | None = None
    evidence: list = field(default_factory=list)
    facts: list = field(default_factory=list)
    linearisation: dict | None = None
    covariance_only: bool = True
    plateau: dict | None = None
    certificate: dict | None = None

    @property
    def short(self) -> str:
        """One word or two for a figure legend: ``"collapse"``, ``"rank r"``, ``"blowup"``, ``"diverge"``,
        ``"no blow-up before T"``, ``"oscillating"``, ``"tilt ceased"``, ``"undetermined"``."""
        if self.outcome == "rank":
            return "collapse" if self.rank == 0 else f"rank {self.rank}"
        if self.outcome == "metastable" and self.plateau:
            return f"metastable (rank {self.plateau['rank']})"
        return {"no-singularity-before-T": "no blow-up before T", "tilt-ceased": "tilt ceased"}.get(self.outcome,
                                                                                                  self.outcome)

    def as_dict(self) -> dict:
        return {"outcome": self.outcome, "label": self.label, "source": self.source, "horizon": self.horizon,
                "rank": self.rank, "Sigma_star": self.Sigma_star, "Sigma_star_error": self.Sigma_star_error,
                "blowup_time": self.blowup_time, "blowup_time_error": self.blowup_time_error,
                "Sigma_T": self.Sigma_T, "t": self.t, "rate": self.rate, "evidence": list(self.evidence),
                "facts": [{"name": f.name, "statement": f.statement, "hypotheses": list(f.hypotheses),
                           "source": f.source} for f in self.facts],
                "linearisation": self.linearisation, "covariance_only": self.covariance_only,
                "plateau": self.plateau, "certificate": self.certificate}


def _matrix_form(ode, f, d: int, Sigma0, closed: bool, evidence: list, rtol: float):
    """The covariance right-hand side in matrix form (no ``Σ⁻¹``; :func:`symbolic_tpde.gaussian.matrix_form.
    checked_matrix_rhs`, every affine kind) for constant weights whose heads all have one, checked against the
    generated entrywise form at ``Σ₀`` and at a second point (to ``1e-10`` relative: both are float64 evaluations
    of the same formula at a well-conditioned point), with the precision and tilt stop conditions, and, for heads
    with ``M = R + Rᵀ ≠ 0``, its continuation in the pair form where ``tpde gaussian`` goes on in it
    (:class:`~symbolic_tpde.gaussian.regular.Continuation` of :func:`symbolic_tpde.gaussian.integrate.pair_form_for`:
    its right-hand side and its switch); ``None`` (use the generated form) otherwise."""
    from ..gaussian.integrate import pair_form_for
    from ..gaussian.matrix_form import checked_matrix_rhs, pair_rhs
    from ..gaussian.regular import Continuation

    if not closed or not getattr(ode.schedule, "is_constant", False):
        return None
    Sigma0 = np.asarray(Sigma0, float)
    probe = [Sigma0, Sigma0 + 0.5 * np.trace(Sigma0) / d * np.eye(d)]
    got = checked_matrix_rhs(ode.schedule(0.0), d, f, [layout.pack(np.zeros(d), S) for S in probe],
                             freeze_alpha=True, affine=True)
    if got is None:
        return None
    rhs, Mall, margins, agrees = got
    if not agrees:
        evidence.append("matrix form disagrees with the generated form at Σ₀: the generated form is used")
        return None
    evidence.append("covariance equation evaluated in matrix form (inverse-free tilt, one linear solve), "
                    "checked against the generated entrywise form at Σ₀ to 1e-10")

    # the tilt exists iff Σ⁻¹ - R - Rᵀ ≻ 0 (margins: :func:`symbolic_tpde.gaussian.matrix_form.tilt_margins`,
    # scale-free).  J comes from a solve with I - ΣM (relative error cond(I - ΣM)·eps) or, in the pair form, with
    # P - M (cond(P - M)·eps).  The run goes on in the pair form where tpde gaussian does (pair_form_for: its
    # right-hand side and its switch, cond(I - ΣM)·eps reaching PRECISION_SWITCH·rtol while P - M is better
    # conditioned), and stops ("precision") where the route it is on carries a relative error of rtol, which the
    # error control cannot accept (the criterion of gaussian's stall message): before the switch the better of
    # the two routes (the switch comes first where the pair form is better), after it cond(P - M), P the carried
    # Σ⁻¹
    if not Mall:
        return rhs, None, False, None
    lost = math.log(rtol / np.finfo(float).eps)
    pair = pair_form_for(ode, True, rtol)        # None where a head has no matrix form (e.g. beside Sinkhorn)
    kappas = None if pair is None else pair_rhs(ode.schedule(0.0), d)[2]
    n = layout.state_size(d)
    tilt = (lambda t, y: []) if margins is None else margins   # noqa: E731

    def conditions(t, y):
        if kappas is not None:
            k = min(kappas(y))
        else:
            S = layout.unpack(np.asarray(y, float), d)[1]
            k = max(np.linalg.cond(np.eye(d) - 0.5 * (S + S.T) @ M) for M in Mall)
        return np.array([lost - math.log(k)] + list(tilt(t, y)))

    def conditions_pair(t, z):
        P = layout.unpack(np.concatenate([np.zeros(d), np.asarray(z, float)[n:]]), d)[1]
        return np.array([lost - math.log(max(np.linalg.cond(P - M) for M in Mall))] + list(tilt(t, z[:n])))

    cont = None if pair is None else Continuation(pair[0], pair[1], pair[2].g, conditions_pair)
    return rhs, conditions, True, cont


# ------------------------------------------------------------------------------------------ the classifier
_CLOSED = Memo("covariance equation free of the mean, by weights structure and backend")


def _covariance_closed(ode) -> bool:
    """:func:`.clustering.covariance_closed`, memoised by the weights structure (a property of the derived
    system's symbols, not of the parameter values): it walks the free symbols of every ``Σ`` row, about a second
    for d = 3, which had been most of a sweep point's cost (``numerics/bench_verdict_l2.py``)."""
    from .clustering import covariance_closed

    key = getattr(ode, "structure", None)
    if key is None:
        return covariance_closed(ode)
    return _CLOSED.get((key, ode.backend), lambda: covariance_closed(ode))


def _fmt(M) -> str:
    return np.array2string(np.asarray(M), precision=6, suppress_small=False)


def _linearisation_at(ode, S_star, err_rel: float, algebraic: bool | None) -> dict:
    from .clustering import linearised_covariance_flow

    try:
        J, ev = linearised_covariance_flow(ode, S_star)
    except np.linalg.LinAlgError:             # the generated Jacobian is not finite at this Σ*
        return None
    nJ = float(np.linalg.norm(J, 2))
    # eigenvalues of J are known to about ‖∂J/∂Σ‖·‖δΣ‖ ≈ ‖J‖·(relative error of Σ*) plus round-off
    tol = nJ * max(err_rel, 1e-12) + 1e-14
    zero = np.abs(ev.real) <= tol
    if zero.any():
        meaning = (f"{int(zero.sum())} eigenvalue(s) zero within {tol:.2g} (the error of Σ* times ‖J‖): "
                   "not hyperbolic" + (" — a continuum of equilibria; the approach is algebraic, O(1/t)"
                                       if algebraic else ""))
    else:
        meaning = "no eigenvalue within the error of 0: hyperbolic"
    return {"eigenvalues_real": ev.real, "eigenvalues_imag": ev.imag, "max_real": float(ev.real.max()),
            "zero_tolerance": tol, "hyperbolic": bool(not zero.any()), "meaning": meaning,
            "jacobian_norm": nJ}


def _from_riccati(fact, ode, Sigma0, T, covariance_only) -> Verdict:
    v = fact.values
    T_star = v["T_star"]
    if np.isfinite(T_star):
        from .closed_forms import sigma_vi

        if T_star <= T:
            return Verdict("blowup", f"blow-up at T* = {T_star:.15g} (closed form)", "theorem", T,
                           blowup_time=T_star, blowup_time_error=4 * np.finfo(float).eps * T_star,
                           facts=[fact], evidence=[fact.statement, "T* error: eigenvalue round-off"],
                           rate={"law": "finite-time", "meaning": "Σ(t) = (Σ₀⁻¹ - tS)⁻¹, ‖Σ‖ ~ (T* - t)^-1"},
                           covariance_only=covariance_only)
        return Verdict("no-singularity-before-T",
                       f"no singularity before T = {T:g} (T* = {T_star:.15g} beyond it, closed form)", "theorem",
                       T, blowup_time=T_star, blowup_time_error=4 * np.finfo(float).eps * T_star,
                       Sigma_T=sigma_vi(T, Sigma0, v["A_eff"]), t=T, facts=[fact], evidence=[fact.statement],
                       covariance_only=covariance_only)
    S_star, r = v["Sigma_star"], v["rank"]
    lin = _linearisation_at(ode, S_star, 1e-12, True)
    what = "collapse, Σ* = 0" if r == 0 else f"rank {r}, Σ* = U(UᵀΣ₀⁻¹U)⁻¹Uᵀ"
    return Verdict("rank", f"{what} (closed form; the limit t → ∞, approached at rate O(1/t))", "theorem", T,
                   rank=r, Sigma_star=S_star, Sigma_star_error=0.0, facts=[fact], linearisation=lin,
                   rate={"law": "algebraic", "exponent": -1.0, "meaning": "‖Σ(t) - Σ*‖ = O(1/t) (closed form)"},
                   evidence=[fact.statement, "Σ* error: round-off of the closed form"],
                   covariance_only=covariance_only)


def _turning_amplitudes(x: np.ndarray) -> list[float]:
    """Amplitudes of the alternating moves of ``x`` between turning points (zig-zag with threshold BURST/4)."""
    th = BURST / 4
    moves, anchor, direction, extreme = [], x[0], 0, x[0]
    for v in x[1:]:
        if direction >= 0 and v > extreme:
            extreme = v
        elif direction <= 0 and v < extreme:
            extreme = v
        if direction >= 0 and extreme - v > th and extreme > anchor:
            moves.append(extreme - anchor)
            anchor, extreme, direction = extreme, v, -1
        elif direction <= 0 and v - extreme > th and extreme < anchor:
            moves.append(anchor - extreme)
            anchor, extreme, direction = extreme, v, 1
    # a burst is a pair of opposite moves both larger than BURST
    return [min(a, b) for a, b in zip(moves, moves[1:])]


def classify_long_time(ode, Sigma0, T: float = 1e4, *, alpha0=None, rtol: float = 1e-10,
                       max_seconds=None, certify: float = 0.0) -> Verdict:
    """The verdict on ``Σ(t)`` for ``ode`` from ``N(alpha0, Sigma0)`` at horizon ``T`` (module docstring).
    A sphere scenario (``ode.geometry == "sphere"``, ``Sigma0`` its initial tokens) goes to :mod:`.sphere_verdict`.
    ``certify > 0``: a numerical blow-up verdict (or "no singularity before T") of softmax heads in ``d ≤ 3``
    gets a certificate in interval arithmetic (:mod:`.certify`) within that many seconds, reported beside
    it (``certificate``); the numerical verdict keeps its label "numerical".

    >>> import numpy as np
    >>> from symbolic_tpde import GaussianODE, make_head, make_weights
    >>> ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=-np.eye(2), V=np.eye(2))]))
    >>> classify_long_time(ode, np.eye(2), 100.0).outcome
    'rank'
    """
    v = _classify(ode, Sigma0, T, alpha0=alpha0, rtol=rtol, max_seconds=max_seconds)
    if certify > 0 and v.source == "numerical" and v.outcome in ("blowup", "no-singularity-before-T") \
            and getattr(ode.schedule, "is_constant", False):
        from .certify import certify_blowup

        horizon = T if v.outcome == "no-singularity-before-T" else 10 * max(v.blowup_time, 1e-300)
        cert = certify_blowup(ode.schedule(0.0), Sigma0, horizon, max_seconds=certify, T_hint=v.blowup_time)
        if cert is not None:
            v.certificate = cert.as_dict()
            v.evidence = list(v.evidence) + cert.sides
            Tst, err = v.blowup_time, v.blowup_time_error or 0.0
            agree = Tst is None or (cert.lower <= Tst + err and (cert.upper is None or Tst - err <= cert.upper))
            v.label += f"; {cert.label}" + ("" if agree else " — CONTRADICTS the numerical T*: do not trust it")
    return v


#: share of ``max_seconds`` kept from the regular form for the direct form's blow-up signature (the fallback of a
#: regular-form run that stops short: a limit direction with ``tr F(N*) = 0``, where ``log tr Σ`` grows only like
#: ``c·log s`` in Sundman time and 80 e-folds are out of reach, while the direct form's signature settles at once,
#: in agreement with an independent DOP853 run)
DIRECT_SHARE = 0.25


def _direct_blowup(ode, a0, Sigma0, T: float, closed: bool, max_seconds):
    """``(T*, error, message)`` when the direct form (as ``tpde gaussian``) reaches a blow-up signature before
    ``T``; ``None`` otherwise (also where it cannot start)."""
    from ..errors import InputError

    try:
        with np.errstate(all="ignore"):
            if closed:
                from .clustering import integrate_covariance

                sol = integrate_covariance(ode, Sigma0, T, rtol=1e-12, max_seconds=max_seconds)
            else:
                sol = ode.integrate(a0, Sigma0, T, rtol=1e-12, max_seconds=max_seconds)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError, InputError):
        return None      # a fallback only: where the direct form cannot even start, the regular form's verdict stands
    Tst = getattr(sol, "blowup_time", None)
    if str(sol.status) != "blowup" or Tst is None or not Tst <= T:
        return None
    return float(Tst), float(sol.blowup_time_error or 0.0), sol.message


def _classify(ode, Sigma0, T: float = 1e4, *, alpha0=None, rtol: float = 1e-10, max_seconds=None) -> Verdict:
    if getattr(ode, "geometry", "R^d") == "sphere":
        from .sphere_verdict import classify_sphere
        return classify_sphere(ode, Sigma0, T, max_seconds=max_seconds)
    from ..gaussian.integrate import gaussian_rhs
    from .clustering import covariance_rhs

    Sigma0 = np.asarray(Sigma0, float)
    d = Sigma0.shape[0]
    closed = _covariance_closed(ode)
    facts: Facts = facts_for(ode.schedule, Sigma0, T) if hasattr(ode.schedule, "is_constant") else Facts()
    evidence = [f"theorem '{k}' does not apply: {why}" for k, why in facts.why_not.items()]
    if facts.riccati is not None and closed:
        v = _from_riccati(facts.riccati, ode, Sigma0, T, closed)
        v.facts = facts.as_list()
        return v
    excl = facts.no_blowup
    f = covariance_rhs(ode, T) if closed else gaussian_rhs(ode, T)
    cond = getattr(ode, "condition_values", None)
    g = _matrix_form(ode, f, d, Sigma0, closed, evidence, rtol)
    precision_guard, cont = False, None
    if g is not None:
        f, cond, precision_guard, cont = g
    a0 = np.zeros(d) if closed or alpha0 is None else np.asarray(alpha0, float)
    # one wall-clock cap for the whole classification: every run below (reruns, the look past T, the sampled
    # run, the direct form) takes what is left of it
    deadline = Deadline.of(max_seconds)

    def regular(horizon, tol=rtol, cap=deadline, **kw):
        return integrate_regular(f, d, a0, Sigma0, horizon, rtol=tol, conditions=cond, freeze_alpha=closed,
                                 precision_guard=precision_guard, continuation=cont, max_seconds=cap, **kw)

    # the regular form gets DIRECT_SHARE of the cap less: the direct form's blow-up signature is the fallback
    # when it stops short of a settled law (_direct_blowup)
    run = regular(T, cap=deadline.share(1 - DIRECT_SHARE))
    base = dict(source="numerical", horizon=T, facts=facts.as_list(), covariance_only=closed)
    evidence.append(f"regular form (Sundman time, tr Σ and Σ/tr Σ): stopped by {run.stop} at t = {run.t[-1]:.10g}, "
                    f"tr Σ = {math.exp(run.log_r[-1]):.4g}, {run.nfev} right-hand sides ({run.method})")
    if run.switched_at is not None:
        evidence.append(f"from t = {run.switched_at:.10g}, where the solve with I - ΣM had lost the precision "
                        f"(cond(I - ΣM)·eps reached {PRECISION_SWITCH:g}·rtol, the switch of tpde gaussian), the "
                        "run went on in the pair form: Σ⁻¹ carried beside Σ, J = V(Σ⁻¹ - M)⁻¹Bᵀ")
    if excl is not None:
        evidence.append(f"theorem '{excl.name}': {excl.statement}")
    if run.stop == "precision":
        t_stop = float(run.t[-1])
        lam = np.linalg.eigvalsh(run.Sigma_end)
        route = ("cond(Σ⁻¹ - M)" if run.switched_at is not None else "cond(I - ΣM)")
        with np.errstate(all="ignore"):
            cond_S = lam.max() / max(lam.min(), 1e-300)
        why = (f"the moment equation's float64 precision runs out at t = {t_stop:.6g} ({route}·eps reached rtol; "
               f"cond Σ = {cond_S:.3g}, tr Σ = {lam.sum():.3g})")
        return _lost_precision(excl, run.t, run.log_r, why, run.Sigma_end, evidence, base)
    if run.stop == "tilt":
        return Verdict("tilt-ceased", f"the Gaussian tilt ceases to exist at t = {run.t[-1]:.10g} (numerical)",
                       Sigma_T=run.Sigma_end, t=float(run.t[-1]), evidence=evidence, **base)
    if run.stop == "r_max":
        Tst, err, note = blowup_time(run, lambda r, **kw: regular(T, r, **kw), rtol)
        evidence.append(note)
        if Tst is not None and excl is None:
            return Verdict("blowup", f"blow-up at T* = {Tst:.12g} ± {err:.2g} (numerical, regular form)",
                           blowup_time=Tst, blowup_time_error=err, t=float(run.t[-1]), evidence=evidence,
                           rate={"law": "finite-time", "g": 1.0}, **base)
        fast = f"tr Σ grew to {R_MAX_FACTOR:.0e} tr Σ₀ by t = {run.t[-1]:.6g}"
        if excl is not None:
            return Verdict("diverge", f"diverge: {fast}; no finite-time blow-up ({excl.name} theorem) (numerical)",
                           t=float(run.t[-1]), evidence=evidence, **base)
        return Verdict("undetermined", f"undetermined: {fast} without a settled blow-up law ({note})",
                       t=float(run.t[-1]), evidence=evidence, **base)
    if run.stop != "T":
        t_stop = float(run.t[-1])
        swing = max(_turning_amplitudes(run.log_r[run.t >= t_stop / 100]) or [0.0])
        lam = np.linalg.eigvalsh(run.Sigma_end)
        cond_S = float(lam.max() / lam.min()) if lam.min() > 0 else math.inf
        why = {"stuck": f"the step size collapsed (cond Σ = {cond_S:.3g}: the moment equation may have lost its "
                        "float64 precision)",
               "time-limit": "the wall-clock cap was reached",
               "stalled": "the evaluation budget was spent"}.get(run.stop, f"integrator status {run.status}")
        if excl is None and run.stop in ("time-limit", "stalled", "stuck") and swing <= BURST:
            got = _direct_blowup(ode, a0, Sigma0, T, closed, deadline.left())
            if got is not None:
                Tst, err, msg = got
                evidence.append(f"the regular form stopped at t = {t_stop:.10g} ({why}; tr Σ = {lam.sum():.3g}); "
                                f"the direct form (gaussian's integration): {msg}")
                if Tst + err < t_stop:
                    # measured (fuzz seed 7301, case 3): an independent DOP853 in Sundman time at rtol 1e-13 sides
                    # with the direct form; the regular form's time, after its long LSODA continuation, was 2.6e-7 late
                    evidence.append(f"the regular form's t = {t_stop:.12g} lies beyond this T* by "
                                    f"{t_stop - Tst:.2g}: the time of its long run (LSODA after DOP853) drifted")
                return Verdict("blowup", f"blow-up at T* = {Tst:.12g} ± {err:.2g} (numerical, direct form: its "
                               "singularity signature; the regular form grows too slowly in Sundman time, "
                               "d(log tr Σ)/ds → 0)", blowup_time=Tst, blowup_time_error=err, t=t_stop,
                               evidence=evidence, rate={"law": "finite-time", "g": 1.0}, **base)
        if swing > BURST:
            return Verdict("oscillating", f"oscillating / bursting: tr Σ swings by a factor {math.exp(swing):.3g} "
                           f"on [t/100, t], t = {t_stop:.6g} (not convergent; the run stopped there: {why}) "
                           "(numerical)", Sigma_T=run.Sigma_end, t=t_stop, evidence=evidence, **base)
        return Verdict("undetermined", f"undetermined: the regular-form run stopped at t = {t_stop:.6g} < T "
                       f"({why}; tr Σ = {lam.sum():.3g})" + (f"; no finite-time blow-up ({excl.name} theorem)"
                                                              if excl is not None else ""),
                       t=t_stop, Sigma_T=run.Sigma_end, evidence=evidence, **base)
    # no singularity on [0, T]
    if excl is None:
        # nothing excludes a later blow-up: continue the regular form to 10 T (cheap) to say whether one follows
        ahead = regular(10 * T)
        if ahead.stop == "time-limit":
            evidence.append(f"the look for a blow-up after T (the regular form to 10 T) reached the wall-clock cap "
                            f"at t = {ahead.t[-1]:.6g}")
        if ahead.stop == "r_max":
            Tst, err, note = blowup_time(ahead, lambda r, **kw: regular(10 * T, r, **kw), rtol)
            if Tst is not None:
                evidence.append(f"continued past T in the regular form: blow-up at {Tst:.12g} ({note})")
                return Verdict("no-singularity-before-T", f"no singularity before T = {T:g} (T* = {Tst:.12g} "
                               f"± {max(err, 1e-16):.2g} beyond it, numerical, regular form)", blowup_time=Tst,
                               blowup_time_error=err, Sigma_T=run.Sigma_end, t=T, evidence=evidence, **base)
    return _on_horizon(T, Sigma0, rtol, facts, evidence, base, run.t, run.log_r, run.Sigma_end,
                       lambda: _samples(ode, f, d, a0, Sigma0, T, rtol, cond, closed, evidence, base,
                                        stiff="LSODA" in run.method, continuation=cont, deadline=deadline),
                       ode, closed)


def _lost_precision(excl, t_lr, log_r, why, Sigma_end, evidence, base) -> Verdict:
    """A run that lost its float64 precision at ``t_lr[-1]`` while ``tr Σ`` grew: "diverge" when a theorem
    excludes a blow-up and ``log tr Σ`` grows on ``[t/2, t]`` (slope fitted on the samples), else "undetermined"."""
    t_stop = float(t_lr[-1])
    m = t_lr >= t_stop / 2
    c = float(np.polyfit(t_lr[m], log_r[m], 1)[0]) if m.sum() >= 3 else float("nan")
    evidence.append(why)
    if excl is not None and c > 0:
        return Verdict("diverge", f"diverge: tr Σ grows like e^(ct), c = {c:.4g} on [t/2, t] up to {why}; "
                       f"no finite-time blow-up ({excl.name} theorem) (numerical)", Sigma_T=Sigma_end,
                       t=t_stop, rate={"law": "exponential", "rate_last_half": c}, evidence=evidence, **base)
    return Verdict("undetermined", f"undetermined: {why}", Sigma_T=Sigma_end, t=t_stop, evidence=evidence, **base)


def _on_horizon(T, Sigma0, rtol, facts, evidence, base, t_lr, log_r, Sigma_T, samples, ode, closed) -> Verdict:
    """The numeric decision for a run that reached ``T`` without a singularity (shared by
    :func:`classify_long_time` and :func:`classify_many`): a burst of ``log tr Σ`` (sampled at ``t_lr``) on
    ``[T/100, T]``, else exponential growth (``log tr Σ`` at ``T/4, T/2, T``), else the limit from
    ``samples()`` (``Σ(T/2ᵏ)``, ``k = K … 0``, or a Verdict when they could not be computed)."""
    excl = facts.no_blowup
    swing = max(_turning_amplitudes(log_r[t_lr >= T / 100]) or [0.0])
    if swing > BURST:
        return Verdict("oscillating", f"oscillating / bursting: tr Σ swings by a factor {math.exp(swing):.3g} "
                       f"on [T/100, T] (not convergent on [0, {T:g}]) (numerical)", Sigma_T=Sigma_T,
                       t=T, evidence=evidence, **base)
    # growth: log r on [T/4, T/2] and [T/2, T]
    lr = lambda t: float(np.interp(t, t_lr, log_r))   # noqa: E731
    c2 = (lr(T) - lr(T / 2)) / (T / 2)
    c1 = (lr(T / 2) - lr(T / 4)) / (T / 4)
    if lr(T) - lr(T / 2) > math.log(4):
        rate = {"law": "exponential", "rate_last_half": c2, "rate_previous_quarter": c1,
                "meaning": "(log tr Σ(T) - log tr Σ(T/2))/(T/2), and on [T/4, T/2]"}
        settled = abs(c1 - c2) <= 0.1 * abs(c2)
        bound = f"; theorem bound 2L = {2 * excl.values['L']:.4g}" if excl is not None and "L" in excl.values else ""
        return Verdict("diverge", f"diverge: tr Σ grows like e^(ct), c = {c2:.4g}"
                       + ("" if settled else f" (not settled: {c1:.4g} on [T/4, T/2])") + bound
                       + f"; no singularity before T = {T:g} (numerical)", Sigma_T=Sigma_T, t=T, rate=rate,
                       evidence=evidence, **base)
    S = samples()
    if isinstance(S, Verdict):
        return S
    v = _limit_from_samples(S, ode, Sigma0, T, rtol, closed, facts, evidence, base)
    from .plateau import detect_plateau

    p = detect_plateau(T / 2.0 ** np.arange(len(S) - 1, -1, -1), S, ode, still_there=v.outcome == "undetermined")
    if p is not None:
        v.plateau = p
        v.evidence = list(v.evidence) + p["evidence"]
        if v.outcome == "undetermined" and p["open"]:      # still there at T: plateau or limit, not decided
            v.label = f"undetermined: {p['label']} (numerical; {v.label[len('undetermined: '):]})"
        elif v.outcome == "undetermined":   # the run left the plateau and is not asymptotic at T: what it did
            v.outcome = "metastable"
            v.label = f"{p['label']} (numerical; the limit itself is {v.label})"
        else:
            v.label = f"{v.label}; before that, {p['label']}"
    return v


def _samples(ode, f, d, a0, Sigma0, T, rtol, cond, closed, evidence, base, stiff=False, continuation=None,
             deadline=None):
    """``Σ(T/2ᵏ)``, ``k = K … 0`` (DOP853; implicit LSODA where it stops; in the pair form from where the regular
    form went on in it, ``continuation``), or an "undetermined" Verdict; ``deadline``: the classification's
    wall-clock cap."""
    from ..gaussian.integrate import reported_status, tilt_stops
    from ..numerics.ode.solve import integrate

    ts = T / 2.0 ** np.arange(K_DOUBLINGS, -1, -1)
    y0 = layout.pack(a0, Sigma0)
    common = dict(rtol=rtol, atol=1e-14 * max(1.0, float(np.abs(y0).max())), t_eval=ts,
                  breakpoints=ode.schedule.breakpoints(T), max_seconds=deadline)

    def run(method, **kw):
        if continuation is None:
            return integrate(f, y0, (0.0, T), method=method, events=tilt_stops(cond), **common, **kw)
        return continuation.integrate(f, y0, (0.0, T), stops=tilt_stops, conditions=cond, method=method, **common,
                                      **kw)

    # where the implicit fallback exists, the explicit run gets the regular form's share before the switch (a
    # stiff, collapsed direction holds it to its stability limit: STIFF_SWITCH_EVALS), and none when the regular
    # form on the same interval already needed the switch (``stiff``)
    if stiff and closed:
        sol = None
        evidence.append("the regular form was stiff on [0, T]: the sampled run is implicit from the start")
    else:
        sol = run("DOP853", **({"max_nfev": STIFF_SWITCH_EVALS} if closed else {}))
    if sol is None or sol.status not in ("ok", "time-limit") and closed:
        # LSODA's finite-difference Jacobian of the same right-hand side (the inverse-free matrix form where it
        # exists): the generated Jacobian holds Σ⁻¹ and is not finite where Σ becomes singular (a collapse)
        if sol is not None:
            evidence.append(f"explicit run stopped ({reported_status(sol)} after {sol.nfev} evaluations)")
        evidence.append("sampled run: implicit LSODA (finite-difference Jacobian, counted evaluations) from t = 0")
        sol = run("LSODA")
    if sol.status != "ok":
        return Verdict("undetermined", f"undetermined: the integration stopped ({reported_status(sol)}) at "
                       f"t = {sol.t[-1]:.6g} < T = {T:g}", t=float(sol.t[-1]), evidence=evidence, **base)
    return np.array([layout.unpack(y, d)[1] for y in sol.y])


def _limit_from_samples(S, ode, Sigma0, T, rtol, closed, facts, evidence, base) -> Verdict:
    """Σ* and its rank from ``S = Σ(T/2ᵏ)`` (module docstring): settled, or the ``t^-p`` law extrapolated."""
    S = np.asarray(S, float)
    S = 0.5 * (S + np.transpose(S, (0, 2, 1)))
    nT = float(np.linalg.norm(S[-1]))
    floor = 1e-12 * float(np.trace(Sigma0))
    integ = 10 * rtol * max(nT, float(np.linalg.norm(Sigma0)))      # global error of a tolerance-rtol run
    D = [float(np.linalg.norm(S[k + 1] - S[k])) for k in range(len(S) - 1)]
    if D[-1] <= integ + floor:
        Sst, err, p, p_prev = S[-1], D[-1] + integ, math.inf, math.inf
        evidence.append(f"settled: ‖Σ(T) - Σ(T/2)‖ = {D[-1]:.2g} is within the integration error {integ:.2g}")
    else:
        p = math.log2(D[-2] / D[-1]) if D[-1] > 0 and D[-2] > 0 else math.inf
        p_prev = math.log2(D[-3] / D[-2]) if D[-2] > 0 and D[-3] > 0 else math.inf
        if not (p > 0.3 and abs(p - p_prev) <= 0.25):
            return Verdict("undetermined", f"undetermined: not in an asymptotic regime at T = {T:g} (decay "
                           f"exponents p = {p:.3g} on [T/4, T], {p_prev:.3g} on [T/8, T/2] disagree or p ≤ 0.3): "
                           "try a longer horizon", Sigma_T=S[-1], t=T, evidence=evidence, **base)
        Sst = S[-1] + (S[-1] - S[-2]) / (2 ** p - 1)
        Sprev = S[-2] + (S[-2] - S[-3]) / (2 ** p_prev - 1)
        err = float(np.linalg.norm(Sst - Sprev)) + integ
        evidence.append(f"‖Σ(t) - Σ*‖ ~ t^-p fitted: p = {p:.4g} on [T/4, T], {p_prev:.4g} on [T/8, T/2]; "
                        f"Σ* extrapolated (Richardson), error ≤ {err:.2g} (gap to the extrapolation one doubling "
                        "earlier + integration error)")
    lam, U = np.linalg.eigh(0.5 * (Sst + Sst.T))
    keep = lam > 10 * err + floor
    r = int(keep.sum())
    Sst = (U[:, keep] * lam[keep]) @ U[:, keep].T
    if facts.lyapunov is not None and r > facts.lyapunov.values["rank_bound"]:
        return Verdict("undetermined", f"undetermined: numerical rank {r} exceeds the theorem's bound "
                       f"{facts.lyapunov.values['rank_bound']} (horizon too short)", Sigma_T=S[-1], t=T,
                       evidence=evidence, **base)
    ambiguous = np.any((lam > err) & (lam <= 10 * err + floor))
    algebraic = bool(np.isfinite(p) and p < 3)
    rel = err / max(float(np.linalg.norm(Sst)), 1e-300)
    lin = _linearisation_at(ode, Sst, rel, algebraic) if r > 0 else None
    what = "collapse, Σ* = 0" if r == 0 else f"rank {r}, Σ* = {_fmt(Sst)}"
    how = (f"extrapolated from the O(t^-{p:.3g}) law" if np.isfinite(p)
           else "Σ(T) = Σ(T/2) within the integration error")
    label = f"{what} ({how}, error ≤ {err:.2g}; numerical)"
    if ambiguous:
        label += "; an eigenvalue of Σ* lies within 10x its error: the rank is uncertain"
    rate = {"law": "algebraic" if algebraic else "fast", "exponent": -p if np.isfinite(p) else None,
            "meaning": "‖Σ(t) - Σ*‖ ~ t^-p fitted on the last doublings of t"}
    return Verdict("rank", label, rank=r, Sigma_star=Sst, Sigma_star_error=err, Sigma_T=S[-1], t=T, rate=rate,
                   evidence=evidence, linearisation=lin, **base)


# ------------------------------------------------------------------------------------ many Σ₀ in one batch
#: the burst test of :func:`classify_many` sees ``log tr Σ`` at this many log-spaced times on ``[T/100, T]``
BATCH_BURST_SAMPLES = 64


def classify_many(weights, Sigma0s, T: float = 1e4, *, rtol: float = 1e-10, max_steps: int = 50_000) -> list:
    """:func:`classify_long_time` for many ``Σ₀`` (the figures), one :class:`Verdict` each, under one set of
    weights or one per ``Σ₀`` (a list of :class:`~symbolic_tpde.weights.Weights` of one structure: one
    generated right-hand side, per-row parameters), by the same rules: the theorems of :mod:`.theorems` per point first (the closed form decides a point
    outright; a no-blow-up theorem forbids the label "blow-up"), then the same numeric decision
    (:func:`_on_horizon`) on evidence from one batched Dormand-Prince run (:func:`symbolic_tpde.numerics.ode.rk.rk_solve`,
    ``α`` frozen at 0) instead of one run per point.  What differs from the single-point evidence (stated in each
    verdict): a singularity is detected by the batched blow-up monitor (levels ``10³…10¹⁰ tr Σ₀`` and the
    singularity signature; the error bar adds the integration error from a rerun at ``100·rtol`` and a round-off
    sample, :func:`~symbolic_tpde.numerics.ode.solve.sample_error`) rather than by the regular form,
    and the burst test sees ``log tr Σ`` at :data:`BATCH_BURST_SAMPLES` log-spaced times on ``[T/100, T]``.
    Weights the batch cannot take (a ``Σ`` equation involving ``α``, layers, tilt-existence conditions) go through
    :func:`classify_long_time` point by point."""
    from ..gaussian import GaussianODE
    from ..numerics.ode import rk
    from ..numerics.ode.solve import DEFAULT_LEVELS, BlowupMonitor, Status, roundoff_sample, sample_error

    from ..weights import Weights

    S0 = np.asarray(Sigma0s, float)
    N, d, _ = S0.shape
    ode = GaussianODE.from_weights(weights if isinstance(weights, Weights) else weights[0])
    odes = [ode] * N if isinstance(weights, Weights) else [GaussianODE.from_weights(w) for w in weights]
    from .closed_forms import quadratic_form

    # a head whose key-quadratic block has R + Rᵀ ⪯ 0 (softmax, ℓ2) always has its tilt (see _matrix_form)
    tilt_ok = all(getattr(o.schedule, "is_constant", False) and
                  all(q is None or np.linalg.eigvalsh(q[1] + q[1].T).max() <= 0
                      for q in map(quadratic_form, o.schedule(0.0).heads)) for o in odes)
    if not (tilt_ok and _covariance_closed(ode)):
        return [classify_long_time(o, S, T, rtol=rtol) for o, S in zip(odes, S0)]
    facts = [facts_for(o.schedule, S, T) for o, S in zip(odes, S0)]
    out: list = [None] * N
    for i, fa in enumerate(facts):
        if fa.riccati is not None:
            out[i] = _from_riccati(fa.riccati, odes[i], S0[i], T, True)
            out[i].facts = fa.as_list()
    P = np.array([o.params(0.0) for o in odes])

    def F(t, Y, PP):
        dY = np.array(ode.rhs_batch(t, Y, PP), float)
        dY[:, :d] = 0.0
        return dY

    size = layout.gaussian_size(d)
    ks = T / 2.0 ** np.arange(K_DOUBLINGS, -1, -1)
    t_lr = np.unique(np.concatenate([ks, np.geomspace(T / 100, T, BATCH_BURST_SAMPLES)]))
    at_k = np.searchsorted(t_lr, ks)
    for excluded in (True, False):
        rows = np.array([i for i in range(N) if out[i] is None and (facts[i].no_blowup is not None) == excluded], int)
        if rows.size == 0:
            continue
        # without a theorem excluding it, a blow-up after T is looked for up to 10 T (as the single-point path)
        T_run = T if excluded else 10 * T
        Y0 = layout.pack(np.zeros((rows.size, d)), S0[rows])

        def run(tol, t_eval, Y0=Y0, T_run=T_run, sel=rows, seed=None):
            bm = BlowupMonitor(*size, overflow=DEFAULT_LEVELS[-1]).rows(Y0)
            r = rk.rk_solve(F if seed is None else roundoff_sample(F, seed), 0.0, Y0, T_run, rtol=tol,
                            atol=1e-14 * tol / rtol, monitor=bm, t_eval=t_eval,
                            args=(P[sel],), max_steps=max_steps)
            return r, bm.settle(r.status), bm

        res, status, bm = run(rtol, t_lr)
        err = bm.spread.copy()
        blown = np.nonzero(status == Status.BLOWUP)[0]
        if blown.size and not excluded:
            # integration error: a rerun at 100·rtol (truncation) and one perturbed by a few ulps (round-off),
            # made one bound per row as in the single-point path (numerics.ode.solve.sample_error)
            r2, st2, bm2 = run(100 * rtol, None, Y0[blown], sel=rows[blown])
            r3, st3, bm3 = run(rtol, None, Y0[blown], sel=rows[blown], seed=1)
            ok2 = (st2 == Status.BLOWUP) & (st3 == Status.BLOWUP)
            err[blown] += [sample_error(bm.blowup_time[i], [bm2.blowup_time[j] if st2[j] == Status.BLOWUP else None,
                                                            bm3.blowup_time[j] if st3[j] == Status.BLOWUP else None])
                           for j, i in enumerate(blown)]
            gap = np.abs(bm.blowup_time[blown] - res.t[blown])
            err[blown[~ok2]] = np.maximum(err[blown[~ok2]], gap[~ok2])
        for j, i in enumerate(rows):
            fa = facts[i]
            excl = fa.no_blowup
            t_end = float(res.t[j])
            Sig = np.array([layout.unpack(y, d)[1] for y in res.ys[:, j]])
            S_end = layout.unpack(res.y[j], d)[1]
            tr_end = float(np.trace(S_end))
            evidence = [f"theorem '{k}' does not apply: {why}" for k, why in fa.why_not.items()]
            evidence.append(f"batched Dormand-Prince (rtol {rtol:g}) with the blow-up monitor: stopped by "
                            f"{Status(status[j]).value} at t = {t_end:.10g}, tr Σ = {tr_end:.4g}")
            if excl is not None:
                evidence.append(f"theorem '{excl.name}': {excl.statement}")
            base = dict(source="numerical", horizon=T, facts=fa.as_list(), covariance_only=True)
            st = status[j]
            if st == Status.BLOWUP and excl is None:
                Tst, e = float(bm.blowup_time[j]), float(err[j])
                evidence.append("singularity signature of the blow-up monitor; error: extrapolation spread + "
                                "9.9 x the spread of the times of this run, a rerun at 100·rtol and one perturbed "
                                "by a few ulps")
                if Tst <= T:
                    out[i] = Verdict("blowup", f"blow-up at T* = {Tst:.12g} ± {e:.2g} (numerical, batched "
                                     "blow-up monitor)", blowup_time=Tst, blowup_time_error=e, t=t_end,
                                     evidence=evidence, rate={"law": "finite-time"}, **base)
                else:
                    out[i] = Verdict("no-singularity-before-T", f"no singularity before T = {T:g} (T* = "
                                     f"{Tst:.12g} ± {e:.2g} beyond it, numerical, batched blow-up monitor)",
                                     blowup_time=Tst, blowup_time_error=e, Sigma_T=Sig[at_k[-1]], t=T,
                                     evidence=evidence, **base)
                continue
            if t_end < T:         # stopped before the horizon
                if st in (Status.BLOWUP, Status.OVERFLOW):
                    fast = f"tr Σ grew to {tr_end / np.trace(S0[i]):.3g} tr Σ₀ by t = {t_end:.6g}"
                    out[i] = (Verdict("diverge", f"diverge: {fast}; no finite-time blow-up ({excl.name} theorem) "
                                      "(numerical)", t=t_end, evidence=evidence, **base) if excl is not None else
                              Verdict("undetermined", f"undetermined: {fast} without the blow-up signature",
                                      t=t_end, evidence=evidence, **base))
                else:     # the step size collapsed or the budget ran out
                    seen = np.isfinite(Sig[:, 0, 0]) & (t_lr < t_end)
                    lam = np.linalg.eigvalsh(S_end)
                    cond_S = lam.max() / lam.min() if lam.min() > 0 else math.inf
                    why = (f"the batched run stopped at t = {t_end:.6g} < T ({Status(st).value}; cond Σ = "
                           f"{cond_S:.3g}, tr Σ = {tr_end:.3g}): the moment "
                           "equation's float64 precision ran out")
                    out[i] = _lost_precision(excl, np.append(t_lr[seen], t_end),
                                             np.log(np.append(np.trace(Sig[seen], axis1=1, axis2=2), tr_end)),
                                             why, S_end, evidence, base)
                continue
            log_r = np.log(np.trace(Sig, axis1=1, axis2=2))
            out[i] = _on_horizon(T, S0[i], rtol, fa, evidence, base, t_lr, log_r, Sig[at_k[-1]],
                                 lambda Sig=Sig: Sig[at_k], odes[i], True)
    return out
