// ONNX MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv imported and run on the CPU
// against direct integer loops (support/integer_reference.h) and the operators' requantization
// (multiplier a_scale * b_scale / y_scale in the scales' type, the rest in float64, round half to
// even, saturate): zero points absent, one value, per row / column / output channel; u8 and i8
// mixes; every conv attribute; scales as inputs and as initializers; and the import errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "onnx/onnx_builder.h"
#include "rlx/onnx.h"
#include "support/integer_reference.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
using namespace rlx::testing;

int32_t elem(DType t) {
  switch (t) {
    case DType::U8: return onnx::TensorProto::UINT8;
    case DType::I8: return onnx::TensorProto::INT8;
    case DType::I32: return onnx::TensorProto::INT32;
    case DType::F16: return onnx::TensorProto::FLOAT16;
    case DType::BF16: return onnx::TensorProto::BFLOAT16;
    default: return onnx::TensorProto::FLOAT;
  }
}

// A model under construction with the values it is fed: each operand a graph input (fed at run
// time) or, with `init`, an initializer.
struct Model {
  OnnxBuilder b;
  NamedTensors feeds;
  explicit Model(int64_t opset) : b(opset) {}
  Model& add(const std::string& name, const Tensor& t, bool init = false) {
    if (init) {
      b.initializer(name, t);
    } else {
      b.input(name, elem(t.dtype()), t.shape());
      feeds.emplace_back(name, t);
    }
    return *this;
  }
  Tensor run(const std::string& out, DType out_t) {
    b.output(out, elem(out_t));
    const auto outs = run_cpu(import_built(b), feeds);
    EXPECT_EQ(outs.size(), 1u);
    return outs.at(0);
  }
};

std::string import_error(Model& m, DType out_t = DType::I32) {
  m.b.output("y", elem(out_t));
  return error_message([&] { import_built(m.b); });
}

