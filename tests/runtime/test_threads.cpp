// The CPU thread budget (backends/cpu/parallel.h): CompileOptions::num_threads governs the
// pool (which also splits OpenBLAS's products; OpenBLAS itself stays on one thread) during that
// graph's compile (constant folding) and runs, weight prologues included, and compiles with
// other counts (or the default) do not undo it.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "backends/cpu/blas.h"
#include "backends/cpu/parallel.h"
#include "support/test_util.h"

namespace rlx {
namespace {

// A large elementwise op (parallel_for splits it), a matmul (BLAS) and a concat of two params
// that the optimizer hoists into a CPU weight prologue.
Graph budget_graph() {
  Graph g;
  Value x = g.input("x", Shape::of({256, 512}));
  Value w1 = g.param("w1", Shape::of({512, 256}));
  Value w2 = g.param("w2", Shape::of({512, 256}));
  Value h = g.matmul(g.gelu(g.mul(x, x)), g.concat({w1, w2}, 1));
  g.add_output(g.add(h, h), "y");
  return g;
}

CompiledGraph compile_budget_graph(int threads) {
  CompileOptions o;
  o.num_threads = threads;
  CompiledGraph cg = Session(Device::Cpu).compile(budget_graph(), o);
  cg.set_param("w1", testing::random_tensor(DType::F32, {512, 256}, 2));
  cg.set_param("w2", testing::random_tensor(DType::F32, {512, 256}, 3));
  return cg;
}

const NamedTensors& budget_inputs() {
  static const NamedTensors in{{"x", testing::random_tensor(DType::F32, {256, 512}, 1)}};
  return in;
}

TEST(CpuThreads, OneThreadCompileStaysOneThreadThroughThePrologue) {
  CompiledGraph cg = compile_budget_graph(1);
  // A default compile in between (all cores) must not change this graph's budget.
  CompiledGraph other = Session(Device::Cpu).compile(budget_graph());
  cpu::reset_parallel_stats();
  cg.run(budget_inputs());  // the first run also runs the weight prologue
  EXPECT_EQ(cpu::max_parallel_threads_since_reset(), 1);
  EXPECT_EQ(cpu::blas_threads_applied(), 1);
  EXPECT_EQ(cpu::blas_threads_reported(), 1);
}

TEST(CpuThreads, EachGraphRunsOnItsOwnBudget) {
  CompiledGraph one = compile_budget_graph(1);
  CompiledGraph three = compile_budget_graph(3);
  cpu::reset_parallel_stats();
  const auto a = three.run(budget_inputs());
  EXPECT_EQ(cpu::max_parallel_threads_since_reset(), 3);
  // OpenBLAS stays on one thread: the pool splits the product.
  EXPECT_EQ(cpu::blas_threads_applied(), 1);
  EXPECT_EQ(cpu::blas_threads_reported(), 1);
  cpu::reset_parallel_stats();
  const auto b = one.run(budget_inputs());
  EXPECT_EQ(cpu::max_parallel_threads_since_reset(), 1);
  EXPECT_EQ(cpu::blas_threads_reported(), 1);
  // The products are split into blocks with more threads: same numbers up to rounding.
  const auto da = testing::to_doubles(a[0]), db = testing::to_doubles(b[0]);
  ASSERT_EQ(da.size(), db.size());
  for (size_t i = 0; i < da.size(); ++i) ASSERT_NEAR(da[i], db[i], 1e-4 * (1 + std::abs(db[i]))) << i;
}

// Constant folding while compiling (relu of a 256x512 constant) runs on the compile's budget.
TEST(CpuThreads, CompileTimeFoldingUsesTheBudget) {
  for (int threads : {1, 3}) {
    Graph g;
    Value x = g.input("x", Shape::of({256, 512}));
    g.add_output(g.add(x, g.relu(g.constant(testing::random_tensor(DType::F32, {256, 512}, 4)))), "y");
    CompileOptions o;
    o.num_threads = threads;
    cpu::reset_parallel_stats();
    CompiledGraph cg = Session(Device::Cpu).compile(g, o);
    EXPECT_EQ(cpu::max_parallel_threads_since_reset(), threads);
  }
}

TEST(CpuThreads, ParallelForUsesAtMostTheBudgetAndRunsInline) {
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int64_t> sum{0};
  auto body = [&](int64_t b, int64_t e) {
    {
      std::lock_guard<std::mutex> lk(mu);
      ids.insert(std::this_thread::get_id());
    }
    for (int64_t i = b; i < e; ++i) sum += i;
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // give every worker a chance
  };
  {
    cpu::ScopedThreads t(2);
    EXPECT_EQ(cpu::num_threads(), 2);
    cpu::parallel_for(1000, 1, body);
    EXPECT_LE(ids.size(), 2u);
    EXPECT_EQ(sum.load(), 999 * 1000 / 2);
    {
      cpu::ScopedThreads inner(1);
      EXPECT_EQ(cpu::num_threads(), 1);
      ids.clear();
      cpu::parallel_for(1000, 1, body);
      EXPECT_EQ(ids, std::set<std::thread::id>{std::this_thread::get_id()});
    }
    cpu::ScopedThreads keep(0);  // 0 keeps the budget in force
    EXPECT_EQ(cpu::num_threads(), 2);
  }
  // Inside a parallel_for the BLAS runs on one thread: the pool already fills the budget.
  cpu::ScopedThreads t(4);
  EXPECT_EQ(cpu::blas_threads_wanted(), 4);
  std::atomic<int> inside{0};
  cpu::parallel_for(64, 1, [&](int64_t, int64_t) { inside = std::max(inside.load(), cpu::blas_threads_wanted()); });
  EXPECT_EQ(inside.load(), 1);
}

// Many back-to-back jobs, small (often finished by the caller before a worker wakes: the worker
// must then skip the closed job, not run a later job's chunks with stale bounds) and large, each
// chunk covered exactly once; an exception in a job still reaches the caller and the pool goes on.
TEST(CpuThreads, BackToBackJobsCoverEveryChunkOnce) {
  cpu::ScopedThreads t(3);
  std::vector<std::atomic<int>> hits(4096);
  for (int job = 0; job < 3000; ++job) {
    const int64_t n = job % 3 == 0 ? 4096 : 1 + job % 97;
    cpu::parallel_for(n, 1 + job % 5, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1, std::memory_order_relaxed);
    });
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[static_cast<size_t>(i)].exchange(0), 1) << "job " << job << " index " << i;
    }
  }
  EXPECT_THROW(cpu::parallel_for(1000, 1,
                                 [](int64_t b, int64_t) {
                                   if (b >= 500) throw Error("chunk failed");
                                 }),
               Error);
  std::atomic<int64_t> sum{0};
  cpu::parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
}

