"""Cross-checks of the symbolic derivation engine (rows for ``tpde verify``; also used by the tests).

Independent routes used here:

* **Closed forms (README Mathematics §3) as claims.**  The formulas typed in this module are the *claims* to check,
  never used by the engine.  Matrix form: ``derived - claim`` reduced to zero by targeted matrix algebra
  (distribute, collapse ``Σ⁻¹Σ``).  Entrywise: the engine's ``OdeSystem`` and the claim evaluated at seeded
  random *rational* points in exact arithmetic (error exactly 0).
* **Two derivations against each other**: the matrix-calculus derivation (general ``d``), instantiated with
  explicit rational matrices, against the entrywise ``Λ``-split derivation (exact).
* **Quadrature**: the tilted mean and the linear-attention field in ``d = 1`` against mpmath quadrature of
  the defining integrals at 30 digits.
* **Sinkhorn**: the closed form's residual in the first-order condition and in the joint precision at
  50 digits; ``ε`` scaling; the entrywise ``d = 2`` expression against an mpmath matrix square root.
* **Witnesses**: value certified by two independent evaluations.
"""

from __future__ import annotations

import sys
from typing import Any, Iterator

import numpy as np
import sympy as sp

from ..symbolic import sinkhorn as sk
from ..symbolic.moments import derive_gaussian_system, matrix_form, mexpand, symmetric_subs_all
from .verify import CheckResult, result, row_rng

EXACT = "exact rational arithmetic (any nonzero difference is a failure)"


# ---------------------------------------------------------------- exact evaluation helpers

def dag_eval(exprs, values: dict) -> list:
    """Substitute ``values`` into ``exprs`` visiting each shared sub-expression once (exact for Rationals)."""
    memo: dict = dict(values)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))

    def ev(e):
        try:
            return memo[e]
        except KeyError:
            pass
        r = e.func(*[ev(a) for a in e.args]) if e.args else e
        memo[e] = r
        return r
    try:
        return [ev(e) for e in exprs]
    finally:
        sys.setrecursionlimit(old)


def float_rhs(system):
    """A plain float64 evaluator ``f(y, p)`` of ``system.rhs`` for cross-checks: ``cse(order="none")`` then one
    small ``lambdify`` per temporary (``lambdify`` on the raw right-hand side walks the expression *tree*,
    ~10⁶-10⁸ nodes for ℓ2 at d = 3-4).  Not a code generator: see ``symbolic_tpde.codegen`` for that."""
    temps, red = sp.cse(list(system.rhs), order="none")
    args = [*system.states, *system.params]
    steps = []
    for t, e in temps:
        steps.append(sp.lambdify(args + [t_ for t_, _ in temps[:len(steps)]], e, modules="math"))
    outs = [sp.lambdify(args + [t_ for t_, _ in temps], e, modules="math") for e in red]

    def f(y, p):
        vals = [float(v) for v in y] + [float(v) for v in p]
        for step in steps:
            vals.append(step(*vals))
        return np.array([o(*vals) for o in outs], dtype=float)
    return f


def _rat(rng: np.random.Generator, lo: int = -5, hi: int = 5, den: int = 4) -> sp.Rational:
    return sp.Rational(int(rng.integers(lo, hi + 1)), int(rng.integers(1, den + 1)))


def _block_specs(system) -> dict:
    """``block key -> ParamSpec`` of every head parameter block of ``system`` (read from the registry now)."""
    from ..registry import kinds

    out = {}
    structure = system.origin.get("structure")
    for h, (kind, form) in enumerate(structure.heads if structure else ()):
        for p in kinds.head_param_specs(kind, [n for n, _ in form]):
            out[("heads", h, p.name)] = p
    return out


