"""Key-blocked ("flash") attention kernel for the middle and large head dimensions (issue 33).

For the softmax and unnormalised (``exp``) modes, with key bias, causal prefix and sink, on machines whose build
targets AVX-512F or AVX2 with FMA (:func:`.fused.simd_compiled`).  One compiled routine per (mode, dtype, p, d,
bias?, prefix?, sink?) does what torch's CPU flash kernel does with two GEMM calls, in one pass per tile:

* a thread takes a *tile* of ``QB`` queries (48 on AVX-512; 192 when the keys and values exceed
  :data:`LARGE_KV_BYTES`; the queries are padded to whole tiles, so a query's tile is fixed by its index and
  shapes);
* per *block* of ``KB`` keys: the logits of the tile against the block by a register-blocked micro-kernel
  (``RL`` queries × ``KV`` vectors of keys in registers, one broadcast query entry and ``KV`` key loads per
  ``RL·KV`` fused multiply-adds; the keys packed in panels of ``PW = KV·W`` keys, feature-major, so a panel is
  contiguous and stays in L1 while every group of queries uses it) into a buffer of ``QB × KB`` logits kept
  in L1/L2; then, per query, the block maximum, the running maximum and the weights ``e^{l − m}`` in place
  (the vector exp of :mod:`.fused_simd`, ≤ 1.2 eps); then the value sums by a second micro-kernel (``R``
  queries × ``CC`` vectors of value components, one value load per ``R`` fused multiply-adds); on AVX-512 a
  last vector of components at most half full goes through a half-width (256-bit) micro-kernel of ``RT``
  queries instead (``HALF``: half the cost of a 512-bit FMA where the machine splits those, as AMD Zen 4
  does; the same chain of FMAs per component, so the same bits);
* the block sums (in the work dtype over at most 1024 keys) are merged into float64 running sums rescaled to
  the running maximum: ``acc ← e^{m_old − m_new} acc + block`` (the factor exactly 1 when the maximum did not
  move), as the vector loops of :mod:`.fused` do.

The full formulas and the fixed order of every sum are in the template's head comment
(``templates/flash_attend.c``).  A query's result depends on its own row only, never on its tile's other
queries, on the thread or on the thread count: bitwise the same for every ``threads`` (tests).  The tile sizes
are fixed per (instruction set, dtype, d) by :func:`params`, never chosen at run time.

Accuracy: each logit is a chain of ``p`` fused multiply-adds in the work dtype, each weight within 1.2 eps of
``e^{l − m}``, each block sum over at most 1024 keys in the work dtype and the totals in float64: the same
error budget as the vector loops of :mod:`.fused` (tests/test_attend_flash.py checks against a long-double
reference with the tolerances stated there).

Measurements (the tile sizes, and the crossover :data:`.fused.CROSSOVER` above which :func:`prefers` sends
calls here):
``docs/performance.md``.  No SymPy here.
"""

from __future__ import annotations

import numpy as np

from . import fused, fused_simd

__all__ = ["params", "c_source", "prefers", "attend_flash", "work_bytes", "MAX_DIM"]

#: Largest feature and value dimension this kernel is built for (issue 33: head dimensions 1-256).
MAX_DIM = 256

#: Vector lanes per instruction set and C type.
LANES = {"avx512": {"float": 16, "double": 8}, "avx2": {"float": 8, "double": 4}}

#: Micro-kernel shapes per instruction set: the logits' ``(RL queries, KV key vectors)``, the value sums'
#: accumulator budget (``R · CC`` vectors) and widest column chunk ``CC``; queries per tile; keys per block
#: per C type.  AVX-512 has 32 vector registers (24 accumulators + loads), AVX2 16 (12 + loads).  Measured on
#: AVX-512 (one thread, interleaved rounds, docs/performance.md "Tile sizes"): key blocks of 64-512, query
#: tiles of 24-96 and logit shapes 8 x 2 / 12 x 2 within ±5 % of these; a 16-vector budget 13-27 % slower.
SHAPE = {"avx512": {"RL": 6, "KV": 4, "ACC": 24, "CCMAX": 4, "QB": 48, "QB_LARGE": 192,
                    "KB": {"float": 256, "double": 128}},
         "avx2": {"RL": 6, "KV": 2, "ACC": 12, "CCMAX": 3, "QB": 24, "QB_LARGE": 96,
                  "KB": {"float": 256, "double": 128}}}

