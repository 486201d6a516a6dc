#include "support/kv_cache_steps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device_api.h"
#include "support/test_util.h"

namespace rlx::testing {

void expect_carried_cache_in_place(Device device, const std::function<uint64_t()>& recorded_copy_bytes) {
  for (int64_t max_ctx : {256, 4096}) {
    SCOPED_TRACE("max_ctx " + std::to_string(max_ctx));
    const uint64_t recorded = recorded_copy_bytes();
    EXPECT_EQ(run_carried_cache_steps(device, max_ctx, [] { return device_stats().device_copy_bytes; }), 0u)
        << "a carried step copies cache bytes on the device";
    EXPECT_EQ(recorded_copy_bytes() - recorded, 0u) << "the schedule copies the cache";
  }
}

Graph cache_write_graph() {
  Graph g;
  const Value cache = g.input("cache", Shape::of({1, 64, 2, 8}));
  const Value rows = g.input("rows", Shape::of({1, 3, 2, 8}));
  g.add_output(g.cache_write(cache, rows, g.input("pos", Shape::of({3}, DType::I64))));
  return g;
}

const Node& first_node_of(const Graph& g, const char* name) {
  for (const Node& n : g.nodes())
    if (std::string(op_name(n.op)) == name) return n;
  throw Error(std::string("test: no '") + name + "' node");
}

Graph kv_decode_graph(int64_t max_ctx) {
  Graph g;
  const Value cache = g.input("cache", Shape::of({1, max_ctx, 2, 4}));
  const Value rows = g.input("rows", Shape::of({1, 1, 2, 4}));
  const Value pos = g.input("pos", Shape::of({1}, DType::I64));
  g.add_output(g.mul(rows, g.scalar(2.0)));
  g.add_output(g.cache_write(cache, rows, pos));
  return g;
}

uint64_t run_carried_cache_steps(Device device, int64_t max_ctx, const std::function<uint64_t()>& counter) {
  CompiledGraph cg = Session(device).compile(kv_decode_graph(max_ctx));
  cg.bind_state("cache", 1);
  const Tensor mine = random_tensor(DType::F32, {1, max_ctx, 2, 4}, 3);
  const Tensor before = mine.clone();
  std::vector<Tensor> written;
  std::vector<int64_t> pos;
  auto step = [&](int64_t p, bool give_cache) {
    written.push_back(random_tensor(DType::F32, {1, 1, 2, 4}, 10 + static_cast<uint64_t>(p)));
    pos.push_back(p);
    NamedTensors in = {{"rows", written.back()}, {"pos", Tensor::i64({1}, std::vector<int64_t>{p})}};
    if (give_cache) in.emplace_back("cache", mine);
    cg.run(in, {0});
  };
  step(0, true);  // the caller's cache: copied first, never written
  EXPECT_EQ(std::memcmp(mine.raw(), before.raw(), mine.nbytes()), 0) << "the caller's tensor changed";
  const uint64_t start = counter();
  for (int64_t p = 1; p <= 8; ++p) step(p, false);  // carried: written in place
  const uint64_t per_step = (counter() - start) / 8;
  EXPECT_EQ(std::memcmp(mine.raw(), before.raw(), mine.nbytes()), 0) << "the caller's tensor changed";
  // The carried cache holds the caller's rows with the 9 written ones.
  written.push_back(random_tensor(DType::F32, {1, 1, 2, 4}, 99));
  pos.push_back(max_ctx - 1);
  const Tensor got =
      cg.run({{"rows", written.back()}, {"pos", Tensor::i64({1}, std::vector<int64_t>{max_ctx - 1})}}, {1})[0];
  std::vector<double> want = to_doubles(before);
  for (size_t i = 0; i < written.size(); ++i) {
    const std::vector<double> r = to_doubles(written[i]);
    std::copy(r.begin(), r.end(), want.begin() + pos[i] * 8);
  }
  EXPECT_TRUE(all_close(got, {1, max_ctx, 2, 4}, want, {0, 0}));
  return per_step;
}

Graph rope_cache_write_graph(const RopeCacheCase& c) {
  const int64_t b = 2, s = 3, hkv = 2, d = 16, m = 24;
  Graph g;
  const Value pos = g.input("pos", Shape::of({s}, DType::I64));
  const Shape tab = c.per_batch ? Shape::of({b, s, c.n_rot / 2}, c.t) : Shape::of({s, c.n_rot / 2}, c.t);
  const Value cs = g.input("cos", tab), sn = g.input("sin", tab);
  std::optional<Value> q;
  if (c.q) q = g.rope(g.input("q", Shape::of({b, s, 2 * hkv, d}, c.t)), cs, sn, d, c.n_rot, c.style);
  const Value k = g.rope(g.relu(g.input("k", Shape::of({b, s, hkv, d}, c.t))), cs, sn, d, c.n_rot, c.style);
  const Value vin = g.input("v", Shape::of({b, s, hkv, d}, c.t));
  const Value v = g.add(vin, vin);  // computed before the writes, as a decoder's projections are
  g.add_output(g.cache_write(g.input("kc", Shape::of({b, m, hkv, d}, c.t)), k, pos));
  g.add_output(g.cache_write(g.input("vc", Shape::of({b, m, hkv, d}, c.t)), v, pos));
  if (q) g.add_output(*q);
  return g;
}

std::vector<RopeCacheCase> rope_cache_cases() {
  return {{RopeStyle::NeoX, 16, false, DType::F32},       {RopeStyle::GptJ, 8, false, DType::F32},
          {RopeStyle::NeoX, 12, true, DType::F32},        {RopeStyle::GptJ, 16, false, DType::BF16},
          {RopeStyle::NeoX, 16, false, DType::F32, true}, {RopeStyle::GptJ, 12, true, DType::BF16, true}};
}

void expect_rope_cache_writes_match_cpu(Device device, int modes,
                                        const std::function<void(CompileOptions&, int)>& configure) {
  for (const RopeCacheCase& c : rope_cache_cases()) {
    SCOPED_TRACE(std::string(c.style == RopeStyle::NeoX ? "neox" : "gptj") + " n_rot " + std::to_string(c.n_rot) +
                 (c.per_batch ? " per batch " : " ") + dtype_name(c.t) + (c.q ? " with q" : ""));
    const Graph g = rope_cache_write_graph(c);
    std::vector<int64_t> tab = {3, c.n_rot / 2};
    if (c.per_batch) tab.insert(tab.begin(), 2);
    NamedTensors in = {{"pos", Tensor::i64({3}, std::vector<int64_t>{5, 0, 23})},
                             {"cos", random_tensor(c.t, tab, 7)},
                             {"sin", random_tensor(c.t, tab, 8)},
                             {"k", random_tensor(c.t, {2, 3, 2, 16}, 9)},
                             {"v", random_tensor(c.t, {2, 3, 2, 16}, 10)},
                             {"kc", random_tensor(c.t, {2, 24, 2, 16}, 11)},
                             {"vc", random_tensor(c.t, {2, 24, 2, 16}, 12)}};
    if (c.q) in.emplace_back("q", random_tensor(c.t, {2, 3, 4, 16}, 13));
    const auto want = Session(Device::Cpu).compile(g).run(in);
    const Tolerance tol = c.t == DType::BF16 ? Tolerance{1.0 / 64, 1.0 / 64} : Tolerance{1e-6, 1e-6};
    for (int mode = 0; mode < modes; ++mode) {
      SCOPED_TRACE("mode " + std::to_string(mode));
      CompileOptions o;
      configure(o, mode);
      const auto got = Session(device).compile(g, o).run(in);
      ASSERT_EQ(got.size(), c.q ? 3u : 2u);
      EXPECT_TRUE(all_close(got[0], want[0].shape(), to_doubles(want[0]), tol));
      EXPECT_EQ(to_doubles(got[1]), to_doubles(want[1]));
      if (c.q) {
        EXPECT_TRUE(all_close(got[2], want[2].shape(), to_doubles(want[2]), tol)) << "q";
      }
    }
  }
}

}  // namespace rlx::testing
