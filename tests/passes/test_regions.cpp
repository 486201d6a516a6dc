// mark_elementwise_regions, unfuse_elementwise_regions, clip_elementwise_regions.
#include "passes/canonical.h"
#include "passes/fusion.h"
#include "passes/pass_test_util.h"

namespace rlx {
namespace {

using namespace passes;
using testing::count_op;
using testing::pass_fn;
using testing::same_numbers;

const ops::ElementwiseRegion& region_of(const Graph& g, Value v) {
  return std::get<ops::ElementwiseRegion>(g.node(v.node).op);
}

TEST(ElementwiseRegions, CollapsesAChainWithBroadcastInputs) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 8}));
  Value b = g.param("b", Shape::of({8}));
  Value y = g.mul(g.silu(g.add(x, b)), g.sigmoid(x));
  g.add_output(y);
  Graph f = mark_elementwise_regions(g);
  ASSERT_EQ(count_op(f, "elementwise_region"), 1u);
  EXPECT_EQ(op_count(f), 1u);
  const Node& rn = f.node(f.outputs()[0].node);
  ASSERT_EQ(rn.inputs.size(), 2u);  // x and b, in first-use order
  EXPECT_EQ(std::get<ops::Input>(f.node(rn.inputs[0].node).op).name, "x");
  EXPECT_EQ(region_of(f, f.outputs()[0]).steps.size(), 4u);
  EXPECT_TRUE(same_numbers(g, pass_fn(mark_elementwise_regions)));
}

TEST(ElementwiseRegions, StopsAtIntermediatesWithTwoConsumersAndOutputs) {
  Graph g;
  Value x = g.input("x", Shape::of({16}));
  Value shared = g.exp(g.relu(x));  // {relu, exp}: exp's value has two consumers, so it ends a region
  g.add_output(g.tanh(g.add(shared, x)));         // {add, tanh}
  g.add_output(g.sigmoid(g.mul(shared, shared)));  // {mul, sigmoid}
  Value out3 = g.act(ActKind::Sqrt, g.act(ActKind::Abs, x));                   // {abs, sqrt}: sqrt is an output
  g.add_output(out3);
  g.add_output(g.act(ActKind::Neg, out3));  // alone: a chain of length one stays a plain op
  Graph f = mark_elementwise_regions(g);
  EXPECT_EQ(count_op(f, "elementwise_region"), 4u);
  EXPECT_EQ(count_op(f, "activation"), 1u);
  for (const Node& n : f.nodes())
    if (const auto* r = std::get_if<ops::ElementwiseRegion>(&n.op)) {
      EXPECT_EQ(r->steps.size(), 2u);
    }
  EXPECT_TRUE(same_numbers(g, pass_fn(mark_elementwise_regions)));
}

TEST(ElementwiseRegions, SingleOpsAndMatmulsAreBoundaries) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 4}));
  Value y = g.relu(g.matmul(g.exp(x), x));  // exp | matmul | relu: no chain of two
  g.add_output(y);
  EXPECT_EQ(count_op(mark_elementwise_regions(g), "elementwise_region"), 0u);
}

TEST(ElementwiseRegions, WhereAndCompareInsideARegion) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 5}));
  Value leaky = g.where(g.compare(CompareKind::Gt, x, g.scalar(0)), x, g.mul(x, g.scalar(0.1)));
  g.add_output(g.add(leaky, g.param("b", Shape::of({5}))));
  Graph f = mark_elementwise_regions(g);
  ASSERT_EQ(count_op(f, "elementwise_region"), 1u);
  EXPECT_EQ(region_of(f, f.outputs()[0]).steps.size(), 4u);
  EXPECT_TRUE(same_numbers(g, pass_fn(mark_elementwise_regions)));
}