def random_point(system, rng: np.random.Generator, scale: sp.Rational = sp.Rational(1, 2)) -> tuple[dict, dict]:
    """Seeded exact rational values: ``(symbol -> value, structured arrays by key)``.  ``Sigma`` is SPD
    (``GGᵀ/4 + I``); a scalar parameter with a constraint (``tau, epsilon > 0``) is drawn in ``[1/3, 5]``;
    a block whose registry example is ``"nsd"`` (custom ``R``) symmetric negative semi-definite
    (``-HHᵀ/8``), so the Gaussian tilt exists at every ``Σ``."""
    d = system.origin["d"]
    specs = _block_specs(system)
    G = sp.Matrix(d, d, lambda i, j: _rat(rng))
    Sigma = G * G.T / 4 + sp.eye(d)
    alpha = sp.Matrix(d, 1, lambda i, j: _rat(rng))
    arrays: dict[Any, Any] = {"alpha": alpha, "Sigma": Sigma}
    vals: dict = {}
    for st, (i, j) in zip(system.states[d:], [(i, j) for i in range(d) for j in range(i, d)]):
        vals[st] = Sigma[i, j]
    for i in range(d):
        vals[system.states[i]] = alpha[i]
    for blk in system.param_layout:
        spec = specs.get(blk.key)
        if blk.shape == ():
            v = sp.Rational(int(rng.integers(1, 6)), int(rng.integers(1, 4)))
            arr = v if spec is None or spec.constraint else v * (1 if rng.integers(2) else -1)
            flat = [arr]
        else:
            shape = blk.shape if len(blk.shape) == 2 else (blk.shape[0], 1)
            if spec is not None and spec.example[0] == "nsd":
                H = sp.Matrix(d, d, lambda i, j: _rat(rng))
                arr = -(H * H.T) / 8
            else:
                arr = sp.Matrix(*shape, lambda i, j: _rat(rng) * scale)
            flat = list(arr)
        arrays[blk.key] = arr
        for k, v in enumerate(flat):
            vals[system.params[blk.offset + k]] = v
    return vals, arrays


# ---------------------------------------------------------------- the README Mathematics claims (explicit matrices)

def claim_field(kind: str, P: dict, alpha: sp.Matrix, Sigma: sp.Matrix) -> tuple[sp.Matrix, sp.Matrix]:
    """``(b, J)`` claimed by the paper for one head: the kind's registered ``claim`` (exact rational matrices;
    :mod:`symbolic_tpde.validate.oracles`; none for Sinkhorn)."""
    from ..registry import kinds

    claim = kinds.part(kind, "claim", None)
    if claim is None or claim.exact is None:
        raise ValueError(f"no exact closed-form claim for {kind!r}")
    return claim.exact(P, alpha, Sigma)


def claim_rhs(system, arrays: dict) -> list:
    """Flat claimed right-hand side (state order) for a non-Sinkhorn structure, from the claims above."""
    st = system.origin["structure"]
    d, kinds, has_ffn = st.d, st.heads, st.ffn
    alpha, Sigma = arrays["alpha"], arrays["Sigma"]
    b, J = sp.zeros(d, 1), sp.zeros(d, d)
    for h, (kind, _m) in enumerate(kinds):
        P = {k[2]: v for k, v in arrays.items() if isinstance(k, tuple) and k[:2] == ("heads", h)}
        bh, Jh = claim_field(kind, P, alpha, Sigma)
        b, J = b + bh, J + Jh
    if has_ffn:                                  # J -> J + W, b -> b + c
        b, J = b + arrays[("ffn", "c")], J + arrays[("ffn", "W")]
    ad = b + J * alpha
    Sd = J * Sigma + Sigma * J.T
    return list(ad) + [Sd[i, j] for i in range(d) for j in range(i, d)]


def entrywise_vs_claim(structure: tuple, rng: np.random.Generator, n_points: int = 2) -> sp.Rational:
    """Max exact ``|engine - claim|`` over ``n_points`` random rational points (0 when the claim holds)."""
    system = derive_gaussian_system(structure)
    worst = sp.S.Zero
    for _ in range(n_points):
        vals, arrays = random_point(system, rng)
        got = dag_eval(system.rhs, vals)
        want = claim_rhs(system, arrays)
        worst = max([worst] + [abs(sp.nsimplify(g - w)) for g, w in zip(got, want)])
    return worst


# ---------------------------------------------------------------- matrix form

