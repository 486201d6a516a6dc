// plan::plan_dequant_gemv_groups on hand-built decoder-block graphs, CPU only: q/k/v and
// gate/up products of one x become one launch with the RmsNorm before them, the output and down
// projections take their residual Add, gate/up write silu(gate) * up; and the near misses that
// keep steps apart (another reader, a step in between, another format, too many rows, a
// broadcast residual, a norm read elsewhere or over the limit).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "passes/fusion.h"
#include "plan/gemv_groups.h"
#include "plan/schedule.h"
#include "rlx/rlx.h"

namespace rlx {
namespace {

constexpr int64_t kE = 64;  // hidden size (two Q8_0 blocks a row)
constexpr plan::GemvGroupLimits kLimits{8, 3, 4096};

Value dq(Graph& g, Value x, const std::string& w, int64_t n, QuantFormat f = QuantFormat::Q8_0, int64_t k = kE) {
  ops::DequantMatMul op;
  op.format = f;
  op.k = k;
  const QuantBlock b = quant_block(f);
  return g.apply(op, {x, g.param(w, Shape::of({n, k / b.elements * b.bytes}, DType::U8))});
}

Value norm(Graph& g, Value h, const std::string& gamma) {
  return g.rms_norm(h, g.param(gamma, Shape::of({kE})), std::nullopt, 1e-5);
}

// The schedule as the backends see it: silu * mul as an ElementwiseRegion.
plan::Schedule schedule_of(const Graph& g) { return plan::build_schedule(passes::mark_elementwise_regions(g)); }

size_t step_of(const plan::Schedule& s, const std::string& name, size_t nth = 0) {
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (op_name(s.steps[i].op) == name && nth-- == 0) return i;
  ADD_FAILURE() << "no " << name << " step";
  return SIZE_MAX;
}

TEST(GemvGroupPlan, QkvWithTheirNormIsOneLaunch) {
  Graph g;
  const Value h = g.input("h", Shape::of({1, kE}));
  const Value x = norm(g, h, "gamma");
  g.add_output(dq(g, x, "wq", 64));
  g.add_output(dq(g, x, "wk", 32));
  g.add_output(dq(g, x, "wv", 32));
  const plan::Schedule s = schedule_of(g);
  const auto groups = plan::plan_dequant_gemv_groups(s, kLimits);
  ASSERT_EQ(groups.size(), 1u);
  const auto& [launch, grp] = *groups.begin();
  EXPECT_EQ(launch, step_of(s, "dequant_matmul", 2));
  EXPECT_EQ(grp.members, (std::vector<size_t>{step_of(s, "dequant_matmul", 0), step_of(s, "dequant_matmul", 1), launch}));
  EXPECT_EQ(grp.norm, step_of(s, "rms_norm"));
  EXPECT_FALSE(grp.residual_add || grp.swiglu);
  EXPECT_EQ(plan::steps_not_run(groups),
            (std::set<size_t>{step_of(s, "rms_norm"), step_of(s, "dequant_matmul", 0), step_of(s, "dequant_matmul", 1)}));
  // Two products at most: q and k together, v alone (and the norm, read by two launches, runs).
  const auto two = plan::plan_dequant_gemv_groups(s, {8, 2, 4096});
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two.begin()->second.members.size(), 2u);
  EXPECT_FALSE(two.begin()->second.norm);
}

TEST(GemvGroupPlan, FeedForwardTakesNormSwiGLUAndResiduals) {
  Graph g;
  const Value h = g.input("h", Shape::of({2, kE}));
  const Value ctx = g.input("ctx", Shape::of({2, kE}));
  const Value h1 = g.add(h, dq(g, ctx, "wo", kE));
  const Value y = norm(g, h1, "gamma");
  const Value gate = dq(g, y, "wg", 96), up = dq(g, y, "wu", 96);
  const Value act = g.mul(g.silu(gate), up);
  g.add_output(g.add(h1, dq(g, act, "wd", kE, QuantFormat::Q4_0, 96)));
  const plan::Schedule s = schedule_of(g);
  const auto groups = plan::plan_dequant_gemv_groups(s, kLimits);
  ASSERT_EQ(groups.size(), 3u);
  const size_t o = step_of(s, "dequant_matmul", 0), gs = step_of(s, "dequant_matmul", 1),
               us = step_of(s, "dequant_matmul", 2), d = step_of(s, "dequant_matmul", 3);
  ASSERT_TRUE(groups.count(o) && groups.count(us) && groups.count(d));
  EXPECT_EQ(groups.at(o).residual_add, o + 1);
  EXPECT_FALSE(groups.at(o).norm);
  const plan::GemvGroup& ff = groups.at(us);
  EXPECT_EQ(ff.members, (std::vector<size_t>{gs, us}));
  EXPECT_EQ(ff.norm, step_of(s, "rms_norm"));
  EXPECT_EQ(ff.swiglu, step_of(s, "elementwise_region"));
  EXPECT_EQ(ff.gate, 0u);
  EXPECT_EQ(groups.at(d).residual_add, d + 1);
  EXPECT_EQ(plan::steps_not_run(groups).size(), 5u);  // o's add, the norm, gate, the region, down's add
}

TEST(GemvGroupPlan, TheGateMayBeTheSecondProduct) {
  Graph g;
  const Value y = g.input("y", Shape::of({1, kE}));
  const Value up = dq(g, y, "wu", 32), gate = dq(g, y, "wg", 32);
  g.add_output(g.mul(up, g.silu(gate)));
  const plan::Schedule s = schedule_of(g);
  const auto groups = plan::plan_dequant_gemv_groups(s, kLimits);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups.begin()->second.swiglu, step_of(s, "elementwise_region"));
  EXPECT_EQ(groups.begin()->second.gate, 1u);
  EXPECT_FALSE(groups.begin()->second.norm);  // y is an input
}

