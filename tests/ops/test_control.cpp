// If and While: branch selection, loops (counting, max_iterations cap, zero iterations),
// If nested inside a While body, and every inference error.
#include <memory>
#include <vector>

#include "support/test_util.h"

namespace rlx {
namespace {

using ::testing::HasSubstr;
using testing::error_message;
using testing::run_cpu;
using testing::to_doubles;

const Shape kBool({}, DType::Bool);
const Shape kI64({}, DType::I64);

Tensor bool_scalar(bool b, std::vector<int64_t> shape = {}) {
  const uint8_t v = b ? 1 : 0;
  return Tensor::boolean(std::move(shape), std::span<const uint8_t>(&v, 1));
}

// then: (x * 2, y + 10); else: (x + 1, y - 10). x f32[2,3], y i64[3].
std::pair<SubgraphPtr, SubgraphPtr> two_output_branches() {
  auto t = std::make_shared<Graph>();
  {
    const Value x = t->input("x", Shape::of({2, 3}));
    const Value y = t->input("y", Shape({3}, DType::I64));
    t->add_output(t->mul(x, t->scalar(2.0)));
    t->add_output(t->add(y, t->scalar(10, DType::I64)));
  }
  auto e = std::make_shared<Graph>();
  {
    const Value x = e->input("x", Shape::of({2, 3}));
    const Value y = e->input("y", Shape({3}, DType::I64));
    e->add_output(e->add(x, e->scalar(1.0)));
    e->add_output(e->sub(y, e->scalar(10, DType::I64)));
  }
  return {t, e};
}

TEST(Control, IfRunsTheSelectedBranch) {
  auto [t, e] = two_output_branches();
  for (const std::vector<int64_t>& cond_shape : {std::vector<int64_t>{}, std::vector<int64_t>{1}}) {
    Graph g;
    const Value c = g.input("c", Shape(std::vector<Dim>(cond_shape.begin(), cond_shape.end()), DType::Bool));
    const Value x = g.input("x", Shape::of({2, 3}));
    const Value y = g.input("y", Shape({3}, DType::I64));
    const auto outs = g.apply_multi(ops::If{t, e}, {c, x, y});
    ASSERT_EQ(outs.size(), 2u);
    EXPECT_EQ(g.shape(outs[0]), Shape::of({2, 3}));
    EXPECT_EQ(g.shape(outs[1]), Shape({3}, DType::I64));
    g.set_outputs(outs);
    const Tensor xv = Tensor::f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
    const Tensor yv = Tensor::i64({3}, std::vector<int64_t>{7, 8, 9});
    auto then_out = run_cpu(g, {{"c", bool_scalar(true, cond_shape)}, {"x", xv}, {"y", yv}});
    EXPECT_EQ(then_out[0].to_f32(), (std::vector<float>{2, 4, 6, 8, 10, 12}));
    EXPECT_EQ(then_out[1].to_i64(), (std::vector<int64_t>{17, 18, 19}));
    auto else_out = run_cpu(g, {{"c", bool_scalar(false, cond_shape)}, {"x", xv}, {"y", yv}});
    EXPECT_EQ(else_out[0].to_f32(), (std::vector<float>{2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(else_out[1].to_i64(), (std::vector<int64_t>{-3, -2, -1}));
  }
}

TEST(Control, IfBranchesWithoutOperandsAndPassThrough) {
  // Branches may ignore operands (constants) or return an operand unchanged.
  auto t = std::make_shared<Graph>();
  t->input("x", Shape::of({2}));
  t->add_output(t->constant(Tensor::f32({2}, std::vector<float>{5, 6})));
  auto e = std::make_shared<Graph>();
  e->add_output(e->input("x", Shape::of({2})));
  Graph g;
  const Value c = g.input("c", kBool);
  const Value x = g.input("x", Shape::of({2}));
  g.add_output(g.apply(ops::If{t, e}, {c, x}));
  const Tensor xv = Tensor::f32({2}, std::vector<float>{-1, -2});
  EXPECT_EQ(run_cpu(g, {{"c", bool_scalar(true)}, {"x", xv}})[0].to_f32(), (std::vector<float>{5, 6}));
  EXPECT_EQ(run_cpu(g, {{"c", bool_scalar(false)}, {"x", xv}})[0].to_f32(), (std::vector<float>{-1, -2}));
}

// cond: i < n; body: (i + 1, acc * 2, n). Carried (i i64[], acc f32[2], n i64[]).
Graph counting_loop(int64_t max_iterations) {
  auto cond = std::make_shared<Graph>();
  {
    const Value i = cond->input("i", kI64);
    cond->input("acc", Shape::of({2}));
    const Value n = cond->input("n", kI64);
    cond->add_output(cond->compare(CompareKind::Lt, i, n));
  }
  auto body = std::make_shared<Graph>();
  {
    const Value i = body->input("i", kI64);
    const Value acc = body->input("acc", Shape::of({2}));
    const Value n = body->input("n", kI64);
    body->add_output(body->add(i, body->scalar(1, DType::I64)));
    body->add_output(body->mul(acc, body->scalar(2.0)));
    body->add_output(n);
  }
  Graph g;
  const Value i = g.input("i", kI64);
  const Value acc = g.input("acc", Shape::of({2}));
  const Value n = g.input("n", kI64);
  g.set_outputs(g.apply_multi(ops::While{max_iterations, cond, body}, {i, acc, n}));
  return g;
}

std::vector<Tensor> run_counting(const Graph& g, int64_t start, int64_t n) {
  return run_cpu(g, {{"i", Tensor::scalar_i64(start)},
                     {"acc", Tensor::f32({2}, std::vector<float>{1, -3})},
                     {"n", Tensor::scalar_i64(n)}});
}

TEST(Control, WhileCountsToN) {
  const Graph g = counting_loop(0);
  for (int64_t n : {1, 5, 12}) {
    auto out = run_counting(g, 0, n);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(out[0].to_i64(), (std::vector<int64_t>{n}));
    const float p = static_cast<float>(1 << n);
    EXPECT_EQ(out[1].to_f32(), (std::vector<float>{p, -3 * p}));
    EXPECT_EQ(out[2].to_i64(), (std::vector<int64_t>{n}));
  }
}

TEST(Control, WhileZeroIterationsReturnsTheInputs) {
  auto out = run_counting(counting_loop(0), 7, 3);
  EXPECT_EQ(out[0].to_i64(), (std::vector<int64_t>{7}));
  EXPECT_EQ(out[1].to_f32(), (std::vector<float>{1, -3}));
}

TEST(Control, WhileMaxIterationsCapsTheLoop) {
  // cond stays true until 100, the cap stops at 5 body runs.
  auto capped = run_counting(counting_loop(5), 0, 100);
  EXPECT_EQ(capped[0].to_i64(), (std::vector<int64_t>{5}));
  EXPECT_EQ(capped[1].to_f32(), (std::vector<float>{32, -96}));
  // cond false first: the cap does not matter.
  auto early = run_counting(counting_loop(10), 0, 3);
  EXPECT_EQ(early[0].to_i64(), (std::vector<int64_t>{3}));
  // cap exactly at the natural end.
  auto exact = run_counting(counting_loop(4), 0, 4);
  EXPECT_EQ(exact[0].to_i64(), (std::vector<int64_t>{4}));
}

TEST(Control, IfNestedInsideWhile) {
  // for i in 0..5: v = (i % 2 == 0) ? v + 1 : v * 3
  auto then_b = std::make_shared<Graph>();
  then_b->add_output(then_b->add(then_b->input("v", Shape({}, DType::F64)), then_b->scalar(1.0, DType::F64)));
  auto else_b = std::make_shared<Graph>();
  else_b->add_output(else_b->mul(else_b->input("v", Shape({}, DType::F64)), else_b->scalar(3.0, DType::F64)));

  auto cond = std::make_shared<Graph>();
  {
    const Value i = cond->input("i", kI64);
    cond->input("v", Shape({}, DType::F64));
    cond->add_output(cond->compare(CompareKind::Lt, i, cond->scalar(6, DType::I64)));
  }
  auto body = std::make_shared<Graph>();
  {
    const Value i = body->input("i", kI64);
    const Value v = body->input("v", Shape({}, DType::F64));
    const Value even = body->compare(CompareKind::Eq, body->binary(BinaryKind::Mod, i, body->scalar(2, DType::I64)),
                                     body->scalar(0, DType::I64));
    const Value nv = body->apply(ops::If{then_b, else_b}, {even, v});
    body->add_output(body->add(i, body->scalar(1, DType::I64)));
    body->add_output(nv);
  }
  Graph g;
  const Value i = g.input("i", kI64);
  const Value v = g.input("v", Shape({}, DType::F64));
  g.set_outputs(g.apply_multi(ops::While{0, cond, body}, {i, v}));
  auto out = run_cpu(g, {{"i", Tensor::scalar_i64(0)}, {"v", Tensor::f64({}, std::vector<double>{1.0})}});
  double ref = 1.0;
  for (int k = 0; k < 6; ++k) ref = (k % 2 == 0) ? ref + 1 : ref * 3;
  EXPECT_EQ(out[0].to_i64(), (std::vector<int64_t>{6}));
  EXPECT_EQ(to_doubles(out[1]), (std::vector<double>{ref}));
  EXPECT_EQ(ref, 66.0);
}

TEST(Control, SymbolicOperandsPassThroughInference) {
  const Shape s({Dim::symbol("n"), Dim(4)});
  auto t = std::make_shared<Graph>();
  t->add_output(t->relu(t->input("x", s)));
  auto e = std::make_shared<Graph>();
  e->add_output(e->exp(e->input("x", s)));
  Graph g;
  const Value out = g.apply(ops::If{t, e}, {g.input("c", kBool), g.input("x", s)});
  EXPECT_EQ(g.shape(out), s);
}

TEST(Control, IfInferenceErrors) {
  auto [t, e] = two_output_branches();
  Graph g;
  const Value c = g.input("c", kBool);
  const Value c2 = g.input("c2", Shape({2}, DType::Bool));
  const Value ci = g.input("ci", Shape({}, DType::I32));
  const Value x = g.input("x", Shape::of({2, 3}));
  const Value x64 = g.input("x64", Shape({2, 3}, DType::F64));
  const Value y = g.input("y", Shape({3}, DType::I64));
  const auto add = [&](ops::If op, std::vector<Value> in) { g.apply_multi(std::move(op), std::move(in)); };

  EXPECT_THAT(error_message([&] { add({t, e}, {ci, x, y}); }), HasSubstr("condition must be a bool scalar"));
  EXPECT_THAT(error_message([&] { add({t, e}, {c2, x, y}); }), HasSubstr("condition must be a bool scalar"));
  EXPECT_THAT(error_message([&] { add({nullptr, e}, {c, x, y}); }), HasSubstr("then_branch is null"));
  EXPECT_THAT(error_message([&] { add({t, nullptr}, {c, x, y}); }), HasSubstr("else_branch is null"));
  EXPECT_THAT(error_message([&] { add({t, e}, {c, x}); }), HasSubstr("has 2 Input nodes"));
  EXPECT_THAT(error_message([&] { add({t, e}, {c, x64, y}); }), HasSubstr("is declared f32[2,3] but receives f64[2,3]"));

  // Branch outputs that disagree in shape, dtype or count.
  auto other = std::make_shared<Graph>();
  {
    const Value bx = other->input("x", Shape::of({2, 3}));
    const Value by = other->input("y", Shape({3}, DType::I64));
    other->add_output(other->sum(bx, {1}));
    other->add_output(by);
  }
  EXPECT_THAT(error_message([&] { add({t, other}, {c, x, y}); }), HasSubstr("branches' outputs differ"));
  auto dtype_diff = std::make_shared<Graph>();
  {
    const Value bx = dtype_diff->input("x", Shape::of({2, 3}));
    const Value by = dtype_diff->input("y", Shape({3}, DType::I64));
    dtype_diff->add_output(dtype_diff->cast(bx, DType::F64));
    dtype_diff->add_output(by);
  }
  EXPECT_THAT(error_message([&] { add({t, dtype_diff}, {c, x, y}); }), HasSubstr("f64[2,3]"));
  auto fewer = std::make_shared<Graph>();
  {
    const Value bx = fewer->input("x", Shape::of({2, 3}));
    fewer->input("y", Shape({3}, DType::I64));
    fewer->add_output(bx);
  }
  EXPECT_THAT(error_message([&] { add({fewer, e}, {c, x, y}); }), HasSubstr("branches' outputs differ"));
}

TEST(Control, WhileInferenceErrors) {
  const Graph ok = counting_loop(0);
  const auto& w = std::get<ops::While>(ok.nodes().back().op);
  Graph g;
  const Value i = g.input("i", kI64);
  const Value acc = g.input("acc", Shape::of({2}));
  const Value n = g.input("n", kI64);
  const Value acc3 = g.input("acc3", Shape::of({3}));
  const auto add = [&](ops::While op, std::vector<Value> in) { g.apply_multi(std::move(op), std::move(in)); };

  EXPECT_NO_THROW(add({7, w.cond, w.body}, {i, acc, n}));
  EXPECT_THAT(error_message([&] { add({-1, w.cond, w.body}, {i, acc, n}); }), HasSubstr("max_iterations must be >= 0"));
  EXPECT_THAT(error_message([&] { add({0, nullptr, w.body}, {i, acc, n}); }), HasSubstr("cond is null"));
  EXPECT_THAT(error_message([&] { add({0, w.cond, nullptr}, {i, acc, n}); }), HasSubstr("body is null"));
  EXPECT_THAT(error_message([&] { add({0, w.cond, w.body}, {i, acc}); }), HasSubstr("while: cond has 3 Input nodes"));
  EXPECT_THAT(error_message([&] { add({0, w.cond, w.body}, {i, acc3, n}); }), HasSubstr("receives f32[3]"));

  // cond returning a non-bool value, or two values.
  auto bad_cond = std::make_shared<Graph>();
  {
    const Value ci = bad_cond->input("i", kI64);
    bad_cond->input("acc", Shape::of({2}));
    bad_cond->input("n", kI64);
    bad_cond->add_output(ci);
  }
  EXPECT_THAT(error_message([&] { add({0, bad_cond, w.body}, {i, acc, n}); }),
              HasSubstr("cond must return exactly one bool scalar"));
  auto two_cond = std::make_shared<Graph>(*w.cond);
  two_cond->add_output(two_cond->outputs()[0]);
  EXPECT_THAT(error_message([&] { add({0, two_cond, w.body}, {i, acc, n}); }),
              HasSubstr("cond must return exactly one bool scalar"));
  // body changing a carried shape.
  auto bad_body = std::make_shared<Graph>();
  {
    const Value bi = bad_body->input("i", kI64);
    const Value bacc = bad_body->input("acc", Shape::of({2}));
    const Value bn = bad_body->input("n", kI64);
    bad_body->add_output(bi);
    bad_body->add_output(bad_body->sum(bacc, {}));
    bad_body->add_output(bn);
  }
  EXPECT_THAT(error_message([&] { add({0, w.cond, bad_body}, {i, acc, n}); }),
              HasSubstr("body returns (i64[], f32[], i64[]) but the carried values are (i64[], f32[2], i64[])"));
}

}  // namespace
}  // namespace rlx
