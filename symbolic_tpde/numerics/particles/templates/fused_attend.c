/* The fused particle kernel behind symbolic_tpde.numerics.fields_core.attend (formulas and measurements: the
 * docstring of symbolic_tpde/numerics/fused.py; the vector loops: symbolic_tpde/numerics/fused_simd.py).
 *
 * Rendered by symbolic_tpde.numerics.fused.c_source, which #defines the parameters before this text and
 * inlines the #include "..." files (a compile of this file with -D... -I. works the same way):
 *   TPDE_FLOAT          1: T = float, 0: T = double
 *   MODE                0 softmax, 1 exp (unnormalised), 2 sigmoid
 *   P, D                feature and value dimension (1..31, 1..64), compile-time: loops unrolled
 *   HAS_BIAS, HAS_PREFIX, HAS_SINK   0 or 1
 *   SIMD_COVERED        1: the vector loops exist for this variant (softmax / exp, D <= fused_simd.MAX_D)
 *   CHUNK               queries a thread takes at once; KB keys per block of the vector loops
 *   QT_PLAIN, QT_AVX512, QT_AVX2     queries per pass over the keys of each form (1..CHUNK; 1 with a prefix)
 *   TPDE_X512_*, TPDE_X2_*           the vector exp's constants (tpde_vec.h)
 * and, from the compiler flags, __AVX512F__ / __AVX2__ __FMA__ / TPDE_NO_SIMD (which loops are built).
 *
 * Exported:  int tpde_attend(nq, nk, q (nq, P), kT (P, nk), vT (D, nk), bias (nk) | NULL, prefix (nq) | NULL,
 * sink_logit (nq) | NULL, sink_value (D) | NULL, shift, out (nq, D), threads): the number of threads that ran,
 * or -1 when a work buffer could not be allocated; tpde_exp_array / tpde_vexp_array (the two exps, for tests)
 * and tpde_simd (which loops were compiled: 1 AVX-512, 2 AVX2, 0 plain C). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>

#if TPDE_FLOAT
typedef float T;
#define JB 1024  /* keys per T-precision partial sum */
#else
typedef double T;
#define JB (1L << 62)  /* keys per T-precision partial sum */
#endif
#define FUSED (D <= 8)  /* exp and accumulation in one pass; above, the weights go to the work row first */

#include "tpde_exp.h"
#include "tpde_repeat.h"
#include "tpde_threads.h"

typedef struct {
    long nq, nk; const T *q, *kT, *vT, *bias; const int64_t *prefix;
    const T *sink_logit, *sink_value; double shift; T *out; long next; int failed;
} tpde_args;

#if SIMD_COVERED && !defined(TPDE_NO_SIMD) && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#include <immintrin.h>
#include "tpde_vec.h"
#if TPDE_SIMD == 1
#define QT QT_AVX512
#else
#define QT QT_AVX2
#endif
#else
#define TPDE_SIMD 0
#define QT QT_PLAIN
#endif

/* One query's result from its float64 sums a<u>_<c>, weight sum den<u>, maximum m<u> (and sink logit sl<u>):
 * softmax (Σ w v + e^(s - m) v_s) / (Σ w + e^(s - m)); exp e^(m - log nk) Σ, formed in double (0 * inf = 0,
 * inf only when the true value overflows: then ±e^(m - log nk + log|Σ|)); sigmoid Σ / nk. */
