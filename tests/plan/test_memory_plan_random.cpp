// Random graphs of elementwise ops, views (reshape, stop_gradient, leading narrow), where and
// reductions, with random extra outputs: the plan never overlaps two live values, and the
// executor with every reuse feature gives the same bytes as one slot per value and no views.
#include <cstring>
#include <random>

#include "plan/plan_test_util.h"
#include "plan/random_graph.h"

namespace rlx {
namespace {

using plantest::random_graph;

TEST(MemoryPlanRandom, NoOverlapAndSameBytesAsNoReuse) {
  int in_place = 0, views = 0;
  for (uint32_t seed = 0; seed < 150; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Graph g = random_graph(seed);
    const plan::MemoryPlan mp = plan::plan_memory(g);
    ASSERT_EQ(plantest::overlap_violation(g, mp), "") << g.to_text() << [&] {
      std::string t;
      for (const Node& n : g.nodes())
        for (uint32_t p = 0; p < n.outputs.size(); ++p) {
          const auto& l = mp.at(Value{n.id, p});
          t += Graph::value_str(Value{n.id, p}) + " slot " + std::to_string(l.slot) + " off " + std::to_string(l.offset) +
               " root " + Graph::value_str(l.root) + " inplace " + std::to_string(mp.in_place_input[n.id]) + "\n";
        }
      return t;
    }();
    EXPECT_LE(mp.peak_bytes, mp.arena_bytes);
    EXPECT_LE(mp.arena_bytes, mp.no_reuse_bytes);
    in_place += static_cast<int>(mp.num_in_place);
    views += static_cast<int>(mp.num_views);
    const std::map<std::string, Tensor> vals{{"x", testing::random_tensor(DType::F32, {4, 8}, seed)},
                                             {"y", testing::random_tensor(DType::F32, {1, 8}, seed + 1000)}};
    const auto want = plantest::run_planned(g, vals, plantest::no_reuse());
    const auto got = plantest::run_planned(g, vals, plan::PlanOptions{});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(0, std::memcmp(got[i].raw(), want[i].raw(), want[i].nbytes())) << "output " << i;
  }
  EXPECT_GT(in_place, 100);  // the generator exercises both features
  EXPECT_GT(views, 100);
}

}  // namespace
}  // namespace rlx
