#include "models/sampling_head.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

namespace rlx::models {

namespace {
constexpr int64_t kRowsWithoutChunks = 64;
}  // namespace

std::pair<Value, Value> top_k_rows(Graph& g, Value x, int64_t rows, int64_t n, int64_t k, int64_t split_above,
                                   int64_t chunk) {
  chunk = std::max(chunk, 2 * k);
  std::optional<Value> ids;  // (rows, n): the index each entry of x stands for (none: its position)
  const Dim r(rows);
  // Row offsets of a flattened (rows, width) tensor, to gather per row from its flat form.
  auto row_offsets = [&](int64_t width) {
    std::vector<int64_t> off(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) off[static_cast<size_t>(i)] = i * width;
    return g.constant(Tensor::i64({rows, 1}, off));
  };
  auto take = [&](Value from, int64_t width, Value at /* (rows, m) positions */) {
    return g.gather(g.reshape(from, {Dim(rows * width)}), g.add(at, row_offsets(width)), 0);
  };
  // Rows enough to fill a GPU's cores already (64 or more) are selected whole: chunking them
  // would only multiply the selections' fixed cost.
  while (rows < kRowsWithoutChunks && n > split_above && n >= 4 * k) {
    const int64_t chunks = (n + chunk - 1) / chunk, padded = chunks * chunk;
    if (padded > n) {  // -inf after the row: a real entry ties it only at a lower index, so it wins
      x = g.concat({x, g.expand(g.scalar(-std::numeric_limits<double>::infinity()), {r, Dim(padded - n)})}, 1);
      if (ids) ids = g.concat({*ids, g.expand(g.scalar(0, DType::I64), {r, Dim(padded - n)})}, 1);
    }
    auto [v, local] = g.topk(g.reshape(x, {Dim(rows * chunks), Dim(chunk)}), k, 1);
    std::vector<int64_t> starts(static_cast<size_t>(chunks));
    for (int64_t c = 0; c < chunks; ++c) starts[static_cast<size_t>(c)] = c * chunk;
    Value pos = g.reshape(g.add(g.reshape(local, {r, Dim(chunks), Dim(k)}), g.constant(Tensor::i64({1, chunks, 1}, starts))),
                          {r, Dim(chunks * k)});  // positions in the padded row
    ids = ids ? take(*ids, padded, pos) : pos;
    x = g.reshape(v, {r, Dim(chunks * k)});
    n = chunks * k;
  }
  auto [v, local] = g.topk(x, k, 1);
  return {v, ids ? take(*ids, n, local) : local};
}

void add_sampling_head(Graph& g, Value logits, int64_t vocab, int64_t batch, int64_t k, int64_t history) {
  const Dim b(batch), v(vocab), one(1);
  const Value ids = g.input("sample_history", Shape({b, Dim(history)}, DType::I64));
  const Value penalty = g.reshape(g.input("sample_penalty", Shape({b}, DType::F32)), {b, one});
  const Value inv_temp = g.reshape(g.input("sample_inv_temperature", Shape({b}, DType::F32)), {b, one});
  const Value row = g.reshape(g.narrow(logits, 1, 0, 1), {b, v});  // the first logits row of each sequence
  // Which ids the history lists: counts scattered into a zero row per sequence.
  const Value ones = g.expand(g.scalar(1.0), {b, Dim(history)});
  const Value seen = g.scatter_add(g.expand(g.scalar(0.0), {b, v}), ids, ones, 1);
  const Value zero = g.scalar(0.0);
  const Value penalized = g.where(g.compare(CompareKind::Gt, row, zero), g.div(row, penalty), g.mul(row, penalty));
  const Value l = g.where(g.compare(CompareKind::Gt, seen, zero), penalized, row);
  auto [top, top_ids] = top_k_rows(g, l, batch, vocab, std::min(k, vocab));
  const Value mx = g.narrow(top, 1, 0, 1);
  g.add_output(top, "sample_logits");
  g.add_output(top_ids, "sample_ids");
  g.add_output(g.reduce(ReduceKind::Sum, g.exp(g.mul(g.sub(l, mx), inv_temp)), {1}), "sample_mass");
}

}  // namespace rlx::models
