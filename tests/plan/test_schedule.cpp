// Schedule: one Step per executed node, and each kind's geometry against hand-computed values.
#include <cmath>

#include "plan/plan_test_util.h"

namespace rlx {
namespace {

using plan::Step;

// The geometry of the single non-leaf node that produces `v`.
template <class G>
G geom_of(const Graph& g, Value v) {
  return std::get<G>(plan::node_geometry(g, g.node(v.node)));
}

TEST(ScheduleGeometry, MatMulBroadcastBatch) {
  Graph g;
  Value a = g.input("a", Shape::of({2, 1, 3, 4}));
  Value b = g.input("b", Shape::of({5, 4, 6}));
  const auto m = geom_of<plan::MatMulGeom>(g, g.matmul(a, b));
  EXPECT_EQ(m.batch, 10);
  EXPECT_EQ(m.m, 3);
  EXPECT_EQ(m.k, 4);
  EXPECT_EQ(m.n, 6);
  EXPECT_EQ(m.batch_dims, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(m.a_batch_strides, (std::vector<int64_t>{12, 0}));  // a's dim of 1 broadcasts
  EXPECT_EQ(m.b_batch_strides, (std::vector<int64_t>{0, 24}));   // b has no leading batch dim
  EXPECT_EQ(m.a_stride, -1);  // neither operand is a single-stride batch
  EXPECT_EQ(m.b_stride, -1);
  EXPECT_EQ(m.lda, 4);
  EXPECT_EQ(m.ldb, 6);
  EXPECT_EQ(m.ldc, 6);
  EXPECT_FALSE(m.trans_a || m.trans_b);

  Graph h;
  Value x = h.input("x", Shape::of({4, 3, 5}));
  Value w = h.input("w", Shape::of({5, 2}));
  const auto s = geom_of<plan::MatMulGeom>(h, h.matmul(x, w));
  // A shared weight against a dense x: the batch folds into the rows of one product, [12, 5] @
  // [5, 2] (the weight is read once, not once per batch item).
  EXPECT_EQ(s.batch, 1);
  EXPECT_EQ(s.m, 12);
  EXPECT_TRUE(s.batch_dims.empty());
  // Not when x is broadcast over the batch (its rows are not one dense block).
  Graph u;
  const auto nb = geom_of<plan::MatMulGeom>(
      u, u.matmul(u.input("x", Shape::of({1, 3, 5})), u.input("w", Shape::of({4, 5, 2}))));
  EXPECT_EQ(nb.batch, 4);
  EXPECT_EQ(nb.m, 3);
  EXPECT_EQ(nb.a_stride, 0);

  Graph v;  // 1-d operands are promoted: [k] @ [k, n] is m = 1
  const auto mv = geom_of<plan::MatMulGeom>(v, v.matmul(v.input("p", Shape::of({7})), v.input("q", Shape::of({7, 3}))));
  EXPECT_EQ(mv.m, 1);
  EXPECT_EQ(mv.batch, 1);
  EXPECT_EQ(mv.n, 3);
}

ops::Attention attn(int64_t hq, int64_t hkv, int64_t d, AttnLayout layout) {
  ops::Attention a;
  a.num_heads = hq, a.num_kv_heads = hkv, a.head_dim = d, a.layout = layout;
  return a;
}

TEST(ScheduleGeometry, AttentionBshdGqa) {
  Graph g;
  Value q = g.input("q", Shape::of({2, 5, 8, 16}));
  Value k = g.input("k", Shape::of({2, 7, 2, 16}));
  Value v = g.input("v", Shape::of({2, 7, 2, 16}));
  const auto a = geom_of<plan::AttentionGeom>(g, g.attention(q, k, v, std::nullopt, attn(8, 2, 16, AttnLayout::BSHD)));
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.q_len, 5);
  EXPECT_EQ(a.kv_len, 7);
  EXPECT_EQ(a.group, 4);
  EXPECT_EQ(a.q.batch, 5 * 8 * 16);
  EXPECT_EQ(a.q.seq, 8 * 16);
  EXPECT_EQ(a.q.head, 16);
  EXPECT_EQ(a.k.batch, 7 * 2 * 16);
  EXPECT_EQ(a.k.seq, 2 * 16);
  EXPECT_EQ(a.k.head, 16);
  EXPECT_EQ(a.out.batch, a.q.batch);
  EXPECT_DOUBLE_EQ(a.scale, 0.25);
}

TEST(ScheduleGeometry, AttentionBhsdWithBiasMask) {
  Graph g;
  Value q = g.input("q", Shape::of({2, 4, 5, 8}));
  Value k = g.input("k", Shape::of({2, 4, 6, 8}));
  Value bias = g.input("bias", Shape::of({4, 1, 6}));  // (h, 1, j), broadcast over b and i
  ops::Attention at = attn(4, 4, 8, AttnLayout::BHSD);
  at.mask_kind = MaskKind::Bias;
  at.score_scale = 0.5;
  const auto a = geom_of<plan::AttentionGeom>(g, g.attention(q, k, k, bias, at));
  EXPECT_EQ(a.q_len, 5);
  EXPECT_EQ(a.kv_len, 6);
  EXPECT_EQ(a.group, 1);
  EXPECT_EQ(a.q.batch, 4 * 5 * 8);
  EXPECT_EQ(a.q.head, 5 * 8);
  EXPECT_EQ(a.q.seq, 8);
  EXPECT_EQ(a.k.head, 6 * 8);
  EXPECT_DOUBLE_EQ(a.scale, 0.5);
  EXPECT_EQ(a.bias_strides[0], 0);
  EXPECT_EQ(a.bias_strides[1], 6);
  EXPECT_EQ(a.bias_strides[2], 0);
  EXPECT_EQ(a.bias_strides[3], 1);
}

TEST(ScheduleGeometry, ReduceOuterInner) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 4}));
  const auto r = geom_of<plan::ReduceGeom>(g, g.sum(x, {1}));
  EXPECT_TRUE(r.simple);
  EXPECT_EQ(r.outer, 2);
  EXPECT_EQ(r.reduce, 3);
  EXPECT_EQ(r.inner, 4);
  EXPECT_EQ(r.count, 3);

  const auto t = geom_of<plan::ReduceGeom>(g, g.reduce(ReduceKind::Max, x, {0, 2}));
  EXPECT_FALSE(t.simple);
  EXPECT_EQ(t.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(t.reduced, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(t.count, 8);

  Graph h;  // size-1 dims drop out and neighbours merge: [2,3,1,4] over {1,2,3} -> [2 | 12]
  Value y = h.input("y", Shape::of({2, 3, 1, 4}));
  const auto u = geom_of<plan::ReduceGeom>(h, h.mean(y, {1, 2, 3}, true));
  EXPECT_TRUE(u.simple);
  EXPECT_EQ(u.outer, 2);
  EXPECT_EQ(u.reduce, 12);
  EXPECT_EQ(u.inner, 1);
  const auto all = geom_of<plan::ReduceGeom>(h, h.sum(y, {}));
  EXPECT_EQ(all.outer, 1);
  EXPECT_EQ(all.reduce, 24);

  const auto sm = geom_of<plan::AxisGeom>(g, g.softmax(x, 1));
  EXPECT_EQ(sm.outer, 2);
  EXPECT_EQ(sm.axis, 3);
  EXPECT_EQ(sm.inner, 4);
  Value gamma = g.input("gamma", Shape::of({3, 4}));
  const auto ln = geom_of<plan::AxisGeom>(g, g.layer_norm(x, gamma, std::nullopt, 1e-5, 1));
  EXPECT_EQ(ln.outer, 2);
  EXPECT_EQ(ln.axis, 12);
  EXPECT_EQ(ln.inner, 1);
}

TEST(ScheduleGeometry, TransposeExpandReverseNarrowStrides) {
  Graph g;
  Value x = g.input("x", Shape::of({2, 3, 4}));
  // out [4, 2, 3] reads x strides [1, 12, 4]; dims 2 and 3 merge (12 == 4 * 3) -> [4, 6] / [1, 4].
  const auto t = geom_of<plan::CopyGeom>(g, g.transpose(x, {2, 0, 1}));
  EXPECT_EQ(t.out_dims, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(t.in_strides, (std::vector<int64_t>{1, 4}));
  const auto t2 = geom_of<plan::CopyGeom>(g, g.transpose(x, {1, 0, 2}));
  EXPECT_EQ(t2.out_dims, (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(t2.in_strides, (std::vector<int64_t>{4, 12, 1}));
  const auto id = geom_of<plan::CopyGeom>(g, g.transpose(x, {0, 1, 2}));
  EXPECT_EQ(id.out_dims, (std::vector<int64_t>{24}));
  EXPECT_EQ(id.in_strides, (std::vector<int64_t>{1}));

  Value y = g.input("y", Shape::of({3, 1}));
  const auto e = geom_of<plan::CopyGeom>(g, g.expand(y, {2, 3, 4}));
  EXPECT_EQ(e.out_dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(e.in_strides, (std::vector<int64_t>{0, 1, 0}));

  const auto r = geom_of<plan::CopyGeom>(g, g.reverse(x, {1}));
  EXPECT_EQ(r.out_dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(r.in_strides, (std::vector<int64_t>{12, -4, 1}));
  EXPECT_EQ(r.in_offset, 8);

  const auto n = geom_of<plan::AxisGeom>(g, g.narrow(x, -2, 1, 2));
  EXPECT_EQ(n.outer, 2);
  EXPECT_EQ(n.axis, 3);
  EXPECT_EQ(n.inner, 4);
  EXPECT_EQ(n.start, 1);
  EXPECT_EQ(n.out_axis, 2);

  Value z = g.input("z", Shape::of({2, 5, 4}));
  const auto c = geom_of<plan::ConcatGeom>(g, g.concat({x, z}, 1));
  EXPECT_EQ(c.outer, 2);
  EXPECT_EQ(c.inner, 4);
  EXPECT_EQ(c.out_axis, 8);
  EXPECT_EQ(c.in_axis, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(c.col, (std::vector<int64_t>{0, 12}));
}

TEST(ScheduleGeometry, ElementwiseBroadcastStrides) {
  Graph g;
  Value a = g.input("a", Shape::of({3, 1}));
  Value b = g.input("b", Shape::of({4}));
  const auto e = geom_of<plan::ElementwiseGeom>(g, g.add(a, b));
  EXPECT_EQ(e.out_dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(e.in_strides[0], (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(e.in_strides[1], (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(e.contiguous);
  EXPECT_EQ(e.numel, 12);
  Value c = g.input("c", Shape::of({3, 4}));
  const auto f = geom_of<plan::ElementwiseGeom>(g, g.mul(c, c));
  EXPECT_TRUE(f.contiguous);
  EXPECT_EQ(f.out_dims, (std::vector<int64_t>{12}));
}

TEST(ScheduleGeometry, FusedAndChannelOps) {
  Graph g;
  Value x = g.input("x", Shape::of({6, 16}));
  Value w = g.input("w", Shape::of({16, 8}));
  Value b = g.input("b", Shape::of({8}));
  ops::FusedMatMulBiasAct f;
  f.activation = ActKind::Gelu;
  const auto m = geom_of<plan::MatMulGeom>(g, g.apply(f, {x, w, b}));
  EXPECT_EQ(m.m, 6);
  EXPECT_EQ(m.k, 16);
  EXPECT_EQ(m.n, 8);
  EXPECT_EQ(m.bias_len, 8);
  EXPECT_EQ(m.activation, ActKind::Gelu);

  Value img = g.input("img", Shape::of({2, 6, 3, 5}));
  Value c6 = g.input("c6", Shape::of({6}));
  ops::GroupNorm gn;
  gn.groups = 3;
  const auto ch = geom_of<plan::ChannelGeom>(g, g.apply(gn, {img, c6, c6}));
  EXPECT_EQ(ch.n, 2);
  EXPECT_EQ(ch.channels, 6);
  EXPECT_EQ(ch.spatial, 15);
  EXPECT_EQ(ch.groups, 3);

  Value q = g.input("q", Shape::of({2, 5, 4, 8}));
  Value cs = g.input("cos", Shape::of({5, 3}));
  const auto r = geom_of<plan::RopeGeom>(g, g.rope(q, cs, cs, 8, 6));
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.seq, 5);
  EXPECT_EQ(r.heads, 4);
  EXPECT_EQ(r.n_rot, 6);
  EXPECT_FALSE(r.per_batch);

  Value h = g.input("h", Shape::of({2, 5, 32}));
  ops::FusedAttentionBlock ab;
  ab.num_heads = 4;
  ab.head_dim = 8;
  Value qkv_w = g.input("qkv_w", Shape::of({32, 96}));
  Value out_w = g.input("out_w", Shape::of({32, 32}));
  Value mask = g.input("mask", Shape::of({2, 5}));
  Value qkv_b = g.input("qkv_b", Shape::of({96}));
  Value out_b = g.input("out_b", Shape::of({32}));
  const auto fb = geom_of<plan::FusedBlockGeom>(g, g.apply(ab, {h, qkv_w, out_w, mask, qkv_b, out_b}));
  EXPECT_EQ(fb.qkv.m, 10);
  EXPECT_EQ(fb.qkv.n, 96);
  EXPECT_EQ(fb.out.k, 32);
  EXPECT_EQ(fb.attn.q.seq, 96);       // packed rows of 3E
  EXPECT_EQ(fb.attn.q.batch, 5 * 96);
  EXPECT_EQ(fb.attn.out.seq, 32);
  EXPECT_EQ(fb.attn.mask_batch_stride, 5);
}

TEST(ScheduleGeometry, ScatterAddAxisAndStrides) {
  Graph g;
  Value data = g.input("data", Shape::of({4, 5, 6}));
  Value idx = g.input("idx", Shape::of({4, 2, 3}, DType::I64));
  Value upd = g.input("upd", Shape::of({4, 2, 3}));
  const auto sg = geom_of<plan::ScatterAddGeom>(g, g.scatter_add(data, idx, upd, -2));
  EXPECT_EQ(sg.axis, 1);  // -2 of rank 3
  EXPECT_EQ(sg.axis_size, 5);
  EXPECT_EQ(sg.count, 24);
  EXPECT_EQ(sg.idx_dims, (std::vector<int64_t>{4, 2, 3}));
  EXPECT_EQ(sg.data_strides, (std::vector<int64_t>{30, 6, 1}));  // data's strides, not the indices'

  Graph e;  // empty indices: nothing is scattered
  const auto se = geom_of<plan::ScatterAddGeom>(
      e, e.scatter_add(e.input("d", Shape::of({3})), e.input("i", Shape::of({0}, DType::I32)),
                       e.input("u", Shape::of({0})), 0));
  EXPECT_EQ(se.count, 0);
  EXPECT_EQ(se.axis_size, 3);
}

TEST(ScheduleGeometry, PadSourceMapsPerAxis) {
  Graph g;
  ops::Pad p;
  p.pads = {1, -1, 0, 2};  // axis 0: one before, none after; axis 1: crop one before, two after
  p.value = 7.0;
  Value x = g.input("x", Shape::of({2, 3}));
  const auto pg = geom_of<plan::PadGeom>(g, g.apply(p, {x}));
  EXPECT_EQ(pg.out_dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(pg.in_strides, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(pg.source_offset, (std::vector<int64_t>{0, 3}));
  // Axis 0: the constant, then rows 0 and 1. Axis 1: columns 1 and 2 (0 cropped), then two constants.
  EXPECT_EQ(pg.source, (std::vector<int64_t>{-1, 0, 1, 1, 2, -1, -1}));

  p.pads = {0, 2, 0, 2};
  p.mode = PadMode::Reflect;
  const auto rg = geom_of<plan::PadGeom>(g, g.apply(p, {g.input("r", Shape::of({1, 4}))}));
  EXPECT_EQ(rg.source, (std::vector<int64_t>{0, 2, 1, 0, 1, 2, 3, 2, 1}));  // axis 0 (1), axis 1 (8)
  EXPECT_EQ(rg.source_offset, (std::vector<int64_t>{0, 1}));
  p.mode = PadMode::Edge;
  const auto eg = geom_of<plan::PadGeom>(g, g.apply(p, {g.input("e", Shape::of({1, 4}))}));
  EXPECT_EQ(eg.source, (std::vector<int64_t>{0, 0, 0, 0, 1, 2, 3, 3, 3}));

  ops::Pad none;  // rank 0: nothing to map
  const auto zg = geom_of<plan::PadGeom>(g, g.apply(none, {g.input("s", Shape::of({}))}));
  EXPECT_TRUE(zg.out_dims.empty() && zg.in_strides.empty() && zg.source.empty() && zg.source_offset.empty());
}

TEST(ScheduleGeometry, SampleRowsAndVocab) {
  Graph g;
  ops::Sample smp;
  const auto two = geom_of<plan::SampleGeom>(g, g.apply(smp, {g.input("l", Shape::of({3, 11}))}));
  EXPECT_EQ(two.rows, 3);
  EXPECT_EQ(two.vocab, 11);
  const auto one = geom_of<plan::SampleGeom>(g, g.apply(smp, {g.input("v", Shape::of({11}))}));
  EXPECT_EQ(one.rows, 1);
  EXPECT_EQ(one.vocab, 11);
}

TEST(ScheduleGeometry, RecurrentSizesInEitherLayout) {
  for (bool bf : {false, true}) {
    Graph g;
    ops::Recurrent r;
    r.cell = RnnCell::Gru, r.direction = RnnDirection::Bidirectional, r.hidden_size = 5, r.batch_first = bf;
    const Value x = g.input("x", bf ? Shape::of({3, 4, 7}) : Shape::of({4, 3, 7}));  // S = 4, B = 3
    const Value y = g.apply_multi(r, {x, g.input("w", Shape::of({2, 15, 7})), g.input("r", Shape::of({2, 15, 5}))})[0];
    const auto rg = geom_of<plan::RecurrentGeom>(g, y);
    EXPECT_EQ(rg.seq, 4);
    EXPECT_EQ(rg.batch, 3);
    EXPECT_EQ(rg.input, 7);
    EXPECT_EQ(rg.hidden, 5);
    EXPECT_EQ(rg.gates, 3);
    EXPECT_EQ(rg.dirs, 2);
  }
}

TEST(Schedule, OneStepPerExecutedNodeWithPlanLocations) {
  Graph g;
  Value x = g.input("x", Shape::of({4, 8}));
  Value w = g.param("w", Shape::of({8, 8}));
  Value y = g.matmul(g.reshape(x, {4, 8}), w);
  Value z = g.softmax(g.act(ActKind::Relu, y), -1);
  g.add_output(z);
  const plan::Schedule s = plan::build_schedule(g);
  ASSERT_EQ(s.steps.size(), 3u);  // matmul, relu, softmax
  const Step& mm = s.steps[0];
  EXPECT_TRUE(std::holds_alternative<ops::MatMul>(mm.op));
  EXPECT_EQ(mm.in[0].loc.kind, plan::Location::Kind::Leaf);
  EXPECT_EQ(mm.in[0].loc.leaf, x.node);
  EXPECT_TRUE(mm.in[0].loc.is_view);
  EXPECT_EQ(mm.in[1].loc.leaf, w.node);
  EXPECT_EQ(mm.out[0].dims, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(mm.out[0].loc.kind, plan::Location::Kind::Arena);
  EXPECT_EQ(s.steps[1].in_place_input, 0);
  EXPECT_EQ(s.steps[1].out[0].loc.offset, mm.out[0].loc.offset);
  EXPECT_EQ(s.outputs.size(), 1u);
  EXPECT_EQ(s.outputs[0].value, z);
  EXPECT_TRUE(std::holds_alternative<plan::AxisGeom>(s.steps[2].geom));
}

}  // namespace
}  // namespace rlx
