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

// OpenBLAS runs on the calling thread only: its thread count is set to one once, and products
// worth splitting are split here over the pool (parallel.h), one block of C's rows or columns per
// thread. One pool then serves every kernel: OpenBLAS's own threads never wake, never spin on the
// cores the pool's workers need next, and never oversubscribe a budget.
std::atomic<int> applied{0};

void single_threaded_blas() {
  if (applied.load(std::memory_order_acquire) == 1) return;
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_set_num_threads(1);
    applied.store(1, std::memory_order_release);
  });
}

// Products under kMinSplit multiply-adds stay on the calling thread, and each block gets at
// least kMinBlock (a block's packing and the pool's hand-off cost about a microsecond each).
constexpr double kMinSplit = double(int64_t{1} << 18);
constexpr double kMinBlock = double(int64_t{1} << 17);

// C's rows (false) or columns (true) split into `parts` blocks; the blocks' bounds.
struct Split {
  bool columns = false;
  int64_t parts = 1, step = 0;
};

Split plan_split(int64_t m, int64_t n, int64_t k) {
  const double fmas = double(m) * double(n) * double(k);
  const int threads = blas_threads_wanted();
  if (threads <= 1 || fmas < kMinSplit) return {};
  // Splitting rows makes every block pack all of B (k x n), splitting columns all of A (m x k):
  // split the longer side. Column blocks are whole multiples of 16 (the kernels' widths).
  Split s;
  s.columns = n > m;
  const int64_t len = s.columns ? n : m, align = s.columns ? 16 : 4;
  const int64_t max_parts = std::max<int64_t>(1, static_cast<int64_t>(fmas / kMinBlock));
  const int64_t want = std::min<int64_t>({threads, max_parts, (len + align - 1) / align});
  s.step = (len + want - 1) / want;
  s.step = (s.step + align - 1) / align * align;
  s.parts = (len + s.step - 1) / s.step;
  return s;
}

// One product on the calling thread. A one-row product runs as gemv (sgemm would pack all of B).
void call_one(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 1) {
    if (beta == 0.f) std::fill(c, c + n, 0.f);  // no garbage (NaN) times zero in the scaling
    cblas_sgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, static_cast<blasint>(trans_b ? n : k),
                static_cast<blasint>(trans_b ? k : n), alpha, b, static_cast<blasint>(ldb), a,
                static_cast<blasint>(trans_a ? lda : 1), beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, tr(trans_a), tr(trans_b), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}
void call_one(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
              const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 1) {
    if (beta == 0.0) std::fill(c, c + n, 0.0);
    cblas_dgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, static_cast<blasint>(trans_b ? n : k),
                static_cast<blasint>(trans_b ? k : n), alpha, b, static_cast<blasint>(ldb), a,
                static_cast<blasint>(trans_a ? lda : 1), beta, c, 1);
    return;
  }
  cblas_dgemm(CblasRowMajor, tr(trans_a), tr(trans_b), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

template <class T>
void gemm_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (!prepare(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc)) return;
  single_threaded_blas();
  const Split s = plan_split(m, n, k);
  if (s.parts <= 1) {
    call_one(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  parallel_for(s.parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      const int64_t lo = p * s.step;
      if (s.columns) {
        const int64_t len = std::min(n - lo, s.step);
        call_one(trans_a, trans_b, m, len, k, alpha, a, lda, trans_b ? b + lo * ldb : b + lo, ldb, beta, c + lo, ldc);
      } else {
        const int64_t len = std::min(m - lo, s.step);
        call_one(trans_a, trans_b, len, n, k, alpha, trans_a ? a + lo : a + lo * lda, lda, b, ldb, beta, c + lo * ldc,
                 ldc);
      }
    }
  });
}

}  // namespace

int blas_threads_applied() { return applied.load(std::memory_order_relaxed); }
int blas_threads_reported() { return openblas_get_num_threads(); }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm_impl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  gemm_impl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace rlx::cpu
