// Shape specialization of ONNX models (rlx::OnnxModel): models whose import needs concrete
// values of symbolic input dims (Conv and Pad output sizes, Slice ends and Range limits from
// Shape -> Gather, Equal on a shape value) run without hand-typed dims, each input-shape
// signature imported with its dims bound and compared with the CPU oracle of the same model
// imported with those dims given explicitly (OnnxImportOptions::dims, what `--dim` does).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "onnx/onnx_builder.h"
#include "rlx/onnx.h"
#include "rlx/session.h"
#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::OnnxBuilder;
using testing::set_attr;
constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
constexpr int32_t kI64 = onnx::TensorProto::INT64;

OnnxModel model_of(const OnnxBuilder& b, OnnxModelOptions o = {}) {
  const std::string bytes = b.bytes();
  return OnnxModel(bytes.data(), bytes.size(), "", std::move(o));
}

// The oracle: the model imported with `dims` bound explicitly, run on the CPU.
std::vector<Tensor> oracle(const OnnxBuilder& b, const std::map<std::string, int64_t>& dims, const NamedTensors& in) {
  OnnxImportOptions o;
  o.dims = dims;
  return testing::run_cpu(testing::import_built(b, o), in);
}

// Runs `b` at each input set through one OnnxModel and checks every output against the
// oracle bit for bit (the same graph computes both); the import without dims must fail with
// an OnnxDimsError naming the node `node`.
void expect_specializes(const OnnxBuilder& b, const std::string& node,
                        const std::vector<std::pair<std::map<std::string, int64_t>, NamedTensors>>& runs) {
  try {
    testing::import_built(b);
    ADD_FAILURE() << "the import without dims succeeded; the model does not need specialization";
  } catch (const OnnxDimsError& e) {
    EXPECT_THAT(e.node(), HasSubstr(node));
    EXPECT_THAT(std::string(e.what()), HasSubstr("--dim"));
  }
  OnnxModel m = model_of(b);
  for (const auto& [dims, in] : runs) {
    EXPECT_EQ(m.bind(in), dims);
    const auto got = m.run(in);
    const auto want = oracle(b, dims, in);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape());
      EXPECT_EQ(testing::to_doubles(got[i]), testing::to_doubles(want[i]));
    }
  }
  EXPECT_EQ(m.stats().imports, static_cast<int64_t>(runs.size()));
}

TEST(OnnxSpecialize, ConvOnSymbolicSpatialDims) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, 1, -1, -1}, {"n", "", "h", "w"}).output("y");
  b.initializer("k", testing::random_tensor(DType::F32, {2, 1, 3, 3}, 1));
  auto& conv = b.node("Conv", {"x", "k"}, {"y"}, "conv0");
  set_attr(conv, "strides", std::vector<int64_t>{2, 2});
  expect_specializes(b, "conv0",
                     {{{{"n", 1}, {"h", 7}, {"w", 7}}, {{"x", testing::random_tensor(DType::F32, {1, 1, 7, 7}, 2)}}},
                      {{{"n", 2}, {"h", 9}, {"w", 5}}, {{"x", testing::random_tensor(DType::F32, {2, 1, 9, 5}, 3)}}}});
  OnnxModel m = model_of(b);
  EXPECT_EQ(m.run({{"x", testing::random_tensor(DType::F32, {2, 1, 9, 5}, 3)}})[0].shape(),
            (std::vector<int64_t>{2, 2, 4, 2}));
}

TEST(OnnxSpecialize, PadOnASymbolicDim) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, 3}, {"seq"}).output("y");
  b.initializer("pads", Tensor::i64({4}, std::vector<int64_t>{1, 0, 2, 0}));
  b.node("Pad", {"x", "pads"}, {"y"}, "pad0");
  expect_specializes(b, "pad0",
                     {{{{"seq", 2}}, {{"x", testing::random_tensor(DType::F32, {2, 3}, 4)}}},
                      {{{"seq", 5}}, {{"x", testing::random_tensor(DType::F32, {5, 3}, 5)}}}});
}