def matrix_claims(mf) -> list[tuple[str, object, object]]:
    """``(name, derived, claimed)`` matrix expressions for a :func:`matrix_form` result, from each head's
    registered ``claim`` part (``.matrix``): heads whose claims are contributions to ``dα/dt, dΣ/dt`` are
    summed (with the FFN ``Wα + c``, ``WΣ + ΣWᵀ``); a single head claimed as ``(b, J)`` is compared entry by
    entry (FFN: ``b + c``, ``J + W``), after the substitutions the claim assumes (a parameter symmetric)."""
    from ..registry import kinds

    alpha, Sigma = mf.alpha, mf.Sigma
    claims = [kinds.part(h["kind"], "claim") for h in mf.heads]
    parts = [c.matrix(h, alpha, Sigma) for c, h in zip(claims, mf.heads)]
    sym = {h["symbols"][n].T: h["symbols"][n] for c, h in zip(claims, mf.heads) for n in c.symmetric}
    W, c = mf.symbols.get("W"), mf.symbols.get("c")
    tag = " (" + ", ".join(sorted({n for cl in claims for n in cl.symmetric})) + " sym.)" if sym else ""
    if all("alpha_dot" in p for p in parts):
        ad = sum((p["alpha_dot"] for p in parts), sp.ZeroMatrix(*alpha.shape))
        Sd = sum((p["Sigma_dot"] for p in parts), sp.ZeroMatrix(*Sigma.shape))
        if W is not None:
            ad, Sd = ad + W * alpha + c, Sd + W * Sigma + Sigma * W.T
        return [("alpha_dot" + tag, mf.alpha_dot.xreplace(sym), ad), ("Sigma_dot" + tag, mf.Sigma_dot.xreplace(sym), Sd)]
    if len(parts) != 1:
        raise ValueError(f"heads {[h['kind'] for h in mf.heads]}: claims in (b, J) form are compared one head at "
                         "a time")
    b, J = parts[0]["b"], parts[0]["J"]
    if W is not None:
        b, J = b + c, J + W
    return [("b" + tag, mf.b.xreplace(sym), b), ("J" + tag, mf.J.xreplace(sym), J)]


def matrix_rows() -> list[tuple[tuple[str, ...], bool]]:
    """``(head kinds, ffn)`` of the matrix-form rows: every kind with a matrix claim, then two composites."""
    from ..registry import kinds

    single = [((k,), False) for k in kinds.kind_names() if getattr(kinds.part(k, "claim", None), "matrix", None)]
    return single + [(("softmax",), True), (("softmax", "softmax"), False)]


def matrix_form_residual(kinds: tuple, ffn: bool = False) -> int:
    """Number of claimed identities that do NOT reduce to the zero matrix (0 = all shown by the code)."""
    mf = matrix_form(kinds, ffn=ffn)
    bad = 0
    for _name, got, want in matrix_claims(mf):
        diff = mexpand(symmetric_subs_all(got - want, mf.Sigma))  # Σ symmetric is part of the claim
        if not (diff == sp.ZeroMatrix(*diff.shape) or diff == 0 or getattr(diff, "is_ZeroMatrix", False)):
            bad += 1
    return bad


def matrix_vs_entrywise(structure: tuple, rng: np.random.Generator) -> sp.Rational:
    """Matrix-form derivation instantiated at ``d`` with explicit rational matrices vs the entrywise system."""
    system = derive_gaussian_system(structure)
    st = system.origin["structure"]
    d, kinds, has_ffn = st.d, st.heads, st.ffn
    mf = matrix_form(tuple(k for k, _ in kinds), ffn=has_ffn, d=d)
    vals, arrays = random_point(system, rng)
    sub = {mf.alpha: arrays["alpha"], mf.Sigma: arrays["Sigma"]}
    for h, head in enumerate(mf.heads):
        for name, sym in head["symbols"].items():
            sub[sym] = arrays[("heads", h, name)]
    if has_ffn:
        sub[mf.symbols["W"]], sub[mf.symbols["c"]] = arrays[("ffn", "W")], arrays[("ffn", "c")]
    ad = sp.Matrix(mf.alpha_dot.subs(sub).doit())
    Sd = sp.Matrix(mf.Sigma_dot.subs(sub).doit())
    want = list(ad) + [Sd[i, j] for i in range(d) for j in range(i, d)]
    got = dag_eval(system.rhs, vals)
    return max(abs(sp.nsimplify(g - w)) for g, w in zip(got, want))


# ---------------------------------------------------------------- quadrature (d = 1)

