// WebGPU data movement and Rope against the CPU oracle, beyond the shared parity cases: every
// dtype WGSL holds through every move (one 32-bit word per element), concat of many leaf inputs
// along an inner axis (one strided dispatch each) and of empty inputs, gather with every integer
// index dtype and its error flag, every pad mode (constants converted per dtype), sizes past the
// 65535-workgroup grid (grid-stride loops), transposes over 8 dims, and Rope in every attribute.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/parity.h"
#include "webgpu/webgpu_test_util.h"

namespace {

using namespace rlx;
using rlx::testing::from_doubles;
using rlx::testing::ParityOptions;
using rlx::testing::expect_webgpu_parity;

#ifdef RLX_HAVE_WEBGPU


const DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::I8,  DType::I16,
                      DType::I32, DType::I64, DType::U8,   DType::U32, DType::Bool};

TEST(WebGpuCopy, EveryMoveInEveryDtype) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : kAll) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    const Value x = g.input("x", Shape::of({3, 37, 5, 33}, t));
    g.add_output(g.transpose(x, {0, 3, 2, 1}));
    g.add_output(g.transpose(x, {1, 0, 2, 3}));
    g.add_output(g.transpose(x, {3, 2, 1, 0}));
    g.add_output(g.narrow(x, 1, 3, 30));  // outer > 1: strided
    g.add_output(g.narrow(x, 0, 1, 2));   // outer == 1: one buffer copy
    g.add_output(g.expand(g.input("y", Shape::of({37, 1, 1}, t)), {2, 37, 4, 3}));
    g.add_output(g.reverse(x, {0, 3}));
    g.add_output(g.reverse(x, {1}));
    g.add_output(g.reshape(g.transpose(x, {1, 0, 2, 3}), {37, 495}));
    g.add_output(g.stop_gradient(g.reverse(x, {2})));
    g.add_output(g.concat({x, g.narrow(x, 3, 0, 7), x}, 3));  // strided: rows of the output
    g.add_output(g.concat({x, g.reverse(x, {1})}, 0));          // one row: buffer copies
    ParityOptions o;
    o.int_hi = 100;
    expect_webgpu_parity(g, o);
  }
}

// Rank 8 (nothing to coalesce: every dim > 1 and permuted), the most the copy kernel takes.
TEST(WebGpuCopy, TransposeOfEightDims) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  const Value x = g.input("x", Shape::of({2, 3, 2, 3, 2, 3, 2, 3}, DType::I32));
  g.add_output(g.transpose(x, {7, 5, 3, 1, 6, 4, 2, 0}));
  g.add_output(g.reverse(g.transpose(x, {1, 0, 3, 2, 5, 4, 7, 6}), {0, 2, 4, 6}));
  ParityOptions o;
  o.int_hi = 1000;
  expect_webgpu_parity(g, o);
}

// The tiled transpose with ragged tiles and more batches than its grid's z dimension (1024); a
// batch dim between the tiled ones; an offset input (a narrow feeding the transpose).
TEST(WebGpuCopy, TiledTransposeLoopsOverBatches) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::I16, DType::U8}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    g.add_output(g.transpose(g.input("x", Shape::of({1500, 17, 40}, t)), {0, 2, 1}));
    const Value y = g.input("y", Shape::of({3, 70, 2, 45}, t));
    g.add_output(g.transpose(y, {3, 1, 2, 0}));
    g.add_output(g.transpose(y, {3, 2, 0, 1}));
    g.add_output(g.transpose(g.narrow(y, 1, 3, 60), {0, 2, 3, 1}));
    ParityOptions o;
    o.int_hi = 100;
    expect_webgpu_parity(g, o);
  }
}

// Concat along inner axes of many leaf inputs (each its own buffer: one strided dispatch per
// input), with an empty input, and with only one input having elements (whole rows).
TEST(WebGpuCopy, StridedConcatOfManyAndEmptyInputs) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::BF16, DType::U8, DType::I64}) {
    SCOPED_TRACE(dtype_name(t));
    Graph g;
    std::vector<Value> xs;
    for (int i = 0; i < 19; ++i)
      xs.push_back(g.input("x" + std::to_string(i), Shape::of({4, i == 5 ? 0 : 1 + i % 4, 3}, t)));
    g.add_output(g.concat(xs, 1));
    g.add_output(g.concat({xs[0], xs[4], xs[8]}, 2));  // the last axis
    g.add_output(g.concat({g.input("e", Shape::of({4, 0, 3}, t)), xs[2]}, 1));
    // Inputs computed in the arena (one buffer for all), one of them a strided narrow.
    g.add_output(g.concat({g.transpose(xs[3], {0, 2, 1}), g.narrow(g.transpose(xs[7], {0, 2, 1}), 2, 1, 2)}, 2));
    ParityOptions o;
    o.int_hi = 100;
    expect_webgpu_parity(g, o);
  }
}