// BERT's position embeddings: a constant table sliced to the sequence length, which comes
// from Shape -> Gather of the input.
TEST(OnnxSpecialize, SliceEndsFromShapeGather) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, -1}, {"batch", "seq"}).output("y");
  std::vector<float> table(16);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i) * 0.5f;
  b.initializer("pos", Tensor::f32({1, 16}, table));
  b.initializer("one", Tensor::i64({1}, std::vector<int64_t>{1}));
  b.initializer("zero", Tensor::i64({1}, std::vector<int64_t>{0}));
  b.node("Shape", {"x"}, {"shape"});
  b.node("Gather", {"shape", "one"}, {"seq_len"});
  b.node("Slice", {"pos", "zero", "seq_len", "one"}, {"pos_s"}, "slice_pos");
  b.node("Add", {"x", "pos_s"}, {"y"});
  const Tensor x = testing::random_tensor(DType::F32, {2, 3}, 6);
  expect_specializes(b, "slice_pos",
                     {{{{"batch", 2}, {"seq", 3}}, {{"x", x}}},
                      {{{"batch", 1}, {"seq", 7}}, {{"x", testing::random_tensor(DType::F32, {1, 7}, 7)}}}});
  // And by hand: y = x + pos[:seq].
  OnnxModel m = model_of(b);
  const auto y = m.run({{"x", x}})[0].to_f64();
  const auto xv = x.to_f64();
  for (size_t i = 0; i < xv.size(); ++i)
    EXPECT_FLOAT_EQ(static_cast<float>(y[i]), static_cast<float>(xv[i]) + 0.5f * static_cast<float>(i % 3));
}

// Llama's positions: Range(0, seq) with the limit from the input's shape.
TEST(OnnxSpecialize, RangeLimitFromAShape) {
  OnnxBuilder b;
  b.input("ids", kI64, {-1, -1}, {"batch", "seq"}).output("y", kI64);
  b.initializer("one_s", Tensor::scalar_i64(1));
  b.initializer("zero_s", Tensor::scalar_i64(0));
  b.node("Shape", {"ids"}, {"shape"});
  b.node("Gather", {"shape", "one_s"}, {"seq_len"});
  b.node("Range", {"zero_s", "seq_len", "one_s"}, {"positions"}, "range_pos");
  b.node("Add", {"ids", "positions"}, {"y"});
  const Tensor ids = Tensor::i64({2, 4}, std::vector<int64_t>{10, 20, 30, 40, 50, 60, 70, 80});
  expect_specializes(b, "range_pos",
                     {{{{"batch", 2}, {"seq", 4}}, {{"ids", ids}}},
                      {{{"batch", 1}, {"seq", 6}}, {{"ids", Tensor::i64({1, 6}, std::vector<int64_t>(6, 5))}}}});
  OnnxModel m = model_of(b);
  EXPECT_EQ(m.run({{"ids", ids}})[0].to_i64(), (std::vector<int64_t>{10, 21, 32, 43, 50, 61, 72, 83}));
}

