# %% [markdown]
# # Second variation of the energy: Christoffel symbols and the Riemannian Hessian (README Mathematics §5)
#
# On the n-particle restriction, `g_X = (1/n) diag(Z_i) ⊗ G`.  The second derivative of `E` along a geodesic
# `γ` (`γ(0) = X`, `γ̇(0) = U`) is the Riemannian Hessian
# `Hess E(U, U) = D²E(U, U) - Γ^k_ij U^i U^j ∂_k E`.  We derive the Christoffel symbols symbolically, compare
# the Hessian with (a) a closed-form Koszul formula in numpy and (b) finite differences of `E` along
# numerically integrated geodesics, show the Christoffel term vanishes at critical points, and do the same
# on the Gaussian family (d = 1).  Run: `python derivations/second_variation.py`.

# %%
import numpy as np
import sympy as sp
from _show import show  # derivations/_show.py: pretty unicode, wrapped

from symbolic_tpde.numerics.particles import energy as en
from symbolic_tpde.symbolic.gaussian_energy import gaussian_energy
from symbolic_tpde.symbolic.hessian import curve_second_derivative, gaussian_hessian, particle_hessian

# %% [markdown]
# ## One particle, d = 1 (the whole story in one line)
# `E = ½e^{ax²}`, `g = e^{ax²} G`, `Γ = g'/(2g) = a x`, so `Hess E = E'' - Γ E' = e^{ax²}(a + a²x²)`.

# %%
ph1 = particle_hessian(1, 1, [[-1]], [[1]])
x = ph1.coords[0]
show("(Γ^x_xx, Hess E) =", sp.simplify(ph1.gamma[0][0][0]), sp.factor(sp.simplify(ph1.H[0, 0])))
assert sp.simplify(ph1.gamma[0][0][0] + x) == 0
assert sp.simplify(ph1.H[0, 0] - sp.exp(-x ** 2) * (x ** 2 - 1)) == 0
print("A = -1: Hess E(δ_x) < 0 iff |x| < 1, > 0 iff |x| > 1")

# %% [markdown]
# ## n = 2, d = 1: the Christoffel symbols

# %%
ph = particle_hessian(2, 1, [[-1]], [[1]])
for k in range(2):
    for i in range(2):
        for j in range(i, 2):
            show(f"Γ^{k}_{i}{j} =", sp.simplify(ph.gamma[k][i][j]))

# %% [markdown]
# ## Three routes agree, (n, d) = (2, 1), (2, 2), (3, 2)

# %%
rng = np.random.default_rng(7)
for n, d in [(2, 1), (2, 2), (3, 2)]:
    A = sp.Matrix([[-1, sp.Rational(1, 4)], [sp.Rational(1, 4), -sp.Rational(1, 2)]])[:d, :d]
    ph = particle_hessian(n, d, A, sp.eye(d))
    X, U = rng.normal(scale=0.8, size=(n, d)), rng.normal(size=(n, d))
    H = np.array(sp.lambdify(ph.coords, ph.H)(*X.ravel()), float)
    sym = U.ravel() @ H @ U.ravel()
    kos = en.hessian_form(X, np.array(A, float), np.eye(d), U)
    geo, est = en.hessian_along_geodesic(X, U, np.array(A, float), np.eye(d))
    print(f"n={n} d={d}: symbolic {sym:.12f}  Koszul/numpy {kos:.12f}  geodesic FD {geo:.12f} (± {est:.1e})")
    assert abs(sym - kos) < 1e-11 * max(1, abs(sym)) and abs(sym - geo) < max(10 * est, 1e-9)

# %% [markdown]
# ## Critical points: the Christoffel term vanishes
# `A = -I`: `X = 0` is critical (`∂E = 0`).  For *any* curve `c(s) = sU + s²W/2`,
# `d²/ds² E(c(s)) = D²E(U, U) + ∂E·W = D²E(U, U)`: intrinsic.  With `U = (v, v)`, `E(δ_{sv}) = ½e^{-s²|v|²}`.

# %%
ph = particle_hessian(2, 2, [[-1, 0], [0, -1]], [[1, 0], [0, 1]])
zero = {c: 0 for c in ph.coords}
show("∂E at 0:", sp.Matrix([sp.simplify(g.subs(zero)) for g in ph.dE]).T)
assert all(sp.simplify(g.subs(zero)) == 0 for g in ph.dE)
W = sp.symbols("w0:4")
v = (1, 2)
total, d2, first = curve_second_derivative(ph.pe.E, ph.coords, zero, [*v, *v], W)
show("d²/ds² E(c(s)) =", total, note=f"= D²E(U,U) = {d2} + ∂E·W = {first}")
assert first == 0 and total == d2 == -(v[0] ** 2 + v[1] ** 2)

# %% [markdown]
# ## Gaussian family, d = 1: metric of the (unique) affine field, Hessian vs geodesic

# %%
gh = gaussian_hessian([[-1]], [[1]])
h = gh.numeric("math")
for theta, U in [([0.4, 0.6], [0.3, -0.5]), ([-0.2, 0.3], [1.0, 0.2])]:
    geo, est = en.gaussian_hessian_along_geodesic([theta[0]], [[theta[1]]], [[-1.0]], [[1.0]], U)
    val = float(h(theta, U))
    print(f"(α, σ²)={theta}, U={U}: symbolic {val:.12f}  geodesic FD {geo:.12f} (± {est:.1e})")
    assert abs(val - geo) < max(10 * est, 1e-9)
print("d = 2 (staged symbols, ~30 s) is checked in tests/test_hessian.py::test_gaussian_hessian_d2_vs_geodesic (slow)")

# %% [markdown]
# ## No interior critical point on the Gaussian family (A = -1, d = 1)
# `E(N(α, s)) = ½(1 - s²)^{-1/2} exp(-α²/(1 + s))` (finite iff `s < 1`): at `α = 0`, `∂E/∂s > 0` for every
# `0 < s < 1` (and `∂E/∂α ≠ 0` for `α ≠ 0`), so on this family the intrinsic argument applies only in the
# degenerate limit `s → 0` (`δ₀`).

# %%
al, sv = gh.coords
E1 = sp.simplify(gaussian_energy(sp.Matrix([[-1]]), sp.Matrix([al]), sp.Matrix([[sv]])).E)
show("E(N(α, s)) =", E1)
dEs = sp.simplify(sp.diff(E1, sv).subs(al, 0))
show("∂E/∂s at α = 0:", dEs)
assert sp.simplify(dEs - sv / (2 * (1 - sv ** 2) ** sp.Rational(3, 2))) == 0
