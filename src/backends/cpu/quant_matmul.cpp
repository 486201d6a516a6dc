// The CPU DequantMatMul core (quant_matmul.h): the reference path, the x quantizer, the f32 row
// fallback, the dequantize-a-tile + sgemm path and the dispatch. The AVX2 integer kernels live in
// quant_matmul_avx2.cpp.
#include "backends/cpu/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/vec_math.h"
#include "quant/ggml_blocks.h"
#include "rlx/error.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rlx::cpu {
namespace {

bool has_fma() {
#if defined(__GNUC__) && defined(__x86_64__)
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 12)) != 0;  // CPUID.1:ECX.FMA
  }();
  return yes;
#else
  return false;
#endif
}

// Rows of n per parallel chunk so that a chunk holds about `target` multiply-adds.
int64_t grain_rows(int64_t m, int64_t k, int64_t target) {
  return std::max<int64_t>(1, target / std::max<int64_t>(1, m * k));
}

void reference(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y) {
  const QuantBlock blk = quant_block(f);
  const GgmlType t = quant::ggml_type_of(f);
  const int64_t blocks = k / blk.elements, row_bytes = blocks * blk.bytes;
  parallel_for(n, grain_rows(m, k, 1 << 16), [&](int64_t n0, int64_t n1) {
    std::vector<float> vals(static_cast<size_t>(blk.elements));
    std::vector<double> acc(static_cast<size_t>(m));
    for (int64_t j = n0; j < n1; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t b = 0; b < blocks; ++b) {
        quant::dequantize(t, w + j * row_bytes + b * blk.bytes, vals.data(), blk.elements);
        for (int64_t i = 0; i < m; ++i) {
          const float* xr = x + i * k + b * blk.elements;
          double s = 0.0;
          for (int64_t e = 0; e < blk.elements; ++e) s += static_cast<double>(xr[e]) * vals[static_cast<size_t>(e)];
          acc[static_cast<size_t>(i)] += s;
        }
      }
      for (int64_t i = 0; i < m; ++i) y[i * n + j] = static_cast<float>(acc[static_cast<size_t>(i)]);
    }
  });
}

// f32 fallback: one weight row decoded at a time, dotted with every row of x in f32.
void row_f32(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y) {
  const QuantBlock blk = quant_block(f);
  const GgmlType t = quant::ggml_type_of(f);
  const int64_t row_bytes = k / blk.elements * blk.bytes;
  parallel_for(n, grain_rows(m, k, 1 << 16), [&](int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t j = n0; j < n1; ++j) {
      quant::dequantize(t, w + j * row_bytes, row.data(), k);
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = x + i * k;
        float s[8] = {};
        int64_t e = 0;
        for (; e + 8 <= k; e += 8)
          for (int l = 0; l < 8; ++l) s[l] += xr[e + l] * row[static_cast<size_t>(e + l)];
        float tot = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        for (; e < k; ++e) tot += xr[e] * row[static_cast<size_t>(e)];
        y[i * n + j] = tot;
      }
    }
  });
}

void dequant_gemm(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y) {
  const QuantBlock blk = quant_block(f);
  const GgmlType t = quant::ggml_type_of(f);
  const int64_t row_bytes = k / blk.elements * blk.bytes;
  // Up to 256 weight rows per tile (4 MiB of f32 at K = 4096: sgemm runs near its full-matrix
  // speed; 64-row tiles were ~1.5x slower), fewer when that leaves a thread without a tile.
  const int64_t per_thread = (n + num_threads() - 1) / num_threads();
  const int64_t kTile = std::clamp<int64_t>((per_thread + 15) / 16 * 16, 16, 256);
  const bool fast = dequant_matmul_int8_native(f) || dequant_matmul_half_native(f);
  const int64_t tiles = (n + kTile - 1) / kTile;
  parallel_for(tiles, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> tile(static_cast<size_t>(kTile * k));
    for (int64_t ti = t0; ti < t1; ++ti) {
      const int64_t j0 = ti * kTile, rows = std::min(kTile, n - j0);
      if (fast) avx2::decode_rows(f, w + j0 * row_bytes, row_bytes, rows, k, tile.data());
      else quant::dequantize(t, w + j0 * row_bytes, tile.data(), rows * k);
      gemm(false, true, m, rows, k, 1.0f, x, k, tile.data(), k, 0.0f, y + j0, n);
    }
  });
}