// Contiguous moves are buffer copies, not kernels; a concat along an inner axis is one strided
// dispatch per input.
TEST(WebGpuCopy, ContiguousMovesAreBufferCopies) {
  RLX_REQUIRE_WEBGPU();
  Graph rows;
  rows.add_output(rows.concat({rows.input("a", Shape::of({3, 5})), rows.input("b", Shape::of({2, 5}))}, 0));
  EXPECT_EQ(rlx::testing::webgpu_dispatches(rows), 0u);
  Graph cols;
  cols.add_output(cols.concat({cols.input("a", Shape::of({3, 5})), cols.input("b", Shape::of({3, 2})),
                               cols.input("c", Shape::of({3, 1}))},
                              1));
  EXPECT_EQ(rlx::testing::webgpu_dispatches(cols), 3u);
  expect_webgpu_parity(rows);
  expect_webgpu_parity(cols);
}

TEST(WebGpuCopy, PadEveryModeAndDtype) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : kAll)
    for (PadMode mode : {PadMode::Constant, PadMode::Reflect, PadMode::Edge}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::string(enum_name(mode)));
      Graph g;
      ops::Pad p;
      p.mode = mode;
      p.pads = {1, -1, 0, 2, 3, 1, -1, 2};  // begins, then ends: grow, crop, both
      const bool is_unsigned = t == DType::U8 || t == DType::U32 || t == DType::Bool;
      p.value = is_unsigned ? 3.75 : -3.75;  // converted per dtype as the CPU does (i8 sign-extended)
      g.add_output(g.apply(p, {g.input("x", Shape::of({4, 5, 6, 7}, t))}));
      ops::Pad q = p;
      q.pads = {2, 3};
      g.add_output(g.apply(q, {g.input("y", Shape::of({9}, t))}));
      ParityOptions o;
      o.int_hi = 100;
      expect_webgpu_parity(g, o);
    }
}

// A pad constant an i64 tensor held in 32-bit words cannot hold is refused with the reason.
TEST(WebGpuCopy, PadConstantBeyondI32IsRefused) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  ops::Pad p;
  p.pads = {1, 1};
  p.value = 1e12;
  g.add_output(g.apply(p, {g.input("x", Shape::of({3}, DType::I64))}));
  try {
    Session(Device::WebGpu).compile(g);
    ADD_FAILURE() << "the pad compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("32-bit words"), std::string::npos) << e.what();
  }
}

TEST(WebGpuCopy, GatherEveryIndexDtype) {
  RLX_REQUIRE_WEBGPU();
  for (DType it : {DType::I8, DType::I16, DType::I32, DType::I64, DType::U8, DType::U32})
    for (DType t : {DType::F32, DType::F16, DType::I8, DType::Bool}) {
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
      expect_webgpu_parity(g, o);
    }
}

// An index outside [-n, n) is an rlx::Error naming the gather; the next good run is clean.
TEST(WebGpuCopy, GatherIndexOutOfRangeIsAnError) {
  RLX_REQUIRE_WEBGPU();
  for (DType it : {DType::I32, DType::I64, DType::U8, DType::I16}) {
    SCOPED_TRACE(dtype_name(it));
    Graph g;
    const Value data = g.input("data", Shape::of({5, 3}));
    g.add_output(g.gather(data, g.input("idx", Shape::of({3}, it)), 0));
    auto cg = Session(Device::WebGpu).compile(g);
    const Tensor d = rlx::testing::random_tensor(DType::F32, {5, 3}, 7);
    std::vector<std::vector<double>> bad = {{0, 5, 1}};
    if (it != DType::U8) bad.push_back({-6, 0, 1});
    for (const auto& b : bad) {
      try {
        cg.run({{"data", d}, {"idx", from_doubles(it, {3}, b)}});
        ADD_FAILURE() << "an out-of-range index ran";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("gather"), std::string::npos) << e.what();
      }
    }
    const Tensor good = from_doubles(it, {3}, {4.0, 0.0, it == DType::U8 ? 2.0 : -3.0});
    const Tensor r = cg.run({{"data", d}, {"idx", good}})[0];
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(r.data<float>()[j], d.data<float>()[12 + j]);
      EXPECT_EQ(r.data<float>()[6 + j], d.data<float>()[6 + j]);
    }
  }
}

// More work than 65535 workgroups of 256 invocations cover: every kernel loops (grid-stride).
constexpr int64_t kBig = 65535LL * 256 + 4099;

TEST(WebGpuCopyBig, StridedConcatNarrowTranspose) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  const Value x = g.input("x", Shape::of({2, kBig / 2}, DType::U8));
  g.add_output(g.reverse(x, {1}));
  g.add_output(g.concat({x, g.narrow(x, 1, 1, 100)}, 1));
  g.add_output(g.narrow(x, 1, 3, kBig / 2 - 5));
  g.add_output(g.transpose(x, {1, 0}));
  ParityOptions o;
  o.int_hi = 256;
  expect_webgpu_parity(g, o);
}