// ViT's interpolation guard: Equal on the input's shape against constants.
TEST(OnnxSpecialize, EqualOnAShapeValue) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, -1}, {"h", "w"}).output("y", onnx::TensorProto::BOOL);
  b.initializer("want", Tensor::i64({2}, std::vector<int64_t>{4, 5}));
  b.node("Shape", {"x"}, {"shape"});
  b.node("Equal", {"shape", "want"}, {"y"}, "same_size");
  expect_specializes(b, "same_size",
                     {{{{"h", 4}, {"w", 3}}, {{"x", testing::random_tensor(DType::F32, {4, 3}, 8)}}},
                      {{{"h", 4}, {"w", 5}}, {{"x", testing::random_tensor(DType::F32, {4, 5}, 9)}}}});
  OnnxModel m = model_of(b);
  EXPECT_EQ(m.run({{"x", testing::random_tensor(DType::F32, {4, 3}, 8)}})[0].to_i64(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(m.run({{"x", testing::random_tensor(DType::F32, {2, 5}, 8)}})[0].to_i64(), (std::vector<int64_t>{0, 1}));
}

// BERT's embeddings and attention mask as torch.onnx.export writes them with dynamic batch and
// sequence axes (opset 17): word + position embeddings (positions sliced to the sequence
// length read from the ids' shape), LayerNorm, the extended additive mask, one attention.
TEST(OnnxSpecialize, PyTorchStyleBertEmbeddingsAndMask) {
  constexpr int64_t kE = 8;
  OnnxBuilder b(17);
  b.input("input_ids", kI64, {-1, -1}, {"batch", "sequence"})
      .input("attention_mask", kI64, {-1, -1}, {"batch", "sequence"})
      .output("y");
  std::vector<int64_t> positions(16);
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int64_t>(i);
  b.initializer("word_emb", testing::random_tensor(DType::F32, {30, kE}, 20));
  b.initializer("pos_emb", testing::random_tensor(DType::F32, {16, kE}, 21));
  b.initializer("position_ids", Tensor::i64({1, 16}, positions));
  b.initializer("gamma", testing::random_tensor(DType::F32, {kE}, 22, 0.5, 1.5));
  b.initializer("beta", testing::random_tensor(DType::F32, {kE}, 23));
  b.initializer("idx1", Tensor::scalar_i64(1));
  b.initializer("ax0", Tensor::i64({1}, std::vector<int64_t>{0}));
  b.initializer("ax1", Tensor::i64({1}, std::vector<int64_t>{1}));
  b.initializer("ax12", Tensor::i64({2}, std::vector<int64_t>{1, 2}));
  b.initializer("one", Tensor::scalar_f32(1.0f));
  b.initializer("neg", Tensor::scalar_f32(-10000.0f));
  b.node("Gather", {"word_emb", "input_ids"}, {"words"});
  b.node("Shape", {"input_ids"}, {"ids_shape"});
  b.node("Gather", {"ids_shape", "idx1"}, {"seq_len"});
  b.node("Unsqueeze", {"seq_len", "ax0"}, {"seq_end"});
  b.node("Slice", {"position_ids", "ax0", "seq_end", "ax1"}, {"pos_ids"}, "/embeddings/Slice");
  b.node("Gather", {"pos_emb", "pos_ids"}, {"pos"});
  b.node("Add", {"words", "pos"}, {"emb"});
  set_attr(b.node("LayerNormalization", {"emb", "gamma", "beta"}, {"e"}), "axis", int64_t{-1});
  b.node("Unsqueeze", {"attention_mask", "ax12"}, {"m4"});
  set_attr(b.node("Cast", {"m4"}, {"mf"}), "to", int64_t{onnx::TensorProto::FLOAT});
  b.node("Sub", {"one", "mf"}, {"inv"});
  b.node("Mul", {"inv", "neg"}, {"ext"});
  set_attr(b.node("Transpose", {"e"}, {"et"}), "perm", std::vector<int64_t>{0, 2, 1});
  b.node("MatMul", {"e", "et"}, {"scores"});
  b.node("Unsqueeze", {"scores", "ax1"}, {"s4"});
  b.node("Add", {"s4", "ext"}, {"masked"});
  set_attr(b.node("Softmax", {"masked"}, {"probs4"}), "axis", int64_t{-1});
  b.node("Squeeze", {"probs4", "ax1"}, {"probs"});
  b.node("MatMul", {"probs", "e"}, {"y"});
  auto feeds = [](int64_t batch, int64_t seq, uint64_t seed) {
    std::vector<int64_t> ids(static_cast<size_t>(batch * seq)), mask(ids.size(), 1);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + seed) % 30);
    mask.back() = 0;  // the last token of the last row is padding
    return NamedTensors{{"input_ids", Tensor::i64({batch, seq}, ids)}, {"attention_mask", Tensor::i64({batch, seq}, mask)}};
  };
  expect_specializes(b, "/embeddings/Slice",
                     {{{{"batch", 2}, {"sequence", 5}}, feeds(2, 5, 1)}, {{{"batch", 1}, {"sequence", 9}}, feeds(1, 9, 2)}});
}

