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
    out.append(step(f"with {words}: the covariance equation", mf.Sigma_dot.xreplace(rep), S_dot,
                    f"the user's structure ({words}) substituted and simplified", symmetric=sym))
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
    out.append(step("closed-form solution (integrate the precision equation)", Shown("Sigma(t)", r"\Sigma(t)"),
                    sol, "valid while Sigma_0^-1 - t(A + A^T) stays positive definite", check=ode_check))

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
