"""``tpde verify`` rows for code generation: generated numpy and C vs SymPy and vs mpmath at 50 digits.

For every Gaussian-preserving variant (d = 2 and 3; Sinkhorn only at d = 2, the entrywise form does not exist
beyond) the derived :class:`OdeSystem` is compiled and evaluated at seeded random points (``alpha`` normal,
``Sigma = I + LLᵀ/d``, parameters normal x 0.4, ``tau`` in [1, 2]).  Three values per point:

* generated code (numpy, and C when a compiler is available);
* ``sympy.lambdify`` *without* CSE (plain SymPy printing of the unreduced expressions);
* :func:`symbolic_tpde.validate.mp.mp_eval` at 50 digits (own tree walk, no printer, no CSE);
* for the Jacobians (d = 2, normal mode): central differences of ``mp_eval`` at 50 digits with ``h = 1e-15``
  (:func:`mp_jacobian`), exact at float64 resolution, vs the generated forward-mode Jacobian.

Error measure: ``max_i |a_i - b_i| / M_i`` with ``M_i`` the term magnitude of output ``i``
(:mod:`.mp`: every sum replaced by the sum of absolute values).  Tolerance: ``4 (2k + 8) u`` with ``k`` the
longest operation path of the unreduced expression and ``u = 2^-53`` -- Higham's running-error bound
(float64 round-off), with a safety factor 4 and slack for the re-association CSE performs.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import sympy as sp

from ..registry import layout
from ..symbolic.system import OdeSystem
from ..documents.printing import tree_size
from .mp import mp_eval, op_depth, roundoff_tolerance
from .verify import result, row_rng

LAMBDIFY_MAX_TREE = 50000
BASIS = "float64 round-off: 4(2k+8)u, k = op depth, rel. to Σ|terms|"

#: composite rows beside one row per Gaussian-preserving registry kind
COMPOSITES = {
    "multihead": lambda d: (d, (("softmax", d), ("softmax", d)), False, False),
    "softmax+ffn": lambda d: (d, (("softmax", d),), True, False),
    "l2+linear+ffn": lambda d: (d, (("l2", max(1, d - 1)), ("linear", d)), True, False),
}


def variants(d: int) -> dict:
    """``label -> structure`` at ``d``: every Gaussian-preserving kind of the registry that has an entrywise
    form at this ``d`` (Sinkhorn only up to d = 2: matrix square root), then the composites."""
    from ..registry import kinds

    out = {}
    for name, spec in kinds.KINDS.items():
        lim = kinds.part(name, "symbolic").entrywise_max_d if spec.preserves_gaussians else None
        if spec.preserves_gaussians and (lim is None or d <= lim):
            out[name] = (d, ((name, d),), False, False)
    out.update({k: build(d) for k, build in COMPOSITES.items()})
    return out


def random_point(system: OdeSystem, rng: np.random.Generator) -> tuple[float, np.ndarray, np.ndarray]:
    """A seeded admissible point: SPD ``Sigma`` for Gaussian systems, parameters normal x 0.4, a scalar with a
    registry constraint (``tau``, ``epsilon > 0``) in [1, 2], a block whose registry example is ``"nsd"``
    (custom ``R``) scaled to ``|R| <= 0.05`` so that ``Σ⁻¹ - R - Rᵀ`` stays positive definite (``Σ <= ~2 I``)."""
    from .checks_symbolic import _block_specs

    d = system.origin.get("d")
    if d is None:  # not a Gaussian system: plain normal values
        return float(rng.uniform(0, 1)), rng.normal(size=system.n_states), rng.normal(size=system.n_params)
    L = rng.normal(size=(d, d)) * 0.5
    Sigma = np.eye(d) + L @ L.T / d
    alpha = rng.normal(size=d)
    y = layout.pack(alpha, Sigma)
    p = rng.normal(size=system.n_params) * 0.4
    specs = _block_specs(system)
    for blk in system.param_layout:
        spec = specs.get(blk.key)
        sl = slice(blk.offset, blk.offset + blk.size)
        if spec is not None and spec.constraint:
            p[sl] = rng.uniform(1.0, 2.0, size=blk.size)
        elif spec is not None and spec.example[0] == "nsd":
            p[sl] *= 0.05 / 0.4
    return float(rng.uniform(0, 1)), y, p


def lambdify_plain(system: OdeSystem):
    """``sympy.lambdify`` of the unreduced right-hand side (no CSE): the SymPy reference evaluation."""
    args = [system.time, list(system.states), list(system.params)]
    return sp.lambdify(args, list(system.rhs), modules="numpy", cse=False)


def relative_errors(a, b, mags) -> float:
    mags = np.maximum(np.asarray(mags, dtype=float), np.finfo(float).tiny)
    return float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)) / mags))


def tolerance_for(system: OdeSystem) -> float:
    """Relative (to the term magnitude) round-off bound of the deepest right-hand side (:func:`.mp.roundoff_tolerance`)."""
    return roundoff_tolerance(1.0, max(op_depth(e) for e in system.rhs))


def compare_system(system: OdeSystem, crhs_list, rng: np.random.Generator, n_points: int = 4,
                   with_lambdify: bool = True) -> dict[str, float]:
    """Max relative (to term magnitude) errors: ``{"<backend> vs sympy", "<backend> vs mpmath-50",
    "sympy vs mpmath-50"}`` over ``n_points`` seeded random points."""
    lam = lambdify_plain(system) if with_lambdify else None
    errs: dict[str, float] = {}

    def upd(key, v):
        errs[key] = max(errs.get(key, 0.0), v)

    for _ in range(n_points):
        t, y, p = random_point(system, rng)
        vals, mags = mp_eval(system, t, y, p, dps=50)
        ref = np.array([float(v) for v in vals])
        mags = np.array([float(m) for m in mags])
        ref_l = np.asarray(lam(t, list(y), list(p)), dtype=float) if lam else None
        if ref_l is not None:
            upd("sympy vs mpmath-50", relative_errors(ref_l, ref, mags))
        for crhs in crhs_list:
            out = crhs.f(t, y, p)
            upd(f"{crhs.backend} vs mpmath-50", relative_errors(out, ref, mags))
            if ref_l is not None:
                upd(f"{crhs.backend} vs sympy", relative_errors(out, ref_l, mags))
            outb = crhs.batch(t, y[None], p)[0]
            upd(f"{crhs.backend} batch vs mpmath-50", relative_errors(outb, ref, mags))
    return errs


def mp_jacobian(system: OdeSystem, t, y, p, h: float = 1e-15, dps: int = 50) -> np.ndarray:
    """Jacobian by central differences of :func:`mp_eval` at ``dps`` digits: truncation error ``O(h²)`` =
    1e-30 and cancellation error ``10^-dps / h`` = 1e-35 relative, i.e. exact at float64 resolution."""
    import mpmath

    n = system.n_states
    J = np.empty((n, n))
    with mpmath.workdps(dps):
        hh = mpmath.mpf(h)
        for j in range(n):
            yp = [mpmath.mpf(v) for v in y]
            ym = list(yp)
            yp[j] += hh
            ym[j] -= hh
            fp, _ = mp_eval(system, t, yp, p, dps=dps)
            fm, _ = mp_eval(system, t, ym, p, dps=dps)
            J[:, j] = [float((a - b) / (2 * hh)) for a, b in zip(fp, fm)]
    return J


JAC_TOL = 1e-12
JAC_BASIS = "float64 round-off of the forward-mode program, rel. to max|J|"


def checks(quick: bool) -> Iterator:
    from ..codegen import c_backend
    from ..codegen.compile import compile_system
    from ..symbolic.moments import derive_gaussian_system

    have_c = c_backend.availability() is None
    dims = (2,) if quick else (2, 3)
    for d in dims:
        for variant, structure in variants(d).items():
            system = derive_gaussian_system(structure)
            backends = [compile_system(system, "numpy")]
            if have_c:
                backends.append(compile_system(system, "c"))
            # lambdify prints the full expression tree: skip it where that tree is huge (minutes of printing)
            small = tree_size(system.rhs) <= LAMBDIFY_MAX_TREE
            errs = compare_system(system, backends, row_rng("codegen", variant, d), n_points=2 if quick else 4,
                                  with_lambdify=small)
            tol = tolerance_for(system)
            for key, err in errs.items():
                yield result(f"codegen: {key}", variant, d, err, tol, BASIS)
            if d == 2 and not quick:
                t, y, p = random_point(system, row_rng("codegen: jac", variant, d))
                Jref = mp_jacobian(system, t, y, p)
                for crhs in backends:
                    err = np.max(np.abs(crhs.jac(t, y, p) - Jref)) / np.max(np.abs(Jref))
                    yield result(f"codegen: {crhs.backend} jac vs mpmath-50 differences", variant, d, err,
                                 JAC_TOL, JAC_BASIS)
    if not have_c:
        yield result("codegen: C backend available", "-", None, 1.0, 0.0,
                     f"C rows skipped: {c_backend.availability()}", passed=True)
