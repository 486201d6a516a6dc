// The CPU executor's Conv + elementwise consumer fusion (backends/cpu/conv_epilogue.h): it fires
// on a conv whose only reader is the next step (Relu, a HardSwish region, a residual Add), gives
// the bits of the unfused steps, and does not fire on near misses (another reader, a graph
// output, a broadcast input, a non-f32 dtype, a consumer that is not elementwise).
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_epilogue.h"
#include "backends/cpu/conv_gemm.h"
#include "backends/cpu/executor.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ops::RegionStep;
using testing::random_tensor;

RegionStep bin(BinaryKind k, int32_t a, int32_t b) { return {RegionStepKind::Binary, static_cast<int32_t>(k), DType::F32, {a, b}}; }
RegionStep act(ActKind k, int32_t a) { return {RegionStepKind::Activation, static_cast<int32_t>(k), DType::F32, {a}}; }

struct Built {
  Graph g;
  std::map<std::string, Tensor> values;
};

// x [n, c, h, w] -> conv (k x k, stride s, groups g, bias) -> y; shapes and seeds fixed.
Value add_conv(Built& b, Value x, int64_t c, int64_t cout, int64_t k, int64_t s, int64_t groups, DType dt,
               const std::string& tag) {
  const std::string wn = "w" + tag, bn = "b" + tag;
  b.values[wn] = random_tensor(dt, {cout, c / groups, k, k}, 7 + tag.size() + static_cast<uint64_t>(cout));
  b.values[bn] = random_tensor(dt, {cout}, 9 + static_cast<uint64_t>(cout));
  const Value w = b.g.input(wn, Shape::from(b.values[wn].shape(), dt));
  const Value bias = b.g.input(bn, Shape::from(b.values[bn].shape(), dt));
  ops::Conv op;
  op.stride = {s, s};
  op.pads = {k / 2, k / 2, k / 2, k / 2};
  op.groups = groups;
  return b.g.apply(op, {x, w, bias});
}

Value scalar(Built& b, float v) { return b.g.constant(Tensor::f32({}, std::vector<float>{v})); }

// HardSwish as the ONNX importer's region: x * max(min(x * (1/6) + 0.5, 1), 0).
Value hardswish(Built& b, Value x) {
  ops::ElementwiseRegion r;
  r.steps = {bin(BinaryKind::Mul, 0, 1), bin(BinaryKind::Add, -1, 2), bin(BinaryKind::Min, -2, 3),
             bin(BinaryKind::Max, -3, 4), bin(BinaryKind::Mul, 0, -4)};
  return b.g.apply(r, {x, scalar(b, 1.f / 6), scalar(b, 0.5f), scalar(b, 1.f), scalar(b, 0.f)});
}

Value relu(Built& b, Value x) {
  ops::Activation a;
  a.kind = ActKind::Relu;
  return b.g.apply(a, {x});
}

Value add(Built& b, Value x, Value y) {
  ops::Binary a;
  a.kind = BinaryKind::Add;
  return b.g.apply(a, {x, y});
}

Value input(Built& b, const std::string& name, std::vector<int64_t> dims, DType dt = DType::F32, uint64_t seed = 3) {
  b.values[name] = random_tensor(dt, dims, seed, -2, 2);
  return b.g.input(name, Shape::from(dims, dt));
}

std::unordered_map<NodeId, Tensor> leaves(const Graph& g, const std::map<std::string, Tensor>& values) {
  std::unordered_map<NodeId, Tensor> out;
  for (NodeId id : g.input_nodes()) out[id] = values.at(std::get<ops::Input>(g.node(id).op).name);
  return out;
}

// Runs `b` with the fusion on and off: same bits; returns how many steps fused.
int fused_steps(const Built& b) {
  cpu::Executor on(b.g), off(b.g);
  off.set_conv_fusion(false);
  std::vector<size_t> all(b.g.outputs().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto l = leaves(b.g, b.values);
  const auto y1 = on.run(l, all), y0 = off.run(l, all);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(y1[i].dtype(), y0[i].dtype());
    EXPECT_EQ(y1[i].shape(), y0[i].shape());
    EXPECT_EQ(0, std::memcmp(y1[i].raw(), y0[i].raw(), y0[i].nbytes())) << "output " << i;
  }
  int n = 0;
  for (bool f : on.conv_epilogue_steps()) n += f ? 1 : 0;
  return n;
}

TEST(ConvEpilogue, FiresOnMobileNetBlock) {
  // expand 1x1 + HardSwish, depthwise 3x3 + Relu, project 1x1 + residual Add: three fusions.
  // Widths and sizes leave row / column remainders in the tile kernel (13 channels, 23 x 19).
  Built b;
  const Value x = input(b, "x", {1, 13, 23, 19});
  const Value e = hardswish(b, add_conv(b, x, 13, 40, 1, 1, 1, DType::F32, "e"));
  const Value d = relu(b, add_conv(b, e, 40, 40, 3, 1, 40, DType::F32, "d"));
  const Value p = add_conv(b, d, 40, 13, 1, 1, 1, DType::F32, "p");
  b.g.set_outputs({add(b, x, p)});
  EXPECT_EQ(fused_steps(b), 3);
}

