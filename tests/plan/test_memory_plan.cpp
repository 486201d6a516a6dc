// Memory plan: slot reuse, outputs and leaves never clobbered, views, in-place safety,
// alignment, real dtype sizes, and the executor producing the same numbers with and
// without every reuse feature.
#include <cstring>

#include "models/init.h"
#include "models/transformer.h"
#include "plan/absorb_plans.h"
#include "plan/plan_test_util.h"
#include "plan/schedule.h"

namespace rlx {
namespace {

using plan::Location;
using plan::MemoryPlan;
using plan::PlanOptions;
using plantest::overlap_violation;
using plantest::run_planned;
using testing::random_tensor;
using testing::to_doubles;

PlanOptions no_in_place() {
  PlanOptions o;
  o.in_place = false;
  return o;
}

// x -> 8 unary ops in a chain, each f32[1024] (4096 bytes).
Graph unary_chain(int steps) {
  Graph g;
  Value v = g.input("x", Shape::of({1024}));
  const ActKind kinds[] = {ActKind::Tanh, ActKind::Sigmoid, ActKind::Neg, ActKind::Abs};
  for (int i = 0; i < steps; ++i) v = g.act(kinds[i % 4], v);
  g.add_output(v);
  return g;
}

TEST(MemoryPlan, ChainReusesTwoSlotsWithoutInPlaceAndOneWithIt) {
  const Graph g = unary_chain(8);
  const MemoryPlan none = plan::plan_memory(g, plantest::no_reuse());
  EXPECT_EQ(none.arena_bytes, 8 * 4096);
  EXPECT_EQ(none.no_reuse_bytes, 8 * 4096);

  const MemoryPlan two = plan::plan_memory(g, no_in_place());
  EXPECT_EQ(two.slots.size(), 2u);  // ping-pong: a step's input is live while its output is made
  EXPECT_EQ(two.arena_bytes, 2 * 4096);
  EXPECT_EQ(two.peak_bytes, 2 * 4096);
  EXPECT_EQ(two.no_reuse_bytes, 8 * 4096);
  EXPECT_EQ(overlap_violation(g, two), "");

  const MemoryPlan one = plan::plan_memory(g);
  EXPECT_EQ(one.slots.size(), 1u);
  EXPECT_EQ(one.arena_bytes, 4096);
  EXPECT_EQ(one.num_in_place, 7);  // every step but the first (its input is the graph input)
  EXPECT_EQ(overlap_violation(g, one), "");

  const Tensor x = random_tensor(DType::F32, {1024}, 3);
  const auto want = run_planned(g, {{"x", x}}, plantest::no_reuse());
  for (const PlanOptions& o : {no_in_place(), PlanOptions{}}) {
    const auto got = run_planned(g, {{"x", x}}, o);
    EXPECT_EQ(0, std::memcmp(got[0].raw(), want[0].raw(), want[0].nbytes()));
  }
}

TEST(MemoryPlan, PeakCountsAnInPlaceOutputOnce) {
  // a (4 KiB) -> b, c in place -> d = concat(c, c) (8 KiB): at d, c and d are live.
  Graph g;
  Value x = g.input("x", Shape::of({1024}));
  Value a = g.exp(x);
  Value b = g.act(ActKind::Neg, a);
  Value c = g.act(ActKind::Tanh, b);
  g.add_output(g.concat({c, c}, 0));
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(mp.num_in_place, 2);
  EXPECT_EQ(mp.peak_bytes, 4096 + 8192);
  EXPECT_EQ(mp.arena_bytes, 4096 + 8192);
  EXPECT_EQ(mp.no_reuse_bytes, 3 * 4096 + 8192);
}

TEST(MemoryPlan, BestFitPicksTheSmallestFreeSlotThatFits) {
  // a (4 KiB) and b (1 KiB) are freed before d, which needs 1 KiB: it must take b's slot.
  Graph g;
  Value x = g.input("x", Shape::of({1024}));
  Value y = g.input("y", Shape::of({256}));
  Value a = g.exp(x);
  Value b = g.exp(y);
  Value sa = g.sum(a, {0});  // scalars (256-byte slots)
  Value sb = g.sum(b, {0});
  Value c = g.add(sa, sb);
  Value d = g.exp(y);
  g.add_output(c);
  g.add_output(d);
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(mp.at(d).slot, mp.at(b).slot);
  EXPECT_NE(mp.at(d).slot, mp.at(a).slot);
  EXPECT_EQ(overlap_violation(g, mp), "");
}

TEST(MemoryPlan, GraphOutputsAreNeverOverwritten) {
  // o1 is an output read by later elementwise ops of the same size: its slot is never given
  // to another value, and no step writes over it in place.
  Graph g;
  Value x = g.input("x", Shape::of({4, 64}));
  Value o1 = g.exp(x);
  Value t = g.act(ActKind::Tanh, o1);
  Value u = g.add(t, o1);
  Value w = g.mul(u, u);
  Value o2 = g.act(ActKind::Neg, w);
  g.add_output(o1, "o1");
  g.add_output(o2, "o2");
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(overlap_violation(g, mp), "");
  for (const Node& n : g.nodes()) {
    if (n.id <= o1.node) continue;
    const Location& l = mp.at(Value{n.id, 0});
    EXPECT_NE(l.slot, mp.at(o1).slot) << "node " << n.id << " shares the output's slot";
  }
  EXPECT_EQ(mp.in_place_input[u.node], 0);   // over t (dies at u), not over o1
  EXPECT_EQ(mp.in_place_input[w.node], 0);   // u * u: both operands are the same bytes
  EXPECT_EQ(mp.in_place_input[o2.node], 0);  // an output may be written over a dying value

  const Tensor xv = random_tensor(DType::F32, {4, 64}, 5);
  const auto got = run_planned(g, {{"x", xv}}, PlanOptions{});
  const auto xs = to_doubles(xv);
  std::vector<double> e1, e2;
  for (double v : xs) {
    const double a = std::exp(v);
    const double uu = std::tanh(a) + a;
    e1.push_back(a);
    e2.push_back(-(uu * uu));
  }
  EXPECT_TRUE(testing::all_close(got[0], {4, 64}, e1));
  EXPECT_TRUE(testing::all_close(got[1], {4, 64}, e2));
}

TEST(MemoryPlan, AnOutputViewKeepsItsRootAlive) {
  // o is a reshape (view) of e: e's bytes are an output's, so neg(e) must not write over them
  // and no later value may take e's slot.
  Graph g;
  Value x = g.input("x", Shape::of({8, 8}));
  Value e = g.exp(x);
  Value o = g.reshape(e, {64});
  Value z = g.act(ActKind::Neg, e);
  Value z2 = g.act(ActKind::Tanh, z);
  g.add_output(z2, "z");
  g.add_output(o, "o");
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(mp.in_place_input[z.node], -1);
  EXPECT_EQ(mp.in_place_input[z2.node], 0);
  EXPECT_NE(mp.at(z2).slot, mp.at(e).slot);
  EXPECT_EQ(overlap_violation(g, mp), "");
  const Tensor xv = random_tensor(DType::F32, {8, 8}, 4);
  const auto got = run_planned(g, {{"x", xv}}, PlanOptions{});
  std::vector<double> want;
  for (double v : to_doubles(xv)) want.push_back(std::exp(v));
  EXPECT_TRUE(testing::all_close(got[1], {64}, want));
}

TEST(MemoryPlan, LeavesAreNeverWritten) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 8}));
  Value p = g.param("p", Shape::of({2, 8}));
  Value c = g.constant(Tensor::f32({2, 8}, std::vector<float>(16, 2.0f)));
  Value r = g.reshape(x, {16});
  g.add_output(g.act(ActKind::Neg, g.add(g.mul(g.reshape(r, {2, 8}), p), c)));
  const Tensor xv = random_tensor(DType::F32, {2, 8}, 1), pv = random_tensor(DType::F32, {2, 8}, 2);
  const Tensor xc = xv.clone(), pc = pv.clone();
  run_planned(g, {{"x", xv}, {"p", pv}}, PlanOptions{});
  EXPECT_EQ(0, std::memcmp(xv.raw(), xc.raw(), xc.nbytes()));
  EXPECT_EQ(0, std::memcmp(pv.raw(), pc.raw(), pc.nbytes()));
  const auto& cv = std::get<ops::Constant>(g.node(c.node).op).value;
  for (double v : to_doubles(cv)) EXPECT_EQ(v, 2.0);
  const MemoryPlan mp = plan::plan_memory(g);
  int in_place = 0;
  for (const Node& n : g.nodes()) {
    const int32_t k = mp.in_place_input[n.id];
    if (k < 0) continue;
    ++in_place;
    EXPECT_EQ(mp.at(n.inputs[static_cast<size_t>(k)]).kind, Location::Kind::Arena);
  }
  EXPECT_EQ(in_place, 2);  // add over mul, neg over add; mul reads only leaves
}

