#include "support/parity.h"
#include "support/test_util.h"

using namespace rlx;
using ::testing::HasSubstr;

namespace {
Graph add_graph() {
  Graph g;
  auto x = g.input("x", Shape::of({2, 3}));
  auto w = g.param("w", Shape::of({3}));
  g.add_output(g.add(x, w), "y");
  g.add_output(g.mul(x, x), "sq");
  return g;
}
}  // namespace

TEST(Session, RunsAndReturnsOutputsInOrder) {
  Session s(Device::Cpu);
  auto cg = s.compile(add_graph());
  cg.set_param("w", Tensor::f32({3}, std::vector<float>{10, 20, 30}));
  auto outs = cg.run({{"x", Tensor::f32({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6})}});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].to_f32(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(outs[1].to_f32(), (std::vector<float>{1, 4, 9, 16, 25, 36}));
  auto only = cg.run({{"x", Tensor::f32({2, 3}, std::vector<float>{1, 1, 1, 1, 1, 1})}}, {1});
  ASSERT_EQ(only.size(), 1u);
  EXPECT_EQ(only[0].to_f32(), (std::vector<float>{1, 1, 1, 1, 1, 1}));
  EXPECT_GT(cg.arena_bytes(), 0u);
}

TEST(Session, BadInputsRaiseUsefulErrors) {
  Session s(Device::Cpu);
  auto cg = s.compile(add_graph());
  Tensor x = Tensor::f32({2, 3}, std::vector<float>(6, 1.0f));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"x", x}}); }), HasSubstr("params without values 'w'"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.set_param("nope", x); }), HasSubstr("no param named 'nope'"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.set_param("w", Tensor::f32({2}, std::vector<float>{1, 2})); }),
              HasSubstr("elements"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.set_param("w", Tensor::f64({3}, std::vector<double>{1, 2, 3})); }),
              HasSubstr("dtype f64"));
  cg.set_param("w", Tensor::f32({3}, std::vector<float>{1, 2, 3}));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({}); }), HasSubstr("missing inputs 'x'"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"x", x}, {"z", x}}); }), HasSubstr("no input named 'z'"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"w", x}}); }), HasSubstr("is a param"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"x", x.cast(DType::F16)}}); }), HasSubstr("dtype f16"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"x", Tensor::f32({3, 2}, std::vector<float>(6, 1.0f))}}); }),
              HasSubstr("dim 0 is 3"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"x", x}}, {5}); }), HasSubstr("out of range"));
  EXPECT_THAT(rlx::testing::error_message([&] { Session(Device::Cuda).compile(add_graph()); }),
              HasSubstr("not available"));
  Graph bad;
  bad.input("a", Shape::of({1}));
  EXPECT_THAT(rlx::testing::error_message([&] { s.compile(bad); }), HasSubstr("invalid graph"));
}

TEST(Session, SymbolicDimsBindPerRunAndCheckConsistency) {
  Graph g;
  auto a = g.input("a", Shape({Dim::symbol("n"), Dim(2)}));
  auto b = g.input("b", Shape({Dim::symbol("n"), Dim(2)}));
  g.add_output(g.add(a, b));
  Session s;
  auto cg = s.compile(g);
  for (int64_t n : {1, 3, 1, 5}) {
    std::vector<float> av(static_cast<size_t>(n * 2), 1.0f), bv(static_cast<size_t>(n * 2), 2.0f);
    auto out = cg.run({{"a", Tensor::f32({n, 2}, av)}, {"b", Tensor::f32({n, 2}, bv)}});
    EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{n, 2}));
    EXPECT_EQ(out[0].to_f32(), std::vector<float>(static_cast<size_t>(n * 2), 3.0f));
  }
  auto msg = rlx::testing::error_message([&] {
    cg.run({{"a", Tensor::f32({1, 2}, std::vector<float>{1, 2})}, {"b", Tensor::f32({2, 2}, std::vector<float>(4, 1.0f))}});
  });
  EXPECT_THAT(msg, HasSubstr("symbolic dim 'n'"));
}

