"""The sphere parts of ``tpde particles``, ``tpde classify``, ``tpde sweep`` and ``tpde derive --sphere``.

``tpde particles --scenario sphere_sa_s2 --n 32 --seed 0`` samples the scenario's ``init`` block, runs
:func:`symbolic_tpde.numerics.particles.sphere.simulate_sphere` and prints (``--json``)::

    {"status": "ok", "geometry": "sphere", "norm": .., "n": .., "d": .., "t": .., "clusters": k, "delta": 1e-3,
     "min_inner": min_ij <θ_i, θ_j>, "time_to_one_cluster": t or null, "monitor": {"name": .., "value": ..},
     "radius": [min, max] (pre/peri),
     "max_renorm": .., "tolerance": .., "steps": .., "nfev": .., "dtype": .., "seed": .., "seconds": ..}

(clusters by the rule of :mod:`symbolic_tpde.analysis.sphere_clusters`; ``monitor``: the first head kind's
diagnostic, the energy ``Ẽ_β`` with that head's β for SA/USA, the distance to the first token for causal).
``--save FILE.npz``: ``times (101,)``, ``X (101, n, d)`` (the state: θ, or x = rθ for pre/peri).  Exit 3 on a
blow-up (with its time), 5 when ``--max-seconds`` stopped the run (``"status": "time-limit"``, no file saved).

``tpde classify --scenario SPHERE_SCENARIO --n N --seed S`` draws the tokens and prints the sphere verdict of the
one classifier; ``tpde sweep --kind sphere_sa|sphere_usa|sphere_causal --d D --tokens N --range B0 B1`` the
phase diagram over ``(t, β)`` (:mod:`symbolic_tpde.analysis.sphere_sweep`).

``tpde derive --sphere equiangular|two-tokens|circle|harmonics|causal [--norm N] [--sphere-kind K] [--d D]``
(``--d`` for harmonics on ``S^{D-1}``, default 3) prints a reduction
of :mod:`symbolic_tpde.symbolic.sphere_reductions` as numbered steps, each with the check SymPy made; exit 1
if a check failed.  With ``--beta B`` (equiangular, circle, harmonics; ``--tokens N`` for equiangular, default
32) it also prints the numbers of :func:`symbolic_tpde.analysis.sphere_numbers.sphere_numbers` (JSON key
``"numbers"``): the equiangular ``t*`` from ``ρ₀ = 0``, the approach rate, for Pre-LN ``lim t²(1 - ρ)``, and the
growth rates and fastest mode at ``B``.
"""

from __future__ import annotations

import sys

REDUCTIONS = ("equiangular", "two-tokens", "circle", "harmonics", "causal")


def is_sphere_file(path: str) -> bool:
    """Whether ``path`` (a file or a built-in name) is a sphere scenario (read with the strict reader)."""
    from pathlib import Path

    from ..inputs.scenario import builtin_scenarios
    from ..inputs.checks import read_json

    if not Path(path).exists():
        return str(path) in builtin_scenarios("sphere")
    if Path(path).is_dir():
        return False
    data = read_json(Path(path), "scenario")
    from ..registry.kinds import scenario_geometry

    return scenario_geometry(data) == "sphere"


#: ``tpde particles`` on the sphere keeps 101 frames (for the time to one cluster) when ``n d`` is at most this
FRAMES_CAP = 100_000