TEST(MemoryPlan, ViewsAliasTheirInputAndStayCorrect) {
  Graph g;
  Value x = g.input("x", Shape::of({1, 6, 4}));
  Value rx = g.reshape(x, {6, 4});           // view of an input
  Value nx = g.narrow(x, 1, 2, 3);           // leading dims are 1: view at byte 2*4*4
  Value e = g.exp(rx);                       // arena
  Value re = g.reshape(e, {24});             // view of an arena value
  Value se = g.stop_gradient(re);            // view of a view
  Value nn = g.narrow(e, 1, 1, 2);           // not leading: a copy
  g.add_output(g.sum(se, {0}), "s");
  g.add_output(g.act(ActKind::Neg, nx), "n");
  g.add_output(nn, "nn");
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_TRUE(mp.at(rx).is_view);
  EXPECT_EQ(mp.at(rx).kind, Location::Kind::Leaf);
  EXPECT_EQ(mp.at(nx).kind, Location::Kind::Leaf);
  EXPECT_EQ(mp.at(nx).offset, 2 * 4 * 4);
  EXPECT_TRUE(mp.at(se).is_view);
  EXPECT_EQ(mp.at(se).root, e);
  EXPECT_EQ(mp.at(se).offset, mp.at(e).offset);
  EXPECT_FALSE(mp.at(nn).is_view);
  EXPECT_EQ(mp.num_views, 4);
  EXPECT_EQ(overlap_violation(g, mp), "");

  // Pointer check through the step hook: what each consumer reads.
  cpu::Executor ex(g);
  const Tensor xv = random_tensor(DType::F32, {1, 6, 4}, 9);
  std::map<NodeId, std::vector<const void*>> in_ptrs, out_ptrs;
  ex.set_step_hook([&](const plan::Step& st, std::span<const Tensor> in, std::span<const Tensor> out) {
    for (const Tensor& t : in) in_ptrs[st.node].push_back(t.raw());
    for (const Tensor& t : out) out_ptrs[st.node].push_back(t.raw());
  });
  const auto got = ex.run(plantest::bind_leaves(g, {{"x", xv}}), {0, 1, 2});
  EXPECT_EQ(in_ptrs[e.node][0], xv.raw());
  const NodeId neg_node = g.outputs()[1].node;
  EXPECT_EQ(in_ptrs[neg_node][0], static_cast<const uint8_t*>(xv.raw()) + 32);
  const NodeId sum_node = g.outputs()[0].node;
  EXPECT_EQ(in_ptrs[sum_node][0], out_ptrs[e.node][0]);
  EXPECT_EQ(ex.schedule().steps.size(), 4u);  // exp, narrow copy, sum, neg: views and leaves have no step
  for (const plan::Step& st : ex.schedule().steps) {
    EXPECT_FALSE(std::holds_alternative<ops::Reshape>(st.op));
    EXPECT_FALSE(std::holds_alternative<ops::StopGradient>(st.op));
  }
  const auto want = run_planned(g, {{"x", xv}}, plantest::no_reuse());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(0, std::memcmp(got[i].raw(), want[i].raw(), want[i].nbytes()));
}

