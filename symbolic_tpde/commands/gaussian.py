"""``tpde gaussian``: integrate the Gaussian moment ODE of a scenario, with blow-up detection.

Prints (``--json``)::

    {"t": .., "alpha": [..], "Sigma": [[..]], "status": "ok" | "blowup" | "overflow" | "stalled",
     "blowup_time": null | number, "blowup_time_error": null | number, ...}

``t``/``alpha``/``Sigma``: the state at ``T`` or, after a blow-up, at the last detection level (``tr Σ + |α|²``
about ``10¹⁰`` times its start).  ``blowup_time`` is extrapolated from the growth law and
``blowup_time_error`` bounds its error (:mod:`symbolic_tpde.analysis.blowup`).  ``"overflow"`` (rare): the state
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

    from ..analysis.blowup import gaussian_size, integrate_blowup
    from ..errors import InputError
    from ..gaussian import GaussianODE, pack_state, unpack_state
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
    y0 = pack_state(scn.alpha0, scn.Sigma0)
    res = integrate_blowup(ode.rhs, y0, T, gaussian_size(scn.d), rtol=args.rtol,
                           breakpoints=scn.schedule.breakpoints(T))
    alpha, Sigma = unpack_state(res.y, scn.d)
    out = {"t": res.t, "alpha": alpha.tolist(), "Sigma": Sigma.tolist(), "status": res.status,
           "blowup_time": res.blowup_time, "blowup_time_error": res.blowup_time_error,
           "growth_exponent": res.exponent, "backend": ode.backend, "message": res.message}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"status {res.status} at t = {res.t:.10g} (backend {ode.backend})")
        if res.blowup_time is not None:
            print(f"blow-up time {res.blowup_time:.12g} ± {res.blowup_time_error:.2g}")
        print("alpha =", np.array2string(alpha, precision=6))
        print("Sigma =", np.array2string(Sigma, precision=6))
    return 0
