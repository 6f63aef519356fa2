"""C backend: SymPy's ``C99CodePrinter`` on the same renamed, CSE-reduced expressions as the numpy backend,
compiled by the system C compiler into a cffi API-mode extension module (optional extra ``c``).

Generated C functions (``NS`` = number of states, ``NP`` = number of parameters)::

    void tpde_rhs(double t, const double *y, const double *p, double *out);          /* out[NS]       */
    void tpde_jac(double t, const double *y, const double *p, double *out);          /* out[NS*NS]    */
    void tpde_rhs_batch(long N, const double *t, long t_stride, const double *Y,
                        const double *P, double *out, long p_stride);                /* loop in C     */

``rhs_batch`` evaluates row ``k`` of ``Y`` (``N x NS``, C order) with parameters ``P + k*p_stride``
(``p_stride = 0``: one shared parameter set) at time ``t[k*t_stride]``.  When the body is plain arithmetic
(the softmax family: no function call, no ternary) every temporary is a vector of :data:`LANES` states
(gcc's vector extension, :func:`_lane_source`): the batch is vectorised over states explicitly, also at
the -O1 of very large sources (:data:`.warm.CFLAGS_LARGE`, where ``#pragma omp simd`` is not in effect),
with the same bits as the scalar form (measured at softmax d = 16, 10 000 states, load ~14: 3.8x the scalar
form, 23x generated numpy batched; ``numerics/bench_rhs.py``).  Otherwise the loop over rows carries
``#pragma omp simd`` with the scalar body inlined (with :data:`.warm.CFLAGS`, ``-O3 -march=native
-fopenmp-simd``, no fast-math, no FMA contraction, gcc vectorises it itself).

Why cffi API mode: it calls straight into the extension without libffi's per-call marshalling (ctypes adds
3-5 µs per call, measured (README, Benchmarks)).  Build: ``cffi.FFI.emit_c_code`` writes the wrapper, the compiler found by
:func:`find_compiler` builds it with :data:`CFLAGS`, and the shared object is stored in the content-hash
cache.  No compiler / no cffi / no Python headers: :class:`CompilerUnavailable`.
"""

from __future__ import annotations

import re

from sympy.printing.c import C99CodePrinter

from ..symbolic.system import OdeSystem
from . import cbuild
from .cache import Cache
from .cbuild import CompilerUnavailable, find_compiler  # noqa: F401  (public names of this module)
from .numpy_backend import NamedPrinterMixin, Prepared, prepare

from .warm import CFLAGS, DECLS, build_c  # noqa: F401  (SymPy-free; re-exported here)


class _CPrinter(NamedPrinterMixin, C99CodePrinter):
    pass


def availability() -> str | None:
    """``None`` when the C backend can be built, else the reason it cannot (see :func:`.cbuild.availability`)."""
    return cbuild.availability(lambda: find_compiler())  # late lookup: tests may replace find_compiler


def _body(prep: Prepared, out_index: str = "out", T: str = "double", zero: str = "0.0") -> list[str]:
    """Statements of one evaluation: states ``y[i]``, parameters ``p[i]``, time ``t``, the CSE temporaries and
    the outputs ``out[i]``, all of C type ``T`` (``double``, or the lane vector ``tpde_v`` of the batch)."""
    pr = _CPrinter(prep.names)
    L = []
    for i, name in enumerate(prep.state_names):
        L.append(f"    const {T} {name} = y[{i}];")
    for i, name in enumerate(prep.param_names):
        L.append(f"    const {T} {name} = p[{i}];")
    L.append(f"    const {T} {prep.time_name} = t; (void){prep.time_name};")
    for name, e in prep.temps:
        L.append(f"    const {T} {name} = {pr.doprint(e)};")
    nz = dict(prep.outputs)
    for i in range(prep.n_out):
        if i in nz:
            L.append(f"    {out_index}[{i}] = {pr.doprint(nz[i])};")
        elif prep.n_out <= 4096:
            L.append(f"    {out_index}[{i}] = {zero};")
    if prep.n_out > 4096:
        L.insert(0, f"    for (long k = 0; k < {prep.n_out}; ++k) {out_index}[k] = {zero};")
    return L


