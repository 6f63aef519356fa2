"""What the sphere reductions derive, as numbers (:func:`sphere_numbers`).

:mod:`symbolic_tpde.symbolic.sphere_reductions` derives the equiangular reduction, its rates near ``ρ = 1`` and
the linearisation at the uniform measure as formulas; this module evaluates them (and integrates the derived
equiangular ODE with :func:`.sphere_verdict.equiangular_curve`) for given ``n``, ``β``, ``ρ₀``; ``tpde derive
--sphere ... --beta B --n N`` prints the same numbers.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError

__all__ = ["sphere_numbers"]


def sphere_numbers(kind: str = "sphere_sa", norm: str = "post", *, beta: float = 1.0, n: int = 32,
                   rho0: float = 0.0, d: int = 2, T: float = 1e3, delta: float | None = None, run=None) -> dict:
    """What the sphere reductions derive, as numbers, for ``Q = K = V = I`` and inverse temperature ``beta``:

    * ``rate``: near ``ρ = 1`` the approach rate ``λ = -∂ρ̇/∂ρ|_{ρ=1}`` (and off the sphere ``ṙ₁`` and the power
      ``p`` of ``1 - ρ ~ C t^{-p}``) of the equiangular reduction of ``n`` tokens (:func:`~symbolic_tpde.symbolic.
      sphere_reductions.rates`, at ``r = 1``);
    * ``t_star``: the time at which the equiangular reduction from ``ρ₀`` reaches ``1 - δ`` (one cluster by the
      rule of :mod:`symbolic_tpde.analysis.sphere_clusters`), ``None`` if not by ``T`` (DOP853, rtol 1e-12);
    * ``pre_ln_constant`` (``norm="pre"``, where ``p = 2``): ``C = lim t²(1 - ρ)`` from the same curve, as
      ``{"value", "error"}``: ``f(t) = t²(1 - ρ(t))`` approaches ``C`` with an ``O(1/t)`` term (``r ~ r₀ + t``), so
      ``2f(T) - f(T/2)`` removes it; ``error`` is the change of that extrapolation from ``T/2`` to ``T``;
    * ``linear``: at the uniform measure the growth rates ``λ_k`` (Fourier modes, ``d = 2``; spherical harmonic
      degrees on ``S^{d-1}``) and the fastest mode ``k*`` (:func:`~symbolic_tpde.symbolic.sphere_reductions.
      fastest_mode`; USA or SA, the causal mask has none);
    * ``time_to_one_cluster`` when ``run`` (a :class:`~symbolic_tpde.numerics.particles.sphere.SphereRun` with a
      trajectory) is given: the first saved time from which every frame is one cluster (resolution: the
      spacing of its ``t_eval``), ``None`` if its last frame is not.

    >>> import symbolic_tpde as st
    >>> out = st.sphere_numbers("sphere_sa", "post", beta=1.0, n=4)
    >>> out["rate"]["lambda"], out["linear"]["fastest_mode"]
    (2.0, 1)
    """
    import sympy as sp

    from .sphere_clusters import DELTA, time_to_one_cluster
    from .sphere_verdict import _reduction, equiangular_curve
    from ..registry.kinds import kind_names
    from ..symbolic import sphere_reductions as R

    if kind not in kind_names("sphere"):
        raise InputError("kind", f"expected one of {list(kind_names('sphere'))}, got {kind!r}")
    if norm not in R.MODELS:
        raise InputError("norm", f"expected one of {sorted(R.MODELS)}, got {norm!r}")
    delta = DELTA if delta is None else float(delta)
    out: dict = {"kind": kind, "norm": norm, "beta": float(beta), "n": int(n), "rho0": float(rho0), "delta": delta}
    normaliser = "n" if kind == "sphere_usa" else "softmax"
    if kind != "sphere_causal":
        red = _reduction(norm, normaliser)[0]
        subs = {R.n: n, R.beta: beta, R.alpha: 1, R.r: 1}
        out["rate"] = {k: float(sp.sympify(v).subs(subs)) for k, v in R.rates(red).items() if k != "fixed_point"}
        hit = equiangular_curve(norm, kind, n, beta, rho0, T, threshold=1 - delta)[1]
        out["t_star"] = hit
        if norm == "pre":
            sol, _ = equiangular_curve(norm, kind, n, beta, rho0, T, t_eval=[T / 4, T / 2, T])
            f = sol.t ** 2 * (1 - sol.y[:, 0])
            est = 2 * f[1:] - f[:-1]
            out["pre_ln_constant"] = {"value": float(est[-1]), "error": float(abs(est[-1] - est[0])),
                                      "t2_gap_at_T": float(f[-1])}
        lin_d = d
        k_star, rates_k = R.fastest_mode(normaliser, float(beta), d=lin_d)
        out["linear"] = {"d": lin_d, "fastest_mode": k_star, "rates": rates_k}
    if run is not None:
        if run.trajectory is None:
            raise InputError("run", "has no trajectory: run the particles with t_eval")
        traj = run.trajectory / np.linalg.norm(run.trajectory, axis=-1, keepdims=True)
        out["time_to_one_cluster"] = time_to_one_cluster(run.times, traj, delta)
    return out
