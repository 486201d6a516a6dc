// Vulkan data movement and Rope against the CPU oracle, beyond the shared parity cases: every
// dtype through every move (raw words of 1, 2, 4 and 8 bytes), the tiled transpose and the
// strided kernel, concat as buffer copies and as kernels (more than 8 inputs, empty inputs),
// gather with every integer index dtype and its error flag, every pad mode, sizes past the
// 65535-workgroup grid (grid-stride loops), and Rope in every attribute combination. Each test
// also checks that the validation layer (RLX_VULKAN_VALIDATION=1) reported nothing during it.
#include <cstdint>
#include <string>
#include <vector>

#include "vulkan/vulkan_test_util.h"
#ifdef RLX_HAVE_VULKAN
#include "backends/vulkan/variant.h"
#include "backends/vulkan/vk_context.h"
#endif

namespace {

using namespace rlx;
using rlx::testing::expect_vulkan_parity;
using rlx::testing::from_doubles;
using rlx::testing::ParityOptions;

#ifdef RLX_HAVE_VULKAN

// Fails the test when the validation layer reported an error since construction.
class NoNewValidationErrors {
 public:
  NoNewValidationErrors() : before_(vulkan::validation_error_count()) {}
  ~NoNewValidationErrors() {
    const uint64_t now = vulkan::validation_error_count();
    if (now != before_)
      for (const auto& m : vulkan::validation_messages()) ADD_FAILURE() << m;
    EXPECT_EQ(now, before_);
  }

 private:
  uint64_t before_;
};

const DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8, DType::I16,
                      DType::I32, DType::I64, DType::U8,  DType::U32, DType::Bool};

TEST(VulkanCopy, EveryMoveInEveryDtype) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  for (DType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({3, 37, 5, 33}, t));
    g.add_output(g.transpose(x, {0, 3, 2, 1}));        // tiled: last dim strided, dim 1 contiguous
    g.add_output(g.transpose(x, {1, 0, 2, 3}));        // strided, last dim contiguous
    g.add_output(g.transpose(x, {3, 2, 1, 0}));        // full reversal of the axes
    g.add_output(g.narrow(x, 1, 3, 30));               // outer > 1: strided
    g.add_output(g.narrow(x, 0, 1, 2));                // outer == 1: one buffer copy
    g.add_output(g.expand(g.input("y", Shape::of({37, 1, 1}, t)), {2, 37, 4, 3}));
    g.add_output(g.reverse(x, {0, 3}));
    g.add_output(g.reverse(x, {1}));
    g.add_output(g.reshape(g.transpose(x, {1, 0, 2, 3}), {37, 495}));
    g.add_output(g.stop_gradient(g.reverse(x, {2})));
    g.add_output(g.concat({x, g.narrow(x, 3, 0, 7), x}, 3));  // kernel over rows
    g.add_output(g.concat({x, g.reverse(x, {1})}, 0));          // one row: buffer copies
    ParityOptions o;
    o.int_hi = 100;
    expect_vulkan_parity(g, Precision::Fp32, o);
  }
}

TEST(VulkanCopy, ConcatOfManyAndEmptyInputs) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  for (DType t : {DType::F32, DType::BF16, DType::U8, DType::I64}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    std::vector<Value> xs;
    for (int i = 0; i < 19; ++i)  // 3 kernels (8 + 8 + 3), one input empty on the axis
      xs.push_back(g.input("x" + std::to_string(i), Shape::of({4, i == 5 ? 0 : 1 + i % 4, 3}, t)));
    g.add_output(g.concat(xs, 1));
    // Only one input has elements: whole rows.
    g.add_output(g.concat({g.input("e", Shape::of({4, 0, 3}, t)), xs[2]}, 1));
    ParityOptions o;
    o.int_hi = 100;
    expect_vulkan_parity(g, Precision::Fp32, o);
  }
}

TEST(VulkanCopy, PadEveryModeAndDtype) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  for (DType t : kAll)
    for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Edge}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::string(enum_name(mode)));
      Graph g;
      ops::Pad p;
      p.mode = mode;
      p.pads = {1, -1, 0, 2, 3, 1, -1, 2};  // begins, then ends: grow, crop, both
      const bool is_unsigned = t == DType::U8 || t == DType::U32 || t == DType::Bool;
      p.value = is_unsigned ? 3.75 : -3.75;  // converted per dtype as the CPU does
      g.add_output(g.apply(p, {g.input("x", Shape::of({4, 5, 6, 7}, t))}));
      ops::Pad q = p;
      q.pads = {2, 3};
      g.add_output(g.apply(q, {g.input("y", Shape::of({9}, t))}));
      ParityOptions o;
      o.int_hi = 100;
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