void int8(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y) {
  if (dequant_matmul_half_native(f)) {
    const int64_t row_bytes = 2 * k;
    parallel_for(n, std::max<int64_t>(4, grain_rows(m, k, 1 << 17)), [&](int64_t n0, int64_t n1) {
      avx2::half_rows(f, x, m, k, w, row_bytes, n0, n1, y, n);
    });
    return;
  }
  if (!dequant_matmul_int8_native(f)) return row_f32(f, x, m, k, w, n, y);
  const int64_t row_bytes = k / quant_block(f).elements * quant_block(f).bytes;
  if (f == QuantFormat::Q4_K || f == QuantFormat::Q5_K || f == QuantFormat::Q6_K) {
    const std::vector<XBlockK> xq = quantize_x_rows_k(x, m, k);
    parallel_for(n, std::max<int64_t>(4, grain_rows(m, k, 1 << 17)), [&](int64_t n0, int64_t n1) {
      avx2::int8_rows_k(f, xq.data(), m, k, w, row_bytes, n0, n1, y, n);
    });
    return;
  }
  const std::vector<XBlock> xq = quantize_x_rows(x, m, k);
  // At least 4 weight rows per chunk (a chunk boundary costs nothing else).
  parallel_for(n, std::max<int64_t>(4, grain_rows(m, k, 1 << 17)), [&](int64_t n0, int64_t n1) {
    avx2::int8_rows(f, xq.data(), m, k, w, row_bytes, n0, n1, y, n);
  });
}

void int8_gemm(QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w, int64_t n, float* y) {
  if (!int8_gemm_format(f)) return dequant_gemm(f, x, m, k, w, n, y);
  const int64_t row_bytes = k / quant_block(f).elements * quant_block(f).bytes;
  const std::vector<XBlock> xq = quantize_x_rows(x, m, k);
  // Chunks of whole 8-row tiles, at least 64 rows (the tile is filled once per x pass).
  parallel_for((n + 7) / 8, 8, [&](int64_t t0, int64_t t1) {
    std::vector<uint8_t> scratch(static_cast<size_t>(avx2::int8_gemm_scratch_bytes(k) + 32));
    auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch.data()) + 31) & ~uintptr_t{31});
    avx2::int8_gemm(f, xq.data(), m, k, w, row_bytes, 8 * t0, std::min(n, 8 * t1), y, n, aligned);
  });
}

}  // namespace

bool int8_gemm_format(QuantFormat f) {
  const bool fmt = f == QuantFormat::Q4_0 || f == QuantFormat::Q4_1 || f == QuantFormat::Q5_0 || f == QuantFormat::Q5_1 ||
                   f == QuantFormat::Q4_K || f == QuantFormat::Q5_K;
  return fmt && dequant_matmul_int8_native(f);
}

bool dequant_matmul_half_native(QuantFormat f) {
  if (!is_half_format(f)) return false;
#if defined(__GNUC__) && defined(__x86_64__)
  return vec::has_avx2() && vec::has_f16c() && has_fma();
#else
  return false;
#endif
}

bool dequant_matmul_int8_native(QuantFormat f) {
  if (f == QuantFormat::Q2_K || f == QuantFormat::Q3_K || is_half_format(f)) return false;
#if defined(__GNUC__) && defined(__x86_64__)
  return vec::has_avx2() && vec::has_f16c() && has_fma();
#else
  return false;
#endif
}