def tilt_vs_quadrature(kind: str = "custom", dps: int = 30) -> float:  # two query points x = -1, 2
    """Relative error of the engine's ``E[y|x]`` against mpmath quadrature of ``∫ y k N / ∫ k N`` (d = 1)."""
    import mpmath as mp

    from ..symbolic.kernels import ExpQuadKernel, kernel_from_log, l2_log_kernel_explicit
    from ..symbolic.tilt import tilt_explicit

    x, y = sp.Symbol("x"), sp.Symbol("_yq")
    al, s = sp.Rational(3, 10), sp.Rational(7, 5)
    if kind == "custom":
        B, P, R, p, r = sp.Rational(4, 5), sp.Rational(-1, 3), sp.Rational(-1, 4), sp.Rational(1, 2), sp.Rational(-2, 3)
        kern = ExpQuadKernel(sp.Matrix([[B]]), sp.Matrix([[P]]), sp.Matrix([[R]]), sp.Matrix([p]), sp.Matrix([r]))
    else:  # ℓ2 read off its definition
        q, k, tau = sp.Rational(6, 5), sp.Rational(-3, 4), sp.Rational(3, 2)
        expr = l2_log_kernel_explicit(sp.Matrix([[q]]), sp.Matrix([[k]]), tau, sp.Matrix([x]), sp.Matrix([y]))
        kern = kernel_from_log(expr, [x], [y], name="l2")
    t = tilt_explicit(kern, sp.Matrix([al]), sp.Matrix([[s]]), sp.Matrix([x]))
    worst = 0.0
    with mp.workdps(dps + 10):
        logk = sp.lambdify((x, y), kern.log_kernel(sp.Matrix([x]), sp.Matrix([y])), modules="mpmath")
        for xv in (sp.Rational(-1), sp.Rational(2)):
            derived = mp.mpf(sp.N(t.m0[0] + t.M[0, 0] * xv, dps + 10))
            xm = mp.mpf(xv.p) / xv.q
            w = lambda yy: mp.exp(logk(xm, yy) - (yy - mp.mpf(al.p) / al.q) ** 2 / (2 * mp.mpf(s.p) / s.q))  # noqa
            quad = mp.quad(lambda yy: yy * w(yy), [-mp.inf, 0, mp.inf]) / mp.quad(w, [-mp.inf, 0, mp.inf])
            worst = max(worst, float(abs(derived - quad) / max(1, abs(quad))))
    return worst


def tilt_vs_gauss_hermite(d: int = 2, n_nodes: int = 48) -> float:
    """Engine's tilted mean in ``d = 2`` (custom kernel, all blocks non-zero) against a tensor Gauss-Hermite
    quadrature of ``∫ y k(x,y) N(y; α, Σ) dy / ∫ k N`` (``y = α + L√2 t``, ``Σ = LLᵀ``), float64.  The
    integrand is entire, so the rule converges geometrically; 48 nodes per axis leave float64 round-off
    (~1e-13 relative), the tolerance used is 1e-10."""
    from ..symbolic.kernels import ExpQuadKernel
    from ..symbolic.tilt import tilt_explicit

    rng = row_rng("tilt mean vs Gauss-Hermite", d)
    G = rng.normal(size=(d, d)) * 0.4
    Sigma = G @ G.T + 0.6 * np.eye(d)
    alpha = rng.normal(size=d) * 0.5
    H = rng.normal(size=(d, d)) * 0.3
    blocks = {"B": rng.normal(size=(d, d)) * 0.5, "P": rng.normal(size=(d, d)), "R": -(H @ H.T) / 2
              + 0.05 * rng.normal(size=(d, d)), "p": rng.normal(size=(d, 1)), "r": rng.normal(size=(d, 1)) * 0.5}
    M = {k: sp.Matrix(v) for k, v in blocks.items()}
    xs = sp.Matrix([sp.Symbol(f"_q{i}") for i in range(d)])
    t = tilt_explicit(ExpQuadKernel(**M), sp.Matrix(alpha), sp.Matrix(Sigma), xs)
    f_mean = sp.lambdify(list(xs), list(t.m0 + t.M * xs), modules="numpy")
    nodes, weights = np.polynomial.hermite.hermgauss(n_nodes)
    L = np.linalg.cholesky(Sigma)
    T = np.stack(np.meshgrid(*([nodes] * d), indexing="ij"), -1).reshape(-1, d)
    W = np.prod(np.stack(np.meshgrid(*([weights] * d), indexing="ij"), -1).reshape(-1, d), axis=1)
    Y = alpha + np.sqrt(2) * T @ L.T
    worst = 0.0
    for x in (np.array([0.3, -0.7]), np.array([-1.0, 0.5])):
        logk = (x @ blocks["B"] @ Y.T + x @ blocks["P"] @ x + np.einsum("ni,ij,nj->n", Y, blocks["R"], Y)
                + blocks["p"][:, 0] @ x + Y @ blocks["r"][:, 0])
        w = W * np.exp(logk - logk.max())                   # stable: common factor cancels in the ratio
        quad = (w @ Y) / w.sum()
        worst = max(worst, float(np.max(np.abs(np.array(f_mean(*x), dtype=float) - quad)) / max(1, np.abs(quad).max())))
    return worst


