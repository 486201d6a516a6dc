// ONNX import: models built with the onnx protobuf classes, imported, run on the CPU and
// compared with references computed here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "onnx/onnx_builder.h"
#include "passes/hoist.h"
#include "passes/pipeline.h"
#include "rlx/onnx.h"
#include "rlx/session.h"
#include "runtime/backend.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
constexpr int32_t kI64 = onnx::TensorProto::INT64;

Graph import(const OnnxBuilder& b, const OnnxImportOptions& o = {}) { return testing::import_built(b, o); }

size_t count_op(const Graph& g, const std::string& name) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += op_name(node.op) == name;
  return n;
}

// Conv + BatchNormalization + Relu with a weight over 4 KiB (imported as a Param) and a bias:
// the CPU pipeline folds the BatchNorm into the conv (the scaled weight and bias are computed by
// the weight prologue), and the run matches the unfolded graph's.
TEST(OnnxImport, BatchNormFoldsIntoAConvWithParamWeights) {
  OnnxBuilder b;
  b.input("x", kF32, {1, 8, 11, 13}).output("y");
  b.initializer("w", testing::random_tensor(DType::F32, {16, 8, 3, 3}, 1));  // 4.6 KiB: a Param
  b.initializer("cb", testing::random_tensor(DType::F32, {16}, 2));
  b.initializer("s", testing::random_tensor(DType::F32, {16}, 3, 0.5, 2));
  b.initializer("bb", testing::random_tensor(DType::F32, {16}, 4));
  b.initializer("m", testing::random_tensor(DType::F32, {16}, 5));
  b.initializer("v", testing::random_tensor(DType::F32, {16}, 6, 0.1, 2));
  auto& conv = b.node("Conv", {"x", "w", "cb"}, {"c"});
  set_attr(conv, "pads", std::vector<int64_t>{1, 1, 1, 1});
  set_attr(conv, "strides", std::vector<int64_t>{2, 1});
  set_attr(b.node("BatchNormalization", {"c", "s", "bb", "m", "v"}, {"n"}), "epsilon", 1e-3f);
  b.node("Relu", {"n"}, {"y"});
  const Graph g = import(b);
  ASSERT_EQ(count_op(g, "param"), 1u);  // the weight
  ASSERT_EQ(count_op(g, "batch_norm_inference"), 1u);

  CompileOptions co;
  co.num_threads = 1;
  const auto cpu = make_cpu_backend(co);
  const passes::HoistedGraph h = passes::hoist_param_computations(passes::optimize_for_backend(g, *cpu, co));
  EXPECT_EQ(count_op(h.main, "batch_norm_inference"), 0u);
  EXPECT_EQ(count_op(h.main, "conv"), 1u);
  EXPECT_EQ(h.derived.size(), 1u);  // the scaled weight

  CompileOptions unfolded = co;
  unfolded.disabled_passes = {"fold_conv_affine"};
  const Tensor x = testing::random_tensor(DType::F32, {1, 8, 11, 13}, 7);
  CompiledGraph a = Session(Device::Cpu).compile(g, co);
  CompiledGraph r = Session(Device::Cpu).compile(g, unfolded);
  const Tensor ya = a.run({{"x", x}})[0], yr = r.run({{"x", x}})[0];
  const std::vector<double> va = ya.to_f64(), vr = yr.to_f64();
  ASSERT_EQ(va.size(), vr.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    worst = std::max(worst, std::abs(va[i] - vr[i]));
    scale = std::max(scale, std::abs(vr[i]));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LE(worst, 1e-5 * scale);
}

TEST(OnnxImport, ElementwiseWithSymbolicAndMissingDims) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, 3}, {"batch"}).input("y", kF32, {-1, 3}).output("z");
  b.node("Add", {"x", "y"}, {"s"});
  b.node("Relu", {"s"}, {"z"});
  // y's first dim has neither value nor name: it gets a generated symbol, which does not unify
  // with 'batch', so Add cannot broadcast them at import time.
  EXPECT_THAT(testing::error_message([&] { import(b); }), HasSubstr("y_d0"));

  OnnxBuilder ok;
  ok.input("x", kF32, {-1, 3}, {"batch"}).input("y", kF32, {1, 3}).output("z");
  ok.node("Add", {"x", "y"}, {"s"});
  ok.node("Relu", {"s"}, {"z"});
  const Graph g = import(ok);
  const auto& in = std::get<ops::Input>(g.node(g.input_nodes()[0]).op);
  EXPECT_EQ(in.shape.dims[0], Dim::symbol("batch"));
  const Tensor x = testing::random_tensor(DType::F32, {4, 3}, 1);
  const Tensor y = testing::random_tensor(DType::F32, {1, 3}, 2);
  const Tensor z = testing::run_cpu1(g, {{"x", x}, {"y", y}});
  const auto xv = x.to_f64(), yv = y.to_f64();
  std::vector<double> want;
  for (size_t i = 0; i < xv.size(); ++i) want.push_back(std::max(0.0, xv[i] + yv[i % 3]));
  EXPECT_TRUE(testing::all_close(z, {4, 3}, want));
}

