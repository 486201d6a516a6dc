#include "backends/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/backend.h"

namespace rlx::cpu {
namespace {

// A set of workers that pick chunks of the current job off an atomic counter. Only the first
// `active` workers take part in a job (the budget of the thread that started it); the pool
// grows on demand and never shrinks, so budgets of different sessions never resize it under a
// running job.
class Pool {
 public:
  ~Pool() { stop(); }

  // Workers in the pool (the calling thread of a job comes on top).
  int workers() const { return static_cast<int>(size_.load(std::memory_order_acquire)); }

  void grow_to(int n_workers) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // never while a job runs
    std::lock_guard<std::mutex> lk(mu_);
    while (static_cast<int>(workers_.size()) < n_workers) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index, seen = generation_] { loop(index, seen); });
    }
    size_.store(workers_.size(), std::memory_order_release);
  }

  // The caller works on the job too. When it has claimed the last chunk it closes the job and
  // waits only for the workers that joined it: a worker still waking up then finds the job
  // closed and goes back to sleep without touching it (so a job the caller finishes alone does
  // not wait for a wake-up).
  void run(int64_t n, int64_t chunk, int active, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time (nested calls run inline)
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      chunk_ = chunk;
      next_.store(0);
      active_ = std::min(active, static_cast<int>(workers_.size()));
      open_ = true;
      running_ = 0;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mu_);
    open_ = false;
    done_cv_.wait(lk, [&] { return running_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

  static thread_local bool in_worker;

 private:
  void work() {
    for (;;) {
      const int64_t b = next_.fetch_add(chunk_);
      if (b >= n_) break;
      const int64_t e = std::min(n_, b + chunk_);
      try {
        (*fn_)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        next_.store(n_);
      }
    }
  }
  void loop(int index, uint64_t seen) {
    in_worker = true;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        if (index >= active_ || !open_) continue;  // not in this job's budget, or finished
        ++running_;
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::atomic<size_t> size_{0};
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  bool stopping_ = false;
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int active_ = 0, running_ = 0;  // running_: workers inside the current job
  bool open_ = false;              // the current job takes workers
  std::exception_ptr error_;
};

thread_local bool Pool::in_worker = false;
thread_local bool in_parallel_region = false;
thread_local int scoped_budget = 0;  // 0: none installed on this thread

int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::atomic<int>& default_budget() {
  static std::atomic<int> n{hardware_threads()};
  return n;
}
std::atomic<int> max_seen{0};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || Pool::in_worker || in_parallel_region) {
    fn(0, n);
    return;
  }
  const int budget = num_threads();
  int seen = max_seen.load(std::memory_order_relaxed);
  while (seen < budget && !max_seen.compare_exchange_weak(seen, budget, std::memory_order_relaxed)) {
  }
  if (budget == 1) {
    fn(0, n);
    return;
  }
  Pool& p = pool();
  if (p.workers() < budget - 1) p.grow_to(budget - 1);
  const int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, static_cast<int64_t>(budget) * 4);
  const int64_t chunk = (n + chunks - 1) / chunks;
  in_parallel_region = true;
  try {
    p.run(n, chunk, budget - 1, fn);
  } catch (...) {
    in_parallel_region = false;
    throw;
  }
  in_parallel_region = false;
}

int num_threads() { return scoped_budget > 0 ? scoped_budget : default_budget().load(std::memory_order_relaxed); }

void set_num_threads(int n) {
  default_budget().store(n <= 0 ? hardware_threads() : std::min(n, kMaxThreads), std::memory_order_relaxed);
}

ScopedThreads::ScopedThreads(int n) : saved_(scoped_budget) {
  if (n > 0) scoped_budget = std::min(n, kMaxThreads);
}
ScopedThreads::~ScopedThreads() { scoped_budget = saved_; }

int blas_threads_wanted() { return Pool::in_worker || in_parallel_region ? 1 : num_threads(); }

int max_parallel_threads_since_reset() { return max_seen.load(std::memory_order_relaxed); }
void reset_parallel_stats() { max_seen.store(0, std::memory_order_relaxed); }

}  // namespace rlx::cpu

namespace rlx {
namespace {
class CpuThreadBudget final : public ThreadBudget {
 public:
  explicit CpuThreadBudget(int n) : scope_(n) {}

 private:
  cpu::ScopedThreads scope_;
};
}  // namespace

std::unique_ptr<ThreadBudget> scoped_thread_budget(int n) { return std::make_unique<CpuThreadBudget>(n); }

}  // namespace rlx
