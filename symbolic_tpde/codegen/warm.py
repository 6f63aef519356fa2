"""SymPy-free half of code generation: load generated right-hand sides from the cache by *structure*.

The content-hash cache (:mod:`.cache`) is keyed by the derived SymPy system, so finding an entry that way
means deriving first.  This module adds a second, structural key (README "Generated code" and issue 12,
"warm path without SymPy"): the weights' structure (kinds with parameter names and shapes, ``d``, FFN /
sink flags), the backend, the package version and :data:`~.cache.CODEGEN_VERSION` (plus the environment
versions of :func:`.cache.make_key`).  Under it a small JSON *manifest* records what a
:class:`~symbolic_tpde.gaussian.GaussianODE` needs without the system: the content key of the generated
module, the state and parameter counts, the parameter layout and the source of the tilt-existence matrices.
A warm ``GaussianODE.from_scenario`` therefore reads two text entries, loads one shared object and never
imports SymPy; the symbolic system is derived only when some code asks for it (``ode.system``).

Also here (SymPy-free, shared with :mod:`.compile`): :class:`CompiledRHS`, the cffi wrappers of the C
functions, the cached C build (:func:`build_c`) and :func:`load_source` for generated numpy modules.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from dataclasses import astuple
from pathlib import Path
from typing import Callable

import numpy as np

from ..weights import Structure
from . import cbuild
from .cache import CODEGEN_VERSION, Cache, make_key

#: Flags are part of the cache key, and so is the CPU (:func:`.cbuild.cpu_signature`: ``-march=native``), so a
#: cache directory shared between machines never hands an object built for one CPU to another.  No
#: -ffast-math: inf/nan must propagate (blow-up detection); no FMA contraction (-ffp-contract=off), so C and
#: numpy backends round alike.  -O3 -march=native with ``#pragma omp simd`` on the batch loop vectorises the
#: batched right-hand side across states (issue 12 item 3: C batched >= 5x numpy batched).
CFLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-ffp-contract=off", "-fPIC", "-shared", "-fno-math-errno",
          "-std=gnu11")
#: Above this many bytes of C (softmax d >= ~12) gcc's optimisers are superlinear in the size of the one
#: straight-line function (softmax d = 16, 340 kB: -O2 ~100 s on the loaded 2-core box, -O1 ~2.5x less), so
#: large systems are built with -O1 and no vectorisation pragma (plain-arithmetic right-hand sides are vectorised
#: explicitly, on gcc vector lanes, by :func:`.c_backend._lane_source`).
LARGE_SOURCE = 150_000
CFLAGS_LARGE = ("-O1", "-march=native", "-ffp-contract=off", "-fPIC", "-shared", "-fno-math-errno", "-std=gnu11")


def cflags_for(csrc: str) -> tuple[str, ...]:
    return CFLAGS if len(csrc) <= LARGE_SOURCE else CFLAGS_LARGE

DECLS = {
    "rhs": "void tpde_rhs(double t, const double *y, const double *p, double *out);\n"
           "void tpde_rhs_batch(long N, const double *t, long t_stride, const double *Y, const double *P,"
           " double *out, long p_stride);\n",
    "jac": "void tpde_jac(double t, const double *y, const double *p, double *out);\n",
}

MANIFEST_VERSION = "1"


class CompiledRHS:
    """Callable right-hand side of an ODE system for one backend (see :mod:`.compile`).

    ``system``: the :class:`~symbolic_tpde.symbolic.system.OdeSystem`, or derived on first access by
    ``system_factory`` (warm path).  ``jac`` is generated on first access (``jac_factory``), never before.
    ``param_layout``: the system's blocks of the parameter vector (warm path: read from the manifest).
    """

    def __init__(self, system, backend: str, f: Callable, batch: Callable, source: str,
                 jac_factory: Callable[[], Callable], *, n_states: int | None = None, n_params: int | None = None,
                 system_factory: Callable | None = None, key: str | None = None, param_layout=None):
        self._system = system
        self._param_layout = param_layout
        self._system_factory = system_factory
        self.backend = backend
        self.f = f
        self.batch = batch
        self.source = source
        self.key = key
        self._n = system.n_states if n_states is None else int(n_states)
        self._m = system.n_params if n_params is None else int(n_params)
        self._jac_factory = jac_factory
        self._jac: Callable | None = None
        self._lock = threading.Lock()

    @property
    def system(self):
        if self._system is None and self._system_factory is not None:
            self._system = self._system_factory()
        return self._system

    @property
    def param_layout(self) -> tuple:
        return self.system.param_layout if self._param_layout is None else self._param_layout

    @property
    def n_states(self) -> int:
        return self._n

    @property
    def n_params(self) -> int:
        return self._m

    @property
    def jac_built(self) -> bool:
        """Whether the Jacobian has been generated (tests: nothing builds it unless a method uses it)."""
        return self._jac is not None

    def __call__(self, t, y, p) -> np.ndarray:
        return self.f(t, y, p)

    @property
    def jac(self) -> Callable:
        """``jac(t, y, p) -> (n, n)``, ``∂f_i/∂y_j`` from the symbolic Jacobian (generated on first access)."""
        with self._lock:
            if self._jac is None:
                self._jac = self._jac_factory()
        return self._jac

    def __repr__(self) -> str:
        variant = "<derived on first use>" if self._system is None else dict(self._system.origin).get("variant", "?")
        return (f"CompiledRHS(backend={self.backend!r}, n_states={self.n_states}, n_params={self.n_params}, "
                f"variant={variant!r})")


def load_source(source: str, filename: str = "<symbolic_tpde generated>") -> dict:
    """Execute generated source (our own output, never user text) in a fresh namespace and return it."""
    namespace: dict = {"__name__": "symbolic_tpde_generated"}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 -- generated by the numpy backend
    return namespace


def build_c(csrc: str, what: str = "rhs", cache: Cache | None = None):
    """Compile (or fetch from the cache) the cffi extension for a generated C source; returns the module
    (``.ffi``, ``.lib``).  A corrupt cached object is rebuilt (with a warning from the cache)."""
    reason = cbuild.availability()
    if reason is not None:
        raise cbuild.CompilerUnavailable(reason)
    cache = cache or Cache()
    cc = cbuild.find_compiler()
    key = make_key(csrc, f"c-cffi-api-{what}", (*cc, *cflags_for(csrc), _cpu()))
    modname = f"_tpde_c_{key[:20]}"
    path = cache.get_file(key, ".so")
    if path is not None:
        try:
            return cbuild.load_extension(path, modname)
        except ImportError as exc:  # checksum ok but unloadable (e.g. foreign platform): rebuild
            import warnings

            warnings.warn(f"cached C artefact {path} failed to load ({exc}); rebuilding", stacklevel=2)
    data = _build(csrc, modname, what, cc)
    path = cache.put_file(key, ".so", data)
    # another process may have published the same key meanwhile: load whatever the reference now names
    return cbuild.load_extension(cache.get_file(key, ".so") or path, modname)


@functools.lru_cache(maxsize=None)
def _cpu() -> str:
    return cbuild.cpu_signature()


def _build(csrc: str, modname: str, what: str, cc) -> bytes:
    """The compiler run (a separate function so tests can simulate a failing build)."""
    return cbuild.compile_extension(csrc, modname, DECLS[what], cflags_for(csrc), cc)


def c_callables(mod, n: int, m: int) -> tuple[Callable, Callable]:
    """``(f, batch)`` wrappers of ``tpde_rhs`` / ``tpde_rhs_batch`` (signatures of :mod:`.compile`)."""
    ffi, lib = mod.ffi, mod.lib
    fb, asc, empty = ffi.from_buffer, np.ascontiguousarray, np.empty
    c_rhs, c_batch = lib.tpde_rhs, lib.tpde_rhs_batch

    def f(t, y, p):
        y = asc(y, dtype=np.float64)
        p = asc(p, dtype=np.float64)
        if y.size != n or p.size != m:
            raise ValueError(f"expected y of size {n} and p of size {m}, got {y.size} and {p.size}")
        out = empty(n)
        c_rhs(float(t), fb("double[]", y), fb("double[]", p), fb("double[]", out))
        return out

    def batch(t, Y, P):
        Y = np.asarray(Y, dtype=np.float64)
        P = np.asarray(P, dtype=np.float64)
        tt = np.asarray(t, dtype=np.float64)
        if Y.ndim == 0 or Y.shape[-1] != n:
            raise ValueError(f"Y must have last axis of length {n}, got shape {Y.shape}")
        if P.ndim == 0 or P.shape[-1] != m:
            raise ValueError(f"P must have last axis of length {m}, got shape {P.shape}")
        lead = np.broadcast_shapes(Y.shape[:-1], P.shape[:-1], tt.shape)
        N = int(np.prod(lead, dtype=np.int64))
        Yb = asc(np.broadcast_to(Y, lead + (n,)).reshape(N, n))
        if P.ndim == 1:
            Pb, p_stride = asc(P), 0
        else:
            Pb, p_stride = asc(np.broadcast_to(P, lead + (m,)).reshape(N, m)), m
        if tt.ndim == 0:
            tb, t_stride = asc(tt.reshape(1)), 0
        else:
            tb, t_stride = asc(np.broadcast_to(tt, lead).reshape(N)), 1
        out = empty((N, n))
        if N:
            c_batch(N, fb("double[]", tb), t_stride, fb("double[]", Yb), fb("double[]", Pb if Pb.size else
                    np.zeros(1)), fb("double[]", out), p_stride)
        return out.reshape(lead + (n,))

    return f, batch


def c_jac_callable(mod, n: int, m: int) -> Callable:
    fb, asc, c_jac = mod.ffi.from_buffer, np.ascontiguousarray, mod.lib.tpde_jac

    def jac(t, y, p):
        y = asc(y, dtype=np.float64)
        p = asc(p, dtype=np.float64)
        if y.size != n or p.size != m:
            raise ValueError(f"expected y of size {n} and p of size {m}, got {y.size} and {p.size}")
        out = np.empty((n, n))
        c_jac(float(t), fb("double[]", y), fb("double[]", p), fb("double[]", out))
        return out

    return jac


# ------------------------------------------------------------------------------- structural manifest
def structure_key(structure: Structure, backend: str) -> str:
    """Cache key of a weights :class:`~symbolic_tpde.weights.Structure` for a concrete backend (``"c"`` or
    ``"numpy"``); includes package and code-generator versions.  The structure enters as the repr of its field
    values, ``(d, heads, ffn, sink)``, the key of the entries written before it was a dataclass."""
    from .. import __version__

    content = (f"structure={astuple(structure)!r};package={__version__};codegen={CODEGEN_VERSION};"
               f"manifest={MANIFEST_VERSION};sources={source_fingerprint()}")
    return make_key(content, f"structure-{backend}")


@functools.lru_cache(maxsize=None)
def source_fingerprint() -> str:
    """Digest of (name, size, mtime) of every Python source of the package: an edited working tree (same
    package version) never gets a warm entry derived by older code.  One ``stat`` per file (about 150).

    Every module counts, not only ``symbolic/`` and ``codegen/``: the registry, the weights' parameter layout
    and the Gaussian layer shape what a manifest means (an entry written by a sibling checkout whose registry
    differed gave all-zero sensitivities here before this covered the whole package)."""
    pkg = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        st = f.stat()
        h.update(f"{f.relative_to(pkg).as_posix()}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def store_manifest(structure, backend: str, crhs: CompiledRHS, param_layout, existence_src: str | None,
                   cache: Cache | None = None) -> None:
    """Record ``crhs`` (compiled for a system derived from ``structure``) under the structural key."""
    cache = cache or Cache()
    layout = [[list(blk.key), list(blk.shape), int(blk.offset)] for blk in param_layout]
    entry = {"backend": crhs.backend, "system_key": crhs.key, "n_states": crhs.n_states,
             "n_params": crhs.n_params, "param_layout": layout, "existence": existence_src}
    cache.put_text(structure_key(structure, backend), ".manifest.json", json.dumps(entry))


class ParamLayout:
    """What :func:`symbolic_tpde.gaussian.pack_params` needs of a system: ``n_params`` and ``param_layout``
    (blocks with ``key``, ``shape``, ``offset``, ``size``)."""

    class Block:
        def __init__(self, key, shape, offset):
            self.key, self.shape, self.offset = tuple(key), tuple(shape), int(offset)
            self.size = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def __init__(self, n_params: int, blocks):
        self.n_params = int(n_params)
        self.param_layout = tuple(self.Block(*b) for b in blocks)


def load_manifest(structure, backend: str, cache: Cache | None = None):
    """The warm path: ``(crhs, layout, existence_fn_or_None, has_existence_src)`` for ``structure``, or
    ``None`` when there is no (valid) entry.  ``crhs.system`` is left to the caller's factory."""
    cache = cache or Cache()
    raw = cache.get_text(structure_key(structure, backend), ".manifest.json")
    if raw is None:
        return None
    try:
        e = json.loads(raw)
        key, n, m, be = e["system_key"], int(e["n_states"]), int(e["n_params"]), e["backend"]
        layout = ParamLayout(m, e["param_layout"])
    except (ValueError, KeyError, TypeError):
        return None
    if be == "c":
        csrc = cache.get_text(make_key(key, "c-source-rhs"), ".c")
        if csrc is None or cbuild.availability() is not None:
            return None
        try:
            mod = build_c(csrc, "rhs", cache)
        except (RuntimeError, OSError, ImportError):
            return None
        f, batch = c_callables(mod, n, m)
        src = csrc
    elif be == "numpy":
        ckey = make_key(key, "numpy-rhs")
        src = cache.get_text(ckey, ".py")
        if src is None:
            return None
        ns = load_source(src, str(cache.path(ckey, ".py")))
        f, batch = ns["f"], ns["batch"]
    else:
        return None
    exist = e.get("existence")
    exist_fn = load_source(exist)["existence"] if exist else None
    return f, batch, src, be, key, n, m, layout, exist_fn, exist is not None
