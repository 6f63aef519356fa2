"""Gaussian moment ODEs, end to end: structure → symbolic system → backend → integration.

For ``μ_t = N(α, Σ)`` and an attention whose field is affine on Gaussians, ``Γ(x) = b + J x``, the moments
obey ``dα/dt = b + J α``, ``dΣ/dt = J Σ + Σ Jᵀ`` (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322, §3).

A :class:`GaussianODE` is built either from weights (``from_weights`` / ``from_schedule`` / ``from_scenario``:
the system is derived from the registry kinds of the heads, :func:`symbolic_tpde.symbolic.moments.
derive_gaussian_system`) or from any derived system and parameter values (``from_system``, e.g. the result of
:func:`symbolic_tpde.derive_kernel`).  The right-hand side is generated code (:func:`symbolic_tpde.codegen.
compile.compile_system`: C when available, numpy otherwise); Sinkhorn heads at ``d >= 3`` add the numeric
closed form (:mod:`symbolic_tpde.numerics.ode.numeric_matrix`, ``backend == "numeric-matrix"``): either way a backend
object with ``f``, ``batch``, ``jac``, ``param_layout`` and ``system`` (:func:`backend_for`).

Flat state: :mod:`symbolic_tpde.registry.layout` (``alpha``, then the upper triangle of ``Sigma`` row by row).
Flat parameters: the backend's ``param_layout`` (``("heads", h, name)``, ``("ffn", "W")``, ``("ffn", "c")``;
``("effective", h, name)``: the head's effective parameter, e.g. ``A = KᵀQ/√k``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InputError, NotGaussianPreserving
from ..weights import Scenario, Schedule, Structure, Weights
from ..registry import kinds, layout
from ..memo import Memo

# ---------------------------------------------------------------------------------------------- packing
def pack_state(alpha, Sigma) -> np.ndarray:
    """``y = (alpha_0..alpha_{d-1}, Sigma_00, Sigma_01, .., Sigma_0{d-1}, Sigma_11, ..)`` (batched too).

    >>> pack_state([1.0, 2.0], [[3.0, 4.0], [4.0, 5.0]]).tolist()
    [1.0, 2.0, 3.0, 4.0, 5.0]
    """
    a = np.asarray(alpha, dtype=float)
    S = np.asarray(Sigma, dtype=float)
    d = a.shape[-1] if a.ndim else 1
    if S.shape[-2:] != (d, d):
        raise InputError("Sigma", f"expected shape ({d}, {d}), got {S.shape}")
    return layout.pack(a, S)


def unpack_state(y, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack_state`; works on a leading batch axis too (``y`` of shape ``(..., n)``).

    >>> alpha, Sigma = unpack_state([1.0, 2.0, 3.0, 4.0, 5.0], 2)
    >>> alpha.tolist(), Sigma.tolist()
    ([1.0, 2.0], [[3.0, 4.0], [4.0, 5.0]])
    """
    return layout.unpack(y, d)


def _block_value(weights: Weights, key: tuple) -> Any:
    if key[0] == "heads":
        h, name = key[1], key[2]
        if h >= len(weights.heads) or name not in weights.heads[h].params:
            raise InputError(f"heads[{h}].{name}", "parameter required by the derived system is missing")
        return weights.heads[h].params[name]
    if key[0] == "effective":
        return weights.heads[key[1]].effective[key[2]]
    if key[0] == "ffn":
        if weights.ffn is None:
            raise InputError("ffn", "the derived system has a feed-forward term but the weights do not")
        return getattr(weights.ffn, key[1])
    raise InputError(str(key), "unknown parameter block key")


def pack_params(system, weights: Weights) -> np.ndarray:
    """Flat parameter vector of ``system`` (or a backend) filled from ``weights`` following its ``param_layout``."""
    p = np.empty(system.n_params)
    if system.n_params and not system.param_layout:
        raise InputError("params", "system has parameters but no param_layout to fill them from "
                         "(use GaussianODE.from_system(system, values))")
    for blk in system.param_layout:
        arr = np.asarray(_block_value(weights, blk.key), dtype=float)
        if arr.shape != tuple(blk.shape):
            raise InputError(".".join(map(str, blk.key)), f"expected shape {tuple(blk.shape)}, got {arr.shape}")
        p[blk.offset:blk.offset + blk.size] = arr.reshape(-1)
    return p


def params_from_values(system, values) -> np.ndarray:
    """Flat parameter vector from ``values`` (:func:`symbolic_tpde.symbolic.user_kernel.params_from_values`,
    imported on call: this module loads without SymPy)."""
    from ..symbolic.user_kernel import params_from_values as flat

    return flat(system, values)


