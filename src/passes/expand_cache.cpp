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

}  // namespace

std::optional<Value> expand_cache_write(Graph& g, const std::vector<Value>& in) {
  const Shape cs = g.shape(in.at(0));
  const Dim m = cs[1];
  if (!m.is_static()) return std::nullopt;
  const Dim s = g.shape(in.at(2))[0];
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