::testing::AssertionResult same_values(const Tensor& y, DType t, const std::vector<int64_t>& dims,
                                       const std::vector<int64_t>& want) {
  if (y.dtype() != t) return ::testing::AssertionFailure() << "dtype " << dtype_name(y.dtype()) << " vs " << dtype_name(t);
  if (y.shape() != dims) return ::testing::AssertionFailure() << "shape " << dims_str(y.shape()) << " vs " << dims_str(dims);
  const auto got = int_values(y);
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

std::vector<int64_t> widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

Tensor f32s(std::vector<int64_t> shape, std::vector<float> v) { return Tensor::f32(std::move(shape), v); }

// float rounded to float16 (nearest even), as a float.
float to_f16(float v) { return static_cast<float>(Tensor::f16({}, std::vector<float>{v}).to_f64()[0]); }

// The operator's requantization of one exact sum.
int64_t requant(int64_t acc, double mult, int64_t y_zero, DType out) {
  const double lo = out == DType::U8 ? 0 : -128, hi = out == DType::U8 ? 255 : 127;
  return static_cast<int64_t>(std::clamp(std::nearbyint(static_cast<double>(acc) * mult + static_cast<double>(y_zero)), lo, hi));
}

// ---- MatMulInteger ------------------------------------------------------------------------

// A (M, K) @ B (K, N) with a_zero_point per row and b_zero_point per column (1-d vectors).
TEST(OnnxMatMulInteger, PerRowAndPerColumnZeroPoints) {
  const DType ts[] = {DType::U8, DType::I8};
  uint64_t seed = 1;
  for (DType ta : ts)
    for (DType tb : ts) {
      const Tensor a = random_int8(ta, {4, 37}, seed++), b = random_int8(tb, {37, 19}, seed++);
      const Tensor za = random_int8(ta, {4}, seed++), zb = random_int8(tb, {19}, seed++);
      Model m(10);
      m.add("A", a).add("B", b).add("za", za).add("zb", zb);
      m.b.node("MatMulInteger", {"A", "B", "za", "zb"}, {"Y"}, "mm");
      std::vector<int64_t> dims;
      const auto want = ref_matmul_integer({4, 37}, int_values(a), {37, 19}, int_values(b), int_values(za),
                                           int_values(zb), dims);
      EXPECT_TRUE(same_values(m.run("Y", DType::I32), DType::I32, dims, widen(want)))
          << dtype_name(ta) << " x " << dtype_name(tb);
    }
}

// N-d zero points ([D, M, 1] and [D, 1, N]), absent ones, and batch broadcast.
TEST(OnnxMatMulInteger, NdZeroPointsAbsentOnesAndBroadcast) {
  {
    const Tensor a = random_int8(DType::I8, {2, 3, 5}, 1), b = random_int8(DType::U8, {2, 5, 4}, 2);
    const Tensor za = random_int8(DType::I8, {2, 3, 1}, 3);
    Model m(10);
    m.add("A", a).add("B", b).add("za", za);
    m.b.node("MatMulInteger", {"A", "B", "za"}, {"Y"});
    std::vector<int64_t> dims;
    const auto want = ref_matmul_integer({2, 3, 5}, int_values(a), {2, 5, 4}, int_values(b), int_values(za), {0}, dims);
    EXPECT_TRUE(same_values(m.run("Y", DType::I32), DType::I32, dims, widen(want)));
  }
  {
    const Tensor a = random_int8(DType::U8, {3, 5}, 4), b = random_int8(DType::U8, {2, 5, 4}, 5);
    const Tensor zb = random_int8(DType::U8, {2, 1, 4}, 6);
    Model m(10);
    m.add("A", a).add("B", b).add("zb", zb);
    m.b.node("MatMulInteger", {"A", "B", "", "zb"}, {"Y"});
    std::vector<int64_t> dims;
    const auto want = ref_matmul_integer({3, 5}, int_values(a), {2, 5, 4}, int_values(b), {0}, int_values(zb), dims);
    EXPECT_TRUE(same_values(m.run("Y", DType::I32), DType::I32, dims, widen(want)));
  }
  {  // a per-row vector expanded over a's batch dims; the zero points as initializers
    const Tensor a = random_int8(DType::U8, {2, 3, 6}, 7), b = random_int8(DType::I8, {6, 2}, 8);
    const Tensor za = random_int8(DType::U8, {3}, 9), zb = random_int8(DType::I8, {1}, 10);
    Model m(10);
    m.add("A", a).add("B", b).add("za", za, true).add("zb", zb, true);
    m.b.node("MatMulInteger", {"A", "B", "za", "zb"}, {"Y"});
    std::vector<int64_t> za_rows;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t v : int_values(za)) za_rows.push_back(v);
    std::vector<int64_t> dims;
    const auto want = ref_matmul_integer({2, 3, 6}, int_values(a), {6, 2}, int_values(b), za_rows, int_values(zb), dims);
    EXPECT_TRUE(same_values(m.run("Y", DType::I32), DType::I32, dims, widen(want)));
  }
}

// Dynamic quantization's usual form: activations of symbolic batch and sequence dims, one zero
// point each, weights as an initializer.
TEST(OnnxMatMulInteger, SymbolicDims) {
  const Tensor a = random_int8(DType::U8, {2, 3, 40}, 1), b = random_int8(DType::I8, {40, 24}, 2);
  const Tensor za = random_int8(DType::U8, {}, 3), zb = random_int8(DType::I8, {}, 4);
  Model m(10);
  m.b.input("A", elem(DType::U8), {-1, -1, 40}, {"batch", "seq", ""});
  m.feeds.emplace_back("A", a);
  m.add("B", b, true).add("za", za).add("zb", zb, true);
  m.b.node("MatMulInteger", {"A", "B", "za", "zb"}, {"Y"});
  std::vector<int64_t> dims;
  const auto want = ref_matmul_integer({2, 3, 40}, int_values(a), {40, 24}, int_values(b), int_values(za),
                                       int_values(zb), dims);
  EXPECT_TRUE(same_values(m.run("Y", DType::I32), DType::I32, dims, widen(want)));
}