_MEMO = Memo("compiled right-hand sides by weights structure and backend")


def system_for_structure(structure):
    """The derived entrywise system of a weights structure (memoised in :mod:`symbolic_tpde.symbolic`)."""
    from ..symbolic.moments import derive_gaussian_system

    return derive_gaussian_system(structure)


def _concrete_backend(backend: str) -> str | None:
    """``"c"``/``"numpy"`` as requested; ``"auto"``: C when it can be built (SymPy-free check)."""
    if backend in ("c", "numpy"):
        return backend
    if backend == "auto":
        from ..codegen.cbuild import availability

        return "c" if availability() is None else "numpy"
    return None


def backend_for(structure: Structure, backend: str = "auto"):
    """The right-hand side of ``structure`` (memoised): generated code (:func:`~symbolic_tpde.codegen.compile.
    compile_system`), or the numeric-matrix backend when some head has no entrywise closed form at this ``d``
    (Sinkhorn at ``d >= 3``), with the other heads as generated code."""
    def build():
        from ..codegen.compile import compile_system

        numeric = tuple(i for i, (kind, _) in enumerate(structure.heads)
                        if (kinds.part(kind, "symbolic").entrywise_max_d or math.inf) < structure.d)
        if not numeric:
            return compile_system(system_for_structure(structure), backend)
        from ..numerics.ode.numeric_matrix import NumericMatrixRHS

        others = tuple(i for i in range(len(structure.heads)) if i not in numeric)
        rest = None if not others else backend_for(
            Structure(structure.d, tuple(structure.heads[i] for i in others)), backend)
        return NumericMatrixRHS(structure.d, numeric, rest, others, ffn=structure.ffn)

    return _MEMO.get(("compiled", structure, backend), build)


def _refuse_non_preserving(w: Weights) -> None:
    for h in w.heads:
        if not kinds.get(h.kind).preserves_gaussians:
            raise NotGaussianPreserving(kinds.part(h.kind, "symbolic").witness(sink=w.sink is not None))


class _Fixed:
    """Parameters that do not depend on time (``from_system``): no layers, no breakpoints."""

    func = None

    @staticmethod
    def breakpoints(T: float) -> list[float]:
        return []