def linear_vs_quadrature(dps: int = 30) -> float:
    """Engine's linear-attention field ``b + Jx`` (d = 1) vs ``v ∫ (a x y) y N(y; α, s) dy`` by quadrature."""
    import mpmath as mp

    system = derive_gaussian_system((1, (("linear", 1),), False, False))
    from ..symbolic.moments import head_field, head_param_symbols, gaussian_symbols

    alpha, Sigma = gaussian_symbols(1)
    prm = head_param_symbols(0, "linear", 1, 1)
    hf = head_field("linear", prm, alpha, Sigma)
    a, v, al, s = sp.Rational(-7, 5), sp.Rational(3, 4), sp.Rational(1, 2), sp.Rational(9, 10)
    vals = {prm["A"][0, 0]: a, prm["V"][0, 0]: v, alpha[0]: al, Sigma[0, 0]: s}
    worst = 0.0
    with mp.workdps(dps + 10):
        for xv in (sp.Rational(-2), sp.Rational(1, 2)):
            derived = mp.mpf(sp.N((hf.b[0] + hf.J[0, 0] * xv).xreplace(vals), dps + 10))
            f = lambda yy: (mp.mpf(a.p) / a.q * xv.p / xv.q * yy) * yy * mp.npdf(yy, mp.mpf(al.p) / al.q,  # noqa
                                                                              mp.sqrt(mp.mpf(s.p) / s.q))
            quad = mp.mpf(v.p) / v.q * mp.quad(f, [-mp.inf, 0, mp.inf])
            worst = max(worst, float(abs(derived - quad) / max(1, abs(quad))))
    assert system.n_states == 2
    return worst


# ---------------------------------------------------------------- Sinkhorn

def _mp_random(rng: np.random.Generator, d: int):
    import mpmath as mp

    G = mp.matrix([[mp.mpf(float(rng.uniform(-1, 1))) for _ in range(d)] for _ in range(d)])
    A = mp.matrix([[mp.mpf(float(rng.uniform(-1.5, 1.5))) for _ in range(d)] for _ in range(d)])
    return G * G.T + mp.eye(d) / 4, A


def sinkhorn_condition_residual(d: int, rng: np.random.Generator, dps: int = 50, form: str = "inverse_free",
                                epsilon: float = 1.0) -> tuple[float, float]:
    """``(max residual, min joint eigenvalue)``: closed form in the condition and in the joint precision."""
    import mpmath as mp

    with mp.workdps(dps):
        Sigma, A = _mp_random(rng, d)
        Aeff = A / mp.mpf(epsilon)
        Ct = sk.mp_cross_covariance(Sigma, Aeff, form)
        r1, r2, lam = sk.mp_condition_residuals(Sigma, Aeff, Ct)
        return float(max(r1, r2)), float(lam)


def sinkhorn_entrywise_vs_mp(rng: np.random.Generator, dps: int = 50) -> float:
    """Entrywise d = 2 Sinkhorn right-hand side vs ``VCᵀ + CVᵀ``, ``Vα`` with ``C`` from mpmath's ``sqrtm`` in
    the A⁻¹ form of README Mathematics (relative, at ``dps`` digits), with ``ε ≠ 1``.  Precondition of the
    A⁻¹ form: ``A`` invertible; a rational draw with ``det A = 0`` is drawn again (at most 100 times)."""
    import mpmath as mp

    system = derive_gaussian_system((2, (("sinkhorn", 2),), False, False))
    for _ in range(100):
        vals, arrays = random_point(system, rng, scale=sp.Rational(1))
        if arrays[("heads", 0, "A")].det() != 0:
            break
    else:
        raise RuntimeError("no invertible A in 100 rational draws")
    with mp.workdps(dps):
        conv = lambda M: mp.matrix([[mp.mpf(e.p) / e.q for e in M.row(i)] for i in range(M.rows)])  # noqa
        Sigma, alpha = conv(arrays["Sigma"]), conv(arrays["alpha"])
        A, V = conv(arrays[("heads", 0, "A")]), conv(arrays[("heads", 0, "V")])
        eps = arrays[("heads", 0, "epsilon")]
        Ct = sk.mp_cross_covariance(Sigma, A / (mp.mpf(eps.p) / eps.q), "symmetric")
        Sd = V * Ct + Ct.T * V.T
        ad = V * alpha
        want = [ad[i] for i in range(2)] + [Sd[0, 0], Sd[0, 1], Sd[1, 1]]
        got = [mp.mpf(sp.N(e, dps + 10)) for e in dag_eval(system.rhs, vals)]
        return float(max(abs(g - w) / max(1, abs(w)) for g, w in zip(got, want)))