// An If whose condition compares the input's shape with a constant (exporters' size guards):
// the condition is known once the dims are bound, and only the taken branch is imported.
TEST(OnnxSpecialize, IfOnAShapeConditionTakesTheBranchOfEachSignature) {
  auto branch = [](const std::string& op, const std::string& out) {
    OnnxBuilder body;
    body.output(out);
    body.node(op, {"x"}, {out});
    return body.graph();
  };
  OnnxBuilder b(13);
  b.input("x", kF32, {-1}, {"n"}).output("y");
  b.initializer("four", Tensor::i64({1}, std::vector<int64_t>{4}));
  b.node("Shape", {"x"}, {"shape"});
  b.node("Equal", {"shape", "four"}, {"is4"}, "is_four");
  b.node("Squeeze", {"is4"}, {"cond"});
  auto& n = b.node("If", {"cond"}, {"y"});
  set_attr(n, "then_branch", branch("Neg", "t"));
  set_attr(n, "else_branch", branch("Abs", "e"));
  const Tensor x4 = Tensor::f32({4}, std::vector<float>{-1, 2, -3, 4});
  const Tensor x3 = Tensor::f32({3}, std::vector<float>{-1, 2, -3});
  expect_specializes(b, "is_four", {{{{"n", 4}}, {{"x", x4}}}, {{{"n", 3}}, {{"x", x3}}}});
  OnnxModel m = model_of(b);
  EXPECT_EQ(m.run({{"x", x4}})[0].to_f32(), (std::vector<float>{1, -2, 3, -4}));
  EXPECT_EQ(m.run({{"x", x3}})[0].to_f32(), (std::vector<float>{1, 2, 3}));
  const Graph g3 = m.import({{"n", 3}});
  for (const Node& node : g3.nodes()) EXPECT_NE(std::string(op_name(node.op)), "if");  // inlined
}

OnnxBuilder two_input_model() {
  OnnxBuilder b;
  // y = a * m + w[:, :seq] (w's slice folds into a constant at import), q = sum(a) * big
  // (big, over 4096 bytes, stays a Param).
  b.input("a", kF32, {-1, -1}, {"batch", "seq"}).input("m", kF32, {-1, -1}, {"batch", "seq"}).output("y").output("q");
  b.initializer("w", testing::random_tensor(DType::F32, {1, 64}, 10));
  b.initializer("big", testing::random_tensor(DType::F32, {2048}, 11));
  b.node("ReduceSum", {"a"}, {"sum_a"});
  b.node("Mul", {"sum_a", "big"}, {"q"});
  b.initializer("one", Tensor::i64({1}, std::vector<int64_t>{1}));
  b.initializer("zero", Tensor::i64({1}, std::vector<int64_t>{0}));
  b.node("Shape", {"a"}, {"shape"});
  b.node("Gather", {"shape", "one"}, {"seq_len"});
  b.node("Slice", {"w", "zero", "seq_len", "one"}, {"ws"});
  b.node("Mul", {"a", "m"}, {"am"});
  b.node("Add", {"am", "ws"}, {"y"});
  return b;
}

