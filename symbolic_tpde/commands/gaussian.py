"""``tpde gaussian``: integrate the Gaussian moment ODE of a scenario, with blow-up detection.

Prints (``--json``, strict JSON: non-finite numbers become ``null``, the ``status`` says why)::

    {"t": .., "alpha": [..] | null, "Sigma": [[..]], "status": "ok" | "blowup" | "overflow" | "stalled" |
     "tilt-ceased" | "time-limit", "blowup_time": null | number, "blowup_time_error": null | number,
     "covariance_only": bool, "saved": null | FILE, ...}

``t``/``alpha``/``Sigma``: the state at ``T`` or, after a blow-up, at the last detection level (``tr Σ + |α|²``
about ``10¹⁰`` times its start).  ``blowup_time`` is extrapolated from the growth law and
``blowup_time_error`` bounds its error (:mod:`symbolic_tpde.numerics.ode.solve`; the run is
``GaussianODE.from_scenario(...).integrate(...)``, exactly what the Python API does).  ``"tilt-ceased"``: an
existence condition of the Gaussian tilt crossed zero at ``t``.  ``"overflow"`` (rare): the state
grew past ``10²⁰⁰`` times its start without the signature of a finite-time singularity (exponential growth);
``t`` is where the run stopped to stay finite.  ``"stalled"`` (rare): the integrator's step size collapsed
before ``T`` and the regular form (:mod:`symbolic_tpde.gaussian.regular`, Sundman time) found no settled
blow-up either; ``t`` is where it gave up.  When the regular form does reach the singularity (e.g. an isotropic
``Σ₀`` with a skew part in ``V``), the status is ``"blowup"`` with its ``T*``, error bound and message, and
the last row is the regular form's end state (``tr Σ ≈ 10⁴⁰ tr Σ₀``).  Blow-up and tilt-ceased are results, reported with exit status 0.

Bounded work: ``--max-seconds S`` (default :data:`DEFAULT_MAX_SECONDS` = 600) caps the wall-clock time of the
integration (:class:`symbolic_tpde.numerics.ode.solve.Deadline`, checked before every right-hand side evaluation,
the error-bar run included); when it is reached the output is printed as usual with ``"status": "time-limit"``
and ``t`` the last accepted time, and the exit status is :data:`EXIT_TIME_LIMIT` (5): the requested result was
not obtained, it is neither bad input (2) nor a property of the ODE (3).  The rhs evaluations are capped too
(``max_nfev`` = 10⁶, status ``"stalled"``), with ``--covariance-only`` as well.

``--times t1 t2 ...`` / ``--n-times N`` (``N`` equally spaced times on ``[0, T]``): the states at those times
(dense output) are printed (text, and ``"times": [{"t", "alpha", "Sigma"}, ...]`` in JSON); requested times
past an early stop (a blow-up) are listed as ``"not_reached"``, never replaced by the stopping time.
``--save FILE`` (``.npz`` or ``.csv``, see :func:`save_trajectory` for the fields) writes the trajectory: the
accepted steps, or the states at the requested times, plus the stopping point when the run stopped early
(flagged ``stop_row``).  ``--covariance-only`` integrates ``dΣ/dt`` alone (``α`` frozen at 0) where the
derived covariance equation does not involve ``α`` (:func:`symbolic_tpde.analysis.clustering.covariance_closed`,
README Mathematics §3): e.g. softmax with ``V = I``, where ``α ~ eᵗ`` would otherwise overflow long before
``Σ`` converges.  Refused (exit 2) when ``dΣ/dt`` involves ``α`` (linear attention).
"""

from __future__ import annotations

import json
import math

#: wall-clock cap of one ``tpde gaussian`` / ``tpde particles`` run, seconds (``--max-seconds``)
DEFAULT_MAX_SECONDS = 600.0
#: exit status of a run stopped by its wall-clock cap (README "Commands"; ``status`` ``"time-limit"``)
EXIT_TIME_LIMIT = 5
#: the largest ``--max-seconds`` accepted (a day: any cap must be a real bound)
MAX_SECONDS_CAP = 86400.0


