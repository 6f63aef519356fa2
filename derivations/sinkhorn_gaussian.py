# %% [markdown]
# # Sinkhorn attention on Gaussians: the entropic plan's cross-covariance
#
# Claims (README Mathematics §3): the entropic plan of `N(α, Σ)` with itself for the cost `-<Ax, y>` (ε = 1) is Gaussian
# with cross-covariance `C` solving `C = ΣAᵀ(Σ - CᵀΣ⁻¹C)`, closed form
# `Cᵀ = ½A^{-ᵀ}((I + 4AᵀΣAΣ)^{1/2} - I)`, and `dα/dt = Vα`, `dΣ/dt = VCᵀ + CVᵀ`.
# Below: the condition is derived from the density-ratio form, solved in d = 1, an A⁻¹-free form is derived,
# and everything is checked symbolically (d = 1) and at 50 digits (d = 2, 3).
#
# Run: `python derivations/sinkhorn_gaussian.py`

# %%
import mpmath as mp
import numpy as np
import sympy as sp
from _show import show  # derivations/_show.py: pretty unicode, wrapped

from symbolic_tpde.symbolic import sinkhorn as sk
from symbolic_tpde.symbolic.moments import matrix_form
from symbolic_tpde.validate import checks_symbolic as cs

# %% [markdown]
# ## 1. The condition from the block inverse of the joint covariance
# `log dπ/d(μ⊗μ)` has the mixed term `-xᵀΠ_xy y` (`Π` = joint precision); it must be `xᵀAᵀy`.

# %%
c = sk.condition_matrix()
show("Π =", c["precision"])
show("Π_xy =", c["Pi_xy"])
show("Π_xy = -Aᵀ  <=>  (lhs, rhs) =", c["lhs"], c["rhs"])
assert c["collapsed"]

# %% [markdown]
# ## 2. d = 1: solve the condition, keep the root giving a genuine (positive definite) plan

# %%
s, a = sp.Symbol("s", positive=True), sp.Symbol("a", positive=True)
cc = sp.Symbol("c", real=True)
res = sk.condition_explicit(sp.Matrix([[s]]), sp.Matrix([[cc]]), sp.Matrix([[a]]))[0, 0]
roots = sp.solve(sp.numer(sp.together(res)), cc)
show("condition (d = 1), = 0:", sp.factor(sp.numer(sp.together(res))))
show("roots:", *roots)
good = [r for r in roots if sp.simplify((s ** 2 - r ** 2).subs({s: 1, a: 1})) > 0]
assert len(good) == 1
closed = sk.cross_covariance_explicit(sp.Matrix([[s]]), sp.Matrix([[a]]))[0, 0]
show("PD root, A⁻¹-free closed form:", good[0], closed)
assert sp.simplify(sp.radsimp(good[0] - closed)) == 0
assert sk.check_closed_form_d1() == 0

# %% [markdown]
# ## 3. An A⁻¹-free form
# With `X = I + 4AᵀΣAΣ`: `(X^{1/2} - I)(X^{1/2} + I) = X - I = 4AᵀΣAΣ` and functions of `X` commute, so
# `½A^{-ᵀ}(X^{1/2} - I) = 2ΣAΣ(I + X^{1/2})⁻¹`.  `X` is similar to `I + 4Σ^{1/2}AᵀΣAΣ^{1/2} ⪰ I`, so the
# inverse always exists, even for singular `A`.

# %%
show("Cᵀ (matrix form) =", sk.closed_form_matrix())
rng = np.random.default_rng(2025)
with mp.workdps(50):
    for d in (2, 3):
        Sigma, A = cs._mp_random(rng, d)
        forms = {f: sk.mp_cross_covariance(Sigma, A, f) for f in ("inverse_free", "a_inverse", "symmetric")}
        gap = max(abs(v) for v in (forms["inverse_free"] - forms["symmetric"]))
        r1, r2, lam = sk.mp_condition_residuals(Sigma, A, forms["inverse_free"])
        print(f"d = {d}: |inverse-free - README Mathematics form| = {mp.nstr(gap, 3)}, condition residual {mp.nstr(r1, 3)}, "
              f"joint-precision residual {mp.nstr(r2, 3)}, min joint eigenvalue {mp.nstr(lam, 5)}")
        assert gap < mp.mpf(10) ** -45 and max(r1, r2) < mp.mpf(10) ** -45 and lam > 0

# %% [markdown]
# ## 4. The moment ODE; ε scaling; entrywise d = 2

# %%
mf = matrix_form(("sinkhorn",))
show("dα/dt =", mf.alpha_dot)
show("dΣ/dt =", mf.Sigma_dot)
assert cs.matrix_form_residual(("sinkhorn",)) == 0
for eps in (0.5, 3.0):
    r, lam = cs.sinkhorn_condition_residual(3, rng, epsilon=eps)
    print(f"ε = {eps}: condition with A/ε, residual {r:.1e}")
    assert r < 1e-44 and lam > 0
err = cs.sinkhorn_entrywise_vs_mp(rng)
print(f"entrywise d = 2 (closed-form 2x2 square root) vs mpmath sqrtm: {err:.1e}")
assert err < 1e-40
print("all checks passed")
