/* The key-blocked ("flash") attention kernel of the middle and large head dimensions (formulas, tile sizes and
 * measurements: the docstring of symbolic_tpde/numerics/particles/fused_flash.py).  Vector loops only (AVX-512F
 * or AVX2 with FMA, tpde_vec.h); the Python side never asks for this kernel on other machines.
 *
 * Rendered by fused_flash.c_source, which #defines before this text:
 *   TPDE_FLOAT (1: T = float), MODE (0 softmax, 1 exp), P, D (feature and value dimensions), DP (D rounded up
 *   to whole vectors), HAS_BIAS, HAS_PREFIX, HAS_SINK (0 or 1),
 *   QB   queries per tile (a thread's unit of work; the caller pads the queries to whole tiles),
 *   KB   keys per block (a multiple of PW; the caller pads the keys to whole panels),
 *   RL, KV   the logit micro-kernel: RL queries x KV vectors of keys (PW = KV * W keys per panel),
 *   R, CC    the value micro-kernel: R queries x CC vectors of value components, over the NCF = NC - HALF
 *            whole vectors of the value components,
 *   HALF, RT (AVX-512 only) 1 when the last vector of value components holds at most W/2 of them: those go
 *            through a micro-kernel of RT queries x one half-width (256-bit) vector, which costs half a
 *            512-bit fused multiply-add on machines that split 512-bit operations (AMD Zen 4); each
 *            component is the same chain of fused multiply-adds as in a whole vector, so the bits are the same,
 *   PW, NPW  keys per panel and the vector width W the Python side assumed (checked below),
 *   and the vector exp's constants (tpde_vec.h).
 *
 * Inputs (all C order): q (nqp, P); kp (nkp / PW, P, PW): the keys packed in panels of PW keys, feature-major
 * within a panel, zero beyond nk; v (nkp, DP) zero-padded; bias (nkp) | NULL; prefix (nqp) | NULL; sink_logit
 * (nqp) | NULL; sink_value (D) | NULL; out (nqp, D).
 *
 * Per tile of QB queries and per key block of KB keys, in this fixed order:
 *   1. logits S = Q K^T (+ bias) by the micro-kernel, panel by panel (a panel's keys stay in L1 while every
 *      group of RL queries uses them); each logit is q_0 k_0 + q_1 k_1 + ... by fused multiply-adds in the
 *      order of the feature index;
 *   2. keys past nk or past the query's prefix get -inf; per query the block maximum m_b, the running maximum
 *      m = max(m, m_b) (starting at the sink logit, or -inf), the scale a = e^(m_old - m_new) (float64 libm exp;
 *      exactly 1 when the maximum did not move), the weights w = e^(S - m) in place (the vector exp) and their
 *      sum in T lanes over the block (<= 1024 keys), the lanes added in float64 in a fixed order;
 *   3. value sums W V by the micro-kernel, in T over the block (<= 1024 keys), then acc = a acc + block in
 *      float64.
 * A query's result depends on its own row only (never on the tile's other queries, the thread or the thread
 * count): bitwise the same for every thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <immintrin.h>

#if TPDE_FLOAT
typedef float T;
#else
typedef double T;
#endif

#include "tpde_exp.h"
#include "tpde_repeat.h"
#include "tpde_threads.h"
#include "tpde_vec.h"

#if W != NPW
#error "vector width differs from the one the Python side assumed"
#endif
#define NC (DP / W)
#define NCF (NC - HALF)
#if PW != KV * W || KB % PW != 0 || NCF % CC != 0 || QB % RL != 0 || QB % R != 0 || KB > 1024 || QB % RT != 0
#error "inconsistent tile parameters"
#endif
#if HALF && TPDE_SIMD != 1
#error "half-width value tail: AVX-512 builds only"
#endif
/* acc[0 .. n1)[0 .. n2) = 0 (unrolled: the micro-kernels keep acc in registers) */
#define TPDE_ZERO2(acc, n1, n2) \
    TPDE_PRAGMA(GCC unroll 32) for (int r_ = 0; r_ < (n1); ++r_) \
    TPDE_PRAGMA(GCC unroll 8) for (int u_ = 0; u_ < (n2); ++u_) acc[r_][u_] = VZERO();