TEST(OnnxSpecialize, CacheHitsDoNotImportAgainAndOldSignaturesAreEvicted) {
  const OnnxBuilder b = two_input_model();
  OnnxModelOptions o;
  o.max_signatures = 2;
  OnnxModel m = model_of(b, o);
  auto feeds = [](int64_t batch, int64_t seq, uint64_t seed) {
    return NamedTensors{{"a", testing::random_tensor(DType::F32, {batch, seq}, seed)},
                        {"m", testing::random_tensor(DType::F32, {batch, seq}, seed + 1)}};
  };
  const auto first = m.run(feeds(2, 3, 1));
  EXPECT_EQ(m.stats().imports, 1);
  const auto again = m.run(feeds(2, 3, 1));
  EXPECT_EQ(testing::to_doubles(first[0]), testing::to_doubles(again[0]));
  OnnxModel::Stats s = m.stats();
  EXPECT_EQ(s.imports, 1);
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.runs, 2);
  const Graph& g23 = m.compiled(feeds(2, 3, 5)).graph();
  const void* big23 = g23.weights().at("big").raw();
  m.run(feeds(1, 5, 2));
  // The initializer was read once: both signatures' graphs share its storage.
  EXPECT_EQ(m.compiled(feeds(1, 5, 2)).graph().weights().at("big").raw(), big23);
  m.run(feeds(4, 1, 3));  // a third signature: (2, 3), the least recently used, goes
  s = m.stats();
  EXPECT_EQ(s.imports, 3);
  EXPECT_EQ(s.evictions, 1);
  EXPECT_EQ(s.cached, 2u);
  m.run(feeds(1, 5, 4));  // kept
  EXPECT_EQ(m.stats().imports, 3);
  m.run(feeds(2, 3, 1));  // evicted: imported again
  EXPECT_EQ(m.stats().imports, 4);
  // set_initializer: a new value, the compiled graphs dropped.
  m.set_initializer("w", Tensor::f32({1, 64}, std::vector<float>(64, 0.0f)));
  EXPECT_EQ(m.stats().cached, 0u);
  const NamedTensors in = feeds(1, 2, 7);
  const auto y = m.run(in)[0].to_f64();
  const auto av = in[0].second.to_f64(), mv = in[1].second.to_f64();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(static_cast<float>(y[i]), static_cast<float>(av[i] * mv[i]));
  EXPECT_THAT(testing::error_message([&] { m.set_initializer("w", Tensor::f32({2}, std::vector<float>{1, 2})); }),
              HasSubstr("f32[1,64]"));
  EXPECT_THAT(testing::error_message([&] { m.set_initializer("nope", Tensor::scalar_f32(1)); }),
              HasSubstr("no initializer named 'nope'"));
}