def run_particles(args, *, save, exit_blowup: int, max_pair_work: float) -> int:
    """``tpde particles`` on a sphere scenario; ``save``, the blow-up exit code and the work cap are those of
    :mod:`.particles` (passed in: that module calls this one)."""
    import time

    import numpy as np

    from ..analysis.sphere_clusters import DELTA, cluster_labels, monitor_report, step_budget, time_to_one_cluster
    from ..errors import BlowupError, InputError
    from ..registry.kinds import part
    from ..inputs.checks import horizon, strict_json
    from ..numerics.particles.sphere import load_sphere_scenario, simulate_sphere
    from .gaussian import EXIT_TIME_LIMIT, max_seconds

    if args.steps is not None or args.method not in ("rk4", "dopri5"):
        raise InputError("steps" if args.steps is not None else "method",
                         "sphere runs use error-controlled Dormand-Prince steps (no --steps / --method)")
    if args.n < 2:
        raise InputError("n", f"must be >= 2, got {args.n}")
    if args.seed < 0:
        raise InputError("seed", f"must be >= 0, got {args.seed}")
    scn = load_sphere_scenario(args.scenario)
    T = scn.T if args.T is None else horizon(args.T, "T")
    if float(args.n) ** 2 * len(scn.weights.heads) * 6 * 1e4 > max_pair_work:
        raise InputError("n", f"{args.n} tokens exceed the work cap (about 1e4 steps of {args.n}^2 pairs)")
    X0 = scn.initial(args.n, np.random.default_rng(args.seed))
    # 101 frames: saved with --save, and the time to one cluster read off them (kept when n d <= FRAMES_CAP)
    t_eval = np.linspace(0.0, T, 101) if args.save or args.n * scn.d <= FRAMES_CAP else None
    t0 = time.perf_counter()
    try:
        run = simulate_sphere(X0, scn.weights, T, norm=scn.norm, alpha=scn.alpha, dtype=np.dtype(args.dtype),
                              max_steps=step_budget(args.n, scn.d, len(scn.weights.heads)),
                              t_eval=t_eval, max_seconds=max_seconds(args), fixed_points=True)
    except BlowupError as exc:
        out = {"status": "blowup", "geometry": "sphere", "n": args.n, "t": exc.t, "where": exc.where,
               "detail": exc.detail}
        print(strict_json(out) if args.json else f"blowup: {exc.where} at t = {exc.t:.6g}: {exc.detail}")
        return exit_blowup
    seconds = time.perf_counter() - t0
    th = run.theta.astype(float)
    head = scn.weights.heads[0]
    diag = part(head.kind, "diagnostic")
    out = {"status": run.status, "geometry": "sphere", "norm": scn.norm, "n": args.n, "d": scn.d, "t": run.t,
           "clusters": int(cluster_labels(th).max() + 1), "delta": DELTA, "min_inner": float(np.min(th @ th.T)),
           "time_to_one_cluster": None if t_eval is None or run.status != "ok" else
           time_to_one_cluster(run.times, run.trajectory / np.linalg.norm(run.trajectory, axis=-1, keepdims=True)),
           "monitor": monitor_report(diag.monitor_name, diag.monitor, th, float(head.params["beta"])),
           "radius": None if run.r is None else [float(run.r.min()), float(run.r.max())],
           "max_renorm": run.max_renorm, "tolerance": run.tolerance, "steps": run.steps, "nfev": run.nfev,
           "dtype": run.dtype, "seed": args.seed, "seconds": seconds}
    if run.status == "time-limit":
        out["detail"] = f"wall-clock limit reached at t = {run.t:.6g} (before T = {T:.6g}); raise --max-seconds"
    elif run.status != "ok":
        out["detail"] = f"{run.detail} (before T = {T:.6g})"
    elif args.save:
        save(args.save, run.times, run.trajectory)
    if args.json:
        print(strict_json(out))
    else:
        if run.status != "ok":
            print(f"{run.status}: {out['detail']}")
        print(f"sphere ({scn.norm}), n = {args.n}, d = {scn.d}, t = {run.t:.6g} ({run.steps} steps, {run.dtype}, "
              f"{seconds:.2f} s)")
        print(f"clusters (<θ_i,θ_j> >= 1 - {DELTA:g}): {out['clusters']}; min <θ_i,θ_j> = {out['min_inner']:.6g}")
        if out["time_to_one_cluster"] is not None:
            print(f"one cluster from t = {out['time_to_one_cluster']:.6g} (first of 101 frames from which every "
                  "frame is one cluster)")
        print(f"{out['monitor']['name']} = {out['monitor']['value']:.10g}")
        if out["radius"] is not None:
            print(f"radius in [{out['radius'][0]:.6g}, {out['radius'][1]:.6g}]")
    sys.stdout.flush()
    return EXIT_TIME_LIMIT if run.status == "time-limit" else 0     # "stalled": exit 0, as tpde gaussian


def run_classify(args) -> int:
    """``tpde classify`` on a sphere scenario: ``--n`` tokens drawn with ``--seed`` from the ``init`` block, the
    verdict of :func:`symbolic_tpde.analysis.verdict.classify_long_time` (its sphere branch) at ``--T``."""
    import numpy as np

    from ..analysis.verdict import classify_long_time
    from ..errors import InputError
    from ..numerics.particles.sphere import load_sphere_scenario
    from ..inputs.checks import horizon, strict_json
    from .gaussian import max_seconds

    if not 2 <= args.n <= 4096:
        raise InputError("n", f"must be in [2, 4096] for a sphere scenario, got {args.n}")
    if args.seed < 0:
        raise InputError("seed", f"must be >= 0, got {args.seed}")
    scn = load_sphere_scenario(args.scenario)
    T = horizon(args.T, "T")
    X0 = scn.initial(args.n, np.random.default_rng(args.seed))
    v = classify_long_time(scn, X0, T, max_seconds=max_seconds(args))
    if args.json:
        print(strict_json(v.as_dict() | {"n": args.n, "seed": args.seed, "norm": scn.norm, "d": scn.d}))
        return 0
    print(v.label)
    for f in v.facts:
        print(f"theorem '{f.name}': {f.statement} ({f.source})")
        for h in f.hypotheses:
            print(f"    hypothesis: {h}")
    for e in v.evidence:
        print(f"evidence: {e}")
    if v.rate:
        print("rate:", {k: val for k, val in v.rate.items() if k != "meaning"})
    return 0


