/* Vector forms of the fused kernel's hot loops: the macros of one vector of W lanes of T and the vector exp
 * tpde_vexp (docstring of symbolic_tpde.numerics.fused_simd), on AVX-512F when the compiler targets it, else on
 * AVX2 with FMA.  The includer has checked that one of the two is targeted and included <immintrin.h>.
 * Needs T, TPDE_FLOAT, tpde_repeat.h and the exp constants TPDE_X512_{CUT,INV,HI,LO,COEF,NCOEF,TAB} (AVX-512:
 * table 2^(j/16), fit of (e^r - 1)/r on |r| <= ln2/32) and TPDE_X2_{CUT,INV,HI,LO,COEF,NCOEF} (AVX2: fit of e^r
 * on |r| <= ln2/2), derived by fused_simd (mpmath); COEF: NCOEF coefficients, highest degree first. */
#define TPDE_HORNER0(p, i) V p = VSET1(coef[i]);
#define TPDE_HORNER(p, i) p = VFMA(p, r, VSET1(coef[i]));
#if TPDE_FLOAT
#define VS(op) op##_ps
#define TPDE_SHIFTER 0x1.8p23f
#else
#define VS(op) op##_pd
#define TPDE_SHIFTER 0x1.8p52
#endif

#if defined(__AVX512F__)
#define TPDE_SIMD 1
#if TPDE_FLOAT
typedef __m512 V;
typedef __mmask16 VM;
#define W 16
#else
typedef __m512d V;
typedef __mmask8 VM;
#define W 8
#endif
#define VLOAD(p) VS(_mm512_loadu)(p)
#define VMLOAD(m, p) VS(_mm512_maskz_loadu)(m, p)
#define VSTORE(p, x) VS(_mm512_storeu)(p, x)
#define VMSTORE(p, m, x) VS(_mm512_mask_storeu)(p, m, x)
#define VSET1(x) VS(_mm512_set1)(x)
#define VZERO() VS(_mm512_setzero)()
#define VADD(a, b) VS(_mm512_add)(a, b)
#define VSUB(a, b) VS(_mm512_sub)(a, b)
#define VMUL(a, b) VS(_mm512_mul)(a, b)
#define VFMA(a, b, c) VS(_mm512_fmadd)(a, b, c)
#define VFNMA(a, b, c) VS(_mm512_fnmadd)(a, b, c)
#define VMAX(a, b) VS(_mm512_max)(a, b)  /* a NaN in a is ignored: the second operand is kept */
#define VMMAX(src, m, a, b) VS(_mm512_mask_max)(src, m, a, b)
#define VMZ(m, x) VS(_mm512_maskz_mov)(m, x)
#define VRMAX(x) VS(_mm512_reduce_max)(x)
#define VTAIL(r) ((VM)((1u << (r)) - 1u))
typedef __m512d DV;  /* float64 lane sums */
#define DZERO() _mm512_setzero_pd()
#define DADD(a, b) _mm512_add_pd(a, b)
#define DMUL(a, b) _mm512_mul_pd(a, b)
#define DSET1(x) _mm512_set1_pd(x)
#define DRED(x) _mm512_reduce_add_pd(x)
#define F2DLO(x) _mm512_cvtps_pd(_mm512_castps512_ps256(x))  /* float32 lanes 0-7 as float64 */
#define F2DHI(x) _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)))

/* e^x for x <= 0 on W lanes: x >= cut (e^cut rounds to 0; NaN passes), k = rint(16x/ln2), r = x - k ln2/16
 * in two parts, e^r - 1 = r h(r) by the fit, y = t_j + t_j (e^r - 1) with t_j = 2^(j/16), j = k mod 16 (a
 * register table read by one permute), e^x = y 2^floor(k/16) by vscalef (one rounding). */
static inline V tpde_vexp(V x) {
    static const T coef[] = { TPDE_X512_COEF }, tab[16] = { TPDE_X512_TAB };
    const V sh = VSET1(TPDE_SHIFTER);
    x = VMAX(VSET1(TPDE_X512_CUT), x);  /* NaN in x passes (second operand) */
    const V t = VFMA(x, VSET1(TPDE_X512_INV), sh);
    const V kf = VSUB(t, sh);
    V r = VFNMA(kf, VSET1(TPDE_X512_HI), x);
    r = VFNMA(kf, VSET1(TPDE_X512_LO), r);
    TPDE_FOR_C(TPDE_X512_NCOEF, TPDE_HORNER0, TPDE_HORNER, h)  /* h(r) ~ (e^r - 1)/r */
    const V em1 = VMUL(h, r);  /* e^r - 1 */
#if TPDE_FLOAT
    const V tb = _mm512_set_ps(tab[15], tab[14], tab[13], tab[12], tab[11], tab[10], tab[9], tab[8],
                               tab[7], tab[6], tab[5], tab[4], tab[3], tab[2], tab[1], tab[0]);
    const V tj = _mm512_permutexvar_ps(_mm512_castps_si512(t), tb);  /* 2^((k mod 16)/16) */
#else
    const V t0 = _mm512_set_pd(tab[7], tab[6], tab[5], tab[4], tab[3], tab[2], tab[1], tab[0]);
    const V t1 = _mm512_set_pd(tab[15], tab[14], tab[13], tab[12], tab[11], tab[10], tab[9], tab[8]);
    const V tj = _mm512_permutex2var_pd(t0, _mm512_castpd_si512(t), t1);  /* 2^((k mod 16)/16) */
#endif
    const V y = VFMA(tj, em1, tj);
    return VS(_mm512_scalef)(y, VMUL(kf, VSET1((T)0.0625)));  /* y 2^floor(k/16) */
}