TEST(VulkanCopy, GatherEveryIndexDtype) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  for (DType it : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32})
    for (DType t : {DType::F32, DType::F16, DType::F64, DType::I8, DType::Bool}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " indices " + dtype_name(it));
      const bool is_signed = it == DType::I8 || it == DType::I16 || it == DType::I32 || it == DType::I64;
      Graph g;
      const Value data = g.input("data", Shape::of({7, 6, 5}, t));
      const Value idx = g.input("idx", Shape::of({2, 3}, it));
      g.add_output(g.gather(data, idx, 1));
      g.add_output(g.gather(data, idx, 0));
      g.add_output(g.gather(data, idx, 2));
      ParityOptions o;
      o.int_hi = 100;
      o.fixed_inputs = {{"idx", from_doubles(it, {2, 3}, is_signed ? std::vector<double>{0, 4, -1, 2, -5, 3}
                                                                     : std::vector<double>{0, 4, 1, 2, 4, 3})}};
      expect_vulkan_parity(g, Precision::Fp32, o);
    }
}

// The tiled transpose with ragged tiles and more batches than its grid's z dimension (1024).
TEST(VulkanCopy, TiledTransposeLoopsOverBatches) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  for (DType t : {DType::F32, DType::F64, DType::I16, DType::U8}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    g.add_output(g.transpose(g.input("x", Shape::of({1500, 17, 40}, t)), {0, 2, 1}));
    g.add_output(g.transpose(g.input("y", Shape::of({3, 70, 2, 45}, t)), {3, 1, 2, 0}));
    ParityOptions o;
    o.int_hi = 100;
    expect_vulkan_parity(g, Precision::Fp32, o);
  }
}

// An index outside [-n, n) is an rlx::Error naming the gather; the next good run is clean.
TEST(VulkanCopy, GatherIndexOutOfRangeIsAnError) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  for (DType it : {DType::I32, DType::I64, DType::U8}) {
    SCOPED_TRACE(dtype_name(it));
    Graph g;
    const Value data = g.input("data", Shape::of({5, 3}));
    g.add_output(g.gather(data, g.input("idx", Shape::of({3}, it)), 0));
    auto cg = Session(Device::Vulkan).compile(g);
    const Tensor d = rlx::testing::random_tensor(DType::F32, {5, 3}, 7);
    std::vector<std::vector<double>> bad = {{0, 5, 1}};
    if (it != DType::U8) bad.push_back({-6, 0, 1});
    if (it == DType::I64) bad.push_back({0, 4294967296.0 + 1, 1});  // wraps to 1 in 32 bits
    for (const auto& b : bad) {
      try {
        cg.run({{"data", d}, {"idx", from_doubles(it, {3}, b)}});
        ADD_FAILURE() << "an out-of-range index ran";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("gather"), std::string::npos) << e.what();
      }
    }
    const Tensor good = from_doubles(it, {3}, {4, 0, 2});
    const Tensor r = cg.run({{"data", d}, {"idx", good}})[0];
    for (int j = 0; j < 3; ++j) EXPECT_EQ(r.data<float>()[j], d.data<float>()[12 + j]);
  }
}

// More work than 65535 workgroups of 256 invocations cover: every kernel loops (grid-stride).
constexpr int64_t kBig = 65535LL * 256 + 4099;

TEST(VulkanCopyBig, StridedConcatNarrow) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  Graph g;
  const Value x = g.input("x", Shape::of({2, kBig / 2}, DType::U8));
  g.add_output(g.reverse(x, {1}));
  g.add_output(g.concat({x, g.narrow(x, 1, 1, 100)}, 1));
  g.add_output(g.narrow(x, 1, 3, kBig / 2 - 5));
  ParityOptions o;
  o.int_hi = 256;
  expect_vulkan_parity(g, Precision::Fp32, o);
}

TEST(VulkanCopyBig, GatherPad) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  Graph g;
  const Value data = g.input("data", Shape::of({2, kBig / 2 + 1}, DType::U8));
  g.add_output(g.gather(data, g.input("idx", Shape::of({2}, DType::I32)), 0));
  ops::Pad p;
  p.mode = PadMode::Reflect;
  p.pads = {0, 3, 0, 2};  // begins, then ends
  g.add_output(g.apply(p, {data}));
  ParityOptions o;
  o.int_hi = 2;
  expect_vulkan_parity(g, Precision::Fp32, o);
}

