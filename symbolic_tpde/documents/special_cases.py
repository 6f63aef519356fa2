"""Specialised steps (``V = I``, symmetric ``A``) and the assumptions/conclusions of a derivation in words
(README, Mathematics §3-4; Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §3-4).

Whenever the specialised precision equation ``d(Σ⁻¹)/dt = -Σ⁻¹(dΣ/dt)Σ⁻¹`` is a constant ``-M`` (no ``α``,
no ``Σ`` left after simplification; decided symbolically by :func:`constant_precision_rate`, not by the kind's
name; e.g. softmax heads with ``V = I``: ``dΣ/dt = Σ(A + Aᵀ)Σ``, ``M = A + Aᵀ``, summed over heads), the
precision moves on a straight line and ``Σ(t) = (Σ₀⁻¹ - tM)⁻¹`` (checked by substituting back into the ODE and
at ``t = 0``), which blows up when ``det(Σ₀⁻¹ - tM) = det(Σ₀⁻¹) ∏(1 - tλᵢ)`` first vanishes, ``λᵢ`` the
eigenvalues of ``Σ₀M``: ``T* = 1/λ_max`` when ``λ_max > 0`` (checked at random rational points, 50 digits).
"""

from __future__ import annotations

import random

import sympy as sp

from .check import SPD_NAMES, _rand, check_equal, explicit

D = sp.Symbol("d", integer=True, positive=True)


def constant_precision_rate(mf, V_identity: bool, A_symmetric: bool):
    """``(S_dot, rep, sym, M)``: the covariance equation with the structure put in (``rep``: ``V -> I``;
    ``sym``: names of the matrices taken symmetric) and ``M`` with ``d(Σ⁻¹)/dt = -Σ⁻¹(dΣ/dt)Σ⁻¹ = -M`` when that
    right-hand side, expanded, contains neither ``α`` nor ``Σ`` (a symbolic test on the expression), else
    ``M = None``."""
    from ..symbolic.moments import mexpand

    rep = {h["symbols"]["V"]: sp.Identity(D) for h in mf.heads if V_identity and "V" in h["symbols"]}
    sym = tuple(h["symbols"]["A"].name for h in mf.heads if A_symmetric and "A" in h["symbols"])
    S_dot = mexpand(mf.Sigma_dot.xreplace(rep))
    if sym:
        S_dot = mexpand(S_dot.xreplace({sp.Transpose(sp.MatrixSymbol(n, D, D)): sp.MatrixSymbol(n, D, D)
                                        for n in sym}))
    rate = mexpand(-mf.Sigma.I * S_dot * mf.Sigma.I)
    state = {mf.Sigma.name, mf.alpha.name}
    if isinstance(rate, sp.ZeroMatrix) or any(m.name in state for m in rate.atoms(sp.MatrixSymbol)):
        return S_dot, rep, sym, None
    return S_dot, rep, sym, mexpand(-rate)


def _random_env(M, A_symmetric: bool, rng, dv: int = 2) -> dict:
    """Seeded random rational matrices for the weight symbols of ``M`` (symmetric when ``A_symmetric``) and
    an SPD ``Sigma_0``."""
    env = {}
    for ms in M.atoms(sp.MatrixSymbol):
        if ms.name == "Sigma_0":
            continue
        X = sp.Matrix(dv, dv, lambda i, j: _rand(rng))
        env[ms.name] = (X + X.T) / 2 if A_symmetric else X
    L = sp.Matrix(dv, dv, lambda i, j: _rand(rng, True) if i == j else (_rand(rng) if i > j else 0))
    env["Sigma_0"] = L * L.T
    return env


def blowup_failure(S0m, Sm, T, t) -> str | None:
    """Why ``T`` is not the first zero of ``det(Σ₀⁻¹ - tM)`` (exact ``Σ₀``, ``M``), or None: the determinant
    must vanish at ``T`` (50 digits, < 1e-40: exact algebraic input, so only rounding remains) and be positive
    at ``t = kT/8``, ``k = 0..7``."""
    P = S0m.inv() - t * Sm
    if abs(sp.N(P.det().subs(t, T), 50)) > sp.Float("1e-40", 50):
        return "det(Sigma_0^-1 - T* M) is not 0"
    if any(sp.N(P.subs(t, T * k / 8).det(), 50) <= 0 for k in range(8)):
        return "Sigma(t)^-1 becomes singular before T*"
    return None


