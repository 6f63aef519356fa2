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
* **upper side, ``T* ≤ t₁ + ρ₁/κ``** (and a second lower bound ``T* ≥ t₁ + ρ₁/κ_max``): with ``N = Σ/tr Σ``,
  ``ρ = 1/tr Σ`` and ``dt/ds = ρ``: ``dN/ds = G(N) = F(N) - N·tr F(N)``, ``dρ/ds = -ρ·tr F(N)`` and
  ``Σ = N/ρ`` solves ``Σ' = F(Σ)``.  If a box ``Z`` of ``N`` (in the eigen-coordinates of ``DG`` at the
  numerically located limit ``N*``) is *proved invariant* (on each face the normal component of ``G``,
  evaluated in intervals over the face, points inward) and ``κ ≤ tr F(N) ≤ κ_max`` on ``Z`` with ``κ > 0``, and
  the enclosure of ``N(t₁)`` lies in ``Z``, then ``ρ(s) ∈ ρ₁[e^{-κ_max(s - s₁)}, e^{-κ(s - s₁)}]`` and
  ``T* - t₁ = ∫ρ ds ∈ [ρ₁/κ_max, ρ₁/κ]``.

Which side is obtained: the lower side for every case; the upper side rarely, so far (``docs/long_time.md``): for
``V = I`` every rank-one ``N`` is a fixed point (``DG(N*)`` has a zero eigenvalue), and for general ``V`` the plain
interval evaluation of the face test overestimates ``G`` far beyond its inward linear part (a centred form is the
missing step).  The certificate says which sides it has.

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
    H = iv.mpf([0, h])
    B = _add(X, _scale(Q.F(X), H))
    for _ in range(6):
        w = max(_width(B), 1e-300)
        # any box will do: the inclusion below is checked in interval arithmetic
        Bi = [[iv.mpf([_lo(a) - 0.5 * w - 1e-300, _hi(a) + 0.5 * w + 1e-300]) for a in r] for r in B]
        nxt = _add(X, _scale(Q.F(Bi), H))
        if _inside(nxt, Bi):
            B = Bi
            break
        B = _hull(iv, Bi, nxt)
    else:
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


