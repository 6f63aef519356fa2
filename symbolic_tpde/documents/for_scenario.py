"""A derivation specialised to a scenario file: its structure and its numbers (``tpde derive --scenario``;
README "`tpde derive`"; Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §3-4).

:func:`scenario_derivation` detects the structure of a loaded scenario (kinds, ``d``, ``V = I``, symmetric
``A``, FFN, heads), builds the matrix-form derivation specialised to it (:func:`.steps.kind_derivation`), and
appends the steps that put the scenario's numbers in (:func:`scenario_steps`).  **Numbers**: every JSON float
becomes an exact rational by one documented rule, :data:`RATIONAL_MODE` of
:data:`.metric.RATIONAL_RULES` (the shortest decimal that reads back to the double, rationalised: the decimal
as written; ``tpde convexity`` uses the other rule, the binary rational, through the same helper), and the
rule is stated in the derivation's assumptions.  Only constant weights (no ``layers``).  When the specialised
precision equation is constant (:func:`.steps_special.constant_precision_rate`), ``Σ(t)`` and the blow-up time
are given exactly and checked against a numeric route passed in as a callable (this layer does not import the
analysis layer).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import sympy as sp

from ..errors import InputError
from ..symbolic.metric import RATIONAL_RULES, _exact, exact_array

#: the rule for JSON floats in ``tpde derive --scenario`` (a key of :data:`.metric.RATIONAL_RULES`)
RATIONAL_MODE = "decimal"


def rational(x) -> sp.Rational:
    """One JSON float as an exact rational by :data:`RATIONAL_MODE` (``0.1 -> 1/10``)."""
    return _exact(float(x), "scenario", RATIONAL_MODE)


def detect_structure(w, d: int) -> dict:
    """The structure of one layer's weights ``w``: ``kinds``, ``V_identity`` (every head's effective ``V`` is
    exactly the identity), ``A_symmetric`` (every head has an ``A`` equal to its transpose), ``ffn``."""
    eye = np.eye(d)
    return {"kinds": tuple(h.kind for h in w.heads),
            "V_identity": all(np.array_equal(h.effective["V"], eye) for h in w.heads),
            "A_symmetric": all("A" in h.effective and np.array_equal(h.effective["A"], h.effective["A"].T)
                               for h in w.heads),
            "ffn": w.ffn is not None}


def scenario_derivation(scn, blowup_reference=None, name: str = "scenario"):
    """The derivation of the moment ODE specialised to the loaded scenario ``scn`` (constant weights; every
    head Gaussian-preserving, the command prints the witness otherwise): structure detected, steps of
    :func:`.steps.kind_derivation`, then :func:`scenario_steps` with the numbers as exact rationals
    (:data:`RATIONAL_MODE`).  ``blowup_reference(Sigma0, M) -> float``: an independent numeric blow-up time
    for ``dΣ/dt = ΣMΣ`` (floats), used when the precision equation is constant; its attribute ``route`` (if
    any) names it in the check's method."""
    from ..symbolic.moments import canonical_form, derive_gaussian_system, matrix_form
    from ..symbolic.sinkhorn import MatrixSqrtRequired
    from .steps import kind_derivation
    from .special_cases import constant_precision_rate

    if not scn.schedule.is_constant:
        raise InputError("--scenario", "has piecewise-constant 'layers': the derivation is specialised to "
                         "constant weights only (give one layer's weights at top level)")
    w, d = scn.weights(0.0), scn.d
    st_ = detect_structure(w, d)
    kinds, V_identity, A_symmetric, ffn = st_["kinds"], st_["V_identity"], st_["A_symmetric"], st_["ffn"]
    dv = kind_derivation(kinds, ffn=ffn, V_identity=V_identity, A_symmetric=A_symmetric)
    mf = matrix_form(kinds, ffn=ffn)
    ex = lambda v, what: exact_array(np.asarray(v, dtype=float), what, RATIONAL_MODE)   # noqa: E731
    env = {"alpha": ex(scn.alpha0, "alpha0"), "Sigma": ex(scn.Sigma0, "Sigma0")}
    m = d
    for head, hs in zip(w.heads, mf.heads):
        for key, sym in hs["symbols"].items():
            env[sym.name] = ex(head.effective[key], key)
        if "Q" in head.effective:
            m = int(np.shape(head.effective["Q"])[0])
    if ffn:
        env["W"], env["c"] = ex(w.ffn.W, "W"), ex(w.ffn.c, "c")
    structure = (d, tuple((k, canonical_form(k, d, m)) for k in kinds), ffn, False)
    words = (f"Read from the scenario {name}: {len(kinds)} head(s) of kind {' + '.join(kinds)}, d = {d}, "
             f"V = I: {'yes' if V_identity else 'no'}, A symmetric: {'yes' if A_symmetric else 'no'}, "
             f"feed-forward term: {'yes' if ffn else 'no'}.")
    exact = (f"The scenario's numbers are used as exact rationals: {RATIONAL_RULES[RATIONAL_MODE]}; weights "
             "formed from Q, K or WO are the rationalised decimals of the double products.")
    notes = list(dv.notes)
    try:
        system = derive_gaussian_system(structure)
    except MatrixSqrtRequired as exc:
        system = None
        notes.append(f"The scenario's numbers are not put in: no exact entrywise form at d = {d} ({exc}).")
    st, concl = [], []
    if system is not None:
        subs = {s.name: env["alpha"][i] for i, s in enumerate(system.states[:d])}
        k = d
        for i in range(d):
            for j in range(i, d):
                subs[system.states[k].name] = env["Sigma"][i, j]
                k += 1
        for blk in system.param_layout:
            val = w.heads[blk.key[1]].effective[blk.key[2]] if blk.key[0] == "heads" else getattr(w.ffn, blk.key[1])
            flat = np.asarray(val, dtype=float).reshape(-1)
            subs.update({system.params[blk.offset + n].name: rational(v) for n, v in enumerate(flat)})
        rate = constant_precision_rate(mf, V_identity, A_symmetric)[3] if V_identity or A_symmetric else None
        st, concl, more = scenario_steps(mf, env, {"d": d, "m": m}, (system, subs), rate=rate,
                                         blowup_reference=blowup_reference, Sigma0_float=scn.Sigma0,
                                         horizon=scn.T if math.isfinite(scn.T) else None)
        notes += more
    data: list = []
    if d <= DATA_MAX_D:     # the numbers the steps use, as displayed matrices (1-based head superscripts)
        for h, hs in enumerate(mf.heads):
            data += [(key if len(kinds) == 1 else f"{key}^({h + 1})", env[sym.name]) for key, sym in hs["symbols"].items()]
        data += [("W", env["W"]), ("c", env["c"])] if ffn else []
        data += [("alpha_0", env["alpha"]), ("Sigma_0", env["Sigma"])]
        data += [("T", rational(scn.T))] if math.isfinite(scn.T) else []
    else:
        notes.append(f"The scenario's matrices (d = {d} > {DATA_MAX_D}) are not displayed; the steps use them.")
    return replace(dv, title=f"{dv.title}: scenario {name}", steps=dv.steps + tuple(st),
                   assumptions=dv.assumptions + (words, exact), conclusions=dv.conclusions + tuple(concl),
                   notes=tuple(notes), data=tuple(data))