TEST(MemoryPlan, InPlaceOnlyWhenSafe) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 4}));
  Value row = g.input("row", Shape::of({1, 4}));
  Value a = g.exp(x);
  Value b = g.add(a, x);              // a is read again by c: not in place
  Value c = g.mul(a, b);              // a dies here: in place over a (input 0)
  Value s = g.exp(row);               // [1, 4]
  Value d = g.add(s, c);              // s is broadcast (smaller): in place over c (input 1) only
  Value r = g.exp(d);
  Value e = g.add(r, g.narrow(r, 0, 1, 1));  // reads r's bytes at another offset: never in place
  Value cond = g.compare(CompareKind::Gt, x, g.scalar(0.0));
  Value bcond = g.compare(CompareKind::Gt, row, g.scalar(0.0));
  Value f = g.exp(e);
  Value w1 = g.where(cond, f, x);     // full-shape condition: in place over f
  Value h = g.exp(w1);
  Value w2 = g.where(bcond, h, x);    // broadcast condition: the kernel copies rows, not in place
  g.add_output(w2);
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(mp.in_place_input[b.node], -1);
  EXPECT_EQ(mp.in_place_input[c.node], 0);
  EXPECT_EQ(mp.in_place_input[d.node], 1);
  EXPECT_EQ(mp.in_place_input[e.node], -1);
  EXPECT_EQ(mp.in_place_input[w1.node], 1);
  EXPECT_EQ(mp.in_place_input[w2.node], -1);
  EXPECT_EQ(overlap_violation(g, mp), "");

  const Tensor xv = random_tensor(DType::F32, {3, 4}, 11), rv = random_tensor(DType::F32, {1, 4}, 12);
  const auto want = run_planned(g, {{"x", xv}, {"row", rv}}, plantest::no_reuse());
  const auto got = run_planned(g, {{"x", xv}, {"row", rv}}, PlanOptions{});
  EXPECT_EQ(0, std::memcmp(got[0].raw(), want[0].raw(), want[0].nbytes()));
  // The narrow case by hand: e[i] = r[i] + r[1] for each row i.
  const auto xs = to_doubles(xv), rs = to_doubles(rv);
  std::vector<double> rr(12), ee(12);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      const double aa = std::exp(xs[i * 4 + j]);
      rr[i * 4 + j] = std::exp(std::exp(rs[j]) + aa * (aa + xs[i * 4 + j]));
    }
  for (int i = 0; i < 12; ++i) ee[i] = rr[i] + rr[4 + i % 4];
  std::vector<double> ww(12);
  for (int i = 0; i < 12; ++i) {
    const double w1v = xs[i] > 0 ? std::exp(ee[i]) : xs[i];
    ww[i] = rs[i % 4] > 0 ? std::exp(w1v) : xs[i];
  }
  EXPECT_TRUE(testing::all_close(got[0], {3, 4}, ww, {1e-5, 1e-6}));
}