def register(sub) -> None:
    p = sub.add_parser("gaussian", help="integrate the Gaussian moment ODE of a scenario (blow-up aware)")
    p.add_argument("--scenario", required=True, metavar="FILE", help="scenario JSON file (or a built-in name)")
    p.add_argument("--T", type=float, default=None, help="horizon (default: the scenario's T)")
    p.add_argument("--backend", default="auto", choices=("auto", "numpy", "c"), help="generated-code backend")
    p.add_argument("--rtol", type=float, default=1e-12, help="relative tolerance of DOP853 (default 1e-12)")
    p.add_argument("--covariance-only", action="store_true",
                   help="integrate dΣ/dt alone (refused when it involves the mean)")
    p.add_argument("--save", default=None, metavar="FILE", help="write the trajectory (.npz or .csv)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--times", type=float, nargs="+", default=None, metavar="t",
                   help="output times (increasing, within [0, T]; dense output)")
    g.add_argument("--n-times", type=int, default=None, metavar="N", help="N equally spaced output times on [0, T]")
    add_max_seconds(p, DEFAULT_MAX_SECONDS, "the integration")
    p.add_argument("--json", action="store_true", help="print JSON (default: a short text summary)")
    p.set_defaults(func=run)


def add_max_seconds(p, default: float, what: str) -> None:
    """The ``--max-seconds`` option shared by ``gaussian``, ``particles`` and ``sweep``."""
    p.add_argument("--max-seconds", type=float, default=default, metavar="S",
                   help=f"wall-clock cap of {what} in seconds (default {default:g}); when reached: status "
                        f"time-limit with the time reached, exit {EXIT_TIME_LIMIT}")


def max_seconds(args) -> float:
    """``--max-seconds`` checked: finite, ``> 0`` and at most :data:`MAX_SECONDS_CAP`."""
    from ..errors import InputError
    from ..inputs.checks import positive_number

    s = positive_number(args.max_seconds, "max-seconds")
    if s > MAX_SECONDS_CAP:
        raise InputError("max-seconds", f"must be at most {MAX_SECONDS_CAP:g} s, got {s:g}")
    return s


def finite_or_none(x):
    """Strict-JSON form of ``x``: non-finite floats -> ``None``, numpy scalars/arrays -> Python lists/floats."""
    import numpy as np

    if isinstance(x, dict):
        return {k: finite_or_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite_or_none(v) for v in x]
    if isinstance(x, np.ndarray):
        return finite_or_none(x.tolist())
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def dumps(obj) -> str:
    """``json.dumps`` with ``allow_nan=False`` after :func:`finite_or_none`."""
    return json.dumps(finite_or_none(obj), allow_nan=False)


def output_times(args, T: float):
    import numpy as np

    from ..errors import InputError

    if args.n_times is not None:
        if not 2 <= args.n_times <= 10**6:
            raise InputError("n-times", f"must be in [2, 1e6], got {args.n_times}")
        return np.linspace(0.0, T, args.n_times)
    if args.times is None:
        return None
    ts = np.asarray(args.times, dtype=float)
    if not np.all(np.isfinite(ts)) or np.any(np.diff(ts) < 0) or ts[0] < 0 or ts[-1] > T:
        raise InputError("times", f"must be finite, increasing and within [0, T = {T:g}]")
    return ts


def split_rows(sol_t, ts, stopped_early: bool):
    """Which rows of a run's output are the requested times and which is the stopping point.

    With output times ``ts`` the integrator returns the states at the requested times it reached and, when the
    run stopped early (blow-up, tilt ceased, a cap), one more row: the state where it stopped.  Returns
    ``(stop_row, not_reached)``: a boolean per row (``True`` only for that stopping row) and the requested times
    past the stop (never replaced by the stopping time)."""
    import numpy as np

    n = len(sol_t)
    stop_row = np.zeros(n, dtype=bool)
    if ts is None:
        if stopped_early and n:
            stop_row[-1] = True
        return stop_row, np.zeros(0)
    ts = np.asarray(ts, dtype=float)
    # the rows at requested times come first, in order (a run that fell back to the regular form near a
    # blow-up has none between its stall and T*: those times count as not reached)
    reached = 0
    while reached < min(n, len(ts)) and sol_t[reached] == ts[reached]:
        reached += 1
    if n > reached:
        stop_row[reached:] = True
    return stop_row, ts[reached:]


