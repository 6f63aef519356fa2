"""Front door of code generation: ``compile_system(system, backend) -> CompiledRHS``.

Every backend has the same call signatures (README (Layout) habit 2)::

    crhs.f(t, y, p)        -> ndarray (n_states,)         # solve_ivp(lambda t, y: crhs.f(t, y, p), ...)
    crhs.jac(t, y, p)      -> ndarray (n_states, n_states) # generated lazily on first use
    crhs.batch(t, Y, P)    -> ndarray (N, n_states)        # Y (N, n) or (n,), P (N, m) or (m,), t scalar/(N,)

``backend="numpy"``: generated Python/numpy source (kept in ``crhs.source``); ``"c"``: the same expressions
printed as C and compiled (raises :class:`CompilerUnavailable` when that is impossible); ``"auto"``: C when
available, otherwise numpy with a loud warning (``warnings.warn`` and a line on stderr).

Both the numpy source and the C shared object are cached on disk by content hash (:mod:`.cache`), and compiled
systems are memoised in memory per content key, so recompiling the same system is cheap.
"""

from __future__ import annotations

import hashlib
import sys
import warnings

from ..memo import Memo
from ..symbolic.system import OdeSystem
from . import c_backend
from .c_backend import CompilerUnavailable
from .cache import Cache, make_key
from .numpy_backend import numpy_source
from .warm import CompiledRHS, build_c, c_callables, c_jac_callable, load_source

__all__ = ["CompiledRHS", "compile_system", "CompilerUnavailable", "CFallbackWarning", "system_key"]


class CFallbackWarning(RuntimeWarning):
    """``backend="auto"`` could not build the C backend and uses numpy instead."""


def _digest_exprs(exprs, h) -> None:
    """Feed a structural digest of expressions into ``h``: one pass over the expression *DAG* (memoised by
    node identity), so shared sub-expressions cost once.  ``str(expr)`` would walk the full tree, which for
    the ℓ2 systems at d = 4 takes minutes; Python's ``hash`` is salted per process and unusable here."""
    memo: dict[int, bytes] = {}
    keep = []  # keep nodes alive so ids stay unique during the walk

    def dig(e) -> bytes:
        k = id(e)
        hit = memo.get(k)
        if hit is not None:
            return hit
        if e.args:
            m = hashlib.sha256(type(e).__name__.encode())
            for a in e.args:
                m.update(dig(a))
        else:
            if e.is_Symbol:
                tag = "S:" + e.name
            elif e.is_Float:
                tag = "F:" + repr(e._mpf_)
            else:
                tag = type(e).__name__ + ":" + str(e)
            m = hashlib.sha256(tag.encode("utf-8", "surrogatepass"))
        out = m.digest()
        memo[k] = out
        keep.append(e)
        return out

    for e in exprs:
        h.update(dig(e))


def system_key(system: OdeSystem) -> str:
    """Content hash of a system: ordered state/parameter/time names and the structure of the right-hand
    sides (see :func:`_digest_exprs`)."""
    h = hashlib.sha256()
    for part in ([s.name for s in system.states], [s.name for s in system.params], system.time.name):
        h.update(repr(part).encode("utf-8", "surrogatepass"))
    _digest_exprs(system.rhs, h)
    return h.hexdigest()


_MEMO = Memo("compiled right-hand sides by content key")


def _numpy_module(system: OdeSystem, what: str, cache: Cache, key: str) -> tuple[dict, str]:
    ckey = make_key(key, f"numpy-{what}")
    src = cache.get_text(ckey, ".py")
    if src is None:
        src = numpy_source(system, what)
        path = cache.put_text(ckey, ".py", src)
    else:
        path = cache.path(ckey, ".py")
    return load_source(src, str(path)), src


def _compile_numpy(system: OdeSystem, cache: Cache, key: str) -> CompiledRHS:
    ns, src = _numpy_module(system, "rhs", cache, key)

    def jac_factory():
        return _numpy_module(system, "jac", cache, key)[0]["jac"]

    return CompiledRHS(system, "numpy", ns["f"], ns["batch"], src, jac_factory, key=key)


def _c_module(system: OdeSystem, what: str, cache: Cache, key: str):
    ckey = make_key(key, f"c-source-{what}")
    csrc = cache.get_text(ckey, ".c")
    if csrc is None:
        csrc = c_backend.c_source(system, what)
        cache.put_text(ckey, ".c", csrc)
    return build_c(csrc, what, cache), csrc


def _compile_c(system: OdeSystem, cache: Cache, key: str) -> CompiledRHS:
    mod, csrc = _c_module(system, "rhs", cache, key)
    n, m = system.n_states, system.n_params
    f, batch = c_callables(mod, n, m)

    def jac_factory():
        return c_jac_callable(_c_module(system, "jac", cache, key)[0], n, m)

    return CompiledRHS(system, "c", f, batch, csrc, jac_factory, key=key)


def compile_system(system: OdeSystem, backend: str = "auto", *, cache: Cache | None = None) -> CompiledRHS:
    """Generate (or fetch from the caches) a fast right-hand side for ``system``.

    ``backend``: ``"numpy"``, ``"c"`` (raises :class:`CompilerUnavailable` if no compiler/cffi/headers) or
    ``"auto"`` (C if possible, else numpy with a :class:`CFallbackWarning` and a line on stderr).

    >>> import numpy as np, sympy as sp
    >>> from symbolic_tpde import OdeSystem
    >>> u, k = sp.symbols("u k")
    >>> crhs = compile_system(OdeSystem(states=(u,), params=(k,), rhs=(-k * u,)), "numpy")
    >>> crhs.f(0.0, np.array([2.0]), np.array([0.5])).tolist()
    [-1.0]
    """
    if backend not in ("numpy", "c", "auto"):
        raise ValueError(f"backend must be 'numpy', 'c' or 'auto', got {backend!r}")
    cache = cache or Cache()
    key = system_key(system)
    auto = backend == "auto"
    if auto:
        reason = c_backend.availability()
        if reason is not None:
            msg = f"symbolic_tpde: C backend unavailable ({reason}); falling back to the numpy backend"
            warnings.warn(msg, CFallbackWarning, stacklevel=2)
            print(msg, file=sys.stderr)
            backend = "numpy"
        else:
            backend = "c"
    elif backend == "c":
        reason = c_backend.availability()
        if reason is not None:
            raise CompilerUnavailable(f"backend='c' requested but unavailable: {reason}")
    memo_key = (key, backend, str(cache.root))
    hit = _MEMO.lookup(memo_key)
    if hit is not None:
        return hit
    if backend == "c" and auto:
        try:
            crhs = _compile_c(system, cache, key)
        except (RuntimeError, OSError, ImportError) as exc:  # build failed although a compiler exists
            msg = f"symbolic_tpde: C build failed ({str(exc).splitlines()[0][:200]}); falling back to numpy"
            warnings.warn(msg, CFallbackWarning, stacklevel=2)
            print(msg, file=sys.stderr)
            backend, memo_key = "numpy", (key, "numpy", str(cache.root))
            crhs = _compile_numpy(system, cache, key)
    else:
        crhs = _compile_c(system, cache, key) if backend == "c" else _compile_numpy(system, cache, key)
    return _MEMO.store(memo_key, crhs)
