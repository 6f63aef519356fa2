"""Fused compiled kernel behind :func:`symbolic_tpde.numerics.particles.attend.attend` (softmax, sigmoid, exp).

For each query ``i`` with logits ``l_ij = q_i·k_j + β_j`` over the visible keys ``j < K_i`` (``K_i = prefix_i``
or ``n_k``), one thread computes, in a fixed order (so the result is bitwise independent of the thread count):

* softmax: ``m_i = max(max_j l_ij, s_i)``, then ``out_i = (Σ_j e^{l_ij - m_i} v_j + e^{s_i - m_i} v_s) /
  (Σ_j e^{l_ij - m_i} + e^{s_i - m_i})`` (two passes: row maximum, then ``exp``-and-accumulate; the sink
  terms ``s_i, v_s`` only when a sink is given);
* exp (unnormalised): ``out_i = e^{m_i - log n_k} Σ_j e^{l_ij - m_i} v_j``; a zero sum gives 0 (``0·inf = 0``)
  and ``inf`` appears only when the true result overflows (the product is formed in float64, and when
  ``e^{m_i - log n_k}`` alone overflows it is recomputed as ``±e^{m_i - log n_k + log|Σ|}``);
* sigmoid: ``out_i = (1/n_k) Σ_j σ(q_i·k_j + b) v_j`` with ``σ(z) = 1/(1+e^{-z})`` for ``z ≥ 0`` and
  ``e^{z}/(1+e^{z})`` for ``z < 0``, so ``exp`` only ever sees arguments ``≤ 0``.

The C is the template ``templates/fused_attend.c`` (with ``tpde_exp.h``, ``tpde_vec.h``, ``tpde_repeat.h``),
rendered per (mode, dtype, p, d, key bias?, prefix?, sink?, tile) by :func:`c_source`, which only sets
parameters (``#define``): ``p`` and ``d`` are compile-time constants (loops unrolled by the preprocessor), keys
and values transposed to ``(p, n_k)`` / ``(d, n_k)`` so the inner loop over keys is unit-stride and vectorised
with ``#pragma omp simd`` (``-fopenmp-simd``: no OpenMP runtime, hence no fork hazard in process pools).
Queries are spread over POSIX threads started per call (``threads``; default: the cores this process may use),
each taking chunks of 16 queries from an atomic counter.  float32 sums run in blocks of 1024 keys in float32
(vectorised), block totals in float64.

On AVX-512 and on AVX2 with FMA (the compiler's ``__AVX512F__`` / ``__AVX2__``, i.e. ``-march=native`` on such
a machine) the softmax and unnormalised loops for ``d ≤ 32`` (``fused_simd.MAX_D``) are the vector ones of :mod:`.fused_simd`:
online over key blocks of 256 (float32: 512) keys, on AVX-512 with a table-driven ``exp``; when the keys
exceed one superblock sized to L2 (:func:`.fused_simd.superblock`), a thread takes a larger chunk of queries
(:func:`.fused_simd.query_chunk`) and sweeps each superblock with every tile of the chunk (tile states kept in
memory between superblocks: bitwise the result of one pass), so a key is read from memory once per chunk.
``TPDE_FUSED_ISA`` (``avx2``, ``plain``; :data:`ISA_FLAGS`) builds the forms other machines run.  Every other
machine and variant runs the plain-C loops.

Query tiles (``d ≤ 8``): for ``3 ≤ d ≤ 8`` without a prefix, each pass of the plain-C loops over the keys serves
a tile of ``Q = 8`` queries (:func:`tile_size`), so every loaded key and value row is used 8 times (a chunk's
last partial tile is padded with copies of its last query).  Each query keeps its own maximum, weights and
accumulators with the same expressions and per-key order as the one-query loop, so the result is bitwise that
of ``Q = 1`` (tests/test_fused_kernel.py) and independent of the tile and thread a query lands in.  At
``d ≤ 2`` and with a causal prefix (each query its own key count) one query per pass.  Why these sizes, and the
timings of every form: README, "Benchmarks".

``exp`` is the kernel's own (``templates/tpde_exp.h``), not libm's and not ``-ffast-math`` (which would assume
no inf/nan, and the integrators rely on non-finite fields to detect blow-up): for ``x ≤ 0``,
``k = rint(x/ln 2)``, ``r = x - k ln2_hi - k ln2_lo`` (Cody-Waite, ``|r| ≤ ln2/2``), ``e^r`` by its Taylor
polynomial of degree 13 (float64; truncation ``≤ (ln2/2)^14/14! < 5e-18``) or 7 (float32; ``< 6e-9``), times
``2^k`` built in the exponent bits; ``x < -708`` (float32: ``-87``) returns 0 (the true value is below
3.3e-308, resp. 1.7e-38), NaN propagates.  Measured (tests/test_fused_kernel.py, against ``exp`` in long double
at 2.1e6 arguments in [-745, 0] and [-1, 0]): max relative error 1.4e-16 = 0.61 eps in float64 (numpy's own:
0.58 eps) and 7.4e-8 = 0.62 eps in float32 (numpy's: 1.65 eps); the test asserts < 1 eps.  The field then
agrees with the blocked numpy path to ~1e-14 relative (float64) and ~1e-6 (float32).

Built through cffi API mode and the content-hash cache (:mod:`symbolic_tpde.codegen.cbuild`,
:mod:`symbolic_tpde.codegen.cache`); compiled with ``-march=native``, so the CPU model and flags are part of
the key.  Without a compiler or cffi (or when the build fails) :func:`attend_fused` returns ``None`` and the
caller runs the numpy path; that is announced once per process (a :class:`FusedFallbackWarning` and one
stderr line).  ``TPDE_FUSED=0`` disables the kernel.

References: the particle field of Castin, Ablin, Carrillo, Peyré (arXiv 2501.18322) as written in
``symbolic_tpde/numerics/particles/fields.py``; Cody & Waite's range reduction (Software Manual for the Elementary
Functions, 1980); timings against the numpy path and the yardstick loop of issue 12:
``numerics/bench_particles.py``, ``numerics/bench_fused.py``.  No SymPy here.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
import warnings
from pathlib import Path

import numpy as np

from ...codegen import cbuild
from ...codegen.cache import Cache, make_key
from ...errors import InputError
from . import fused_simd
from ..threads import kernel_threads

__all__ = ["FusedFallbackWarning", "attend_fused", "c_source", "available", "default_threads", "kernel_exp",
           "simd_compiled", "prefers", "CROSSOVER", "work_entries", "isa_form", "cflags", "ISA_FLAGS", "tile_size", "MAX_P", "MAX_D",
           "CFLAGS", "MODES", "module", "render", "ctype", "thread_pool", "POOL_CDECL"]

#: Feature dimensions from this size on take BLAS for the logits (a real matmul there) and the compiled row
#: pass of :mod:`.fused_rows` for the rest.
MAX_P = 32
#: Largest value dimension the kernel is generated for.
MAX_D = 64
#: Dispatch crossovers of :func:`symbolic_tpde.numerics.particles.attend.attend`, per loop form
#: (:func:`simd_compiled`: ``"avx512"``, ``"avx2"``, ``""`` the plain-C loops): the largest feature dimension
#: ``p`` and value dimension ``d`` at which this kernel runs; above either, the key-blocked kernel of
#: :mod:`.fused_flash` (AVX-512 and AVX2 builds, softmax and exp modes, p, d <= 256), else BLAS logits and the
#: compiled row pass (:mod:`.fused_rows`).  Measured, not timed at run time (a call's path, hence its bits, must
#: not depend on the load): ``numerics/bench_particles.py --crossover`` times the three paths at d = p in the
#: same rounds (n = 4000, 2 threads, docs/performance.md).  AVX-512 (this kind of machine, load 2.5-3.3, two
#: runs): flash / fused 1.03 and 0.93 (0.79-1.31) at d = 8 (float64 / float32), 0.97-0.98 at d = 9, 0.93-1.10
#: at d = 10 (parity), 0.72 / 0.75 at d = 12, 0.63-0.66 at d = 16: crossover 10.  AVX2 form (built here with
#: TPDE_FUSED_ISA=avx2): 1.12 / 1.37 at d = 4, 0.90 / 1.05 at d = 7, 0.88-0.92 / 0.93-1.01 at d = 8, 0.75 /
#: 0.65 at d = 12: crossover 8.  The plain-C loops (no flash kernel) were 1.25-2.7x behind the rows path at
#: every d > 8 (issue 33): crossover 8 there.  Sigmoid always runs the plain-C loops up to 8, the rows path above.
CROSSOVER = {"avx512": 10, "avx2": 8, "": 8}
#: Below this many pairs a call runs in one thread (thread start-up, ~20 µs, would dominate).
THREADS_MIN_PAIRS = 1 << 16
#: Compiler flags (part of the cache key, together with the CPU signature because of -march=native).
#: No -ffast-math: inf/nan must propagate.  -fopenmp-simd honours the simd pragmas without an OpenMP runtime.
#: -mprefer-vector-width=512: on AVX-512 machines gcc otherwise keeps 256-bit vectors (512 measured faster:
#: README, "Benchmarks"); ignored without AVX-512.
CFLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fPIC", "-shared", "-fno-math-errno",
          "-fopenmp-simd", "-std=gnu11", "-pthread")
#: Queries a thread takes at once from the shared counter (the tiles are at most this long).
CHUNK = 16
#: ``TPDE_FUSED_ISA``: ``avx2`` adds ``-mno-avx512f`` (the AVX2 loops of :mod:`.fused_simd` on an AVX-512
#: machine); ``plain`` that and ``-DTPDE_NO_SIMD`` (the plain-C loops, vectorised by gcc for AVX2: the kernel an
#: AVX2 machine ran before :mod:`.fused_simd`): for tests and benchmarks of the forms other machines run.
#: Unset: what the machine supports.
ISA_FLAGS = {"": (), "native": (), "avx2": ("-mno-avx512f",), "plain": ("-mno-avx512f", "-DTPDE_NO_SIMD")}


def isa_form() -> str:
    """The form ``TPDE_FUSED_ISA`` asks for (``""``: the machine's own)."""
    isa = os.environ.get("TPDE_FUSED_ISA", "").strip().lower()
    if isa not in ISA_FLAGS:  # a user's setting: bad input (exit 2), not an internal error
        raise InputError("TPDE_FUSED_ISA", f"unknown form {isa!r}: expected one of "
                         f"{', '.join(k for k in ISA_FLAGS if k)} (or unset)")
    return "" if isa == "native" else isa


def cflags(isa: str | None = None) -> tuple:
    """The kernel's compiler flags: :data:`CFLAGS` plus those of ``isa`` (default: :func:`isa_form`)."""
    return CFLAGS + ISA_FLAGS[isa_form() if isa is None else isa]


class FusedFallbackWarning(UserWarning):
    """The fused C kernel is unavailable; the numpy path runs instead (issued once per process)."""


#: The kernel's modes, in the order of the templates' ``MODE`` parameter.
MODES = ("softmax", "exp", "sigmoid")
TEMPLATES = Path(__file__).parent / "templates"


def ctype(dtype) -> str:
    """The C type of a float32 / float64 dtype."""
    return {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}[np.dtype(dtype)]


def render(template: str, params: dict) -> str:
    """C translation unit: ``params`` as ``#define`` lines, then the template ``templates/<template>`` with its
    ``#include "..."`` files inlined (so the source, which is the cache key, holds every line compiled)."""
    lines = [f"/* symbolic_tpde: templates/{template} rendered with these parameters */"]
    return "\n".join(lines + [f"#define {k} {v}" for k, v in params.items()] + [_inlined(template)])


@functools.lru_cache(maxsize=None)
def _inlined(name: str) -> str:
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    return re.sub(r'^#include "([^"]+)"$', lambda m: _inlined(m.group(1)), text, flags=re.M)


def _cdecl(T: str) -> str:
    return (f"void tpde_exp_array(long n, const {T} *x, {T} *y);\nint tpde_simd(void);\n"
            f"void tpde_vexp_array(long n, const {T} *x, {T} *y);\n"
            f"int tpde_attend(long nq, long nk, const {T} *q, const {T} *kT, const {T} *vT, const {T} *bias, "
            f"const int64_t *prefix, const {T} *sink_logit, const {T} *sink_value, double shift, {T} *out, "
            f"int threads);\n{POOL_CDECL}")


#: The thread pool's exported functions, in every kernel that runs threads (templates/tpde_threads.h).
POOL_CDECL = ("const void *tpde_pool_entry(void);\nvoid tpde_pool_share(const void *iface);\n"
              "void tpde_pool_config(int pooled, long spin_us);\nlong tpde_pool_info(int what);")


def c_source(mode: str, dtype, p: int, d: int, bias: bool = False, prefix: bool = False,
             sink: bool = False, tile: int | None = None) -> str:
    """C translation unit of one kernel variant: ``templates/fused_attend.c`` with its parameters (exported
    ``tpde_attend``, see :func:`_cdecl` and the template's head comment).

    ``tile``: queries per pass over the keys of the plain-C loops (:func:`tile_size` when None; 1 = one query
    per pass; only for ``d <= 8`` without a prefix, else 1); the vector loops take :func:`.fused_simd.tile_size`.
    """
    T = ctype(dtype)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if not (1 <= p < MAX_P and 1 <= d <= MAX_D):
        raise ValueError(f"p = {p}, d = {d}: the kernel covers 1 <= p < {MAX_P}, 1 <= d <= {MAX_D}")
    simd = fused_simd.covered(mode, d)

    def per_pass(default: int, tiled: bool) -> int:  # a prefix (own key count per query): one query
        return (default if tile is None else int(tile)) if tiled and not prefix else 1

    qt = {"QT_PLAIN": per_pass(tile_size(d), d <= 8), "QT_AVX512": per_pass(fused_simd.tile_size(d), simd),
          "QT_AVX2": per_pass(fused_simd.tile_size(d, "avx2"), simd)}
    if not all(1 <= q <= CHUNK for q in qt.values()):
        raise ValueError(f"tile must be in 1..{CHUNK}, got {tile}")
    return render("fused_attend.c", {
        "TPDE_FLOAT": int(T == "float"), "MODE": MODES.index(mode), "P": p, "D": d, "HAS_BIAS": int(bias),
        "HAS_PREFIX": int(prefix), "HAS_SINK": int(sink), "SIMD_COVERED": int(simd), "CHUNK": CHUNK, "KB": fused_simd.KEY_BLOCK[T], **qt,
        "SB": fused_simd.superblock(T, p, d), "QCH": fused_simd.query_chunk(T, d),
        **fused_simd.exp_defines(T)})


def tile_size(d: int) -> int:
    """Queries per pass over the keys of the plain-C loops for value dimension ``d`` (see :func:`c_source`)."""
    return 8 if 3 <= d <= 8 else 1


def work_entries(mode: str, d: int, n_k: int, dtype=np.float64) -> int:
    """Entries of the work buffer one thread of the kernel allocates (softmax/exp: logits of a tile of
    queries; fused_simd's loops: one key block per query of the tile, else a whole row of ``n_k`` per query)."""
    form = simd_compiled(dtype) if fused_simd.covered(mode, d) else ""
    if form:  # a key block per query of a tile, and the tile states of a chunk of queries
        T = ctype(dtype)
        states = fused_simd.query_chunk(T, d) * (d + 1) * 64 * (2 if T == "float" else 1)
        return fused_simd.tile_size(d, form) * fused_simd.KEY_BLOCK[T] + states // np.dtype(dtype).itemsize
    return (tile_size(d) if d <= 8 else 1) * max(1, n_k)


class _State:
    """Per-process registry of loaded kernels and of the one fallback announcement."""

    def __init__(self):
        self.lock = threading.Lock()
        self.modules: dict[tuple, object] = {}
        self.failed: dict[tuple, str] = {}
        self.announced = False
        self.last_threads = 0  # threads used by the latest call (diagnostics, tests)
        self.pool_host = None  # the first loaded kernel with threads: its pool is every kernel's (kept on reset)

    def reset(self) -> None:
        with self.lock:
            self.modules.clear()
            self.failed.clear()
            self.announced = False


STATE = _State()


def available() -> str | None:
    """``None`` when the fused kernel can be built here, else the reason (``TPDE_FUSED=0`` included)."""
    if os.environ.get("TPDE_FUSED", "1").strip() == "0":
        return "disabled by TPDE_FUSED=0"
    return cbuild.availability()


def _announce(reason: str) -> None:
    if STATE.announced:
        return
    STATE.announced = True
    msg = f"fused particle kernel unavailable ({reason}); using the numpy path"
    warnings.warn(msg, FusedFallbackWarning, stacklevel=4)
    print(f"symbolic_tpde: {msg}", file=sys.stderr)


def module(variant: tuple, source=None):
    """The loaded cffi module of a variant, building (or fetching from the cache) on first use; or None.

    ``variant``: the arguments of :func:`c_source`, or any other key with ``source``, a callable returning
    ``(C source, cdef)`` (as :mod:`.fused_rows` passes for its row pass)."""
    isa = isa_form()
    key = (variant, isa)
    mod = STATE.modules.get(key)
    if mod is not None:
        return mod
    with STATE.lock:
        if key in STATE.modules:
            return STATE.modules[key]
        if key in STATE.failed:
            reason = STATE.failed[key]
        else:
            reason = available()
            if reason is None:
                try:
                    mod = _build(*(source() if source else (c_source(*variant), _cdecl(ctype(variant[1])))), isa)
                except (cbuild.CompilerUnavailable, RuntimeError, OSError, ImportError) as exc:
                    reason = f"build failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            if mod is not None:
                _share_pool(mod)  # before any other thread can see the module
                STATE.modules[key] = mod
                return mod
            if not reason.startswith("disabled"):
                STATE.failed[key] = reason
    if not reason.startswith("disabled"):
        _announce(reason)
    return None


def _share_pool(mod) -> None:
    """Point a kernel with threads at the process's one thread pool (templates/tpde_threads.h): the first
    such kernel loaded hosts it; the others' calls run on its workers.  Called under ``STATE.lock``."""
    if not hasattr(mod.lib, "tpde_pool_entry"):  # the row pass runs no threads
        return
    if STATE.pool_host is None:
        STATE.pool_host = mod
        spin = os.environ.get("TPDE_POOL_SPIN_US")
        if spin and not re.fullmatch(r"[0-9]+", spin):  # the C side ignores it then
            warnings.warn(f"TPDE_POOL_SPIN_US={spin!r} is not a whole number of microseconds; the kernels' thread "
                          f"pool spins {mod.lib.tpde_pool_info(1)} us", RuntimeWarning, stacklevel=2)
        return
    host = STATE.pool_host
    addr = int(host.ffi.cast("uintptr_t", host.lib.tpde_pool_entry()))
    mod.lib.tpde_pool_share(mod.ffi.cast("const void *", addr))


def thread_pool(pooled: bool | None = None, spin_us: int | None = None) -> dict | None:
    """The kernels' thread pool (templates/tpde_threads.h): set whether calls use it (``pooled=False``: threads
    created per call, as before the pool) and how long its idle workers spin before blocking (``spin_us``,
    microseconds; default ``TPDE_POOL_SPIN_US`` or 2000); ``None`` leaves a setting as it is.  Returns the
    settings now in force, the workers started and worker 1's wait before the latest call that used it (the
    gap between two calls, for numerics/bench_pool.py), ``{"pooled", "spin_us", "workers", "last_wait_us"}``
    (workers -1 while a call runs), or None when no kernel is available.  For benchmarks and tests; the bits of a result never
    depend on these."""
    if STATE.pool_host is None and _probe_module(np.float64) is None:
        return None
    lib = STATE.pool_host.lib
    lib.tpde_pool_config(-1 if pooled is None else int(bool(pooled)), -1 if spin_us is None else max(0, int(spin_us)))
    return {"pooled": bool(lib.tpde_pool_info(0)), "spin_us": int(lib.tpde_pool_info(1)),
            "workers": int(lib.tpde_pool_info(2)), "last_wait_us": lib.tpde_pool_info(3) / 1e3}


def _key(csrc: str, cc, isa: str = "") -> str:
    """Cache key: source, backend, compiler, flags and (because of -march=native) the CPU signature."""
    return make_key(csrc, "fused-attend-cffi-api", (*cc, *cflags(isa), cbuild.cpu_signature()))


def _build(csrc: str, cdecl: str, isa: str = ""):
    cc = cbuild.find_compiler()
    if cc is None:
        raise cbuild.CompilerUnavailable(cbuild.availability() or "no C compiler")
    key = _key(csrc, cc, isa)
    modname = f"_tpde_fused_{key[:20]}"
    cache = Cache()
    path = cache.get_file(key, ".so")
    if path is not None:
        try:
            return cbuild.load_extension(path, modname)
        except ImportError as exc:  # checksum ok but unloadable: rebuild
            warnings.warn(f"cached fused kernel {path} failed to load ({exc}); rebuilding", stacklevel=2)
    data = cbuild.compile_extension(csrc, modname, cdecl, cflags(isa), cc, libs=("-lm",))
    path = cache.put_file(key, ".so", data)
    return cbuild.load_extension(cache.get_file(key, ".so") or path, modname)


def kernel_exp(x: np.ndarray, loops: bool = False) -> np.ndarray | None:
    """The kernel's own ``exp`` applied to ``x`` (float32 or float64, entries ``≤ 0``); None if unavailable.

    ``loops=False``: the plain-C ``exp`` (sigmoid, ``d > 8``, a sink's weight, and everything on machines
    with neither AVX-512 nor AVX2); ``loops=True``: the ``exp`` of the softmax/unnormalised loops for ``d ≤ 32``
    and of the rows pass, which is :mod:`.fused_simd`'s where the compiler targets AVX-512F or AVX2
    (:func:`simd_compiled`), else the same plain-C one.  For measuring their accuracy
    (tests/test_fused_kernel.py); the kernels call the same inline functions."""
    x = np.ascontiguousarray(x)
    mod = _probe_module(x.dtype)
    if mod is None:
        return None
    T = "double[]" if x.dtype == np.float64 else "float[]"
    y = np.empty_like(x)
    fn = mod.lib.tpde_vexp_array if loops else mod.lib.tpde_exp_array
    fn(x.size, mod.ffi.from_buffer(T, x), mod.ffi.from_buffer(T, y, require_writable=True))
    return y


def simd_compiled(dtype=np.float64) -> str | None:
    """Which loops this machine's build runs for softmax at d <= 8: ``"avx512"`` or ``"avx2"`` (those of
    :mod:`.fused_simd`), ``""`` (the plain-C loops), or None (no kernel)."""
    mod = _probe_module(dtype)
    return None if mod is None else {1: "avx512", 2: "avx2"}.get(int(mod.lib.tpde_simd()), "")


def _probe_module(dtype):
    """The smallest softmax variant (p = d = 1, one query per pass): what :func:`kernel_exp` and
    :func:`simd_compiled` load to ask the build about its exp and its loops."""
    return module(("softmax", np.dtype(dtype).str, 1, 1, False, False, False, 1))


def prefers(mode: str, p: int, d: int, dtype) -> bool:
    """Whether :func:`~symbolic_tpde.numerics.particles.attend.attend` should run this kernel (rather than BLAS
    logits and the row pass) for feature dimension ``p`` and value dimension ``d``: both at most the
    :data:`CROSSOVER` of the loops this machine's build runs (sigmoid: the plain-C loops').  A fixed table, so
    the path depends on the shapes, the machine and ``TPDE_FUSED_ISA`` only.  False when the kernel is
    unavailable (the caller then tries the other paths)."""
    if not (1 <= p < MAX_P and 1 <= d <= MAX_D):
        return False
    form = simd_compiled(dtype) if fused_simd.covered(mode, d) else ""
    if form is None:
        return False
    limit = CROSSOVER[form]
    return p <= limit and d <= limit


def default_threads(pairs: int) -> int:
    """Threads for a call with ``pairs`` query-key pairs: the usable cores (at most the limit of
    :func:`.threads.limit_threads`), or 1 below ``THREADS_MIN_PAIRS``."""
    if pairs < THREADS_MIN_PAIRS:
        return 1
    return kernel_threads()  # the usable cores, or the limit of an active threads.limit_threads block


def attend_fused(q, k, values, *, mode, key_bias, shift, prefix, sink_logit, sink_value, threads, tile=None):
    """The fused kernel's result for :func:`~symbolic_tpde.numerics.particles.attend.attend`, or ``None`` when this
    call is not covered (``p ≥ MAX_P``, ``d > MAX_D``, mixed dtypes, sigmoid with bias/prefix/sink, exp with a
    sink) or the kernel is unavailable (announced once).  ``tile``: queries per pass over the keys
    (:func:`tile_size` when None; the result is bitwise the same for every tile, tests/test_fused_kernel.py)."""
    dt = values.dtype
    if dt not in (np.float32, np.float64) or q.dtype != dt or k.dtype != dt:
        return None
    n_q, p = q.shape
    n_k, d = values.shape
    if not (1 <= p < MAX_P and 1 <= d <= MAX_D and n_k >= 1 and n_q >= 1):
        return None
    if mode == "sigmoid" and (key_bias is not None or prefix is not None or sink_logit is not None):
        return None
    if mode == "exp" and sink_logit is not None:
        return None
    if mode not in MODES or (sink_logit is None) != (sink_value is None):
        return None
    variant = (mode, dt.str, p, d, key_bias is not None, prefix is not None, sink_logit is not None,
               tile_size(d) if tile is None else int(tile))
    mod = module(variant)
    if mod is None:
        return None
    ffi, lib = mod.ffi, mod.lib
    T = "double[]" if dt == np.float64 else "float[]"

    def buf(a, cdecl=T):
        return ffi.NULL if a is None else ffi.from_buffer(cdecl, a)

    qc = np.ascontiguousarray(q)
    kT = np.ascontiguousarray(k.T)
    vT = np.ascontiguousarray(values.T)
    kb = None if key_bias is None else np.ascontiguousarray(key_bias, dtype=dt).reshape(n_k)
    pf = None if prefix is None else np.ascontiguousarray(prefix, dtype=np.int64).reshape(n_q)
    sl = None if sink_logit is None else np.ascontiguousarray(sink_logit, dtype=dt).reshape(n_q)
    sv = None if sink_value is None else np.ascontiguousarray(sink_value, dtype=dt).reshape(d)
    out = np.empty((n_q, d), dtype=dt)
    nt = default_threads(n_q * n_k) if threads is None else max(1, int(threads))
    rc = lib.tpde_attend(n_q, n_k, buf(qc), buf(kT), buf(vT), buf(kb), buf(pf, "int64_t[]"), buf(sl), buf(sv),
                         float(shift), ffi.from_buffer(T, out, require_writable=True), nt)
    STATE.last_threads = rc
    if rc < 0:
        raise MemoryError(f"fused attention kernel: could not allocate a work buffer of {variant[-1]} x {n_k} "
                          "entries")
    return out