TEST(OnnxImport, DimOverrideFixesASymbol) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, 2}, {"batch"}).output("y");
  b.node("Neg", {"x"}, {"y"});
  OnnxImportOptions o;
  o.dims["batch"] = 5;
  const Graph g = import(b, o);
  EXPECT_EQ(g.shape(g.outputs()[0]), Shape::of({5, 2}));
}

TEST(OnnxImport, InitializersBecomeParamsOrConstants) {
  OnnxBuilder b;
  std::vector<float> wv(64 * 32);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  const Tensor w = Tensor::f32({64, 32}, wv);  // 8 KiB: a Param
  const Tensor bias = Tensor::f32({32}, std::vector<float>(32, 0.5f));  // small: a Constant
  b.input("x", kF32, {2, 64}).output("y").initializer("w", w).initializer("b", bias);
  b.node("MatMul", {"x", "w"}, {"xw"});
  b.node("Add", {"xw", "b"}, {"y"});
  const Graph g = import(b);
  ASSERT_EQ(g.param_nodes().size(), 1u);
  EXPECT_EQ(std::get<ops::Param>(g.node(g.param_nodes()[0]).op).name, "w");
  ASSERT_TRUE(g.weights().count("w"));
  const Tensor x = testing::random_tensor(DType::F32, {2, 64}, 3);
  const Tensor y = testing::run_cpu1(g, {{"x", x}});
  const auto xv = x.to_f64();
  std::vector<double> want(64, 0.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 32; ++j) {
      double s = 0.5;
      for (int64_t k = 0; k < 64; ++k) s += xv[static_cast<size_t>(i * 64 + k)] * wv[static_cast<size_t>(k * 32 + j)];
      want[static_cast<size_t>(i * 32 + j)] = s;
    }
  EXPECT_TRUE(testing::all_close(y, {2, 32}, want));
}

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds away on a static input.
OnnxBuilder flatten_tail_model(const std::vector<int64_t>& dims, const std::vector<std::string>& syms) {
  OnnxBuilder b(13);
  b.input("x", kF32, dims, syms).output("y");
  b.initializer("zero", Tensor::scalar_i64(0)).initializer("axes0", Tensor::i64({1}, std::vector<int64_t>{0}));
  b.initializer("minus1", Tensor::i64({1}, std::vector<int64_t>{-1}));
  b.node("Shape", {"x"}, {"shape"});
  b.node("Gather", {"shape", "zero"}, {"n"});
  b.node("Unsqueeze", {"n", "axes0"}, {"n1"});
  set_attr(b.node("Concat", {"n1", "minus1"}, {"target"}), "axis", int64_t{0});
  b.node("Reshape", {"x", "target"}, {"y"});
  return b;
}

TEST(OnnxImport, ShapeChainFoldsOnStaticInput) {
  const Graph g = import(flatten_tail_model({2, 3, 4}, {}));
  EXPECT_EQ(count_op(g, "gather"), 0u);
  EXPECT_EQ(count_op(g, "concat"), 0u);
  EXPECT_EQ(count_op(g, "reshape"), 1u);
  EXPECT_EQ(g.shape(g.outputs()[0]), Shape::of({2, 12}));
  const Tensor x = testing::random_tensor(DType::F32, {2, 3, 4}, 4);
  const Tensor y = testing::run_cpu1(g, {{"x", x}});
  EXPECT_TRUE(testing::all_close(y, {2, 12}, x.to_f64()));
}

TEST(OnnxImport, ShapeChainKeepsSymbolicDims) {
  const Graph g = import(flatten_tail_model({-1, 3, 4}, {"batch"}));
  const Shape out = g.shape(g.outputs()[0]);
  ASSERT_EQ(out.rank(), 2);
  EXPECT_EQ(out.dims[0], Dim::symbol("batch"));
  EXPECT_EQ(out.dims[1], Dim(12));
  const Tensor x = testing::random_tensor(DType::F32, {5, 3, 4}, 5);
  const Tensor y = testing::run_cpu1(g, {{"x", x}});
  EXPECT_TRUE(testing::all_close(y, {5, 12}, x.to_f64()));
}

