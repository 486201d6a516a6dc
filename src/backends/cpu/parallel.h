#pragma once
// The CPU thread budget and the process-wide worker pool for large elementwise / reduction loops.
//
// One budget governs every CPU thread rlx uses: the pool's workers (parallel_for) and the BLAS
// (OpenBLAS's own threads). The budget in force on a thread is the innermost ScopedThreads on
// it (the CPU backend installs one per run from CompileOptions::num_threads), else the process
// default (set_num_threads, initially the hardware concurrency). The pool grows to the largest
// budget asked for and never shrinks; a parallel_for uses at most `budget` threads, the caller
// included, so a pool sized for one session never leaks into another's runs.
#include <cstdint>
#include <functional>

namespace rlx::cpu {

// Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items, on the pool's
// workers and the calling thread (at most num_threads() threads in all). Runs inline when
// n <= grain, the budget is one thread, or it is called from inside another parallel_for.
// Exceptions thrown by fn are rethrown on the calling thread (the first one wins).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// The thread budget in force on the calling thread (>= 1).
int num_threads();
// The process default budget; n <= 0 = hardware concurrency.
void set_num_threads(int n);
// The most threads one budget may ask for (CompileOptions::num_threads is checked against it).
inline constexpr int kMaxThreads = 1024;

// Installs a budget of n threads on the calling thread for its lifetime (n == 0 keeps the one
// in force: the enclosing scope's or the process default). Nestable.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n);
  ~ScopedThreads();
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_;
};

// The thread count a BLAS call made now from this thread should use: 1 inside a parallel_for
// (the pool already occupies the budget), else the budget. blas.cpp applies it before each call.
int blas_threads_wanted();

// Diagnostics (tests): the most threads any parallel_for was allowed to use since the last reset.
int max_parallel_threads_since_reset();
void reset_parallel_stats();

}  // namespace rlx::cpu
