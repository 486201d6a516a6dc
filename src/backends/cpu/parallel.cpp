#include "backends/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace rlx::cpu {
namespace {

// A fixed set of workers that pick chunks of the current job off an atomic counter.
class Pool {
 public:
  explicit Pool(int n) { resize(n); }
  ~Pool() { stop(); }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int n) {
    stop();
    stopping_ = false;
    for (int i = 0; i + 1 < n; ++i) workers_.emplace_back([this] { loop(); });
  }

  void run(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time (nested calls run inline)
    {
      std::lock_guard<std::mutex> lk(mu_);
      fn_ = &fn;
      n_ = n;
      chunk_ = chunk;
      next_.store(0);
      pending_ = static_cast<int>(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return pending_ == 0; });
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
  void loop() {
    in_worker = true;
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      work();
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_all();
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
  std::mutex mu_, job_mu_;
  std::condition_variable cv_, done_cv_;
  bool stopping_ = false;
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int pending_ = 0;
  std::exception_ptr error_;
};

thread_local bool Pool::in_worker = false;
thread_local bool in_parallel_region = false;

int default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

std::mutex& pool_mu() {
  static std::mutex m;
  return m;
}
Pool& pool() {
  static Pool p(default_threads());
  return p;
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Pool& p = pool();
  if (n <= grain || p.size() == 1 || Pool::in_worker || in_parallel_region) {
    fn(0, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, static_cast<int64_t>(p.size()) * 4);
  const int64_t chunk = (n + chunks - 1) / chunks;
  in_parallel_region = true;
  try {
    p.run(n, chunk, fn);
  } catch (...) {
    in_parallel_region = false;
    throw;
  }
  in_parallel_region = false;
}

int num_threads() { return pool().size(); }

void set_num_threads(int n) {
  std::lock_guard<std::mutex> lk(pool_mu());
  const int want = n <= 0 ? default_threads() : n;
  if (want != pool().size()) pool().resize(want);
}

}  // namespace rlx::cpu