TEST(MemoryPlan, SlotsAreAlignedAndSizedByDtype) {
  Graph g;
  Value x = g.input("x", Shape::of({3, 5}, DType::F16));
  Value a = g.cast(x, DType::F64);         // 120 bytes
  Value b = g.cast(x, DType::I8);          // 15 bytes
  Value c = g.cast(x, DType::Bool);        // 15 bytes
  Value d = g.add(g.cast(b, DType::F64), a);
  g.add_output(g.where(c, d, a));
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(mp.at(a).bytes, 120);
  EXPECT_EQ(mp.at(b).bytes, 15);
  EXPECT_EQ(mp.at(c).bytes, 15);
  for (const plan::Slot& s : mp.slots) {
    EXPECT_EQ(s.offset % 256, 0);
    EXPECT_GT(s.bytes, 0);
    EXPECT_EQ(s.bytes % 256, 0);
  }
  EXPECT_EQ(mp.arena_bytes % 256, 0);
  EXPECT_EQ(overlap_violation(g, mp), "");
  cpu::Executor ex(g);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ex.arena()) % 256, 0u);

  PlanOptions o64;
  o64.alignment = 64;
  for (const plan::Slot& s : plan::plan_memory(g, o64).slots) EXPECT_EQ(s.offset % 64, 0);
  PlanOptions bad;
  bad.alignment = 96;
  EXPECT_THAT(testing::error_message([&] { plan::plan_memory(g, bad); }), ::testing::HasSubstr("power of two"));
}

TEST(MemoryPlan, SymbolicShapesAreRejected) {
  Graph g;
  Value x = g.input("x", Shape({Dim::symbol("seq"), 4}));
  g.add_output(g.exp(x));
  EXPECT_THAT(testing::error_message([&] { plan::plan_memory(g); }), ::testing::HasSubstr("not static"));
}

