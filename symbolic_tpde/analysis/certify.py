"""Certified blow-up times for softmax covariance flows in small dimension (d ≤ 3): validated integration in
interval arithmetic (mpmath ``iv``), where no theorem gives ``T*``.

The covariance equation of softmax heads is a homogeneous quadratic ``Σ' = F(Σ) = Σ_h V_hΣA_hΣ + ΣA_hᵀΣV_hᵀ``
(README Mathematics §3).  Two certificates, each saying which side it proves:

* **lower side, ``T* > t₁``** (or "no blow-up before ``T``" when ``t₁ = T``): a validated Taylor integration of
  ``Σ' = F(Σ)`` from the exact start.  One step from an interval enclosure ``X`` of ``Σ(t)``:

  1. *a-priori enclosure* (Picard–Lindelöf): a box ``B`` with ``X + [0, h]·F(B) ⊆ B``; then the solution from
     any point of ``X`` exists on ``[t, t + h]`` and stays in ``B``;
  2. *Taylor step with Lagrange remainder*: the Taylor coefficients of a quadratic ODE obey
     ``c₀ = Σ``, ``c_{n+1} = (2/(n+1))·sym(Σ_{i≤n} W_i c_{n-i})`` with ``W_i = Σ_h V_h c_i A_h`` and
     ``sym(Z) = (Z + Zᵀ)/2`` (exactly: ``F(Σ) = 2 sym(Σ_h V_hΣA_hΣ)``), so
     ``Σ(t + h) ∈ Σ_{n≤p} c_n(X) hⁿ + c_{p+1}(B) h^{p+1}`` (the coefficients of an autonomous ODE are functions
     of the state, and the state at the intermediate time lies in ``B``).

  A bounded enclosure on ``[0, t₁]`` proves that the solution exists there: ``T* > t₁``.
* **upper side** (with a second lower bound): with ``N = Σ/tr Σ``, ``ρ = 1/tr Σ`` and ``dt/ds = ρ``:
  ``dN/ds = G(N) = F(N) - N·tr F(N)``, ``dρ/ds = -ρ·tr F(N)`` (``tr N = 1`` is invariant), and
  ``T* - t₁ = ∫_{s₁}^∞ ρ ds``.  From the enclosure of ``N(t₁)``:

  1. the numerically located limit ``N*`` of the N-flow (a fixed point, refined by Newton; a flow that does not
     settle, e.g. a rank-one direction that keeps turning, is refused) and the Lyapunov basis ``P`` of
     ``DG(N*)`` on the tangent space ``{tr = 0}`` (``JᵀL + LJ = -I``, ``L = UΛUᵀ``, ``P = UΛ^{-1/2}``, so that
     ``sym(P⁻¹DG(N*)P) = -½Λ⁻¹``);
  2. the *invariant ball* ``|P⁻¹(N - N*)| ≤ r``: ``G`` is a cubic polynomial, expanded exactly at ``N*``
     (``P⁻¹G(N* + Pw) = c + Kw + T₂[w, w] - w·wᵀMw``); on the sphere ``|w| = r``,
     ``wᵀẇ ≤ r(|c| + μ*r + ‖T₂‖r² + m₃r³)``, every term bounded in interval arithmetic (``μ*`` by Gershgorin
     on ``sym K``); a negative bound proves the ball invariant;
  3. a *tube* carrying ``N`` from ``t₁`` into that ball: validated Taylor steps of ``(N, ρ, t)`` from a float
     centre (order ``NFLOW_ORDER``, Lagrange remainder over a Picard ball), the tube radius growing by
     ``e^{μh}`` per step (``μ`` a bound of the logarithmic norm of ``D(P⁻¹G)`` on that ball, from the same
     expansion at the centre), and the true ``ρ`` within a factor ``e^{±Θ}`` of the centre's
     (``Θ' ≤ |∇ tr F|·radius``);
  4. in the ball ``κ ≤ tr F(N) ≤ κ_max`` with ``κ > 0``, so ``ρ(s) ∈ ρ_K[e^{-κ_max(s - s_K)}, e^{-κ(s - s_K)}]``
     and ``T* ∈ t_K + ρ_K[1/κ_max, 1/κ]``.

Which side is obtained: the lower side for every case; both sides when the N-flow has an attracting fixed point
``N*`` with ``tr F(N*) > 0`` (hyperbolic: ``V = cI`` has a whole curve of rank-one fixed points, ``DG(N*)`` is
singular, and no ball is proved invariant there — the closed form is the theorem rung anyway).  The certificate
says which sides it has and, when it has only one, why.  The mean ``α`` does not enter: for softmax the
covariance equation is closed, and ``α' = V(α + ΣAα)`` is linear in ``α``, so ``(α, Σ)`` and ``Σ`` blow up
together.

Rounding: mpmath ``iv`` rounds every operation outward at ``iv.prec`` = 53 bits; the inputs (float64
weights and ``Σ₀``) are exact binary numbers.  A certificate that cannot be completed in its time budget says
how far it got (a lower bound only, or nothing); it never widens a numerical answer into a "certified" one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Certificate", "certify_blowup", "softmax_pairs"]

#: Taylor order of the validated step
ORDER = 8
#: largest dimension certified (the interval arithmetic is scalar Python: cost ~ d³ per matrix product)
MAX_D = 3


@dataclass
class Certificate:
    """``lower``: ``T* > lower`` proved (validated integration to ``t₁ = lower``, or the tail's lower bound);
    ``upper``: ``T* ≤ upper`` proved (the certified tail) or ``None``; ``no_blowup_before``: ``T`` when the
    enclosure reached the horizon bounded; ``sides``: what each bound proves and how; ``seconds``, ``steps``."""

    lower: float
    upper: float | None
    no_blowup_before: float | None
    sides: list = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0
    Sigma_enclosure: list | None = None

    @property
    def label(self) -> str:
        if self.upper is not None:
            return (f"certified: T* ∈ [{self.lower:.12g}, {self.upper:.12g}] (validated interval integration "
                    f"+ certified tail, mpmath iv, {self.seconds:.2g} s)")
        if self.no_blowup_before is not None:
            return f"certified: no blow-up before T = {self.no_blowup_before:g} (validated interval integration)"
        return f"certified: T* > {self.lower:.12g} (validated interval integration; no certified upper bound)"

    def as_dict(self) -> dict:
        return {"lower": self.lower, "upper": self.upper, "no_blowup_before": self.no_blowup_before,
                "sides": list(self.sides), "seconds": self.seconds, "steps": self.steps, "label": self.label}


def softmax_pairs(weights):
    """``[(V_h, A_h)]`` when every head is softmax (no FFN, no sink): the covariance equation is the
    homogeneous quadratic of the module docstring; ``None`` otherwise."""
    if weights.sink is not None or weights.ffn is not None:
        return None
    out = []
    for h in weights.heads:
        if h.kind != "softmax":
            return None
        out.append((np.asarray(h.effective["V"], float), np.asarray(h.effective["A"], float)))
    return out


# ------------------------------------------------------------------------ interval matrices (lists of iv.mpf)
def _iv():
    from mpmath import iv

    iv.prec = 53
    return iv


def _imat(iv, M):
    return [[iv.mpf(float(x)) for x in row] for row in np.asarray(M, float)]


def _mul(X, Y):
    n, k, m = len(X), len(Y), len(Y[0])
    return [[sum((X[i][l] * Y[l][j] for l in range(1, k)), X[i][0] * Y[0][j]) for j in range(m)] for i in range(n)]


def _add(X, Y):
    return [[a + b for a, b in zip(r, s)] for r, s in zip(X, Y)]


def _scale(X, c):
    return [[a * c for a in r] for r in X]


def _sym(X):
    n = len(X)
    return [[(X[i][j] + X[j][i]) / 2 for j in range(n)] for i in range(n)]


def _zero(iv, d):
    return [[iv.mpf(0) for _ in range(d)] for _ in range(d)]


class _Quadratic:
    """``F(Σ) = 2 sym(Σ_h V_hΣA_hΣ)`` in interval arithmetic, its Taylor coefficients and ``tr F``."""

    def __init__(self, iv, pairs, d):
        self.iv, self.d = iv, d
        self.pairs = [(_imat(iv, V), _imat(iv, A)) for V, A in pairs]

    def W(self, X):
        out = None
        for V, A in self.pairs:
            t = _mul(_mul(V, X), A)
            out = t if out is None else _add(out, t)
        return out

    def F(self, X):
        return _scale(_sym(_mul(self.W(X), X)), 2)

    def taylor(self, X, p):
        """``[c₀ … c_p]`` at the (interval) state ``X``."""
        c, W = [X], [self.W(X)]
        for n in range(p):
            acc = None
            for i in range(n + 1):
                t = _mul(W[i], c[n - i])
                acc = t if acc is None else _add(acc, t)
            c.append(_scale(_sym(acc), self.iv.mpf(2) / (n + 1)))
            W.append(self.W(c[-1]))
        return c


def _lo(a) -> float:      # the endpoints of a 53-bit interval are float64 numbers: exact
    return float(a.a)


def _hi(a) -> float:
    return float(a.b)


def _hull(iv, X, Y):
    return [[iv.mpf([min(_lo(a), _lo(b)), max(_hi(a), _hi(b))]) for a, b in zip(r, s)] for r, s in zip(X, Y)]


def _inside(X, B) -> bool:
    return all(_lo(a) > _lo(b) and _hi(a) < _hi(b) for r, s in zip(X, B) for a, b in zip(r, s))


def _width(X) -> float:
    return max(_hi(a) - _lo(a) for r in X for a in r)


def _mid(X) -> np.ndarray:
    return np.array([[0.5 * (_lo(a) + _hi(a)) for a in r] for r in X])


def _validated_step(Q: _Quadratic, X, h: float):
    """One validated step of length ``h`` from the enclosure ``X``; ``None`` when no a-priori enclosure was
    found (the caller halves ``h``)."""
    iv = Q.iv
    B = _picard(iv, Q.F, X, h)
    if B is None:
        return None
    c = Q.taylor(X, ORDER)
    hh = iv.mpf(h)
    out = c[ORDER]
    for n in range(ORDER - 1, -1, -1):             # Horner
        out = _add(c[n], _scale(out, hh))
    rem = Q.taylor(B, ORDER + 1)[ORDER + 1]
    return _add(out, _scale(rem, hh ** (ORDER + 1)))


def _float_coeff_norm(pairs, S, p):
    """``‖c_p‖`` of the Taylor series at the float point ``S`` (the step-size rule)."""
    W = lambda X: sum(V @ X @ A for V, A in pairs)  # noqa: E731
    c, Ws = [S], [W(S)]
    for n in range(p):
        acc = sum(Ws[i] @ c[n - i] for i in range(n + 1))
        c.append(2.0 / (n + 1) * 0.5 * (acc + acc.T))
        Ws.append(W(c[-1]))
    return float(np.abs(c[p]).max())


# ------------------------------------------------------------- the tangent space {tr N = 1} of the N-flow
def _tangent_basis(d):
    """A basis ``E_k`` of the trace-free symmetric matrices, one per coordinate of :func:`_coords`: ``N_ij``
    (``i < j``, ``E = e_ie_jᵀ + e_je_iᵀ``) and ``N_ii`` (``i < d - 1``, ``E = e_ie_iᵀ - e_{d-1}e_{d-1}ᵀ``); a
    symmetric ``N`` with ``tr N = 1`` is ``N* + Σ_k (y - y*)_k E_k``, ``y = _coords(N)``."""
    out = []
    for i, j in _coord_index(d):
        E = np.zeros((d, d))
        if i == j:
            E[i, i], E[d - 1, d - 1] = 1.0, -1.0
        else:
            E[i, j] = E[j, i] = 1.0
        out.append(E)
    return out


def _coord_index(d):
    return [(i, j) for i in range(d) for j in range(i, d) if (i, j) != (d - 1, d - 1)]


def _coords(N):
    d = len(N)
    return [N[i][j] for i, j in _coord_index(d)]


def _from_coords(basis, v):
    return sum(x * E for x, E in zip(v, basis))


def _from_coords_iv(iv, basis, y, d):
    """The symmetric interval matrix with coordinates ``y`` and trace exactly 1."""
    N = [[None] * d for _ in range(d)]
    for x, (i, j) in zip(y, _coord_index(d)):
        N[i][j] = N[j][i] = x
    N[d - 1][d - 1] = 1 - sum((N[i][i] for i in range(d - 1)), iv.mpf(0))
    return N


def _matvec(M, v):
    return [sum((M[i][l] * v[l] for l in range(1, len(v))), M[i][0] * v[0]) for i in range(len(M))]


def _trace(X):
    return sum((X[i][i] for i in range(1, len(X))), X[0][0])


def _enclose_inverse(iv, P):
    """An interval matrix holding ``P⁻¹`` (``P`` a float matrix): with ``Y ≈ P⁻¹`` and ``R = I - YP`` (interval),
    ``P⁻¹ = (I - R)⁻¹Y`` differs from ``Y`` entrywise by at most ``‖R‖∞/(1 - ‖R‖∞)·‖Y‖∞``."""
    Y = np.linalg.inv(P)
    m = len(P)
    iY, iPm = _imat(iv, Y), _imat(iv, P)
    YP = _mul(iY, iPm)
    nR = max(sum(max(abs(_lo((1 if i == j else 0) - YP[i][j])), abs(_hi((1 if i == j else 0) - YP[i][j])))
                 for j in range(m)) for i in range(m))
    if not nR < 0.5:
        return None
    nR = iv.mpf(nR)
    e = _hi(nR / (1 - nR) * iv.mpf(float(np.abs(Y).sum(axis=1).max())) * iv.mpf(1 + 1e-15))
    return [[a + iv.mpf([-e, e]) for a in r] for r in iY]


def _mid1(a) -> float:
    return 0.5 * (_lo(a) + _hi(a))


def _adapted_basis(J):
    """A basis ``P`` in which ``sym(P⁻¹JP)`` is diagonal and negative (``J`` with eigenvalues in the open left
    half-plane), or ``None``: the Lyapunov matrix ``L ≻ 0`` of ``JᵀL + LJ = -I``, ``L = UΛUᵀ``, ``P = UΛ^{-1/2}``
    gives ``sym(P⁻¹JP) = ½Λ^{-1/2}Uᵀ(LJ + JᵀL)UΛ^{-1/2} = -½Λ⁻¹``: the ball ``|P⁻¹e| ≤ r`` is the level set of
    the quadratic Lyapunov function ``eᵀLe`` (repeated, defective and complex eigenvalues included)."""
    from scipy.linalg import solve_continuous_lyapunov

    ev = np.linalg.eigvals(J)
    if not np.all(np.isfinite(ev)) or ev.real.max() >= -1e-12 * max(1.0, float(np.abs(ev).max())):
        return None          # not Hurwitz (e.g. V = cI: DG(N*) is singular): no Lyapunov ball to build
    L = solve_continuous_lyapunov(J.T, -np.eye(len(J)))
    L = 0.5 * (L + L.T)
    w, U = np.linalg.eigh(L)
    if not np.all(np.isfinite(w)) or w.min() <= 0 or w.max() / w.min() > 1e12:
        return None
    return U / np.sqrt(w)[None, :]


def _tail(Q: _Quadratic, pairs, X, t1, deadline: float, max_steps: int = 2000):
    """The certified tail from the enclosure ``X`` of ``Σ(t₁)``, ``t₁`` an interval (module docstring):
    ``(lower, upper, note)``, or ``(None, reason)`` when no invariant ball was proved."""
    from scipy.integrate import solve_ivp

    iv, d = Q.iv, Q.d
    basis = _tangent_basis(d)
    m = len(basis)
    Wf = lambda S: sum(V @ S @ A for V, A in pairs)  # noqa: E731
    Ff = lambda S: (lambda Z: Z + Z.T)(Wf(S) @ S)  # noqa: E731

    def Gf(N):
        FN = Ff(N)
        return FN - N * np.trace(FN)

    def DGf(N):                                      # the tangent Jacobian of G at N (float)
        FN = Ff(N)
        cols = []
        for E in basis:
            DF = (lambda Z: Z + Z.T)(Wf(E) @ N + Wf(N) @ E)
            cols.append(_coords(DF - E * np.trace(FN) - N * np.trace(DF)))
        return np.array(cols).T

    Sm = _mid(X)
    N0 = Sm / np.trace(Sm)
    sol = solve_ivp(lambda s, y: Gf(y.reshape(d, d)).ravel(), (0, 2000.0), N0.ravel(), method="LSODA",
                    rtol=1e-12, atol=1e-14)
    Nstar = sol.y[:, -1].reshape(d, d)
    Nstar = 0.5 * (Nstar + Nstar.T)
    Nstar /= np.trace(Nstar)
    for _ in range(3):                               # Newton on the tangent coordinates
        try:
            Nstar = Nstar - _from_coords(basis, np.linalg.solve(DGf(Nstar), _coords(Gf(Nstar))))
        except np.linalg.LinAlgError:
            return None, "the Jacobian of the N-flow is singular at the limit N*"
    if not np.all(np.isfinite(Nstar)) or np.abs(Gf(Nstar)).max() > 1e-10:
        return None, "the N-flow from N(t₁) did not settle at a fixed point N*"
    if np.trace(Ff(Nstar)) <= 0:
        return None, "tr F(N*) ≤ 0 at the limit N*: no blow-up rate"
    J = DGf(Nstar)
    lam = np.linalg.eigvals(J)
    if lam.real.max() >= 0:
        return None, f"N* is not attracting (eigenvalues of DG(N*): {np.array2string(lam, precision=3)})"
    P = _adapted_basis(J)
    if P is None:
        return None, f"no Lyapunov basis for DG(N*) (eigenvalues {np.array2string(lam, precision=3)})"
    iP = _imat(iv, P)
    iPinv = _enclose_inverse(iv, P)
    if iPinv is None:
        return None, "the inverse of the eigenbasis was not enclosed"
    ystar = np.array(_coords(Nstar))                 # N* is a float matrix, not an exact fixed point: |ĝ| ≠ 0

    def ball_box(yc, R):                             # the box y_c + P[-R, R]^m ⊇ {y : |P⁻¹(y - y_c)| ≤ R}
        zb = [iv.mpf([-R, R]) for _ in range(m)]
        return [iv.mpf(float(yc[i])) + _matvec([iP[i]], zb)[0] for i in range(m)]

    # G(N̂ + e) = G(N̂) + J(N̂)e + Q₂(e, e) + C₃(e) exactly (G is a cubic polynomial), with the symmetric bilinear
    # B(X, Y) = sym(W(X)Y + W(Y)X) (F(N) = B(N, N)): J(N̂)e = 2B(N̂, e) - e τ̂ - 2N̂ tr B(N̂, e),
    # Q₂(X, Y) = B(X, Y) - X tr B(N̂, Y) - Y tr B(N̂, X) - N̂ tr B(X, Y), C₃(e) = -e tr B(e, e).  In the metric
    # of P (e = Pw, coords(e) = Pw exactly): P⁻¹G(N̂ + Pw) = ĝ + Kw + T₂[w, w] - w·wᵀMw with K = P⁻¹J(N̂)P,
    # M_ab = tr B(E_a, E_b) (E_a the matrix of the column P e_a) and T₂[k, a, b] = (P⁻¹Q₂(E_a, E_b))_k
    def Bil(X, Y):
        return _sym(_add(_mul(Q.W(X), Y), _mul(Q.W(Y), X)))

    Ea = [_from_coords_iv(iv, basis, [iP[i][a] for i in range(m)], d) for a in range(m)]
    for E in Ea:                                     # trace-free directions: undo the "trace 1" of the helper
        E[d - 1][d - 1] = E[d - 1][d - 1] - 1
    Bab = {(a, b): Bil(Ea[a], Ea[b]) for a in range(m) for b in range(a, m)}
    Mq = [[_trace(Bab[min(a, b), max(a, b)]) for b in range(m)] for a in range(m)]
    Mn = _frob_hi(Mq)                                # ‖M‖₂ ≤ ‖M‖_F
    m3 = max(_lognorm_hi([[-x for x in row] for row in Mq]), 0.0)    # -wᵀMw ≤ m₃|w|²

    def expand(yc):
        """At the centre with coordinates ``yc`` (floats): ``|ĝ|``, ``K``, ``‖T₂‖_F``, the gradient of
        ``tr F`` in ``w`` (``tr F(N̂ + Pw) = τ̂ + vᵀw + wᵀMw``) and ``τ̂``, all enclosed."""
        Nh = _from_coords_iv(iv, basis, [iv.mpf(float(x)) for x in yc], d)
        FN = Q.F(Nh)
        tau = _trace(FN)
        g = _matvec(iPinv, _coords([[FN[i][j] - Nh[i][j] * tau for j in range(d)] for i in range(d)]))
        trBN = [_trace(Bil(Nh, E)) for E in Ea]
        Kc = []
        for a, E in enumerate(Ea):
            BE = Bil(Nh, E)
            Kc.append(_matvec(iPinv, _coords([[2 * BE[i][j] - E[i][j] * tau - 2 * Nh[i][j] * trBN[a]
                                               for j in range(d)] for i in range(d)])))
        K = [[Kc[b][k] for b in range(m)] for k in range(m)]
        T2 = 0.0
        for (a, b), Bm in Bab.items():
            Q2 = [[Bm[i][j] - Ea[a][i][j] * trBN[b] - Ea[b][i][j] * trBN[a] - Nh[i][j] * Mq[a][b]
                   for j in range(d)] for i in range(d)]
            T2 += (1 if a == b else 2) * _norm_hi(_matvec(iPinv, _coords(Q2))) ** 2
        return _norm_hi(g), K, math.sqrt(T2) * (1 + 1e-12), [2 * x for x in trBN], tau

    cnorm, Kstar, T2star, vstar, taustar = expand(ystar)
    mu_star = _lognorm_hi(Kstar)

    def invariant(r):
        """``(tr F over the ball, bound)`` when the ball ``|P⁻¹(y - y*)| ≤ r`` is proved invariant with
        ``tr F ≥ κ > 0`` on it, else ``(None, reason)``: on its boundary
        ``wᵀẇ ≤ r(|ĝ| + μ*r + ‖T₂‖r² + m₃r³) < 0``."""
        bound = cnorm + mu_star * r + T2star * r * r + m3 * r ** 3
        if not bound * (1 + 1e-9) < 0:
            return None, (f"the ball |z| ≤ {r:.3g} is not proved invariant (|c| + μ*r + ‖T₂‖r² + m₃r³ = "
                          f"{bound:.3g}, μ* = {mu_star:.3g}, ‖T₂‖ = {T2star:.3g}, m₃ = {m3:.3g})")
        trF = taustar + iv.mpf([-1, 1]) * (_norm_hi(vstar) * r + Mn * r * r)
        if _lo(trF) <= 0:
            return None, f"tr F(N) is not bounded away from 0 on the ball |z| ≤ {r:.3g}"
        return trF, bound

    # the largest proved-invariant ball among r = 2^(-k/2)
    r_star, reason = None, "no ball around N* was proved invariant"
    for k in range(2, 80):
        got = invariant(2.0 ** (-k / 2))
        if got[0] is not None:
            r_star = 2.0 ** (-k / 2)
            break
        reason = got[1]
    if r_star is None:
        return None, reason
    # the tube: N(s) ∈ ball(ŷ, R) in the metric |P⁻¹·|, the centre ŷ carried by validated Taylor steps of the
    # N-flow with ρ and t alongside.  Per step h, from the expansion at ŷ: an a-priori ball R_B ≥ R + h·sup|P⁻¹G|
    # (Picard), a log-norm bound μ ≥ μ(K) + 2‖T₂‖R_B + 3‖M‖R_B² of D(P⁻¹G) on it, so R grows by e^{μh}; the true
    # ρ differs from the centre's by a factor e^{±Θ}, Θ' ≤ (|v| + 2‖M‖R_B)·R
    trX = _trace(X)
    NX = [[a / trX for a in r] for r in X]           # encloses N(t₁) (its trace is exactly 1)
    yX = _coords(NX)
    yc = np.array([_mid1(a) for a in yX])
    R = _norm_hi(_matvec(iPinv, [a - float(b) for a, b in zip(yX, yc)]))
    rho1 = 1 / trX
    rho_c = iv.mpf(_mid1(rho1))                      # the centre's ρ (an exact float start)
    Theta = max(math.log(_hi(rho1) / _lo(rho_c)), math.log(_hi(rho_c) / _lo(rho1)), 0.0) * (1 + 1e-12)
    t_iv = t1
    steps = extra = 0
    h_prev = None
    while True:
        dist = _norm_hi(_matvec(iPinv, [iv.mpf(float(a)) - float(b) for a, b in zip(yc, ystar)]))
        if dist + R < r_star:
            # inside the invariant ball: go on while the tail's share of the enclosure, ρ(1/κ - 1/κ_max), is
            # not small against the width accumulated so far (ρ decays like e^{-κs}; a few dozen steps)
            rr = dist + R
            kap = taustar + iv.mpf([-1, 1]) * (_norm_hi(vstar) * rr + Mn * rr * rr)
            share = _hi(rho_c) * (1 / _lo(kap) - 1 / _hi(kap)) if _lo(kap) > 0 else math.inf
            if share <= 1e-2 * (_hi(t_iv) - _lo(t_iv)) + 1e-15 or extra >= 200 or time.perf_counter() > deadline:
                break
            extra += 1
        if steps >= max_steps or time.perf_counter() > deadline or not R < 0.05:
            return None, (f"the tube from N(t₁) did not reach the invariant ball |z| ≤ {r_star:.3g} around N* "
                          f"(distance {dist:.3g}, radius {R:.3g} after {steps} steps)")
        gn, K, T2, v, tau = expand(yc)
        Kn, muK, vn = _frob_hi(K), _lognorm_hi(K), _norm_hi(v)
        h = _nflow_step_size(pairs, np.array(_from_coords(basis, yc - ystar) + Nstar), max(1e-15, 1e-5 * r_star))
        if h_prev is not None:
            h = min(h, 2 * h_prev)
        # the log-norm bound grows by 2‖T₂‖R_B over the step's motion R_B ≈ R + h|ĝ|: keep that excess ≤ 0.3
        h = min(h, 0.3 / (3 * T2 * gn + 1e-300))
        for _ in range(12):
            RB = None
            while RB is None and h > 1e-6:
                cand = 1.5 * (R + h * gn) + 1e-300
                for _ in range(8):
                    nxt = R + h * (gn + Kn * cand + T2 * cand ** 2 + Mn * cand ** 3)
                    if nxt * (1 + 1e-9) < cand:
                        RB = cand
                        break
                    cand = 1.5 * nxt
                    if not cand < 1.0:                  # diverging: a smaller step
                        break
                if RB is None:
                    h /= 2
            if RB is None:
                return None, f"no a-priori enclosure of the N-flow was found (tube radius {R:.3g}, {steps} steps)"
            mu = muK + 2 * T2 * RB + 3 * Mn * RB * RB
            lip = vn + 2 * Mn * RB
            trFB = tau + iv.mpf([-1, 1]) * (vn * RB + Mn * RB * RB)
            Nc = _from_coords_iv(iv, basis, [iv.mpf(float(a)) for a in yc], d)
            B = _from_coords_iv(iv, basis, ball_box(yc, RB), d)
            # ρ = ρ_c·u with u(0) = 1 exactly: the series of u carries no width of ρ_c (no dependency blow-up)
            Y, u, du = _nflow_taylor(Q, Nc, iv.mpf(1), B, iv.exp(-iv.mpf([0, h]) * trFB), h)
            yY = _coords(Y)
            yn = np.array([_mid1(a) for a in yY])
            added = _norm_hi(_matvec(iPinv, [a - float(b) for a, b in zip(yY, yn)]))
            if added <= max(1e-14, 0.02 * h * R, 1e-3 * h * r_star):   # small against the tube and the ball
                break
            h /= 2
        h_prev = h
        grow = _hi(iv.exp(iv.mpf(max(mu, 0.0) * h)))
        Theta = _hi(iv.mpf(Theta) + iv.mpf(h) * lip * R * grow)
        t_iv = t_iv + rho_c * du * iv.exp(iv.mpf([-Theta, Theta]))
        rho_c = rho_c * u
        yc = yn
        R = _hi(iv.mpf(R) * iv.exp(iv.mpf(mu * h))) + added
        steps += 1
    # the smallest proved-invariant ball holding the tube's end gives the tightest κ
    r, trF = None, None
    for f in (1.05, 1.5, 3.0):
        rr = min(f * (dist + R), r_star)
        got = invariant(rr)
        if got[0] is not None:
            r, trF = rr, got[0]
            break
    if r is None:
        r, trF = r_star, invariant(r_star)[0]
    rho_end = rho_c * iv.exp(iv.mpf([-Theta, Theta]))
    Tstar = t_iv + rho_end / trF
    note = (f"upper side: with N = Σ/tr Σ, ρ = 1/tr Σ, dt/ds = ρ (dN/ds = G(N) = F(N) - N tr F(N), dρ/ds = "
            f"-ρ tr F(N)), a tube of {steps} validated Taylor steps of the N-flow (radius by the logarithmic norm "
            f"of DG) carries N from t₁ = {_lo(t1):.12g} into the ball |z| ≤ {r:.3g} around the limit N*, "
            f"z = P⁻¹(N - N*) in the Lyapunov basis of DG(N*) (eigenvalues {np.array2string(lam, precision=3)}); "
            f"the ball is invariant: zᵀdz/ds ≤ r(|c| + μ*r + ‖T₂‖r² + m₃r³) < 0 on its boundary |z| = r (the exact "
            f"cubic expansion of G at N*: c = P⁻¹G(N*), μ* a Gershgorin bound of the logarithmic norm of "
            f"P⁻¹DG(N*)P, ‖T₂‖ and m₃ bounds of the quadratic and cubic terms, all in interval arithmetic), and "
            f"tr F(N) ∈ [{_lo(trF):.6g}, {_hi(trF):.6g}] on it, so the remaining T* - t = ∫ρ ds ∈ [ρ/κ_max, ρ/κ]")
    return _lo(Tstar), _hi(Tstar), note


def _norm_hi(v) -> float:
    """An upper bound of the Euclidean norm of an interval vector."""
    return math.sqrt(sum(max(abs(_lo(a)), abs(_hi(a))) ** 2 for a in v)) * (1 + 1e-12)


def _frob_hi(K) -> float:
    """An upper bound of the Frobenius norm (≥ the 2-norm) of an interval matrix."""
    return math.sqrt(sum(max(abs(_lo(a)), abs(_hi(a))) ** 2 for r in K for a in r)) * (1 + 1e-12)


def _lognorm_hi(K) -> float:
    """An upper bound of the logarithmic 2-norm ``λ_max(sym K)`` over the interval matrix ``K`` (Gershgorin)."""
    S = _sym(K)
    m = len(S)
    return max(_hi(S[i][i]) + sum(max(abs(_lo(S[i][l])), abs(_hi(S[i][l]))) for l in range(m) if l != i)
               for i in range(m)) * (1 + 1e-12) + 1e-300


def _picard(iv, G, X, h):
    """A box ``B`` with ``X + [0, h]·G(B) ⊆ B`` (then every solution from ``X`` stays in ``B`` on ``[0, h]``)."""
    H = iv.mpf([0, h])
    B = _add(X, _scale(G(X), H))
    for _ in range(6):
        w = max(_width(B), 1e-300)
        Bi = [[iv.mpf([_lo(a) - 0.5 * w - 1e-300, _hi(a) + 0.5 * w + 1e-300]) for a in r] for r in B]
        nxt = _add(X, _scale(G(Bi), H))
        if _inside(nxt, Bi):
            return Bi
        B = _hull(iv, Bi, nxt)
    return None


def _nflow_series(Q: _Quadratic, N, rho, p):
    """Taylor coefficients (in s) of ``N``, ``ρ`` and ``t`` for ``dN/ds = F(N) - N tr F(N)``,
    ``dρ/ds = -ρ tr F(N)``, ``dt/ds = ρ``: ``F_k = 2 sym(Σ_{i≤k} W(n_i)n_{k-i})``, ``τ_k = tr F_k``,
    ``(k+1)n_{k+1} = F_k - Σ_i n_i τ_{k-i}``, ``(k+1)r_{k+1} = -Σ_i r_i τ_{k-i}``, ``(k+1)t_{k+1} = r_k``."""
    n, W, r, tau, tc = [N], [Q.W(N)], [rho], [], [0]
    for k in range(p):
        acc = _mul(W[0], n[k])
        for i in range(1, k + 1):
            acc = _add(acc, _mul(W[i], n[k - i]))
        Fk = _scale(_sym(acc), 2)
        tau.append(_trace(Fk))
        Gk = Fk
        for i in range(k + 1):
            Gk = _add(Gk, _scale(n[i], -tau[k - i]))
        n.append(_scale(Gk, Q.iv.mpf(1) / (k + 1)))
        W.append(Q.W(n[-1]))
        r.append(-sum((r[i] * tau[k - i] for i in range(1, k + 1)), r[0] * tau[k]) / (k + 1))
        tc.append(r[k] / (k + 1))
    return n, r, tc


#: Taylor order of the N-flow steps
NFLOW_ORDER = 6


def _nflow_taylor(Q, Nc, rho_c, B, rho_B, h):
    """One validated step of length ``h`` of ``(N, ρ, t)`` from the centre ``(Nc, rho_c, 0)``; ``B``, ``rho_B``
    enclose ``N`` and ``ρ`` on the step (Lagrange remainder).  Returns ``(N(h), ρ(h), t(h) - t(0))``."""
    iv, p = Q.iv, NFLOW_ORDER
    n, r, tc = _nflow_series(Q, Nc, rho_c, p)
    nB, rB, tB = _nflow_series(Q, B, rho_B, p + 1)
    hh = iv.mpf(h)
    N, rho, t = _scale(nB[p + 1], hh), rB[p + 1] * hh, tB[p + 1] * hh
    for k in range(p, -1, -1):                       # Horner, the remainder as the top coefficient
        N, rho, t = _add(n[k], _scale(N, hh)), r[k] + rho * hh, tc[k] + t * hh
    return N, rho, t


def _nflow_step_size(pairs, N, tol: float = 1e-15) -> float:
    """The step in s at which the last Taylor term of the N-flow is ~1e-15 (float coefficients)."""
    W = lambda X: sum(V @ X @ A for V, A in pairs)  # noqa: E731
    n, Ws, tau = [N], [W(N)], []
    for k in range(NFLOW_ORDER + 1):
        acc = sum(Ws[i] @ n[k - i] for i in range(k + 1))
        Fk = acc + acc.T
        tau.append(np.trace(Fk))
        n.append((Fk - sum(n[i] * tau[k - i] for i in range(k + 1))) / (k + 1))
        Ws.append(W(n[-1]))
    return min(0.5, (tol / max(np.abs(n[-1]).max(), 1e-300)) ** (1.0 / (NFLOW_ORDER + 1)))


def certify_blowup(weights, Sigma0, T: float, *, max_seconds: float = 10.0, T_hint: float | None = None):
    """A :class:`Certificate` for the softmax covariance flow of ``weights`` from ``Sigma0`` on ``[0, T]``
    (module docstring), or ``None`` when the weights are not softmax-only or ``d > MAX_D``.  ``T_hint``: a
    numerical ``T*`` (unused by the proof; kept for the caller's record)."""
    pairs = softmax_pairs(weights)
    S0 = np.asarray(Sigma0, float)
    d = S0.shape[0]
    if pairs is None or d > MAX_D:
        return None
    iv = _iv()
    Q = _Quadratic(iv, pairs, d)
    t0 = time.perf_counter()
    X = _imat(iv, S0)
    t_iv = iv.mpf(0)                                   # the enclosure X holds Σ(t) for the exact t = Σ h ∈ t_iv
    reached = False                                    # the exact t is ≥ T
    tr0 = float(np.trace(S0))
    steps = 0
    cert = Certificate(0.0, None, None)
    tol = 1e-14
    h_next = None
    last_tail_try = 0.0
    tail_reason = None
    stop = f"the time budget of {max_seconds:g} s ran out"
    while not reached and time.perf_counter() - t0 < max_seconds:
        Sm = _mid(X)
        cn = _float_coeff_norm(pairs, Sm, ORDER + 1)
        h_end = _hi(T - t_iv)                           # a step of h_end takes every t in t_iv to ≥ T
        h = min((tol * max(1.0, np.abs(Sm).max()) / max(cn, 1e-300)) ** (1.0 / (ORDER + 1)), h_end)
        if h_next is not None:
            h = min(h, h_next)
        Y = None
        while Y is None and h > 1e-14 * max(1.0, _hi(t_iv)):
            Y = _validated_step(Q, X, h)
            if Y is None:
                h /= 2
        if Y is None:
            stop = f"no validated step was found at t = {_lo(t_iv):.6g}"
            break
        X, t_iv = Y, t_iv + h
        reached = h == h_end
        h_next = 2 * h
        steps += 1
        trm = float(np.trace(_mid(X)))
        if _width(X) > 1e-3 * trm:                     # the enclosure lost its meaning: stop here
            stop = f"the enclosure's width reached 1e-3 tr Σ at t = {_lo(t_iv):.6g}"
            break
        # the tail is tried each time tr Σ has grown by 4x beyond 10 tr Σ₀ (a try costs ~10 ms at d = 3)
        if not reached and trm > max(10 * tr0, 4 * last_tail_try):
            last_tail_try = trm
            try:
                got = _tail(Q, pairs, X, t_iv, t0 + max_seconds)
            except (ArithmeticError, ValueError, np.linalg.LinAlgError) as exc:    # no claim, and why
                got = (None, f"the tail's computation failed ({type(exc).__name__}: {exc})")
            if got[0] is not None:
                lo, hi, note = got
                t1 = _lo(t_iv)
                cert.lower, cert.upper = max(lo, t1), hi
                cert.sides = [f"lower side: validated Taylor integration (order {ORDER}, a-priori enclosure by "
                              f"Picard iteration, Lagrange remainder) keeps Σ bounded on [0, {t1:.12g}]: "
                              f"T* > {t1:.12g}", note]
                break
            tail_reason = got[1]
    cert.seconds, cert.steps = time.perf_counter() - t0, steps
    cert.Sigma_enclosure = [[(_lo(a), _hi(a)) for a in r] for r in X]
    if cert.upper is None:
        t1 = _lo(t_iv)
        if reached:
            cert.lower = cert.no_blowup_before = float(T)
            cert.sides = [f"validated Taylor integration keeps Σ bounded on [0, T = {T:g}]: no blow-up before T"]
        else:
            cert.lower = t1
            why = f" (last try: {tail_reason})" if tail_reason else ""
            cert.sides = [f"lower side only: validated Taylor integration keeps Σ bounded on [0, {t1:.12g}] "
                          f"(T* > {t1:.12g}); no certified upper bound: {stop}{why}"]
    return cert