TEST(OnnxMatMulInteger, ErrorsNameTheNodeAndTheProblem) {
  auto err = [](const Tensor& a, const Tensor& b, std::vector<Tensor> zps) {
    Model m(10);
    m.add("A", a).add("B", b);
    std::vector<std::string> ins{"A", "B"};
    for (size_t i = 0; i < zps.size(); ++i) {
      m.add("z" + std::to_string(i), zps[i]);
      ins.push_back("z" + std::to_string(i));
    }
    m.b.node("MatMulInteger", ins, {"y"}, "mm");
    return import_error(m);
  };
  const Tensor a = random_int8(DType::U8, {4, 5}, 1), b = random_int8(DType::I8, {5, 3}, 2);
  const std::string f32 = err(Tensor::zeros(DType::F32, {4, 5}), b, {});
  EXPECT_THAT(f32, HasSubstr("ONNX node 'mm' (MatMulInteger"));
  EXPECT_THAT(f32, HasSubstr("A must be uint8 or int8"));
  EXPECT_THAT(err(a, Tensor::zeros(DType::I32, {5, 3}), {}), HasSubstr("B must be uint8 or int8"));
  EXPECT_THAT(err(a, b, {random_int8(DType::I8, {}, 3)}), HasSubstr("must have the dtype of A"));
  EXPECT_THAT(err(a, b, {random_int8(DType::U8, {}, 3), random_int8(DType::U8, {}, 4)}),
              HasSubstr("must have the dtype of B"));
  EXPECT_THAT(err(a, b, {random_int8(DType::U8, {3}, 3)}), HasSubstr("one value per row of A"));
  EXPECT_THAT(err(a, b, {random_int8(DType::U8, {}, 3), random_int8(DType::I8, {5}, 4)}),
              HasSubstr("one value per column of B"));
  EXPECT_THAT(err(a, b, {random_int8(DType::U8, {4, 2}, 3)}), HasSubstr("a_zero_point"));
  const std::string k = err(a, random_int8(DType::I8, {6, 3}, 2), {});
  EXPECT_THAT(k, HasSubstr("'mm'"));
  EXPECT_THAT(k, HasSubstr("contracting dims differ"));
}

// ---- ConvInteger --------------------------------------------------------------------------
struct ConvSpec {
  std::vector<int64_t> x, w;
  std::map<std::string, std::vector<int64_t>> attrs;  // strides, pads, dilations, kernel_shape
  int64_t group = 1;
  std::string auto_pad;
  ConvGeometry geo;  // the explicit geometry the attributes mean (reference)
};

void set_conv_attrs(onnx::NodeProto& n, const ConvSpec& s) {
  for (const auto& [k, v] : s.attrs) set_attr(n, k, v);
  if (s.group != 1) set_attr(n, "group", s.group);
  if (!s.auto_pad.empty()) set_attr(n, "auto_pad", s.auto_pad);
}

void check_conv_integer(const ConvSpec& s, DType tx, DType tw, bool zx_given, bool per_channel, uint64_t seed) {
  SCOPED_TRACE("x " + dims_str(s.x) + " " + dtype_name(tx) + ", w " + dims_str(s.w) + " " + dtype_name(tw));
  const Tensor x = random_int8(tx, s.x, seed), w = random_int8(tw, s.w, seed + 1);
  const Tensor zx = random_int8(tx, {}, seed + 2);
  const Tensor zw = random_int8(tw, per_channel ? std::vector<int64_t>{s.w[0]} : std::vector<int64_t>{1}, seed + 3);
  Model m(10);
  m.add("x", x).add("w", w).add("zw", zw);
  if (zx_given) m.add("zx", zx);
  set_conv_attrs(m.b.node("ConvInteger", {"x", "w", zx_given ? "zx" : "", "zw"}, {"y"}, "conv"), s);
  std::vector<int64_t> dims;
  const auto want = ref_conv_integer(s.x, int_values(x), s.w, int_values(w), zx_given ? int_values(zx)[0] : 0,
                                     int_values(zw), s.geo, dims);
  EXPECT_TRUE(same_values(m.run("y", DType::I32), DType::I32, dims, widen(want)));
}

