// CacheWrite on CUDA over carried state: the new rows are written in place (the plan writes the
// output over the cache input's leaf buffer), so a decode step moves no cache bytes on the device
// at any cache length, the caller's tensor is never written, and the cache holds every row.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "runtime/device_api.h"
#include "support/kv_cache_steps.h"
#include "support/test_util.h"

namespace {

using namespace rlx;
using namespace rlx::testing;

TEST(CudaKvCache, CarriedCacheIsWrittenInPlace) {
  RLX_REQUIRE_CUDA();
  for (int64_t max_ctx : {256, 4096}) {
    SCOPED_TRACE("max_ctx " + std::to_string(max_ctx));
    EXPECT_EQ(run_carried_cache_steps(Device::Cuda, max_ctx, [] { return device_stats().device_copy_bytes; }), 0u)
        << "a carried step copies cache bytes on the device";
  }
}

// A chunk of S rows (S symbolic): prefill chunks and decode steps are different variants.
Graph chunk_graph(int64_t max_ctx) {
  Graph g;
  const Value cache = g.input("cache", Shape({1, max_ctx, 2, 4}));
  const Value rows = g.input("rows", Shape({1, Dim::symbol("S"), 2, 4}));
  const Value pos = g.input("pos", Shape({Dim::symbol("S")}, DType::I64));
  g.add_output(g.reduce(ReduceKind::Sum, rows, {1, 2, 3}, false));
  g.add_output(g.cache_write(cache, rows, pos));
  return g;
}

// Carried caches that move between the variants of two chunk lengths stay on the device: no
// download of the cache's bytes, and the cache holds every chunk's rows.
TEST(CudaKvCache, CachesMoveBetweenChunkLengthsOnTheDevice) {
  RLX_REQUIRE_CUDA();
  const int64_t max_ctx = 1024;
  CompiledGraph cg = Session(Device::Cuda).compile(chunk_graph(max_ctx));
  cg.bind_state("cache", 1);
  const Tensor zero = Tensor::zeros(DType::F32, {1, max_ctx, 2, 4});
  std::vector<double> want(static_cast<size_t>(max_ctx * 8), 0.0);
  int64_t next = 0;
  auto chunk = [&](int64_t s, bool first) {
    const Tensor rows = random_tensor(DType::F32, {1, s, 2, 4}, 50 + static_cast<uint64_t>(next));
    std::vector<int64_t> p(static_cast<size_t>(s));
    for (int64_t i = 0; i < s; ++i) p[static_cast<size_t>(i)] = next + i;
    const std::vector<double> r = to_doubles(rows);
    std::copy(r.begin(), r.end(), want.begin() + next * 8);
    next += s;
    NamedTensors in = {{"rows", rows}, {"pos", Tensor::i64({s}, p)}};
    if (first) in.emplace_back("cache", zero);
    cg.run(in, {0});
  };
  chunk(8, true);
  const uint64_t down = device_stats().download_bytes;
  for (int64_t s : {4, 1, 1, 4, 1}) chunk(s, false);  // every switch moves the carried cache
  EXPECT_LT(device_stats().download_bytes - down, uint64_t{1024}) << "the cache came through the host";
  const Tensor got = cg.run({{"rows", random_tensor(DType::F32, {1, 1, 2, 4}, 7)},
                             {"pos", Tensor::i64({1}, std::vector<int64_t>{max_ctx - 1})}},
                            {1})[0];
  const std::vector<double> g = to_doubles(got);
  for (int64_t i = 0; i < next * 8; ++i) EXPECT_EQ(g[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << i;
}

}  // namespace

namespace {

// A prompt-sized chunk (300 rows of 2 batches) written at positions with many repeats: the later
// row of a position wins, as on the CPU (one block per row looks for a later one); a position
// outside the cache is an rlx::Error and the cache keeps its rows.
TEST(CudaKvCache, LongChunksWithRepeatedPositionsAndBadOnes) {
  RLX_REQUIRE_CUDA();
  Graph g;
  const Value cache = g.input("cache", Shape::of({2, 64, 3, 8}));
  const Value rows = g.input("rows", Shape::of({2, 300, 3, 8}));
  const Value pos = g.input("pos", Shape::of({300}, DType::I64));
  g.add_output(g.cache_write(cache, rows, pos));
  std::vector<int64_t> p(300);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int64_t>((i * 37) % 64);
  const NamedTensors in = {{"cache", random_tensor(DType::F32, {2, 64, 3, 8}, 1)},
                           {"rows", random_tensor(DType::F32, {2, 300, 3, 8}, 2)},
                           {"pos", Tensor::i64({300}, p)}};
  const Tensor want = Session(Device::Cpu).compile(g).run(in).at(0);
  CompiledGraph cg = Session(Device::Cuda).compile(g);
  EXPECT_EQ(to_doubles(cg.run(in).at(0)), to_doubles(want));
  p[150] = 64;
  NamedTensors bad = in;
  bad[2].second = Tensor::i64({300}, p);
  EXPECT_THROW(cg.run(bad), Error);
}

// The k and v caches of one position vector: one launch writes both (knob
// cuda_cache_write_pairs, plan::plan_cache_write_pairs), also in place over carried caches; the
// same rows as the CPU and as separate launches, and a bad position is still an rlx::Error.
TEST(CudaKvCache, KAndVCachesOfOnePositionVectorInOneLaunch) {
  RLX_REQUIRE_CUDA();
  Graph g;
  const Value pos = g.input("pos", Shape::of({5}, DType::I64));
  const Value k = g.relu(g.input("k", Shape::of({1, 5, 2, 8})));
  const Value vin = g.input("v", Shape::of({1, 5, 2, 8}));
  const Value v = g.add(vin, vin);  // exact on both devices
  g.add_output(g.cache_write(g.input("kc", Shape::of({1, 32, 2, 8})), k, pos));
  g.add_output(g.cache_write(g.input("vc", Shape::of({1, 32, 2, 8})), v, pos));
  NamedTensors in = {{"pos", Tensor::i64({5}, std::vector<int64_t>{3, 9, 3, 31, 0})},
                     {"k", random_tensor(DType::F32, {1, 5, 2, 8}, 3)},
                     {"v", random_tensor(DType::F32, {1, 5, 2, 8}, 4)},
                     {"kc", random_tensor(DType::F32, {1, 32, 2, 8}, 5)},
                     {"vc", random_tensor(DType::F32, {1, 32, 2, 8}, 6)}};
  const auto want = Session(Device::Cpu).compile(g).run(in);
  for (bool pairs : {true, false}) {
    SCOPED_TRACE(pairs ? "paired" : "separate");
    CompileOptions o;
    o.tuning.cuda_cache_write_pairs = pairs;
    CompiledGraph cg = Session(Device::Cuda).compile(g, o);
    const auto got = cg.run(in);
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(to_doubles(got[i]), to_doubles(want[i])) << "output " << i;
    NamedTensors bad = in;
    bad[0].second = Tensor::i64({5}, std::vector<int64_t>{3, 9, 32, 31, 0});
    EXPECT_THROW(cg.run(bad), Error);
  }
}

// Keys rotated by a RoPE and cached: the cache write reads the rope's input and writes the
// rotated rows itself (knob cuda_cache_write_rope, plan::plan_cache_write_ropes), paired with the
// v write (mode 0) or alone (1); the same rows as the CPU and as the rope launched (2).
TEST(CudaKvCache, CacheWriteRotatesTheKeysOfARope) {
  RLX_REQUIRE_CUDA();
  expect_rope_cache_writes_match_cpu(Device::Cuda, 3, [](CompileOptions& o, int mode) {
    o.tuning.cuda_cache_write_pairs = mode == 0;
    o.tuning.cuda_cache_write_rope = mode != 2;
  });
}

}  // namespace
