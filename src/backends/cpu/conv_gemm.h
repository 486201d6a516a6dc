#pragma once
// Internal to the CPU conv kernels: the f32 product behind a pointwise (1x1) or im2col conv,
//   y[m, j] = bias[m] + sum_k w[m, k] * b[k, j]      (m < M output channels, j < N positions),
// computed by rlx's own register-tiled AVX2/FMA kernel (OpenBLAS for k >= 240 and where the CPU
// lacks them) on
// the NCHW operands as they lie: w is the conv weight (M x K, row-major), b the input (or its
// im2col columns, K rows of ldb floats). Tiles of output columns x channels run on the pool's
// threads (one thread budget; OpenBLAS one thread per task). An optional epilogue (conv_epilogue.h) turns
// each finished tile into the fused consumer's output while the tile is in cache.
#include <cstdint>

namespace rlx::cpu {

class ConvEpilogue;

struct ConvGemm {
  int64_t m = 0, n = 0, k = 0;
  const float* w = nullptr;     // m x k, row-major
  const float* b = nullptr;     // k rows of `ldb` floats (n used)
  int64_t ldb = 0;
  const float* bias = nullptr;  // m values or nullptr
  float* y = nullptr;           // m rows of n floats (unused when `epi` is set)
  int64_t y_offset = 0;         // flat index of y[0, 0] in the conv output (for `epi`)
  const ConvEpilogue* epi = nullptr;
};

// Runs the product, splitting it over the pool when it is large enough (`parallel`).
void conv_gemm(const ConvGemm& g, bool parallel);

// The tile kernels for CPUs with AVX2 and FMA (conv_gemm_avx2.cpp). Rows [0, rows) (rows <= 6)
// and columns [0, cols) (cols <= 16... any) of one block:
//   c[r * ldc + j] = bias[r] (0 without bias) + sum_k a[r * lda + k] * b[k * ldb + j].
bool conv_gemm_avx2_usable();
void conv_gemm_block_avx2(int64_t rows, int64_t cols, int64_t k, const float* a, int64_t lda, const float* b,
                          int64_t ldb, const float* bias, float* c, int64_t ldc);

}  // namespace rlx::cpu
