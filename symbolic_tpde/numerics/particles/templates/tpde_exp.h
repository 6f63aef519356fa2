/* The kernels' scalar exp, e^x for x <= 0 (docstring of symbolic_tpde.numerics.fused): Cody-Waite reduction
 * k = rint(x/ln2), r = x - k ln2_hi - k ln2_lo, e^r by its Taylor polynomial (degree 13 in double, 7 in
 * float), 2^k built in the exponent bits; 0 below -708 (float: -87), NaN propagates.  Needs T, TPDE_FLOAT. */
#if TPDE_FLOAT
static inline float tpde_exp(float x) {
    const float xc = x < -87.0f ? -87.0f : x;
    const float t = xc * 1.44269504f + 0x1.8p23f;
    const float kf = t - 0x1.8p23f;
    float r = xc - kf * 0.693145751953125f;
    r = r - kf * 1.428606765330187045e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;  p = p * r + 1.0f / 120.0f;  p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;    p = p * r + 0.5f;           p = p * r + 1.0f;
    p = p * r + 1.0f;
    union { float f; uint32_t u; } tb = { t }, sb;
    sb.u = (tb.u + 127u) << 23;
    const float y = p * sb.f;
    return x < -87.0f ? 0.0f : y;
}
#else
static inline double tpde_exp(double x) {
    const double xc = x < -708.0 ? -708.0 : x;
    const double t = xc * 1.4426950408889634 + 0x1.8p52;
    const double kf = t - 0x1.8p52;
    double r = xc - kf * 6.93147180369123816490e-01;
    r = r - kf * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;
    p = p * r + 1.0 / 479001600.0;  p = p * r + 1.0 / 39916800.0;  p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;     p = p * r + 1.0 / 40320.0;     p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;        p = p * r + 1.0 / 120.0;       p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;          p = p * r + 0.5;               p = p * r + 1.0;
    p = p * r + 1.0;
    union { double f; uint64_t u; } tb = { t }, sb;
    sb.u = (tb.u + 1023u) << 52;
    const double y = p * sb.f;
    return x < -708.0 ? 0.0 : y;
}
#endif