#else  /* AVX2 with FMA: 256-bit vectors, masks as lane vectors */
#define TPDE_SIMD 2
typedef __m256i VM;  /* all-ones lanes: visible */
#if TPDE_FLOAT
typedef __m256 V;
#define W 8
#define VTAIL(r) _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0))
static inline float VRMAX(V x) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_shuffle_ps(h, h, 1)));
}
#else
typedef __m256d V;
#define W 4
#define VTAIL(r) _mm256_cmpgt_epi64(_mm256_set1_epi64x(r), _mm256_set_epi64x(3, 2, 1, 0))
static inline double VRMAX(V x) {
    __m128d h = _mm_max_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_max_sd(h, _mm_unpackhi_pd(h, h)));
}
#endif
#define VLOAD(p) VS(_mm256_loadu)(p)
#define VMLOAD(m, p) VS(_mm256_maskload)(p, m)
#define VSTORE(p, x) VS(_mm256_storeu)(p, x)
#define VMSTORE(p, m, x) VS(_mm256_maskstore)(p, m, x)
#define VSET1(x) VS(_mm256_set1)(x)
#define VZERO() VS(_mm256_setzero)()
#define VADD(a, b) VS(_mm256_add)(a, b)
#define VSUB(a, b) VS(_mm256_sub)(a, b)
#define VMUL(a, b) VS(_mm256_mul)(a, b)
#define VFMA(a, b, c) VS(_mm256_fmadd)(a, b, c)
#define VFNMA(a, b, c) VS(_mm256_fnmadd)(a, b, c)
#define VMAX(a, b) VS(_mm256_max)(a, b)  /* a NaN in a is ignored: the second operand is kept */
#define VMMAX(src, m, a, b) VS(_mm256_blendv)(src, VS(_mm256_max)(a, b), VS(_mm256_castsi256)(m))
#define VMZ(m, x) VS(_mm256_and)(x, VS(_mm256_castsi256)(m))
typedef __m256d DV;  /* float64 lane sums */
#define DZERO() _mm256_setzero_pd()
#define DADD(a, b) _mm256_add_pd(a, b)
#define DMUL(a, b) _mm256_mul_pd(a, b)
#define DSET1(x) _mm256_set1_pd(x)
static inline double DRED(DV x) {  /* lanes added in one fixed order */
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(x), _mm256_extractf128_pd(x, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
#define F2DLO(x) _mm256_cvtps_pd(_mm256_castps256_ps128(x))  /* float32 lanes 0-3 as float64 */
#define F2DHI(x) _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))

/* e^x for x <= 0 on W lanes without a table (AVX2 has no one-instruction permute of 16 doubles):
 * k = rint(x/ln2), |r| <= ln2/2, e^r by the fit, 2^k in the exponent bits; 0 below the cut (as tpde_exp). */
static inline V tpde_vexp(V x) {
    static const T coef[] = { TPDE_X2_COEF };
    const V sh = VSET1(TPDE_SHIFTER);
    const V cut = VSET1(TPDE_X2_CUT);
    const V xc = VMAX(cut, x);  /* NaN in x passes (second operand) */
    const V t = VFMA(xc, VSET1(TPDE_X2_INV), sh);
    const V kf = VSUB(t, sh);
    V r = VFNMA(kf, VSET1(TPDE_X2_HI), xc);
    r = VFNMA(kf, VSET1(TPDE_X2_LO), r);
    TPDE_FOR_C(TPDE_X2_NCOEF, TPDE_HORNER0, TPDE_HORNER, p)  /* p(r) ~ e^r */
#if TPDE_FLOAT  /* 2^k: k + bias in the exponent field */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127)), 23);
#else
    const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(_mm256_castpd_si256(t), _mm256_set1_epi64x(1023)), 52);
#endif
    const V y = VMUL(p, VS(_mm256_castsi256)(e));
    return VS(_mm256_andnot)(VS(_mm256_cmp)(x, cut, _CMP_LT_OQ), y);  /* 0 below the cut */
}
#endif