TEST(OnnxConvInteger, AttributesGroupsAndZeroPoints) {
  // The node suite's case: x_zero_point pads (padding reads it), per-channel w zero points.
  check_conv_integer({{1, 1, 3, 3}, {2, 1, 2, 2}, {{"pads", {1, 1, 1, 1}}}, 1, "", {{}, {1, 1, 1, 1}, {}}},
                     DType::U8, DType::U8, true, true, 1);
  // Strides, asymmetric pads, dilations, groups.
  check_conv_integer({{2, 4, 9, 8},
                      {6, 2, 3, 2},
                      {{"strides", {2, 1}}, {"pads", {1, 0, 2, 1}}, {"dilations", {1, 2}}, {"kernel_shape", {3, 2}}},
                      2,
                      "",
                      {{2, 1}, {1, 0, 2, 1}, {1, 2}, 2}},
                     DType::I8, DType::U8, true, true, 10);
  // auto_pad SAME_UPPER with stride 2 (9 -> 5 outputs: pads 1 + 1), SAME_LOWER (total 3: 2 + 1).
  check_conv_integer({{1, 3, 9, 9}, {4, 3, 3, 3}, {{"strides", {2, 2}}}, 1, "SAME_UPPER", {{2, 2}, {1, 1, 1, 1}, {}}},
                     DType::U8, DType::I8, true, false, 20);
  check_conv_integer({{1, 2, 6, 6}, {3, 2, 4, 4}, {}, 1, "SAME_LOWER", {{}, {2, 2, 1, 1}, {}}}, DType::U8, DType::I8,
                     false, true, 30);
  check_conv_integer({{1, 2, 6, 6}, {3, 2, 3, 3}, {}, 1, "VALID", {}}, DType::I8, DType::I8, true, false, 35);
  // 1-d without zero points, 3-d with dilation, depthwise.
  check_conv_integer({{1, 2, 11}, {3, 2, 3}, {{"strides", {3}}}, 1, "", {{3}, {}, {}}}, DType::U8, DType::U8, false,
                     false, 40);
  check_conv_integer({{1, 2, 5, 6, 7}, {2, 2, 2, 2, 3}, {{"dilations", {2, 1, 2}}, {"pads", {0, 1, 1, 1, 0, 2}}}, 1, "",
                      {{}, {0, 1, 1, 1, 0, 2}, {2, 1, 2}}},
                     DType::I8, DType::I8, true, true, 50);
  check_conv_integer({{1, 5, 8, 8}, {5, 1, 3, 3}, {{"pads", {1, 1, 1, 1}}}, 5, "", {{}, {1, 1, 1, 1}, {}, 5}},
                     DType::U8, DType::I8, true, true, 60);
}

TEST(OnnxConvInteger, ErrorsNameTheNodeAndTheProblem) {
  auto err = [](const Tensor& x, const Tensor& w, std::vector<std::pair<std::string, Tensor>> more, int64_t group = 1) {
    Model m(10);
    m.add("x", x).add("w", w);
    std::vector<std::string> ins{"x", "w"};
    for (auto& [name, t] : more) {
      if (!name.empty()) m.add(name, t);
      ins.push_back(name);
    }
    auto& n = m.b.node("ConvInteger", ins, {"y"}, "conv");
    if (group != 1) set_attr(n, "group", group);
    return import_error(m);
  };
  const Tensor x = random_int8(DType::U8, {1, 4, 6, 6}, 1), w = random_int8(DType::I8, {6, 4, 3, 3}, 2);
  const std::string f = err(Tensor::zeros(DType::F32, {1, 4, 6, 6}), w, {});
  EXPECT_THAT(f, HasSubstr("ONNX node 'conv' (ConvInteger"));
  EXPECT_THAT(f, HasSubstr("x must be uint8 or int8"));
  EXPECT_THAT(err(x, w, {{"zx", random_int8(DType::U8, {2}, 3)}}), HasSubstr("x_zero_point must be one value"));
  EXPECT_THAT(err(x, w, {{"zx", random_int8(DType::I8, {}, 3)}}), HasSubstr("must have the dtype of x"));
  EXPECT_THAT(err(x, w, {{"", Tensor()}, {"zw", random_int8(DType::I8, {4}, 3)}}),
              HasSubstr("one per output channel (6)"));
  EXPECT_THAT(err(x, w, {{"", Tensor()}, {"zw", random_int8(DType::U8, {6}, 3)}}), HasSubstr("must have the dtype of w"));
  EXPECT_THAT(err(x, w, {}, 4), HasSubstr("input channels 4 != weight channels 4 x group 4"));
  EXPECT_THAT(err(x, random_int8(DType::I8, {6, 4, 3}, 2), {}), HasSubstr("same rank"));
}

