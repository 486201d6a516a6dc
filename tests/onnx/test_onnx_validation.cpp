// ONNX import validation: every malformed model is an rlx::Error naming the node, attribute,
// tensor or file (never a crash, hang, silently ignored attribute/input or wrapped value), and
// the valid variants of the same models still import. Each test builds its bad model here.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>

#include "onnx/onnx_builder.h"
#include "rlx/onnx.h"
#include "rlx/session.h"
#include "support/test_util.h"

namespace rlx {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
constexpr int32_t kI64 = onnx::TensorProto::INT64;

Graph import(const OnnxBuilder& b, const OnnxImportOptions& o = {}) { return testing::import_built(b, o); }

std::string import_error(const OnnxBuilder& b, const OnnxImportOptions& o = {}) {
  return testing::error_message([&] { import(b, o); });
}

Tensor i64s(const std::vector<int64_t>& v) { return Tensor::i64({static_cast<int64_t>(v.size())}, v); }

// x: f32[2,3] with values 1..6.
Tensor x23() { return Tensor::f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6}); }

// ---- attributes not valid at the model's opset (item 8) ----------------------

// A reduction of x[2,3] with `axes` = [1] given as an attribute at `opset`.
OnnxBuilder reduce_with_axes_attr(const std::string& op, int64_t opset) {
  OnnxBuilder b(opset);
  b.input("x", kF32, {2, 3}).output("y");
  auto& n = b.node(op, {"x"}, {"y"}, "red");
  set_attr(n, "axes", std::vector<int64_t>{1});
  set_attr(n, "keepdims", int64_t{0});
  return b;
}

TEST(OnnxValidation, AxesAttributeOfReductionsAfterItBecameAnInput) {
  const struct {
    const char* op;
    int64_t opset;
  } cases[] = {{"ReduceSum", 13}, {"ReduceMean", 18}, {"ReduceMax", 18}, {"ReduceMin", 18},
               {"ReduceProd", 18}, {"ReduceL2", 18}, {"ReduceLogSumExp", 20}, {"ReduceSumSquare", 18}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    const std::string msg = import_error(reduce_with_axes_attr(c.op, c.opset));
    EXPECT_THAT(msg, HasSubstr("ONNX node 'red'"));
    EXPECT_THAT(msg, HasSubstr("attribute 'axes'"));
    EXPECT_THAT(msg, HasSubstr("opset " + std::to_string(c.opset)));
  }
}

TEST(OnnxValidation, AxesAttributeBeforeItBecameAnInputStillWorks) {
  const Graph g = import(reduce_with_axes_attr("ReduceSum", 11));
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"x", x23()}}), {2}, {6, 15}));
  const Graph m = import(reduce_with_axes_attr("ReduceMean", 17));
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(m, {{"x", x23()}}), {2}, {2, 5}));
  // The input form at opset 13.
  OnnxBuilder b(13);
  b.input("x", kF32, {2, 3}).output("y").initializer("axes", i64s({1}));
  set_attr(b.node("ReduceSum", {"x", "axes"}, {"y"}), "keepdims", int64_t{0});
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(import(b), {{"x", x23()}}), {2}, {6, 15}));
}

