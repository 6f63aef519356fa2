"""Forward sensitivities of the Gaussian moment ODE: ``∂α(t)/∂θ``, ``∂Σ(t)/∂θ`` integrated with the state.

:func:`integrate_sensitivities` (``GaussianODE.integrate(..., sensitivities=[...])``) derives the sensitivity
system of the model's derived :class:`~symbolic_tpde.symbolic.system.OdeSystem`
(:func:`symbolic_tpde.symbolic.sensitivities.sensitivity_system`: ``dS/dt = (∂f/∂y)S + ∂f/∂θ`` with both
Jacobians taken symbolically), generates it like any system (numpy or C; cached by content) and integrates
state and sensitivities together on the package's integrator (:func:`symbolic_tpde.numerics.ode.solve.integrate`,
error control on all components), with the same blow-up monitor (on ``tr Σ + |α|²`` of the state part),
tilt conditions and layer breakpoints as :func:`~.integrate.integrate_gaussian`.

Directions (``sensitivities=``): a parameter symbol name of the derived system (``h0_A_0_1``: entry (0, 1) of
head 0's ``A``; ``ffn_W_0_1``, ``h0_tau``), a whole block by its prefix (``h0_A``, ``ffn_c``), or initial data:
``alpha0_i``, ``Sigma0_i_j`` (``i <= j``, perturbing ``Σ₀[i,j]`` and ``Σ₀[j,i]`` together), ``alpha0``,
``Sigma0``.  With layers (a piecewise-constant schedule) a parameter direction perturbs that entry in every
layer by the same amount.  Sinkhorn heads at ``d >= 3`` have no entrywise symbolic form (numeric-matrix
backend): their sensitivities are out of reach here and refused with an :class:`~symbolic_tpde.InputError`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..registry import layout
from ..weights import check_gaussian
from .integrate import GaussianSolution, reported_status, tilt_stops


@dataclass(frozen=True)
class SensitivitySolution:
    """``solution``: the :class:`~.integrate.GaussianSolution` of the state; ``names``: the directions (expanded);
    ``dalpha (K, k, d)`` and ``dSigma (K, k, d, d)``: ``∂α(t_K)/∂θ_k`` and ``∂Σ(t_K)/∂θ_k``; ``S (K, k, n)`` the
    packed sensitivities; ``run`` the integrator's :class:`~symbolic_tpde.numerics.ode.solve.Solution` of the augmented
    state (level samples, end state).  Attributes of ``solution`` (``t``, ``alpha``, ``status``…) are readable here too."""

    solution: GaussianSolution
    names: tuple[str, ...]
    dalpha: np.ndarray
    dSigma: np.ndarray
    S: np.ndarray
    run: object = None

    def __getattr__(self, name):
        return getattr(self.solution, name)


def expand_directions(system, d: int, names) -> list[str]:
    """User names -> the system's direction names (:mod:`symbolic_tpde.symbolic.sensitivities`)."""
    if isinstance(names, str) or not hasattr(names, "__iter__"):
        raise InputError("sensitivities", "must be a list of names, e.g. ['h0_A_0_1', 'Sigma0_0_0']")
    blocks = {}
    for blk in system.param_layout:
        pre = f"h{blk.key[1]}_{blk.key[2]}" if blk.key[0] == "heads" else "_".join(map(str, blk.key))
        blocks[pre] = [s.name for s in system.params[blk.offset:blk.offset + blk.size]]
    state_names = layout.state_names(d)
    inits = {"alpha0": [f"init:{n}" for n in state_names[:d]], "Sigma0": [f"init:{n}" for n in state_names[d:]]}
    for n in state_names:
        head, _, rest = n.partition("_")
        inits[f"{head}0_{rest}"] = [f"init:{n}"]
    out: list[str] = []
    for nm in names:
        if not isinstance(nm, str):
            raise InputError("sensitivities", f"a direction must be a name (str), got {nm!r}")
        if nm in inits:
            out += inits[nm]
        elif nm in blocks and nm not in {s.name for s in system.params}:
            out += blocks[nm]
        else:
            out.append(nm)
    if not out:
        raise InputError("sensitivities", "no direction given")
    return out


def _display(name: str) -> str:
    if name.startswith("init:"):
        head, _, rest = name[5:].partition("_")
        return f"{head}0_{rest}"
    return name