# ---------------------------------------------------------------- rows

def checks(quick: bool = False) -> Iterator[CheckResult]:
    from ..registry import kinds

    for hk, ffn in matrix_rows():
        name = "+".join(hk) + ("+ffn" if ffn else "")
        yield result("matrix form = paper's closed form", name, None, matrix_form_residual(hk, ffn), 0,
                     "exact symbolic (count of identities not reduced to 0)")
    dims = (1, 2) if quick else (1, 2, 3)
    for d in dims:
        claimed = [k for k in kinds.kind_names() if getattr(kinds.part(k, "claim", None), "exact", None)]
        singles = [(((k, max(1, d - 1)),), False) for k in claimed]   # m = d - 1: non-square l2 heads
        for heads, ffn in singles + [((("softmax", d), ("l2", d), ("linear", d)), True)]:
            name = "+".join(k for k, _ in heads) + ("+ffn" if ffn else "")
            rng = row_rng("entrywise = closed form", name, d)
            err = entrywise_vs_claim((d, heads, ffn, False), rng, n_points=1 if quick else 2)
            yield result("entrywise = closed form (random rationals)", name, d, float(err), 0, EXACT)
    for d in dims:
        for heads in ((("softmax", d),), (("custom", d),), (("l2", d),)):
            err = matrix_vs_entrywise((d, heads, d == 2, False), row_rng("matrix = entrywise", heads[0][0], d))
            yield result("matrix-form deriv. = entrywise deriv.", heads[0][0], d, float(err), 0, EXACT)
    for kind in ("custom", "l2"):
        yield result("tilt mean vs mpmath quadrature", kind, 1, tilt_vs_quadrature(kind), 1e-25,
                     "30-digit quadrature (+10 guard digits)")
    yield result("tilt mean vs Gauss-Hermite (48^2 nodes)", "custom", 2, tilt_vs_gauss_hermite(), 1e-10,
                 "float64 round-off of a converged Gauss-Hermite rule")
    yield result("linear field vs mpmath quadrature", "linear", 1, linear_vs_quadrature(), 1e-25,
                 "30-digit quadrature (+10 guard digits)")
    yield result("Sinkhorn closed form, symbolic (d=1)", "sinkhorn", 1,
                 0.0 if sk.check_closed_form_d1() == 0 else 1.0, 0, "exact symbolic simplification")
    for d in (2, 3):
        for form in ("inverse_free", "symmetric"):
            res, lam = sinkhorn_condition_residual(d, row_rng("Sinkhorn condition", form, d), form=form)
            yield result(f"Sinkhorn condition residual ({form})", "sinkhorn", d, res, 1e-45,
                         "50-digit arithmetic (5 digits of conditioning margin)", passed=res < 1e-45 and lam > 0)
        res, lam = sinkhorn_condition_residual(d, row_rng("Sinkhorn condition", "eps", d), epsilon=0.37)
        yield result("Sinkhorn condition, eps = 0.37 (A -> A/eps)", "sinkhorn", d, res, 1e-45,
                     "50-digit arithmetic", passed=res < 1e-45 and lam > 0)
    yield result("Sinkhorn entrywise d=2 vs mpmath sqrtm", "sinkhorn", 2,
                 sinkhorn_entrywise_vs_mp(row_rng("Sinkhorn entrywise vs sqrtm")), 1e-40, "50-digit evaluation of both")
    witness_rows = [(k, False) for k, sp_ in kinds.KINDS.items() if not sp_.preserves_gaussians] + [("masked", True)]
    for kind, sink in witness_rows:
        w = kinds.part(kind, "symbolic").witness(sink=sink)
        yield result(f"witness d2Gamma/dx2 != 0 (|value| {abs(w.value):.3g})", kind + ("+sink" if sink else ""), 1,
                     w.discrepancy, 1e-6 * abs(w.value),
                     "two independent 30-digit evaluations", passed=w.certified and w.value != 0)