// ---- QLinearMatMul ------------------------------------------------------------------------
struct QmmSpec {
  std::vector<int64_t> a, b;
  DType ta, tb, ty;
  std::vector<int64_t> a_q, b_q;  // scale / zero point dims ({} = scalar)
  DType scale_t = DType::F32;
  int64_t opset = 10;
  bool init = false;  // scales and zero points as initializers
};

// The multiplier a_scale * b_scale / y_scale in the scales' type.
double multiplier(float sa, float sb, float sy, DType t) {
  if (t == DType::F16) return to_f16(to_f16(sa * sb) / sy);
  return static_cast<double>(sa * sb / sy);
}

void check_qlinear_matmul(const QmmSpec& s, uint64_t seed) {
  SCOPED_TRACE("a " + dims_str(s.a) + " " + dtype_name(s.ta) + ", b " + dims_str(s.b) + " " + dtype_name(s.tb) +
               " -> " + dtype_name(s.ty) + ", scales " + dtype_name(s.scale_t));
  const Tensor a = random_int8(s.ta, s.a, seed), b = random_int8(s.tb, s.b, seed + 1);
  const Tensor za = random_int8(s.ta, s.a_q, seed + 2), zb = random_int8(s.tb, s.b_q, seed + 3);
  const Tensor zy = random_ints(s.ty, {}, seed + 4, s.ty == DType::U8 ? 100 : -20, s.ty == DType::U8 ? 150 : 20);
  const Tensor sa_f = random_tensor(DType::F32, s.a_q, seed + 5, 0.01, 0.05);
  const Tensor sb_f = random_tensor(DType::F32, s.b_q, seed + 6, 0.01, 0.05);
  const Tensor sy_f = random_tensor(DType::F32, {}, seed + 7, 0.5, 2.0);
  const Tensor sa = sa_f.cast(s.scale_t), sb = sb_f.cast(s.scale_t), sy = sy_f.cast(s.scale_t);
  Model m(s.opset);
  m.add("a", a).add("sa", sa, s.init).add("za", za, s.init).add("b", b).add("sb", sb, s.init).add("zb", zb, s.init);
  m.add("sy", sy, s.init).add("zy", zy, s.init);
  m.b.node("QLinearMatMul", {"a", "sa", "za", "b", "sb", "zb", "sy", "zy"}, {"y"}, "qmm");
  // Per-row / per-column values as the exact sum's zero points; their scales by row and column.
  std::vector<int64_t> dims;
  const auto acc = ref_matmul_integer(s.a, int_values(a), s.b, int_values(b), int_values(za), int_values(zb), dims);
  const auto sav = sa.to_f64(), sbv = sb.to_f64();
  const int64_t M = s.a[s.a.size() - 2], N = s.b.back();
  std::vector<int64_t> want;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t col = static_cast<int64_t>(i) % N, row = static_cast<int64_t>(i) / N;  // row over every batch
    const size_t ia = sav.size() == 1 ? 0 : static_cast<size_t>(row % (static_cast<int64_t>(sav.size())));
    const size_t ib = sbv.size() == 1 ? 0 : static_cast<size_t>((row / M * N + col) % static_cast<int64_t>(sbv.size()));
    const double mult = multiplier(static_cast<float>(sav[ia]), static_cast<float>(sbv[ib]),
                                   static_cast<float>(sy.to_f64()[0]), s.scale_t);
    want.push_back(requant(acc[i], mult, int_values(zy)[0], s.ty));
  }
  EXPECT_TRUE(same_values(m.run("y", s.ty), s.ty, dims, want));
}