TEST(Session, BindStateCarriesOutputToNextRun) {
  // acc_next = acc + x: a running sum carried between runs.
  Graph g;
  auto acc = g.input("acc", Shape::of({2}));
  auto x = g.input("x", Shape::of({2}));
  g.add_output(g.add(acc, x), "acc_next");
  Session s;
  auto cg = s.compile(g);
  cg.bind_state("acc", 0);
  Tensor one = Tensor::f32({2}, std::vector<float>{1, 2});
  auto r1 = cg.run({{"acc", Tensor::f32({2}, std::vector<float>{0, 0})}, {"x", one}});
  EXPECT_EQ(r1[0].to_f32(), (std::vector<float>{1, 2}));
  r1[0].data<float>()[0] = 1000.0f;  // the caller's copy is independent of the carried state
  auto r2 = cg.run({{"x", one}});  // acc comes from the previous run
  EXPECT_EQ(r2[0].to_f32(), (std::vector<float>{2, 4}));
  auto r3 = cg.run({{"x", one}}, {});  // no outputs copied back, state still advances
  EXPECT_TRUE(r3.empty());
  auto r4 = cg.run({{"x", one}});
  EXPECT_EQ(r4[0].to_f32(), (std::vector<float>{4, 8}));
  // Passing the input explicitly overrides the carried value.
  auto r5 = cg.run({{"acc", Tensor::f32({2}, std::vector<float>{100, 100})}, {"x", one}});
  EXPECT_EQ(r5[0].to_f32(), (std::vector<float>{101, 102}));
  cg.reset_state();
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"x", one}}); }), HasSubstr("missing inputs 'acc'"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.bind_state("nope", 0); }), HasSubstr("no input named 'nope'"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.bind_state("acc", 3); }), HasSubstr("out of range"));
}

TEST(Session, BindStateFollowsShapeChanges) {
  // acc_next = x + sum(acc) has x's length: the carried value changes length with x, so runs
  // bind other lengths and run other variants; a carried value moves to another variant
  // through the host, and stays with the variant while the binding stays.
  Graph g;
  auto acc = g.input("acc", Shape({Dim::symbol("n")}));
  auto x = g.input("x", Shape({Dim::symbol("m")}));
  g.add_output(g.add(x, g.sum(acc, {0})), "acc_next");
  g.add_output(g.sum(acc, {0}), "total");
  Session s;
  auto cg = s.compile(g);
  cg.bind_state("acc", 0);
  auto full = [](int64_t n, float v) { return Tensor::f32({n}, std::vector<float>(static_cast<size_t>(n), v)); };
  auto r = cg.run({{"acc", full(1, 1)}, {"x", full(2, 1)}});  // n = 1, m = 2
  EXPECT_EQ(r[0].to_f32(), (std::vector<float>{2, 2}));
  r = cg.run({{"x", full(3, 1)}});  // n = 2, m = 3
  EXPECT_EQ(r[0].to_f32(), (std::vector<float>{5, 5, 5}));
  EXPECT_TRUE(cg.run({{"x", full(2, 0)}}, {}).empty());  // n = 3, m = 2: nothing returned
  r = cg.run({{"x", full(2, 0)}}, {1});                  // n = 2, m = 2
  EXPECT_EQ(r[0].to_f32(), (std::vector<float>{30}));
  r = cg.run({{"x", full(2, 0)}});  // the same binding again: carried within the variant
  EXPECT_EQ(r[0].to_f32(), (std::vector<float>{60, 60}));
  // Back to a binding compiled before (n = 2, m = 3): the carried value, not the stale one that
  // variant kept from its own last run.
  r = cg.run({{"x", full(3, 0)}});
  EXPECT_EQ(r[0].to_f32(), (std::vector<float>{120, 120, 120}));
  // A carried value that does not fit the other inputs is reported like an input.
  Graph same;
  auto a = same.input("a", Shape({Dim::symbol("n")}));
  auto b = same.input("b", Shape({Dim::symbol("n")}));
  same.add_output(same.add(a, b));
  auto cs = s.compile(same);
  cs.bind_state("a", 0);
  EXPECT_EQ(cs.run({{"a", full(2, 1)}, {"b", full(2, 1)}})[0].to_f32(), (std::vector<float>{2, 2}));
  EXPECT_THAT(rlx::testing::error_message([&] { cs.run({{"b", full(3, 1)}}); }), HasSubstr("symbolic dim 'n'"));
  EXPECT_EQ(cs.run({{"b", full(2, 1)}})[0].to_f32(), (std::vector<float>{3, 3}));  // still carried
}