#: Keys and values above this many bytes take query tiles of ``QB_LARGE`` (each key is then read from L3 or
#: memory once per 192 queries, not per 48).  A row's bits do not depend on the tile size (tests), only the
#: time: at n = 32 000 (32 MB of keys and values), 2 threads, load 5, tiles of 192 took 1/1.11 of the time of
#: tiles of 48 (float32, d = 128) and 1/1.06 (float64, d = 64); at n = 8000 (4 MB, float32, d = 16 and 64)
#: 0.97-1.0, no gain (docs/performance.md).
LARGE_KV_BYTES = 1 << 24


def params(T: str, form: str, p: int, d: int, n_k: int = 0) -> dict:
    """The template's tile parameters for C type ``T`` (``"float"``/``"double"``), instruction set ``form``
    (``"avx512"``/``"avx2"``), dimensions ``p``, ``d`` and key count ``n_k`` (see the template's head
    comment)."""
    w = LANES[form][T]
    s = SHAPE[form]
    nc = -(-d // w)
    half = int(form == "avx512" and 0 < d % w <= w // 2)  # the last vector's components in a half-width one
    nf = nc - half
    cc = max(c for c in range(1, s["CCMAX"] + 1) if nf % c == 0) if nf else 1
    r = s["ACC"] // cc
    large = n_k * (p + d) * (4 if T == "float" else 8) > LARGE_KV_BYTES
    qb = s["QB_LARGE" if large else "QB"]
    while qb % r or qb % s["RL"]:  # R in {6, 8, 12, 24} (AVX-512), {4, 6, 12} (AVX2): QB a multiple of each
        r -= 1
    rt = s["ACC"]
    while qb % rt:
        rt -= 1
    return {"P": p, "D": d, "DP": nc * w, "QB": qb, "KB": s["KB"][T], "RL": s["RL"], "KV": s["KV"], "R": r,
            "CC": cc, "PW": s["KV"] * w, "NPW": w, "HALF": half, "RT": rt}


def work_bytes(dtype, p: int, d: int, n_k: int = 0) -> int:
    """Bytes of C work buffers one thread allocates (the tile's logits, its float64 sums, one block sum); the
    caller's padded copies of the queries, keys and values are numpy arrays, seen by ``tracemalloc``."""
    dt = np.dtype(dtype)
    form = fused.simd_compiled(dt)
    if form not in LANES:
        return 0
    prm = params(fused.ctype(dt), form, p, d, n_k)
    blk = max(prm["R"] * prm["CC"] * prm["NPW"], prm["RT"] * prm["NPW"] // 2)
    return (prm["QB"] * prm["KB"] + blk) * dt.itemsize + prm["QB"] * prm["DP"] * 8


def _cdecl(T: str) -> str:
    return (f"int tpde_flash(long nq, long nk, long ntiles, const {T} *q, const {T} *kp, const {T} *v, "
            f"const {T} *bias, const int64_t *prefix, const {T} *sink_logit, const {T} *sink_value, {T} *out, "
            f"int threads);\nlong tpde_flash_shape(void);\n{fused.POOL_CDECL}")


def c_source(mode: str, dtype, p: int, d: int, bias: bool, prefix: bool, sink: bool, form: str,
             n_k: int = 0) -> str:
    """C translation unit of one variant: ``templates/flash_attend.c`` with its parameters (:func:`params`)."""
    T = fused.ctype(dtype)
    return fused.render("flash_attend.c", {
        "TPDE_FLOAT": int(T == "float"), "MODE": fused.MODES.index(mode), "HAS_BIAS": int(bias),
        "HAS_PREFIX": int(prefix), "HAS_SINK": int(sink), **params(T, form, p, d, n_k), **fused_simd.exp_defines(T)})


def prefers(mode: str, p: int, d: int, dtype) -> bool:
    """Whether :func:`~symbolic_tpde.numerics.particles.attend.attend` should run this kernel: softmax or exp mode,
    a build with vector loops (AVX-512 or AVX2), ``max(p, d)`` above the crossover :data:`.fused.CROSSOVER`
    of the fused kernel's loops (below it those run) and both at most :data:`MAX_DIM`.  A fixed table (the shapes, the machine and ``TPDE_FUSED_ISA`` decide)."""
    if mode not in ("softmax", "exp") or not (1 <= p <= MAX_DIM and 1 <= d <= MAX_DIM):
        return False
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64):
        return False
    form = fused.simd_compiled(dt)
    return form in LANES and max(p, d) > fused.CROSSOVER[form]


def attend_flash(q, k, values, *, mode, key_bias, shift, prefix, sink_logit, sink_value, threads):
    """This kernel's result for :func:`~symbolic_tpde.numerics.particles.attend.attend`, or ``None`` when the
    call is not covered (sigmoid, exp with a sink, mixed dtypes, dimensions above :data:`MAX_DIM`, no vector
    loops in this build) or the kernel is unavailable (announced once by :mod:`.fused`)."""
    del shift  # sigmoid only
    dt = values.dtype
    if dt not in (np.float32, np.float64) or q.dtype != dt or k.dtype != dt:
        return None
    if mode not in ("softmax", "exp") or (mode == "exp" and sink_logit is not None):
        return None
    if (sink_logit is None) != (sink_value is None):
        return None
    n_q, p = q.shape
    n_k, d = values.shape
    if not (1 <= p <= MAX_DIM and 1 <= d <= MAX_DIM and n_q >= 1 and n_k >= 1):
        return None
    form = fused.simd_compiled(dt)
    if form not in LANES:
        return None
    T = fused.ctype(dt)
    prm = params(T, form, p, d, n_k)
    flags = (key_bias is not None, prefix is not None, sink_logit is not None)
    mod = fused.module(("flash", mode, dt.str, *flags, form, tuple(sorted(prm.items()))),
                       lambda: (c_source(mode, dt, p, d, *flags, form, n_k), _cdecl(T)))
    if mod is None:
        return None
    ffi, lib = mod.ffi, mod.lib
    qb, pw, dp = prm["QB"], prm["PW"], prm["DP"]
    if lib.tpde_flash_shape() != qb * 1_000_000 + pw * 1000 + dp:  # the padding below must match the build
        raise RuntimeError(f"flash kernel built for shape {lib.tpde_flash_shape()}, padded for {qb}/{pw}/{dp}")
    ntiles = -(-n_q // qb)
    nqp, nkp = ntiles * qb, -(-n_k // pw) * pw
    qp = np.zeros((nqp, p), dtype=dt)
    qp[:n_q] = q
    kp = np.zeros((nkp // pw, p, pw), dtype=dt)  # panels (P, PW): keys j0 .. j0 + PW - 1, feature-major
    full = n_k // pw
    kp[:full] = np.asarray(k[:full * pw]).reshape(full, pw, p).transpose(0, 2, 1)
    if full * pw < n_k:
        kp[full, :, :n_k - full * pw] = np.asarray(k[full * pw:]).T
    vp = np.zeros((nkp, dp), dtype=dt)
    vp[:n_k, :d] = values
    bb = pf = sl = sv = None
    if key_bias is not None:
        bb = np.zeros(nkp, dtype=dt)
        bb[:n_k] = np.asarray(key_bias, dtype=dt).reshape(n_k)
    if prefix is not None:
        pf = np.full(nqp, n_k, dtype=np.int64)
        pf[:n_q] = np.asarray(prefix, dtype=np.int64).reshape(n_q)
    if sink_logit is not None:
        sl = np.zeros(nqp, dtype=dt)
        sl[:n_q] = np.asarray(sink_logit, dtype=dt).reshape(n_q)
        sv = np.ascontiguousarray(sink_value, dtype=dt).reshape(d)
    Tb = f"{T}[]"

    def buf(a, cdecl=Tb):
        return ffi.NULL if a is None else ffi.from_buffer(cdecl, a)

    out = np.empty((n_q, d), dtype=dt)
    nt = fused.default_threads(n_q * n_k) if threads is None else max(1, int(threads))
    rc = lib.tpde_flash(n_q, n_k, ntiles, buf(qp), buf(kp), buf(vp), buf(bb), buf(pf, "int64_t[]"), buf(sl),
                        buf(sv), ffi.from_buffer(Tb, out, require_writable=True), nt)
    fused.STATE.last_threads = rc
    if rc < 0:
        raise MemoryError("flash attention kernel: could not allocate its work buffers")
    return out