TEST(ElementwiseRegions, LimitOf32StepsSplitsLongChains) {
  Graph g;
  Value y = g.input("x", Shape::of({8}));
  for (int i = 0; i < 40; ++i) y = i % 2 ? g.tanh(y) : g.act(ActKind::Sin, y);
  g.add_output(y);
  Graph f = mark_elementwise_regions(g);
  std::vector<size_t> sizes;
  for (const Node& n : f.nodes())
    if (const auto* r = std::get_if<ops::ElementwiseRegion>(&n.op)) sizes.push_back(r->steps.size());
  EXPECT_EQ(sizes, (std::vector<size_t>{8, 32}));
  EXPECT_TRUE(same_numbers(g, pass_fn(mark_elementwise_regions)));
}

// A hand-built 40-step region whose last step reads step 0 again (a prologue value).
Graph long_region() {
  Graph g;
  Value x = g.input("x", Shape::of({2, 6}));
  ops::ElementwiseRegion r;
  r.steps.push_back({RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Mul), DType::F32, {0, 0}});
  for (int i = 1; i < 39; ++i)
    r.steps.push_back({RegionStepKind::Activation, static_cast<int32_t>(i % 2 ? ActKind::Tanh : ActKind::Sin),
                       DType::F32, {-i}});
  r.steps.push_back({RegionStepKind::Binary, static_cast<int32_t>(BinaryKind::Add), DType::F32, {-39, -1}});
  g.add_output(g.apply(r, {x}));
  return g;
}

TEST(ClipElementwiseRegions, Over40StepsKeepsThePrologue) {
  Graph g = long_region();
  for (size_t limit : {32u, 10u}) {
    Graph f = clip_elementwise_regions(g, limit, 16);
    size_t total = 0;
    for (const Node& n : f.nodes())
      if (const auto* r = std::get_if<ops::ElementwiseRegion>(&n.op)) {
        EXPECT_LE(r->steps.size(), limit);
        total += r->steps.size();
      }
    EXPECT_EQ(total + count_op(f, "binary") + count_op(f, "activation"), 40u) << limit;  // no step dropped
    EXPECT_TRUE(same_numbers(g, [limit](const Graph& x) { return clip_elementwise_regions(x, limit, 16); }));
  }
  EXPECT_EQ(count_op(clip_elementwise_regions(g, 40, 16), "elementwise_region"), 1u);  // within limits: unchanged
}

TEST(ClipElementwiseRegions, InputLimit) {
  Graph g;
  Value acc = g.input("x0", Shape::of({4}));
  for (int i = 1; i < 6; ++i) acc = g.add(acc, g.input("x" + std::to_string(i), Shape::of({4})));
  g.add_output(acc);
  Graph f = clip_elementwise_regions(mark_elementwise_regions(g), 32, 3);
  for (const Node& n : f.nodes())
    if (std::holds_alternative<ops::ElementwiseRegion>(n.op)) {
      EXPECT_LE(n.inputs.size(), 3u);
    }
  EXPECT_TRUE(same_numbers(g, [](const Graph& x) { return clip_elementwise_regions(mark_elementwise_regions(x), 32, 3); }));
  EXPECT_THROW(clip_elementwise_regions(g, 0, 3), Error);
}

TEST(UnfuseElementwiseRegions, RoundTrip) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 4}));
  Value m = g.compare(CompareKind::Lt, x, g.scalar(0.5));
  g.add_output(g.where(m, g.exp(x), g.cast(g.cast(x, DType::F16), DType::F32)));
  Graph fused = mark_elementwise_regions(g);
  ASSERT_EQ(count_op(fused, "elementwise_region"), 1u);
  Graph back = unfuse_elementwise_regions(fused);
  EXPECT_EQ(count_op(back, "elementwise_region"), 0u);
  for (const char* k : {"compare", "where", "activation", "cast"}) EXPECT_EQ(count_op(back, k), count_op(g, k)) << k;
  EXPECT_TRUE(same_numbers(g, [](const Graph& x) { return unfuse_elementwise_regions(mark_elementwise_regions(x)); }));
}

}  // namespace
}  // namespace rlx
