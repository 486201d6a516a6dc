#include "backends/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/backend.h"
#include "runtime/knobs.h"

namespace rlx::cpu {
namespace {

// Waits one short moment in a spin loop (a pause instruction where there is one).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// How long an idle worker keeps polling for the next job before it sleeps (RLX_CPU_SPIN_US).
std::chrono::microseconds spin_window() {
  static const std::chrono::microseconds us{process_knobs::cpu_spin_us()};
  return us;
}

// A set of workers that pick chunks of the current job off an atomic counter. Only the first
// `active` workers take part in a job (the budget of the thread that started it); the pool
// grows on demand and never shrinks, so budgets of different sessions never resize it under a
// running job.
//
// Hand-off without the kernel where possible: a job is published by bumping `generation_`; an
// idle worker polls it for spin_window() after its last job before it sleeps on a condition
// variable, so the back-to-back jobs of one run reach awake workers in well under a
// microsecond (a condition-variable wake-up costs tens). The caller notifies only when some
// worker sleeps. A worker joins a job by raising `running_` and then checking that the job it
// saw is still open; the caller closes the job (all chunks claimed) and then waits for
// `running_` to drop to zero. Both sides use sequentially consistent operations, so either the
// caller sees the worker's increment and waits for it, or the worker sees the job closed and
// backs out without touching it.
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
      workers_.emplace_back([this, index, seen = generation_.load()] { loop(index, seen); });
    }
    size_.store(workers_.size(), std::memory_order_release);
  }

  // The caller works on the job too. When every chunk is claimed it closes the job and waits
  // only for the workers that joined it (a job the caller finishes alone waits for nobody).
  void run(int64_t n, int64_t chunk, int active, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time (nested calls run inline)
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    active_ = std::min(active, static_cast<int>(workers_.size()));
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
    open_.store(gen);        // seq_cst: the job's fields above are visible to a worker that sees it
    generation_.store(gen);  // wakes the spinning workers
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_.notify_all();
    }
    work();
    open_.store(0);
    for (int spins = 0; running_.load() != 0; ++spins) {
      if (spins < 4096) cpu_relax();
      else std::this_thread::yield();  // a joined worker lost its core: let it finish
    }
    fn_ = nullptr;
    if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(error_);
  }

  static thread_local bool in_worker;

 private:
  void work() {
    for (;;) {
      const int64_t b = next_.fetch_add(chunk_, std::memory_order_relaxed);
      if (b >= n_) break;
      const int64_t e = std::min(n_, b + chunk_);
      try {
        (*fn_)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!failed_.load(std::memory_order_relaxed)) {
          error_ = std::current_exception();
          failed_.store(true, std::memory_order_release);
        }
        next_.store(n_);
      }
    }
  }

  // The next generation after `seen` (or 0 when stopping): polls for spin_window(), then sleeps.
  uint64_t wait_for_job(uint64_t seen) {
    using Clock = std::chrono::steady_clock;
    const auto window = spin_window();
    if (window.count() > 0) {
      const auto until = Clock::now() + window;
      for (int spins = 1;; ++spins) {
        const uint64_t g = generation_.load(std::memory_order_acquire);
        if (g != seen || stopping_.load(std::memory_order_relaxed)) return stopping_.load() ? 0 : g;
        cpu_relax();
        if (spins % 256 == 0 && Clock::now() >= until) break;
      }
    }
    std::unique_lock<std::mutex> lk(mu_);
    sleepers_.fetch_add(1);  // seq_cst, before the predicate reads generation_
    cv_.wait(lk, [&] { return stopping_.load() || generation_.load() != seen; });
    sleepers_.fetch_sub(1);
    return stopping_.load() ? 0 : generation_.load();
  }

  void loop(int index, uint64_t seen) {
    in_worker = true;
    for (;;) {
      const uint64_t gen = wait_for_job(seen);
      if (gen == 0) return;
      seen = gen;
      running_.fetch_add(1);  // seq_cst: either the caller waits for us or we see the job closed
      if (open_.load() == gen && index < active_) work();
      running_.fetch_sub(1);
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::vector<std::thread> workers_;
  std::atomic<size_t> size_{0};
  std::mutex mu_, job_mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> generation_{0};  // bumped once per job
  std::atomic<uint64_t> open_{0};        // the generation of the job workers may join, 0: none
  std::atomic<int> running_{0};          // workers inside (or joining) a job
  std::atomic<int> sleepers_{0};         // workers waiting on cv_
  // The current job (written by the caller before open_/generation_ publish it).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int active_ = 0;
  std::atomic<bool> failed_{false};
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