TEST(OnnxQLinearMatMul, PerTensorPerRowPerColumnAndScaleTypes) {
  uint64_t seed = 1;
  check_qlinear_matmul({{5, 23}, {23, 7}, DType::U8, DType::U8, DType::U8, {}, {}}, seed += 10);
  check_qlinear_matmul({{5, 23}, {23, 7}, DType::I8, DType::U8, DType::I8, {}, {}, DType::F32, 10, true}, seed += 10);
  check_qlinear_matmul({{2, 4, 9}, {2, 9, 3}, DType::I8, DType::I8, DType::U8, {2, 4, 1}, {2, 1, 3}}, seed += 10);
  check_qlinear_matmul({{6, 9}, {9, 5}, DType::U8, DType::I8, DType::I8, {6}, {5}}, seed += 10);
  check_qlinear_matmul({{3, 2, 8}, {8, 4}, DType::U8, DType::U8, DType::U8, {}, {}, DType::F16, 21}, seed += 10);
  check_qlinear_matmul({{3, 2, 8}, {8, 4}, DType::I8, DType::U8, DType::U8, {}, {}, DType::F32, 21, true}, seed += 10);
}

// acc * 1 / 2 at k + 0.5 rounds to the even neighbour; sums past the range saturate.
TEST(OnnxQLinearMatMul, RoundsHalfToEvenAndSaturates) {
  Model m(10);
  m.add("a", Tensor::of<uint8_t>({6, 1}, std::vector<uint8_t>{1, 3, 5, 7, 0, 255}));
  m.add("b", Tensor::of<uint8_t>({1, 1}, std::vector<uint8_t>{1}));
  m.add("sa", Tensor::scalar_f32(1)).add("sb", Tensor::scalar_f32(1)).add("sy", Tensor::scalar_f32(2));
  m.add("za", Tensor::of<uint8_t>({}, std::vector<uint8_t>{0})).add("zb", Tensor::of<uint8_t>({}, std::vector<uint8_t>{0}));
  m.add("zy", Tensor::of<int8_t>({}, std::vector<int8_t>{-10}));
  m.b.node("QLinearMatMul", {"a", "sa", "za", "b", "sb", "zb", "sy", "zy"}, {"y"});
  // 0.5, 1.5, 2.5, 3.5 -> 0, 2, 2, 4 (then -10); 0 -> -10; 127.5 - 10 -> 118 (117.5 to even).
  EXPECT_TRUE(same_values(m.run("y", DType::I8), DType::I8, {6, 1}, {-10, -8, -8, -6, -10, 118}));
  Model s(10);
  s.add("a", Tensor::of<int8_t>({2, 2}, std::vector<int8_t>{127, 127, -128, -128}));
  s.add("b", Tensor::of<int8_t>({2, 1}, std::vector<int8_t>{127, 127}));
  s.add("sa", Tensor::scalar_f32(1)).add("sb", Tensor::scalar_f32(1)).add("sy", Tensor::scalar_f32(1));
  s.add("za", Tensor::of<int8_t>({}, std::vector<int8_t>{0})).add("zb", Tensor::of<int8_t>({}, std::vector<int8_t>{0}));
  s.add("zy", Tensor::of<uint8_t>({}, std::vector<uint8_t>{3}));
  s.b.node("QLinearMatMul", {"a", "sa", "za", "b", "sb", "zb", "sy", "zy"}, {"y"});
  EXPECT_TRUE(same_values(s.run("y", DType::U8), DType::U8, {2, 1}, {255, 0}));
}

