// The CPU thread budget (backends/cpu/parallel.h): CompileOptions::num_threads governs the
// pool and OpenBLAS during that graph's compile (constant folding) and runs, weight prologues
// included, and compiles with other counts (or the default) do not undo it.
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
  EXPECT_EQ(cpu::blas_threads_applied(), 3);
  EXPECT_EQ(cpu::blas_threads_reported(), 3);
  cpu::reset_parallel_stats();
  const auto b = one.run(budget_inputs());
  EXPECT_EQ(cpu::max_parallel_threads_since_reset(), 1);
  EXPECT_EQ(cpu::blas_threads_reported(), 1);
  // OpenBLAS may split the products differently with more threads: same numbers up to rounding.
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