#: a scenario's matrices are displayed up to this d (a wider pmatrix leaves the page)
DATA_MAX_D = 6


def _shown_number(M):
    """A matrix of exact numbers for display: exact when short, else 15 significant digits (surds)."""
    long = any(len(sp.sstr(v)) > 40 for v in M)
    return (M.applyfunc(lambda v: sp.N(v, 15)) if long else M), long


def _ode_with_numbers(mf, env: dict, dims: dict, system, subs: dict, numeric: bool, notes: list) -> list:
    """The moment ODE with the scenario's weights put in and the state left free (1-based names
    ``alpha_1``, ``Sigma_12``), checked against the entrywise system with the same weights at seeded random
    rational states (``Sigma`` SPD; exact); a one-line note instead when a matrix square root appears or it
    is larger than :data:`.steps.ENTRYWISE_MAX_NODES` nodes per equation."""
    from .printing import tree_size
    from .steps import ENTRYWISE_MAX_NODES
    from .equation import Notation as Shown, step
    from .check import _rand, explicit

    d = dims["d"]
    if numeric:      # the principal square root of a matrix with a free state: nested surds, not readable
        notes.append("The moment ODE with the scenario's weights and a free state involves the principal square "
                     "root of a symbolic matrix: not shown; its values at t = 0 follow.")
        return []
    al = sp.Matrix([[sp.Symbol(f"alpha_{i + 1}", real=True)] for i in range(d)])
    Sg = sp.Matrix(d, d, lambda i, j: sp.Symbol(f"Sigma_{min(i, j) + 1}{max(i, j) + 1}", real=True))
    env_s = {**env, "alpha": al, "Sigma": Sg}
    a_dot = sp.Matrix(explicit(mf.alpha_dot, env_s, dims))
    S_dot = sp.Matrix(explicit(mf.Sigma_dot, env_s, dims))
    n_eq = d + d * (d + 1) // 2
    size = tree_size(list(a_dot) + [S_dot[i, j] for i in range(d) for j in range(i, d)])
    if size <= 4 * ENTRYWISE_MAX_NODES * n_eq:          # expanded: polynomial kinds shrink
        a_dot, S_dot = a_dot.applyfunc(sp.expand), S_dot.applyfunc(sp.expand)
        size = tree_size(list(a_dot) + [S_dot[i, j] for i in range(d) for j in range(i, d)])
    if size > ENTRYWISE_MAX_NODES * n_eq:
        notes.append(f"The moment ODE with the scenario's weights and a free state has {size} nodes written out "
                     f"(more than {ENTRYWISE_MAX_NODES} per equation): not shown; its values at t = 0 follow.")
        return []
    states = {s.name: v for s, v in zip(system.states, list(al) + [Sg[i, j] for i in range(d)
                                                                  for j in range(i, d)])}
    sys_free = list(explicit(sp.ImmutableMatrix(system.rhs), {**subs, **states}, dims))
    mine = list(a_dot) + [S_dot[i, j] for i in range(d) for j in range(i, d)]

    def check(eq, points: int = 3, seed: int = 5):
        import random
        rng = random.Random(seed)
        M = sp.Matrix(eq.rhs)
        mine = list(M) if M.cols == 1 else [M[i, j] for i in range(d) for j in range(i, d)]
        ref = sys_free[:d] if M.cols == 1 else sys_free[d:]
        for _ in range(points):
            L = sp.Matrix(d, d, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
            P = L * L.T
            at = {**{al[i]: _rand(rng) for i in range(d)}, **{Sg[i, j]: P[i, j] for i in range(d)
                                                                for j in range(i, d)}}
            for a, b in zip(mine, ref):
                v = (a - b).xreplace(at)
                if sp.cancel(v) != 0:
                    return False, "the two routes differ at a random state", ""
        return True, (f"equals the independently derived entrywise system with the same weights at {points} "
                      "seeded random rational states (Sigma SPD), exact rational arithmetic"), f"d = {d}"
    note = "the scenario's weights put in, the state (alpha, Sigma) free; 1-based indices as in the paper"
    return [step("with the scenario's weights: the mean equation", Shown("d alpha/dt", r"\frac{d\alpha}{dt}"),
                 sp.ImmutableMatrix(a_dot), note, how=check),
            step("with the scenario's weights: the covariance equation", Shown("d Sigma/dt", r"\frac{d\Sigma}{dt}"),
                 sp.ImmutableMatrix(S_dot), note, how=check)]


def scenario_steps(mf, env: dict, dims: dict, system_subs: tuple, rate=None, blowup_reference=None,
                   horizon: float | None = None, Sigma0_float=None):
    """Steps that put a scenario's numbers into the derived moment ODE (README "`tpde derive`";
    arXiv 2501.18322 §3-4): ``(steps, conclusions, notes)``.

    ``env``: the matrix-form symbols (``A``, ``V``, ``A_0``, ..., ``W``, ``c``, ``tau``, ...) -> exact
    numbers, plus ``alpha``/``Sigma`` -> the initial ``alpha0``/``Sigma0``; ``system_subs = (system,
    subs)``: the independently derived entrywise system (:func:`.moments.derive_gaussian_system`) and the
    substitution of its parameter and state symbols by the same numbers.  Steps:

    * the moment ODE at ``t = 0`` (matrix form evaluated at the numbers) against the entrywise system at the
      same numbers (exact; 50 digits where a square root appears);
    * when the precision equation is constant, ``d(Σ⁻¹)/dt = -M`` (``rate = M`` from
      :func:`.steps_special.constant_precision_rate`, e.g. softmax heads with ``V = I``, ``M = Σ_h A_h + A_hᵀ``):
      ``Σ(t) = (Σ₀⁻¹ - tM)⁻¹`` with the numbers, checked by substitution into ``dΣ/dt = ΣMΣ`` (exact rational
      functions of ``t``) and ``Σ(0) = Σ₀``; the blow-up time ``T* = 1/λ_max(Σ₀M)`` as an exact algebraic
      number, checked by ``det(Σ₀⁻¹ - T*M) = 0`` (50 digits) and against ``blowup_reference(Σ₀, M)`` (floats;
      an independent numeric root finder, e.g. :func:`symbolic_tpde.analysis.closed_forms.blowup_time_vi`
      with ``A = M/2``, passed in by the command so this layer does not import the analysis layer).
    """
    from .equation import Notation as Shown, step
    from .check import explicit
    from .equation import inline_matrix, tex
    from .special_cases import blowup_failure

    system, subs = system_subs
    d = dims["d"]
    numeric = any(h["Ct"] is not None for h in mf.heads)       # a principal square root (Sinkhorn)
    out, concl, notes = [], [], []
    a_mf = explicit(mf.alpha_dot, env, dims)
    S_mf = explicit(mf.Sigma_dot, env, dims)
    rhs_sys = list(explicit(sp.ImmutableMatrix(system.rhs), subs, dims))     # memoised on the DAG

    def cmp(which, rhs_vals):
        def run(eq):
            M = sp.Matrix(eq.rhs)
            lhs_vals = list(M) if which == "mean" else [M[i, j] for i in range(d) for j in range(i, d)]
            diff = [a - b for a, b in zip(lhs_vals, rhs_vals)]
            if any(isinstance(v, sp.Float) or v.has(sp.Float) for v in lhs_vals):   # shown to 15 digits
                ok = all(abs(sp.N(a - b, 30)) <= 1e-13 * max(1, abs(sp.N(b, 30))) for a, b in zip(lhs_vals, rhs_vals))
                how = "the 15-digit values shown agree with the exact values to 1e-13 (relative)"
            elif numeric:     # principal square roots: 50-digit evaluation of exact surds, |diff| < 1e-40
                ok = all(abs(sp.N(v, 50)) < sp.Float("1e-40", 50) for v in diff)
                how = "50-digit evaluation of the exact values, |difference| < 1e-40"
            else:
                ok = all(sp.cancel(v) == 0 for v in diff)
                how = "exact rational arithmetic, difference 0"
            return ok, ("the matrix form evaluated at the scenario's numbers equals the independently derived "
                        rf"entrywise system (explicit tilt, $LDL^{{\top}}$ pivots) at the same numbers ({how})"
                        if ok else "the two routes differ at the scenario's numbers"), "the scenario's numbers"
        return run
    out += _ode_with_numbers(mf, env, dims, system, subs, numeric, notes)
    a_show, la = _shown_number(sp.Matrix(a_mf))
    S_show, ls = _shown_number(sp.Matrix(S_mf))
    digits = " (shown to 15 digits; the check is on the exact values)" if la or ls else ""
    out.append(step("with the scenario's numbers: the mean velocity at t = 0", Shown(
        "d alpha/dt (t = 0)", r"\left.\frac{d\alpha}{dt}\right|_{t=0}"), a_show,
        "at the initial data alpha(0) and Sigma_0 of the scenario, with its weights" + digits,
        how=cmp("mean", rhs_sys[:d])))
    up = [S_mf[i, j] for i in range(d) for j in range(i, d)]
    out.append(step("with the scenario's numbers: the covariance velocity at t = 0", Shown(
        "d Sigma/dt (t = 0)", r"\left.\frac{d\Sigma}{dt}\right|_{t=0}"), S_show, digits.strip(" ()"),
        how=cmp("cov", rhs_sys[d:])))
    if rate is None:
        return out, concl, notes
    S0 = env["Sigma"]
    S = sp.Matrix(explicit(rate, env, dims))
    t = sp.Symbol("t", real=True)
    sol = (S0.inv() - t * S).inv().applyfunc(sp.factor)

    def ode_check(eq):
        sol = sp.Matrix(eq.rhs)
        r = (sol.diff(t) - sol * S * sol).applyfunc(lambda e: sp.cancel(sp.together(e)))
        ok = r.is_zero_matrix and (sol.subs(t, 0) - S0).applyfunc(sp.cancel).is_zero_matrix
        return ok, ("substituted back: dSigma(t)/dt - Sigma(t) M Sigma(t) cancels to 0 as a rational "
                    "function of t with the scenario's numbers, and Sigma(0) = Sigma_0 (exact)" if ok else
                    "the closed form does not solve the ODE at the scenario's numbers"), "the scenario's numbers"
    out.append(step("with the scenario's numbers: the closed-form covariance", Shown("Σ(t)", r"\Sigma(t)"),
                    sol, rf"$\Sigma(t) = (\Sigma_0^{{-1}} - tM)^{{-1}}$ with $M = {inline_matrix(S)}$, "
                    r"entries as rational functions of $t$",
                    how=ode_check))
    lam = sp.Symbol("lambda")
    roots = sp.Poly((S0 * S - lam * sp.eye(d)).det(), lam).real_roots()
    lmax = max(roots, key=lambda v: sp.N(v, 50)) if roots else None
    T_star = sp.oo if lmax is None or sp.N(lmax, 50) <= 0 else sp.radsimp(1 / lmax)

    def blowup_check(eq):
        T_star = eq.rhs
        ref = None
        if blowup_reference is not None:
            ref = float(blowup_reference(np.asarray(Sigma0_float, float), np.array(S.tolist(), dtype=float)))
        if T_star == sp.oo:
            ok = ref is None or ref == float("inf")
            return ok, ("every eigenvalue of Sigma_0 M is <= 0 (exact roots of its characteristic "
                        "polynomial)" + ("; the numeric closed-form route also finds no finite blow-up" if ref
                                         is not None else "")) if ok else "the numeric route finds a blow-up"
        bad = blowup_failure(S0, S, T_star, t)
        if bad:
            return False, bad
        how = ("det(Sigma_0^-1 - t M) vanishes at t = T* (50 digits, < 1e-40) and is positive at "
               "t = k T*/8, k = 0..7")
        if ref is not None:
            # 1e-9 relative: the numeric route works in doubles (M and Sigma_0 as floats, ~1e-16 from the exact
            # values) and refines its root by Newton's method
            if not abs(ref - float(T_star)) <= 1e-9 * abs(float(T_star)):
                return False, f"the numeric route gives T* = {ref!r}, the exact one {float(T_star)!r}"
            route = getattr(blowup_reference, "route", "a numeric root finder passed in")
            how += (f"; the independent numeric route (first positive root of the determinant in doubles, "
                    f"{route}) gives {ref:.15g}, relative difference <= 1e-9")
        return True, how
    out.append(step("with the scenario's numbers: the blow-up time", Shown("T*", r"T^{*}"), T_star,
                    (r"$T^{*} = 1/\lambda_{\max}$ with $\lambda_{\max} = " + tex(lmax)
                     + rf" \approx {float(sp.N(lmax, 20)):.15g}$, so $T^{{*}} \approx {float(sp.N(T_star, 20)):.15g}$")
                    if T_star != sp.oo else
                    "no eigenvalue of Sigma_0 M is positive: no finite-time blow-up", how=blowup_check))
    if T_star != sp.oo and horizon is not None:
        when = "before" if float(T_star) <= horizon else "after"
        concl.append(f"For this scenario the covariance blows up at T* = {float(T_star):.6g}, {when} its horizon "
                     f"T = {horizon:g}.")
    return out, concl, notes


__all__ = ["RATIONAL_MODE", "rational", "detect_structure", "scenario_derivation", "scenario_steps"]
