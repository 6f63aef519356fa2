"""``tpde gaussian``: integrate the Gaussian moment ODE of a scenario, with blow-up detection.

Prints (``--json``)::

    {"t": .., "alpha": [..], "Sigma": [[..]], "status": "ok" | "blowup" | "overflow" | "stalled" | "tilt-ceased",
     "blowup_time": null | number, "blowup_time_error": null | number, ...}

``t``/``alpha``/``Sigma``: the state at ``T`` or, after a blow-up, at the last detection level (``tr Σ + |α|²``
about ``10¹⁰`` times its start).  ``blowup_time`` is extrapolated from the growth law and
``blowup_time_error`` bounds its error (:mod:`symbolic_tpde.numerics.solve`; the run is
``GaussianODE.from_scenario(...).integrate(...)``, exactly what the Python API does).  ``"tilt-ceased"``: an
existence condition of the Gaussian tilt crossed zero at ``t``.  ``"overflow"`` (rare): the state
grew past ``10²⁰⁰`` times its start without the signature of a finite-time singularity (exponential growth);
``t`` is where the run stopped to stay finite.  ``"stalled"`` (rare): the integrator's step size collapsed
before ``T`` (e.g. a right-hand side that loses accuracy on a nearly singular ``Σ``); ``t`` is where it gave
up.  The right-hand side is the generated one
(:class:`symbolic_tpde.gaussian.GaussianODE`; backend reported in ``"backend"``).
"""

from __future__ import annotations

import json
import math


def register(sub) -> None:
    p = sub.add_parser("gaussian", help="integrate the Gaussian moment ODE of a scenario (blow-up aware)")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--T", type=float, default=None, help="horizon (default: the scenario's T)")
    p.add_argument("--backend", default="auto", choices=("auto", "numpy", "c"), help="generated-code backend")
    p.add_argument("--rtol", type=float, default=1e-12, help="relative tolerance of DOP853 (default 1e-12)")
    p.add_argument("--json", action="store_true", help="print JSON (default: a short text summary)")
    p.set_defaults(func=run)


def run(args) -> int:
    import numpy as np

    from ..errors import InputError
    from ..gaussian import GaussianODE
    from ..scenario import load_scenario

    scn = load_scenario(args.scenario, need_T=args.T is None)
    T = scn.T if args.T is None else args.T
    if not (math.isfinite(T) and T > 0):
        raise InputError("T", f"must be finite and > 0, got {T}")
    if not (0 < args.rtol < 1e-3):
        raise InputError("rtol", f"must lie in (0, 1e-3), got {args.rtol}")
    try:
        ode = GaussianODE.from_scenario(scn, backend=args.backend)
    except Exception as exc:  # NotGaussianPreserving and friends: one line, exit 2
        if type(exc).__name__ == "NotGaussianPreserving":
            raise InputError("attention", f"not Gaussian-preserving: {exc}") from None
        raise
    # the same call as the Python API (GaussianODE.integrate): identical blow-up times
    sol = ode.integrate(scn.alpha0, scn.Sigma0, T, rtol=args.rtol)
    t, alpha, Sigma = float(sol.t[-1]), sol.alpha[-1], sol.Sigma[-1]
    out = {"t": t, "alpha": alpha.tolist(), "Sigma": Sigma.tolist(), "status": str(sol.status),
           "blowup_time": sol.blowup_time, "blowup_time_error": sol.blowup_time_error,
           "growth_exponent": sol.exponent, "backend": sol.backend, "message": sol.message}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"status {sol.status} at t = {t:.10g} (backend {sol.backend})")
        if sol.blowup_time is not None:
            print(f"blow-up time {sol.blowup_time:.12g} ± {sol.blowup_time_error:.2g}")
        print("alpha =", np.array2string(alpha, precision=6))
        print("Sigma =", np.array2string(Sigma, precision=6))
    return 0
