# %% [markdown]
# # The Gaussian tilt and the moment ODEs of softmax-type attention
#
# Claim (README Mathematics §3): for an exponential-quadratic kernel
# `log k(x, y) = xᵀBy + xᵀPx + yᵀRy + pᵀx + rᵀy` and `μ = N(α, Σ)`, the normalised measure
# `k(x, y) N(y; α, Σ) dy` is Gaussian with an affine mean in `x`; hence the field `Γ = V E[y | x]` is affine
# and Gaussians are preserved.  This script derives it with SymPy, step by step, and asserts the
# closed forms of README Mathematics §3 -- nothing below is typed in except the claims being checked.
#
# Run: `python derivations/gaussian_tilt.py`

# %%
import numpy as np
import sympy as sp
from _show import show  # derivations/_show.py: pretty unicode, wrapped

from symbolic_tpde.symbolic.kernels import ExpQuadKernel, softmax_kernel
from symbolic_tpde.symbolic.moments import (derive_gaussian_system, gaussian_symbols, head_field,
                                            head_param_symbols, matrix_form, mexpand, symmetric_subs_all)
from symbolic_tpde.symbolic.tilt import tilt_explicit, tilt_matrix
from symbolic_tpde.validate import checks_symbolic as cs

# %% [markdown]
# ## 1. Completing the square in d = 1, by differentiation
# Exponent `E(y) = log k(x, y) - (y - α)²/(2s)`; the y-Hessian `H` is the negative precision, the slope at
# `y = 0` the shift.

# %%
x, y = sp.symbols("x y", real=True)
al, B, P, R, p, r = sp.symbols("alpha B P R p r", real=True)
s = sp.Symbol("s", positive=True)
E = B * x * y + P * x ** 2 + R * y ** 2 + p * x + r * y - (y - al) ** 2 / (2 * s)
H = sp.diff(E, y, 2)
g = sp.diff(E, y).subs(y, 0)
m = sp.simplify(-g / H)
show("exponent      E(y) =", E)
show("y-Hessian     H    =", H, note="(precision -H; needs -H > 0)")
show("slope at 0    g(x) =", g)
show("tilted mean   m(x) =", m)
# the stationary point of the concave quadratic is the mean: check E'(m) = 0
assert sp.simplify(sp.diff(E, y).subs(y, m)) == 0

# %% [markdown]
# ## 2. The same with the engine, general d (matrix calculus), softmax: `B = Aᵀ`

# %%
d = sp.Symbol("d", integer=True, positive=True)
A, V = sp.MatrixSymbol("A", d, d), sp.MatrixSymbol("V", d, d)
alpha, Sigma = sp.MatrixSymbol("alpha", d, 1), sp.MatrixSymbol("Sigma", d, d)
t = tilt_matrix(softmax_kernel(A), alpha, Sigma)
show("H  =", t.steps["H"])
show("g  =", t.steps["g"])
show("E[y|x] = m0 + M x with (m0, M) =", t.m0, t.M)
assert t.m0 == alpha and t.M == Sigma * A          # the Gaussian tilt N(α + ΣAx, Σ)

# %% [markdown]
# ## 3. Moment ODEs, general d, and the closed forms of README Mathematics §3

# %%
mf = matrix_form(("softmax",))
show("dα/dt =", mf.alpha_dot)
show("dΣ/dt =", mf.Sigma_dot)
claim_a = V * (alpha + Sigma * A * alpha)
claim_S = V * Sigma * A * Sigma + Sigma * A.T * Sigma * V.T
assert mexpand(mf.alpha_dot - claim_a) == sp.ZeroMatrix(d, 1)
assert mexpand(symmetric_subs_all(mf.Sigma_dot - claim_S, Sigma)) == sp.ZeroMatrix(d, d)
for kinds, ffn in [(("l2",), False), (("custom",), False), (("linear",), False), (("softmax", "softmax"), True)]:
    assert cs.matrix_form_residual(kinds, ffn) == 0
    print("matrix form = closed form:", "+".join(kinds) + ("+ffn" if ffn else ""))