def save_trajectory(path: str, t, alpha, Sigma, meta: dict, stop_row=None, not_reached=None) -> list[str]:
    """Write ``t (K,)``, ``alpha (K, d)`` (or ``None``), ``Sigma (K, d, d)`` as ``.npz`` or ``.csv``.

    Every field has one type, whatever the run did: ``.npz`` holds the arrays, ``stop_row (K,)`` (bool: the
    row is where the run stopped early, not a requested time), ``not_reached (m,)`` (float: requested times past
    the stop, possibly empty), ``status`` (str) and the metadata; ``blowup_time`` and ``blowup_time_error``
    (float) are present only when a blow-up was found.  ``.csv``: one header line of column names (``t``,
    ``alpha_i``, ``Sigma_i_j`` for ``i <= j``, ``stop_row`` as 0/1) and numbers only, so
    ``np.genfromtxt(f, delimiter=",", names=True)`` and ``pandas.read_csv(f)`` load it without options; the
    metadata go to a side file ``<name>.meta.json`` (strict JSON).  Returns the paths written."""
    from pathlib import Path

    import numpy as np

    from ..errors import InputError

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)      # a creatable directory passed writable_output before the run
    d = Sigma.shape[-1]
    K = len(t)
    stop_row = np.zeros(K, dtype=bool) if stop_row is None else np.asarray(stop_row, dtype=bool)
    not_reached = np.zeros(0) if not_reached is None else np.asarray(not_reached, dtype=float)
    meta = {k: v for k, v in meta.items() if v is not None}
    if p.suffix == ".npz":
        arrays = dict(t=np.asarray(t, dtype=float), Sigma=np.asarray(Sigma, dtype=float), stop_row=stop_row,
                      not_reached=not_reached)
        if alpha is not None:
            arrays["alpha"] = np.asarray(alpha, dtype=float)
        extra = {k: np.array(v) for k, v in meta.items()}
        np.savez(p, **arrays, **extra)
        return [str(p)]
    if p.suffix == ".csv":
        iu = np.triu_indices(d)
        cols = ["t"] + ([f"alpha_{i}" for i in range(d)] if alpha is not None else []) + \
               [f"Sigma_{i}_{j}" for i, j in zip(*iu)] + ["stop_row"]
        with open(p, "w") as fh:
            fh.write(",".join(cols) + "\n")
            for k in range(K):
                row = [t[k]] + (list(alpha[k]) if alpha is not None else []) + list(Sigma[k][iu])
                fh.write(",".join(f"{x:.17g}" for x in row) + f",{int(stop_row[k])}\n")
        side = p.with_name(p.stem + ".meta.json")
        side.write_text(dumps({**meta, "not_reached": not_reached.tolist(), "columns": cols}) + "\n")
        return [str(p), str(side)]
    raise InputError("save", f"expected a .npz or .csv file name, got {path!r}")


def load_ode(scenario: str, T, backend: str = "auto"):
    """``(scenario, T, GaussianODE)`` with the command-line checks shared by ``gaussian``/``classify``/``plot``."""
    from ..errors import InputError, NotGaussianPreserving
    from ..gaussian import GaussianODE
    from ..inputs.scenario import load_scenario

    scn = load_scenario(scenario, need_T=T is None)
    T = scn.T if T is None else T
    if not (math.isfinite(T) and T > 0):
        raise InputError("T", f"must be finite and > 0, got {T}")
    try:
        ode = GaussianODE.from_scenario(scn, backend=backend)
    except NotGaussianPreserving as exc:  # one line, exit 2
        raise InputError("attention", f"not Gaussian-preserving: {exc}") from None
    from ..gaussian import pack_state

    ode.check_tilt(0.0, pack_state(scn.alpha0, scn.Sigma0), "Sigma0")   # exit 2 where the tilt does not exist
    return scn, T, ode


