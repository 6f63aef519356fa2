/* The compiled row pass of the large-dimension path (formulas: the docstring of
 * symbolic_tpde/numerics/fused_rows.py): for each row i of a logit block L (rows, kmax), over the visible keys
 * j < K_i (K_i = prefix_i clipped to kmax, else kmax), in place:
 *   softmax / exp: l_ij += bias_j; m_i = max(max_j l_ij, sink_logit_i); l_ij <- e^(l_ij - m_i); den_i = Σ_j l_ij
 *     (float64; float32 in blocks of 1024 keys, block totals in float64);
 *   sigmoid: l_ij <- σ(l_ij + shift);
 * invisible keys get weight 0; m_out, den_out: the row maxima and weight sums (0 for sigmoid).
 *
 * Rendered by symbolic_tpde.numerics.fused_rows.c_source, which #defines the parameters before this text and
 * inlines the #include "..." files: TPDE_FLOAT (1: T = float), MODE (0 softmax, 1 exp, 2 sigmoid), HAS_BIAS,
 * HAS_PREFIX, HAS_SINK (0 or 1), and the vector exp's constants (tpde_vec.h). */
#include <math.h>
#include <stdint.h>

#if TPDE_FLOAT
typedef float T;
#define JB 1024  /* keys per T-precision partial sum */
#else
typedef double T;
#define JB (1L << 62)  /* keys per T-precision partial sum */
#endif

#include "tpde_exp.h"
#include "tpde_repeat.h"

#if MODE != 2 && !defined(TPDE_NO_SIMD) && (defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__)))
#include <immintrin.h>
#include "tpde_vec.h"

/* softmax / exp on vectors: lane maxima, then lane sums (float64 lanes; float32 lanes per block of 1024 keys
 * added in float64), the lanes added in one fixed order; a last partial vector under a mask. */
void tpde_rows(long rows, long kmax, T *L, const T *bias, const int64_t *prefix, const T *sink_logit,
               double shift, T *m_out, double *den_out) {
    (void)bias; (void)prefix; (void)sink_logit; (void)shift;
    for (long i = 0; i < rows; ++i) {
        T *restrict l = L + i * kmax;
        long K = kmax;
#if HAS_PREFIX
        K = prefix[i] < 0 ? 0 : (prefix[i] > kmax ? kmax : (long)prefix[i]);
#endif
        V mx = VSET1(-INFINITY);
        long j = 0;
        for (; j + W <= K; j += W) {
            V x = VLOAD(l + j);
#if HAS_BIAS
            x = VADD(x, VLOAD(bias + j));
            VSTORE(l + j, x);
#endif
            mx = VMAX(x, mx);
        }
        if (j < K) {
            const VM tm = VTAIL(K - j);
            V x = VMLOAD(tm, l + j);
#if HAS_BIAS
            x = VADD(x, VMLOAD(tm, bias + j));
            VMSTORE(l + j, tm, x);
#endif
            mx = VMMAX(mx, tm, x, mx);
        }
        T m = VRMAX(mx);
#if HAS_SINK
        m = sink_logit[i] > m ? sink_logit[i] : m;
#endif
        const V mm = VSET1(m);
        DV acc = DZERO();
        for (long j0 = 0; j0 < K; j0 += 1024) {
            const long j1 = j0 + 1024 < K ? j0 + 1024 : K;
            V s = VZERO();
            long j = j0;
            for (; j + W <= j1; j += W) {
                const V w = tpde_vexp(VSUB(VLOAD(l + j), mm));
                VSTORE(l + j, w);
                s = VADD(s, w);
            }
            if (j < j1) {
                const VM tm = VTAIL(j1 - j);
                const V w = VMZ(tm, tpde_vexp(VSUB(VMLOAD(tm, l + j), mm)));
                VMSTORE(l + j, tm, w);
                s = VADD(s, w);
            }
#if TPDE_FLOAT
            acc = DADD(acc, F2DLO(s));
            acc = DADD(acc, F2DHI(s));
#else
            acc = DADD(acc, s);
#endif
        }
        m_out[i] = m; den_out[i] = DRED(acc);
        for (long j = K; j < kmax; ++j) l[j] = 0;
    }
}

#else  /* sigmoid, or no vector form: plain C, vectorised by the compiler */
#define TPDE_SIMD 0

void tpde_rows(long rows, long kmax, T *L, const T *bias, const int64_t *prefix, const T *sink_logit,
               double shift, T *m_out, double *den_out) {
    (void)bias; (void)prefix; (void)sink_logit; (void)shift;
    for (long i = 0; i < rows; ++i) {
        T *restrict l = L + i * kmax;
        long K = kmax;
#if HAS_PREFIX
        K = prefix[i] < 0 ? 0 : (prefix[i] > kmax ? kmax : (long)prefix[i]);
#endif
#if MODE == 2
        const T sh = (T)shift;
        #pragma omp simd
        for (long j = 0; j < K; ++j) {
            const T z = l[j] + sh;
            const T t = tpde_exp(z < 0 ? z : -z);
            l[j] = (z >= 0 ? (T)1 : t) / ((T)1 + t);
        }
        m_out[i] = 0; den_out[i] = 0;
#else
        T m = -INFINITY;
        #pragma omp simd reduction(max:m)
        for (long j = 0; j < K; ++j) {
#if HAS_BIAS
            const T x = l[j] + bias[j];
            l[j] = x;
#else
            const T x = l[j];
#endif
            m = x > m ? x : m;
        }
#if HAS_SINK
        m = sink_logit[i] > m ? sink_logit[i] : m;
#endif
        double den = 0;
        for (long j0 = 0; j0 < K; j0 += JB) {
            const long j1 = j0 + JB < K ? j0 + JB : K;
            T s = 0;
            #pragma omp simd reduction(+:s)
            for (long j = j0; j < j1; ++j) {
                const T w = tpde_exp(l[j] - m);
                l[j] = w;
                s += w;
            }
            den += (double)s;
        }
        m_out[i] = m; den_out[i] = den;
#endif
        for (long j = K; j < kmax; ++j) l[j] = 0;
    }
}
#endif
