# %% [markdown]
# # Softmax attention is the gradient flow of the interaction energy (README Mathematics §5)
#
# Castin, Ablin, Carrillo, Peyré (arXiv 2501.18322): with `G = -A V⁻¹` symmetric positive definite and `A`
# symmetric, the softmax field is `Γ = -grad_g E` for `E(μ) = ½∬e^{<Ax,y>}dμdμ` and the twisted metric
# `g_μ(v, w) = ∫ Z_μ <v, G w> dμ`.  We prove it for the n-particle restriction (exact for particles):
# 1. general `n` and `d` (symbolic sums and matrix calculus),
# 2. explicit small cases with symbolic `A`, every entry simplified to 0,
# then check the energy-dissipation identity `dE/dt = -g(Γ, Γ)` numerically, with the RK4 error falling like
# `h⁴`, and derive the Gaussian energy in closed form (finite iff `‖Σ^½AΣ^½‖ < 1`).
# Run: `python derivations/gradient_flow.py` (asserts every step).

# %%
import numpy as np
import sympy as sp
from _show import show  # derivations/_show.py: pretty unicode, wrapped

from symbolic_tpde.numerics.particles import energy as en
from symbolic_tpde.symbolic import gaussian_energy as ge
from symbolic_tpde.symbolic.energy import general_gradient_lemma, gradient_identity, particle_energy

# %% [markdown]
# ## Step 1 (any d): gradients of one kernel term, by SymPy's matrix calculus

# %%
lem = general_gradient_lemma()
show("(∇_x (yᵀAx), ∇_y (yᵀAx)) =", lem["grad_x"], lem["grad_y"])
assert lem["grad_x"] == lem["A"].T * lem["y"] and lem["grad_y"] == lem["A"] * lem["x"]
# so ∇_x e^{yᵀAx} = e^{yᵀAx} Aᵀy (query slot) and ∇_y e^{yᵀAx} = e^{yᵀAx} A x (key slot)

# %% [markdown]
# ## Step 2 (any n): the double sum, differentiated along particle k
# `E_n = (1/2n²) Σ_i Σ_j K(x_i, x_j)`; `∂x_i/∂x_k = δ_ik`.  `K1(i, j) = e_ij Aᵀx_j` (query-slot gradient),
# `K2(i, j) = e_ij A x_i` (key-slot gradient).

# %%
n = sp.Symbol("n", integer=True, positive=True)
i, j, k = sp.symbols("i j k", integer=True, positive=True)
K1, K2 = sp.Function("K1"), sp.Function("K2")
dE = sp.Sum(sp.KroneckerDelta(i, k) * K1(i, j) + sp.KroneckerDelta(j, k) * K2(i, j), (i, 1, n), (j, 1, n))
dE = sp.refine(dE.doit(), sp.Q.le(k, n)) / (2 * n ** 2)
show("∂_k E_n =", dE)
# For symmetric A, e_ik = e^{x_kᵀAx_i} = e^{x_iᵀAx_k} = e_ki and A x_i = Aᵀ x_i, so K2(i, k) = K1(k, i):
dE_sym = dE.replace(K2, lambda a, b: K1(b, a))
# a summation index is a dummy: rename every Sum's index to j, then the two sums coincide
dE_sym = dE_sym.replace(lambda e: isinstance(e, sp.Sum),
                        lambda e: sp.Sum(e.function.xreplace({e.variables[0]: j}), (j, *e.limits[0][1:])))
target = sp.Sum(K1(k, j), (j, 1, n)) / n ** 2
show("after K2(i,k) = K1(k,i):", sp.simplify(dE_sym))
assert sp.simplify(dE_sym - target) == 0
print("A = Aᵀ:  ∂_k E_n = (1/n²) Σ_j e_kj A x_j")

# %% [markdown]
# ## Step 3: the metric gradient
# `g_X = (1/n) diag(Z_k) ⊗ G` so `(grad E)_k = (n/Z_k) G⁻¹ ∂_k E`, `G⁻¹ = -V A⁻¹`, `n Z_k = Σ_j e_kj`.