def run(args) -> int:
    import numpy as np

    from ..errors import InputError
    from ..inputs.checks import writable_output
    from ..gaussian import unpack_state

    if not (0 < args.rtol < 1e-3):
        raise InputError("rtol", f"must lie in (0, 1e-3), got {args.rtol}")
    if args.save is not None:     # checked before the work (the derivation too), like every command's outputs
        writable_output(args.save, "save", suffixes=(".npz", ".csv"))
    cap = max_seconds(args)
    scn, T, ode = load_ode(args.scenario, args.T, args.backend)
    ts = output_times(args, T)
    if args.covariance_only:
        from ..analysis.clustering import integrate_covariance

        sol = integrate_covariance(ode, scn.Sigma0, T, rtol=args.rtol, t_eval=ts, max_seconds=cap)
        _, Sig = unpack_state(sol.y, ode.d)
        alphas = None
        t_end, S_end = float(sol.t_end), unpack_state(sol.y_end, ode.d)[1]
        a_end = None
        backend = ode.backend
    else:
        # the same call as the Python API (GaussianODE.integrate): identical blow-up times
        sol = ode.integrate(scn.alpha0, scn.Sigma0, T, rtol=args.rtol, t_eval=ts, max_seconds=cap)
        alphas, Sig = sol.alpha, sol.Sigma
        t_end, a_end, S_end = float(sol.t[-1]), sol.alpha[-1], sol.Sigma[-1]
        backend = sol.backend
    ts_out = np.asarray(sol.t, dtype=float)
    stopped_early = str(sol.status) != "ok"
    stop_row, not_reached = split_rows(ts_out, ts, stopped_early)
    out = {"t": t_end, "alpha": None if a_end is None else a_end.tolist(), "Sigma": S_end.tolist(),
           "status": str(sol.status), "blowup_time": sol.blowup_time, "blowup_time_error": sol.blowup_time_error,
           "growth_exponent": sol.exponent, "backend": backend, "message": sol.message,
           "covariance_only": bool(args.covariance_only), "saved": None}
    if ts is not None:
        keep = ~stop_row
        out["times"] = [{"t": float(ts_out[k]), "alpha": None if alphas is None else alphas[k].tolist(),
                         "Sigma": Sig[k].tolist()} for k in np.flatnonzero(keep)]
        out["not_reached"] = not_reached.tolist()
    if args.save is not None:
        meta = {k: out[k] for k in ("status", "blowup_time", "blowup_time_error", "covariance_only", "backend")}
        meta["scenario"] = args.scenario
        written = save_trajectory(args.save, ts_out, alphas, Sig, meta, stop_row, not_reached)
        out["saved"] = written[0]
        out["saved_files"] = written
        out["n_saved"] = int(len(ts_out))
    if args.json:
        print(dumps(out))
    else:
        print(f"status {sol.status} at t = {t_end:.10g} (backend {backend}"
              + (", covariance only" if args.covariance_only else "") + ")")
        if sol.blowup_time is not None:
            print(f"blow-up time {sol.blowup_time:.12g} ± {sol.blowup_time_error:.2g}")
        for row in out.get("times", []):
            print(f"t = {row['t']:.10g}:")
            if row["alpha"] is not None:
                print("  alpha =", np.array2string(np.asarray(row["alpha"]), precision=6))
            print("  Sigma =", np.array2string(np.asarray(row["Sigma"]), precision=6, prefix="  Sigma = "))
        if len(not_reached):
            print("not reached (the run stopped at t = %.10g, %s): %s"
                  % (t_end, sol.status, ", ".join(f"{x:g}" for x in not_reached)))
        print(f"at the end, t = {t_end:.10g}:")
        if a_end is not None:
            print("alpha =", np.array2string(a_end, precision=6))
        print("Sigma =", np.array2string(S_end, precision=6))
        if out["saved"]:
            print(f"trajectory ({out['n_saved']} rows) -> {', '.join(out['saved_files'])}")
        if str(sol.status) == "time-limit":
            print(sol.message)
    return EXIT_TIME_LIMIT if str(sol.status) == "time-limit" else 0
