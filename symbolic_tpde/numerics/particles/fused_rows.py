"""Large feature dimension (``p ≥ 32`` or ``d > 64``): BLAS for the logits, one fused C pass for the rest.

For such calls the logits ``L = Q_B K^T`` of a row block ``B`` of queries are a genuine matrix product, which
BLAS does faster than any hand loop; what the blocked numpy path then spends on separate passes over the
``|B| × n_k`` block (add the key bias, row maximum, subtract, ``exp``, and a column of ones for the row sums)
is replaced by one compiled routine, ``tpde_rows``, which for each row ``i`` of the block, over the visible
keys ``j < K_i`` (``K_i = prefix_i`` clipped to the block's key count, else all):

* softmax / exp: ``l_ij += β_j``; ``m_i = max(max_j l_ij, s_i)`` (sink logit ``s_i`` when given); then in
  one pass ``l_ij ← e^{l_ij - m_i}`` and ``den_i = Σ_j l_ij`` (float64; float32 in blocks of 1024 keys, block
  totals in float64, as in :mod:`.fused`); invisible keys get weight 0;
* sigmoid: ``l_ij ← σ(l_ij + shift)`` with ``σ(z) = 1/(1+e^{-z})`` (``z ≥ 0``), ``e^{z}/(1+e^{z})`` (``z < 0``).

The caller (:func:`symbolic_tpde.numerics.particles.attend.attend_numpy` with ``rows=``) then forms the
value-weighted sum ``R = W V`` with BLAS and normalises: ``out_i = (R_i + e^{s_i - m_i} v_s) / (den_i +
e^{s_i - m_i})`` (softmax), ``e^{m_i - log n_k} R_i`` (exp), ``R_i / n_k`` (sigmoid) -- the same finishing
code as the numpy path, so the two agree to round-off (tests/test_fused_kernel.py: 1e-13 relative in
float64, 1e-5 in float32).  Memory stays that of the numpy path, ``O(block · n_k)``; threads are the numpy
path's row-block threads (cffi releases the GIL during the call).

The C is the template ``templates/fused_rows.c``; its ``exp`` is the vector one of :mod:`.fused_simd` for
softmax / exp on AVX-512 and AVX2, else :mod:`.fused`'s own (no ``-ffast-math``: inf/nan propagate).  The
module is built and cached by :func:`symbolic_tpde.numerics.particles.fused.module` (same flags, same fallback
announcement).  Timings: ``numerics/bench_particles.py`` (d = 64 rows).  No SymPy here.
"""

from __future__ import annotations

import numpy as np

from . import fused, fused_simd

__all__ = ["c_source", "row_pass"]


def _cdecl(T: str) -> str:
    return (f"void tpde_rows(long rows, long kmax, {T} *L, const {T} *bias, const int64_t *prefix, "
            f"const {T} *sink_logit, double shift, {T} *m_out, double *den_out);")


def c_source(mode: str, dtype, bias: bool, prefix: bool, sink: bool) -> str:
    """C translation unit of one row-pass variant: ``templates/fused_rows.c`` with its parameters (the exported
    ``tpde_rows``, see :func:`_cdecl`).

    ``L (rows, kmax)`` C order, overwritten by the weights; ``bias (kmax,)``, ``prefix (rows,)``,
    ``sink_logit (rows,)`` or NULL; ``m_out (rows,)`` the row maxima, ``den_out (rows,)`` the weight sums
    (both unused by sigmoid).
    """
    T = fused.ctype(dtype)
    return fused.render("fused_rows.c", {
        "TPDE_FLOAT": int(T == "float"), "MODE": fused.MODES.index(mode), "HAS_BIAS": int(bias),
        "HAS_PREFIX": int(prefix), "HAS_SINK": int(sink), **fused_simd.exp_defines(T)})


def row_pass(mode: str, dtype, *, key_bias, shift, prefix, sink_logit, sink_value):
    """A callable ``f(L, lo, hi) -> (m, den)`` running ``tpde_rows`` in place on the logit block ``L`` of
    query rows ``lo:hi`` (``m`` in the work dtype, ``den`` float64), or ``None`` when the variant is not
    covered (as in :func:`.fused.attend_fused`: sigmoid without bias/prefix/sink, exp without sink) or the
    kernel is unavailable (announced once by :mod:`.fused`)."""
    dt = np.dtype(dtype)
    if dt not in (np.float32, np.float64) or mode not in fused.MODES:
        return None
    if mode == "sigmoid" and (key_bias is not None or prefix is not None or sink_logit is not None):
        return None
    if (mode == "exp" and sink_logit is not None) or (sink_logit is None) != (sink_value is None):
        return None
    flags = (key_bias is not None, prefix is not None, sink_logit is not None)
    mod = fused.module(("rows", mode, dt.str, *flags),
                       lambda: (c_source(mode, dt, *flags), _cdecl(fused.ctype(dt))))
    if mod is None:
        return None
    ffi, lib = mod.ffi, mod.lib
    T = "double[]" if dt == np.float64 else "float[]"
    kb = None if key_bias is None else np.ascontiguousarray(key_bias, dtype=dt).ravel()
    pf = None if prefix is None else np.ascontiguousarray(prefix, dtype=np.int64).ravel()
    sl = None if sink_logit is None else np.ascontiguousarray(sink_logit, dtype=dt).ravel()

    def run(L: np.ndarray, lo: int, hi: int, j0: int = 0):
        """``L``: the logits of query rows ``lo:hi`` against keys ``j0 : j0 + L.shape[1]`` (``j0 > 0``: a key
        tile, without a prefix)."""
        assert L.flags.c_contiguous and L.dtype == dt and L.shape[0] == hi - lo and (j0 == 0 or pf is None)
        m = np.empty(hi - lo, dtype=dt)
        den = np.empty(hi - lo, dtype=np.float64)
        lib.tpde_rows(hi - lo, L.shape[1], ffi.from_buffer(T, L, require_writable=True),
                      ffi.NULL if kb is None else ffi.from_buffer(T, kb[j0:j0 + L.shape[1]]),
                      ffi.NULL if pf is None else ffi.from_buffer("int64_t[]", pf[lo:hi]),
                      ffi.NULL if sl is None else ffi.from_buffer(T, sl[lo:hi]), float(shift),
                      ffi.from_buffer(T, m, require_writable=True),
                      ffi.from_buffer("double[]", den, require_writable=True))
        return m, den

    return run