TEST(ConvEpilogue, FiresOnStridedAndIm2colConvsAndBatches) {
  Built b;
  const Value x = input(b, "x", {2, 3, 31, 29});
  const Value s = hardswish(b, add_conv(b, x, 3, 16, 3, 2, 1, DType::F32, "s"));   // im2col, stride 2
  const Value d = relu(b, add_conv(b, s, 16, 16, 3, 2, 16, DType::F32, "d"));      // depthwise stride 2
  const Value p = relu(b, add_conv(b, d, 16, 70, 1, 1, 1, DType::F32, "p"));       // 70 = 11 x 6 + 4 rows
  b.g.set_outputs({p});
  EXPECT_EQ(fused_steps(b), 3);
}

TEST(ConvEpilogue, ResidualReadFirstAndLargeOutputs) {
  // Add(residual, conv) with the residual as the first operand; an output wider than one
  // column chunk (64 x 64 positions) and a Sub / Div chain that needs the span path's order.
  Built b;
  const Value x = input(b, "x", {1, 24, 64, 64});
  const Value c = add_conv(b, x, 24, 24, 1, 1, 1, DType::F32, "c");
  const Value r = add(b, x, c);
  ops::ElementwiseRegion chain;
  chain.steps = {bin(BinaryKind::Sub, 1, 0), bin(BinaryKind::Div, -1, 2), act(ActKind::Sigmoid, -2),
                 bin(BinaryKind::Mul, -3, 0)};
  const Value c2 = add_conv(b, r, 24, 8, 3, 1, 1, DType::F32, "c2");
  b.g.set_outputs({b.g.apply(chain, {c2, scalar(b, 0.25f), scalar(b, 3.f)})});
  EXPECT_EQ(fused_steps(b), 2);
}

TEST(ConvEpilogue, BandedConvs) {
  // Unfolded inputs over 4 MiB run in bands of output rows on the direct path
  // (conv_direct_bands): the epilogue gets each band's plane segments (a residual Add and a
  // HardSwish).
  Built b;
  const Value x = input(b, "x", {1, 16, 130, 130});
  const Value c = add_conv(b, x, 16, 16, 3, 1, 1, DType::F32, "c");
  const Value h = hardswish(b, add_conv(b, add(b, x, c), 16, 8, 3, 1, 1, DType::F32, "h"));
  b.g.set_outputs({h});
  EXPECT_EQ(fused_steps(b), 2);
}

TEST(ConvEpilogue, SqueezeExciteOnOneByOneMaps) {
  // Pointwise convs of 1x1 maps (one product over the batch) with a Relu and a HardSwish.
  Built b;
  const Value x = input(b, "x", {2, 72, 1, 1});
  const Value h = relu(b, add_conv(b, x, 72, 288, 1, 1, 1, DType::F32, "fc1"));
  b.g.set_outputs({hardswish(b, add_conv(b, h, 288, 72, 1, 1, 1, DType::F32, "fc2"))});
  EXPECT_EQ(fused_steps(b), 2);
}

TEST(ConvEpilogue, LongSumsOnTheBlasPath) {
  // k >= 240 runs on OpenBLAS per task: a 7x7 projection from 256 channels + residual, and a
  // HardSwish expansion from 300 channels over 14 x 14 positions.
  Built b;
  const Value x = input(b, "x", {1, 256, 7, 7});
  const Value r = input(b, "r", {1, 40, 7, 7});
  const Value p = add(b, add_conv(b, x, 256, 40, 1, 1, 1, DType::F32, "p"), r);
  const Value x2 = input(b, "x2", {1, 300, 14, 14});
  const Value e = hardswish(b, add_conv(b, x2, 300, 64, 1, 1, 1, DType::F32, "e"));
  b.g.set_outputs({p, e});
  EXPECT_EQ(fused_steps(b), 2);
}

TEST(ConvEpilogue, DirectPath) {
  // Convs on the direct (implicit-GEMM) path, backends/cpu/conv_direct.h, with the tile kernel
  // it picks and with each of its two forced: a ResNet stem (7x7 stride 2) + Relu over several
  // row chunks, 3x3 convs + residual Add with 13 and 64 output channels (remainders of both
  // kernels' channel blocks, k 576), a 1x1 stride-2 conv (no columns dropped) + HardSwish,
  // batches of 2; the epilogue gets whole planes or row segments.
  Built b;
  const Value x = input(b, "x", {2, 3, 70, 66});
  const Value s = relu(b, add_conv(b, x, 3, 16, 7, 2, 1, DType::F32, "s"));  // 35 x 33
  const Value c = add(b, input(b, "res", {2, 16, 35, 33}), add_conv(b, s, 16, 16, 3, 1, 1, DType::F32, "c"));
  const Value d = hardswish(b, add_conv(b, c, 16, 13, 1, 2, 1, DType::F32, "d"));  // 18 x 17
  const Value e = relu(b, add_conv(b, d, 13, 64, 3, 2, 1, DType::F32, "e"));       // 9 x 9
  const Value r = add(b, add_conv(b, e, 64, 64, 3, 1, 1, DType::F32, "r"), e);     // k 576
  b.g.set_outputs({r});
  for (int kernel : {0, 1, 2}) {
    SCOPED_TRACE("kernel " + std::to_string(kernel));
    cpu::set_conv_direct_kernel(kernel);
    const uint64_t runs = cpu::conv_direct_runs();
    EXPECT_EQ(fused_steps(b), 5);
    if (cpu::conv_gemm_avx2_usable()) {
      EXPECT_EQ(cpu::conv_direct_runs(), runs + 10);  // 5 convs, fused and not
    }
  }
  cpu::set_conv_direct_kernel(0);
}

