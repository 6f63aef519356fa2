# %% [markdown]
# # The interaction energy is not geodesically convex: a certificate (README Mathematics §5)
#
# `V = I`, `A = -I` (so `G = I`).  Three statements, each proved or certified without trusting floats:
# 1. at `δ₀` (all particles at 0, a critical point) `d²/ds² E(δ_{sv}) = -|v|²` (symbolic);
# 2. at a *non-critical* rational configuration `X` and rational direction `U`, `Hess E(U, U) < 0`: the
#    symbolic Riemannian Hessian is enclosed with `mpmath.iv` interval arithmetic at 50 digits, and the interval
#    excludes 0;
# 3. the Hessian is also certified *positive* elsewhere (spread-out configurations), so `E` is neither convex
#    nor concave along geodesics.  Run: `python derivations/nonconvexity_certificate.py`.

# %%
import numpy as np
import sympy as sp
from _show import show  # derivations/_show.py: pretty unicode, wrapped

from symbolic_tpde.numerics.particles import energy as en
from symbolic_tpde.symbolic.hessian import particle_hessian
from symbolic_tpde.validate.convexity import certify_particles

# %% [markdown]
# ## 1. At δ₀, along translations

# %%
s = sp.Symbol("s", real=True)
v = sp.symbols("v0:2", real=True)
E_line = sp.exp(-s ** 2 * (v[0] ** 2 + v[1] ** 2)) / 2  # E(δ_{sv}) = ½ e^{<A sv, sv>}
d2 = sp.diff(E_line, s, 2).subs(s, 0)
show("d²/ds² E(δ_{sv}) at s = 0:", d2)
assert sp.simplify(d2 + v[0] ** 2 + v[1] ** 2) == 0
# δ₀ is critical, so this plain second derivative is the Riemannian Hessian (derivations/second_variation.py)

# %% [markdown]
# ## 2. Certified negative at a non-critical point (n = 2, d = 2)

# %%
ph = particle_hessian(2, 2, [[-1, 0], [0, -1]], [[1, 0], [0, 1]])
neg = certify_particles(-np.eye(2), np.eye(2), n=2, dps=50, seed=0, want="negative", ph=ph)
print("X =", neg["point"], " U =", neg["direction"])
print("Hess E(U, U) ∈ [", neg["interval"][0], ",", neg["interval"][1], "]")
Xf = np.array([[float(sp.Rational(c)) for c in r] for r in neg["point"]])
print("|∂E(X)| =", np.abs(en.euclidean_gradient(Xf, -np.eye(2))).max(), "(not a critical point)")
assert neg["certified_negative"] and neg["in_interval"] and neg["precisions_agree"]
assert np.abs(en.euclidean_gradient(Xf, -np.eye(2))).max() > 1e-3

# %% [markdown]
# ## 3. Certified positive elsewhere

# %%
pos = certify_particles(-np.eye(2), np.eye(2), n=2, dps=50, seed=1, want="positive", ph=ph)
print("X =", pos["point"], " U =", pos["direction"])
print("Hess E(U, U) ∈ [", pos["interval"][0], ",", pos["interval"][1], "]")
assert pos["certified_positive"]

# %% [markdown]
# ## Where is the Hessian negative? n = 2, d = 1, smallest eigenvalue of g⁻¹Hess over a grid
# (rigid translations `U = (1, 1)` of two particles near the origin are the most negative directions; far
# apart, the kernel weights fade and the Christoffel term makes the Hessian positive in some direction.)

# %%
grid = np.linspace(-2.5, 2.5, 11)
signs = np.array([[np.sign(en.min_hessian_ratio(np.array([[a], [b]]), -np.eye(1), np.eye(1))[0]) for b in grid]
                  for a in grid])
print("sign of min eigenvalue (rows x1, cols x2):")
for a, row in zip(grid, signs):
    print(f"  x1={a:+.1f} ", "".join("-" if r < 0 else "+" for r in row))
assert (signs < 0).any()