TEST(OnnxImport, UnsupportedOpNamesOpOpsetAndNode) {
  OnnxBuilder b(19);
  b.input("x", kF32, {2}).output("y");
  b.node("Frobnicate", {"x"}, {"y"}, "my_node");
  const std::string msg = testing::error_message([&] { import(b); });
  EXPECT_THAT(msg, HasSubstr("'Frobnicate'"));
  EXPECT_THAT(msg, HasSubstr("opset 19"));
  EXPECT_THAT(msg, HasSubstr("'my_node'"));
}

TEST(OnnxImport, RejectsOtherDomainsAndUnknownAttributes) {
  OnnxBuilder b;
  b.input("x", kF32, {2}).output("y");
  b.node("Relu", {"x"}, {"y"}).set_domain("com.example");
  EXPECT_THAT(testing::error_message([&] { import(b); }), HasSubstr("domain 'com.example'"));
  OnnxBuilder c;
  c.input("x", kF32, {2}).output("y");
  set_attr(c.node("Relu", {"x"}, {"y"}), "mystery", int64_t{1});
  EXPECT_THAT(testing::error_message([&] { import(c); }), HasSubstr("attribute 'mystery'"));
}

TEST(OnnxImport, MalformedInputIsAnError) {
  const std::string junk = "\x0a\xff\xff\xff\xff\x0f not a model";
  EXPECT_THAT(testing::error_message([&] { import_onnx_bytes(junk.data(), junk.size(), ""); }),
              HasSubstr("not a valid ONNX ModelProto"));
  OnnxBuilder b;
  b.input("x", kF32, {2}).output("y");
  auto* init = b.graph().add_initializer();
  init->set_name("w");
  init->set_data_type(kF32);
  init->add_dims(4);
  init->set_raw_data(std::string(7, '\0'));  // 4 floats need 16 bytes
  b.node("Add", {"x", "x"}, {"y"});
  EXPECT_THAT(testing::error_message([&] { import(b); }), HasSubstr("raw_data has 7 bytes"));
  EXPECT_THAT(testing::error_message([&] { import_onnx("/nonexistent/model.onnx"); }), HasSubstr("cannot open"));
}

TEST(OnnxImport, HugeDeclaredSizesAreErrorsNotAllocations) {
  OnnxBuilder b;
  b.input("x", kF32, {2}).output("y");
  auto* init = b.graph().add_initializer();
  init->set_name("w");
  init->set_data_type(kF32);
  init->add_dims(int64_t{1} << 33);  // no data at all
  b.node("Add", {"x", "x"}, {"y"});
  EXPECT_THAT(testing::error_message([&] { import(b); }), HasSubstr("holds 0 values"));

  OnnxBuilder c(13);
  c.input("x", kF32, {2}).output("y");
  c.initializer("shape", Tensor::i64({2}, std::vector<int64_t>{int64_t{1} << 20, int64_t{1} << 20}));
  c.node("ConstantOfShape", {"shape"}, {"y"});
  EXPECT_THAT(testing::error_message([&] { import(c); }), HasSubstr("would exceed"));
}

TEST(OnnxImport, RankMismatchesAreErrors) {
  OnnxBuilder b;
  b.input("x", kF32, {2, 3}).output("y");
  auto& n = b.node("MaxPool", {"x"}, {"y"});
  set_attr(n, "kernel_shape", std::vector<int64_t>{2, 2});
  set_attr(n, "auto_pad", std::string("SAME_UPPER"));
  EXPECT_THAT(testing::error_message([&] { import(b); }), HasSubstr("must have rank 4"));
}

TEST(OnnxImport, GemmWithTransposeAlphaBeta) {
  OnnxBuilder b;
  b.input("a", kF32, {3, 2}).input("b", kF32, {4, 3}).input("c", kF32, {4}).output("y");
  auto& n = b.node("Gemm", {"a", "b", "c"}, {"y"});
  set_attr(n, "transA", int64_t{1});
  set_attr(n, "transB", int64_t{1});
  set_attr(n, "alpha", 0.5f);
  set_attr(n, "beta", 2.0f);
  const Graph g = import(b);
  const Tensor A = testing::random_tensor(DType::F32, {3, 2}, 6), B = testing::random_tensor(DType::F32, {4, 3}, 7);
  const Tensor C = testing::random_tensor(DType::F32, {4}, 8);
  const Tensor y = testing::run_cpu1(g, {{"a", A}, {"b", B}, {"c", C}});
  const auto av = A.to_f64(), bv = B.to_f64(), cv = C.to_f64();
  std::vector<double> want;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 3; ++k) s += av[static_cast<size_t>(k * 2 + i)] * bv[static_cast<size_t>(j * 3 + k)];
      want.push_back(0.5 * s + 2.0 * cv[static_cast<size_t>(j)]);
    }
  EXPECT_TRUE(testing::all_close(y, {2, 4}, want));
}

