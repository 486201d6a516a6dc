// OpenBLAS-backed gemm wrappers (row-major). Sizes are 64-bit on our side and checked
// against the BLAS integer type before the call; empty problems never reach BLAS.
#include "backends/cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <string>

#include "backends/cpu/parallel.h"
#include "rlx/error.h"

namespace rlx::cpu {
namespace {

void check_fits(const char* what, int64_t v) {
  if (v < 0 || v > static_cast<int64_t>(std::numeric_limits<blasint>::max()))
    throw Error(std::string("gemm: ") + what + " = " + std::to_string(v) +
                " does not fit the BLAS integer type (max " +
                std::to_string(std::numeric_limits<blasint>::max()) +
                "); split the matrix product into smaller blocks");
}

// Validates the arguments; returns false when the product is empty in k (or the whole
// output is empty) and C was already handled here.
template <class T>
bool prepare(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a,
             int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0)
    throw Error("gemm: negative size m=" + std::to_string(m) + " n=" + std::to_string(n) +
                " k=" + std::to_string(k));
  if (m == 0 || n == 0) return false;
  if (ldc < n) throw Error("gemm: ldc=" + std::to_string(ldc) + " < n=" + std::to_string(n));
  if (k == 0) {
    // alpha * (empty sum) + beta * C; beta == 0 overwrites (C may hold garbage).
    for (int64_t i = 0; i < m; ++i) {
      T* row = c + i * ldc;
      if (beta == T(0))
        std::fill(row, row + n, T(0));
      else if (beta != T(1))
        for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
    return false;
  }
  const int64_t a_cols = trans_a ? m : k;
  const int64_t b_cols = trans_b ? k : n;
  if (lda < a_cols)
    throw Error("gemm: lda=" + std::to_string(lda) + " < " + std::to_string(a_cols));
  if (ldb < b_cols)
    throw Error("gemm: ldb=" + std::to_string(ldb) + " < " + std::to_string(b_cols));
  if (a == nullptr || b == nullptr || c == nullptr) throw Error("gemm: null operand pointer");
  check_fits("m", m);
  check_fits("n", n);
  check_fits("k", k);
  check_fits("lda", lda);
  check_fits("ldb", ldb);
  check_fits("ldc", ldc);
  return true;
}

CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

// OpenBLAS keeps one process-wide thread count. Before each call it is set to the calling
// thread's budget (1 inside a parallel_for, whose threads already fill the budget), so that the
// BLAS threads and the pool's never run on top of each other. Set only when it changes.
// Products under kSmallGemm multiply-adds run on one thread: waking OpenBLAS's threads costs
// more than they save there, and after a call they spin on the cores the pool's workers need
// next (MobileNet's 576 x 1000 classifier on one row: 0.58 M).
std::atomic<int> applied{0};
constexpr double kSmallGemm = double(int64_t{1} << 22);

void apply_blas_threads(int64_t m, int64_t n, int64_t k) {
  const int want = double(m) * double(n) * double(k) < kSmallGemm ? 1 : blas_threads_wanted();
  if (applied.load(std::memory_order_relaxed) == want) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  if (applied.load(std::memory_order_relaxed) == want) return;
  openblas_set_num_threads(want);
  applied.store(want, std::memory_order_relaxed);
}

}  // namespace

int blas_threads_applied() { return applied.load(std::memory_order_relaxed); }
int blas_threads_reported() { return openblas_get_num_threads(); }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (!prepare(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc)) return;
  apply_blas_threads(m, n, k);
  if (m == 1) {  // one row: a matrix-vector product (sgemm would pack all of B first)
    if (beta == 0.f) std::fill(c, c + n, 0.f);  // no garbage (NaN) times zero in the scaling
    cblas_sgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, static_cast<blasint>(trans_b ? n : k),
                static_cast<blasint>(trans_b ? k : n), alpha, b, static_cast<blasint>(ldb), a,
                static_cast<blasint>(trans_a ? lda : 1), beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, tr(trans_a), tr(trans_b), static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  if (!prepare(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc)) return;
  apply_blas_threads(m, n, k);
  if (m == 1) {
    if (beta == 0.0) std::fill(c, c + n, 0.0);
    cblas_dgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, static_cast<blasint>(trans_b ? n : k),
                static_cast<blasint>(trans_b ? k : n), alpha, b, static_cast<blasint>(ldb), a,
                static_cast<blasint>(trans_a ? lda : 1), beta, c, 1);
    return;
  }
  cblas_dgemm(CblasRowMajor, tr(trans_a), tr(trans_b), static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace rlx::cpu