TEST(OnnxValidation, SqueezeUnsqueezeSplitReshapeAttributesAtTheWrongOpset) {
  {
    OnnxBuilder b(13);
    b.input("x", kF32, {1, 3}).output("y");
    set_attr(b.node("Squeeze", {"x"}, {"y"}, "sq"), "axes", std::vector<int64_t>{0});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'sq'"), HasSubstr("attribute 'axes'"), HasSubstr("opset 13")));
  }
  {
    OnnxBuilder b(13);
    b.input("x", kF32, {3}).output("y");
    set_attr(b.node("Unsqueeze", {"x"}, {"y"}, "unsq"), "axes", std::vector<int64_t>{0});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'unsq'"), HasSubstr("attribute 'axes'"), HasSubstr("opset 13")));
  }
  {
    OnnxBuilder b(13);
    b.input("x", kF32, {4}).output("a").output("b");
    set_attr(b.node("Split", {"x"}, {"a", "b"}, "sp"), "split", std::vector<int64_t>{1, 3});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'sp'"), HasSubstr("attribute 'split'"), HasSubstr("opset 13")));
  }
  {
    OnnxBuilder b(17);  // num_outputs exists from opset 18
    b.input("x", kF32, {4}).output("a").output("b");
    set_attr(b.node("Split", {"x"}, {"a", "b"}, "sp"), "num_outputs", int64_t{2});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("attribute 'num_outputs'"), HasSubstr("opset 17")));
  }
  {
    OnnxBuilder b(14);
    b.input("x", kF32, {2, 3}).output("y").initializer("s", i64s({3, 2}));
    set_attr(b.node("Reshape", {"x", "s"}, {"y"}, "rs"), "shape", std::vector<int64_t>{6});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'rs'"), HasSubstr("attribute 'shape'"), HasSubstr("opset 14")));
  }
  {
    OnnxBuilder b(13);
    b.input("x", kF32, {4}).output("y").initializer("k", i64s({2}));
    b.output("i", kI64);
    set_attr(b.node("TopK", {"x", "k"}, {"y", "i"}, "tk"), "k", int64_t{3});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'tk'"), HasSubstr("attribute 'k'")));
  }
  {
    OnnxBuilder b(12);
    b.input("x", kF32, {4}).output("y");
    set_attr(b.node("Clip", {"x"}, {"y"}, "cl"), "max", 1.0f);
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'cl'"), HasSubstr("attribute 'max'"), HasSubstr("opset 12")));
  }
}

TEST(OnnxValidation, OpsBeforeTheOpsetThatIntroducedThem) {
  OnnxBuilder b(13);
  b.input("x", kF32, {2, 3}).output("y");
  b.node("Gelu", {"x"}, {"y"}, "too_early");
  EXPECT_THAT(import_error(b), AllOf(HasSubstr("'too_early'"), HasSubstr("does not exist at opset 13"),
                                     HasSubstr("introduced in opset 20")));
  OnnxBuilder ok(20);
  ok.input("x", kF32, {2, 3}).output("y");
  ok.node("Gelu", {"x"}, {"y"});
  EXPECT_NO_THROW(import(ok));
}

TEST(OnnxValidation, AttributesNoConverterReadsAreErrors) {
  // Relu, Add and MatMul have no attributes; Softmax has only axis.
  for (const char* op : {"Relu", "Add", "MatMul", "Softmax", "Transpose", "Concat"}) {
    SCOPED_TRACE(op);
    OnnxBuilder b(17);
    b.input("x", kF32, {2, 2}).output("y");
    const std::string sop(op);
    const bool binary = sop == "Add" || sop == "MatMul";
    auto& n = b.node(op, binary ? std::vector<std::string>{"x", "x"} : std::vector<std::string>{"x"}, {"y"}, "n1");
    if (sop == "Concat") set_attr(n, "axis", int64_t{0});
    set_attr(n, "mystery", int64_t{1});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'n1'"), HasSubstr("attribute 'mystery'"), HasSubstr("opset 17")));
  }
}

TEST(OnnxValidation, AttributeTypesMustMatch) {
  {
    // Softmax's axis as a float.
    OnnxBuilder b(17);
    b.input("x", kF32, {2, 3}).output("y");
    set_attr(b.node("Softmax", {"x"}, {"y"}, "sm"), "axis", 1.0f);
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'sm'"), HasSubstr("'axis'"), HasSubstr("int")));
  }
  {
    // Declared INT but holding a float value.
    OnnxBuilder b(17);
    b.input("x", kF32, {2, 3}).output("y");
    auto* a = b.node("Softmax", {"x"}, {"y"}, "sm").add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_f(1.0f);
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'sm'"), HasSubstr("'axis'"), HasSubstr("declared INT"),
                                       HasSubstr("FLOAT")));
  }
  {
    // No type at all.
    OnnxBuilder b(17);
    b.input("x", kF32, {2, 3}).output("y");
    auto* a = b.node("Softmax", {"x"}, {"y"}, "sm").add_attribute();
    a->set_name("axis");
    a->set_i(1);
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'axis'"), HasSubstr("no type")));
  }
  {
    // The same attribute twice (which one wins would be arbitrary).
    OnnxBuilder b(17);
    b.input("x", kF32, {2, 3}).output("y");
    auto& n = b.node("Softmax", {"x"}, {"y"}, "sm");
    set_attr(n, "axis", int64_t{0});
    set_attr(n, "axis", int64_t{1});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'sm'"), HasSubstr("'axis'"), HasSubstr("twice")));
  }
  {
    // Gemm's transB as a list of ints.
    OnnxBuilder b(17);
    b.input("a", kF32, {2, 2}).input("b", kF32, {2, 2}).output("y");
    set_attr(b.node("Gemm", {"a", "b"}, {"y"}, "gm"), "transB", std::vector<int64_t>{1});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'gm'"), HasSubstr("'transB'")));
  }
}

