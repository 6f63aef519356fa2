"""The front door: one scenario reader for both geometries and three verbs with one vocabulary.

Each verb takes a *model* first, then its initial data, then the horizon, then keyword options; ``T``,
the initial data and the law of the tokens default to the scenario's when the model is one:

* :func:`moments` ``(model, alpha0, Sigma0, T, *, t_eval)`` — the Gaussian moment ODE
  (:class:`~symbolic_tpde.gaussian.GaussianODE`), a :class:`~symbolic_tpde.gaussian.integrate.GaussianSolution`;
* :func:`particles` ``(model, X0, T, *, t_eval)`` — the particle system, a
  :class:`~symbolic_tpde.numerics.particles.simulate.ParticleRun` (on the sphere a
  :class:`~symbolic_tpde.numerics.particles.sphere.SphereRun`); ``X0=None`` draws ``n`` tokens from the
  scenario's law with ``numpy.random.default_rng(seed)``;
* :func:`compare` ``(model, alpha0, Sigma0, T, *, t_eval)`` — both at common times: ``runs`` independent
  clouds of ``n`` tokens against the moment ODE, with Monte-Carlo standard errors from the spread of the runs
  (:class:`Comparison`).

A *model* is a :class:`~symbolic_tpde.weights.Scenario` (from :func:`load_scenario`), a
:class:`~symbolic_tpde.weights.Weights`, a :class:`~symbolic_tpde.weights.Schedule` (or a callable
``t -> Weights``), a :class:`~symbolic_tpde.gaussian.GaussianODE`, or a derived system
(:func:`symbolic_tpde.derive_kernel`) with ``values`` for its parameter symbols; a sphere scenario for
:func:`particles`.  Methods are named for what runs (``"dopri5"``, ``"rk4"``, ``"euler"``, ``"ivp"`` for the
particles; any :func:`~symbolic_tpde.gaussian.integrate.integrate_gaussian` method for the ODE).  Nothing is
printed unless ``progress=True``.

:func:`symbolic_tpde.sphere_numbers` (:mod:`symbolic_tpde.analysis.sphere_numbers`) reports as numbers what
the sphere reductions derive.  Layer: beside :mod:`symbolic_tpde.gaussian` (it uses the Gaussian ODE and the
particle integrators, nothing above them), so the package's own comparisons call :func:`compare`.

>>> import symbolic_tpde as st
>>> scn = st.load_scenario("softmax_2d")
>>> sol = st.moments(scn, t_eval=[0.0, 0.5])
>>> sol.t.tolist(), sol.alpha.shape
([0.0, 0.5], (2, 2))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import InputError
from .values import value_eq
from .weights import Scenario, Schedule, Weights

__all__ = ["load_scenario", "moments", "particles", "compare", "Comparison"]


# ------------------------------------------------------------------------------------------------- reading
def load_scenario(path, *, need_T: bool = True, gaussian_data: bool = True):
    """Read a scenario file (or a built-in name) of either geometry: a :class:`~symbolic_tpde.weights.Scenario`
    for ``R^d``, a :class:`~symbolic_tpde.numerics.particles.sphere.SphereScenario` for ``"geometry":
    "sphere"``.  The file is read once by the input layer's strict reader; ``need_T``/``gaussian_data`` as in
    :func:`symbolic_tpde.inputs.scenario.load_scenario` (R^d only).

    >>> import symbolic_tpde as st
    >>> st.load_scenario("sphere_sa_circle").geometry, st.load_scenario("softmax_2d").d
    ('sphere', 2)
    """
    from .inputs.scenario import parse_scenario, read_scenario_file
    from .numerics.particles.sphere import parse_sphere_scenario
    from .registry.kinds import scenario_geometry

    data, base_dir = read_scenario_file(path, ("R^d", "sphere"))
    if scenario_geometry(data) == "sphere":
        return parse_sphere_scenario(data, base_dir)
    return parse_scenario(data, need_T=need_T, gaussian_data=gaussian_data, base_dir=base_dir)


# ----------------------------------------------------------------------------------------------- the model
def _is_sphere(model) -> bool:
    return getattr(model, "geometry", None) == "sphere"


def _is_system(model) -> bool:
    return hasattr(model, "rhs") and hasattr(model, "states") and hasattr(model, "params")


def _scenario_of(model):
    """The scenario behind ``model`` (itself, or a GaussianODE's), else ``model``."""
    return getattr(model, "scenario", None) or model


def _horizon(model, T) -> float:
    model = _scenario_of(model)
    if T is None:
        T = getattr(model, "T", None)
        if T is None or not math.isfinite(T):
            raise InputError("T", "missing (the model is not a scenario with a horizon)")
    if isinstance(T, bool) or not isinstance(T, (int, float, np.floating)) or not (math.isfinite(T) and T >= 0):
        raise InputError("T", f"must be a finite number >= 0, got {T!r}")
    return float(T)


def _gaussian_data(model, alpha0, Sigma0):
    model = _scenario_of(model)
    if alpha0 is None and Sigma0 is None and isinstance(model, Scenario):
        if model.init is not None and not model.init.gaussian:
            raise InputError("init.type", f"{model.init.type!r} is not Gaussian: the moment ODE needs N(alpha0, "
                             "Sigma0); give alpha0 and Sigma0")
        return model.alpha0, model.Sigma0
    if alpha0 is None or Sigma0 is None:
        raise InputError("alpha0" if alpha0 is None else "Sigma0", "missing (the Gaussian initial data)")
    return alpha0, Sigma0


def _schedule(model, values=None) -> Schedule:
    """The particle field's weights of ``model``."""
    from .gaussian.ode import GaussianODE
    from .numerics.particles.fields import as_schedule

    if isinstance(model, Scenario):
        return model.schedule
    if isinstance(model, GaussianODE):
        if model.structure is None:
            raise InputError("model", "a GaussianODE built from a derived system: pass the system and its values")
        return model.schedule
    if _is_system(model):
        return _system_schedule(model, values)
    if isinstance(model, (Schedule, Weights)) or callable(model):
        return as_schedule(model)
    raise InputError("model", f"expected a scenario, weights, a schedule, a GaussianODE or a derived system, got "
                     f"{type(model).__name__}")


def _ode(model, values=None, backend: str = "auto"):
    from .gaussian.ode import GaussianODE

    if isinstance(model, GaussianODE):
        return model
    if _is_sphere(model):
        raise InputError("model", "tokens on the sphere have no Gaussian moment ODE (use particles or "
                         "sphere_numbers)")
    if _is_system(model):
        if values is None:
            raise InputError("values", "a derived system needs numeric values for its parameters "
                             f"{[s.name for s in model.params]}")
        return GaussianODE.from_system(model, values, backend)
    if isinstance(model, Scenario):
        return GaussianODE.from_scenario(model, backend)
    return GaussianODE.from_schedule(_schedule(model), backend)


def _system_schedule(system, values) -> Schedule:
    """A user kernel's particle field: the ``custom`` head of its tilt form ``xᵀBy + yᵀRy + rᵀy`` (read off by
    :func:`symbolic_tpde.derive_kernel`) and its value matrix, at ``values``."""
    from .symbolic.user_kernel import kernel_schedule

    if values is None:
        raise InputError("values", f"numeric values for the parameters {[s.name for s in system.params]}")
    return kernel_schedule(system, values)


# ------------------------------------------------------------------------------------------------ the verbs
def moments(model, alpha0=None, Sigma0=None, T=None, *, t_eval=None, values=None, backend: str = "auto",
            method: str = "DOP853", rtol: float = 1e-12, atol: float | None = None, progress: bool = False,
            max_seconds: float | None = None):
    """The Gaussian moment ODE of ``model`` from ``N(alpha0, Sigma0)`` on ``[0, T]`` (module docstring); a
    :class:`~symbolic_tpde.gaussian.integrate.GaussianSolution` at ``t_eval`` (default: every accepted step).
    ``method``/``rtol``/``atol``: :func:`~symbolic_tpde.gaussian.integrate.integrate_gaussian`'s.

    >>> import numpy as np, symbolic_tpde as st
    >>> w = st.make_weights([st.make_head("softmax", A=np.zeros((1, 1)), V=-np.eye(1))])
    >>> sol = st.moments(w, [1.0], [[1.0]], 1.0, t_eval=[1.0])   # A = 0: Γ(x) = V E[y], so α' = -α, Σ' = 0
    >>> bool(abs(sol.alpha[-1, 0] - np.exp(-1.0)) < 1e-10), float(sol.Sigma[-1, 0, 0])
    (True, 1.0)
    """
    a0, S0 = _gaussian_data(model, alpha0, Sigma0)
    ode = _ode(model, values, backend)
    T = _horizon(model, T)
    bar = _bar(T) if progress else None
    try:
        return ode.integrate(a0, S0, T, t_eval=t_eval, method=method, rtol=rtol, atol=atol, max_seconds=max_seconds,
                             progress=None if bar is None else (lambda t, _T: bar.update(t)))
    finally:
        if bar is not None:
            bar.close()


def _bar(T):
    from .numerics.particles.simulate import _Progress

    return _Progress(T, True)


def particles(model, X0=None, T=None, *, t_eval=None, n: int = 1000, seed: int = 0, values=None,
              method: str | None = None, steps: int | None = None, dtype=np.float64, rtol: float | None = None,
              atol: float | None = None, progress: bool = False, max_seconds: float | None = None):
    """The particle system of ``model`` from ``X0`` (``(n, d)``; ``None``: ``n`` tokens drawn from the
    scenario's law with ``numpy.random.default_rng(seed)``) on ``[0, T]``, states kept at ``t_eval``
    (:func:`~symbolic_tpde.numerics.particles.simulate.simulate`; on the sphere
    :func:`~symbolic_tpde.numerics.particles.sphere.simulate_sphere`, error-controlled Dormand-Prince 5(4)).

    >>> import symbolic_tpde as st
    >>> run = st.particles(st.load_scenario("sphere_sa_circle"), n=8, T=1.0, t_eval=[0.0, 1.0])
    >>> run.theta.shape, run.times.tolist()
    ((8, 2), [0.0, 1.0])
    """
    from .numerics.particles.simulate import simulate

    T = _horizon(model, T)
    if X0 is None:
        X0 = _draw(model, n, np.random.default_rng(seed))
    if _is_sphere(model):
        from .numerics.particles.sphere import simulate_sphere

        if method not in (None, "dopri5") or steps is not None:
            raise InputError("method", "sphere runs use error-controlled Dormand-Prince 5(4) (method 'dopri5')")
        tol = rtol if rtol is not None else atol
        return simulate_sphere(X0, model.weights, T, norm=model.norm, alpha=model.alpha, dtype=dtype, tol=tol,
                               t_eval=t_eval, max_seconds=max_seconds)
    return simulate(X0, _schedule(model, values), T, t_eval=t_eval, method=method, steps=steps, dtype=dtype,
                    rtol=rtol, atol=atol, progress=progress, max_seconds=max_seconds)


def _draw(model, n: int, rng) -> np.ndarray:
    from .inputs.checks import positive_int

    positive_int(n, "n")
    if _is_sphere(model):
        return model.initial(n, rng)
    if isinstance(model, Scenario):
        if model.init is not None:
            from .numerics.measures.laws import sample

            return sample(model.init, n, rng)
        return _gaussian_draw(model.alpha0, model.Sigma0, n, rng)
    raise InputError("X0", "missing (the model is not a scenario with an initial law: give the tokens)")


def _gaussian_draw(alpha0, Sigma0, n: int, rng) -> np.ndarray:
    """``n`` draws of ``N(alpha0, Sigma0)`` as ``alpha0 + Z Lᵀ`` (``L`` the Cholesky factor)."""
    a = np.asarray(alpha0, float)
    return a + rng.standard_normal((n, a.shape[0])) @ np.linalg.cholesky(np.asarray(Sigma0, float)).T


@dataclass(frozen=True)
class Comparison:
    """Particles against the moment ODE at common times ``t (K,)`` (:func:`compare`).

    ``alpha (K, d)``, ``Sigma (K, d, d)``: the moment ODE from the law's ``N(α₀, Σ₀)``; ``mean``, ``cov`` (``1/n``):
    the clouds' moments averaged over the runs; ``deviation (K, m)``: the run average of ``v_r`` = packed
    ``(mean_r - α, cov_r - Σ)`` (against each run's own ODE when ``paired``), ``se (K, m)`` its Monte-Carlo
    standard error ``sd_r(v_r)/√R`` (from the spread of the ``R`` independent runs), ``rms (K,)`` the RMS over
    runs of ``|v_r|``; ``moved (K, m)``: packed ``(α - α₀, Σ - Σ₀)``.  Packing: :mod:`symbolic_tpde.registry.layout`.

    >>> import symbolic_tpde as st
    >>> c = st.compare(st.load_scenario("softmax_2d"), T=0.2, n=100, runs=3)
    >>> c.t.tolist(), c.runs, c.z.shape
    ([0.2], 3, (1, 5))
    """

    t: np.ndarray
    alpha: np.ndarray
    Sigma: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    deviation: np.ndarray
    se: np.ndarray
    rms: np.ndarray
    moved: np.ndarray
    n: int
    runs: int
    paired: bool
    particle_method: str

    __eq__ = value_eq

    @property
    def z(self) -> np.ndarray:
        """``|deviation| / se`` (a t-statistic with ``runs - 1`` degrees of freedom per component)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.abs(self.deviation) / self.se

    @property
    def max_z(self) -> float:
        """The largest ``z`` over times and components (at ``t = 0`` too, unless paired)."""
        return float(np.nanmax(self.z))

    @property
    def sensitivity(self) -> np.ndarray:
        """Per time, ``max_k |moved_k| / se_k``: how many standard errors the moments moved (a comparison
        means something only when this is large)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.max(np.abs(self.moved) / self.se, axis=1)


def compare(model, alpha0=None, Sigma0=None, T=None, *, t_eval=None, n: int = 1000, runs: int = 8, seed=0,
            paired: bool = False, ode=None, values=None, method: str | None = None, steps: int | None = None,
            rtol: float | None = None, atol: float | None = None, ode_options: dict | None = None,
            dtype=np.float64) -> Comparison:
    """``runs`` independent clouds of ``n`` tokens drawn from ``N(alpha0, Sigma0)`` (as ``α₀ + Z Lᵀ``) run as
    particles (:func:`particles`' ``method``/``steps``/``rtol``/``atol``) against the moment ODE at ``t_eval``
    (default ``[T]``).  ``seed``: an integer (run ``r`` draws with ``default_rng([seed, r])``) or one seed per
    run.  ``paired``: run ``r``'s ODE starts from the empirical moments of its own initial cloud (a control
    variate: the sampling error of the initial moments cancels, ``deviation`` keeps the model error and the
    ``O(1/n)`` bias).  ``ode``: any object with ``integrate(alpha0, Sigma0, T, t_eval=..., **ode_options)``
    (e.g. :class:`~symbolic_tpde.gaussian.closure.ClosureODE`); default the model's
    :class:`~symbolic_tpde.gaussian.GaussianODE` (``ode_options`` default ``rtol=1e-10, atol=1e-12``).

    >>> import symbolic_tpde as st
    >>> c = st.compare(st.load_scenario("softmax_2d"), T=0.5, n=200, runs=4, t_eval=[0.25, 0.5])
    >>> c.t.tolist(), c.deviation.shape, bool(c.max_z < 10)
    ([0.25, 0.5], (2, 5), True)
    """
    from .registry import layout

    if _is_sphere(model):
        raise InputError("model", "tokens on the sphere have no Gaussian moment ODE to compare with")
    a0, S0 = _gaussian_data(model, alpha0, Sigma0)
    from .weights import check_gaussian

    a0, S0 = check_gaussian(a0, S0, len(np.atleast_1d(a0)))
    T = _horizon(model, T)
    tq = np.array([T]) if t_eval is None else np.asarray(t_eval, float)
    seeds = [[seed, r] for r in range(int(runs))] if isinstance(seed, (int, np.integer)) else list(seed)
    if len(seeds) < 2:
        raise InputError("runs", "need at least 2 runs (the standard error comes from their spread)")
    if ode is None:
        ode = _ode(model, values)
    opts = {"rtol": 1e-10, "atol": 1e-12} if ode_options is None else dict(ode_options)
    sched = _schedule(model, values)

    def ode_at(a, S):
        sol = ode.integrate(a, S, T, t_eval=tq, **opts)
        if sol.status != "ok":
            raise InputError("T", f"the moment ODE stopped before T: {sol.message}")
        return sol.alpha, sol.Sigma

    A, S = ode_at(a0, S0)
    ref = layout.pack(A, S)
    devs, means, covs, name = [], [], [], ""
    for sd in seeds:
        X0 = _gaussian_draw(a0, S0, n, np.random.default_rng(sd))
        run = particles(sched, X0, T, t_eval=tq, method=method, steps=steps, rtol=rtol, atol=atol, dtype=dtype)
        name = run.method
        Y = np.asarray(run.trajectory, dtype=float)                         # (K, n, d)
        m = Y.mean(axis=1)
        C = Y - m[:, None, :]
        cov = np.einsum("kni,knj->kij", C, C) / Y.shape[1]
        own = ref
        if paired:
            C0 = X0 - X0.mean(axis=0)
            own = layout.pack(*ode_at(X0.mean(axis=0), C0.T @ C0 / n))
        devs.append(layout.pack(m, cov) - own)
        means.append(m)
        covs.append(cov)
    V = np.array(devs)                                                     # (R, K, m)
    R = len(seeds)
    return Comparison(tq, A, S, np.mean(means, axis=0), np.mean(covs, axis=0), V.mean(axis=0),
                      V.std(axis=0, ddof=1) / math.sqrt(R), np.sqrt(np.mean(np.sum(V ** 2, axis=2), axis=0)),
                      ref - layout.pack(a0, S0), int(n), R, bool(paired), name)