/* The micro-kernels' step, a rank-1 update acc[r][u] += a_r b_u: n2 vectors b_u = BVEC(u) loaded once, each
 * scalar a_r = ASCAL(r) broadcast once, n1 * n2 fused multiply-adds */
#define TPDE_RANK1(acc, n1, n2, BVEC, ASCAL) { \
    V b_[n2]; \
    TPDE_PRAGMA(GCC unroll 8) for (int u_ = 0; u_ < (n2); ++u_) b_[u_] = BVEC(u_); \
    TPDE_PRAGMA(GCC unroll 32) for (int r_ = 0; r_ < (n1); ++r_) { \
        const V a_ = VSET1(ASCAL(r_)); \
        TPDE_PRAGMA(GCC unroll 8) for (int u_ = 0; u_ < (n2); ++u_) acc[r_][u_] = VFMA(a_, b_[u_], acc[r_][u_]); \
    } }

typedef struct {
    long nq, nk, ntiles; const T *q, *kp, *v, *bias; const int64_t *prefix;
    const T *sink_logit, *sink_value; T *out; long next; int failed;
} tpde_fargs;

/* the operands of the two micro-kernels' steps (names local to each kernel) */
#define TPDE_KEYS(u) VLOAD(kpan + c * PW + (u) * W)
#define TPDE_QUERY(r) q[(r) * P + c]
#define TPDE_VALUES(u) VLOAD(v + j * DP + (u) * W)
#define TPDE_WEIGHT(r) w[(r) * KB + j]

/* S[r][0 .. PW) for RL queries: q (RL rows of P), kpan (P, PW) */
static inline void tpde_logits(const T *restrict q, const T *restrict kpan, T *restrict s,
                               const T *restrict bias) {
    V acc[RL][KV];
    TPDE_ZERO2(acc, RL, KV)
#pragma GCC unroll 4
    for (int c = 0; c < P; ++c) {
        TPDE_RANK1(acc, RL, KV, TPDE_KEYS, TPDE_QUERY)
    }
    (void)bias;
#pragma GCC unroll 32
    for (int r = 0; r < RL; ++r)
#pragma GCC unroll 8
        for (int u = 0; u < KV; ++u) {
            V x = acc[r][u];
#if HAS_BIAS
            x = VADD(x, VLOAD(bias + u * W));
#endif
            VSTORE(s + r * KB + u * W, x);
        }
}

/* blk[r][CC*W] = sum over the block's nb keys of w[r][j] v[j][c0 ..] for R queries (T lanes) */
static inline void tpde_values(const T *restrict w, const T *restrict v, long nb, T *restrict blk) {
    V acc[R][CC];
    TPDE_ZERO2(acc, R, CC)
    for (long j = 0; j < nb; ++j) {
        TPDE_RANK1(acc, R, CC, TPDE_VALUES, TPDE_WEIGHT)
    }
#pragma GCC unroll 32
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int u = 0; u < CC; ++u) VSTORE(blk + r * CC * W + u * W, acc[r][u]);
}