def specialise(mf, kinds_: tuple, V_identity: bool, A_symmetric: bool) -> list:
    """Steps that simplify the moment ODE with the user's structure and, when the precision equation is then
    constant (:func:`constant_precision_rate`), its closed-form solution and blow-up time.  The closed form and
    the blow-up time are checked by procedures that read the displayed equation (``Σ(t)`` substituted back
    into the ODE; ``det(Σ₀⁻¹ - T*M) = 0``)."""
    from .equation import Notation, at, named_roots, step

    Sigma = mf.Sigma
    S_dot, rep, sym, S = constant_precision_rate(mf, V_identity, A_symmetric)
    out = []
    words = " and ".join(w for w, on in (("V = I", V_identity), ("A = A^T", A_symmetric)) if on)
    reps = dict(rep)
    if sym:
        reps.update({sp.Transpose(sp.MatrixSymbol(n, D, D)): sp.MatrixSymbol(n, D, D) for n in sym})
    mwords = " and ".join(w for w, on in (("$V = I$", V_identity), (r"$A = A^{\top}$", A_symmetric)) if on)
    from ..symbolic.moments import mexpand

    out.append(step(f"with {mwords}: the mean equation", at(mf.alpha_dot, reps, words),
                    mexpand(mf.alpha_dot.xreplace(reps)), f"the user's structure ({mwords}) substituted",
                    symmetric=sym))
    (lhs, rhs), named = named_roots(mf.Sigma_dot, S_dot)
    out.append(step(f"with {mwords}: the covariance equation", at(lhs, reps, words), rhs,
                    f"the user's structure ({mwords}) substituted and simplified", symmetric=sym, where=named))
    if S is None:
        return out
    out.append(step(r"precision: $\frac{d\Sigma^{-1}}{dt} = -\Sigma^{-1}\frac{d\Sigma}{dt}\Sigma^{-1}$",
                    -Sigma.I * S_dot * Sigma.I, -S,
                    r"no $\alpha$ and no $\Sigma$ are left: the precision moves on a straight line", symmetric=sym))
    S0 = sp.MatrixSymbol("Sigma_0", D, D)
    t = sp.Symbol("t", real=True)
    Mn = sp.MatrixSymbol("M", D, D)
    where = ((Mn, S),)

    def ode_check(eq, points: int = 3, seed: int = 1):
        rng = random.Random(seed)
        sol = eq.substituted(eq.rhs)
        M = eq.substituted(Mn)
        for _ in range(points):
            env = _random_env(M, A_symmetric, rng)
            St, Sm = explicit(sol, env, {"d": 2}), explicit(M, env, {"d": 2})
            r1 = (sp.diff(St, t) - St * Sm * St).applyfunc(lambda e: sp.cancel(sp.together(e)))
            if not (r1.is_zero_matrix and (St.subs(t, 0) - env["Sigma_0"]).is_zero_matrix):
                return False, "the right side does not solve dSigma/dt = Sigma M Sigma with Sigma(0) = Sigma_0", ""
        return True, (f"substituted back: dSigma(t)/dt - Sigma(t) M Sigma(t) cancels to 0 as a rational function of "
                      f"t, and Sigma(0) = Sigma_0, at {points} seeded random rational weights and Sigma_0 for d = 2 "
                      "(exact arithmetic)"), "d = 2"
    out.append(step("closed-form solution for constant weights (integrate the precision equation)",
                    Notation("Σ(t)", r"\Sigma(t)"), (S0.I - t * Mn).I,
                    r"the weights constant in $t$, so $M$ is; valid while $\Sigma_0^{-1} - tM \succ 0$",
                    how=ode_check, where=where))
    out.append(_time_dependent_step(Notation))
    lam = sp.Symbol("lambda_max", positive=True)

    def blowup_check(eq, points: int = 3, seed: int = 0):
        rng = random.Random(seed)
        M = eq.substituted(Mn)
        tested = 0
        for _ in range(40):
            env = _random_env(M, A_symmetric, rng)
            S0m, Sm = env["Sigma_0"], explicit(M, env, {"d": 2})
            ev = [v for v in (S0m * Sm).eigenvals() if v.is_real]
            lmax = max(ev, key=lambda v: sp.N(v, 50))
            if sp.N(lmax, 50) <= 0:
                continue
            bad = blowup_failure(S0m, Sm, eq.rhs.subs(lam, lmax), t)
            if bad:
                return False, bad, ""
            tested += 1
            if tested == points:
                return True, (f"{points} seeded random rational (weights, Sigma_0) at d = 2 with lambda_max > 0: "
                              "det(Sigma_0^-1 - t M) vanishes at t = T* (50 digits, < 1e-40) and is positive at "
                              "t = k T*/8, k = 0..7"), "d = 2"
        return False, "no random point with a positive eigenvalue", ""
    out.append(step(r"blow-up time for constant weights (the first $t$ where $\Sigma_0^{-1} - tM$ is singular)",
                    Notation("T*", r"T^{*}"),
                    1 / lam, r"$\lambda_{\max}$: the largest eigenvalue of $\Sigma_0 M$ (equivalently of "
                    r"$\Sigma_0^{1/2} M \Sigma_0^{1/2}$); finite-time blow-up iff $\lambda_{\max} > 0$. With "
                    r"time-dependent weights $T^{*}$ is instead the first zero of $\det(\Sigma_0^{-1} - \int_0^t M)$, "
                    r"not $1/\lambda_{\max}$",
                    how=blowup_check, where=where))
    return out