class GaussianODE:
    """The Gaussian moment ODE, ready to evaluate and integrate.

    ``rhs(t, y)``, ``rhs_batch(t, Y)``, ``params(t)``, ``params_batch(ts)``, ``jac(t, y)``,
    ``condition_values(t, y)``, ``integrate(alpha0, Sigma0, T, ...)``.  ``backend``: ``"auto"``, ``"numpy"``
    or ``"c"`` for the generated code (``"numeric-matrix"`` when a Sinkhorn head at ``d >= 3`` is present);
    ``compiled``: the backend object (:func:`backend_for`).

    >>> import numpy as np
    >>> from symbolic_tpde import make_head, make_weights
    >>> ode = GaussianODE.from_weights(make_weights([make_head("softmax", A=np.zeros((1, 1)), V=-np.eye(1))]))
    >>> ode.rhs(0.0, pack_state([1.0], [[1.0]])) + 0.0            # A = 0: α' = Vα, Σ' = 0
    array([-1.,  0.])
    """

    def __init__(self, schedule: Schedule, backend: str = "auto"):
        self.schedule = schedule
        w0 = schedule(0.0)
        self.d = w0.d
        self.structure = w0.structure()
        self.scenario: Scenario | None = None
        self._system = None
        self._warm_exist = None      # existence matrices from the warm manifest (None: use the system)
        self._fixed_p: np.ndarray | None = None
        self._pcache: dict = {}
        _refuse_non_preserving(w0)
        if self._load_warm(backend):
            return
        self.compiled = backend_for(self.structure, backend)
        self.backend = self.compiled.backend
        self._system = self.compiled.system
        self._store_warm(backend)

    # -- the SymPy-free warm path (README "Generated code"; codegen/warm.py) ------------------------------
    def _load_warm(self, backend: str) -> bool:
        """Load the generated module by structure (no SymPy, no derivation) when the cache has it."""
        from ..codegen import warm

        concrete = _concrete_backend(backend)
        if concrete is None:
            return False
        hit = _MEMO.lookup(("warm", self.structure, concrete))
        if hit is None:
            try:
                got = warm.load_manifest(self.structure, concrete)
            except OSError:
                got = None
            if got is None:
                return False
            f, batch, src, be, key, n, m, layout, exist_fn, _ = got
            structure = self.structure

            def jac_factory():
                from ..codegen.compile import compile_system

                return compile_system(system_for_structure(structure), be).jac

            crhs = warm.CompiledRHS(None, be, f, batch, src, jac_factory, n_states=n, n_params=m, key=key,
                                    system_factory=lambda: system_for_structure(structure),
                                    param_layout=layout.param_layout)
            hit = _MEMO.store(("warm", self.structure, concrete), (crhs, exist_fn))
        self.compiled, exist_fn = hit
        self._warm_exist = False if exist_fn is None else exist_fn
        self.backend = self.compiled.backend
        return True

    def _store_warm(self, backend: str) -> None:
        concrete = _concrete_backend(backend)
        if concrete is None or self.compiled.key is None:
            return
        from ..codegen import warm
        from ..codegen.numpy_backend import existence_source

        src = existence_source(self._system) if self._system.existence else None
        if self._system.existence and src is None:
            return  # the warm path could not evaluate the tilt condition: keep deriving
        try:
            warm.store_manifest(self.structure, concrete, self.compiled, self._system.param_layout, src)
        except OSError:
            pass  # an unwritable cache only costs the warm path (announced by the cache)

    @property
    def system(self):
        """The derived :class:`~symbolic_tpde.symbolic.system.OdeSystem` (derived on first access when the
        ODE was loaded from the warm cache; the other heads' on the numeric-matrix backend, ``None`` when all
        heads are Sinkhorn heads there)."""
        if self._system is None:
            self._system = self.compiled.system
        return self._system

    @system.setter
    def system(self, value) -> None:
        self._system = value

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def from_schedule(cls, schedule: Schedule, backend: str = "auto") -> "GaussianODE":
        return cls(schedule, backend)

    @classmethod
    def from_weights(cls, weights: Weights, backend: str = "auto") -> "GaussianODE":
        return cls(Schedule.constant(weights), backend)

    @classmethod
    def from_scenario(cls, scn: Scenario, backend: str = "auto") -> "GaussianODE":
        ode = cls(scn.schedule, backend)
        ode.scenario = scn
        return ode

    @classmethod
    def from_system(cls, system, values, backend: str = "auto") -> "GaussianODE":
        """A derived system (e.g. :func:`symbolic_tpde.derive_kernel`'s) with its parameters fixed by
        ``values`` (symbol or name -> number); time enters through the system's ``time`` symbol."""
        from ..codegen.compile import compile_system

        ode = cls.__new__(cls)
        ode.schedule = _Fixed()
        ode.d = int(system.origin.get("d") or round((math.sqrt(8 * system.n_states + 9) - 3) / 2))
        if layout.state_size(ode.d) != system.n_states:
            raise InputError("system", "not a Gaussian moment system (state count does not match a d)")
        ode.structure = None
        ode.scenario = None
        ode._system = system
        ode._warm_exist = None
        ode._fixed_p = params_from_values(system, values)
        ode.compiled = compile_system(system, backend)
        ode.backend = ode.compiled.backend
        ode._pcache = {}
        return ode

    # -- evaluation -----------------------------------------------------------------------------------
    def weights(self, t: float) -> Weights:
        w = self.schedule(t)
        if w.structure() != self.structure:
            raise InputError("schedule", f"weights at t = {t} have structure {w.structure()}, "
                             f"expected {self.structure}")
        return w

    def _pack(self, w: Weights) -> np.ndarray:
        return pack_params(self.compiled, w)

    def params(self, t: float) -> np.ndarray:
        """Flat parameter vector at ``t`` (layers respected; packed once per layer, looked up by layer index,
        so a right-hand-side call neither re-validates nor hashes the weights)."""
        if self._fixed_p is not None:
            return self._fixed_p
        if self.schedule.func is not None:
            return self._pack(self.weights(t))
        i = self.schedule.index(t)
        hit = self._pcache.get(i)
        if hit is None:
            hit = self._pcache.setdefault(i, self._pack(self.weights(t)))
        return hit

    def params_batch(self, ts) -> np.ndarray:
        """``(len(ts), n_params)``: the parameter vector at each time."""
        return np.stack([self.params(float(t)) for t in np.asarray(ts, dtype=float).reshape(-1)])

    def rhs(self, t: float, y) -> np.ndarray:
        return self.compiled.f(t, y, self.params(t))

    def rhs_batch(self, t, Y, P=None) -> np.ndarray:
        """Rows of ``Y`` at time ``t`` (scalar or per row); ``P`` defaults to the parameters at ``t``."""
        if P is None:
            tt = np.asarray(t, dtype=float)
            P = self.params(float(tt)) if tt.ndim == 0 else self.params_batch(tt)
        return self.compiled.batch(t, Y, P)

    def rhs_matrices(self, t: float, alpha, Sigma) -> tuple[np.ndarray, np.ndarray]:
        return unpack_state(self.rhs(t, pack_state(alpha, Sigma)), self.d)

    def jac(self, t: float, y) -> np.ndarray:
        """``∂(dy/dt)/∂y``: the generated symbolic Jacobian (built on first use); central differences on the
        numeric-matrix path."""
        return self.compiled.jac(t, y, self.params(t))

    # -- tilt existence -------------------------------------------------------------------------------
    def _existence_mats(self):
        """``mats(t, p) -> list of R + Rᵀ`` per head with a key-quadratic block (``None`` when there is none):
        from the warm manifest's generated source, or lambdified from the system (whose parameters are the
        first ones of ``p``: all of them, or the other heads' on the numeric-matrix backend)."""
        if not hasattr(self, "_exist"):
            fn = None
            if self._warm_exist is not None:
                fn = self._warm_exist if callable(self._warm_exist) else None
            elif self.system is not None and self.system.existence:
                import sympy as sp

                system = self.system
                lam = [sp.lambdify([system.time, *system.params], M, "numpy") for M in system.existence]

                def fn(t, p, _lam=lam, _m=system.n_params):
                    return [f(t, *p[:_m]) for f in _lam]
            self._exist = fn
        return self._exist

    def condition_values(self, t: float, y) -> np.ndarray:
        """Smallest eigenvalue of ``N = Σ - Σ(R + Rᵀ)Σ`` for every head with a key-quadratic block ``R``: the
        Gaussian tilt exists iff all are ``> 0`` (``Σ⁻¹ - R - Rᵀ ≻ 0``).  Empty when no head has one."""
        mats = self._existence_mats()
        if mats is None:
            return np.zeros(0)
        _, S = unpack_state(y, self.d)
        p = self.params(t)
        out = []
        for M in mats(t, p):
            M = np.asarray(M, dtype=float)
            N = S - S @ M @ S
            out.append(float(np.linalg.eigvalsh(0.5 * (N + N.T))[0]))
        return np.array(out)

    def check_tilt(self, t: float, y, where: str = "Sigma") -> None:
        """:class:`InputError` when the tilt does not exist at ``(t, y)`` (the formula would be meaningless)."""
        vals = self.condition_values(t, y)
        if vals.size and not np.all(vals > 0):
            raise InputError(where, "the Gaussian tilt does not exist here: Σ⁻¹ - R - Rᵀ is not positive definite "
                             f"(smallest eigenvalue of Σ - Σ(R + Rᵀ)Σ: {vals.min():.3g}); the moment ODE does "
                             "not apply")

    # -- integration ----------------------------------------------------------------------------------
    def integrate(self, alpha0, Sigma0, T: float, sensitivities=None, **kwargs):
        """Integrate the moment ODE on ``[0, T]``: see :func:`symbolic_tpde.gaussian.integrate.integrate_gaussian`.
        ``sensitivities=[names]``: also ``∂α(t)/∂θ``, ``∂Σ(t)/∂θ`` (:mod:`symbolic_tpde.gaussian.sensitivities`)."""
        if sensitivities is not None:
            from .sensitivities import integrate_sensitivities

            return integrate_sensitivities(self, alpha0, Sigma0, T, sensitivities, **kwargs)
        from .integrate import integrate_gaussian

        return integrate_gaussian(self, alpha0, Sigma0, T, **kwargs)

    def __repr__(self) -> str:
        return f"GaussianODE(d={self.d}, backend={self.backend!r}, system={self._system or self.compiled!r})"

    # -- travel: pickled as what it was built from, rebuilt (warm cache: no derivation) where it lands --------
    def __reduce__(self):
        backend = self.backend if self.backend in ("c", "numpy") else "auto"
        if self._fixed_p is not None:
            values = {p.name: float(v) for p, v in zip(self.system.params, self._fixed_p)}
            return _from_system, (self.system, values, backend)
        return _from_schedule, (self.schedule, backend, self.scenario)

    def _key(self):
        if self._fixed_p is None:
            return self.schedule, self.scenario, self.backend
        from ..codegen.compile import system_key

        return system_key(self.system), self._fixed_p.tobytes(), self.backend

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _from_schedule(schedule, backend, scenario):
    ode = GaussianODE(schedule, backend)
    ode.scenario = scenario
    return ode


def _from_system(system, values, backend):
    return GaussianODE.from_system(system, values, backend)