TEST(MemoryPlan, UnusedSecondOutputGetsMemoryAndIsFreed) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 16}));
  auto [vals, idx] = g.topk(g.exp(x), 3);
  (void)idx;  // never read: its slot is free for the next value
  g.add_output(g.exp(vals));
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_GE(mp.at(Value{vals.node, 1}).slot, 0);
  EXPECT_EQ(overlap_violation(g, mp), "");
}

// A 2-layer BERT: every reuse feature on vs off gives identical bytes, and the plan is sound.
TEST(MemoryPlan, BertLayersMatchTheNoReusePlanBitForBit) {
  Graph g;
  Value h = g.input("hidden", Shape::of({2, 8, 32}));
  Value m = g.input("mask", Shape::of({2, 8}));
  models::BertLayerConfig cfg;
  cfg.hidden = 32, cfg.num_heads = 4, cfg.ffn = 64;
  for (int l = 0; l < 2; ++l) h = models::build_bert_layer(g, h, m, cfg, "l" + std::to_string(l));
  g.add_output(h);
  std::map<std::string, Tensor> vals;
  for (auto& [name, t] : models::random_weights(g, 7)) vals[name] = t;
  vals["hidden"] = random_tensor(DType::F32, {2, 8, 32}, 1);
  vals["mask"] = Tensor::f32({2, 8}, std::vector<float>{1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1});
  const MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(overlap_violation(g, mp), "");
  EXPECT_GT(mp.num_views, 0);
  EXPECT_GT(mp.num_in_place, 0);
  EXPECT_LE(mp.peak_bytes, mp.arena_bytes);
  EXPECT_LT(mp.arena_bytes, mp.no_reuse_bytes / 2);
  const auto want = run_planned(g, vals, plantest::no_reuse());
  const auto got = run_planned(g, vals, PlanOptions{});
  EXPECT_EQ(0, std::memcmp(got[0].raw(), want[0].raw(), want[0].nbytes()));
}

}  // namespace
}  // namespace rlx

namespace rlx {
namespace {

// A RoPE writes over its dying x (the q / k projection of a decoder), not over the tables or a
// value read later; the results equal the unplanned run's; and a decoder-shaped q / k pair with
// a projection between them then runs as one RoPE pair (the k RoPE no longer takes the q
// projection's dead bytes).
TEST(MemoryPlan, RopeWritesOverItsDyingInput) {
  Graph g;
  const Value x = g.input("x", Shape::of({1, 3, 32}));
  const Value wq = g.input("wq", Shape::of({32, 32})), wk = g.input("wk", Shape::of({32, 16}));
  const Value c = g.input("c", Shape::of({3, 4})), s = g.input("s", Shape::of({3, 4}));
  const Value q = g.reshape(g.matmul(x, wq), {1, 3, 4, 8});
  const Value k = g.reshape(g.matmul(x, wk), {1, 3, 2, 8});
  const Value qr = g.rope(q, c, s, 8, 8, RopeStyle::GptJ);
  const Value kr = g.rope(k, c, s, 8, 8, RopeStyle::GptJ);
  g.add_output(g.add(g.sum(qr, {2, 3}), g.sum(kr, {2, 3})), "y");
  const plan::MemoryPlan mp = plan::plan_memory(g);
  EXPECT_EQ(mp.in_place_input[qr.node], 0);
  EXPECT_EQ(mp.in_place_input[kr.node], 0);
  EXPECT_EQ(overlap_violation(g, mp), "");
  const std::map<std::string, Tensor> in = {{"x", random_tensor(DType::F32, {1, 3, 32}, 1)}, {"wq", random_tensor(DType::F32, {32, 32}, 2)},
                           {"wk", random_tensor(DType::F32, {32, 16}, 3)}, {"c", random_tensor(DType::F32, {3, 4}, 4)},
                           {"s", random_tensor(DType::F32, {3, 4}, 5)}};
  plan::PlanOptions no_in_place;
  no_in_place.in_place = false;
  EXPECT_EQ(to_doubles(run_planned(g, in, plan::PlanOptions{})[0]), to_doubles(run_planned(g, in, no_in_place)[0]));
  EXPECT_EQ(plan::plan_rope_pairs(plan::build_schedule(g)).size(), 1u);
}

}  // namespace
}  // namespace rlx