TEST(OnnxQLinearMatMul, ErrorsNameTheNodeAndTheProblem) {
  struct Q {
    Tensor sa = Tensor::scalar_f32(0.1f), za = Tensor::of<uint8_t>({}, std::vector<uint8_t>{1});
    Tensor sb = Tensor::scalar_f32(0.1f), zb = Tensor::of<int8_t>({}, std::vector<int8_t>{1});
    Tensor sy = Tensor::scalar_f32(0.3f), zy = Tensor::of<uint8_t>({}, std::vector<uint8_t>{1});
    Tensor a = Tensor::zeros(DType::U8, {4, 5}), b = Tensor::zeros(DType::I8, {5, 3});
    int64_t opset = 10;
  };
  auto err = [](const Q& q) {
    Model m(q.opset);
    m.add("a", q.a).add("sa", q.sa).add("za", q.za).add("b", q.b).add("sb", q.sb).add("zb", q.zb);
    m.add("sy", q.sy).add("zy", q.zy);
    m.b.node("QLinearMatMul", {"a", "sa", "za", "b", "sb", "zb", "sy", "zy"}, {"y"}, "qmm");
    return import_error(m, q.zy.dtype());
  };
  Q q;
  q.a = Tensor::zeros(DType::F32, {4, 5});
  const std::string f = err(q);
  EXPECT_THAT(f, HasSubstr("ONNX node 'qmm' (QLinearMatMul"));
  EXPECT_THAT(f, HasSubstr("a must be uint8 or int8"));
  q = Q{};
  q.zy = Tensor::i32({}, std::vector<int32_t>{0});
  EXPECT_THAT(err(q), HasSubstr("y_zero_point must be uint8 or int8"));
  q = Q{};
  q.za = Tensor::of<int8_t>({}, std::vector<int8_t>{1});
  EXPECT_THAT(err(q), HasSubstr("must have the dtype of a"));
  q = Q{};
  q.sy = f32s({2}, {1, 1});
  EXPECT_THAT(err(q), HasSubstr("y_scale must be one value"));
  q = Q{};
  q.sa = f32s({4}, {1, 1, 1, 1});
  EXPECT_THAT(err(q), HasSubstr("must have the same shape"));
  q = Q{};
  q.sa = f32s({3}, {1, 1, 1});
  q.za = Tensor::zeros(DType::U8, {3});
  EXPECT_THAT(err(q), HasSubstr("one value per row of a"));
  q = Q{};
  q.sa = Tensor::scalar_f32(0.1f).cast(DType::F16);
  EXPECT_THAT(err(q), HasSubstr("a_scale must be float32"));  // opset 10: float only
  q.opset = 21;
  EXPECT_THAT(err(q), HasSubstr("must have one type"));
  q = Q{};
  q.b = Tensor::zeros(DType::I8, {6, 3});
  EXPECT_THAT(err(q), HasSubstr("contracting dims differ"));
}

// ---- QLinearConv --------------------------------------------------------------------------
void check_qlinear_conv(const ConvSpec& s, DType tx, DType tw, DType ty, bool per_channel, bool bias, bool init,
                        uint64_t seed) {
  SCOPED_TRACE("x " + dims_str(s.x) + " " + dtype_name(tx) + ", w " + dims_str(s.w) + " " + dtype_name(tw) + " -> " +
               dtype_name(ty));
  const int64_t M = s.w[0];
  const std::vector<int64_t> qd = per_channel ? std::vector<int64_t>{M} : std::vector<int64_t>{};
  const Tensor x = random_int8(tx, s.x, seed), w = random_int8(tw, s.w, seed + 1);
  const Tensor zx = random_int8(tx, {}, seed + 2), zw = random_int8(tw, qd, seed + 3);
  const Tensor zy = random_ints(ty, {}, seed + 4, ty == DType::U8 ? 100 : -20, ty == DType::U8 ? 150 : 20);
  const Tensor sx = random_tensor(DType::F32, {}, seed + 5, 0.01, 0.05);
  const Tensor sw = random_tensor(DType::F32, qd, seed + 6, 0.01, 0.05);
  const Tensor sy = random_tensor(DType::F32, {}, seed + 7, 2.0, 8.0);
  const Tensor bt = random_ints(DType::I32, {M}, seed + 8, -20000, 20000);
  Model m(10);
  m.add("x", x).add("sx", sx).add("zx", zx).add("w", w, init).add("sw", sw, init).add("zw", zw, init);
  m.add("sy", sy).add("zy", zy);
  std::vector<std::string> ins{"x", "sx", "zx", "w", "sw", "zw", "sy", "zy"};
  if (bias) {
    m.add("B", bt, init);
    ins.push_back("B");
  }
  set_conv_attrs(m.b.node("QLinearConv", ins, {"y"}, "qconv"), s);
  std::vector<int64_t> dims;
  const auto acc = ref_conv_integer(s.x, int_values(x), s.w, int_values(w), int_values(zx)[0], int_values(zw), s.geo, dims);
  const auto swv = sw.to_f64();
  const int64_t plane = product(dims) / (dims[0] * M);
  std::vector<int64_t> want;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t co = static_cast<int64_t>(i) / plane % M;
    const float s_w = static_cast<float>(swv[swv.size() == 1 ? 0 : static_cast<size_t>(co)]);
    const double mult = static_cast<double>(static_cast<float>(sx.to_f64()[0]) * s_w / static_cast<float>(sy.to_f64()[0]));
    const int64_t sum = wrap32(acc[i] + (bias ? int_values(bt)[static_cast<size_t>(co)] : 0));
    want.push_back(requant(sum, mult, int_values(zy)[0], ty));
  }
  EXPECT_TRUE(same_values(m.run("y", ty), ty, dims, want));
}