#if MODE == 2
#define TPDE_FINISH_C(u, c) TPDE_OUT(u, c) = (T)(a##u##_##c / (double)nk);
#define TPDE_FINISH(u) TPDE_FOR_C(D, TPDE_FINISH_C, TPDE_FINISH_C, u)
#elif MODE == 1
#define TPDE_FINISH_C(u, c) \
    v = a##u##_##c == 0 ? 0.0 : sc * (double)a##u##_##c; \
    if (isinf(sc) && a##u##_##c != 0 && isfinite(a##u##_##c))  /* e^ls overflows, the product may not */ \
        v = copysign(exp(ls + log(fabs((double)a##u##_##c))), (double)a##u##_##c); \
    TPDE_OUT(u, c) = (T)v;
#define TPDE_FINISH(u) { \
    const double ls = (double)m##u - log((double)nk), sc = exp(ls); \
    double v; \
    (void)den##u;  /* the weight sum is not needed here */ \
    TPDE_FOR_C(D, TPDE_FINISH_C, TPDE_FINISH_C, u) }
#else
#define TPDE_SINK_C(u, c) a##u##_##c += ws * (double)a->sink_value[c];
#define TPDE_FINISH_C(u, c) TPDE_OUT(u, c) = (T)(a##u##_##c / den##u);
#if HAS_SINK
#define TPDE_FINISH(u) { \
    const double ws = (double)tpde_exp(sl##u - m##u); \
    den##u += ws; \
    TPDE_FOR_C(D, TPDE_SINK_C, TPDE_SINK_C, u) \
    TPDE_FOR_C(D, TPDE_FINISH_C, TPDE_FINISH_C, u) }
#else
#define TPDE_FINISH(u) { TPDE_FOR_C(D, TPDE_FINISH_C, TPDE_FINISH_C, u) }
#endif
#endif

#define TPDE_NONE(u, c)
#if HAS_BIAS
#define TPDE_PLUS_BIAS + bj[j]
#else
#define TPDE_PLUS_BIAS
#endif

#if TPDE_SIMD
/* ---- the vector loops (tpde_vec.h), QT queries sharing each loaded key vector ---------------------------
 * Online over key blocks of KB keys: pass 1 stores the logits of every query of the tile to its work row and
 * keeps lane maxima; where a block raises a query's running maximum (which starts at the sink logit, or -inf),
 * its sums so far are multiplied by e^(m_old - m_new) in float64; pass 2, one query at a time (its D + 1 lane
 * sums in registers), adds the weights e^(l - m) and the weighted values (float32: in float32 over the block,
 * then in float64).  A last partial vector is loaded and weighted under a mask: keys past the end add 0. */
#define TPDE_OUT(u, c) outt[u * D + c]
#define TPDE_VQ_C(u, c) const V q##u##_##c = VSET1(qt[u * P + c]);
#define TPDE_VQ(u) TPDE_FOR_C(P, TPDE_VQ_C, TPDE_VQ_C, u)
#if HAS_SINK
#define TPDE_VM0(u) mrow[u] = slt[u];
#else
#define TPDE_VM0(u) mrow[u] = -INFINITY;
#endif
#define TPDE_VK(u, c) const T *restrict k##c = a->kT + c * nk + jb;
#define TPDE_VV(u, c) const T *restrict v##c = a->vT + c * nk + jb;
#define TPDE_VMX(u) V mx##u = VSET1(-INFINITY);
#define TPDE_VLOADK(u, c) const V kk##c = VLOAD(k##c + j);
#define TPDE_VMLOADK(u, c) const V kk##c = VMLOAD(tm, k##c + j);
#define TPDE_VDOT_C(u, c) l##u = VFMA(q##u##_##c, kk##c, l##u);
#if HAS_BIAS
#define TPDE_VBIAS(u) l##u = VADD(l##u, bb);
#else
#define TPDE_VBIAS(u)
#endif
#define TPDE_VLOGIT(u) \
    V l##u = VMUL(q##u##_0, kk0); TPDE_FOR_C(P, TPDE_NONE, TPDE_VDOT_C, u) TPDE_VBIAS(u) \
    VSTORE(buf + u * KB + j, l##u); \
    mx##u = VMAX(l##u, mx##u);
#define TPDE_VMLOGIT(u) \
    V l##u = VMUL(q##u##_0, kk0); TPDE_FOR_C(P, TPDE_NONE, TPDE_VDOT_C, u) TPDE_VBIAS(u) \
    VMSTORE(buf + u * KB + j, tm, l##u); \
    mx##u = VMMAX(mx##u, tm, l##u, mx##u);
#define TPDE_VACC(u, c) Sv##c = VFMA(w, VLOAD(v##c + j), Sv##c);
#define TPDE_VMACC(u, c) Sv##c = VFMA(w, VMLOAD(tm, v##c + j), Sv##c);
#if TPDE_FLOAT  /* Sacc[t][i][0/1]: float64 lane sums of the float32 block sums' low and high lanes */
#define TPDE_VSCALE(u) for (int c = 0; c < D + 1; ++c) { \
    Sacc[u][c][0] = DMUL(Sacc[u][c][0], f); Sacc[u][c][1] = DMUL(Sacc[u][c][1], f); }
#define TPDE_VS_C(u, c) V Sv##c = VZERO();
#define TPDE_VSTORE_C(u, c) \
    Sacc[t][1 + c][0] = DADD(Sacc[t][1 + c][0], F2DLO(Sv##c)); \
    Sacc[t][1 + c][1] = DADD(Sacc[t][1 + c][1], F2DHI(Sv##c));
#define TPDE_VRED(u, i) DRED(DADD(Sacc[u][i][0], Sacc[u][i][1]))
#else  /* Sacc[t][i]: float64 lane sums, [0] the weights, [1 + c] the weighted value component c */
#define TPDE_VSCALE(u) for (int c = 0; c < D + 1; ++c) Sacc[u][c] = DMUL(Sacc[u][c], f);
#define TPDE_VS_C(u, c) V Sv##c = Sacc[t][1 + c];
#define TPDE_VSTORE_C(u, c) Sacc[t][1 + c] = Sv##c;
#define TPDE_VRED(u, i) DRED(Sacc[u][i])
#endif
#define TPDE_VRESCALE(u) \
    { const T bm = VRMAX(mx##u);  /* a larger maximum: rescale the sums so far */ \
      if (bm > mrow[u]) { \
        if (mrow[u] != -INFINITY) { \
          const DV f = DSET1(exp((double)mrow[u] - (double)bm)); \
          TPDE_VSCALE(u) \
        }  mrow[u] = bm; } }
#if HAS_SINK
#define TPDE_VSL(u) const T sl##u = slt[u];
#else
#define TPDE_VSL(u)
#endif
#define TPDE_VA_C(u, c) double a##u##_##c = TPDE_VRED(u, 1 + c);
#define TPDE_VFINISH(u) \
    const T m##u = mrow[u]; (void)m##u; TPDE_VSL(u) \
    double den##u = TPDE_VRED(u, 0); \
    TPDE_FOR_C(D, TPDE_VA_C, TPDE_VA_C, u) \
    TPDE_FINISH(u)

/* The running state of one tile: its maxima and float64 lane sums (kept in memory between key ranges, so
 * a tile can be resumed: exact, hence bitwise the result of one uninterrupted pass over the keys). */
typedef struct {
#if TPDE_FLOAT
    DV Sacc[QT][D + 1][2];
#else
    DV Sacc[QT][D + 1];
#endif
    T mrow[QT];
} tpde_state;

static inline void tpde_init(tpde_state *restrict st, const T *restrict slt) {
    T *restrict mrow = st->mrow;
    (void)slt;
    TPDE_FOR_T(QT, TPDE_VM0, TPDE_VM0)
    for (int t = 0; t < QT; ++t) for (int c = 0; c < D + 1; ++c) {
#if TPDE_FLOAT
        st->Sacc[t][c][0] = st->Sacc[t][c][1] = DZERO();
#else
        st->Sacc[t][c] = DZERO();
#endif
    }
}

/* Keys jstart .. jend - 1 (jstart a multiple of KB, so the key blocks are those of one pass from 0). */
static inline void tpde_keys(const tpde_args *restrict a, const T *restrict qt, tpde_state *restrict st,
                             T *restrict buf, const long jstart, const long jend) {
    const long nk = a->nk;
    (void)nk;
#if HAS_BIAS
    const T *restrict bj = a->bias;
#endif
    TPDE_FOR_T(QT, TPDE_VQ, TPDE_VQ)
    T *restrict mrow = st->mrow;
#if TPDE_FLOAT
    DV (*restrict Sacc)[D + 1][2] = st->Sacc;
#else
    DV (*restrict Sacc)[D + 1] = st->Sacc;
#endif
    for (long jb = jstart; jb < jend; jb += KB) {
        const long je = jb + KB < jend ? jb + KB : jend;
        TPDE_FOR_C(P, TPDE_VK, TPDE_VK, 0)
        TPDE_FOR_C(D, TPDE_VV, TPDE_VV, 0)
#if HAS_BIAS
        const T *restrict bb_ = bj + jb;
#endif
        const long nb = je - jb;
        TPDE_FOR_T(QT, TPDE_VMX, TPDE_VMX)
        long j = 0;
        for (; j + W <= nb; j += W) {
            TPDE_FOR_C(P, TPDE_VLOADK, TPDE_VLOADK, 0)
#if HAS_BIAS
            const V bb = VLOAD(bb_ + j);
#endif
            TPDE_FOR_T(QT, TPDE_VLOGIT, TPDE_VLOGIT)
        }
        if (j < nb) {
            const VM tm = VTAIL(nb - j);
            TPDE_FOR_C(P, TPDE_VMLOADK, TPDE_VMLOADK, 0)
#if HAS_BIAS
            const V bb = VMLOAD(tm, bb_ + j);
#endif
            TPDE_FOR_T(QT, TPDE_VMLOGIT, TPDE_VMLOGIT)
        }
        TPDE_FOR_T(QT, TPDE_VRESCALE, TPDE_VRESCALE)
        for (int t = 0; t < QT; ++t) {  /* pass 2 over the block, one query at a time */
            const T *restrict bt = buf + t * KB;
            const V mm = VSET1(mrow[t]);
#if TPDE_FLOAT
            V S0 = VZERO();
#else
            V S0 = Sacc[t][0];
#endif
            TPDE_FOR_C(D, TPDE_VS_C, TPDE_VS_C, 0)
            long j = 0;
            for (; j + W <= nb; j += W) {
                const V w = tpde_vexp(VSUB(VLOAD(bt + j), mm));
                S0 = VADD(S0, w);
                TPDE_FOR_C(D, TPDE_VACC, TPDE_VACC, 0)
            }
            if (j < nb) {
                const VM tm = VTAIL(nb - j);
                const V w = VMZ(tm, tpde_vexp(VSUB(VMLOAD(tm, bt + j), mm)));
                S0 = VADD(S0, w);
                TPDE_FOR_C(D, TPDE_VMACC, TPDE_VMACC, 0)
            }
#if TPDE_FLOAT  /* the block's float32 lanes added in float64 */
            Sacc[t][0][0] = DADD(Sacc[t][0][0], F2DLO(S0));
            Sacc[t][0][1] = DADD(Sacc[t][0][1], F2DHI(S0));
#else
            Sacc[t][0] = S0;
#endif
            TPDE_FOR_C(D, TPDE_VSTORE_C, TPDE_VSTORE_C, 0)
        }
    }
}

static inline void tpde_finish(const tpde_args *restrict a, tpde_state *restrict st, const T *restrict slt,
                               T *restrict outt) {
    const long nk = a->nk;
    (void)nk; (void)slt;
    const T *restrict mrow = st->mrow;
#if TPDE_FLOAT
    DV (*restrict Sacc)[D + 1][2] = st->Sacc;
#else
    DV (*restrict Sacc)[D + 1] = st->Sacc;
#endif
    TPDE_FOR_T(QT, TPDE_VFINISH, TPDE_VFINISH)
}

#else
/* ---- the plain-C loops, vectorised by the compiler (#pragma omp simd) --------------------------------------
 * QT == 1: tpde_row, one query, everything the kernel covers; else tpde_tile, QT queries per pass over the keys
 * (d <= 8, no prefix), each with its own maximum, weights and float64 sums, in the same expressions and per-key
 * order as tpde_row, so a tile is bitwise the one-query loop.  Sums over keys: in blocks of JB keys in T (a
 * simd reduction), each block total added in float64. */
#if QT == 1
#define TPDE_Q(u, c) a->q[i * P + c]
#define TPDE_SL(u) a->sink_logit[i]
#define TPDE_OUT(u, c) a->out[i * D + c]
#else
#define TPDE_Q(u, c) qt[u * P + c]
#define TPDE_SL(u) slt[u]
#define TPDE_OUT(u, c) outt[u * D + c]
#endif
#define TPDE_Q_C(u, c) const T q##u##_##c = TPDE_Q(u, c);
#define TPDE_DECL_Q(u) TPDE_FOR_C(P, TPDE_Q_C, TPDE_Q_C, u)
#define TPDE_K(u, c) const T *restrict k##c = a->kT + c * nk;
#define TPDE_V(u, c) const T *restrict v##c = a->vT + c * nk;
#define TPDE_A_C(u, c) double a##u##_##c = 0;
#define TPDE_DECL_A(u) TPDE_FOR_C(D, TPDE_A_C, TPDE_A_C, u)
#define TPDE_DOT0(u, c) q##u##_##c * k##c[j]
#define TPDE_DOTN(u, c) + q##u##_##c * k##c[j]
#define TPDE_DOT(u) TPDE_FOR_C(P, TPDE_DOT0, TPDE_DOTN, u)
#define TPDE_SA_C(u, c) T s_a##u##_##c = 0;
#define TPDE_LIST_SA_C0(u, c) s_a##u##_##c
#define TPDE_LIST_SA_C(u, c) , s_a##u##_##c
#define TPDE_ADD_SA_C(u, c) a##u##_##c += (double)s_a##u##_##c;
/* sigmoid */
#define TPDE_DECL_SA(u) TPDE_FOR_C(D, TPDE_SA_C, TPDE_SA_C, u)
#define TPDE_LIST_SA0(u) TPDE_FOR_C(D, TPDE_LIST_SA_C0, TPDE_LIST_SA_C, u)
#define TPDE_LIST_SA(u) , TPDE_LIST_SA0(u)
#define TPDE_SIG_C(u, c) s_a##u##_##c += s##u * v##c[j];
#define TPDE_SIG(u) \
    const T z##u = TPDE_DOT(u) + shift; \
    const T e##u = tpde_exp(-fabs(z##u)); \
    const T s##u = (z##u >= 0 ? (T)1 : e##u) / ((T)1 + e##u); \
    TPDE_FOR_C(D, TPDE_SIG_C, TPDE_SIG_C, u)
#define TPDE_ADD_SA(u) TPDE_FOR_C(D, TPDE_ADD_SA_C, TPDE_ADD_SA_C, u)
/* softmax, exp */
#define TPDE_DECL_B(u) T *restrict b##u = buf + u * nk;
#define TPDE_DECL_M(u) T m##u = -INFINITY;
#define TPDE_LIST_M0(u) m##u
#define TPDE_LIST_M(u) , m##u
#define TPDE_LOGIT(u) \
    const T l##u = TPDE_DOT(u) TPDE_PLUS_BIAS; \
    b##u[j] = l##u; \
    m##u = l##u > m##u ? l##u : m##u;
#define TPDE_SINK_MAX(u) const T sl##u = TPDE_SL(u); m##u = sl##u > m##u ? sl##u : m##u;
#define TPDE_DECL_DEN(u) double den##u = 0;
#define TPDE_DECL_SDA(u) T s_den##u = 0; TPDE_DECL_SA(u)
#define TPDE_LIST_SDA0(u) s_den##u TPDE_FOR_C(D, TPDE_LIST_SA_C, TPDE_LIST_SA_C, u)
#define TPDE_LIST_SDA(u) , TPDE_LIST_SDA0(u)
#define TPDE_W_C(u, c) s_a##u##_##c += w##u * v##c[j];
#define TPDE_W(u) \
    const T w##u = tpde_exp(b##u[j] - m##u); \
    s_den##u += w##u; \
    TPDE_FOR_C(D, TPDE_W_C, TPDE_W_C, u)
#define TPDE_ADD_SDA(u) den##u += (double)s_den##u; TPDE_ADD_SA(u)
/* d > 8: one sum per component over the weights in the work row b0 */
#define TPDE_WSUM(u, c) \
    for (long j0 = 0; j0 < kmax; j0 += JB) { \
        const long j1 = j0 + JB < kmax ? j0 + JB : kmax; \
        T s_a = 0; \
        TPDE_PRAGMA(omp simd reduction(+:s_a)) \
        for (long j = j0; j < j1; ++j) s_a += b0[j] * v##c[j]; \
        a0_##c += (double)s_a; \
    }

#if QT == 1
static void tpde_row(const tpde_args *restrict a, long i, T *restrict buf) {
#else
static void tpde_tile(const tpde_args *restrict a, const T *restrict qt, const T *restrict slt,
                      T *restrict outt, T *restrict buf) {
    (void)slt;
#endif
    const long nk = a->nk;
    TPDE_FOR_T(QT, TPDE_DECL_Q, TPDE_DECL_Q)
    TPDE_FOR_C(P, TPDE_K, TPDE_K, 0)
    TPDE_FOR_C(D, TPDE_V, TPDE_V, 0)
#if HAS_BIAS
    const T *restrict bj = a->bias;
#endif
    TPDE_FOR_T(QT, TPDE_DECL_A, TPDE_DECL_A)
#if HAS_PREFIX
    long kmax = (long)a->prefix[i];
    kmax = kmax < 0 ? 0 : (kmax > nk ? nk : kmax);
#else
    const long kmax = nk;
#endif
#if MODE == 2  /* sigmoid */
    const T shift = (T)a->shift;
#if FUSED
    (void)buf;
    for (long j0 = 0; j0 < kmax; j0 += JB) {
        const long j1 = j0 + JB < kmax ? j0 + JB : kmax;
        TPDE_FOR_T(QT, TPDE_DECL_SA, TPDE_DECL_SA)
        TPDE_PRAGMA(omp simd reduction(+:TPDE_FOR_T(QT, TPDE_LIST_SA0, TPDE_LIST_SA)))
        for (long j = j0; j < j1; ++j) {
            TPDE_FOR_T(QT, TPDE_SIG, TPDE_SIG)
        }
        TPDE_FOR_T(QT, TPDE_ADD_SA, TPDE_ADD_SA)
    }
#else
    T *restrict b0 = buf;
    #pragma omp simd
    for (long j = 0; j < kmax; ++j) {
        const T z = TPDE_DOT(0) + shift;
        const T t = tpde_exp(-fabs(z));
        const T s = (z >= 0 ? (T)1 : t) / ((T)1 + t);
        b0[j] = s;
    }
    TPDE_FOR_C(D, TPDE_WSUM, TPDE_WSUM, 0)
#endif
#else  /* softmax, exp: the logits to the work rows and their maxima, then the weights and sums */
    TPDE_FOR_T(QT, TPDE_DECL_B, TPDE_DECL_B)
    TPDE_FOR_T(QT, TPDE_DECL_M, TPDE_DECL_M)
    TPDE_PRAGMA(omp simd reduction(max:TPDE_FOR_T(QT, TPDE_LIST_M0, TPDE_LIST_M)))
    for (long j = 0; j < kmax; ++j) {
        TPDE_FOR_T(QT, TPDE_LOGIT, TPDE_LOGIT)
    }
#if HAS_SINK
    TPDE_FOR_T(QT, TPDE_SINK_MAX, TPDE_SINK_MAX)
#endif
    TPDE_FOR_T(QT, TPDE_DECL_DEN, TPDE_DECL_DEN)
#if FUSED
    for (long j0 = 0; j0 < kmax; j0 += JB) {
        const long j1 = j0 + JB < kmax ? j0 + JB : kmax;
        TPDE_FOR_T(QT, TPDE_DECL_SDA, TPDE_DECL_SDA)
        TPDE_PRAGMA(omp simd reduction(+:TPDE_FOR_T(QT, TPDE_LIST_SDA0, TPDE_LIST_SDA)))
        for (long j = j0; j < j1; ++j) {
            TPDE_FOR_T(QT, TPDE_W, TPDE_W)
        }
        TPDE_FOR_T(QT, TPDE_ADD_SDA, TPDE_ADD_SDA)
    }
#else
    for (long j0 = 0; j0 < kmax; j0 += JB) {
        const long j1 = j0 + JB < kmax ? j0 + JB : kmax;
        T s_den0 = 0;
        #pragma omp simd reduction(+:s_den0)
        for (long j = j0; j < j1; ++j) {
            const T w0 = tpde_exp(b0[j] - m0);
            b0[j] = w0;
            s_den0 += w0;
        }
        den0 += (double)s_den0;
    }
    TPDE_FOR_C(D, TPDE_WSUM, TPDE_WSUM, 0)
#endif
#endif
    TPDE_FOR_T(QT, TPDE_FINISH, TPDE_FINISH)
}
#endif

#if TPDE_SIMD
/* The vector loops' worker: a chunk of queries (16, or QCH when the keys exceed one superblock of SB keys)
 * is cut into tiles of QT (the last one padded with copies of the chunk's last query); the keys are taken in
 * superblocks of SB keys sized to L2 (fused_simd.superblock), each swept by every tile of the chunk while it
 * is in cache, the tiles' states kept in memory between superblocks.  Each query sees the same key blocks in
 * the same order whatever the chunk, superblock, tile or thread: bitwise the same result. */
static void *tpde_worker(void *arg) {
    tpde_args *a = (tpde_args *)arg;
    const long qch = a->nk > SB ? QCH : CHUNK;
    const long ntmax = (qch + QT - 1) / QT;
    T *buf = (T *)malloc(sizeof(T) * (size_t)QT * KB);  /* one key block per query */
    size_t sbytes = sizeof(tpde_state) * (size_t)ntmax;
    sbytes = (sbytes + 63) / 64 * 64;
    tpde_state *st = (tpde_state *)aligned_alloc(64, sbytes);
    T *pad = (T *)malloc(sizeof(T) * (size_t)QT * (P + D + 1));  /* the padded last tile */
    if (!buf || !st || !pad) {
        __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
        free(buf); free(st); free(pad);
        return NULL;
    }
    T *qp = pad, *op = pad + QT * P, *sp = pad + QT * (P + D);
    for (;;) {
        const long lo = __atomic_fetch_add(&a->next, qch, __ATOMIC_RELAXED);
        if (lo >= a->nq) break;
        const long hi = lo + qch < a->nq ? lo + qch : a->nq;
        const long nt = (hi - lo + QT - 1) / QT;
        const int partial = lo + nt * QT > hi;
        if (partial) {
            const long i = lo + (nt - 1) * QT;
            for (long t = 0; t < QT; ++t) {
                const long r = i + t < hi ? i + t : hi - 1;
                for (long c = 0; c < P; ++c) qp[t * P + c] = a->q[r * P + c];
                sp[t] = HAS_SINK ? a->sink_logit[r] : 0;
            }
        }
#define TPDE_TQ(t) (partial && (t) == nt - 1 ? qp : a->q + (lo + (t) * QT) * P)
#define TPDE_TS(t) (!HAS_SINK ? NULL : (partial && (t) == nt - 1 ? sp : a->sink_logit + lo + (t) * QT))
        long kmax = a->nk;
        for (long t = 0; t < nt; ++t) tpde_init(st + t, TPDE_TS(t));
        for (long ks = 0; ks < kmax; ks += SB) {
            const long ke = ks + SB < kmax ? ks + SB : kmax;
            for (long t = 0; t < nt; ++t) {
                long kt = ke;
#if HAS_PREFIX  /* QT == 1: the tile is query lo + t with its own key count */
                kt = (long)a->prefix[lo + t];
                kt = kt < 0 ? 0 : (kt > ke ? ke : kt);
#endif
                if (kt > ks) tpde_keys(a, TPDE_TQ(t), st + t, buf, ks, kt);
            }
        }
        for (long t = 0; t < nt; ++t) {
            if (partial && t == nt - 1) {
                tpde_finish(a, st + t, TPDE_TS(t), op);
                for (long u = 0; lo + t * QT + u < hi; ++u)
                    for (long c = 0; c < D; ++c) a->out[(lo + t * QT + u) * D + c] = op[u * D + c];
            } else {
                tpde_finish(a, st + t, TPDE_TS(t), a->out + (lo + t * QT) * D);
            }
        }
#undef TPDE_TQ
#undef TPDE_TS
    }
    free(buf); free(st); free(pad);
    return NULL;
}
#else
static void *tpde_worker(void *arg) {
    tpde_args *a = (tpde_args *)arg;
    T *buf = NULL;
#if !(MODE == 2 && FUSED)
    buf = (T *)malloc(sizeof(T) * (size_t)QT * (size_t)(a->nk > 0 ? a->nk : 1));
    if (!buf) { __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED); return NULL; }
#endif
    for (;;) {
        const long lo = __atomic_fetch_add(&a->next, CHUNK, __ATOMIC_RELAXED);
        if (lo >= a->nq) break;
        const long hi = lo + CHUNK < a->nq ? lo + CHUNK : a->nq;
#if QT == 1
        for (long i = lo; i < hi; ++i) tpde_row(a, i, buf);
#else  /* full tiles in place; a chunk's last partial tile padded with copies of its last query */
        for (long i = lo; i < hi; i += QT) {
            if (i + QT <= hi) {
                tpde_tile(a, a->q + i * P, HAS_SINK ? a->sink_logit + i : NULL, a->out + i * D, buf);
                continue;
            }
            T qp[QT * P], sp[QT], op[QT * D];
            for (long t = 0; t < QT; ++t) {
                const long r = i + t < hi ? i + t : hi - 1;
                for (long c = 0; c < P; ++c) qp[t * P + c] = a->q[r * P + c];
                sp[t] = HAS_SINK ? a->sink_logit[r] : 0;
            }
            tpde_tile(a, qp, sp, op, buf);
            for (long t = 0; i + t < hi; ++t)
                for (long c = 0; c < D; ++c) a->out[(i + t) * D + c] = op[t * D + c];
        }
#endif
    }
    free(buf);
    return NULL;
}

#endif

void tpde_exp_array(long n, const T *x, T *y) {  /* the plain-C exp, vectorised as in the loops */
    #pragma omp simd
    for (long j = 0; j < n; ++j) y[j] = tpde_exp(x[j]);
}

int tpde_simd(void) { return TPDE_SIMD; }

void tpde_vexp_array(long n, const T *x, T *y) {  /* the exp of the hot loops */
#if TPDE_SIMD
    long j = 0;
    for (; j + W <= n; j += W) VSTORE(y + j, tpde_vexp(VLOAD(x + j)));
    if (j < n) VMSTORE(y + j, VTAIL(n - j), tpde_vexp(VMLOAD(VTAIL(n - j), x + j)));
#else
    tpde_exp_array(n, x, y);
#endif
}

int tpde_attend(long nq, long nk, const T *q, const T *kT, const T *vT, const T *bias, const int64_t *prefix,
                const T *sink_logit, const T *sink_value, double shift, T *out, int threads) {
    tpde_args a = { nq, nk, q, kT, vT, bias, prefix, sink_logit, sink_value, shift, out, 0, 0 };
    const int ran = tpde_run_threads(tpde_worker, &a, threads, (nq + CHUNK - 1) / CHUNK);
    return a.failed ? -1 : ran;
}