#if HALF
#if TPDE_FLOAT
typedef __m256 VH;
#define VHS(op) op##_ps
#else
typedef __m256d VH;
#define VHS(op) op##_pd
#endif
#define HW (W / 2)
/* blk[r][HW] = sum over the block's nb keys of w[r][j] v[j][NCF W ..] for RT queries, half-width vectors */
static inline void tpde_values_half(const T *restrict w, const T *restrict v, long nb, T *restrict blk) {
    VH acc[RT];
#pragma GCC unroll 32
    for (int r = 0; r < RT; ++r) acc[r] = VHS(_mm256_setzero)();
    for (long j = 0; j < nb; ++j) {
        const VH b = VHS(_mm256_loadu)(v + j * DP);
#pragma GCC unroll 32
        for (int r = 0; r < RT; ++r) acc[r] = VHS(_mm256_fmadd)(VHS(_mm256_set1)(w[r * KB + j]), b, acc[r]);
    }
#pragma GCC unroll 32
    for (int r = 0; r < RT; ++r) VHS(_mm256_storeu)(blk + r * HW, acc[r]);
}
#endif

static void *tpde_fworker(void *arg) {
    tpde_fargs *a = (tpde_fargs *)arg;
    T *S = (T *)aligned_alloc(64, sizeof(T) * QB * KB);
    double *acc = (double *)aligned_alloc(64, sizeof(double) * QB * DP);
    const long nblk = (long)R * CC * W > (long)RT * W / 2 ? (long)R * CC * W : (long)RT * W / 2;
    T *blk = (T *)aligned_alloc(64, sizeof(T) * nblk);
    if (!S || !acc || !blk) {
        __atomic_store_n(&a->failed, 1, __ATOMIC_RELAXED);
        free(S); free(acc); free(blk);
        return NULL;
    }
    T m[QB];
    double den[QB], sc[QB];
    const long nk = a->nk;
    for (;;) {
        const long t = __atomic_fetch_add(&a->next, 1, __ATOMIC_RELAXED);
        if (t >= a->ntiles) break;
        const long i0 = t * QB;
        const T *qt = a->q + i0 * P;
        long kend = nk;
#if HAS_PREFIX
        long kvis[QB];
        kend = 0;
        for (int r = 0; r < QB; ++r) {
            long k = (long)a->prefix[i0 + r];
            k = k < 0 ? 0 : (k > nk ? nk : k);
            kvis[r] = k;
            kend = k > kend ? k : kend;
        }
#endif
        for (int r = 0; r < QB; ++r) {
            m[r] = HAS_SINK ? a->sink_logit[i0 + r] : -INFINITY;
            den[r] = 0;
        }
        memset(acc, 0, sizeof(double) * QB * DP);
        for (long jb = 0; jb < kend; jb += KB) {
            const long nb = jb + KB < kend ? KB : kend - jb;  /* keys of the block that someone sees */
            const long nbp = (nb + PW - 1) / PW * PW;          /* computed columns: whole panels */
            /* 1. logits */
            for (long pn = 0; pn < nbp; pn += PW) {
                const T *kpan = a->kp + (jb + pn) * P;
                const T *bb = HAS_BIAS ? a->bias + jb + pn : NULL;
                for (int r0 = 0; r0 < QB; r0 += RL) tpde_logits(qt + r0 * P, kpan, S + r0 * KB + pn, bb);
            }
            /* 2. weights */
            for (int r = 0; r < QB; ++r) {
                T *restrict s = S + r * KB;
                long vis = nb;
#if HAS_PREFIX
                vis = kvis[r] - jb;
                vis = vis < 0 ? 0 : (vis > nb ? nb : vis);
#endif
                for (long j = vis; j < nbp; ++j) s[j] = -INFINITY;
                V mx = VSET1(-INFINITY);
                for (long j = 0; j < nbp; j += W) mx = VMAX(VLOAD(s + j), mx);
                const T bm = VRMAX(mx);
                const T mn = bm > m[r] ? bm : m[r];
                if (mn == -INFINITY) {  /* nothing visible yet: weights 0, sums stay 0 */
                    for (long j = 0; j < nbp; ++j) s[j] = 0;
                    sc[r] = 1.0;
                    continue;
                }
                sc[r] = mn == m[r] ? 1.0 : (m[r] == -INFINITY ? 0.0 : exp((double)m[r] - (double)mn));
                m[r] = mn;
                const V mm = VSET1(mn);
                V sum = VZERO();
                for (long j = 0; j < nbp; j += W) {
                    const V w = tpde_vexp(VSUB(VLOAD(s + j), mm));
                    VSTORE(s + j, w);
                    sum = VADD(sum, w);
                }
#if TPDE_FLOAT
                den[r] = den[r] * sc[r] + DRED(DADD(F2DLO(sum), F2DHI(sum)));
#else
                den[r] = den[r] * sc[r] + DRED(sum);
#endif
            }
            /* 3. value sums */
            const T *vb = a->v + jb * DP;
            for (int r0 = 0; r0 < QB; r0 += R)
                for (int c0 = 0; c0 < NCF; c0 += CC) {
                    tpde_values(S + r0 * KB, vb + c0 * W, nbp, blk);
                    for (int r = 0; r < R; ++r) {
                        double *restrict ar = acc + (r0 + r) * DP + c0 * W;
                        const T *restrict br = blk + r * CC * W;
                        const double f = sc[r0 + r];
                        if (f == 1.0)
                            for (int c = 0; c < CC * W; ++c) ar[c] += (double)br[c];
                        else
                            for (int c = 0; c < CC * W; ++c) ar[c] = ar[c] * f + (double)br[c];
                    }
                }
#if HALF
            for (int r0 = 0; r0 < QB; r0 += RT) {
                tpde_values_half(S + r0 * KB, vb + NCF * W, nbp, blk);
                for (int r = 0; r < RT; ++r) {
                    double *restrict ar = acc + (r0 + r) * DP + NCF * W;
                    const T *restrict br = blk + r * HW;
                    const double f = sc[r0 + r];
                    if (f == 1.0)
                        for (int c = 0; c < HW; ++c) ar[c] += (double)br[c];
                    else
                        for (int c = 0; c < HW; ++c) ar[c] = ar[c] * f + (double)br[c];
                }
            }
#endif
        }
        /* finish: softmax (acc + e^(s - m) v_s) / (den + e^(s - m)); exp e^(m - log nk) acc (0 * inf = 0, inf
         * only when the true value overflows); the same expressions as fused_attend.c */
        for (int r = 0; r < QB; ++r) {
            const long i = i0 + r;
            if (i >= a->nq) break;
            const double *ar = acc + r * DP;
            T *o = a->out + i * D;
#if MODE == 1
            const double ls = (double)m[r] - log((double)nk), e = exp(ls);
            for (int c = 0; c < D; ++c) {
                double x = ar[c] == 0 ? 0.0 : e * ar[c];
                if (isinf(e) && ar[c] != 0 && isfinite(ar[c])) x = copysign(exp(ls + log(fabs(ar[c]))), ar[c]);
                o[c] = (T)x;
            }
#else
            double dn = den[r];
#if HAS_SINK
            const double ws = (double)tpde_exp(a->sink_logit[i] - m[r]);
            dn += ws;
            for (int c = 0; c < D; ++c) o[c] = (T)((ar[c] + ws * (double)a->sink_value[c]) / dn);
#else
            for (int c = 0; c < D; ++c) o[c] = (T)(ar[c] / dn);
#endif
#endif
        }
    }
    free(S); free(acc); free(blk);
    return NULL;
}

/* the tile and panel sizes compiled in (the Python side checks them against the padding it did) */
long tpde_flash_shape(void) { return (long)QB * 1000000L + (long)PW * 1000L + (long)DP; }

int tpde_flash(long nq, long nk, long ntiles, const T *q, const T *kp, const T *v, const T *bias,
               const int64_t *prefix, const T *sink_logit, const T *sink_value, T *out, int threads) {
    tpde_fargs a = { nq, nk, ntiles, q, kp, v, bias, prefix, sink_logit, sink_value, out, 0, 0 };
    const int ran = tpde_run_threads(tpde_fworker, &a, threads, ntiles);
    return a.failed ? -1 : ran;
}
