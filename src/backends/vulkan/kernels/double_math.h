#pragma once
// GLSL helpers every Vulkan kernel that computes in double shares (random, sample, attention).

namespace rlx::vulkan::ksrc {

// Double-precision exp / log / sin / cos (GLSL has none): argument reduction with split
// constants and polynomials good to about one ulp; `precise` keeps every operation rounded
// separately (no contraction into fused multiply-adds).
inline constexpr const char* kDoubleMath = R"GLSL(
const double RLX_LN2_HI = 6.93147180369123816490e-01LF;
const double RLX_LN2_LO = 1.90821492927058770002e-10LF;
double rlx_exp_d(double x) {
  if (isnan(x)) return x;
  if (x < -745.5LF) return 0.0LF;
  if (x > 709.79LF) return 1.0LF / 0.0LF;
  precise double kd = floor(x * 1.44269504088896338700e+00LF + 0.5LF);
  precise double r = (x - kd * RLX_LN2_HI) - kd * RLX_LN2_LO;
  precise double p = 1.0LF / 87178291200.0LF;             // 1/14!
  p = p * r + 1.0LF / 6227020800.0LF;                     // 1/13!
  p = p * r + 1.0LF / 479001600.0LF;
  p = p * r + 1.0LF / 39916800.0LF;
  p = p * r + 1.0LF / 3628800.0LF;
  p = p * r + 1.0LF / 362880.0LF;
  p = p * r + 1.0LF / 40320.0LF;
  p = p * r + 1.0LF / 5040.0LF;
  p = p * r + 1.0LF / 720.0LF;
  p = p * r + 1.0LF / 120.0LF;
  p = p * r + 1.0LF / 24.0LF;
  p = p * r + 1.0LF / 6.0LF;
  p = p * r + 0.5LF;
  precise double e = 1.0LF + (r + r * r * p);
  const int k = int(kd);
  if (k < -1000) return ldexp(ldexp(e, k + 1000), -1000);
  return ldexp(e, k);
}
// x > 0 and finite.
double rlx_log_d(double x) {
  int e;
  double m = frexp(x, e);  // [0.5, 1)
  if (m < 0.70710678118654752440LF) { m = m * 2.0LF; e -= 1; }
  precise double f = m - 1.0LF;
  precise double s = f / (2.0LF + f);
  precise double z = s * s;
  precise double r = 2.0LF / 25.0LF;
  r = r * z + 2.0LF / 23.0LF;
  r = r * z + 2.0LF / 21.0LF;
  r = r * z + 2.0LF / 19.0LF;
  r = r * z + 2.0LF / 17.0LF;
  r = r * z + 2.0LF / 15.0LF;
  r = r * z + 2.0LF / 13.0LF;
  r = r * z + 2.0LF / 11.0LF;
  r = r * z + 2.0LF / 9.0LF;
  r = r * z + 2.0LF / 7.0LF;
  r = r * z + 2.0LF / 5.0LF;
  r = r * z + 2.0LF / 3.0LF;
  r = r * z;
  precise double hfsq = 0.5LF * f * f;
  precise double lm = f - (hfsq - s * (hfsq + r));
  const double dk = double(e);
  precise double res = dk * RLX_LN2_HI + (lm + dk * RLX_LN2_LO);
  return res;
}
// sin and cos of x in [0, 8) (the Box-Muller angle).
void rlx_sincos_d(double x, out double sn, out double cs) {
  const double k = floor(x * 6.36619772367581382433e-01LF + 0.5LF);
  precise double r = x - k * 1.57079632673412561417e+00LF;
  r = r - k * 6.07710050630396597660e-11LF;
  r = r - k * 2.02226624879595063154e-21LF;
  precise double z = r * r;
  precise double ps = -1.0LF / 51090942171709440000.0LF;  // -1/21!
  ps = ps * z + 1.0LF / 121645100408832000.0LF;
  ps = ps * z - 1.0LF / 355687428096000.0LF;
  ps = ps * z + 1.0LF / 1307674368000.0LF;
  ps = ps * z - 1.0LF / 6227020800.0LF;
  ps = ps * z + 1.0LF / 39916800.0LF;
  ps = ps * z - 1.0LF / 362880.0LF;
  ps = ps * z + 1.0LF / 5040.0LF;
  ps = ps * z - 1.0LF / 120.0LF;
  ps = ps * z + 1.0LF / 6.0LF;
  precise double s_r = r - r * z * ps;
  precise double pc_ = 1.0LF / 2432902008176640000.0LF;  // 1/20!
  pc_ = pc_ * z - 1.0LF / 6402373705728000.0LF;
  pc_ = pc_ * z + 1.0LF / 20922789888000.0LF;
  pc_ = pc_ * z - 1.0LF / 87178291200.0LF;
  pc_ = pc_ * z + 1.0LF / 479001600.0LF;
  pc_ = pc_ * z - 1.0LF / 3628800.0LF;
  pc_ = pc_ * z + 1.0LF / 40320.0LF;
  pc_ = pc_ * z - 1.0LF / 720.0LF;
  pc_ = pc_ * z + 1.0LF / 24.0LF;
  precise double hz = 0.5LF * z;
  precise double w = 1.0LF - hz;
  precise double c_r = w + (((1.0LF - w) - hz) + z * z * pc_);
  const int q = int(k) & 3;
  if (q == 0) { sn = s_r; cs = c_r; }
  else if (q == 1) { sn = c_r; cs = -s_r; }
  else if (q == 2) { sn = -s_r; cs = -c_r; }
  else { sn = -c_r; cs = s_r; }
}
)GLSL";

}  // namespace rlx::vulkan::ksrc