def _precision_integral(S0, Mt, tau, t):
    """``(Σ₀⁻¹ - ∫₀ᵗ M(τ) dτ)⁻¹``, the integral by ``sympy.integrate`` (the instance of the displayed formula)."""
    return (S0.inv() - Mt.applyfunc(lambda e: sp.integrate(e, (tau, 0, t)))).inv()


def time_dependent_check(eq, points: int = 3, seed: int = 2):
    """The equation's instance ``Σ(t) = build(Σ₀, M(τ), τ, t)`` solves ``dΣ/dt = Σ M(t) Σ``, ``Σ(0) = Σ₀`` at
    ``d = 2`` for ``M(τ) = M₀ + τM₁ + τ²M₂`` (random rational symmetric) and a random SPD ``Σ₀``."""
    build = eq.instance[0]
    t, tau = sp.Symbol("t", real=True), sp.Symbol("tau", real=True)
    rng = random.Random(seed)
    for _ in range(points):
        Ms = [_rand_sym(rng) for _ in range(3)]
        Mt = Ms[0] + tau * Ms[1] + tau ** 2 * Ms[2]
        S0 = _rand_sym(rng)
        S0 = S0 * S0.T + sp.eye(2)
        St = build(S0, Mt, tau, t)
        r = (sp.diff(St, t) - St * Mt.subs(tau, t) * St).applyfunc(lambda e: sp.cancel(sp.together(e)))
        if not (r.is_zero_matrix and (St.subs(t, 0) - S0).is_zero_matrix):
            return False, "the right side does not solve dSigma/dt = Sigma M(t) Sigma with Sigma(0) = Sigma_0", ""
    return True, (f"at {points} seeded random rational M(tau) = M_0 + tau M_1 + tau^2 M_2 (symmetric) and SPD "
                  "Sigma_0 at d = 2: the integral by SymPy, the result substituted back into dSigma/dt = "
                  "Sigma M(t) Sigma, cancelled to 0 exactly, and Sigma(0) = Sigma_0"), "d = 2"


def _time_dependent_step(Notation):
    """``Σ(t) = (Σ₀⁻¹ - ∫₀ᵗ M(τ) dτ)⁻¹`` when the weights, hence ``M``, depend on ``t`` (:func:`time_dependent_check`
    on the equation's instance :func:`_precision_integral`)."""
    from .equation import Equation, Step

    eq = Equation(Notation("Σ(t)", r"\Sigma(t)"),
                  Notation("(Σ₀⁻¹ - ∫₀ᵗ M(τ) dτ)⁻¹", r"\Big(\Sigma_0^{-1} - \int_0^t M(\tau)\, d\tau\Big)^{-1}"),
                  instance=(_precision_integral,))
    return Step("with time-dependent weights (M depends on t through them)", eq,
                r"the precision equation $d\Sigma^{-1}/dt = -M(t)$ integrated; valid while the bracket is positive "
                r"definite", how=time_dependent_check).check()


def _rand_sym(rng) -> sp.Matrix:
    a, b, c = (sp.Rational(rng.randint(-9, 9), rng.randint(1, 5)) for _ in range(3))
    return sp.Matrix([[a, b], [b, c]])