TEST(Session, BindStateFixedShapeWithPassThroughAndSwap) {
  // a_next = b, b_next = a + 1, y = a * b: two carried values trading places, and an output
  // that is an input as it came in.
  Graph g;
  auto a = g.input("a", Shape::of({3}));
  auto b = g.input("b", Shape::of({3}));
  g.add_output(b, "a_next");
  g.add_output(g.add(a, g.scalar(1.0)), "b_next");
  g.add_output(g.mul(a, b), "y");
  Session s;
  auto cg = s.compile(g);
  cg.bind_state("a", 0);
  cg.bind_state("b", 1);
  auto full = [](float v) { return Tensor::f32({3}, std::vector<float>(3, v)); };
  float ea = 2, eb = 5;
  auto r = cg.run({{"a", full(ea)}, {"b", full(eb)}}, {2});
  EXPECT_EQ(r[0].to_f32()[0], ea * eb);
  for (int i = 0; i < 5; ++i) {
    const float na = eb, nb = ea + 1;
    ea = na, eb = nb;
    r = cg.run({}, {2, 0});
    EXPECT_EQ(r[0].to_f32()[0], ea * eb) << i;
    EXPECT_EQ(r[1].to_f32()[0], eb) << i;  // a_next of this run
    r[1].data<float>()[0] = -1;              // the caller's copy, not the carried value
  }
  // Overriding one of them keeps carrying the other.
  r = cg.run({{"a", full(10)}}, {2});
  EXPECT_EQ(r[0].to_f32()[0], 10 * (ea + 1));
}

TEST(Session, BindStateIsForgottenWhenARunFails) {
  // A failed run may have overwritten the values its variant kept (on a device): the carried
  // state is dropped and the next run asks for the input again, never a stale value.
  Graph g;
  auto acc = g.input("acc", Shape::of({2}));
  auto idx = g.input("idx", Shape({Dim(1)}, DType::I64));
  g.add_output(g.add(acc, g.gather(acc, idx, 0)), "acc_next");
  Session s;
  auto cg = s.compile(g);
  cg.bind_state("acc", 0);
  const Tensor zero = Tensor::i64({1}, std::vector<int64_t>{0});
  auto r = cg.run({{"acc", Tensor::f32({2}, std::vector<float>{1, 2})}, {"idx", zero}});
  EXPECT_EQ(r[0].to_f32(), (std::vector<float>{2, 3}));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"idx", Tensor::i64({1}, std::vector<int64_t>{5})}}); }),
              HasSubstr("out of range"));
  EXPECT_THAT(rlx::testing::error_message([&] { cg.run({{"idx", zero}}); }), HasSubstr("missing inputs 'acc'"));
  r = cg.run({{"acc", Tensor::f32({2}, std::vector<float>{1, 1})}, {"idx", zero}});
  EXPECT_EQ(r[0].to_f32(), (std::vector<float>{2, 2}));
  EXPECT_EQ(cg.run({{"idx", zero}})[0].to_f32(), (std::vector<float>{4, 4}));
}

TEST(Parity, SameGraphTwoThreadCountsAgree) {
  Graph g;
  auto x = g.input("x", Shape::of({64, 300}));
  auto y = g.input("y", Shape::of({300}));
  g.add_output(g.mul(g.add(x, y), x));
  CompileOptions o1;
  o1.num_threads = 1;
  rlx::testing::RunConfig a{"cpu-1t", Device::Cpu, o1, {}};
  CompileOptions o2;
  o2.num_threads = 2;
  rlx::testing::RunConfig b{"cpu-2t", Device::Cpu, o2, {}};
  auto rep = rlx::testing::compare_configs(g, a, b);
  EXPECT_TRUE(rep.pass) << rep.text;
  ASSERT_EQ(rep.outputs.size(), 1u);
  EXPECT_EQ(rep.outputs[0].max_abs, 0.0);
}

TEST(Parity, DetectsADifferenceAndReportsTheWorstElement) {
  Graph g;
  auto x = g.input("x", Shape::of({4, 4}));
  g.add_output(g.mul(x, x));
  rlx::testing::RunConfig a{"ref", Device::Cpu, {}, {}};
  rlx::testing::RunConfig b{"perturbed", Device::Cpu, {}, [](const Graph& src) {
    Graph h = src;
    // Replace the output with output + 0.5 at one element by adding a one-hot constant.
    std::vector<float> bump(16, 0.0f);
    bump[5] = 0.5f;
    auto c = h.constant(Tensor::f32({4, 4}, bump));
    auto out = h.add(h.outputs()[0], c);
    h.set_outputs({out});
    return h;
  }};
  auto rep = rlx::testing::compare_configs(g, a, b);
  EXPECT_FALSE(rep.pass);
  ASSERT_EQ(rep.outputs.size(), 1u);
  EXPECT_EQ(rep.outputs[0].worst_index, 5);
  EXPECT_NEAR(rep.outputs[0].max_abs, 0.5, 1e-6);
  EXPECT_THAT(rep.text, HasSubstr("FAIL"));
}
