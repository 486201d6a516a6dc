// Weight-only computations move to a prologue that reruns when a param changes.
#include "passes/hoist.h"
#include "passes/pass_test_util.h"

namespace rlx {
namespace {

using testing::count_op;

Graph concat_weights_graph() {
  Graph g;
  Value x = g.input("x", Shape::of({3, 4}));
  Value w1 = g.param("w1", Shape::of({4, 2}));
  Value w2 = g.param("w2", Shape::of({4, 3}));
  Value wt = g.transpose(g.param("wt", Shape::of({5, 4})), {1, 0});
  g.add_output(g.matmul(x, g.concat({w1, w2}, 1)), "a");
  g.add_output(g.matmul(x, wt), "b");
  return g;
}

TEST(HoistParamComputations, SplitsWeightOnlyNodes) {
  auto h = passes::hoist_param_computations(concat_weights_graph());
  ASSERT_EQ(h.derived.size(), 2u);
  EXPECT_EQ(count_op(h.main, "concat") + count_op(h.main, "transpose"), 0u);
  EXPECT_EQ(count_op(h.main, "matmul"), 2u);
  EXPECT_EQ(count_op(h.prologue, "concat"), 1u);
  EXPECT_EQ(count_op(h.prologue, "transpose"), 1u);
  EXPECT_EQ(h.prologue.outputs().size(), 2u);
  EXPECT_TRUE(h.main.verify_report().empty());
  EXPECT_TRUE(h.prologue.verify_report().empty());
}

TEST(HoistParamComputations, CarriedWeightsFollowTheirParams) {
  Graph g = concat_weights_graph();
  g.set_weight("w1", testing::random_tensor(DType::F32, {4, 2}, 3));
  g.set_weight("wt", testing::random_tensor(DType::F32, {5, 4}, 4));
  auto h = passes::hoist_param_computations(g);
  EXPECT_EQ(h.prologue.weights().size(), 2u);
  EXPECT_EQ(h.main.weights().size(), 2u);
  CompiledGraph opt = Session(Device::Cpu).compile(g);
  CompiledGraph ref = Session(Device::Cpu).compile(g, testing::unoptimized());
  Tensor w2 = testing::random_tensor(DType::F32, {4, 3}, 5);
  opt.set_param("w2", w2);
  ref.set_param("w2", w2);
  const NamedTensors ins{{"x", testing::random_tensor(DType::F32, {3, 4}, 1)}};
  EXPECT_EQ(testing::to_doubles(opt.run(ins)[0]), testing::to_doubles(ref.run(ins)[0]));
}

TEST(HoistParamComputations, NothingToHoist) {
  Graph g;
  Value x = g.input("x", Shape::of({2}));
  g.add_output(g.add(x, g.param("p", Shape::of({2}))));
  auto h = passes::hoist_param_computations(g);
  EXPECT_TRUE(h.derived.empty());
  EXPECT_EQ(h.main.size(), g.size());
}

TEST(HoistParamComputations, ReservedNameIsAnError) {
  Graph g = concat_weights_graph();
  Value x = Value{g.input_nodes()[0], 0};
  g.add_output(g.add(x, g.relu(g.param("__derived.0", Shape::of({3, 4})))));
  EXPECT_THROW(passes::hoist_param_computations(g), Error);
}

TEST(HoistParamComputations, SessionRerunsThePrologueAfterSetParam) {
  Graph g = concat_weights_graph();
  CompiledGraph opt = Session(Device::Cpu).compile(g);
  CompiledGraph ref = Session(Device::Cpu).compile(g, testing::unoptimized());
  const NamedTensors ins{{"x", testing::random_tensor(DType::F32, {3, 4}, 1)}};
  uint64_t seed = 10;
  for (int round = 0; round < 3; ++round) {
    for (auto [name, dims] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"w1", {4, 2}}, {"w2", {4, 3}}, {"wt", {5, 4}}}) {
      Tensor t = testing::random_tensor(DType::F32, dims, seed++);
      opt.set_param(name, t);
      ref.set_param(name, t);
    }
    auto a = opt.run(ins), b = ref.run(ins);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(testing::to_doubles(a[i]), testing::to_doubles(b[i])) << "round " << round << " output " << i;
  }
}

}  // namespace
}  // namespace rlx