def is_sphere_kind(kind: str) -> bool:
    from ..registry.kinds import kind_names

    return kind in kind_names("sphere")


#: ``tpde sweep`` on a sphere kind: the cost of one field evaluation of one cloud is ``max(tokens² d,
#: CLOUD_OVERHEAD)`` multiply-add equivalents (:func:`symbolic_tpde.analysis.sphere_clusters.step_budget`; the
#: clouds of a batch are evaluated one by one).  ``size = betas x clouds x that cost`` is refused above
#: MAX_SWEEP_SIZE, and every run's step budget is ``SWEEP_WORK / (7 size)`` steps (7 evaluations per
#: Dormand-Prince step), at most STEP_BUDGET: the sweep's
#: work is then at most SWEEP_WORK (1e12, about 20 minutes of one core); at the largest accepted size a run has
#: 1 400 steps.  A run that uses its budget ends "stalled" (step limit) at the time reached.  The issue-29
#: example, 200 betas x 1 000 clouds of 8 tokens (1e10), was bounded only by the wall-clock cap (hours)
MAX_SWEEP_SIZE, SWEEP_WORK = 1e8, 1e12
#: ``sphere_usa`` (no softmax normalisation): the weights ``e^{β<θ_i,θ_j>}`` and the velocity are of size
#: ``e^{|β|}``, beyond float64 (1.8e308 = e^709.8) above this
USA_MAX_BETA = 700.0


def run_sweep(args, *, writable_stem) -> int:
    """``tpde sweep --kind sphere_sa|sphere_usa|sphere_causal``: the phase diagram of
    :mod:`symbolic_tpde.analysis.sphere_sweep` (``--range`` is the range of β, ``--n`` the number of β values,
    ``--K`` the clouds per β, ``--tokens`` their size, ``--d`` up to 1024); every argument checked first
    (``writable_stem``: the output check of :mod:`.sweep`, passed in: that module calls this one)."""
    import numpy as np

    from ..analysis.sphere_sweep import run_sphere_sweep, save_sphere_sweep
    from ..errors import InputError
    from ..numerics.particles.sphere import SPHERE_MAX_DIM
    from ..inputs.checks import sweep_axis
    from .gaussian import EXIT_TIME_LIMIT, max_seconds

    for name, given in (("skew", args.skew != 0.0), ("rest", args.rest is not None), ("V", args.V is not None),
                        ("theta", args.theta != 0.4), ("no-symmetrise", args.no_symmetrise),
                        ("scheduler", args.scheduler is not None), ("workers", args.workers != 1)):
        if given:
            raise InputError(name, f"not used by the sphere sweep of {args.kind!r} (Q = K = V = I, one process)")
    if not 1 <= args.n <= 200:
        raise InputError("n", f"must be in [1, 200] (the number of beta values), got {args.n}")
    if not 1 <= args.K <= 1000:
        raise InputError("K", f"must be in [1, 1000] (clouds per beta), got {args.K}")
    if not 2 <= args.tokens <= 1024:
        raise InputError("tokens", f"must be in [2, 1024], got {args.tokens}")
    if not 2 <= args.d <= SPHERE_MAX_DIM:
        raise InputError("d", f"must be in [2, {SPHERE_MAX_DIM}] for a sphere kind, got {args.d}")
    smin, smax, T = sweep_axis(args, "BETA_MIN < BETA_MAX")
    if args.kind == "sphere_usa" and max(abs(smin), abs(smax)) > USA_MAX_BETA:
        raise InputError("range", f"|beta| <= {USA_MAX_BETA:g} for sphere_usa, got {smin:g} {smax:g}: its "
                         "unnormalised weights e^(beta <θ_i, θ_j>) leave float64 above ~709 (softmax kinds "
                         "take any beta)")
    from ..analysis.sphere_clusters import CLOUD_OVERHEAD, step_budget

    size = float(args.n) * args.K * max(float(args.tokens) ** 2 * args.d, CLOUD_OVERHEAD)
    if size > MAX_SWEEP_SIZE:
        raise InputError("K", f"n K max(tokens² d, {CLOUD_OVERHEAD:g}) = {size:.3g} exceeds the cap "
                         f"{MAX_SWEEP_SIZE:g} (the work of one cloud evaluation; lower one of them)")
    writable_stem(args.out)
    steps = step_budget(args.tokens, args.d, clouds=args.n * args.K, work=SWEEP_WORK)
    res = run_sphere_sweep(args.kind, args.d, args.tokens, np.linspace(smin, smax, args.n), T, K=args.K,
                           seed=args.seed, max_seconds_point=max_seconds(args), max_steps=steps)
    for p in save_sphere_sweep(res, args.out):
        print(p)
    for b, v, te in zip(res.betas, res.verdicts, res.equiangular_time):
        eq = "not by T" if not np.isfinite(te) else f"{te:.4g}"
        print(f"beta = {b:g}: equiangular reduction reaches 1 - delta at t = {eq}; long time: {v['label']}")
    stalled = sum(s == "stalled" for s in res.status)
    if stalled:
        print(f"tpde sweep: stalled: {stalled} of {len(res.betas)} beta values stopped early (a step limit or a "
              "collapsed step size, finite state; their probabilities stop at the time reached)", file=sys.stderr)
    capped = sum(s == "time-limit" for s in res.status)
    if capped:
        print(f"tpde sweep: time-limit: {capped} of {len(res.betas)} beta values reached the per-value cap "
              f"(their probabilities stop at the time reached); raise --max-seconds", file=sys.stderr)
        return EXIT_TIME_LIMIT
    return 0


