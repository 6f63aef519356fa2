"""``tpde rhs``: the Gaussian moment right-hand side at a scenario's ``alpha0, Sigma0`` and ``t = 0``.

Computed by the code generated from the SymPy-derived entrywise ODE (``symbolic_tpde.gaussian``), or, for
Sinkhorn heads at ``d >= 3``, by the numeric matrix closed form (reported as ``"backend": "numeric-matrix"``).

Exit status: 0 success; 2 bad input, an attention that is not Gaussian-preserving (sigmoid, unnormalised
softmax, masked), a Gaussian tilt that does not exist at ``Sigma0`` (``Σ₀⁻¹ - R - Rᵀ`` not positive definite:
the formula would be meaningless) or ``--backend c`` without a usable compiler, with a one-line message on
stderr; 3 when the right-hand side is not finite at ``Σ₀`` (an overflow: no result to print).
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("rhs", help="Gaussian moment ODE right-hand side (alpha_dot, Sigma_dot) at t = 0",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--backend", choices=("auto", "numpy", "c"), default="auto",
                   help="generated-code backend (auto: C if a compiler is available, else numpy, announced)")
    p.add_argument("--json", action="store_true", help='print {"alpha_dot": [...], "Sigma_dot": [[...]]}')
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from ..errors import CompilerUnavailable
    from ..gaussian import GaussianODE
    from ..inputs.scenario import load_scenario
    from ..errors import NotGaussianPreserving

    scn = load_scenario(args.scenario, need_T=False)
    try:
        ode = GaussianODE.from_scenario(scn, backend=args.backend)
    except CompilerUnavailable as exc:
        print(f"tpde rhs: error: {exc} (use --backend numpy or auto)", file=sys.stderr)
        return 2
    except NotGaussianPreserving as exc:
        print(f"tpde rhs: error: attention {scn.attention!r} is not Gaussian-preserving (the field is not "
              f"affine in x, so no moment ODE exists): {exc}", file=sys.stderr)
        return 2
    from ..gaussian import pack_state

    ode.check_tilt(0.0, pack_state(scn.alpha0, scn.Sigma0), "Sigma0")   # InputError (exit 2) if it does not exist
    alpha_dot, Sigma_dot = ode.rhs_matrices(0.0, scn.alpha0, scn.Sigma0)
    if not (np.isfinite(alpha_dot).all() and np.isfinite(Sigma_dot).all()):
        print("tpde rhs: error: the right-hand side overflowed (not finite) at alpha0, Sigma0", file=sys.stderr)
        return 3
    out = {"alpha_dot": alpha_dot.tolist(), "Sigma_dot": Sigma_dot.tolist(), "backend": ode.backend}
    if args.json:
        from ..inputs.checks import strict_json

        print(strict_json(out))
    else:
        print(f"attention: {scn.attention}, d = {scn.d}, backend: {ode.backend}, t = 0")
        print("alpha_dot =", np.array2string(alpha_dot, precision=12))
        print("Sigma_dot =")
        print(np.array2string(Sigma_dot, precision=12))
    return 0
