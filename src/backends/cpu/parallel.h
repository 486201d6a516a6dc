#pragma once
// A process-wide worker pool for large elementwise / reduction loops.
#include <cstdint>
#include <functional>

namespace rlx::cpu {

// Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items, on the pool's
// workers and the calling thread. Runs inline when n <= grain or the pool has one thread.
// Exceptions thrown by fn are rethrown on the calling thread (the first one wins).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Number of threads parallel_for uses (>= 1). set_num_threads(0) = hardware concurrency.
int num_threads();
void set_num_threads(int n);

}  // namespace rlx::cpu