def model_statement(kinds_: tuple, ffn: bool = False) -> tuple:
    """The model, stated first in every document: the Transformer PDE and the field of each kind (from the
    registry's own description), as sentences (formulas between ``$`` marks, :func:`.printing.words_tex`)."""
    from ..registry import kinds as registry

    out = [r"Tokens $x \in \mathbb{R}^{d}$ evolve with the depth $t$ by $dx/dt = \Gamma_{\mu_t}(x)$; their "
           r"law $\mu_t$ solves the continuity equation $\partial_t \mu_t + \nabla \cdot (\mu_t \Gamma_{\mu_t}) = 0$ "
           r"(Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322)."]
    for k in dict.fromkeys(kinds_):
        spec = registry.get(k)
        out.append(f"{spec.field_tex}." if spec.field_tex else
                   f"{k} attention: Gamma_mu(x) = {spec.field}.")
    if len(kinds_) > 1:
        out.append(r"Several heads $h = 1, 2, \ldots$ (weights $A^{(h)}, V^{(h)}, \ldots$): $\Gamma$ is the sum of "
                   r"the heads' fields.")
    if ffn:
        out.append(r"Feed-forward term: $Wx + c$ is added to $\Gamma$.")
    return tuple(out)


#: the law of the tokens, the hypothesis of every derivation
LAW_ASSUMPTION = (r"$\mu_t = \mathcal{N}(\alpha, \Sigma)$ with $\Sigma$ symmetric positive definite ($\Sigma \succ 0$); "
                  r"all matrices are read at time $t$ (time-dependent weights are allowed).")
#: the conclusion of every affine-field derivation
EXACT_WORDS = (r"The field $\Gamma(x) = b + Jx$ is affine in $x$, so the flow map is affine and "
               r"$\mathcal{N}(\alpha, \Sigma)$ stays Gaussian: the moment ODE is exact, not an approximation.")
#: the tilt hypothesis of a softmax-normalised exponential-quadratic kernel
TILT_ASSUMPTION = (r"A softmax-normalised kernel with $\log k(x, y) = c(x) + y^{\top}Ry + (B^{\top}x + r)^{\top}y$ "
                   r"has a tilted measure $k(x, y)\,\mathcal{N}(y; \alpha, \Sigma)/Z(x)$ that exists, and is the "
                   r"Gaussian $\mathcal{N}(m(x), S)$, iff its precision $\Lambda = \Sigma^{-1} - R - R^{\top} \succ 0$ "
                   r"(positive definite); the derivation holds only there.")


def assumptions_in_words(kinds_: tuple, V_identity: bool = False, A_symmetric: bool = False, rate=None):
    """``(assumptions, conclusions)`` as sentences for the document (not comments; formulas between ``$``
    marks); ``rate``: the constant ``M`` of :func:`constant_precision_rate` when there is one (adds the
    blow-up conclusion)."""
    ass = [LAW_ASSUMPTION]
    from ..registry import kinds as registry
    from .equation import tex

    if any(registry.part(k, "symbolic").log_kernel is not None for k in kinds_):   # softmax-normalised kernels
        ass.append(TILT_ASSUMPTION)
    ass += [registry.get(k).assumption for k in dict.fromkeys(kinds_) if registry.get(k).assumption]
    if V_identity:
        ass.append("Structure given by the user: $V = I$.")
    if A_symmetric:
        ass.append(r"Structure given by the user: $A = A^{\top}$.")
    concl = [EXACT_WORDS]
    from ..registry.theorems import for_kinds, hypotheses_for
    from .known_results import known_result

    concl += [known_result(t, tuple(kinds_), hypotheses_for(t, tuple(kinds_)), V_identity)
              for t in for_kinds(tuple(kinds_))]
    if rate is not None:
        Mt = tex(rate)
        ass.append(r"For the closed form and the blow-up time: the weights are constant in $t$. With time-dependent "
                   r"weights the precision is $\Sigma(t)^{-1} = \Sigma_0^{-1} - \int_0^t M(\tau)\, d\tau$ and the "
                   r"blow-up time is the first zero of $\det(\Sigma_0^{-1} - \int_0^t M)$.")
        concl.append(rf"With this structure and constant weights the precision decreases linearly, "
                     rf"$\Sigma(t)^{{-1}} = \Sigma_0^{{-1}} - tM$ with $M = {Mt}$: the covariance blows up in finite time $T^{{*}} = 1/\lambda_{{\max}}$, "
                     rf"$\lambda_{{\max}}$ the largest eigenvalue of $\Sigma_0 M$, iff $M$ has a positive eigenvalue "
                     rf"($\Sigma_0 M$ is similar to $\Sigma_0^{{1/2}} M \Sigma_0^{{1/2}}$, which by Sylvester's law of "
                     rf"inertia has as many positive eigenvalues as $M$).")
    return tuple(ass), tuple(concl)


__all__ = ["constant_precision_rate", "specialise", "assumptions_in_words", "SPD_NAMES", "check_equal"]