// Jobs that reach workers asleep (a pause longer than the polling window, RLX_CPU_SPIN_US,
// default 200 us, between jobs) and jobs started by two threads at once (one runs at a time).
TEST(CpuThreads, JobsReachSleepingWorkersAndConcurrentCallers) {
  cpu::ScopedThreads t(2);
  for (int job = 0; job < 6; ++job) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::atomic<int64_t> sum{0};
    cpu::parallel_for(512, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    ASSERT_EQ(sum.load(), 511 * 512 / 2) << "job " << job;
  }
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    cpu::ScopedThreads inner(2);
    for (int job = 0; job < 500; ++job)
      cpu::parallel_for(100, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) total += i;
      });
  };
  std::thread other(caller);
  caller();
  other.join();
  EXPECT_EQ(total.load(), 2 * 500 * (99 * 100 / 2));
}

// Products big enough are split over the pool in blocks of rows (tall C) or columns (wide C),
// one-row products (gemv) in blocks of columns; every form matches a plain double loop.
TEST(CpuThreads, GemmSplitOverThePoolMatchesAPlainProduct) {
  struct Case {
    int64_t m, n, k;
    bool ta, tb;
  };
  for (const Case& c : {Case{5, 1000, 300, false, false}, Case{700, 20, 300, true, false},
                        Case{1, 4000, 200, false, true}, Case{333, 257, 129, true, true}, Case{3, 7, 5, false, false}}) {
    const std::vector<double> av = testing::to_doubles(testing::random_tensor(DType::F32, {c.m * c.k}, 7));
    const std::vector<double> bv = testing::to_doubles(testing::random_tensor(DType::F32, {c.k * c.n}, 8));
    std::vector<float> a(av.begin(), av.end()), b(bv.begin(), bv.end());
    const int64_t lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
    auto at = [&](int64_t i, int64_t p) { return double(c.ta ? a[size_t(p * lda + i)] : a[size_t(i * lda + p)]); };
    auto bt = [&](int64_t p, int64_t j) { return double(c.tb ? b[size_t(j * ldb + p)] : b[size_t(p * ldb + j)]); };
    for (int threads : {1, 3}) {
      cpu::ScopedThreads t(threads);
      cpu::reset_parallel_stats();
      std::vector<float> out(size_t(c.m * c.n), std::nanf(""));
      cpu::gemm(c.ta, c.tb, c.m, c.n, c.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, out.data(), c.n);
      const bool big = double(c.m) * double(c.n) * double(c.k) >= double(1 << 18);
      EXPECT_EQ(cpu::max_parallel_threads_since_reset(), big && threads > 1 ? threads : 0)
          << c.m << "x" << c.n << "x" << c.k << " on " << threads;
      EXPECT_EQ(cpu::blas_threads_reported(), 1);
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < c.k; ++p) want += at(i, p) * bt(p, j);
          ASSERT_NEAR(out[size_t(i * c.n + j)], want, 1e-4 * (1 + std::abs(want)))
              << c.m << "x" << c.n << "x" << c.k << " at " << i << "," << j << " on " << threads;
        }
    }
  }
}

TEST(CpuThreads, OutOfRangeThreadCountIsAnError) {
  Graph g;
  g.add_output(g.relu(g.input("x", Shape::of({4}))));
  for (int n : {-1, cpu::kMaxThreads + 1}) {
    CompileOptions o;
    o.num_threads = n;
    try {
      Session(Device::Cpu).compile(g, o);
      ADD_FAILURE() << "num_threads " << n << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("num_threads is " + std::to_string(n)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace rlx