// ---- extra inputs (item 9) ----------------------------------------------------

TEST(OnnxValidation, ExtraInputsAreErrors) {
  const struct {
    const char* op;
    std::vector<std::string> ins;
    size_t extra;
  } cases[] = {{"Relu", {"x", "x"}, 1}, {"Add", {"x", "x", "x"}, 2}, {"MatMul", {"x", "x", "x"}, 2},
               {"Neg", {"x", "x"}, 1}, {"Sigmoid", {"x", "x"}, 1}, {"Transpose", {"x", "x"}, 1}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    OnnxBuilder b(17);
    b.input("x", kF32, {2, 2}).output("y");
    b.node(c.op, c.ins, {"y"}, "extra");
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("ONNX node 'extra'"), HasSubstr("input " + std::to_string(c.extra)),
                                       HasSubstr("the node has " + std::to_string(c.ins.size()) + " inputs")));
  }
  // The valid forms compute what they should.
  OnnxBuilder b(17);
  b.input("x", kF32, {2, 3}).output("y");
  b.node("Add", {"x", "x"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(import(b), {{"x", x23()}}), {2, 3}, {2, 4, 6, 8, 10, 12}));
}

TEST(OnnxValidation, ExtraOutputsAreErrors) {
  OnnxBuilder b(17);
  b.input("x", kF32, {2, 2}).output("y");
  b.node("Relu", {"x"}, {"y", "z"}, "two_outs");
  EXPECT_THAT(import_error(b), AllOf(HasSubstr("'two_outs'"), HasSubstr("output 1 ('z')")));
}

// ---- graph-level validity (item 10) -------------------------------------------

TEST(OnnxValidation, NamesAreDefinedOnce) {
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).output("y");
    b.node("Neg", {"x"}, {"y"}, "first");
    b.node("Relu", {"x"}, {"y"}, "second");
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'second'"), HasSubstr("'y'"), HasSubstr("already defined")));
  }
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).output("x");
    b.node("Neg", {"x"}, {"x"}, "self");
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'self'"), HasSubstr("'x'"), HasSubstr("own input")));
  }
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).input("z", kF32, {2}).output("z");
    b.node("Neg", {"x"}, {"z"}, "over_input");
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'over_input'"), HasSubstr("'z'"), HasSubstr("already defined")));
  }
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).output("y").initializer("w", Tensor::f32({2}, std::vector<float>{1, 2}));
    b.node("Neg", {"x"}, {"w"}, "over_init");
    b.node("Add", {"x", "w"}, {"y"});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'over_init'"), HasSubstr("'w'"), HasSubstr("already defined")));
  }
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).output("y");
    b.initializer("w", Tensor::f32({2}, std::vector<float>{1, 2}));
    b.initializer("w", Tensor::f32({2}, std::vector<float>{3, 4}));
    b.node("Add", {"x", "w"}, {"y"});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("initializer 'w'"), HasSubstr("twice")));
  }
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).input("x", kF32, {3}).output("y");
    b.node("Neg", {"x"}, {"y"});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("graph input 'x'"), HasSubstr("twice")));
  }
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).output("y");
    b.node("Split", {"x"}, {"y", "y"}, "dup_out");
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'dup_out'"), HasSubstr("'y'"), HasSubstr("twice")));
  }
  {
    // Inside a subgraph body too.
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).output("y").initializer("c", Tensor::from_bytes(DType::Bool, {}, "\1", 1));
    onnx::GraphProto body;
    body.set_name("then");
    auto* n1 = body.add_node();
    n1->set_op_type("Neg");
    n1->add_input("x");
    n1->add_output("t");
    auto* n2 = body.add_node();
    n2->set_op_type("Relu");
    n2->set_name("body_dup");
    n2->add_input("x");
    n2->add_output("t");
    body.add_output()->set_name("t");
    auto& n = b.node("If", {"c"}, {"y"}, "if");
    set_attr(n, "then_branch", body);
    set_attr(n, "else_branch", body);
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'body_dup'"), HasSubstr("'t'")));
  }
}