def sensitivity_model(ode, names, backend: str | None = None):
    """``(compiled augmented rhs, direction names, S(0) (k, n))`` for the model ``ode`` (memoised per model)."""
    from ..codegen.compile import compile_system
    from ..symbolic.sensitivities import initial_sensitivities, sensitivity_system

    if ode.backend == "numeric-matrix" or ode.system is None:
        raise InputError("sensitivities", "Sinkhorn heads at d >= 3 have no entrywise symbolic form (the "
                         "numeric-matrix backend): sensitivities are out of reach for this model")
    system = ode.system
    dirs = expand_directions(system, ode.d, names)
    be = backend or (ode.backend if ode.backend in ("c", "numpy") else "auto")
    memo = ode.__dict__.setdefault("_sens_memo", {})
    key = (tuple(dirs), be)
    if key not in memo:
        try:
            aug = sensitivity_system(system, dirs)
            S0 = np.array(initial_sensitivities(system, dirs), float)
        except KeyError as exc:
            raise InputError("sensitivities", str(exc.args[0])) from None
        memo[key] = (compile_system(aug, be), tuple(_display(n) for n in dirs), S0)
    return memo[key]


def _rhs(ode, f, T: float):
    """``F(t, Y)`` with the parameter vector fixed per layer (as :func:`.integrate.gaussian_rhs`)."""
    if getattr(ode.schedule, "func", None) is not None:
        return lambda t, y: f(t, y, ode.params(t))
    bps = [float(b) for b in ode.schedule.breakpoints(T)]
    ps = [ode.params(e) for e in [0.0] + bps]
    return lambda t, y: f(t, y, ps[bisect_right(bps, t)])


def _conditions(ode, p, n: int):
    """The tilt-existence quantities of :meth:`GaussianODE.condition_values` at a given parameter vector."""
    mats = ode._existence_mats()
    if mats is None:
        return None

    def cond(t, y):
        _, S = layout.unpack(y[:n], ode.d)
        out = []
        for M in mats(t, p):
            N = S - S @ np.asarray(M, float) @ S
            out.append(float(np.linalg.eigvalsh(0.5 * (N + N.T))[0]))
        return np.array(out)
    return cond


def integrate_sensitivities(ode, alpha0, Sigma0, T: float, sensitivities, *, method: str = "DOP853",
                            rtol: float = 1e-12, atol: float | None = None, t_eval=None, blowup: bool = True,
                            max_nfev: int = 1_000_000, max_seconds: float | None = None,
                            backend: str | None = None, params=None, events=()) -> SensitivitySolution:
    """Integrate the moment ODE of ``ode`` together with its forward sensitivities (module docstring).

    ``params``: a flat parameter vector (the system's layout) used at all times instead of the model's
    schedule (what a fit varies).  ``events``: further stop events on the augmented state (e.g. a level of a
    condition, :func:`symbolic_tpde.analysis.blowup_sensitivity.tilt_time_gradient`)."""
    from ..numerics.ode.solve import BlowupMonitor, integrate

    alpha0, Sigma0 = check_gaussian(alpha0, Sigma0, ode.d)
    crhs, names, S0 = sensitivity_model(ode, sensitivities, backend)
    d, n, k = ode.d, layout.state_size(ode.d), len(names)
    y0 = np.concatenate([layout.pack(alpha0, Sigma0), S0.reshape(-1)])
    if atol is None:
        atol = 1e-14 * max(1.0, float(np.abs(y0[:n]).max()))
    mon = None
    if blowup:
        size, dsize = layout.gaussian_size(d)
        mon = BlowupMonitor(lambda y: size(y[:n]), lambda y, fy: dsize(y[:n], fy[:n]))
    if params is None:
        cond = getattr(ode, "condition_values", None)
        conditions = None if cond is None else (lambda t, y: cond(t, y[:n]))
        F = _rhs(ode, crhs.f, T)
    else:
        p = np.ascontiguousarray(params, dtype=float)
        if p.shape != (crhs.n_params,):
            raise InputError("params", f"expected a vector of {crhs.n_params} parameters, got shape {p.shape}")
        conditions = _conditions(ode, p, n)
        F = lambda t, y: crhs.f(t, y, p)  # noqa: E731
    try:
        sol = integrate(F, y0, (0.0, float(T)), method=method, rtol=rtol, atol=atol, t_eval=t_eval,
                        breakpoints=ode.schedule.breakpoints(T), events=([mon] if mon else []) + tilt_stops(conditions) + list(events),
                        max_nfev=max_nfev, max_seconds=max_seconds)
    except ValueError as exc:
        raise InputError("method", str(exc)) from None
    Y = np.asarray(sol.y, float)
    alpha, Sigma = layout.unpack(Y[:, :n], d)
    S = Y[:, n:].reshape(len(Y), k, n)
    dalpha, dSigma = layout.unpack(S, d)
    base = GaussianSolution(sol.t, alpha, Sigma, reported_status(sol), sol.blowup_time, sol.message, crhs.backend,
                            sol.blowup_time_error, sol.exponent, sol.events, Y[:, :n], sol.nfev)
    return SensitivitySolution(base, names, dalpha, dSigma, S, sol)