show("ℓ2: J =", matrix_form(("l2",)).J)

# %% [markdown]
# ## 4. Entrywise, d = 2: the Λ-split (no symbolic Σ⁻¹) for a custom kernel with R ≠ 0
# `-H = Λ - H0` and `g = Λα + g0` are checked by the engine; then `(Λ - H0)⁻¹ = Σ N⁻¹ Σ` with the symmetric
# `N = Σ - Σ H0 Σ`, solved by LDLᵀ without pivoting.

# %%
xs = sp.Matrix(sp.symbols("x0 x1", real=True))
a2, S2 = gaussian_symbols(2)
prm = head_param_symbols(0, "custom", 2, 2)
kern = ExpQuadKernel(B=prm["B"], P=prm["P"], R=prm["R"], p=prm["p"], r=prm["r"])
t2 = tilt_explicit(kern, a2, S2, xs)
show("H0 (Λ-free part of the y-Hessian) =", t2.steps["H0"])
show("N = Σ - Σ H0 Σ, N[0,0] =", t2.steps["N"][0, 0])
show("product of LDLᵀ pivots (= det N) =", t2.steps["det"])
# the tilted mean solves (Λ - H0) m = Λα + g0 with Λ = Σ⁻¹: check exactly at a rational point
pt = {S2[0, 0]: 2, S2[0, 1]: sp.Rational(1, 3), S2[1, 1]: sp.Rational(3, 2), a2[0]: sp.Rational(-1, 2), a2[1]: 1}
Sig = S2.xreplace(pt)
Lam = Sig.inv()
vals = {**pt, **{q: sp.Rational(i % 5 - 2, 3) for i, q in enumerate(sorted(kern.B.free_symbols | kern.R.free_symbols
                                                                      | kern.r.free_symbols, key=str))}}
vals.update({xs[0]: sp.Rational(1, 2), xs[1]: -1})
m = (t2.m0 + t2.M * xs).xreplace(vals)
lhs = (Lam - t2.steps["H0"].xreplace(vals)) * m
rhs = Lam * a2.xreplace(vals) + t2.steps["g0"].xreplace(vals)
assert sp.simplify(lhs - rhs) == sp.zeros(2, 1)
print("tilted mean solves the stationarity equation exactly at a rational point")

# %% [markdown]
# ## 5. Linear attention from its own definition: `V ∫ <Ax, y> y dμ(y)` with Gaussian moments (MGF)

# %%
lin = head_field("linear", head_param_symbols(0, "linear", 2, 2), a2, S2)
Al, Vl = head_param_symbols(0, "linear", 2, 2)["A"], head_param_symbols(0, "linear", 2, 2)["V"]
assert sp.expand(lin.J - Vl * (S2 + a2 * a2.T) * Al) == sp.zeros(2, 2) and lin.b == sp.zeros(2, 1)
print("linear: J = V(Σ + ααᵀ)A, b = 0  -- derived from the moment generating function")

# %% [markdown]
# ## 6. Independent routes: exact rationals (d = 1, 2, 3) and 30-digit quadrature (d = 1)

# %%
rng = np.random.default_rng(0)
for dd in (1, 2, 3):
    for heads in ((("softmax", dd),), (("l2", dd),), (("custom", dd),), (("linear", dd),)):
        assert cs.entrywise_vs_claim((dd, heads, True, False), rng, n_points=1) == 0
    print(f"d = {dd}: entrywise engine == README Mathematics closed forms at random rational points (exact)")
for kind in ("custom", "l2"):
    err = cs.tilt_vs_quadrature(kind)
    print(f"tilted mean vs mpmath quadrature ({kind}): relative error {err:.1e}")
    assert err < 1e-25
system = derive_gaussian_system((2, (("softmax", 2),), False, False))
print("entrywise system: states", [s.name for s in system.states])
print("all checks passed")