// A tensor of `type` with `values` in int32_data.
onnx::TensorProto int32_data_tensor(const std::string& name, int32_t type, const std::vector<int32_t>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (int32_t v : values) t.add_int32_data(v);
  return t;
}

OnnxBuilder with_initializer(const onnx::TensorProto& t) {
  OnnxBuilder b(17);
  b.output("y", t.data_type());
  *b.graph().add_initializer() = t;
  b.node("Identity", {t.name()}, {"y"});
  return b;
}

TEST(OnnxValidation, Int32DataOutOfRangeIsAnError) {
  using TP = onnx::TensorProto;
  const struct {
    int32_t type;
    std::vector<int32_t> values;
    size_t bad;
    const char* bad_text;
  } cases[] = {{TP::INT8, {1, 300, 2}, 1, "300"},      {TP::UINT8, {0, 255, 300}, 2, "300"},
               {TP::UINT8, {-1}, 0, "-1"},             {TP::INT8, {-129}, 0, "-129"},
               {TP::INT16, {5, 40000}, 1, "40000"},    {TP::FLOAT16, {70000}, 0, "70000"},
               {TP::BFLOAT16, {0, -1}, 1, "-1"},       {TP::BOOL, {0, 1, 2}, 2, "2"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.type);
    const std::string msg = import_error(with_initializer(int32_data_tensor("q", c.type, c.values)));
    EXPECT_THAT(msg, AllOf(HasSubstr("initializer 'q'"), HasSubstr("element " + std::to_string(c.bad)),
                           HasSubstr(c.bad_text), HasSubstr("does not fit")));
  }
  {
    onnx::TensorProto t;
    t.set_name("u");
    t.set_data_type(TP::UINT32);
    t.add_dims(2);
    t.add_uint64_data(1);
    t.add_uint64_data(uint64_t{1} << 32);
    EXPECT_THAT(import_error(with_initializer(t)),
                AllOf(HasSubstr("initializer 'u'"), HasSubstr("element 1"), HasSubstr("4294967296")));
  }
  // In range: imported exactly.
  const Graph g = import(with_initializer(int32_data_tensor("q", TP::INT8, {-128, 0, 127})));
  EXPECT_EQ(testing::run_cpu1(g, {}).to_i64(), (std::vector<int64_t>{-128, 0, 127}));
  const Graph u = import(with_initializer(int32_data_tensor("q", TP::UINT8, {0, 200, 255})));
  EXPECT_EQ(testing::run_cpu1(u, {}).to_i64(), (std::vector<int64_t>{0, 200, 255}));
}

TEST(OnnxValidation, ValuesInAFieldTheTypeDoesNotUse) {
  onnx::TensorProto t;
  t.set_name("mixed");
  t.set_data_type(kF32);
  t.add_dims(2);
  t.add_float_data(1);
  t.add_float_data(2);
  t.add_int64_data(7);
  EXPECT_THAT(import_error(with_initializer(t)),
              AllOf(HasSubstr("initializer 'mixed'"), HasSubstr("int64_data"), HasSubstr("float_data")));
  t.set_raw_data(std::string(8, '\0'));
  t.clear_int64_data();
  EXPECT_THAT(import_error(with_initializer(t)), AllOf(HasSubstr("initializer 'mixed'"), HasSubstr("raw_data")));
}

TEST(OnnxValidation, BoolBytesMustBeZeroOrOne) {
  onnx::TensorProto t;
  t.set_name("flags");
  t.set_data_type(onnx::TensorProto::BOOL);
  t.add_dims(3);
  t.set_raw_data(std::string("\x01\x00\x02", 3));
  EXPECT_THAT(import_error(with_initializer(t)),
              AllOf(HasSubstr("initializer 'flags'"), HasSubstr("element 2"), HasSubstr("not a BOOL")));
  t.set_raw_data(std::string("\x01\x00\x01", 3));
  EXPECT_EQ(testing::run_cpu1(import(with_initializer(t)), {}).to_i64(), (std::vector<int64_t>{1, 0, 1}));
}