# %%
dd = lem["d"]
A, V = sp.MatrixSymbol("A", dd, dd), sp.MatrixSymbol("V", dd, dd)
Ginv = -V * A.I
show("G⁻¹ A =", (Ginv * A).doit(), note="(so (n/Z_k) G⁻¹ (1/n²) Σ_j e_kj A x_j = -Σ_j e_kj V x_j / Σ_j e_kj = -Γ_k)")
assert (Ginv * A).doit() == -V

# %% [markdown]
# ## Step 4: explicit small cases, fully symbolic `A` (V = I so G = -A; symmetric)

# %%
for (nn, d) in [(1, 1), (2, 1), (3, 1), (2, 2)]:
    Asym = sp.Matrix(d, d, lambda p, q: sp.Symbol(f"a{min(p, q)}{max(p, q)}", real=True))
    diff = gradient_identity(particle_energy(nn, d, Asym, sp.eye(d)))
    show(f"n={nn}, d={d}: grad E + Γ =", diff)
    assert diff.is_zero_matrix
# n = 3, d = 2 with a numeric symmetric A and non-identity V (G = diag(2, 1/2)):
Vn = sp.Matrix([[2, 0], [0, 1]])
An = -sp.diag(2, sp.Rational(1, 2)) * Vn
diff = gradient_identity(particle_energy(3, 2, An, Vn))
show("n=3, d=2, (A, V, grad E + Γ) =", An, Vn, diff)
assert diff.is_zero_matrix

# %% [markdown]
# ## Step 5: energy dissipation along the particle flow, `dE/dt = -g(Γ, Γ)`
# Integrate `(X, q)` with `Ẋ = Γ`, `q̇ = g_X(Γ, Γ)` by classical RK4; the defect `E(X_T) - E(X_0) + q_T` is 0 for
# the exact flow and `O(h⁴)` for RK4: the log-log slope must be ≈ 4.

# %%
rng = np.random.default_rng(0)
X0 = rng.normal(size=(8, 2))
An, Vn = -np.eye(2), np.eye(2)
steps = [8, 16, 32, 64, 128]
defects = [abs(en.rk4_energy_defect(X0, An, Vn, 1.0, s)) for s in steps]
slope = np.polyfit(np.log([1 / s for s in steps]), np.log(defects), 1)[0]
for s, e in zip(steps, defects):
    print(f"  steps={s:4d}  |defect|={e:.3e}")
print(f"log-log slope = {slope:.3f} (RK4: 4)")
assert 3.7 < slope < 4.3

# %% [markdown]
# ## Step 6: the Gaussian family.  Completing the square (joint and iterated routes agree)

# %%
fin = ge.energy_finiteness_d1()
show("d=1: E =", sp.simplify(fin["E"]))
show("joint precision minors, det factor:", fin["minor1"], fin["minor2"], fin["det_factor"])
assert fin["residual"] == 0 and sp.expand(fin["det_factor"] - (1 - fin["a"] ** 2 * fin["s"] ** 2)) == 0
g1 = ge.gaussian_energy(sp.Matrix([[fin["a"]]]), sp.Matrix([sp.Symbol("alpha", real=True)]), sp.Matrix([[fin["s"]]]))
assert sp.simplify(g1.E - fin["E"]) == 0
A2 = sp.Matrix([[-1, sp.Rational(1, 3)], [sp.Rational(1, 3), -sp.Rational(1, 2)]])
g2 = ge.gaussian_energy(A2)
f2 = sp.lambdify(ge.gaussian_coords(g2.alpha, g2.Sigma), g2.E)
a, S = np.array([0.3, -0.2]), np.array([[0.5, 0.1], [0.1, 0.3]])
quad = en.gaussian_energy_quadrature(a, S, np.array(A2, float), nodes=16)
print(f"d=2: closed form {f2(0.3, -0.2, 0.5, 0.1, 0.3):.15f}   Gauss-Hermite 16^4 {quad:.15f}")
assert abs(f2(0.3, -0.2, 0.5, 0.1, 0.3) - quad) < 1e-12
print("finite iff P = [[Σ⁻¹, -Aᵀ], [-A, Σ⁻¹]] ≻ 0 iff ‖Σ^½AΣ^½‖ < 1; det(I - ΣAᵀΣA) → 0 at the boundary")
