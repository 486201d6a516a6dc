#pragma once
// Thin typed wrappers over OpenBLAS for the CPU kernels (row-major, 64-bit sizes).
#include <cstdint>

namespace rlx::cpu {

// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, row-major with leading dims lda/ldb/ldc.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace rlx::cpu