TEST(VulkanCopyBig, Rope) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  Graph g;  // 137600 rows of 4 pairs + 120 copied elements
  const Value x = g.input("x", Shape::of({1, 4300, 32, 128}, DType::F16));
  const Value c = g.input("cos", Shape::of({4300, 4}, DType::F16));
  const Value s = g.input("sin", Shape::of({4300, 4}, DType::F16));
  g.add_output(g.rope(x, c, s, 128, 8, RopeStyle::GptJ));
  expect_vulkan_parity(g);
}

TEST(VulkanRope, EveryAttribute) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::GptJ})
      for (int64_t n_rot : {2, 10, 24})
        for (bool per_batch : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::string(enum_name(style)) + " n_rot " +
                       std::to_string(n_rot) + (per_batch ? " per batch" : ""));
          Graph g;
          const Value x = g.input("x", Shape::of({2, 5, 3, 24}, t));
          const Shape cs = per_batch ? Shape::of({2, 5, n_rot / 2}, t) : Shape::of({5, n_rot / 2}, t);
          g.add_output(g.rope(x, g.input("cos", cs), g.input("sin", cs), 24, n_rot, style));
          expect_vulkan_parity(g);
        }
}

// Consecutive q and k RoPEs of one rotation (plan_rope_pairs) run as one dispatch with the same
// numbers: different head counts, both styles, a partial rotation, f64; not with the knob off, nor
// when the k Rope uses other tables.
TEST(VulkanRope, PairsRunInOneDispatch) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  auto graph = [](DType t, RopeStyle style, int64_t n_rot, bool other_tables) {
    Graph g;
    const Shape cs = Shape::of({5, n_rot / 2}, t);
    const Value c = g.input("cos", cs), s = g.input("sin", cs);
    const Value c2 = other_tables ? g.input("cos2", cs) : c;
    g.add_output(g.rope(g.input("q", Shape::of({2, 5, 4, 24}, t)), c, s, 24, n_rot, style));
    g.add_output(g.rope(g.input("k", Shape::of({2, 5, 2, 24}, t)), c2, s, 24, n_rot, style));
    return g;
  };
  auto dispatches = [](const Graph& g, bool knob) {
    CompileOptions o;
    o.tuning.vulkan_rope_pairs = knob;
    return rlx::testing::vulkan_dispatches(g, o);
  };
  EXPECT_EQ(dispatches(graph(DType::F32, RopeStyle::NeoX, 24, false), true), 1u);
  EXPECT_EQ(dispatches(graph(DType::F32, RopeStyle::NeoX, 24, false), false), 2u);
  EXPECT_EQ(dispatches(graph(DType::F32, RopeStyle::NeoX, 24, true), true), 2u);
  for (DType t : {DType::F32, DType::BF16, DType::F64})
    for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::GptJ})
      for (int64_t n_rot : {10, 24}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::string(enum_name(style)) + " n_rot " + std::to_string(n_rot));
        expect_vulkan_parity(graph(t, style, n_rot, false));
      }
}

// The tail of a partial rotation is copied unchanged, and the rotation is exact for c = 0, s = 1.
TEST(VulkanRope, PartialRotationKeepsTheTail) {
  RLX_REQUIRE_VULKAN();
  NoNewValidationErrors v;
  Graph g;
  const Value x = g.input("x", Shape::of({1, 1, 1, 8}));
  g.add_output(g.rope(x, g.input("cos", Shape::of({1, 2})), g.input("sin", Shape::of({1, 2})), 8, 4));
  auto cg = Session(Device::Vulkan).compile(g);
  const Tensor xt = from_doubles(DType::F32, {1, 1, 1, 8}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor c = from_doubles(DType::F32, {1, 2}, {0, 0}), s = from_doubles(DType::F32, {1, 2}, {1, 1});
  const Tensor r = cg.run({{"x", xt}, {"cos", c}, {"sin", s}})[0];
  // NeoX pairs (0, 2), (1, 3): (x1, x2) -> (-x2, x1).
  const std::vector<float> want = {-3, -4, 1, 2, 5, 6, 7, 8};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r.data<float>()[i], want[static_cast<size_t>(i)]) << i;
}

#endif

}  // namespace