TEST(OnnxImport, EinsumContractionAndTranspose) {
  OnnxBuilder b(12);
  b.input("a", kF32, {2, 3}).input("b", kF32, {3, 4}).output("y").output("t");
  set_attr(b.node("Einsum", {"a", "b"}, {"y"}), "equation", std::string("ij, jk -> ki"));
  set_attr(b.node("Einsum", {"a"}, {"t"}), "equation", std::string("ij->j"));
  const Graph g = import(b);
  const Tensor A = testing::random_tensor(DType::F32, {2, 3}, 9), B = testing::random_tensor(DType::F32, {3, 4}, 10);
  const auto outs = testing::run_cpu(g, {{"a", A}, {"b", B}});
  const auto av = A.to_f64(), bv = B.to_f64();
  std::vector<double> want, sums(3, 0.0);
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < 2; ++i) {
      double s = 0;
      for (int64_t j = 0; j < 3; ++j) s += av[static_cast<size_t>(i * 3 + j)] * bv[static_cast<size_t>(j * 4 + k)];
      want.push_back(s);
    }
  for (size_t i = 0; i < av.size(); ++i) sums[i % 3] += av[i];
  EXPECT_TRUE(testing::all_close(outs[0], {4, 2}, want));
  EXPECT_TRUE(testing::all_close(outs[1], {3}, sums));
}

TEST(OnnxImport, DftOfARealSignalMatchesTheDefinition) {
  OnnxBuilder b(17);
  b.input("x", kF32, {1, 5, 1}).output("y");
  b.node("DFT", {"x"}, {"y"});
  const Graph g = import(b);
  const std::vector<float> xv{1, -2, 0.5f, 3, -1};
  const Tensor y = testing::run_cpu1(g, {{"x", Tensor::f32({1, 5, 1}, xv)}});
  std::vector<double> want;
  for (int k = 0; k < 5; ++k) {
    double re = 0, im = 0;
    for (int n = 0; n < 5; ++n) {
      const double th = 2 * M_PI * k * n / 5.0;
      re += xv[static_cast<size_t>(n)] * std::cos(th);
      im -= xv[static_cast<size_t>(n)] * std::sin(th);
    }
    want.push_back(re);
    want.push_back(im);
  }
  EXPECT_TRUE(testing::all_close(y, {1, 5, 2}, want));
}

TEST(OnnxImport, GatherElementsAndScatterNDMatchReferences) {
  OnnxBuilder b(18);
  b.input("d", kF32, {2, 3}).input("i", kI64, {2, 2}).output("y");
  set_attr(b.node("GatherElements", {"d", "i"}, {"y"}), "axis", int64_t{1});
  const Graph g = import(b);
  const Tensor d = Tensor::f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const Tensor i = Tensor::i64({2, 2}, std::vector<int64_t>{2, 0, -1, 1});
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"d", d}, {"i", i}}), {2, 2}, {3, 1, 6, 5}));

  OnnxBuilder s(18);
  s.input("d", kF32, {4, 2}).input("i", kI64, {2, 1}).input("u", kF32, {2, 2}).output("y");
  s.node("ScatterND", {"d", "i", "u"}, {"y"});
  const Graph gs = import(s);
  const Tensor data = Tensor::f32({4, 2}, std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4});
  const Tensor idx = Tensor::i64({2, 1}, std::vector<int64_t>{3, 1});
  const Tensor upd = Tensor::f32({2, 2}, std::vector<float>{9, 8, 7, 6});
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(gs, {{"d", data}, {"i", idx}, {"u", upd}}), {4, 2},
                                 {1, 1, 7, 6, 3, 3, 9, 8}));
}

onnx::GraphProto branch(const std::string& op, const std::string& out) {
  OnnxBuilder b;
  b.output(out);
  b.node(op, {"x"}, {out});
  return b.graph();
}