@dataclass(frozen=True)
class AdjointGradient:
    """``∂ℓ/∂θ`` for every parameter of the system (``params``, in ``param_names`` order) and ``∂ℓ/∂y(0)`` on the
    packed state (``init``, names ``alpha0_i``, ``Sigma0_i_j``; a packed ``Σ₀[i,j]``, ``i < j``, moves both
    entries), for ``ℓ`` given by its gradient at ``y(T)``; ``y_T`` the forward end state."""

    param_names: tuple[str, ...]
    params: np.ndarray
    init_names: tuple[str, ...]
    init: np.ndarray
    y_T: np.ndarray


def adjoint_gradient(ode, alpha0, Sigma0, T: float, dloss, *, rtol: float = 1e-12,
                     backend: str | None = None) -> AdjointGradient:
    """Gradient of one scalar loss ``ℓ(y(T))`` with respect to all parameters and the initial state by the adjoint
    method (:func:`symbolic_tpde.symbolic.sensitivities.adjoint_system`): one forward run, one backward run of
    ``2n + P`` states, against ``n(1 + P)`` states for forward sensitivities of all ``P`` parameters.
    ``dloss``: ``∂ℓ/∂y`` at ``y(T)`` (packed, length ``n``), or a callable ``y_T -> ∂ℓ/∂y``.  Single-layer
    (constant) schedules only; ``y`` is re-integrated backwards, so keep ``T`` away from a blow-up."""
    from ..codegen.compile import compile_system
    from ..numerics.ode.solve import integrate
    from ..symbolic.sensitivities import adjoint_system

    if ode.system is None or ode.backend == "numeric-matrix":
        raise InputError("sensitivities", "the adjoint needs the entrywise symbolic system (not Sinkhorn d >= 3)")
    if getattr(ode.schedule, "func", None) is not None or len(ode.schedule.breakpoints(T)):
        raise InputError("schedule", "the adjoint mode is built for one constant layer (no breakpoints)")
    fwd = ode.integrate(alpha0, Sigma0, T, t_eval=[float(T)], rtol=rtol)
    if fwd.status != "ok":
        raise InputError("T", f"the forward run ended with status {fwd.status}: {fwd.message}")
    n, P = layout.state_size(ode.d), ode.system.n_params
    yT = np.asarray(fwd.y[-1], float)
    g = np.asarray(dloss(yT) if callable(dloss) else dloss, float)
    if g.shape != (n,):
        raise InputError("dloss", f"expected the gradient on the packed state, length {n}, got shape {g.shape}")
    memo = ode.__dict__.setdefault("_sens_memo", {})
    be = backend or (ode.backend if ode.backend in ("c", "numpy") else "auto")
    if ("adjoint", be) not in memo:
        memo[("adjoint", be)] = compile_system(adjoint_system(ode.system), be)
    crhs = memo[("adjoint", be)]
    p = ode.params(0.0)
    z0 = np.concatenate([yT, g, np.zeros(P)])
    sol = integrate(lambda s, z: crhs.f(s, z, p), z0, (0.0, float(T)), method="DOP853", rtol=rtol, t_eval=[float(T)])
    if str(sol.status) != "ok":
        raise InputError("T", f"the backward (adjoint) run ended with status {sol.status}: {sol.message}")
    z = np.asarray(sol.y[-1], float)
    return AdjointGradient(tuple(s.name for s in ode.system.params), z[2 * n:],
                           tuple(_display("init:" + s) for s in layout.state_names(ode.d)), z[n:2 * n], yT)