TEST(ConvEpilogue, LongSumsInBlocksOfTaps) {
  // A sum of 4680 taps over 272 positions: the channel lanes take it in blocks of taps (the
  // partial sums reloaded from the staging rows the epilogue then reads), 16 + 4 channels.
  Built b;
  const Value x = input(b, "x", {1, 520, 16, 17});
  const Value c = relu(b, add_conv(b, x, 520, 20, 3, 1, 1, DType::F32, "c"));
  b.g.set_outputs({c});
  const uint64_t runs = cpu::conv_direct_runs();
  EXPECT_EQ(fused_steps(b), 1);
  if (cpu::conv_gemm_avx2_usable()) {
    EXPECT_EQ(cpu::conv_direct_runs(), runs + 2);
  }
}

TEST(ConvEpilogue, NearMissesDoNotFuse) {
  {  // the conv's output has a second reader
    Built b;
    const Value x = input(b, "x", {1, 8, 9, 9});
    const Value c = add_conv(b, x, 8, 8, 1, 1, 1, DType::F32, "c");
    b.g.set_outputs({add(b, relu(b, c), c)});
    EXPECT_EQ(fused_steps(b), 0);
  }
  {  // the conv's output is a graph output too
    Built b;
    const Value x = input(b, "x", {1, 8, 9, 9});
    const Value c = add_conv(b, x, 8, 8, 1, 1, 1, DType::F32, "c");
    b.g.set_outputs({relu(b, c), c});
    EXPECT_EQ(fused_steps(b), 0);
  }
  {  // a per-channel input broadcasts over the output
    Built b;
    const Value x = input(b, "x", {1, 8, 9, 9});
    const Value ch = input(b, "ch", {1, 8, 1, 1});
    b.g.set_outputs({add(b, add_conv(b, x, 8, 8, 1, 1, 1, DType::F32, "c"), ch)});
    EXPECT_EQ(fused_steps(b), 0);
  }
  {  // f64 conv
    Built b;
    const Value x = input(b, "x", {1, 8, 9, 9}, DType::F64);
    b.g.set_outputs({relu(b, add_conv(b, x, 8, 8, 1, 1, 1, DType::F64, "c"))});
    EXPECT_EQ(fused_steps(b), 0);
  }
  {  // the consumer is not elementwise (softmax), or is a region with a Compare / Where
    Built b;
    const Value x = input(b, "x", {1, 8, 9, 9});
    ops::Softmax sm;
    sm.axis = -1;
    b.g.set_outputs({b.g.apply(sm, {add_conv(b, x, 8, 8, 1, 1, 1, DType::F32, "c")})});
    EXPECT_EQ(fused_steps(b), 0);
    Built b2;
    const Value x2 = input(b2, "x", {1, 8, 9, 9});
    ops::ElementwiseRegion r;
    r.steps = {{RegionStepKind::Compare, static_cast<int32_t>(CompareKind::Gt), DType::F32, {0, 1}},
               {RegionStepKind::Where, 0, DType::F32, {-1, 0, 1}}};
    b2.g.set_outputs({b2.g.apply(r, {add_conv(b2, x2, 8, 8, 1, 1, 1, DType::F32, "c"), scalar(b2, 0.f)})});
    EXPECT_EQ(fused_steps(b2), 0);
  }
}

TEST(ConvEpilogue, FusableReasons) {
  // conv_epilogue_fusable names the failed condition.
  Built b;
  const Value x = input(b, "x", {1, 4, 5, 5});
  const Value ch = input(b, "ch", {1, 4, 1, 1});
  b.g.set_outputs({add(b, add_conv(b, x, 4, 4, 1, 1, 1, DType::F32, "c"), ch)});
  cpu::Executor ex(b.g);
  const auto& steps = ex.schedule().steps;
  ASSERT_GE(steps.size(), 2u);
  std::string why;
  EXPECT_FALSE(cpu::conv_epilogue_fusable(steps[steps.size() - 2], steps.back(), &why));
  EXPECT_NE(why.find("broadcast"), std::string::npos) << why;
  EXPECT_FALSE(cpu::conv_epilogue_fusable(steps.back(), steps.back(), &why));
  EXPECT_NE(why.find("not a conv"), std::string::npos) << why;
}

}  // namespace
}  // namespace rlx