def _expr(e) -> str:
    return str(e)


def run_derive(args) -> int:
    """``tpde derive --sphere R --format json``: the reduction's steps (the text, LaTeX and Beamer documents are
    rendered by :mod:`symbolic_tpde.documents.sphere_document` from the same :func:`reduction`)."""
    from ..documents.sphere_document import reduction
    from ..inputs.checks import strict_json

    title, steps, rhs, extra = reduction(args.sphere, args.norm, args.sphere_kind, args.d)
    extra = {k: _expr(v) for k, v in extra.items()}
    ok = all(s.checked for s in steps)
    numbers = _numbers(args, args.sphere_kind, args.norm)
    if numbers is not None:
        extra["numbers"] = numbers
    print(strict_json({"reduction": args.sphere, "title": title, "all_checked": ok,
                       "steps": [{"title": s.title, "lhs": str(s.lhs), "result": _expr(s.rhs), "check": s.method,
                                  "ok": s.checked, "scope": s.scope} for s in steps],
                       "rhs": {k: _expr(v) for k, v in rhs.items()}, "consequences": extra}))
    return 0 if ok else 1


def _numbers(args, kind: str, norm: str) -> dict | None:
    """``--beta``: :func:`~symbolic_tpde.analysis.sphere_numbers.sphere_numbers` for the reduction asked."""
    import math

    from ..analysis.sphere_numbers import sphere_numbers
    from ..errors import InputError

    if args.beta is None:
        return None
    if not (math.isfinite(args.beta) and 0 < args.beta <= 100):
        raise InputError("--beta", f"must be a number in (0, 100], got {args.beta}")
    n = 32 if args.tokens is None else args.tokens
    if not 2 <= n <= 10_000:
        raise InputError("--tokens", f"must be an integer in [2, 10000], got {n}")
    d = (3 if args.d is None else args.d) if args.sphere == "harmonics" else 2
    out = sphere_numbers(kind, norm, beta=args.beta, n=n, d=d)
    if args.sphere != "equiangular":
        out = {k: out[k] for k in ("kind", "beta", "linear")}
    return out


def _print_numbers(out: dict) -> None:
    print(f"at beta = {out['beta']:g}:")
    if "t_star" in out:
        ts = "not by T = 1000" if out["t_star"] is None else f"{out['t_star']:.10g}"
        print(f"  equiangular reduction, n = {out['n']}, from rho0 = {out['rho0']:g}: one cluster "
              f"(rho >= 1 - {out['delta']:g}) at t* = {ts}")
        print("  near rho = 1: " + ", ".join(f"{k} = {v:.10g}" for k, v in out["rate"].items()))
    if "pre_ln_constant" in out:
        c = out["pre_ln_constant"]
        print(f"  Pre-LN: lim t^2 (1 - rho) = {c['value']:.10g} (extrapolation change {c['error']:.2g})")
    lin = out["linear"]
    print(f"  linear growth at the uniform measure (d = {lin['d']}): fastest mode {lin['fastest_mode']}, rates "
          + ", ".join(f"{v:.6g}" for v in lin["rates"][:6]) + (" ..." if len(lin["rates"]) > 6 else ""))