TEST(WebGpuCopyBig, GatherPad) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  const Value data = g.input("data", Shape::of({2, kBig / 2 + 1}, DType::U8));
  g.add_output(g.gather(data, g.input("idx", Shape::of({2}, DType::I32)), 0));
  ops::Pad p;
  p.mode = PadMode::Reflect;
  p.pads = {0, 3, 0, 2};  // begins, then ends
  g.add_output(g.apply(p, {data}));
  ParityOptions o;
  o.int_hi = 2;
  expect_webgpu_parity(g, o);
}

TEST(WebGpuCopyBig, Rope) {
  RLX_REQUIRE_WEBGPU();
  Graph g;  // 137600 rows of 4 pairs + 120 copied elements
  const Value x = g.input("x", Shape::of({1, 4300, 32, 128}, DType::F16));
  const Value c = g.input("cos", Shape::of({4300, 4}, DType::F16));
  const Value s = g.input("sin", Shape::of({4300, 4}, DType::F16));
  g.add_output(g.rope(x, c, s, 128, 8, RopeStyle::GptJ));
  expect_webgpu_parity(g);
}

TEST(WebGpuRope, EveryAttribute) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::GptJ})
      for (int64_t n_rot : {2, 10, 24})
        for (bool per_batch : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::string(enum_name(style)) + " n_rot " +
                       std::to_string(n_rot) + (per_batch ? " per batch" : ""));
          Graph g;
          const Value x = g.input("x", Shape::of({2, 5, 3, 24}, t));
          const Shape cs = per_batch ? Shape::of({2, 5, n_rot / 2}, t) : Shape::of({5, n_rot / 2}, t);
          g.add_output(g.rope(x, g.input("cos", cs), g.input("sin", cs), 24, n_rot, style));
          expect_webgpu_parity(g);
        }
}

// A decode's q and k RoPEs over the same tables run as one dispatch (heads differ, partial
// rotation, every style and dtype); a RoPE of the first one's result, or over other tables, does not
// pair.
TEST(WebGpuRope, QAndKShareOneDispatch) {
  RLX_REQUIRE_WEBGPU();
  for (DType t : {DType::F32, DType::BF16})
    for (RopeStyle style : {RopeStyle::NeoX, RopeStyle::GptJ}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::string(enum_name(style)));
      Graph g;
      const Value q = g.input("q", Shape::of({2, 3, 8, 16}, t)), k = g.input("k", Shape::of({2, 3, 2, 16}, t));
      const Value c = g.input("cos", Shape::of({3, 6}, t)), s = g.input("sin", Shape::of({3, 6}, t));
      g.add_output(g.rope(q, c, s, 16, 12, style));
      g.add_output(g.rope(k, c, s, 16, 12, style));
      EXPECT_EQ(rlx::testing::webgpu_dispatches(g), 1u);
      expect_webgpu_parity(g);
    }
  Graph chained;  // the second reads the first's result
  const Value x = chained.input("x", Shape::of({1, 2, 4, 8}));
  const Value c = chained.input("cos", Shape::of({2, 4})), s = chained.input("sin", Shape::of({2, 4}));
  chained.add_output(chained.rope(chained.rope(x, c, s, 8, 8), c, s, 8, 8));
  EXPECT_EQ(rlx::testing::webgpu_dispatches(chained), 2u);
  expect_webgpu_parity(chained);
  Graph tables;  // other tables
  const Value y = tables.input("y", Shape::of({1, 2, 4, 8}));
  tables.add_output(tables.rope(y, tables.input("c1", Shape::of({2, 4})), tables.input("s1", Shape::of({2, 4})), 8, 8));
  tables.add_output(tables.rope(y, tables.input("c2", Shape::of({2, 4})), tables.input("s2", Shape::of({2, 4})), 8, 8));
  EXPECT_EQ(rlx::testing::webgpu_dispatches(tables), 2u);
  expect_webgpu_parity(tables);
}

// The tail of a partial rotation is copied unchanged, and the rotation is exact for c = 0, s = 1.
TEST(WebGpuRope, PartialRotationKeepsTheTail) {
  RLX_REQUIRE_WEBGPU();
  Graph g;
  const Value x = g.input("x", Shape::of({1, 1, 1, 8}));
  g.add_output(g.rope(x, g.input("cos", Shape::of({1, 2})), g.input("sin", Shape::of({1, 2})), 8, 4));
  auto cg = Session(Device::WebGpu).compile(g);
  const Tensor xt = from_doubles(DType::F32, {1, 1, 1, 8}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor c = from_doubles(DType::F32, {1, 2}, {0, 0}), s = from_doubles(DType::F32, {1, 2}, {1, 1});
  const Tensor r = cg.run({{"x", xt}, {"cos", c}, {"sin", s}})[0];
  // NeoX pairs (0, 2), (1, 3): (x1, x2) -> (-x2, x1).
  const std::vector<float> want = {-3, -4, 1, 2, 5, 6, 7, 8};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r.data<float>()[i], want[static_cast<size_t>(i)]) << i;
}

#endif

}  // namespace
