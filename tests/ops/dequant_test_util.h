#pragma once
// Shared by the DequantMatMul tests: Gaussian data, random weights of every format, the exact
// product (in double) with its Int8 error bound, and the comparison.
//
// Tolerances:
//   Reference, DequantGemm and the f32 row fallback: f32 rounding only, 2e-5 * sum_i |x_i w_i| + 1e-6.
//   Int8 (and the packed kernels): x is quantized per 32-value block (256 for the K formats) to
//     s * round(x / s), s = max|x_block| / 127, so
//     |y - y_exact| <= sum_blocks s_b / 2 * sum_{i in b} |w_i|; exact() computes this bound for
//     every output and close() allows it plus the f32 term.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/ggml_blocks.h"
#include "rlx/dtype.h"
#include "rlx/ops.h"

namespace rlx::dqtest {

inline std::vector<float> normal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// n rows of k values in format f: quantized from Gaussian values where rlx has a quantizer, else
// random bytes with sane f16 scales.
inline std::vector<uint8_t> random_weight(QuantFormat f, int64_t n, int64_t k, uint64_t seed) {
  const GgmlType t = quant::ggml_type_of(f);
  if (ggml_type_info(t).quantize) {
    const auto v = normal(static_cast<size_t>(n * k), seed);
    return ggml_quantize(t, v);
  }
  const QuantBlock blk = quant_block(f);
  const int64_t blocks = n * k / blk.elements;
  std::vector<uint8_t> b(static_cast<size_t>(blocks * blk.bytes));
  std::mt19937_64 rng(seed);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  const uint16_t d = f32_to_f16_bits(0.05f), dmin = f32_to_f16_bits(0.02f);
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* p = b.data() + i * blk.bytes;
    if (f == QuantFormat::Q2_K) {
      std::memcpy(p + 80, &d, 2);
      std::memcpy(p + 82, &dmin, 2);
    } else {
      std::memcpy(p + 108, &d, 2);
    }
  }
  return b;
}

struct Exact {
  std::vector<double> y, abs_sum, int8_bound;  // per output
};

inline Exact exact(QuantFormat f, const std::vector<float>& x, int64_t m, int64_t k, const std::vector<uint8_t>& w,
            int64_t n) {
  const auto wf = ggml_dequantize(quant::ggml_type_of(f), w);
  Exact e;
  e.y.resize(static_cast<size_t>(m * n));
  e.abs_sum.resize(e.y.size());
  e.int8_bound.resize(e.y.size());
  // The Int8 path quantizes x in blocks of 32, or 256 for the K formats.
  const int64_t xb = f == QuantFormat::Q4_K || f == QuantFormat::Q5_K || f == QuantFormat::Q6_K ? 256 : 32;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, a = 0, bound = 0;
      for (int64_t b = 0; b < k / xb; ++b) {
        double amax = 0, wabs = 0;
        for (int64_t l = 0; l < xb; ++l) {
          const double xv = x[static_cast<size_t>(i * k + xb * b + l)];
          const double wv = wf[static_cast<size_t>(j * k + xb * b + l)];
          s += xv * wv;
          a += std::fabs(xv * wv);
          amax = std::max(amax, std::fabs(xv));
          wabs += std::fabs(wv);
        }
        bound += amax / 127.0 / 2.0 * wabs;
      }
      e.y[static_cast<size_t>(i * n + j)] = s;
      e.abs_sum[static_cast<size_t>(i * n + j)] = a;
      e.int8_bound[static_cast<size_t>(i * n + j)] = bound;
    }
  return e;
}

// Compares y with the exact product; `int8` adds the x-quantization bound.
inline ::testing::AssertionResult close(const std::vector<float>& y, const Exact& e, bool int8) {
  int bad = 0;
  std::string first;
  for (size_t i = 0; i < y.size(); ++i) {
    const double tol = 2e-5 * e.abs_sum[i] + 1e-6 + (int8 ? e.int8_bound[i] * 1.0001 : 0.0);
    if (!(std::fabs(y[i] - e.y[i]) <= tol)) {
      if (bad++ == 0)
        first = "element " + std::to_string(i) + ": got " + std::to_string(y[i]) + ", want " + std::to_string(e.y[i]) +
                " +- " + std::to_string(tol);
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << y.size() << " outside the tolerance; " << first;
}

}  // namespace rlx::dqtest
