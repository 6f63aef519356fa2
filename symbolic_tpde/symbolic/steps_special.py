"""Specialised steps (``V = I``, symmetric ``A``) and the assumptions/conclusions of a derivation in words
(README, Mathematics §3-4; Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §3-4).

For softmax with ``V = I``: ``dΣ/dt = Σ(A + Aᵀ)Σ``, hence ``d(Σ⁻¹)/dt = -Σ⁻¹(dΣ/dt)Σ⁻¹ = -(A + Aᵀ)``, hence
``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹`` (checked by substituting back into the ODE and at ``t = 0``), which blows up
when ``det(Σ₀⁻¹ - t(A + Aᵀ)) = det(Σ₀⁻¹) ∏(1 - tλᵢ)`` first vanishes, ``λᵢ`` the eigenvalues of
``Σ₀(A + Aᵀ)``: ``T* = 1/λ_max`` when ``λ_max > 0`` (checked at random rational points, 50 digits).
"""

from __future__ import annotations

import random

import sympy as sp

from .steps_check import SPD_NAMES, _rand, check_equal

D = sp.Symbol("d", integer=True, positive=True)


def _sym2(name: str) -> sp.Matrix:
    return sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"{name}{min(i, j)}{max(i, j)}", real=True))


def specialise(mf, kinds_: tuple, V_identity: bool, A_symmetric: bool) -> list:
    """Steps that simplify the moment ODE with the user's structure (and, for softmax with ``V = I``, its
    closed-form solution and blow-up time)."""
    from .moments import mexpand
    from .steps import Shown, step

    Sigma = mf.Sigma
    rep = {}
    heads = mf.heads
    for h in heads:
        if V_identity and "V" in h["symbols"]:
            rep[h["symbols"]["V"]] = sp.Identity(D)
    sym = tuple(h["symbols"]["A"].name for h in heads if A_symmetric and "A" in h["symbols"])
    out = []
    S_dot = mexpand(mf.Sigma_dot.xreplace(rep))
    if A_symmetric:
        S_dot = mexpand(S_dot.xreplace({sp.Transpose(sp.MatrixSymbol(n, D, D)): sp.MatrixSymbol(n, D, D)
                                        for n in sym}))
    words = " and ".join(w for w, on in (("V = I", V_identity), ("A = A^T", A_symmetric)) if on)
    from .steps_render import tex as _tex, text_side

    general = mf.Sigma_dot                 # shown with the structure as a substitution; checked substituted
    shown = Shown(f"({text_side(general)}) at {words}",
                  r"\left(" + _tex(general) + r"\right)\Big|_{" + words.replace("^T", "^\\top").replace(" and ", r",\ ") + "}")
    out.append(step(f"with {words}: the covariance equation", shown, S_dot,
                    f"the user's structure ({words}) substituted and simplified",
                    check=lambda: check_equal(general.xreplace(rep), S_dot, symmetric=sym)))
    if not (V_identity and kinds_ == ("softmax",)):
        return out
    A = heads[0]["symbols"]["A"]
    S = A + A.T if not A_symmetric else 2 * A
    out.append(step("precision: d(Sigma^-1)/dt = -Sigma^-1 (dSigma/dt) Sigma^-1", -Sigma.I * S_dot * Sigma.I, -S,
                    "the precision moves on a straight line", symmetric=sym))
    S0 = sp.MatrixSymbol("Sigma_0", D, D)
    t = sp.Symbol("t", real=True)
    sol = (S0.I - t * S).I

    def ode_check(points: int = 3, seed: int = 1):
        from .steps_check import explicit
        rng = random.Random(seed)
        for dv in (2,):
            for _ in range(points):
                Am = sp.Matrix(dv, dv, lambda i, j: _rand(rng))
                L = sp.Matrix(dv, dv, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
                env = {"A": (Am + Am.T) / 2 if A_symmetric else Am, "Sigma_0": L * L.T}
                St, Sm = explicit(sol, env, {"d": dv}), explicit(S, env, {"d": dv})
                r1 = (sp.diff(St, t) - St * Sm * St).applyfunc(lambda e: sp.cancel(sp.together(e)))
                if not (r1.is_zero_matrix and (St.subs(t, 0) - env["Sigma_0"]).is_zero_matrix):
                    return False, "the candidate does not solve the ODE"
        return True, (f"substituted back: dSigma(t)/dt - Sigma(t)(A + A^T)Sigma(t) cancels to 0 as a rational "
                      f"function of t, and Sigma(0) = Sigma_0, at {points} seeded random rational (A, Sigma_0) for "
                      "d = 2 (exact arithmetic)")
    from .steps import _lect
    shown_sol = _lect(("(", r"\bigl("), S0.I, (" - t ", r" - t\,"), (S, True), (")^-1", r"\bigr)^{-1}"))
    out.append(step("closed-form solution (integrate the precision equation)", Shown("Sigma(t)", r"\Sigma(t)"),
                    shown_sol, "valid while Sigma_0^-1 - t(A + A^T) stays positive definite", check=ode_check))

    def blowup_check(points: int = 3, seed: int = 0):
        rng = random.Random(seed)
        tested = 0
        for _ in range(40):
            Am = sp.Matrix(2, 2, lambda i, j: _rand(rng))
            Am = (Am + Am.T) / 2 if A_symmetric else Am
            L = sp.Matrix(2, 2, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
            S0m = L * L.T
            Sm = Am + Am.T
            lam = [v for v in (S0m * Sm).eigenvals() if v.is_real]
            lmax = max(lam, key=lambda v: sp.N(v, 50))
            if sp.N(lmax, 50) <= 0:
                continue
            T = 1 / lmax
            P = S0m.inv() - t * Sm
            if abs(sp.N(P.det().subs(t, T), 50)) > sp.Float("1e-40", 50):
                return False, "det(Sigma_0^-1 - T* (A + A^T)) is not 0"
            if any(sp.N(P.subs(t, T * k / 8).det(), 50) <= 0 for k in range(8)):
                return False, "Sigma(t)^-1 becomes singular before T*"
            tested += 1
            if tested == points:
                return True, (f"{points} seeded random rational (A, Sigma_0) at d = 2 with lambda_max > 0: "
                              "det(Sigma_0^-1 - t(A + A^T)) vanishes at t = T* (50 digits, < 1e-40) and is positive "
                              "at t = k T*/8, k = 0..7")
        return False, "no random point with a positive eigenvalue"
    lam = sp.Symbol("lambda_max", positive=True)
    out.append(step("blow-up time (first t where Sigma_0^-1 - t(A + A^T) is singular)", Shown("T*", r"T^\ast"),
                    1 / lam, "lambda_max: the largest eigenvalue of Sigma_0 (A + A^T) (equivalently of "
                    "Sigma_0^{1/2}(A + A^T)Sigma_0^{1/2}); finite-time blow-up iff lambda_max > 0",
                    check=blowup_check))
    return out


def assumptions_in_words(kinds_: tuple, V_identity: bool = False, A_symmetric: bool = False):
    """``(assumptions, conclusions)`` as sentences for the document (not comments)."""
    ass = ["mu_t = N(alpha, Sigma) with Sigma symmetric positive definite; all matrices are read at time t "
           "(time-dependent weights are allowed)."]
    from ..spec import kinds as registry

    if any(registry.part(k, "symbolic").log_kernel is not None for k in kinds_):   # softmax-normalised kernels
        ass.append("A softmax-normalised kernel with log k(x, y) = c(x) + y^T R y + (B^T x + r)^T y has a tilted "
                   "measure k(x, y) N(y; alpha, Sigma)/Z(x) that exists, and is the Gaussian N(m(x), S), iff "
                   "Sigma^-1 - R - R^T is positive definite; the derivation holds only there.")
    ass += [registry.get(k).assumption for k in dict.fromkeys(kinds_) if registry.get(k).assumption]
    if V_identity:
        ass.append("Structure given by the user: V = I.")
    if A_symmetric:
        ass.append("Structure given by the user: A symmetric.")
    concl = ["The field Gamma(x) = b + J x is affine in x, so the flow map is affine and N(alpha, Sigma) stays "
             "Gaussian: the moment ODE is exact, not an approximation."]
    if V_identity and kinds_ == ("softmax",):
        concl.append("With V = I the precision decreases linearly, Sigma(t)^-1 = Sigma_0^-1 - t(A + A^T): the "
                     "covariance blows up in finite time T* = 1/lambda_max iff A + A^T has a positive eigenvalue.")
    return tuple(ass), tuple(concl)


__all__ = ["specialise", "assumptions_in_words", "SPD_NAMES", "check_equal"]


# ----------------------------------------------------------------------------- a scenario's numbers
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
    from .steps import ENTRYWISE_MAX_NODES, Shown, step
    from .steps_check import _rand, explicit

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

    def check(points: int = 3, seed: int = 5):
        import random
        rng = random.Random(seed)
        for _ in range(points):
            L = sp.Matrix(d, d, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
            P = L * L.T
            at = {**{al[i]: _rand(rng) for i in range(d)}, **{Sg[i, j]: P[i, j] for i in range(d)
                                                                for j in range(i, d)}}
            for a, b in zip(mine, sys_free):
                v = (a - b).xreplace(at)
                if sp.cancel(v) != 0:
                    return False, "the two routes differ at a random state"
        return True, (f"equals the independently derived entrywise system with the same weights at {points} "
                      "seeded random rational states (Sigma SPD), exact rational arithmetic")
    note = "the scenario's weights put in, the state (alpha, Sigma) free; 1-based indices as in the paper"
    return [step("with the scenario's weights: the mean equation", Shown("d alpha/dt", r"\frac{d\alpha}{dt}"),
                 sp.ImmutableMatrix(a_dot), note, check=check),
            step("with the scenario's weights: the covariance equation", Shown("d Sigma/dt", r"\frac{d\Sigma}{dt}"),
                 sp.ImmutableMatrix(S_dot), note, check=check)]


def scenario_steps(mf, kinds_: tuple, env: dict, dims: dict, system_subs: tuple, V_identity: bool,
                   A_symmetric: bool, blowup_reference=None, horizon: float | None = None):
    """Steps that put a scenario's numbers into the derived moment ODE (README "`tpde derive`";
    arXiv 2501.18322 §3-4): ``(steps, conclusions, notes)``.

    ``env``: the matrix-form symbols (``A``, ``V``, ``A_0``, ..., ``W``, ``c``, ``tau``, ...) -> exact
    numbers, plus ``alpha``/``Sigma`` -> the initial ``alpha0``/``Sigma0``; ``system_subs = (system,
    subs)``: the independently derived entrywise system (:func:`.moments.derive_gaussian_system`) and the
    substitution of its parameter and state symbols by the same numbers.  Steps:

    * the moment ODE at ``t = 0`` (matrix form evaluated at the numbers) against the entrywise system at the
      same numbers (exact; 50 digits where a square root appears);
    * softmax with ``V = I``: ``Σ(t) = (Σ₀⁻¹ - t(A + Aᵀ))⁻¹`` with the numbers, checked by substitution into
      ``dΣ/dt = Σ(A + Aᵀ)Σ`` (exact rational functions of ``t``) and ``Σ(0) = Σ₀``; the blow-up time
      ``T* = 1/λ_max(Σ₀(A + Aᵀ))`` as an exact algebraic number, checked by ``det(Σ₀⁻¹ - T*(A + Aᵀ)) = 0``
      (50 digits) and against ``blowup_reference(Σ₀, A)`` (an independent numeric route, e.g.
      :func:`symbolic_tpde.analysis.closed_forms.blowup_time_vi`, passed in by the command so this layer
      does not import the analysis layer).
    """
    from .steps import Shown, step
    from .steps_check import explicit

    system, subs = system_subs
    d = dims["d"]
    numeric = any(h["Ct"] is not None for h in mf.heads)       # a principal square root (Sinkhorn)
    out, concl, notes = [], [], []
    a_mf = explicit(mf.alpha_dot, env, dims)
    S_mf = explicit(mf.Sigma_dot, env, dims)
    rhs_sys = list(explicit(sp.ImmutableMatrix(system.rhs), subs, dims))     # memoised on the DAG

    def cmp(lhs_vals, rhs_vals):
        def run():
            diff = [a - b for a, b in zip(lhs_vals, rhs_vals)]
            if numeric:     # principal square roots: 50-digit evaluation of exact surds, |diff| < 1e-40
                ok = all(abs(sp.N(v, 50)) < sp.Float("1e-40", 50) for v in diff)
                how = "50-digit evaluation of the exact values, |difference| < 1e-40"
            else:
                ok = all(sp.cancel(v) == 0 for v in diff)
                how = "exact rational arithmetic, difference 0"
            return ok, ("the matrix form evaluated at the scenario's numbers equals the independently derived "
                        f"entrywise system (explicit tilt, LDL^T pivots) at the same numbers ({how})"
                        if ok else "the two routes differ at the scenario's numbers")
        return run
    out += _ode_with_numbers(mf, env, dims, system, subs, numeric, notes)
    a_show, la = _shown_number(sp.Matrix(a_mf))
    S_show, ls = _shown_number(sp.Matrix(S_mf))
    digits = " (shown to 15 digits; the check is on the exact values)" if la or ls else ""
    out.append(step("with the scenario's numbers: the mean velocity at t = 0", Shown(
        "d alpha/dt (t = 0)", r"\left.\frac{d\alpha}{dt}\right|_{t=0}"), a_show,
        "at the initial data alpha(0) and Sigma_0 of the scenario, with its weights" + digits,
        check=cmp(list(a_mf), rhs_sys[:d])))
    up = [S_mf[i, j] for i in range(d) for j in range(i, d)]
    out.append(step("with the scenario's numbers: the covariance velocity at t = 0", Shown(
        "d Sigma/dt (t = 0)", r"\left.\frac{d\Sigma}{dt}\right|_{t=0}"), S_show, digits.strip(" ()"),
        check=cmp(up, rhs_sys[d:])))
    if not (V_identity and kinds_ == ("softmax",)):
        return out, concl, notes
    A, S0 = env["A"], env["Sigma"]
    S = A + A.T
    t = sp.Symbol("t", real=True)
    sol = (S0.inv() - t * S).inv().applyfunc(sp.factor)

    def ode_check():
        r = (sol.diff(t) - sol * S * sol).applyfunc(lambda e: sp.cancel(sp.together(e)))
        ok = r.is_zero_matrix and (sol.subs(t, 0) - S0).applyfunc(sp.cancel).is_zero_matrix
        return ok, ("substituted back: dSigma(t)/dt - Sigma(t)(A + A^T)Sigma(t) cancels to 0 as a rational "
                    "function of t with the scenario's numbers, and Sigma(0) = Sigma_0 (exact)" if ok else
                    "the closed form does not solve the ODE at the scenario's numbers")
    out.append(step("with the scenario's numbers: the closed-form covariance", Shown("Sigma(t)", r"\Sigma(t)"),
                    sol, "Sigma(t) = (Sigma_0^-1 - t (A + A^T))^-1, entries as rational functions of t",
                    check=ode_check))
    lam = sp.Symbol("lambda")
    roots = sp.Poly((S0 * S - lam * sp.eye(d)).det(), lam).real_roots()
    lmax = max(roots, key=lambda v: sp.N(v, 50)) if roots else None
    T_star = sp.oo if lmax is None or sp.N(lmax, 50) <= 0 else sp.radsimp(1 / lmax)

    def blowup_check():
        ref = None
        if blowup_reference is not None:
            ref = float(blowup_reference(S0, A))
        if T_star == sp.oo:
            ok = ref is None or ref == float("inf")
            return ok, ("every eigenvalue of Sigma_0 (A + A^T) is <= 0 (exact roots of its characteristic "
                        "polynomial)" + ("; the numeric closed-form route also finds no finite blow-up" if ref
                                         is not None else "")) if ok else "the numeric route finds a blow-up"
        P = S0.inv() - t * S
        if abs(sp.N(P.det().subs(t, T_star), 50)) > sp.Float("1e-40", 50):
            return False, "det(Sigma_0^-1 - T* (A + A^T)) is not 0"
        if any(sp.N(P.subs(t, T_star * k / 8).det(), 50) <= 0 for k in range(8)):
            return False, "Sigma(t)^-1 becomes singular before T*"
        how = ("det(Sigma_0^-1 - t(A + A^T)) vanishes at t = T* (50 digits, < 1e-40) and is positive at "
               "t = k T*/8, k = 0..7")
        if ref is not None:
            # 1e-9 relative: the numeric route works in doubles on the float scenario (the rationals are those
            # floats' decimals, so the inputs agree to ~1e-16) and refines its root by Newton's method
            if not abs(ref - float(T_star)) <= 1e-9 * abs(float(T_star)):
                return False, f"the numeric route gives T* = {ref!r}, the exact one {float(T_star)!r}"
            how += (f"; the independent numeric route (first positive root of the determinant, "
                    f"closed_forms.blowup_time_vi) gives {ref:.15g}, relative difference <= 1e-9")
        return True, how
    out.append(step("with the scenario's numbers: the blow-up time", Shown("T*", r"T^\ast"), T_star,
                    ("T* = 1/lambda_max, lambda_max = " + sp.sstr(lmax) + f" = {float(sp.N(lmax, 20)):.15g}, "
                     f"so T* = {float(sp.N(T_star, 20)):.15g}") if T_star != sp.oo else
                    "no eigenvalue of Sigma_0 (A + A^T) is positive: no finite-time blow-up", check=blowup_check))
    if T_star != sp.oo and horizon is not None:
        when = "before" if float(T_star) <= horizon else "after"
        concl.append(f"For this scenario the covariance blows up at T* = {float(T_star):.6g}, {when} its horizon "
                     f"T = {horizon:g}.")
    return out, concl, notes