#: States evaluated together by the lane-vector form of the right-hand side (8 doubles: one AVX-512 register;
#: gcc splits the vector type on narrower hardware).
LANES = 8
_CALL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*\(|\?")


def _lane_source(prep: Prepared, n: int, m: int) -> list[str] | None:
    """``tpde_rhs`` and ``tpde_rhs_batch`` on gcc's vector extension: every temporary is a vector of
    :data:`LANES` states (``tpde_v``), so the batch is vectorised over states at any optimisation level
    (-O1 for large sources, where ``#pragma omp simd`` is not in effect), element by element the same IEEE
    operations as the scalar form (no FMA contraction), hence the same bits.  The batch gathers ``LANES``
    rows into lanes (the last tile padded with its last row), evaluates, and scatters the valid lanes back;
    ``tpde_rhs`` runs one state in all lanes.  Only for bodies of plain arithmetic (no function call, no
    ternary: those have no vector form in C); otherwise ``None`` and the scalar form is used."""
    body = _body(prep, T="tpde_v", zero="TPDE_ZERO")
    code = "\n".join(line.split("=", 1)[1] for line in body if "=" in line)
    if _CALL.search(code):
        return None
    return [f"#define TPDE_LANES {LANES}", "typedef double tpde_v __attribute__((vector_size(8 * TPDE_LANES)));",
            "static const tpde_v TPDE_ZERO = {0};", "",
            ("static inline __attribute__((always_inline)) void rhs_lanes(const tpde_v t, const tpde_v *y, "
             "const tpde_v *p, tpde_v *out) {"), *body, "}", "",
            "void tpde_rhs(double t, const double *y, const double *p, double *out) {",
            f"    tpde_v yv[{max(n, 1)}], pv[{max(m, 1)}], ov[{max(n, 1)}], tv;",
            "    for (int l = 0; l < TPDE_LANES; ++l) tv[l] = t;",
            f"    for (long i = 0; i < {n}; ++i) for (int l = 0; l < TPDE_LANES; ++l) yv[i][l] = y[i];",
            f"    for (long i = 0; i < {m}; ++i) for (int l = 0; l < TPDE_LANES; ++l) pv[i][l] = p[i];",
            "    rhs_lanes(tv, yv, pv, ov);",
            f"    for (long i = 0; i < {n}; ++i) out[i] = ov[i][0];", "}", "",
            ("void tpde_rhs_batch(long N, const double *t, long t_stride, const double *Y, const double *P, "
             "double *out, long p_stride) {"),
            f"    tpde_v yv[{max(n, 1)}], pv[{max(m, 1)}], ov[{max(n, 1)}], tv;",
            "    for (long k0 = 0; k0 < N; k0 += TPDE_LANES) {",
            "        const long nl = N - k0 < TPDE_LANES ? N - k0 : TPDE_LANES;",
            "        for (int l = 0; l < TPDE_LANES; ++l) {",
            "            const long k = k0 + (l < nl ? l : nl - 1);",
            "            tv[l] = t[k * t_stride];",
            f"            for (long i = 0; i < {n}; ++i) yv[i][l] = Y[k * {n} + i];",
            "            if (p_stride || k0 == 0)  /* shared parameters: broadcast once */",
            f"                for (long i = 0; i < {m}; ++i) pv[i][l] = P[k * p_stride + i];",
            "        }",
            "        rhs_lanes(tv, yv, pv, ov);",
            "        for (int l = 0; l < nl; ++l)",
            f"            for (long i = 0; i < {n}; ++i) out[(k0 + l) * {n} + i] = ov[i][l];",
            "    }", "}", ""]


def c_source(system: OdeSystem, what: str = "rhs", staged: bool | None = None) -> str:
    """C translation unit: ``what="rhs"`` gives ``tpde_rhs`` + ``tpde_rhs_batch``, ``"jac"`` ``tpde_jac``."""
    prep = prepare(system, what, staged=staged)
    n, m = system.n_states, system.n_params

    def clean(x) -> str:
        return str(x).replace("*/", "* /").replace("\n", " ")

    L = ["/* Generated by symbolic_tpde.codegen.c_backend from an OdeSystem; do not edit.",
         f" * variant: {clean(dict(system.origin).get('variant', '?'))}; function(s): {what}",
         f" * states ({n}):"]
    L += [f" *   y[{i}] = {clean(s.name)}" for i, s in enumerate(system.states)]
    L += [f" * params ({m}):"]
    L += [f" *   p[{i}] = {clean(s.name)}" for i, s in enumerate(system.params)]
    L += [" */", "#include <math.h>", ""]
    lanes = _lane_source(prep, n, m) if what == "rhs" else None
    if lanes is not None:
        L += lanes
    elif what == "rhs":
        L.append("static inline __attribute__((always_inline)) void rhs_one(double t, const double *y, const double *p, double *out) {")
        L += _body(prep) + ["}", ""]
        L.append("void tpde_rhs(double t, const double *y, const double *p, double *out) "
                 "{ rhs_one(t, y, p, out); }")
        L += ["", "void tpde_rhs_batch(long N, const double *t, long t_stride, const double *Y, const double *P, "
              "double *out, long p_stride) {",
              "    #pragma omp simd",
              "    for (long k = 0; k < N; ++k)",
              f"        rhs_one(t[k * t_stride], Y + k * {n}, P + k * p_stride, out + k * {n});",
              "}", ""]
    else:
        L.append("void tpde_jac(double t, const double *y, const double *p, double *out) {")
        L += _body(prep) + ["}", ""]
    return "\n".join(L)


def build_module(csrc: str, what: str = "rhs", cache: Cache | None = None):
    """Compile (or fetch from the cache) the extension for a C source: :func:`.warm.build_c`."""
    return build_c(csrc, what, cache)
