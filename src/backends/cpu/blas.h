#pragma once
// Thin typed wrappers over OpenBLAS for the CPU kernels (row-major, 64-bit sizes). Each call
// runs on the calling thread's budget (parallel.h): OpenBLAS itself runs on one thread, and a
// product of at least 256 K multiply-adds is split over the pool into blocks of C's rows or
// columns, one per thread. A one-row product runs as gemv.
#include <cstdint>

namespace rlx::cpu {

// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, row-major with leading dims lda/ldb/ldc.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// The OpenBLAS thread count gemm set (1 once the first product ran, 0 before), and the count
// OpenBLAS itself reports (tests check that both stay 1 whatever the budget).
int blas_threads_applied();
int blas_threads_reported();

}  // namespace rlx::cpu
