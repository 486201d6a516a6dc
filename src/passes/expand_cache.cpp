#include "passes/expand_cache.h"

#include <limits>

namespace rlx::passes {
namespace {

// The constant i64 row (1, n) = 0, 1, ..., n - 1.
Value iota_row(Graph& g, int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) rows[static_cast<size_t>(j)] = j;
  return g.reshape(g.constant(Tensor::i64({n}, rows)), {Dim(1), Dim(n)});
}

Value as_i64(Graph& g, Value v) { return g.shape(v).dtype == DType::I64 ? v : g.cast(v, DType::I64); }

// (B, S) positions: the same per batch entry, the rows gathered from the flattened (B * S, ...)
// rows at b * S + the entry's chunk row. nullopt unless B and S are static.
std::optional<Value> expand_cache_write_per_batch(Graph& g, const std::vector<Value>& in) {
  const Shape cs = g.shape(in.at(0)), rs = g.shape(in.at(1));
  const Dim b = cs[0], m = cs[1], s = rs[1];
  if (!b.is_static() || !s.is_static() || !m.is_static()) return std::nullopt;
  const Value pos = g.reshape(as_i64(g, in[2]), {b, s, Dim(1)});
  const Value hit = g.cast(g.compare(CompareKind::Eq, pos, iota_row(g, m.value)), DType::F32);  // (B, S, M)
  std::vector<Dim> keep_dims(static_cast<size_t>(cs.rank()), Dim(1));
  keep_dims[0] = b;
  keep_dims[1] = m;
  const Value keep =
      g.reshape(g.compare(CompareKind::Eq, g.reduce(ReduceKind::Max, hit, {1}), g.scalar(0.0)), keep_dims);
  ops::ArgMax last;  // the later of two rows at one position wins, as in the kernels
  last.axis = 1;
  last.select_last = true;
  std::vector<int64_t> base(static_cast<size_t>(b.value));
  for (int64_t i = 0; i < b.value; ++i) base[static_cast<size_t>(i)] = i * s.value;
  const Value src = g.add(g.apply(last, {hit}), g.reshape(g.constant(Tensor::i64({b.value}, base)), {b, Dim(1)}));
  std::vector<Dim> flat = rs.dims;  // (B * S, ...)
  flat.erase(flat.begin());
  flat[0] = Dim(b.value * s.value);
  return g.where(keep, in[0], g.gather(g.reshape(in[1], flat), src, 0));  // (B, M, ...)
}

}  // namespace

std::optional<Value> expand_cache_write(Graph& g, const std::vector<Value>& in) {
  const Shape cs = g.shape(in.at(0));
  const Dim m = cs[1];
  if (!m.is_static()) return std::nullopt;
  const Shape ps = g.shape(in.at(2));
  if (ps.rank() == 2) return expand_cache_write_per_batch(g, in);
  const Dim s = ps[0];
  const Value pos = g.reshape(as_i64(g, in[2]), {s, Dim(1)});
  const Value hit = g.cast(g.compare(CompareKind::Eq, pos, iota_row(g, m.value)), DType::F32);  // (S, M)
  std::vector<Dim> keep_dims(static_cast<size_t>(cs.rank()), Dim(1));
  keep_dims[1] = m;
  const Value keep =
      g.reshape(g.compare(CompareKind::Eq, g.reduce(ReduceKind::Max, hit, {0}), g.scalar(0.0)), keep_dims);
  ops::ArgMax last;  // the later of two rows at one position wins, as in the kernels
  last.axis = 0;
  last.select_last = true;
  const Value src = g.apply(last, {hit});  // (M): the chunk row landing in each cache row
  return g.where(keep, in[0], g.gather(in[1], src, 1));
}

std::optional<Value> expand_positions_attention(Graph& g, const ops::Attention& op, const std::vector<Value>& in) {
  const Shape qs = g.shape(in.at(0));
  const int64_t sa = op.layout == AttnLayout::BSHD ? 1 : 2;
  const Dim skv = g.shape(in.at(1))[sa];
  if (!skv.is_static()) return std::nullopt;
  const Shape ps = g.shape(in.at(3));
  const bool per_batch = ps.rank() == 2;
  std::vector<Dim> col = ps.dims;
  col.emplace_back(1);  // (Sq, 1) or (B, Sq, 1)
  const Value pos = g.reshape(as_i64(g, in[3]), col);
  const Value visible = g.compare(CompareKind::Le, iota_row(g, skv.value), pos);  // (Sq, Skv) or (B, Sq, Skv)
  const Value bias = g.where(visible, g.scalar(0.0, qs.dtype),
                             g.scalar(-std::numeric_limits<double>::infinity(), qs.dtype));
  const Dim sq = ps.dims.back();
  const Value bias4 = g.reshape(bias, {per_batch ? ps.dims[0] : Dim(1), Dim(1), sq, skv});
  ops::Attention a = op;
  a.mask_kind = MaskKind::Bias;
  return g.attention(in[0], in[1], in[2], bias4, a);
}

}  // namespace rlx::passes