def _tail(Q: _Quadratic, pairs, X, t_lo: float, t_hi: float):
    """The certified tail from the enclosure ``X`` of ``Σ(t)``, ``t ∈ [t_lo, t_hi]`` (module docstring):
    ``(lower, upper, note)`` or ``None``."""
    from scipy.integrate import solve_ivp

    iv, d = Q.iv, Q.d
    iu = np.triu_indices(d)
    m = len(iu[0])
    F = lambda S: 2 * (lambda Z: 0.5 * (Z + Z.T))(sum(V @ S @ A @ S for V, A in pairs))  # noqa: E731

    def G(N):
        FN = F(N)
        return FN - N * np.trace(FN)

    Sm = _mid(X)
    N0 = Sm / np.trace(Sm)
    sol = solve_ivp(lambda s, y: G(y.reshape(d, d)).ravel(), (0, 200.0), N0.ravel(), method="DOP853",
                    rtol=1e-12, atol=1e-14)
    Nstar = sol.y[:, -1].reshape(d, d)
    if np.abs(G(Nstar)).max() > 1e-8 or np.trace(F(Nstar)) <= 0:
        return None

    def vec(S):
        return S[iu]

    def mat(v):
        S = np.zeros((d, d))
        S[iu] = v
        S.T[iu] = v
        return S

    J = np.zeros((m, m))
    for j in range(m):
        e = np.zeros(m)
        e[j] = 1e-6
        J[:, j] = (vec(G(Nstar + mat(e))) - vec(G(Nstar - mat(e)))) / 2e-6
    # coordinates z with N - N* = Pz in which DG(N*) is nearly diagonal: the real Schur form J = QTQᵀ scaled by
    # D = diag(δ^i) (D⁻¹TD has its off-diagonal entries multiplied by δ^{j-i}), so that a repeated eigenvalue with
    # a Jordan block (the trace direction and a transverse one share -tr F(N*)) still gives a box whose faces
    # the linear part crosses inward
    from scipy.linalg import schur

    Tm, Qm = schur(J, output="real")
    if np.abs(np.diag(Tm, -1)).max(initial=0.0) > 0:       # complex eigenvalues: rotation, no box
        return None
    lam = np.diag(Tm)
    if lam.max() >= 0:
        return None
    for delta in (1.0, 0.3, 0.1, 0.03, 0.01, 1e-3):
        Dg = delta ** np.arange(m)
        Ts = Tm * Dg[None, :] / Dg[:, None]
        if np.all(np.abs(np.triu(Ts, 1)).sum(axis=1) < 0.5 * np.abs(lam)):
            break
    P = Qm * Dg[None, :]
    Pinv = Qm.T / Dg[:, None]
    iP, iPinv = [[iv.mpf(float(x)) for x in r] for r in P], [[iv.mpf(float(x)) for x in r] for r in Pinv]
    trX = sum((X[i][i] for i in range(1, d)), X[0][0])
    NX = [[a / trX for a in r] for r in X]           # enclosure of N(t)
    diff = [NX[i][j] - float(Nstar[i, j]) for i, j in zip(*iu)]
    z = [sum((iPinv[k][l] * diff[l] for l in range(1, m)), iPinv[k][0] * diff[0]) for k in range(m)]
    zmax = np.array([max(abs(_lo(x)), abs(_hi(x))) for x in z])

    def Gi(Nb):                                      # interval G on an interval matrix
        FN = Q.F(Nb)
        tr = sum((FN[i][i] for i in range(1, d)), FN[0][0])
        return [[FN[i][j] - Nb[i][j] * tr for j in range(d)] for i in range(d)], tr

    def normal(zb, k):                               # the k-th z-component of G over the z-box zb
        v = [sum((iP[r][l] * zb[l] for l in range(1, m)), iP[r][0] * zb[0]) + float(vec(Nstar)[r])
             for r in range(m)]
        Nb = [[None] * d for _ in range(d)]
        for r, (i, j) in enumerate(zip(*iu)):
            Nb[i][j] = Nb[j][i] = v[r]
        g, _ = Gi(Nb)
        gv = [g[i][j] for i, j in zip(*iu)]
        return sum((iPinv[k][l] * gv[l] for l in range(1, m)), iPinv[k][0] * gv[0])

    def face_ok(zb, k, sgn, budget):
        """The face points inward on every piece of a bisection of ``zb`` (the interval evaluation over a
        smaller piece overestimates less); ``budget`` (a one-element list) caps the pieces."""
        gz = normal(zb, k)
        if (sgn > 0 and _hi(gz) < 0) or (sgn < 0 and _lo(gz) > 0):
            return True
        budget[0] -= 1
        if budget[0] <= 0:
            return False
        widths = [(_hi(x) - _lo(x), l) for l, x in enumerate(zb) if l != k]
        _, l = max(widths)
        mid = 0.5 * (_lo(zb[l]) + _hi(zb[l]))
        left, right = list(zb), list(zb)
        left[l], right[l] = iv.mpf([_lo(zb[l]), mid]), iv.mpf([mid, _hi(zb[l])])
        return face_ok(left, k, sgn, budget) and face_ok(right, k, sgn, budget)

    for factor in (1.5, 3.0, 10.0):
        w = np.maximum(factor * zmax, 1e-12)
        ok = True
        for k in range(m):
            for sgn in (-1, 1):
                zb = [iv.mpf([-w[l], w[l]]) for l in range(m)]
                zb[k] = iv.mpf(sgn * w[k])
                if not face_ok(zb, k, sgn, [64 if m <= 3 else 16]):
                    ok = False
                    break
            if not ok:
                break
        if not ok:
            continue
        zb = [iv.mpf([-w[l], w[l]]) for l in range(m)]
        v = [sum((iP[r][l] * zb[l] for l in range(1, m)), iP[r][0] * zb[0]) + float(vec(Nstar)[r]) for r in range(m)]
        Nb = [[None] * d for _ in range(d)]
        for r, (i, j) in enumerate(zip(*iu)):
            Nb[i][j] = Nb[j][i] = v[r]
        _, tr = Gi(Nb)
        if _lo(tr) <= 0:
            continue
        rho = 1 / trX                                 # enclosure of ρ(t)
        lo = t_lo + _lo(rho / tr)         # float sums: the margins of 1 ulp are below the printed digits
        hi = t_hi + _hi(rho / tr)
        note = (f"upper side: a box of N = Σ/tr Σ around N* (|z| ≤ {factor:g}·|z(t₁)| in scaled Schur coordinates of "
                f"DG(N*), eigenvalues {np.array2string(lam, precision=3)}) is invariant (every face's normal "
                f"component of G points inward, interval evaluation) and tr F(N) ∈ [{_lo(tr):.6g}, "
                f"{_hi(tr):.6g}] on it, so T* - t₁ = ∫ρ ds ∈ [ρ₁/κ_max, ρ₁/κ] (t₁ = {t_lo:.12g})")
        return lo, hi, note
    return None


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
    t_lo = t_hi = 0.0                                  # the enclosure X holds Σ(t) for t = t_lo (exact float sum)
    tr0 = float(np.trace(S0))
    steps = 0
    cert = Certificate(0.0, None, None)
    tol = 1e-14
    h_next = None
    last_tail_try = 0.0
    while t_lo < T and time.perf_counter() - t0 < max_seconds:
        Sm = _mid(X)
        cn = _float_coeff_norm(pairs, Sm, ORDER + 1)
        h = min((tol * max(1.0, np.abs(Sm).max()) / max(cn, 1e-300)) ** (1.0 / (ORDER + 1)), T - t_lo)
        if h_next is not None:
            h = min(h, h_next)
        Y = None
        while Y is None and h > 1e-14 * max(1.0, t_lo):
            Y = _validated_step(Q, X, h)
            if Y is None:
                h /= 2
        if Y is None:
            break
        X, t_lo = Y, t_lo + h
        h_next = 2 * h
        steps += 1
        trm = float(np.trace(_mid(X)))
        if _width(X) > 1e-3 * trm:                     # the enclosure lost its meaning: stop here
            break
        # the tail is tried each time tr Σ has grown by 4x beyond 10 tr Σ₀ (each try costs ~1 s at d = 2)
        if trm > max(10 * tr0, 4 * last_tail_try):
            last_tail_try = trm
            got = _tail(Q, pairs, X, t_lo, t_lo)
            if got is not None:
                lo, hi, note = got
                cert.lower, cert.upper = max(lo, t_lo), hi
                cert.sides = [f"lower side: validated Taylor integration (order {ORDER}, a-priori enclosure by "
                              f"Picard iteration, Lagrange remainder) keeps Σ bounded on [0, {t_lo:.12g}]: "
                              f"T* > {t_lo:.12g}", note]
                break
    cert.seconds, cert.steps = time.perf_counter() - t0, steps
    cert.Sigma_enclosure = [[(_lo(a), _hi(a)) for a in r] for r in X]
    if cert.upper is None:
        cert.lower = t_lo
        if t_lo >= T:
            cert.no_blowup_before = T
            cert.sides = [f"validated Taylor integration keeps Σ bounded on [0, T = {T:g}]: no blow-up before T"]
        else:
            cert.sides = [f"lower side only: validated Taylor integration keeps Σ bounded on [0, {t_lo:.12g}] "
                          f"(T* > {t_lo:.12g}); the certified tail was not obtained within {max_seconds:g} s"]
    return cert