void quantize_x_row(const float* x, int64_t k, XBlock* out) {
  const bool vec = dequant_matmul_int8_native(QuantFormat::Q8_0);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* v = x + 32 * b;
    if (vec && avx2::quantize32(v, out[b])) continue;
    float amax = 0.0f;
    bool finite = true;
    for (int e = 0; e < 32; ++e) {
      amax = std::max(amax, std::fabs(v[e]));
      finite = finite && std::isfinite(v[e]);
    }
    XBlock& o = out[b];
    o.d = finite ? amax / 127.0f : std::nanf("");  // a NaN / inf in x makes its outputs NaN
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    int s0 = 0, s1 = 0;
    for (int e = 0; e < 32; ++e) {
      // |v * inv| <= 127 (up to rounding, clamped); NaN / inf in x give 0 here and NaN in d.
      const float r = std::nearbyint(v[e] * inv);
      const int q = std::isfinite(r) ? static_cast<int>(std::clamp(r, -127.0f, 127.0f)) : 0;
      o.q[e] = static_cast<int8_t>(q);
      (e < 16 ? s0 : s1) += q;
    }
    o.sum[0] = static_cast<int16_t>(s0);
    o.sum[1] = static_cast<int16_t>(s1);
    o.dsum = o.d * static_cast<float>(s0 + s1);
  }
}

void quantize_x_row_k(const float* x, int64_t k, XBlockK* out) {
  const bool vec = dequant_matmul_int8_native(QuantFormat::Q8_0);
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* v = x + 256 * b;
    if (vec && avx2::quantize256(v, out[b])) continue;
    float amax = 0.0f;
    bool finite = true;
    for (int e = 0; e < 256; ++e) {
      amax = std::max(amax, std::fabs(v[e]));
      finite = finite && std::isfinite(v[e]);
    }
    XBlockK& o = out[b];
    o.d = finite ? amax / 127.0f : std::nanf("");
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) {
        const float r = std::nearbyint(v[e] * inv);
        const int q = std::isfinite(r) ? static_cast<int>(std::clamp(r, -127.0f, 127.0f)) : 0;
        o.q[e] = static_cast<int8_t>(q);
        sum += q;
      }
      o.bsum[g] = static_cast<int16_t>(sum);
    }
    for (int u = 0; u < 8; ++u) o.usum[u] = static_cast<int16_t>(o.bsum[2 * u] + o.bsum[2 * u + 1]);
  }
}

namespace {
// Rows [0, m) of x quantized by `row` into k / per blocks each, about 64 K values a chunk.
template <class XB, class Row>
std::vector<XB> quantize_rows(const float* x, int64_t m, int64_t k, int64_t per, Row row) {
  std::vector<XB> xq(static_cast<size_t>(m * (k / per)));
  parallel_for(m, std::max<int64_t>(1, 65536 / k), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) row(x + i * k, k, xq.data() + i * (k / per));
  });
  return xq;
}
}  // namespace

std::vector<XBlock> quantize_x_rows(const float* x, int64_t m, int64_t k) {
  return quantize_rows<XBlock>(x, m, k, 32, quantize_x_row);
}
std::vector<XBlockK> quantize_x_rows_k(const float* x, int64_t m, int64_t k) {
  return quantize_rows<XBlockK>(x, m, k, 256, quantize_x_row_k);
}

void dequant_matmul(DequantPath path, QuantFormat f, const float* x, int64_t m, int64_t k, const uint8_t* w,
                    int64_t n, float* y) {
  const QuantBlock blk = quant_block(f);
  if (k <= 0 || k % blk.elements != 0)
    throw Error(std::string("dequant_matmul: k = ") + std::to_string(k) + " is not a positive multiple of the " +
                enum_name(f) + " block size " + std::to_string(blk.elements));
  if (m <= 0 || n <= 0) return;
  if (path == DequantPath::Auto)
    path = m < kDequantGemmMinRows ? DequantPath::Int8 : int8_gemm_format(f) ? DequantPath::Int8Gemm : DequantPath::DequantGemm;
  switch (path) {
    case DequantPath::Reference: return reference(f, x, m, k, w, n, y);
    case DequantPath::DequantGemm: return dequant_gemm(f, x, m, k, w, n, y);
    case DequantPath::Int8Gemm: return int8_gemm(f, x, m, k, w, n, y);
    case DequantPath::Int8:
    case DequantPath::Auto: return int8(f, x, m, k, w, n, y);
  }
}

}  // namespace rlx::cpu