TEST(OnnxSpecialize, InputsThatDisagreeAreErrorsNamingThem) {
  const OnnxBuilder b = two_input_model();
  OnnxModel m = model_of(b);
  const Tensor a23 = testing::random_tensor(DType::F32, {2, 3}, 1);
  // One symbol, two sizes: both inputs and axes named.
  EXPECT_THAT(testing::error_message([&] { m.run({{"a", a23}, {"m", testing::random_tensor(DType::F32, {2, 4}, 2)}}); }),
              AllOf(HasSubstr("symbolic dim 'seq' is 3 in input 'a' (axis 1) but 4 in input 'm' (axis 1)")));
  EXPECT_THAT(testing::error_message([&] { m.run({{"a", a23}, {"m", testing::random_tensor(DType::F32, {3, 3}, 2)}}); }),
              HasSubstr("'batch' is 2 in input 'a' (axis 0) but 3 in input 'm' (axis 0)"));
  // Dtype and rank: the input named, expected vs given.
  EXPECT_THAT(testing::error_message([&] { m.run({{"a", Tensor::i64({2, 3}, std::vector<int64_t>(6, 1))}, {"m", a23}}); }),
              HasSubstr("input 'a': expected f32[batch,seq], given i64[2,3]"));
  EXPECT_THAT(testing::error_message([&] { m.run({{"a", testing::random_tensor(DType::F32, {2, 3, 1}, 3)}, {"m", a23}}); }),
              AllOf(HasSubstr("input 'a': expected f32[batch,seq], given f32[2,3,1]"), HasSubstr("rank 3")));
  EXPECT_THAT(testing::error_message([&] { m.run({{"a", a23}}); }), HasSubstr("missing input 'm'"));
  EXPECT_THAT(testing::error_message([&] { m.run({{"a", a23}, {"m", a23}, {"z", a23}}); }),
              HasSubstr("no input named 'z'"));
  EXPECT_THAT(testing::error_message([&] { m.run({{"a", a23}, {"a", a23}}); }), HasSubstr("'a' is given twice"));
  EXPECT_EQ(m.stats().imports, 0);

  // Dims fixed for every run (rlx run --dim): a tensor that disagrees names the dim.
  OnnxModelOptions o;
  o.import.dims["seq"] = 3;
  OnnxModel fixed = model_of(b, o);
  EXPECT_EQ(fixed.inputs()[0].shape.str(), "f32[batch,3]");
  EXPECT_EQ(fixed.symbols(), (std::set<std::string>{"batch"}));
  EXPECT_THAT(testing::error_message([&] {
                const Tensor t = testing::random_tensor(DType::F32, {2, 4}, 4);
                fixed.run({{"a", t}, {"m", t}});
              }),
              AllOf(HasSubstr("input 'a': expected f32[batch,3], given f32[2,4]"), HasSubstr("--dim seq=3")));
  EXPECT_EQ(fixed.run({{"a", a23}, {"m", a23}})[0].shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(fixed.run({{"a", a23}, {"m", a23}})[1].shape(), (std::vector<int64_t>{1, 2048}));
  o.import.dims = {{"nope", 1}};
  EXPECT_THAT(testing::error_message([&] { model_of(b, o); }),
              AllOf(HasSubstr("'nope', which is not a symbolic dim"), HasSubstr("'batch', 'seq'")));
  o.import.dims.clear();
  o.max_signatures = 0;
  EXPECT_THAT(testing::error_message([&] { model_of(b, o); }), HasSubstr("max_signatures"));
}

// An unnamed dim gets the symbol "<input>_d<axis>"; an input without a declared shape takes
// the tensor's; both bind from the run's tensors.
TEST(OnnxSpecialize, UnnamedDimsAndUndeclaredShapes) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, 2}).output("y");
  b.node("Neg", {"x"}, {"y"});
  auto* vi = b.graph().add_input();
  vi->set_name("z");
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(kF32);
  b.output("zz");
  b.node("Relu", {"z"}, {"zz"});
  OnnxModel m = model_of(b);
  EXPECT_EQ(m.symbols(), (std::set<std::string>{"x_d0"}));
  EXPECT_FALSE(m.inputs()[1].has_shape);
  const auto out = m.run({{"x", testing::random_tensor(DType::F32, {3, 2}, 1)},
                          {"z", testing::random_tensor(DType::F32, {2, 2, 2}, 2)}});
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(out[1].shape(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(m.bind({{"x", testing::random_tensor(DType::F32, {4, 2}, 1)}}),
            (std::map<std::string, int64_t>{{"x_d0", 4}}));
}

// A model that imports with its symbolic dims still runs per signature, and the graph of each
// signature is static.
TEST(OnnxSpecialize, ImportBindsDimsWithoutCompiling) {
  OnnxBuilder b;
  b.input("x", kF32, {-1, 4}, {"batch"}).output("y");
  b.node("Relu", {"x"}, {"y"});
  OnnxModel m = model_of(b);
  EXPECT_EQ(m.output_names(), (std::vector<std::string>{"y"}));
  const Graph symbolic = m.import();
  EXPECT_EQ(symbolic.shape(symbolic.outputs()[0]).str(), "f32[batch,4]");
  const Graph bound = m.import({{"batch", 3}});
  EXPECT_EQ(bound.shape(bound.outputs()[0]).str(), "f32[3,4]");
  const Graph& g = m.compiled({{"x", testing::random_tensor(DType::F32, {5, 4}, 1)}}).graph();
  EXPECT_EQ(g.shape(g.outputs()[0]).str(), "f32[5,4]");
}

}  // namespace
}  // namespace rlx