TEST(OnnxValidation, InputsMustAgreeWithTheirInitializersAndOptions) {
  {
    OnnxBuilder b(17);
    b.input("w", kI64, {2}).output("y").initializer("w", Tensor::f32({2}, std::vector<float>{1, 2}));
    b.node("Neg", {"w"}, {"y"});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("graph input 'w'"), HasSubstr("INT64"), HasSubstr("FLOAT")));
  }
  {
    OnnxBuilder b(17);
    b.input("w", kF32, {3}).output("y").initializer("w", Tensor::f32({2}, std::vector<float>{1, 2}));
    b.node("Neg", {"w"}, {"y"});
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("graph input 'w'"), HasSubstr("shape")));
  }
  {
    OnnxBuilder b(17);
    b.input("x", kF32, {-1, 2}, {"batch"}).output("y");
    b.node("Neg", {"x"}, {"y"});
    OnnxImportOptions o;
    o.dims["batch"] = -3;
    EXPECT_THAT(import_error(b, o), AllOf(HasSubstr("'batch'"), HasSubstr("negative")));
  }
  {
    // A graph input whose declared shape is over the size policy.
    OnnxBuilder b(17);
    b.input("x", kF32, {int64_t{1} << 40, int64_t{1} << 40}).output("y");
    b.node("Neg", {"x"}, {"y"});
    EXPECT_THAT(import_error(b), HasSubstr("graph input 'x'"));
  }
}

// ---- opsets and IR versions (item 4) -------------------------------------------

OnnxBuilder neg_model(int64_t opset, int64_t ir = 8) {
  OnnxBuilder b(opset, ir);
  b.input("x", kF32, {2}).output("y");
  b.node("Neg", {"x"}, {"y"});
  return b;
}

TEST(OnnxValidation, OpsetAndIrVersionsMustBeValid) {
  for (int64_t opset : {0, -5}) {
    SCOPED_TRACE(opset);
    EXPECT_THAT(import_error(neg_model(opset)),
                AllOf(HasSubstr("version " + std::to_string(opset)), HasSubstr("not valid"), HasSubstr("opsets 1 to")));
  }
  EXPECT_THAT(import_error(neg_model(999)), AllOf(HasSubstr("opset 999"), HasSubstr("newer"), HasSubstr("opsets 1 to")));
  for (int64_t ir : {0, -1}) {
    SCOPED_TRACE(ir);
    EXPECT_THAT(import_error(neg_model(17, ir)),
                AllOf(HasSubstr("IR version " + std::to_string(ir)), HasSubstr("IR versions 1 to")));
  }
  EXPECT_THAT(import_error(neg_model(17, 99)), AllOf(HasSubstr("IR version 99"), HasSubstr("newer")));
  {
    OnnxBuilder b = neg_model(17);
    b.model().mutable_opset_import(0)->set_domain("com.example");
    EXPECT_THAT(import_error(b), HasSubstr("imports no opset of the default ai.onnx domain"));
  }
  {
    OnnxBuilder b = neg_model(17);
    auto* o = b.model().add_opset_import();
    o->set_domain("ai.onnx");
    o->set_version(13);
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'ai.onnx'"), HasSubstr("twice")));
  }
  {
    // A node of a domain the model does not import.
    OnnxBuilder b(17);
    b.input("x", kF32, {2}).output("y");
    b.node("Neg", {"x"}, {"y"}, "foreign").set_domain("com.nowhere");
    EXPECT_THAT(import_error(b), AllOf(HasSubstr("'foreign'"), HasSubstr("'com.nowhere'"),
                                       HasSubstr("not declared in the model's opset_import")));
  }
  // Valid ones import.
  for (int64_t opset : {7, 13, 17, 21}) EXPECT_NO_THROW(import(neg_model(opset)));
}

// ---- sizes of tensors (item 7) --------------------------------------------------

onnx::TensorProto float_tensor_with_dims(const std::string& name, const std::vector<int64_t>& dims) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(kF32);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(16, '\0'));
  return t;
}