TEST(OnnxQLinearConv, PerChannelScalesBiasAndAttributes) {
  const ConvSpec plain{{1, 3, 7, 8}, {4, 3, 3, 3}, {{"pads", {1, 1, 1, 1}}}, 1, "", {{}, {1, 1, 1, 1}, {}}};
  check_qlinear_conv(plain, DType::U8, DType::I8, DType::U8, true, true, false, 1);
  check_qlinear_conv(plain, DType::I8, DType::U8, DType::I8, false, false, true, 11);
  const ConvSpec grouped{{2, 4, 9, 7},
                         {6, 2, 3, 2},
                         {{"strides", {2, 1}}, {"dilations", {1, 2}}},
                         2,
                         "SAME_UPPER",
                         {{2, 1}, {1, 1, 1, 1}, {1, 2}, 2}};
  check_qlinear_conv(grouped, DType::U8, DType::U8, DType::I8, true, true, true, 21);
  check_qlinear_conv({{1, 2, 12}, {3, 2, 5}, {{"pads", {2, 2}}}, 1, "", {{}, {2, 2}, {}}}, DType::I8, DType::I8,
                     DType::U8, true, true, false, 31);
}

TEST(OnnxQLinearConv, ErrorsNameTheNodeAndTheProblem) {
  struct Q {
    Tensor sx = Tensor::scalar_f32(0.1f), zx = Tensor::of<uint8_t>({}, std::vector<uint8_t>{1});
    Tensor sw = Tensor::scalar_f32(0.1f), zw = Tensor::of<int8_t>({}, std::vector<int8_t>{1});
    Tensor sy = Tensor::scalar_f32(0.3f), zy = Tensor::of<uint8_t>({}, std::vector<uint8_t>{1});
    Tensor x = Tensor::zeros(DType::U8, {1, 2, 5, 5}), w = Tensor::zeros(DType::I8, {4, 2, 3, 3});
    Tensor bias;
  };
  auto err = [](const Q& q) {
    Model m(10);
    m.add("x", q.x).add("sx", q.sx).add("zx", q.zx).add("w", q.w).add("sw", q.sw).add("zw", q.zw);
    m.add("sy", q.sy).add("zy", q.zy);
    std::vector<std::string> ins{"x", "sx", "zx", "w", "sw", "zw", "sy", "zy"};
    if (q.bias.defined() && q.bias.numel() > 0) {
      m.add("B", q.bias);
      ins.push_back("B");
    }
    m.b.node("QLinearConv", ins, {"y"}, "qc");
    return import_error(m, q.zy.dtype());
  };
  Q q;
  q.bias = Tensor::zeros(DType::F32, {4});
  const std::string f = err(q);
  EXPECT_THAT(f, HasSubstr("ONNX node 'qc' (QLinearConv"));
  EXPECT_THAT(f, HasSubstr("B must be int32 with one value per output channel (4)"));
  q.bias = Tensor::zeros(DType::I32, {3});
  EXPECT_THAT(err(q), HasSubstr("B must be int32"));
  q = Q{};
  q.sw = f32s({3}, {1, 1, 1});
  EXPECT_THAT(err(q), HasSubstr("w_scale must be one value or one per output channel (4)"));
  q = Q{};
  q.sx = f32s({2}, {1, 1});
  EXPECT_THAT(err(q), HasSubstr("x_scale must be one value"));
  q = Q{};
  q.zx = Tensor::zeros(DType::U8, {2});
  EXPECT_THAT(err(q), HasSubstr("x_zero_point must be one value"));
  q = Q{};
  q.zw = Tensor::zeros(DType::U8, {4});
  EXPECT_THAT(err(q), HasSubstr("must have the dtype of w"));
  q = Q{};
  q.sy = Tensor::scalar_f32(1).cast(DType::F16);
  EXPECT_THAT(err(q), HasSubstr("y_scale must be float32"));
}

}  // namespace
}  // namespace rlx
