"""Witnesses that an attention variant does not preserve Gaussians (README, Mathematics §3, last items).

Gaussians are preserved when the field ``Γ_μ(x)`` is affine in ``x`` for ``μ = N(α, Σ)``.  A witness is a
concrete, certified non-zero value of ``∂²Γ/∂x²`` in ``d = 1``:

* **unnormalised softmax**, ``Γ(x) = v ∫ y e^{axy} N(y; α, s) dy``.  With ``c = ax`` the integral is
  ``∂_c E[e^{cy}]`` and ``E[e^{cy}] = exp(cα + ½c²s)`` (the Gaussian moment generating function), so
  ``Γ(x) = v(α + sax) exp(axα + ½a²x²s)``, not affine; ``Γ''`` is evaluated at a point.
* **sigmoid**, ``Γ(x) = v ∫ σ(axy + b) y N(y; α, s) dy`` (no closed form).  Differentiating under the
  integral, ``Γ''(0) = v a² σ''(b) E[y³]`` and ``E[y³] = α³ + 3αs`` from the moment generating function: not
  zero unless ``b = 0`` or ``α(α² + 3s) = 0``.
* **masked (causal)**: the state is a law on ``[0, 1] × R`` (position ``u``, uniform).  If the token law does
  *not* depend on position (``x | u ~ N(α, s)`` for all ``u``) and there is no sink, the causal restriction
  only rescales the key measure, the masked field equals the softmax field and Gaussians *are* preserved (the
  code checks this: ``Γ'' ≡ 0`` when ``δ = 0``).  Two witnesses of non-preservation:

  - position-dependent Gaussian tokens, ``x | u ~ N(α + δu, s)``: a query at position ``q`` sees the mixture
    of ``N(α + δu, s)`` over ``u ≤ q``: ``Γ(q, x) = v(α + sax + δ E_w[u])``, ``w(u) ∝ e^{axδu}`` on
    ``[0, q]``, not affine (:func:`masked_witness`; unmasked softmax fails on such data too);
  - an attention sink (``symbolic_tpde.weights.Sink``, as the particle code defines it: one extra key ``x_s``
    of prior weight ``m₀``, tokens sharing ``1 - m₀``), tokens i.i.d. ``N(α, s)`` independent of position:
    ``Γ(q, x) = v [m₀e^{a x x_s} x_s + (1-m₀) q Z(x) m(x)] / [m₀e^{a x x_s} + (1-m₀) q Z(x)]`` with
    ``Z(x) = E[e^{axy}]``, ``Z m = ∂_c E[e^{cy}]`` at ``c = ax`` -- not affine, and different at every
    position ``q``, so the ``x``-marginal becomes a mixture (:func:`masked_sink_witness`).

**What a witness proves.**  ``Γ'' ≠ 0`` shows that the field is not affine.  In ``d = 1`` that proves
non-preservation (:data:`D1_LEMMA`); in ``d ≥ 2`` it does not (``Jx|x|²``, ``J`` a quarter turn, is not affine
and leaves ``N(0, I)`` invariant).  The sound certificate in any ``d`` (MATH.md §3) is a non-zero rate of
change at ``t = 0`` of a third or fourth cumulant of ``u·X_t`` (:func:`cumulant_rates`, exact for polynomial
fields; :func:`sigmoid_certificate` and :func:`softmax_unnormalized_certificate` for the built-in kinds, with
the lemma :data:`CUMULANT_LEMMA`).

Each value is computed twice by independent routes -- the SymPy expression evaluated with ``evalf`` at 30
digits, and an mpmath quadrature of the integral definition (differentiated under the integral sign, or
differentiated numerically for the masked case) -- and the sign counts as certified when ``|value|`` exceeds
``1e6`` times their disagreement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import sympy as sp

from ..errors import NotGaussianPreserving  # noqa: F401  (re-exported: raised with a Witness)
from ..registry import kinds as _kinds


@dataclass(frozen=True)
class Witness:
    variant: str
    description: str
    field_expr: sp.Expr          # Γ(x) in d = 1 (an unevaluated Integral when there is no closed form)
    quantity: sp.Expr            # the witness, ∂²Γ/∂x² (symbolic in the parameters)
    point: dict = field(default_factory=dict)  # the concrete values substituted
    value: float = 0.0           # quantity at point (30-digit evalf, rounded to float for display)
    independent: float = 0.0     # same number by mpmath quadrature
    certified: bool = False      # |value| > 1e6 |value - independent|
    discrepancy: float = 0.0     # |value - independent| computed at 30 digits
    notes: str = ""
    certificate: dict = field(default_factory=dict)   # a cumulant certificate (any d), when there is one
    x0: Any = None               # the quantity is Γ''(x0) (free of x); None: it is Γ''(x), a function of x

    def label(self, fmt: str = "latex") -> str:
        """What ``quantity`` is: ``Γ''(0)`` when it was taken at a point (displaying it as ``∂²Γ/∂x²`` would
        claim a function identity that holds at that point only), else ``∂²Γ/∂x²``."""
        if self.x0 is not None:
            return (r"\Gamma''(" + sp.latex(sp.S(self.x0)) + ")") if fmt == "latex" else f"Γ''({sp.S(self.x0)})"
        return r"\frac{\partial^2 \Gamma}{\partial x^2}" if fmt == "latex" else "∂²Γ/∂x²"

    def conclusion(self) -> str:
        """Why the law leaves the Gaussian family, in words: the d = 1 lemma applied to the non-affine field,
        and the cumulant certificate when there is one."""
        sign = "certified non-zero" if self.certified else "NOT certified"
        at = f" at $x = {sp.latex(sp.S(self.x0))}$, ${self.label()}$," if self.x0 is not None else ""
        out = (f"The second derivative of the field{at} is {sign} (${self.value:.6g}$; independent quadrature "
               f"${self.independent:.6g}$), so $\\Gamma$ is not affine in $x$; in $d = 1$ this proves that "
               r"$\mathcal{N}(\alpha, s)$ leaves the Gaussian family at once (lemma below).")
        c = self.certificate
        if c:
            pt = ", ".join(f"${sp.latex(sp.Symbol(k))} = {sp.latex(sp.S(v))}$" for k, v in c["point"].items())
            lo, hi = c["interval"]
            val = f"${lo:.6g}$" if lo == hi else f"in $[{lo:.6g}, {hi:.6g}]$"
            out += (f" Cumulant certificate (valid in any $d$): at {pt}, $d\\kappa_{c['order']}/dt$ at $t = 0$ is "
                    f"{val} ({c['method']}), {'not 0' if c['certified'] else 'NOT certified'}.")
        return out

    def sentences(self) -> tuple:
        """The conclusion and the lemmas it relies on, as written (formulas between ``$`` marks)."""
        return (self.conclusion(), D1_LEMMA) + ((CUMULANT_LEMMA,) if self.certificate else ())

    def summary(self, fmt: str = "text") -> str:
        """One paragraph: the description, the witness ``d²Γ/dx²``, its value and the independent check.
        Formulas in math notation, never SymPy ``str``: ``text`` one line with ``α``, ``a²``
        (:func:`.printing.words_text`), ``latex`` inline ``$...$`` (``sympy.latex``), ``json`` readable ASCII
        (``a^2``)."""
        from ..documents.printing import readable, words_tex, words_text

        q = self.quantity if len(sp.sstr(self.quantity)) < 400 else None
        if fmt == "latex":
            pt = ", ".join(f"${sp.latex(sp.Symbol(k))} = {sp.latex(sp.S(v))}$" for k, v in self.point.items())
            w = (f"${self.label()} = {sp.latex(q)}$" if q is not None else f"${self.label()}$ of the field above")
            return (f"{words_tex(self.variant)}: NOT Gaussian-preserving. {words_tex(self.description)} Witness "
                    f"{w}; at {pt}: {self.value:.15g}. {words_tex(self.conclusion())} "
                    f"{words_tex(self.notes)}").strip()
        conv = words_text if fmt == "text" else (lambda t: words_text(t) if "$" in t else readable(t))
        pt = ", ".join(f"{k} = {v}" for k, v in self.point.items())
        w = conv(sp.sstr(q)) if q is not None else f"d^2/dx^2 [{conv(sp.sstr(self.field_expr))}]"
        return (f"{self.variant}: NOT Gaussian-preserving. {conv(self.description)} Witness "
                f"{self.label('text')} = {w} ; at {conv(pt)}: {self.value:.15g}. {conv(self.conclusion())} "
                f"{conv(self.notes)}").strip()

    def to_dict(self) -> dict[str, Any]:
        from ..documents.printing import words_text

        return {"variant": self.variant, "gaussian_preserving": False, "description": words_text(self.description),
                "field": sp.sstr(self.field_expr), "witness": sp.sstr(self.quantity),
                "point": {k: str(v) for k, v in self.point.items()}, "value": self.value,
                "independent_value": self.independent, "certified": self.certified,
                "notes": words_text(self.notes), "conclusion": words_text(self.conclusion()),
                "lemma_d1": words_text(D1_LEMMA),
                "cumulant_certificate": ({**{k: str(v) for k, v in self.certificate.items()},
                                          "lemma": words_text(CUMULANT_LEMMA)} if self.certificate else None)}


#: the kinds whose registry entry says "witness" (derived from the registry, not listed here)
NOT_PRESERVING_KINDS = tuple(k for k, s in _kinds.KINDS.items() if s.gaussian == "witness")

_x, _y, _a, _v, _al, _b, _c = sp.symbols("x y a v alpha b c", real=True)
_s = sp.Symbol("s", positive=True)


def _mgf(c):
    """``E[e^{cY}]`` for ``Y ~ N(α, s)``."""
    return sp.exp(c * _al + c ** 2 * _s / 2)


def _moment(k: int) -> sp.Expr:
    return sp.diff(_mgf(_c), _c, k).subs(_c, 0)


def _certify(w_sym: sp.Expr, point: dict, quad_value) -> tuple[float, float, bool, float]:
    import mpmath as mp

    with mp.workdps(30):
        val = mp.mpf(str(sp.N(w_sym.subs(point), 30)))
        ind = mp.mpf(quad_value())
        ok = abs(val) > 0 and abs(val) > 1e6 * abs(val - ind)
        gap = float(abs(val - ind))
    return float(val), float(ind), bool(ok), gap


def _gauss(y, al, s):
    import mpmath as mp

    return mp.exp(-(y - al) ** 2 / (2 * s)) / mp.sqrt(2 * mp.pi * s)


def softmax_unnormalized_witness() -> Witness:
    field_expr = _v * sp.diff(_mgf(_c), _c).subs(_c, _a * _x)
    quantity = sp.diff(field_expr, _x, 2)
    point = {_a: 1, _v: 1, _al: 1, _s: 1, _x: sp.Rational(1, 2)}

    def quad():
        import mpmath as mp
        x, a, v, al, s = mp.mpf(1) / 2, 1, 1, 1, 1
        return v * mp.quad(lambda y: y * (a * y) ** 2 * mp.exp(a * x * y) * _gauss(y, al, s), [-mp.inf, al, mp.inf])

    val, ind, ok, gap = _certify(quantity, point, quad)
    return Witness("softmax_unnormalized", "Gamma(x) = v (alpha + s a x) exp(a x alpha + a^2 x^2 s / 2) in d = 1 "
                   "(from the Gaussian moment generating function) is not affine in x.",
                   field_expr, quantity, {str(k): v for k, v in point.items()}, val, ind, ok, discrepancy=gap,
                   certificate=softmax_unnormalized_certificate())


def sigmoid_witness() -> Witness:
    sig = lambda z: 1 / (1 + sp.exp(-z))  # noqa: E731
    dens = sp.exp(-(_y - _al) ** 2 / (2 * _s)) / sp.sqrt(2 * sp.pi * _s)
    field_expr = _v * sp.Integral(sig(_a * _x * _y + _b) * _y * dens, (_y, -sp.oo, sp.oo))
    # differentiate the integrand twice in x, at x = 0: a polynomial in y times sigma''(b)
    d2 = sp.diff(sig(_a * _x * _y + _b) * _y, _x, 2).subs(_x, 0)
    poly = sp.Poly(sp.expand(d2), _y)
    quantity = _v * sum((coeff * _moment(m[0]) for m, coeff in poly.terms()), sp.S.Zero)
    quantity = sp.factor(quantity)
    point = {_a: 1, _b: 1, _v: 1, _al: 1, _s: 1}

    def quad():
        import mpmath as mp
        a, b, v, al, s = 1, 1, 1, 1, 1
        sg = lambda z: 1 / (1 + mp.exp(-z))  # noqa: E731
        d2s = lambda z: sg(z) * (1 - sg(z)) * (1 - 2 * sg(z))  # noqa: E731  σ'' at x = 0
        return v * mp.quad(lambda y: d2s(b) * (a * y) ** 2 * y * _gauss(y, al, s), [-mp.inf, al, mp.inf])

    val, ind, ok, gap = _certify(quantity, point, quad)
    return Witness("sigmoid", r"$\Gamma(x) = v\int \sigma(axy + b)\, y\, \mathcal{N}(y; \alpha, s)\, dy$; "
                   r"differentiating under the integral, $\Gamma''(0) = v a^{2} \sigma''(b)\, \mathbb{E}[y^{3}]$ with "
                   r"$\mathbb{E}[y^{3}] = \alpha^{3} + 3\alpha s$.",
                   field_expr, quantity, {str(k): v for k, v in point.items()}, val, ind, ok, discrepancy=gap,
                   notes=r"$\Gamma''(0)$ vanishes only if $b = 0$ or $\alpha(\alpha^{2} + 3s) = 0$; it is the second "
                   r"derivative at $x = 0$ only ($\Gamma''(x)$ depends on $x$).",
                   certificate=sigmoid_certificate(), x0=0)


def masked_witness() -> Witness:
    u, q, dl = sp.symbols("u q delta", positive=True)
    # inner Gaussian integrals over y by the moment generating function, at key position u
    mean_u = _al + dl * u
    expo = _a * _x * mean_u + (_a * _x) ** 2 * _s / 2                 # ∫ e^{axy} N(y; mean_u, s) dy = e^{expo}
    k0, k1 = sp.symbols("k0 k1", real=True)
    lin = sp.Poly(sp.expand(expo), u)
    if lin.degree() != 1:
        raise AssertionError("exponent should be affine in the key position u")
    back = {k1: lin.coeff_monomial(u), k0: lin.coeff_monomial(1)}
    pre = sp.Poly(sp.expand(mean_u + _s * _a * _x), u)                 # ∫ y e^{axy} N dy = (mean_u + sax) e^{expo}
    ints = [sp.integrate(u ** j * sp.exp(k0 + k1 * u), (u, 0, q), conds="none") for j in range(2)]
    num = sum((pre.coeff_monomial(u ** j) * ints[j] for j in range(2)), sp.S.Zero)
    field_expr = (_v * num / ints[0]).xreplace(back)
    quantity = sp.diff(field_expr, _x, 2)
    # control: position-independent data (delta = 0) gives an affine field
    Z0 = sp.exp(expo.subs(dl, 0))
    field0 = _v * sp.integrate((mean_u + _s * _a * _x).subs(dl, 0) * Z0, (u, 0, q)) / sp.integrate(Z0, (u, 0, q))
    affine0 = sp.simplify(sp.diff(field0, _x, 2)) == 0
    point = {_a: 1, _v: 1, _al: 0, _s: 1, dl: 2, q: 1, _x: sp.Rational(1, 2)}

    def quad():
        import mpmath as mp
        a, v, al, s, d_, qq = 1, 1, 0, 1, 2, 1

        def gamma(x):
            Zf = lambda uu: mp.exp(a * x * (al + d_ * uu) + (a * x) ** 2 * s / 2)  # noqa: E731
            n = mp.quad(lambda uu: (al + d_ * uu + s * a * x) * Zf(uu), [0, qq])
            return v * n / mp.quad(Zf, [0, qq])
        return mp.diff(gamma, mp.mpf(1) / 2, 2)

    if not affine0:
        raise AssertionError("control failed: the masked field with delta = 0 is not affine")
    val, ind, ok, gap = _certify(quantity, point, quad)
    return Witness("masked", r"Tokens $x \mid u \sim \mathcal{N}(\alpha + \delta u, s)$ at position $u \sim U[0, 1]$; "
                   r"a query at position $q$ attends to keys $u \leq q$, a mixture of Gaussians: $\Gamma(q, x) = "
                   r"v(\alpha + sax + \delta\, \mathbb{E}_w[u])$, $w(u) \propto e^{ax\delta u}$ on $[0, q]$, is not "
                   r"affine in $x$.",
                   field_expr, quantity, {str(k): v for k, v in point.items()}, val, ind, ok, discrepancy=gap,
                   notes=(r"Control: with position-independent tokens ($\delta = 0$) the masked field is the softmax "
                          r"field, affine in $x$ (checked symbolically: its second $x$-derivative simplifies to "
                          r"$0$), and Gaussians are preserved."))


def masked_sink_witness() -> Witness:
    q, m0, xs = sp.symbols("q m0 x_s", real=True)
    sink_w = m0 * sp.exp(_a * _x * xs)
    Z = _mgf(_c).subs(_c, _a * _x)                                    # ∫ e^{axy} N(y; α, s) dy
    Zm = sp.diff(_mgf(_c), _c).subs(_c, _a * _x)                      # ∫ y e^{axy} N(y; α, s) dy
    field_expr = _v * (sink_w * xs + (1 - m0) * q * Zm) / (sink_w + (1 - m0) * q * Z)
    quantity = sp.diff(field_expr, _x, 2)
    point = {_a: 1, _v: 1, _al: 0, _s: 1, m0: sp.Rational(1, 5), xs: 1, q: sp.Rational(1, 2),
             _x: sp.Rational(1, 3)}

    def quad():
        # differentiate under the integral sign: I_k = ∫ y^k e^{axy} N(y; α, s) dy, k = 0..3, then the
        # quotient rule (N/D)'' = N''/D - (2N'D' + N D'')/D² + 2N D'²/D³
        import mpmath as mp
        a, v, al, s, mm, xx, qq = 1, 1, 0, 1, mp.mpf(1) / 5, 1, mp.mpf(1) / 2
        x = mp.mpf(1) / 3
        Ik = [mp.quad(lambda y, k=k: y ** k * mp.exp(a * x * y) * _gauss(y, al, s), [-mp.inf, 0, mp.inf])
              for k in range(4)]
        e = mm * mp.exp(a * x * xx)
        w = (1 - mm) * qq
        N = [e * xx ** (j + 1) * a ** j + w * a ** j * Ik[j + 1] for j in range(3)]   # N, N', N''
        D = [e * xx ** j * a ** j + w * a ** j * Ik[j] for j in range(3)]             # D, D', D''
        return v * (N[2] / D[0] - (2 * N[1] * D[1] + N[0] * D[2]) / D[0] ** 2 + 2 * N[0] * D[1] ** 2 / D[0] ** 3)

    val, ind, ok, gap = _certify(quantity, point, quad)
    return Witness("masked", r"Masked attention with an attention sink (an extra key $x_s$ with prior weight $m_0$; "
                   r"tokens i.i.d. $\mathcal{N}(\alpha, s)$ at uniform positions): $\Gamma(q, x) = v\,[m_0 "
                   r"e^{axx_s} x_s + (1 - m_0) q Z(x) m(x)] / [m_0 e^{axx_s} + (1 - m_0) q Z(x)]$ is not affine in $x$ "
                   r"and depends on the query position $q$.",
                   field_expr, quantity, {str(k): v for k, v in point.items()}, val, ind, ok, discrepancy=gap,
                   notes=r"Without the sink ($m_0 = 0$) this is the softmax field $v(\alpha + sax)$, affine.")


#: the d = 1 lemma behind "not affine => not preserved" (stated in every witness document)
D1_LEMMA = (r"Lemma ($d = 1$). If the law $\mathcal{N}(\alpha(t), s(t))$ with density $\rho$ solved "
            r"$\partial_t\rho + \partial_x(\rho\Gamma) = 0$ on an interval around $t = 0$, then $\partial_t\rho = \rho q$ "
            r"with $q$ a polynomial of degree at most $2$ in $x$, so $\rho\Gamma(x) = -\int_{-\infty}^{x} \rho q$ (the "
            r"flux vanishes at $-\infty$) is the flux of the affine field $b + Jx$ with $d\alpha/dt = b + J\alpha$, "
            r"$ds/dt = 2Js$; hence $\Gamma = b + Jx$ on the real line. A field that is not affine therefore moves "
            r"$\mathcal{N}(\alpha, s)$ out of the Gaussian family at once.")

#: the lemma behind a cumulant certificate, in any d
CUMULANT_LEMMA = (r"Lemma (any $d$). If $\mu_t$ stayed Gaussian near $t = 0$, every cumulant of order $3$ or more of "
                  r"$\langle u, X_t\rangle$ would vanish near $t = 0$, and so would its time derivative. With "
                  r"$Y = \langle u, X - \alpha\rangle$, $G = \langle u, \Gamma(X) - \mathbb{E}\,\Gamma(X)\rangle$, "
                  r"$X \sim \mathcal{N}(\alpha, \Sigma)$: $d\kappa_3/dt = 3\,\mathbb{E}[Y^{2}G]$ and $d\kappa_4/dt = "
                  r"4\,\mathbb{E}[Y^{3}G] - 12\,\mathbb{E}[Y^{2}]\,\mathbb{E}[YG]$ at $t = 0$ (moments finite). A non-zero "
                  r"value proves that $\mathcal{N}(\alpha, \Sigma)$ leaves the Gaussian family.")


def cumulant_rates(field, X: list, alpha: sp.Matrix, Sigma: sp.Matrix, u) -> tuple:
    """``(d κ₃/dt, d κ₄/dt)`` of ``u·X_t`` at ``t = 0`` for ``X ~ N(α, Σ)`` moved by the field ``field(X)`` (a
    column of expressions *polynomial* in the symbols ``X``), exact (Gaussian moments from the moment
    generating function, :func:`.moments.gaussian_expectation`); formulas of :data:`CUMULANT_LEMMA`."""
    from .moments import gaussian_expectation

    E = (lambda e: sp.expand(gaussian_expectation(sp.expand(e), list(X), alpha, Sigma)))   # noqa: E731
    u = sp.Matrix(u)
    Y = (u.T * (sp.Matrix(X) - alpha))[0, 0]
    G0 = (u.T * sp.Matrix(field))[0, 0]
    G = G0 - E(G0)
    return 3 * E(Y ** 2 * G), sp.expand(4 * E(Y ** 3 * G) - 12 * E(Y ** 2) * E(Y * G))


def cumulant_certificate(field, X: list, alpha: sp.Matrix, Sigma: sp.Matrix, directions=None) -> dict | None:
    """The first direction ``u`` (unit vectors, then ``(1, .., 1)`` and ``(1, 2, .., d)``) with a non-zero exact
    third- or fourth-cumulant rate (:func:`cumulant_rates`): ``{"order", "u", "value"}``, or ``None`` when all
    vanish (no certificate: e.g. ``Jx|x|²`` at ``N(0, I)``, which *is* preserved)."""
    d = len(X)
    if directions is None:
        directions = [[int(i == j) for i in range(d)] for j in range(d)] + [[1] * d, list(range(1, d + 1))]
    for u in directions:
        k3, k4 = cumulant_rates(field, X, alpha, Sigma, u)
        for order, v in ((3, k3), (4, k4)):
            if v != 0:
                return {"order": order, "u": list(u), "value": v}
    return None


def sigmoid_certificate(a=sp.Rational(1, 20), b=1, v=1, al=1, s=1) -> dict:
    """A rigorous interval for ``d κ₃/dt`` at ``t = 0`` (``d = 1``, ``X ~ N(α, s)``) of sigmoid attention
    ``Γ(x) = v E_Y[σ(axY + b) Y]``, ``Y ~ N(α, s)``.  Taylor: ``σ(b + δ) = σ(b) + σ'(b)δ + σ''(b)δ²/2 + ρ`` with
    ``|ρ| ≤ |δ|³/48`` (``sup|σ⁽³⁾| = 1/8``); the quadratic part contributes exactly ``3 s² v σ''(b) a² E[Y³]``
    (``E[(X - α)²(X² - EX²)] = 2s²``), the remainder at most ``3|v||a|³E[Y⁴]/48 (E[(X-α)²|X|³] + s E|X|³)``,
    each absolute moment bounded by Cauchy-Schwarz with exact even moments.  Evaluated in ``mpmath.iv``
    interval arithmetic; the interval excludes 0 for small ``a``."""
    import mpmath as mp

    m = [sp.nsimplify(_moment(k).subs({_al: al, _s: s})) for k in range(7)]
    iv = mp.iv
    old = iv.dps
    iv.dps = 40
    try:
        sg = 1 / (1 + iv.exp(-iv.mpf(b)))
        s2 = sg * (1 - sg) * (1 - 2 * sg)                               # σ''(b)
        M = [iv.mpf(sp.Rational(mk).p) / iv.mpf(sp.Rational(mk).q) for mk in m]
        sv, av = iv.mpf(sp.Rational(s).p) / sp.Rational(s).q, iv.mpf(sp.Rational(a).p) / sp.Rational(a).q
        quad = 3 * sv ** 2 * v * s2 * av ** 2 * M[3]
        bound = (3 * abs(v) * av ** 3 * M[4] / 48 * (iv.sqrt(3 * sv ** 2 * M[6]) + sv * iv.sqrt(M[2] * M[4])))
        lo, hi = quad.a - bound.b, quad.b + bound.b
        ok = (lo.a > 0) or (hi.b < 0)
        interval = (float(lo.a), float(hi.b))
    finally:
        iv.dps = old
    return {"order": 3, "u": [1], "interval": interval, "certified": bool(ok),
            "point": {"a": a, "b": b, "v": v, "alpha": al, "s": s},
            "method": "Taylor expansion of the sigmoid to second order with a rigorous remainder bound, evaluated "
                      "in interval arithmetic at 40 digits"}


def softmax_unnormalized_certificate(a=sp.Rational(1, 2), v=1, al=1, s=1) -> dict:
    """``d κ₃/dt`` at ``t = 0`` (``d = 1``) for ``Γ(x) = v(α + sax) exp(axα + a²x²s/2)``, exact: with ``x = α + z``,
    ``z ~ N(0, s)``, each integrand is a polynomial in ``z`` times ``exp(-A z² + B z + C)``, and completing the square
    gives ``∫ p(z) e^{-Az²+Bz+C} dz = e^{C + B²/4A} √(π/A) E[p(W)]``, ``W ~ N(B/2A, 1/2A)`` (its moments from the
    moment generating function); the moments are finite iff ``A > 0``, i.e. ``a²s² < 1``."""
    if not sp.Rational(a) ** 2 * s ** 2 < 1:
        raise ValueError("the moments of the unnormalised softmax field are infinite unless a^2 s^2 < 1")
    z = sp.Symbol("z", real=True)
    pt = {_a: a, _v: v, _al: al, _s: s}
    poly = (_v * (_al + _s * _a * _x)).subs(pt).subs(_x, al + z) / sp.sqrt(2 * sp.pi * s)
    C, B, A = (sp.Poly((_a * _x * _al + _a ** 2 * _x ** 2 * _s / 2).subs(pt).subs(_x, al + z) - z ** 2 / (2 * s), z)
               .all_coeffs()[::-1])
    A = -A
    mean, var = B / (2 * A), 1 / (2 * A)

    def integral(p):            # ∫_R p(z) exp(-A z² + B z + C) dz, p a polynomial in z
        moments = sp.Poly(p, z).all_coeffs()[::-1]
        EW = sum(c * sp.diff(sp.exp(_c * mean + _c ** 2 * var / 2), _c, k).subs(_c, 0) for k, c in enumerate(moments))
        return sp.exp(C + B ** 2 / (4 * A)) * sp.sqrt(sp.pi / A) * EW
    EG = integral(poly)
    val = sp.simplify(3 * (integral(sp.expand(z ** 2 * poly)) - s * EG))
    num = sp.N(val, 50)
    return {"order": 3, "u": [1], "value": val, "certified": bool(abs(num) > sp.Float("1e-40")),
            "interval": (float(num), float(num)), "point": {"a": a, "v": v, "alpha": al, "s": s},
            "method": "exact closed form (Gaussian integrals by completing the square), its sign from a 50-digit "
                      "evaluation"}


@lru_cache(maxsize=None)
def witness_for(kind: str, sink: bool = False) -> Witness:
    """The witness for ``kind`` in ``sigmoid``, ``softmax_unnormalized``, ``masked`` (cached).  ``sink``
    selects the attention-sink witness for masked heads."""
    if kind == "masked" and sink:
        return masked_sink_witness()
    makers = {"sigmoid": sigmoid_witness, "softmax_unnormalized": softmax_unnormalized_witness,
              "masked": masked_witness}
    if kind not in makers:
        raise ValueError(f"no non-preservation witness for {kind!r} (it preserves Gaussians or is unknown)")
    return makers[kind]()