TEST(OnnxImport, IfWithRunTimeConditionBecomesAnIrIf) {
  OnnxBuilder b(13);
  b.input("c", onnx::TensorProto::BOOL, {}).input("x", kF32, {3}).output("y");
  auto& n = b.node("If", {"c"}, {"y"});
  set_attr(n, "then_branch", branch("Neg", "t"));
  set_attr(n, "else_branch", branch("Abs", "e"));
  const Graph g = import(b);
  EXPECT_EQ(count_op(g, "if"), 1u);
  const Tensor x = Tensor::f32({3}, std::vector<float>{-1, 2, -3});
  const uint8_t yes = 1, no = 0;
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"c", Tensor::boolean({}, {&yes, 1})}, {"x", x}}), {3}, {1, -2, 3}));
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"c", Tensor::boolean({}, {&no, 1})}, {"x", x}}), {3}, {1, 2, 3}));
}

TEST(OnnxImport, LoopWithKnownTripCountUnrolls) {
  // body(i, cond, acc) -> (cond, acc + x)
  OnnxBuilder body;
  body.input("i", kI64, {}).input("cin", onnx::TensorProto::BOOL, {}).input("acc", kF32, {2});
  body.output("cout", onnx::TensorProto::BOOL).output("acc2");
  body.node("Identity", {"cin"}, {"cout"});
  body.node("Add", {"acc", "x"}, {"acc2"});
  OnnxBuilder b(13);
  b.input("x", kF32, {2}).output("y");
  b.initializer("m", Tensor::scalar_i64(3)).initializer("zero", Tensor::f32({2}, std::vector<float>{0, 0}));
  set_attr(b.node("Loop", {"m", "", "zero"}, {"y"}), "body", body.graph());
  const Graph g = import(b);
  EXPECT_EQ(count_op(g, "while"), 0u);
  const Tensor x = Tensor::f32({2}, std::vector<float>{1.5f, -2});
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"x", x}}), {2}, {4.5, -6}));
}

TEST(OnnxImport, ShapeOperandFromAGraphInputNeedsItsValue) {
  OnnxBuilder b(13);
  b.input("x", kF32, {2, 3}).input("shape", kI64, {2}).output("y");
  b.node("Reshape", {"x", "shape"}, {"y"});
  EXPECT_THAT(testing::error_message([&] { import(b); }), HasSubstr("must be known at import time"));
  OnnxImportOptions o;
  o.known_inputs["shape"] = Tensor::i64({2}, std::vector<int64_t>{3, 2});
  const Graph g = import(b, o);
  EXPECT_EQ(g.shape(g.outputs()[0]), Shape::of({3, 2}));
  o.known_inputs["nope"] = Tensor::scalar_i64(1);
  EXPECT_THAT(testing::error_message([&] { import(b, o); }), HasSubstr("'nope'"));
}

class OnnxExternalData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlx_onnx_ext_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream f(dir_ / "w.bin", std::ios::binary);
    const float v[4] = {1, 2, 3, 4};
    f.write("pad!", 4);
    f.write(reinterpret_cast<const char*>(v), sizeof v);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write_model(const std::string& location, const std::string& offset) {
    OnnxBuilder b;
    b.input("x", kF32, {4}).output("y");
    auto* kv = testing::external_f32_initializer(b, "w", 4, location).add_external_data();
    kv->set_key("offset");
    kv->set_value(offset);
    b.node("Mul", {"x", "w"}, {"y"});
    const std::string path = (dir_ / "model.onnx").string();
    std::ofstream(path, std::ios::binary) << b.bytes();
    return path;
  }
  fs::path dir_;
};

TEST_F(OnnxExternalData, LoadsRelativeToTheModel) {
  const Graph g = import_onnx(write_model("w.bin", "4"));
  const Tensor x = Tensor::f32({4}, std::vector<float>{1, 1, 2, 2});
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"x", x}}), {4}, {1, 2, 6, 8}));
}

TEST_F(OnnxExternalData, RejectsEscapesAndOutOfRangeOffsets) {
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("../w.bin", "0")); }), HasSubstr("leaves the model's folder"));
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("w.bin", "8")); }), HasSubstr("beyond the end"));
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("missing.bin", "0")); }), HasSubstr("cannot open"));
}

TEST(OnnxImport, TensorFileRoundTrip) {
  const fs::path p = fs::temp_directory_path() / ("rlx_onnx_tensor_" + std::to_string(::getpid()) + ".pb");
  const Tensor t = Tensor::i64({2, 2}, std::vector<int64_t>{1, -2, 3, -4});
  std::ofstream(p, std::ios::binary) << testing::to_proto(t).SerializeAsString();
  const Tensor back = load_onnx_tensor(p.string());
  EXPECT_EQ(back.dtype(), DType::I64);
  EXPECT_EQ(back.to_i64(), t.to_i64());
  fs::remove(p);
}

}  // namespace
}  // namespace rlx