TEST(OnnxValidation, HugeOrNegativeDimsAreErrorsNotWraps) {
  // 4611686018427387905 * 4 bytes wraps to 4 in 64 bits.
  EXPECT_THAT(import_error(with_initializer(float_tensor_with_dims("w", {4611686018427387905}))),
              HasSubstr("initializer 'w'"));
  EXPECT_THAT(import_error(with_initializer(float_tensor_with_dims("w", {int64_t{1} << 32, int64_t{1} << 32}))),
              HasSubstr("initializer 'w'"));
  EXPECT_THAT(import_error(with_initializer(float_tensor_with_dims("w", {-1, -4}))),
              AllOf(HasSubstr("initializer 'w'"), HasSubstr("negative")));
  // A tensor of 100000 dims: the message stays short.
  const std::string many = import_error(with_initializer(float_tensor_with_dims("w", std::vector<int64_t>(100000, 1))));
  EXPECT_THAT(many, AllOf(HasSubstr("initializer 'w'"), HasSubstr("100000 dims")));
  EXPECT_LT(many.size(), 1000u);
  // The size policy of the import's options is the one in force.
  OnnxImportOptions small;
  small.limits.max_tensor_elements = 3;
  EXPECT_THAT(import_error(with_initializer(float_tensor_with_dims("w", {4})), small), HasSubstr("initializer 'w'"));
  EXPECT_NO_THROW(import(with_initializer(float_tensor_with_dims("w", {4}))));
  // A Constant node's tensor.
  OnnxBuilder b(17);
  b.output("y");
  auto* a = b.node("Constant", {}, {"y"}, "big_const").add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  *a->mutable_t() = float_tensor_with_dims("", {4611686018427387905});
  EXPECT_THAT(import_error(b), AllOf(HasSubstr("'big_const'"), HasSubstr("'value'")));
}

// ---- nesting (item 8 of the brief: the size policy's nesting depth) -------------

// An If whose then_branch holds an If ... `depth` levels deep, every branch yielding x.
onnx::GraphProto nested_body(int level, int depth) {
  onnx::GraphProto g;
  g.set_name("b" + std::to_string(level));
  const std::string out = "o" + std::to_string(level);
  auto* n = g.add_node();
  if (level == depth) {
    n->set_op_type("Identity");
    n->add_input("x");
  } else {
    n->set_op_type("If");
    n->add_input("c");
    set_attr(*n, "then_branch", nested_body(level + 1, depth));
    set_attr(*n, "else_branch", nested_body(depth, depth));  // a leaf
  }
  n->add_output(out);
  g.add_output()->set_name(out);
  return g;
}

OnnxBuilder nested_model(int depth) {
  OnnxBuilder b(17);
  b.input("x", kF32, {2}).output("o0").initializer("c", Tensor::from_bytes(DType::Bool, {}, "\1", 1));
  auto& n = b.node("If", {"c"}, {"o0"}, "outer");
  set_attr(n, "then_branch", nested_body(1, depth));
  set_attr(n, "else_branch", nested_body(depth, depth));
  return b;
}

TEST(OnnxValidation, SubgraphNestingIsCapped) {
  const std::string msg = import_error(nested_model(300));
  EXPECT_THAT(msg, AllOf(HasSubstr("nested more than 256"), HasSubstr("max_nesting_depth")));
  OnnxImportOptions shallow;
  shallow.limits.max_nesting_depth = 3;
  EXPECT_THAT(import_error(nested_model(5), shallow), HasSubstr("nested more than 3"));
  const Graph g = import(nested_model(5));
  const Tensor x = Tensor::f32({2}, std::vector<float>{1.5f, -2});
  EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"x", x}}), {2}, {1.5, -2}));
}

// ---- names in messages (item 9) ---------------------------------------------------

TEST(OnnxValidation, ControlCharactersInNamesAreEscaped) {
  OnnxBuilder b(17);
  b.input("x", kF32, {2}).output("y");
  b.node("Relu", {"x", "x"}, {"y"}, "evil\x1b[2Jname\n");
  const std::string msg = import_error(b);
  EXPECT_THAT(msg, HasSubstr("evil\\x1b[2Jname\\n"));
  EXPECT_THAT(msg, Not(HasSubstr("\x1b")));
  OnnxBuilder c(17);
  c.input("x", kF32, {2}).output("y");
  c.node("Neg", {"no\x07pe"}, {"y"}, "n");
  EXPECT_THAT(import_error(c), AllOf(HasSubstr("no\\x07pe"), Not(HasSubstr("\x07"))));
}

// ---- files: the model and its external data (items 5 and 6) -----------------------

class OnnxValidationFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("rlx_onnx_val_" + std::to_string(::getpid()));
    dir_ = root_ / "model";
    fs::create_directories(dir_);
    const float v[4] = {1, 2, 3, 4};
    std::ofstream(dir_ / "w.bin", std::ios::binary).write(reinterpret_cast<const char*>(v), sizeof v);
    std::ofstream(root_ / "outside.bin", std::ios::binary).write(reinterpret_cast<const char*>(v), sizeof v);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  // model.onnx in dir_ with initializer 'w' (f32[4]) stored in `location`.
  std::string write_model(const std::string& location) {
    OnnxBuilder b(17);
    b.input("x", kF32, {4}).output("y");
    testing::external_f32_initializer(b, "w", 4, location);
    b.node("Mul", {"x", "w"}, {"y"});
    const std::string path = (dir_ / "model.onnx").string();
    std::ofstream(path, std::ios::binary) << b.bytes();
    return path;
  }
  // Runs fn on another thread; if it has not returned within 10 s (a blocked open of a FIFO),
  // opens the FIFO for writing to release it and fails the test instead of hanging the suite.
  std::string error_without_hang(const std::function<void()>& fn, const fs::path& fifo) {
    auto fut = std::async(std::launch::async, [&] { return testing::error_message(fn); });
    if (fut.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "reading a FIFO blocked";
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    return fut.get();
  }
  fs::path root_, dir_;
};

TEST_F(OnnxValidationFiles, ExternalDataMustBeARegularFileInsideTheFolder) {
  // A FIFO: an error at once, no hang.
  const fs::path fifo = dir_ / "fifo.bin";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string path = write_model("fifo.bin");
  EXPECT_THAT(error_without_hang([&] { import_onnx(path); }, fifo), AllOf(HasSubstr("FIFO"), HasSubstr("'w'")));
  // A symbolic link to a system file.
  fs::create_symlink("/etc/passwd", dir_ / "passwd.bin");
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("passwd.bin")); }),
              AllOf(HasSubstr("outside the folder"), HasSubstr("'w'")));
  // A symbolic link to a file outside the model's folder.
  fs::create_symlink(root_ / "outside.bin", dir_ / "link.bin");
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("link.bin")); }),
              AllOf(HasSubstr("outside the folder"), HasSubstr("link.bin")));
  // A symbolic link to a folder outside, then a file in it.
  fs::create_directory_symlink(root_, dir_ / "up");
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("up/outside.bin")); }),
              HasSubstr("outside the folder"));
  // A directory.
  fs::create_directory(dir_ / "sub");
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("sub")); }), HasSubstr("a directory"));
  // A missing file gives the OS reason.
  EXPECT_THAT(testing::error_message([&] { import_onnx(write_model("missing.bin")); }),
              HasSubstr("No such file or directory"));
  // Valid: a regular file, and a symbolic link that stays inside the folder.
  fs::create_symlink("w.bin", dir_ / "inside.bin");
  const Tensor x = Tensor::f32({4}, std::vector<float>{1, 1, 2, 2});
  for (const char* loc : {"w.bin", "inside.bin"}) {
    SCOPED_TRACE(loc);
    const Graph g = import_onnx(write_model(loc));
    EXPECT_TRUE(testing::all_close(testing::run_cpu1(g, {{"x", x}}), {4}, {1, 2, 6, 8}));
  }
}

TEST_F(OnnxValidationFiles, TheModelFileMustBeARegularFile) {
  EXPECT_THAT(testing::error_message([&] { import_onnx((dir_ / "nope.onnx").string()); }),
              AllOf(HasSubstr("nope.onnx"), HasSubstr("No such file or directory")));
  EXPECT_THAT(testing::error_message([&] { import_onnx(dir_.string()); }), HasSubstr("a directory"));
  const fs::path fifo = dir_ / "model_fifo.onnx";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(error_without_hang([&] { import_onnx(fifo.string()); }, fifo), HasSubstr("FIFO"));
  EXPECT_THAT(error_without_hang([&] { onnx_model_info(fifo.string()); }, fifo), HasSubstr("FIFO"));
  EXPECT_THAT(error_without_hang([&] { load_onnx_tensor(fifo.string()); }, fifo), HasSubstr("FIFO"));
}

TEST_F(OnnxValidationFiles, ModelInfoChecksInitializerSizes) {
  OnnxBuilder b(17);
  b.input("x", kF32, {2}).output("y");
  *b.graph().add_initializer() = float_tensor_with_dims("huge", {int64_t{1} << 40, int64_t{1} << 40});
  b.node("Neg", {"x"}, {"y"});
  const std::string path = (dir_ / "info.onnx").string();
  std::ofstream(path, std::ios::binary) << b.bytes();
  EXPECT_THAT(testing::error_message([&] { onnx_model_info(path); }), HasSubstr("initializer 'huge'"));
}

}  // namespace
}  // namespace rlx