TEST(GemvGroupPlan, NearMissesKeepTheStepsApart) {
  {  // prefill: more rows than the kernels take
    Graph g;
    const Value x = norm(g, g.input("h", Shape::of({9, kE})), "gamma");
    g.add_output(dq(g, x, "wq", 32));
    g.add_output(dq(g, x, "wk", 32));
    EXPECT_TRUE(plan::plan_dequant_gemv_groups(schedule_of(g), kLimits).empty());
  }
  {  // no groups at all when the backend takes no rows
    Graph g;
    const Value x = norm(g, g.input("h", Shape::of({1, kE})), "gamma");
    g.add_output(dq(g, x, "wq", 32));
    EXPECT_TRUE(plan::plan_dequant_gemv_groups(schedule_of(g), {0, 3, 4096}).empty());
  }
  {  // another format, and a step between that reads the first product: three separate launches
    Graph g;
    const Value x = g.input("x", Shape::of({1, kE}));
    const Value q = dq(g, x, "wq", 32);
    g.add_output(dq(g, x, "wk", 32, QuantFormat::Q4_0));
    const Value r = g.relu(q);
    g.add_output(r);
    g.add_output(dq(g, x, "wv", 32));
    const plan::Schedule s = schedule_of(g);
    ASSERT_LT(step_of(s, "activation"), step_of(s, "dequant_matmul", 2));
    EXPECT_TRUE(plan::plan_dequant_gemv_groups(s, kLimits).empty());
  }
  {  // the norm is read by another step, or is over the kernels' limit: the group runs without it
    Graph g;
    const Value x = norm(g, g.input("h", Shape::of({4, kE})), "gamma");
    g.add_output(dq(g, x, "wq", 32));
    g.add_output(dq(g, x, "wk", 32));
    const plan::Schedule s = schedule_of(g);
    const auto within = plan::plan_dequant_gemv_groups(s, kLimits);
    ASSERT_EQ(within.size(), 1u);
    EXPECT_TRUE(within.begin()->second.norm);
    const auto over = plan::plan_dequant_gemv_groups(s, {8, 3, 4 * kE - 1});
    ASSERT_EQ(over.size(), 1u);
    EXPECT_FALSE(over.begin()->second.norm);
    g.add_output(x);
    const auto shared = plan::plan_dequant_gemv_groups(schedule_of(g), kLimits);
    ASSERT_EQ(shared.size(), 1u);
    EXPECT_FALSE(shared.begin()->second.norm);
  }
  {  // a broadcast residual, and a product read by its add and another step: no residual
    Graph g;
    const Value x = g.input("x", Shape::of({2, kE}));
    g.add_output(g.add(dq(g, x, "wo", kE), g.param("b", Shape::of({kE}))));
    const Value p = dq(g, g.input("x2", Shape::of({1, kE})), "w2", kE);
    g.add_output(g.add(p, g.input("r", Shape::of({1, kE}))));
    g.add_output(p);
    EXPECT_TRUE(plan::plan_dequant_gemv_groups(schedule_of(g), kLimits).empty());
  }
  {  // silu(gate) * up where the gate is also an output: grouped, the region runs
    Graph g;
    const Value y = g.input("y", Shape::of({1, kE}));
    const Value gate = dq(g, y, "wg", 32), up = dq(g, y, "wu", 32);
    g.add_output(g.mul(g.silu(gate), up));
    g.add_output(gate);
    const auto groups = plan::plan_dequant_gemv_groups(schedule_of(g), kLimits);
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups.begin()->second.members.size(), 2u);
    EXPECT_FALSE(groups.begin()->second.swiglu);
  }
}

}  // namespace
}  // namespace rlx
